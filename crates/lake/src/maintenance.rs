//! Maintenance: expire snapshots no ref, retention rule or watermark needs, expire catalog
//! versions, and remove files no kept catalog version reaches — without ever deleting live data.
//!
//! **Reachability** is one set for the whole catalog (`Catalog::reachable`, shared with
//! [`Catalog::verify`]): every file any table of any kept catalog version names — its metadata
//! file and the metadata log's, statistics and partition statistics files, manifest lists,
//! manifests (data and delete), data and delete files. Files are compared as object_store
//! objects (store root + [`object_store::path::Path`], resolved the way reads resolve them),
//! never as location strings: metadata spells a folder `My%20Lake`, a listing `My Lake`.
//!
//! **What is swept**: only the locations of tables in the kept versions that lie under the
//! warehouse root, never the catalog's own folder nor the season's raw files (`landing/`,
//! `truth/` under the warehouse). A table registered from elsewhere is read, never swept. If
//! anything a kept version names cannot be read, nothing is deleted.
//!
//! **When**: the grace period runs from the moment a file stops being reachable, not from its
//! write time. Catalog versions expire by count, so an old file can become unreachable the
//! moment a version is dropped while a reader that loaded that version still reads it. A
//! mark-and-sweep ledger (`<catalog>/maintenance/unreachable.json`: object -> first seen
//! unreachable, ms) records each unreachable file; it is deleted once it has been seen
//! unreachable for `grace` *and* was written at least `grace` ago (a writer in flight has not
//! committed yet). A file that becomes reachable again leaves the ledger. `grace` 0 deletes at
//! once (the tide's tidy, the only writer of its lake, relies on it). This was chosen over
//! expiring versions by age because it keeps `expire_versions` a plain count (what `maintain
//! --keep-versions` promises) and protects every way a file can fall out of reach (snapshot
//! expiry, a dropped table, a version expired by another process), not only version expiry; a
//! lost or unreadable ledger only restarts the clocks, so files wait longer, never less.
//!
//! **Writers at work**: whatever the grace, a file written since the earliest work marker
//! whose writer may still be running (see the `work` module: held by this process, a live
//! process on this machine, or within [`crate::WORK_LEASE_MS`] of its writing when that cannot
//! be told) is kept: it may be that writer's, not yet committed. And the sweep lists the
//! table folders before it reads the work markers and the catalog log a second time, so a
//! file that a writer wrote and committed while the sweep was reading is reachable, and a file
//! written after the listing is not seen at all. With a zero grace, what is left to chance is
//! a writer that marks no work, writes a file before the listing and commits after the
//! second read: its commit then fails on the missing file (commits check that every file
//! they add exists), unless the sweep's delete falls between that check and the commit. Mark
//! the work, or give a grace.
//!
//! **Watermarks**: a consumer records how far it read a source table in its snapshot summary,
//! `sugarshack.watermark.<namespace>.<table>` = the source's snapshot id ([`watermark_key`]).
//! Expiring a table keeps every snapshot a ref head of any table names that way, and every
//! snapshot after it on the branch, until the consumer records a later one.
//!
//! A crash after data files are written but before the catalog commit leaves only orphans: no
//! catalog version names them, so no reader sees them, and [`Catalog::remove_orphans`] deletes
//! them once the grace period has passed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use iceberg::spec::{
    DataContentType, MAIN_BRANCH, Manifest, ManifestList, SnapshotRetention, TableMetadata,
};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::catalog::{Catalog, CatalogVersion, ChangeKind, TableChange};
use crate::error::{LakeError, Result};
use crate::storage::{self, Stores};
use crate::table::Table;
use crate::types::{TableName, ref_map};
use crate::work::WorkMark;

/// Snapshot summary properties that record a watermark: a snapshot whose summary holds
/// `sugarshack.watermark.<namespace>.<table>` = a snapshot id of that source table says "this
/// consumed the source through that snapshot" (see [`watermark_key`]).
pub const WATERMARK_PREFIX: &str = "sugarshack.watermark.";

/// The snapshot summary key under which a consumer records how far it read `source`: the value
/// is the snapshot id of `source` it consumed through. Expiry of `source` keeps that snapshot
/// and every one after it on its branch while any ref head of any table in the catalog names
/// it, so the consumer's next incremental read can walk on from there.
pub fn watermark_key(source: &TableName) -> String {
    format!("{WATERMARK_PREFIX}{}.{}", source.namespace, source.table)
}

/// Which snapshots expiry keeps, where neither a ref's own retention nor the table's
/// `history.expire.*` properties say (those win, as in Iceberg's `ExpireSnapshots`).
#[derive(Clone, Debug, Default)]
pub struct ExpireOptions {
    /// Snapshots newer than this (ms since the epoch) are kept (the default for
    /// `history.expire.max-snapshot-age-ms`).
    pub older_than_ms: i64,
    /// On every branch, the newest this many snapshots are kept whatever their age (the
    /// default for `history.expire.min-snapshots-to-keep`; at least 1).
    pub retain_last: usize,
    /// These snapshots, and every snapshot after them on a branch, are kept (watermarks
    /// downstream readers still need for incremental reads). [`Catalog::expire_snapshots`] adds
    /// every watermark the catalog's tables record on the table ([`watermark_key`]).
    pub protect: Vec<i64>,
}

/// `history.expire.*`: the table's defaults for every ref.
const PROP_MIN_SNAPSHOTS: &str = "history.expire.min-snapshots-to-keep";
const PROP_MAX_SNAPSHOT_AGE: &str = "history.expire.max-snapshot-age-ms";
const PROP_MAX_REF_AGE: &str = "history.expire.max-ref-age-ms";

impl Table {
    /// A `history.expire.*` table property, if set.
    fn expire_property<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        match self.metadata().properties().get(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| LakeError::BadMetadata {
                    table: self.name().to_string(),
                    location: self.metadata_location().to_string(),
                    detail: format!("table property {key} = {v:?} is not a number"),
                }),
        }
    }

    /// [`Table::stage_expire_at`] as of the wall clock.
    pub fn stage_expire(&self, opts: &ExpireOptions) -> Result<Option<(TableChange, Vec<i64>)>> {
        self.stage_expire_at(opts, chrono::Utc::now().timestamp_millis())
    }

    /// Stage the removal of snapshots (and of refs past their age) as Iceberg's
    /// `ExpireSnapshots` decides it, at `now_ms`:
    ///
    /// - a tag or a branch other than `main` whose head is older than its `max-ref-age-ms`
    ///   (default: the table's `history.expire.max-ref-age-ms`, else never) is removed;
    /// - each kept branch keeps its newest `min-snapshots-to-keep` snapshots (default: the
    ///   table's `history.expire.min-snapshots-to-keep`, else `opts.retain_last`) and every
    ///   ancestor younger than its `max-snapshot-age-ms` (default: the table's
    ///   `history.expire.max-snapshot-age-ms`, else `opts.older_than_ms` as the cutoff);
    /// - every kept ref's head is kept; a snapshot no kept ref reaches is kept while it is
    ///   younger than the default cutoff;
    /// - every snapshot in `opts.protect` is kept, with every snapshot after it on a branch.
    ///
    /// This reads no other table: a caller that stages it directly passes the watermarks to
    /// keep in `opts.protect` ([`Catalog::watermarks`]); [`Catalog::expire_snapshots`] does.
    /// Returns `None` when nothing would change.
    pub fn stage_expire_at(
        &self,
        opts: &ExpireOptions,
        now_ms: i64,
    ) -> Result<Option<(TableChange, Vec<i64>)>> {
        let md = self.metadata();
        let age_cutoff = |age: i64| now_ms.saturating_sub(age.max(0));
        let default_cutoff = match self.expire_property::<i64>(PROP_MAX_SNAPSHOT_AGE)? {
            Some(age) => age_cutoff(age),
            None => opts.older_than_ms,
        };
        let default_min = match self.expire_property::<usize>(PROP_MIN_SNAPSHOTS)? {
            Some(n) => n,
            None => opts.retain_last,
        }
        .max(1);
        let default_max_ref_age = self.expire_property::<i64>(PROP_MAX_REF_AGE)?;
        let retention = self.ref_entries().retention();
        let protect: HashSet<i64> = opts.protect.iter().copied().collect();

        // 1. Refs past their age go (never main).
        let mut refs = self.ref_entries().clone();
        let mut removed_refs = Vec::new();
        for (name, &(is_branch, head)) in self.ref_entries() {
            if name == MAIN_BRANCH {
                continue;
            }
            let own = match retention.get(name) {
                Some(SnapshotRetention::Branch { max_ref_age_ms, .. })
                | Some(SnapshotRetention::Tag { max_ref_age_ms }) => *max_ref_age_ms,
                None => None,
            };
            let Some(max_age) = own.or(default_max_ref_age) else {
                continue;
            };
            let head_ts = md.snapshot_by_id(head).map(|s| s.timestamp_ms());
            if head_ts.is_some_and(|ts| now_ms.saturating_sub(ts) > max_age) {
                refs.remove(name);
                removed_refs.push((name.clone(), is_branch));
            }
        }

        // 2. What the kept refs keep.
        let mut keep: HashSet<i64> = HashSet::new();
        let mut referenced: HashSet<i64> = HashSet::new();
        for (name, &(is_branch, head)) in &refs {
            keep.insert(head);
            referenced.insert(head);
            if !is_branch {
                continue;
            }
            let (own_min, own_age) = match retention.get(name) {
                Some(SnapshotRetention::Branch {
                    min_snapshots_to_keep,
                    max_snapshot_age_ms,
                    ..
                }) => (*min_snapshots_to_keep, *max_snapshot_age_ms),
                _ => (None, None),
            };
            let min_keep = own_min
                .and_then(|m| usize::try_from(m).ok())
                .unwrap_or(default_min)
                .max(1);
            let cutoff = own_age.map(age_cutoff).unwrap_or(default_cutoff);
            // Walk the branch from its head; keep while any rule still asks for more.
            let chain = self.ancestry(head)?;
            let protected_on_chain = chain
                .iter()
                .filter(|s| protect.contains(&s.snapshot_id))
                .count();
            let mut protected_seen = 0usize;
            let mut walking = true;
            for (i, s) in chain.iter().enumerate() {
                referenced.insert(s.snapshot_id);
                if !walking {
                    continue;
                }
                let young = s.timestamp_ms >= cutoff;
                let recent = i < min_keep;
                let before_protected = protected_seen < protected_on_chain;
                if young || recent || before_protected {
                    keep.insert(s.snapshot_id);
                } else {
                    walking = false;
                }
                if protect.contains(&s.snapshot_id) {
                    protected_seen += 1;
                }
            }
        }
        let expire: Vec<i64> = md
            .snapshots()
            .filter(|s| !keep.contains(&s.snapshot_id()) && !protect.contains(&s.snapshot_id()))
            // A snapshot no kept ref reaches stays while it is younger than the default cutoff.
            .filter(|s| referenced.contains(&s.snapshot_id()) || s.timestamp_ms() < default_cutoff)
            .map(|s| s.snapshot_id())
            .collect();
        if expire.is_empty() && removed_refs.is_empty() {
            return Ok(None);
        }
        let mut b = md
            .clone()
            .into_builder(Some(self.metadata_location().to_string()));
        for (name, _) in &removed_refs {
            b = b.remove_ref(name);
        }
        let built = b
            .remove_snapshots(&expire)
            .build()
            .map_err(|e| LakeError::iceberg(format!("expiring snapshots of {}", self.name()), e))?;
        Ok(Some((
            TableChange {
                table: self.name().clone(),
                base: Some(self.metadata_location().to_string()),
                kind: ChangeKind::Update(Box::new(built.metadata)),
                snapshot_id: None,
                added_files: Vec::new(),
                refs: Some(Arc::new(refs)),
            },
            expire,
        )))
    }
}

impl Catalog {
    /// Every watermark the newest catalog version records: per source table, the snapshot ids
    /// that some ref head of some table names under [`watermark_key`] of that source.
    pub async fn watermarks(&self) -> Result<BTreeMap<TableName, BTreeSet<i64>>> {
        let head = self.head().await?;
        let mut out: BTreeMap<TableName, BTreeSet<i64>> = BTreeMap::new();
        for (name, entry) in &head.tables {
            let tn = TableName::parse(name)?;
            let md = self.read_metadata(&tn, &entry.metadata_location).await?;
            let heads: BTreeSet<i64> = ref_map(&md).values().map(|&(_, id)| id).collect();
            for id in heads {
                let Some(s) = md.snapshot_by_id(id) else {
                    continue;
                };
                for (k, v) in &s.summary().additional_properties {
                    let Some(source) = k.strip_prefix(WATERMARK_PREFIX) else {
                        continue;
                    };
                    let (Ok(source), Ok(id)) = (TableName::parse(source), v.trim().parse()) else {
                        continue;
                    };
                    out.entry(source).or_default().insert(id);
                }
            }
        }
        Ok(out)
    }

    /// Expire the snapshots of one table that no ref, no retention rule and no watermark
    /// needs, as of `now_ms` (see [`Table::stage_expire_at`]); every watermark the catalog's
    /// tables record on it ([`Catalog::watermarks`]) is protected along with `opts.protect`.
    /// Returns the expired ids.
    pub async fn expire_snapshots_at(
        &self,
        name: &str,
        opts: &ExpireOptions,
        now_ms: i64,
    ) -> Result<Vec<i64>> {
        let table = self.table(name).await?;
        let mut opts = opts.clone();
        if let Some(marks) = self.watermarks().await?.get(table.name()) {
            opts.protect.extend(marks.iter().copied());
        }
        match table.stage_expire_at(&opts, now_ms)? {
            None => Ok(Vec::new()),
            Some((change, ids)) => {
                self.commit(
                    vec![change],
                    "expire-snapshots",
                    &format!("expire {} snapshots of {name}", ids.len()),
                    BTreeMap::new(),
                )
                .await?;
                Ok(ids)
            }
        }
    }
}

/// What a file named by table metadata is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// A table metadata file (a catalog version's, or one in a metadata log).
    Metadata,
    /// A snapshot's manifest list.
    ManifestList,
    /// A manifest (of data files or of delete files).
    Manifest,
    /// A data file.
    DataFile,
    /// A position or equality delete file.
    DeleteFile,
    /// A table statistics (Puffin) file.
    Statistics,
    /// A partition statistics file.
    PartitionStatistics,
}

impl FileKind {
    /// The kebab-case name (`data-file`, `manifest-list`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Metadata => "metadata",
            FileKind::ManifestList => "manifest-list",
            FileKind::Manifest => "manifest",
            FileKind::DataFile => "data-file",
            FileKind::DeleteFile => "delete-file",
            FileKind::Statistics => "statistics",
            FileKind::PartitionStatistics => "partition-statistics",
        }
    }
}

/// An object in storage, compared as object_store sees it: the store's `scheme://authority`
/// and the object path. Never compare location strings: `My%20Lake` in metadata and
/// `My Lake` in a listing are the same object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectKey {
    root: String,
    path: ObjectPath,
}

impl ObjectKey {
    /// The object a location names, resolved the way every read and write resolves it.
    pub(crate) fn of(stores: &Stores, location: &str) -> Result<ObjectKey> {
        let url = storage::parse_location(location)?;
        let (_, path) = stores.resolve(location)?;
        Ok(ObjectKey {
            root: format!("{}://{}", url.scheme(), url.authority()),
            path,
        })
    }

    /// True when `self` is `dir` or lies under it (whole path segments, same store).
    pub(crate) fn is_under(&self, dir: &ObjectKey) -> bool {
        self.root == dir.root && self.path.prefix_matches(&dir.path)
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.root, self.path)
    }
}

/// One file some kept catalog version reaches.
#[derive(Clone, Debug)]
pub(crate) struct Reached {
    pub kind: FileKind,
    /// The location as metadata spells it.
    pub location: String,
    /// The table whose metadata named it (the first one found).
    pub table: String,
    /// The size its manifest (`file_size_in_bytes`), manifest list (`manifest_length`) or the
    /// table metadata (statistics) records.
    pub recorded_size: Option<u64>,
    /// The size of the bytes the walk read, for the files it read (metadata, lists, manifests).
    pub read_size: Option<u64>,
    /// False for a manifest entry whose status is `deleted`: still named (kept by the sweep),
    /// but no snapshot reads it, so its absence is not damage.
    pub live: bool,
}

/// A file the walk needed to read and could not.
#[derive(Clone, Debug)]
pub(crate) struct Unreadable {
    pub kind: FileKind,
    pub location: String,
    pub table: String,
    pub detail: String,
}

/// Everything the kept catalog versions reach: one set for the whole catalog, so a file any
/// table names (after a rename, or a second name registered on the same metadata) is kept.
#[derive(Debug, Default)]
pub(crate) struct Reachability {
    pub files: HashMap<ObjectKey, Reached>,
    /// Each table location metadata names, with the tables at it.
    pub table_locations: BTreeMap<String, BTreeSet<String>>,
    /// Metadata, manifest lists and manifests that could not be read: what they name is unknown.
    pub unreadable: Vec<Unreadable>,
}

impl Reachability {
    /// Record a named file; a file named twice is live if either names it live.
    fn add(&mut self, key: ObjectKey, r: Reached) {
        match self.files.get_mut(&key) {
            Some(old) => {
                old.live |= r.live;
                if old.recorded_size.is_none() {
                    old.recorded_size = r.recorded_size;
                }
            }
            None => {
                self.files.insert(key, r);
            }
        }
    }
}

impl Catalog {
    /// Walk every file the given catalog versions reach: each table's metadata file, the
    /// metadata files in its metadata log, its statistics and partition statistics files, every
    /// snapshot's manifest list, every manifest (data and delete manifests) and every data and
    /// delete file those name. Each file is read once however many versions and tables name it.
    /// Orphan removal and [`Catalog::verify`] share this walk.
    pub(crate) async fn reachable(&self, versions: &[CatalogVersion]) -> Result<Reachability> {
        let stores = self.stores();
        let mut out = Reachability::default();
        let mut metadata_done: HashSet<ObjectKey> = HashSet::new();
        let mut lists_done: HashSet<ObjectKey> = HashSet::new();
        let mut manifests_done: HashSet<ObjectKey> = HashSet::new();
        for v in versions {
            for (table, entry) in &v.tables {
                let loc = &entry.metadata_location;
                let key = ObjectKey::of(stores, loc)?;
                out.add(
                    key.clone(),
                    Reached {
                        kind: FileKind::Metadata,
                        location: loc.clone(),
                        table: table.clone(),
                        recorded_size: None,
                        read_size: None,
                        live: true,
                    },
                );
                if !metadata_done.insert(key.clone()) {
                    continue;
                }
                let mut unreadable = |kind, location: &str, detail: String| {
                    out.unreadable.push(Unreadable {
                        kind,
                        location: location.to_string(),
                        table: table.clone(),
                        detail,
                    })
                };
                let bytes = match storage::read_optional(stores, loc).await? {
                    Some(b) => b,
                    None => {
                        unreadable(FileKind::Metadata, loc, "file does not exist".into());
                        continue;
                    }
                };
                let md: TableMetadata = match serde_json::from_slice(&bytes) {
                    Ok(md) => md,
                    Err(e) => {
                        unreadable(FileKind::Metadata, loc, format!("not table metadata: {e}"));
                        continue;
                    }
                };
                if let Some(r) = out.files.get_mut(&key) {
                    r.read_size = Some(bytes.len() as u64);
                }
                self.walk_metadata(table, &md, &mut out, &mut lists_done, &mut manifests_done)
                    .await?;
            }
        }
        Ok(out)
    }

    async fn walk_metadata(
        &self,
        table: &str,
        md: &TableMetadata,
        out: &mut Reachability,
        lists_done: &mut HashSet<ObjectKey>,
        manifests_done: &mut HashSet<ObjectKey>,
    ) -> Result<()> {
        let stores = self.stores();
        out.table_locations
            .entry(md.location().to_string())
            .or_default()
            .insert(table.to_string());
        let reached = |kind, location: &str, recorded_size: Option<u64>, live| Reached {
            kind,
            location: location.to_string(),
            table: table.to_string(),
            recorded_size,
            read_size: None,
            live,
        };
        for entry in md.metadata_log() {
            let key = ObjectKey::of(stores, &entry.metadata_file)?;
            out.add(
                key,
                reached(FileKind::Metadata, &entry.metadata_file, None, true),
            );
        }
        for s in md.statistics_iter() {
            let key = ObjectKey::of(stores, &s.statistics_path)?;
            let size = u64::try_from(s.file_size_in_bytes).ok();
            out.add(
                key,
                reached(FileKind::Statistics, &s.statistics_path, size, true),
            );
        }
        for s in md.partition_statistics_iter() {
            let key = ObjectKey::of(stores, &s.statistics_path)?;
            let size = u64::try_from(s.file_size_in_bytes).ok();
            out.add(
                key,
                reached(
                    FileKind::PartitionStatistics,
                    &s.statistics_path,
                    size,
                    true,
                ),
            );
        }
        for snap in md.snapshots() {
            let list_loc = snap.manifest_list();
            let list_key = ObjectKey::of(stores, list_loc)?;
            out.add(
                list_key.clone(),
                reached(FileKind::ManifestList, list_loc, None, true),
            );
            if !lists_done.insert(list_key.clone()) {
                continue;
            }
            let Some(bytes) = self
                .read_named(out, table, FileKind::ManifestList, list_loc, &list_key)
                .await?
            else {
                continue;
            };
            let list = match ManifestList::parse_with_version(&bytes, md.format_version()) {
                Ok(l) => l,
                Err(e) => {
                    out.unreadable.push(Unreadable {
                        kind: FileKind::ManifestList,
                        location: list_loc.to_string(),
                        table: table.to_string(),
                        detail: format!("not a manifest list: {e}"),
                    });
                    continue;
                }
            };
            for mf in list.entries() {
                let key = ObjectKey::of(stores, &mf.manifest_path)?;
                let size = u64::try_from(mf.manifest_length).ok();
                out.add(
                    key.clone(),
                    reached(FileKind::Manifest, &mf.manifest_path, size, true),
                );
                if !manifests_done.insert(key.clone()) {
                    continue;
                }
                let Some(bytes) = self
                    .read_named(out, table, FileKind::Manifest, &mf.manifest_path, &key)
                    .await?
                else {
                    continue;
                };
                let manifest = match Manifest::parse_avro(&bytes) {
                    Ok(m) => m,
                    Err(e) => {
                        out.unreadable.push(Unreadable {
                            kind: FileKind::Manifest,
                            location: mf.manifest_path.clone(),
                            table: table.to_string(),
                            detail: format!("not a manifest: {e}"),
                        });
                        continue;
                    }
                };
                for e in manifest.entries() {
                    let kind = match e.content_type() {
                        DataContentType::Data => FileKind::DataFile,
                        _ => FileKind::DeleteFile,
                    };
                    let key = ObjectKey::of(stores, e.file_path())?;
                    out.add(
                        key,
                        reached(
                            kind,
                            e.file_path(),
                            Some(e.file_size_in_bytes()),
                            e.is_alive(),
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// Read a file the walk must open, recording its size; `None` (and an unreadable entry)
    /// when it is missing.
    async fn read_named(
        &self,
        out: &mut Reachability,
        table: &str,
        kind: FileKind,
        location: &str,
        key: &ObjectKey,
    ) -> Result<Option<Bytes>> {
        match storage::read_optional(self.stores(), location).await? {
            Some(b) => {
                if let Some(r) = out.files.get_mut(key) {
                    r.read_size = Some(b.len() as u64);
                }
                Ok(Some(b))
            }
            None => {
                out.unreadable.push(Unreadable {
                    kind,
                    location: location.to_string(),
                    table: table.to_string(),
                    detail: "file does not exist".into(),
                });
                Ok(None)
            }
        }
    }
}

/// What [`Catalog::remove_orphans`] found and did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct OrphanReport {
    /// Files removed, per table location (named by the tables at it).
    pub removed: BTreeMap<String, Vec<String>>,
    /// Unreachable files kept because the grace period has not passed since they were first
    /// seen unreachable, or since they were written.
    pub too_young: usize,
    /// Unreachable files kept because they were written after a writer that may still be at
    /// work began (they may be its files, not yet committed).
    pub at_work: usize,
    /// Unreachable files the ledger holds after this pass, waiting out the grace period or
    /// the writer at work.
    pub waiting: usize,
    /// Files some kept catalog version reaches.
    pub reachable: usize,
    /// Table locations not swept: outside the warehouse, or the catalog's own folder, or the
    /// season's raw files (`landing/`, `truth/`).
    pub not_swept: Vec<String>,
}

impl OrphanReport {
    /// How many files were removed in all.
    pub fn total(&self) -> usize {
        self.removed.values().map(|v| v.len()).sum()
    }
}

/// [`LakeError::UnreadableReach`] when anything a kept version names could not be read.
fn unreadable_reach(reach: &Reachability) -> Result<()> {
    match reach.unreadable.first() {
        None => Ok(()),
        Some(first) => Err(LakeError::UnreadableReach {
            count: reach.unreadable.len(),
            first: format!(
                "{} {} of {}: {}",
                first.kind.as_str(),
                first.location,
                first.table,
                first.detail
            ),
        }),
    }
}

/// Folders under the warehouse that hold the season's raw files, not table files.
pub(crate) const NEVER_SWEPT: [&str; 2] = ["landing", "truth"];

/// The mark-and-sweep ledger, under the catalog: object -> when a sweep first saw it
/// unreachable (ms since the epoch).
const LEDGER: &str = "maintenance/unreachable.json";

impl Catalog {
    /// Delete catalog versions older than the newest `retain_last` (at least the newest is
    /// always kept), oldest first. Returns the versions removed.
    ///
    /// What is kept is always a contiguous run ending at the head: a handle that last saw a
    /// removed version finds the head by listing, and a writer whose version lands below a
    /// removed one takes it back and retries. (Keeping chosen old versions — the ones a
    /// publish names — would break that run; it waits for the publish issue.)
    ///
    /// This is what lets [`Catalog::remove_orphans`] free disk: it keeps every file any kept
    /// version's metadata reaches, so the metadata files, manifest lists and manifests of
    /// expired snapshots stay on disk for as long as an old version names them. Time travel to
    /// a removed version ([`Catalog::version`], `--version N`) is then a
    /// [`LakeError::NoSuchVersion`].
    pub async fn expire_versions(&self, retain_last: u64) -> Result<Vec<u64>> {
        let head = self.head().await?;
        let cutoff = head.version.saturating_sub(retain_last.max(1));
        let doomed: Vec<u64> = self
            .list_versions()
            .await?
            .into_iter()
            .filter(|n| *n <= cutoff && *n < head.version)
            .collect();
        if doomed.is_empty() {
            return Ok(doomed);
        }
        // The floor first: a stale writer or reader must never take a version below it for
        // the head once any of them is gone.
        self.raise_floor(cutoff + 1).await?;
        for n in &doomed {
            self.delete_version(*n).await?;
        }
        Ok(doomed)
    }

    fn ledger_location(&self) -> String {
        storage::join(self.catalog_url(), LEDGER)
    }

    async fn read_ledger(&self) -> Result<BTreeMap<String, i64>> {
        let loc = self.ledger_location();
        match storage::read_optional(self.stores(), &loc).await? {
            // A ledger that cannot be read restarts every clock: files wait longer, never less.
            Some(b) => Ok(serde_json::from_slice(&b).unwrap_or_default()),
            None => Ok(BTreeMap::new()),
        }
    }

    /// Delete the files under the catalog's table locations that no kept catalog version
    /// reaches, once they have been unreachable for `grace_ms` (and were written at least
    /// `grace_ms` before `now_ms`). `grace_ms == 0` deletes every unreachable file at once.
    ///
    /// Reachability is one set across the catalog (see the module docs); only table locations
    /// under the warehouse are swept, never the catalog's folder nor `landing/` or `truth/`.
    /// When any metadata, manifest list or manifest a kept version names cannot be read, what
    /// it names is unknown and nothing is deleted.
    ///
    /// Files written since a writer that may still be at work began are kept too, and files a
    /// writer commits while the sweep runs are not taken for orphans (see the module docs).
    pub async fn remove_orphans(&self, now_ms: i64, grace_ms: i64) -> Result<OrphanReport> {
        self.sweep(None, now_ms, grace_ms).await
    }

    /// [`Catalog::remove_orphans`] by the work `mine` before it writes anything: its own mark
    /// protects nothing. (Counted, it would keep debris written just before its marker in the
    /// same tick of the store's clock, whose times are coarse, as its own files at work.)
    pub async fn remove_orphans_as(
        &self,
        mine: &WorkMark,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<OrphanReport> {
        self.sweep(Some(mine), now_ms, grace_ms).await
    }

    async fn sweep(
        &self,
        mine: Option<&WorkMark>,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<OrphanReport> {
        let stores = self.stores();
        let versions = self.log().await?;
        let mut reach = self.reachable(&versions).await?;
        unreadable_reach(&reach)?;
        let warehouse = ObjectKey::of(stores, self.warehouse_url())?;
        let mut fenced = vec![ObjectKey::of(stores, self.catalog_url())?];
        for d in NEVER_SWEPT {
            fenced.push(ObjectKey::of(
                stores,
                &storage::join(self.warehouse_url(), d),
            )?);
        }
        let mut report = OrphanReport {
            reachable: reach.files.len(),
            ..OrphanReport::default()
        };
        // Which folders to list: the table locations under the warehouse.
        let mut dirs: Vec<(ObjectKey, Arc<dyn ObjectStore>, String)> = Vec::new();
        for (location, tables) in &reach.table_locations {
            let key = ObjectKey::of(stores, location)?;
            let outside = !key.is_under(&warehouse);
            let fenced_off = fenced.iter().any(|f| key.is_under(f));
            if outside || fenced_off {
                report.not_swept.push(location.clone());
                continue;
            }
            let (store, _) = stores.resolve(location)?;
            let names: Vec<&str> = tables.iter().map(String::as_str).collect();
            dirs.push((key, store, names.join(",")));
        }
        // List first; then who is at work, then what was committed meanwhile (the order is
        // what makes the sweep safe for a writer at work: see the module docs).
        let mut listed = Vec::with_capacity(dirs.len());
        for (dir, store, owners) in &dirs {
            let metas: Vec<object_store::ObjectMeta> = store
                .list(Some(&dir.path))
                .try_collect()
                .await
                .map_err(|e| LakeError::store(dir.to_string(), e))?;
            listed.push((dir, store, owners, metas));
        }
        let at_work_since = self.at_work_since(now_ms, mine).await?;
        let last = versions.last().map_or(0, |v| v.version);
        let mut since: Vec<CatalogVersion> = Vec::new();
        for n in last + 1..=self.head().await?.version {
            match self.version(n).await {
                Ok(v) => since.push(v),
                // Expired meanwhile: what it alone reached is out of reach now.
                Err(LakeError::NoSuchVersion { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if !since.is_empty() {
            let more = self.reachable(&since).await?;
            unreadable_reach(&more)?;
            for (key, r) in more.files {
                reach.add(key, r);
            }
        }
        report.reachable = reach.files.len();
        let ledger = self.read_ledger().await?;
        let mut next_ledger: BTreeMap<String, i64> = BTreeMap::new();
        let mut listed_done: HashSet<ObjectKey> = HashSet::new();
        for (dir, store, owners, metas) in listed {
            for m in metas {
                let key = ObjectKey {
                    root: dir.root.clone(),
                    path: m.location,
                };
                if reach.files.contains_key(&key)
                    || !key.is_under(&warehouse)
                    || fenced.iter().any(|f| key.is_under(f))
                    || !listed_done.insert(key.clone())
                {
                    continue;
                }
                let id = key.to_string();
                let first_seen = ledger.get(&id).copied().unwrap_or(now_ms).min(now_ms);
                let written_ms = m.last_modified.timestamp_millis();
                if at_work_since.is_some_and(|t| written_ms >= t) {
                    report.at_work += 1;
                    next_ledger.insert(id, first_seen);
                    continue;
                }
                if now_ms - first_seen < grace_ms || now_ms - written_ms < grace_ms {
                    report.too_young += 1;
                    next_ledger.insert(id, first_seen);
                    continue;
                }
                match store.delete(&key.path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(LakeError::store(id, e)),
                }
                report.removed.entry(owners.clone()).or_default().push(id);
            }
        }
        report.waiting = next_ledger.len();
        if !(ledger.is_empty() && next_ledger.is_empty()) {
            let bytes = serde_json::to_vec_pretty(&next_ledger)
                .map_err(|e| LakeError::Other(format!("writing the orphan ledger: {e}")))?;
            storage::put(stores, &self.ledger_location(), Bytes::from(bytes)).await?;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use iceberg::spec::{PartitionStatisticsFile, SnapshotReference, SnapshotRetention};

    use super::*;

    const DAY: i64 = 86_400_000;

    fn schema() -> Schema {
        Schema::new(vec![Field::new("id", DataType::Int64, false)])
    }

    fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(schema()),
            vec![Arc::new(Int64Array::from_iter_values(ids))],
        )
        .unwrap()
    }

    /// A table with `n` appends on main; returns the snapshot ids, oldest first.
    async fn table_with(c: &Catalog, name: &str, n: i64) -> Vec<i64> {
        c.create_table(name, &schema(), &[]).await.unwrap();
        let mut ids = Vec::new();
        for k in 0..n {
            let s = c
                .append(name, "main", &[rows(k..k + 1)], BTreeMap::new())
                .await
                .unwrap();
            ids.push(s.snapshot_id);
        }
        ids
    }

    /// Commit `edit` of a table's metadata builder.
    async fn edit(
        c: &Catalog,
        name: &str,
        f: impl FnOnce(iceberg::spec::TableMetadataBuilder) -> iceberg::spec::TableMetadataBuilder,
    ) {
        let t = c.table(name).await.unwrap();
        let b = t
            .metadata()
            .clone()
            .into_builder(Some(t.metadata_location().to_string()));
        let md = f(b).build().unwrap().metadata;
        let change = TableChange {
            table: t.name().clone(),
            base: Some(t.metadata_location().to_string()),
            kind: ChangeKind::Update(Box::new(md)),
            snapshot_id: None,
            added_files: Vec::new(),
            refs: None,
        };
        c.commit(vec![change], "test", "edit", BTreeMap::new())
            .await
            .unwrap();
    }

    fn all_old() -> ExpireOptions {
        ExpireOptions {
            older_than_ms: i64::MAX,
            retain_last: 1,
            protect: Vec::new(),
        }
    }

    async fn newest_ts(c: &Catalog, name: &str) -> i64 {
        let t = c.table(name).await.unwrap();
        t.snapshots().iter().map(|s| s.timestamp_ms).max().unwrap()
    }

    #[tokio::test]
    async fn a_branchs_own_min_snapshots_to_keep_wins_over_the_defaults() {
        let c = Catalog::in_memory();
        let s = table_with(&c, "bronze.t", 8).await;
        edit(&c, "bronze.t", |b| {
            b.set_ref(
                MAIN_BRANCH,
                SnapshotReference::new(s[7], SnapshotRetention::branch(Some(3), None, None)),
            )
            .unwrap()
        })
        .await;
        let now = newest_ts(&c, "bronze.t").await + DAY;
        let expired = c
            .expire_snapshots_at("bronze.t", &all_old(), now)
            .await
            .unwrap();
        assert_eq!(expired.len(), 5, "{expired:?}");
        let t = c.table("bronze.t").await.unwrap();
        let kept: Vec<i64> = t.snapshots().iter().map(|s| s.snapshot_id).collect();
        assert_eq!(kept, s[5..].to_vec());
    }

    #[tokio::test]
    async fn a_branchs_own_max_snapshot_age_keeps_young_snapshots() {
        let c = Catalog::in_memory();
        let s = table_with(&c, "bronze.t", 4).await;
        edit(&c, "bronze.t", |b| {
            b.set_ref(
                MAIN_BRANCH,
                SnapshotReference::new(s[3], SnapshotRetention::branch(None, Some(2 * DAY), None)),
            )
            .unwrap()
        })
        .await;
        let now = newest_ts(&c, "bronze.t").await + DAY;
        let expired = c
            .expire_snapshots_at("bronze.t", &all_old(), now)
            .await
            .unwrap();
        assert!(expired.is_empty(), "{expired:?}");
        // Three days on, only the head is left (min-snapshots-to-keep defaults to 1).
        let expired = c
            .expire_snapshots_at("bronze.t", &all_old(), now + 2 * DAY)
            .await
            .unwrap();
        assert_eq!(expired.len(), 3);
    }

    #[tokio::test]
    async fn refs_past_their_max_ref_age_go_but_main_never_does() {
        let c = Catalog::in_memory();
        let s = table_with(&c, "bronze.t", 4).await;
        edit(&c, "bronze.t", |b| {
            b.set_ref(
                "old-tag",
                SnapshotReference::new(
                    s[0],
                    SnapshotRetention::Tag {
                        max_ref_age_ms: Some(DAY / 2),
                    },
                ),
            )
            .unwrap()
            .set_ref(
                "kept-tag",
                SnapshotReference::new(
                    s[1],
                    SnapshotRetention::Tag {
                        max_ref_age_ms: None,
                    },
                ),
            )
            .unwrap()
            .set_ref(
                "dev",
                SnapshotReference::new(s[2], SnapshotRetention::branch(None, None, Some(DAY / 2))),
            )
            .unwrap()
            .set_ref(
                MAIN_BRANCH,
                SnapshotReference::new(s[3], SnapshotRetention::branch(None, None, Some(1))),
            )
            .unwrap()
        })
        .await;
        let now = newest_ts(&c, "bronze.t").await + DAY;
        let expired = c
            .expire_snapshots_at("bronze.t", &all_old(), now)
            .await
            .unwrap();
        let mut expired_sorted = expired.clone();
        expired_sorted.sort_unstable();
        let mut want = vec![s[0], s[2]];
        want.sort_unstable();
        assert_eq!(expired_sorted, want);
        let t = c.table("bronze.t").await.unwrap();
        let refs: Vec<String> = t.refs().into_iter().map(|r| r.name).collect();
        assert_eq!(refs, vec!["main".to_string(), "kept-tag".to_string()]);
        assert_eq!(t.head("main"), Some(s[3]));
        // The table's own default ages out the tag without a window of its own.
        edit(&c, "bronze.t", |b| {
            b.set_properties(std::collections::HashMap::from([(
                PROP_MAX_REF_AGE.to_string(),
                (DAY / 2).to_string(),
            )]))
            .unwrap()
        })
        .await;
        let expired = c
            .expire_snapshots_at("bronze.t", &all_old(), now)
            .await
            .unwrap();
        assert_eq!(expired, vec![s[1]]);
        let t = c.table("bronze.t").await.unwrap();
        assert_eq!(t.refs().len(), 1);
    }

    #[tokio::test]
    async fn table_properties_are_the_defaults_before_the_options() {
        let c = Catalog::in_memory();
        let s = table_with(&c, "bronze.t", 6).await;
        edit(&c, "bronze.t", |b| {
            b.set_properties(std::collections::HashMap::from([(
                PROP_MIN_SNAPSHOTS.to_string(),
                "4".to_string(),
            )]))
            .unwrap()
        })
        .await;
        let now = newest_ts(&c, "bronze.t").await + DAY;
        let expired = c
            .expire_snapshots_at("bronze.t", &all_old(), now)
            .await
            .unwrap();
        assert_eq!(expired.len(), 2);
        edit(&c, "bronze.t", |b| {
            b.set_properties(std::collections::HashMap::from([
                (PROP_MIN_SNAPSHOTS.to_string(), "1".to_string()),
                (PROP_MAX_SNAPSHOT_AGE.to_string(), (2 * DAY).to_string()),
            ]))
            .unwrap()
        })
        .await;
        // Every snapshot is a day old: younger than the table's two days, whatever the options.
        assert!(
            c.expire_snapshots_at("bronze.t", &all_old(), now)
                .await
                .unwrap()
                .is_empty()
        );
        // A property that is not a number is an error naming the table, not a guess.
        edit(&c, "bronze.t", |b| {
            b.set_properties(std::collections::HashMap::from([(
                PROP_MIN_SNAPSHOTS.to_string(),
                "many".to_string(),
            )]))
            .unwrap()
        })
        .await;
        let err = c
            .expire_snapshots_at("bronze.t", &all_old(), now)
            .await
            .unwrap_err();
        assert!(matches!(err, LakeError::BadMetadata { .. }), "{err}");
        assert_eq!(c.table("bronze.t").await.unwrap().snapshots().len(), 4);
        let _ = s;
    }

    #[tokio::test]
    async fn expiry_keeps_what_a_watermark_names_until_the_consumer_moves_past_it() {
        let c = Catalog::in_memory();
        let s = table_with(&c, "bronze.src", 10).await;
        c.create_table("silver.sink", &schema(), &[]).await.unwrap();
        let src = TableName::parse("bronze.src").unwrap();
        assert_eq!(watermark_key(&src), "sugarshack.watermark.bronze.src");
        let consume = |through: i64| BTreeMap::from([(watermark_key(&src), through.to_string())]);
        c.append("silver.sink", "main", &[rows(0..1)], consume(s[4]))
            .await
            .unwrap();
        let expired = c.expire_snapshots("bronze.src", &all_old()).await.unwrap();
        assert_eq!(expired.len(), 4, "s0..s3 go; s4 on stay");
        let t = c.table("bronze.src").await.unwrap();
        let inc = t.read_incremental("main", Some(s[4]), None).await.unwrap();
        assert_eq!(inc.batches().map(|b| b.num_rows()).sum::<usize>(), 5);
        // The consumer moves on: what it passed may go.
        c.append("silver.sink", "main", &[rows(1..2)], consume(s[8]))
            .await
            .unwrap();
        assert_eq!(
            c.watermarks().await.unwrap().get(&src),
            Some(&BTreeSet::from([s[8]]))
        );
        let expired = c.expire_snapshots("bronze.src", &all_old()).await.unwrap();
        assert_eq!(expired.len(), 4, "s4..s7 go");
    }

    #[tokio::test]
    async fn partition_statistics_files_are_reachable() {
        let c = Catalog::in_memory();
        let s = table_with(&c, "bronze.t", 1).await;
        let t = c.table("bronze.t").await.unwrap();
        let path = format!("{}/metadata/partition-stats-{}.parquet", t.location(), s[0]);
        storage::put(c.stores(), &path, Bytes::from_static(b"stats"))
            .await
            .unwrap();
        edit(&c, "bronze.t", |b| {
            b.set_partition_statistics(PartitionStatisticsFile {
                snapshot_id: s[0],
                statistics_path: path.clone(),
                file_size_in_bytes: 5,
            })
        })
        .await;
        let report = c.remove_orphans(i64::MAX / 2, 0).await.unwrap();
        assert_eq!(report.total(), 0, "{report:?}");
        assert!(
            storage::read_head(c.stores(), &path)
                .await
                .unwrap()
                .is_some()
        );
        let v = c.verify().await.unwrap();
        assert!(v.is_clean(), "{v:?}");
        assert_eq!(v.checked.get("partition-statistics"), Some(&1));
    }
}
