//! Maintenance: expire snapshots no ref needs, and remove files no metadata names.
//!
//! A crash after data files are written but before the catalog commit leaves only orphans: no
//! catalog version names them, so no reader sees them, and [`Catalog::remove_orphans`] deletes
//! them once they are older than a grace period (so a writer still in flight is never robbed).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use iceberg::spec::TableMetadata;

use crate::catalog::{Catalog, ChangeKind, TableChange};
use crate::error::{LakeError, Result};
use crate::storage;
use crate::table::{Table, TableName};

/// Which snapshots [`Table::stage_expire`] keeps.
#[derive(Clone, Debug, Default)]
pub struct ExpireOptions {
    /// Snapshots newer than this (ms since the epoch) are kept.
    pub older_than_ms: i64,
    /// On every branch, the newest this many snapshots are kept whatever their age.
    pub retain_last: usize,
    /// These snapshots, and every snapshot after them on a branch, are kept (watermarks
    /// downstream readers still need for incremental reads).
    pub protect: Vec<i64>,
}

impl Table {
    /// Stage the removal of snapshots no ref needs. Returns `None` when nothing would expire.
    pub fn stage_expire(&self, opts: &ExpireOptions) -> Result<Option<(TableChange, Vec<i64>)>> {
        let md = self.metadata();
        let mut keep: HashSet<i64> = HashSet::new();
        let protect: HashSet<i64> = opts.protect.iter().copied().collect();
        for &(is_branch, head) in self.ref_entries().values() {
            keep.insert(head);
            if !is_branch {
                continue;
            }
            // Walk the branch from its head; keep while any rule still asks for more.
            let chain = self.ancestry(head)?;
            let protected_on_chain: HashSet<i64> = chain
                .iter()
                .map(|s| s.snapshot_id)
                .filter(|id| protect.contains(id))
                .collect();
            let mut protected_seen = 0usize;
            for (i, s) in chain.iter().enumerate() {
                let young = s.timestamp_ms >= opts.older_than_ms;
                let recent = i < opts.retain_last.max(1);
                let before_protected = protected_seen < protected_on_chain.len();
                if young || recent || before_protected {
                    keep.insert(s.snapshot_id);
                } else {
                    break;
                }
                if protected_on_chain.contains(&s.snapshot_id) {
                    protected_seen += 1;
                }
            }
        }
        let expire: Vec<i64> = md
            .snapshots()
            .filter(|s| !keep.contains(&s.snapshot_id()) && !protect.contains(&s.snapshot_id()))
            .filter(|s| s.timestamp_ms() < opts.older_than_ms || opts.older_than_ms == i64::MAX)
            .map(|s| s.snapshot_id())
            .collect();
        if expire.is_empty() {
            return Ok(None);
        }
        let built = md
            .clone()
            .into_builder(Some(self.metadata_location().to_string()))
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
                // Expiry keeps every ref's head: the refs do not change.
                refs: Some(std::sync::Arc::new(self.ref_entries().clone())),
            },
            expire,
        )))
    }
}

/// What [`Catalog::remove_orphans`] found and did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct OrphanReport {
    /// Files removed, per table.
    pub removed: BTreeMap<String, Vec<String>>,
    /// Unnamed files kept because they are younger than the grace period.
    pub too_young: usize,
}

impl OrphanReport {
    /// How many files were removed in all.
    pub fn total(&self) -> usize {
        self.removed.values().map(|v| v.len()).sum()
    }
}

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
        let mut removed = Vec::new();
        for n in self.list_versions().await? {
            if n > cutoff || n >= head.version {
                continue;
            }
            self.delete_version(n).await?;
            removed.push(n);
        }
        Ok(removed)
    }

    /// Every file a table's metadata reaches, across every catalog version that names it.
    async fn reachable_files(
        &self,
        name: &TableName,
        metadata_locations: &BTreeSet<String>,
    ) -> Result<HashSet<String>> {
        let mut reach: HashSet<String> = HashSet::new();
        let mut lists_done: HashSet<String> = HashSet::new();
        let mut manifests_done: HashSet<String> = HashSet::new();
        let ice = |e: iceberg::Error| LakeError::iceberg(format!("walking the files of {name}"), e);
        for loc in metadata_locations {
            reach.insert(loc.clone());
            let md: TableMetadata = self.read_metadata(name, loc).await?;
            for entry in md.metadata_log() {
                reach.insert(entry.metadata_file.clone());
            }
            let table = self.table_from(name.clone(), md.clone(), loc.clone(), 0)?;
            for snap in md.snapshots() {
                let list_path = snap.manifest_list().to_string();
                reach.insert(list_path.clone());
                if !lists_done.insert(list_path) {
                    continue;
                }
                let list = table
                    .iceberg()
                    .manifest_list_reader(snap)
                    .load()
                    .await
                    .map_err(ice)?;
                for mf in list.entries() {
                    reach.insert(mf.manifest_path.clone());
                    if !manifests_done.insert(mf.manifest_path.clone()) {
                        continue;
                    }
                    let m = mf.load_manifest(self.file_io()).await.map_err(ice)?;
                    for e in m.entries() {
                        reach.insert(e.data_file().file_path().to_string());
                    }
                }
            }
        }
        Ok(reach)
    }

    /// Delete files under each table's location that no catalog version's metadata names and
    /// that are older than `grace_ms` (by their storage modification time, against `now_ms`).
    pub async fn remove_orphans(&self, now_ms: i64, grace_ms: i64) -> Result<OrphanReport> {
        let log = self.log().await?;
        let mut per_table: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for v in &log {
            for (t, e) in &v.tables {
                per_table
                    .entry(t.clone())
                    .or_default()
                    .insert(e.metadata_location.clone());
            }
        }
        let mut report = OrphanReport::default();
        for (t, locations) in per_table {
            let name = TableName::parse(&t)?;
            let reach = self.reachable_files(&name, &locations).await?;
            let head_loc = locations.iter().next().cloned().unwrap_or_default();
            let md = self.read_metadata(&name, &head_loc).await?;
            let listed = storage::list(self.stores(), md.location()).await?;
            for f in listed {
                if reach.contains(&f.location) {
                    continue;
                }
                if now_ms - f.last_modified_ms < grace_ms {
                    report.too_young += 1;
                    continue;
                }
                storage::delete(self.stores(), &f.location).await?;
                report
                    .removed
                    .entry(t.clone())
                    .or_default()
                    .push(f.location);
            }
        }
        Ok(report)
    }
}
