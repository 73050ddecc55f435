//! The file catalog: an append-only log of immutable, numbered versions (kept by `log.rs`).
//!
//! Version `n` names every table's current Iceberg metadata file, plus when, which operation
//! and a message. A commit writes each table's new metadata file, then version `head + 1`
//! create-if-absent, so of two writers exactly one wins; the other re-reads the log and either
//! lands on the new base (it touched other tables) or gets a typed conflict (it touched the
//! same table). A commit whose outcome the store leaves in doubt reads its version back (by
//! its commit id) and never deletes a file the log may name.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::table::Table as IcebergTable;
use iceberg::{NamespaceIdent, TableIdent};
use object_store::ObjectStore;
use url::Url;

use crate::error::{LakeError, Result};
use crate::storage::{self, Stores};
use crate::table::Table;
use crate::types::{RefMap, TableName, refs_and_snapshots_of, refs_of};
use futures::{StreamExt, TryStreamExt};

/// For `verify`: the hash the chain records ([`Catalog::version_bytes`] gives the bytes).
#[allow(unused_imports)]
pub(crate) use crate::log::sha256_hex;
pub use crate::log::{CATALOG_FORMAT, CatalogVersion, TableEntry};
use crate::log::{Stored, Written};
pub(crate) use crate::types::ChangeKind;
pub use crate::types::{Committed, TableChange};

const MAX_COMMIT_ATTEMPTS: u32 = 64;

/// Where a test or a crash drill makes a commit fail on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failpoint {
    /// After new data files and manifests are written, before any metadata file.
    AfterDataFiles,
    /// After every table's new metadata file is written, before the catalog version.
    AfterMetadataFiles,
}

impl Failpoint {
    /// Parse `after-data-files` / `after-metadata-files` (the `SUGARSHACK_FAILPOINT` values).
    pub fn parse(s: &str) -> Option<Failpoint> {
        match s {
            "after-data-files" => Some(Failpoint::AfterDataFiles),
            "after-metadata-files" => Some(Failpoint::AfterMetadataFiles),
            _ => None,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) stores: Stores,
    pub(crate) catalog_url: String,
    pub(crate) warehouse_url: String,
    pub(crate) file_io: FileIO,
    failpoint: Mutex<Option<Failpoint>>,
    /// The newest version this handle read or wrote, with the hash of its bytes. Versions
    /// never change once written, so finding the head again costs one probe for the version
    /// after it, and the next commit records the hash without reading it again.
    pub(crate) newest: Mutex<Option<Arc<Stored>>>,
    /// The highest floor this handle read or raised (only ever grows).
    pub(crate) floor_seen: AtomicU64,
    /// Manifest lists, manifests and table metadata files this handle parsed (they never
    /// change once written).
    pub(crate) parsed: crate::plan::ParsedFiles,
    /// Manifest headers this handle parsed: every manifest a table writes between two schema
    /// changes repeats the same one.
    pub(crate) manifest_headers: crate::manifest::Headers,
    /// The JSON of each snapshot this handle's commits wrote into table metadata (snapshots
    /// never change): the next commit of the table copies it.
    pub(crate) snapshot_json: crate::metadata_json::SnapshotJson,
    /// The Arrow schemas of the data-file footers this handle decoded, by what they decode
    /// from: a table's files written under one schema share one.
    pub(crate) arrow_schemas: crate::plan::ArrowSchemas,
}

/// A file catalog over object storage. Cheap to clone; clones share one store.
#[derive(Clone)]
pub struct Catalog {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("catalog", &self.inner.catalog_url)
            .field("warehouse", &self.inner.warehouse_url)
            .finish()
    }
}

fn dir_url(p: &Path) -> Result<String> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| LakeError::Location {
                location: p.display().to_string(),
                detail: e.to_string(),
            })?
            .join(p)
    };
    let url = Url::from_directory_path(&abs).map_err(|_| LakeError::Location {
        location: abs.display().to_string(),
        detail: "not a usable directory path".into(),
    })?;
    Ok(url.as_str().trim_end_matches('/').to_string())
}

impl Catalog {
    /// A catalog and warehouse in local folders (created on first write).
    pub fn open_local(
        catalog_dir: impl AsRef<Path>,
        warehouse_dir: impl AsRef<Path>,
    ) -> Result<Catalog> {
        let c = dir_url(catalog_dir.as_ref())?;
        let w = dir_url(warehouse_dir.as_ref())?;
        for d in [catalog_dir.as_ref(), warehouse_dir.as_ref()] {
            std::fs::create_dir_all(d).map_err(|e| LakeError::Location {
                location: d.display().to_string(),
                detail: e.to_string(),
            })?;
        }
        Ok(Self::with_stores(Stores::new(), c, w))
    }

    /// A catalog in memory: for tests and experiments. Clones share the same memory.
    pub fn in_memory() -> Catalog {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        Self::open_store(store, "memory:///catalog", "memory:///warehouse")
    }

    /// A catalog whose locations (URLs with one scheme and authority) all live in `store`.
    pub fn open_store(
        store: Arc<dyn ObjectStore>,
        catalog_url: &str,
        warehouse_url: &str,
    ) -> Catalog {
        let mut stores = Stores::new();
        for u in [catalog_url, warehouse_url] {
            if let Ok(url) = Url::parse(u) {
                stores = stores.with_store(&url, store.clone());
            }
        }
        Self::with_stores(
            stores,
            catalog_url.trim_end_matches('/').to_string(),
            warehouse_url.trim_end_matches('/').to_string(),
        )
    }

    /// A catalog at any object_store URL (`file:///…`, `s3://bucket/…` with that feature built in).
    pub fn open_url(catalog_url: &str, warehouse_url: &str) -> Result<Catalog> {
        storage::parse_location(catalog_url)?;
        storage::parse_location(warehouse_url)?;
        Ok(Self::with_stores(
            Stores::new(),
            catalog_url.trim_end_matches('/').to_string(),
            warehouse_url.trim_end_matches('/').to_string(),
        ))
    }

    fn with_stores(stores: Stores, catalog_url: String, warehouse_url: String) -> Catalog {
        let file_io = storage::file_io(&stores);
        Catalog {
            inner: Arc::new(Inner {
                stores,
                catalog_url,
                warehouse_url,
                file_io,
                failpoint: Mutex::new(None),
                newest: Mutex::new(None),
                floor_seen: AtomicU64::new(0),
                parsed: Default::default(),
                manifest_headers: Default::default(),
                snapshot_json: Default::default(),
                arrow_schemas: Default::default(),
            }),
        }
    }

    /// The catalog root location.
    pub fn catalog_url(&self) -> &str {
        &self.inner.catalog_url
    }

    /// The warehouse root location (tables live under `<warehouse>/<namespace>/<table>`).
    pub fn warehouse_url(&self) -> &str {
        &self.inner.warehouse_url
    }

    /// Whether `location` is the warehouse or lies under it: whole path segments, the same
    /// store, compared as objects the way reads and writes resolve them (the rule orphan removal
    /// sweeps by). A location that does not resolve is not.
    pub(crate) fn inside_warehouse(&self, location: &str) -> bool {
        let key = |l: &str| crate::maintenance::ObjectKey::of(self.stores(), l).ok();
        match (key(location), key(self.warehouse_url())) {
            (Some(at), Some(warehouse)) => at.is_under(&warehouse),
            _ => false,
        }
    }

    /// Refuse ([`LakeError::OutsideWarehouse`]) a write to `table` at `location` unless the
    /// location is [inside the warehouse](Catalog::inside_warehouse).
    pub(crate) fn check_inside_warehouse(&self, table: &str, location: &str) -> Result<()> {
        if self.inside_warehouse(location) {
            return Ok(());
        }
        Err(LakeError::OutsideWarehouse {
            table: table.to_string(),
            location: location.to_string(),
            warehouse: self.warehouse_url().to_string(),
        })
    }

    /// The `FileIO` every table of this catalog uses.
    pub fn file_io(&self) -> &FileIO {
        &self.inner.file_io
    }

    pub(crate) fn stores(&self) -> &Stores {
        &self.inner.stores
    }

    /// Make the next commits fail at `point` (tests and crash drills). `None` clears it.
    pub fn set_failpoint(&self, point: Option<Failpoint>) {
        if let Ok(mut f) = self.inner.failpoint.lock() {
            *f = point;
        }
    }

    pub(crate) fn check_failpoint(&self, point: Failpoint) -> Result<()> {
        let armed = self
            .inner
            .failpoint
            .lock()
            .map(|f| *f == Some(point))
            .unwrap_or(false);
        if armed {
            return Err(LakeError::Injected(match point {
                Failpoint::AfterDataFiles => "after-data-files",
                Failpoint::AfterMetadataFiles => "after-metadata-files",
            }));
        }
        Ok(())
    }

    /// Read catalog version `n` (0 is the empty catalog). Expired versions (below the floor)
    /// are [`LakeError::NoSuchVersion`].
    pub async fn version(&self, n: u64) -> Result<CatalogVersion> {
        if n == 0 {
            return Ok(CatalogVersion::empty());
        }
        match self.read_kept_version(n).await? {
            Some(v) => Ok(v),
            None => {
                let latest = self.latest_version_number().await?;
                Err(LakeError::NoSuchVersion { version: n, latest })
            }
        }
    }

    /// The newest version number (0 when nothing was ever committed).
    pub async fn latest_version_number(&self) -> Result<u64> {
        Ok(self
            .find_head()
            .await?
            .0
            .map(|s| s.version.version)
            .unwrap_or(0))
    }

    /// The newest catalog version.
    pub async fn head(&self) -> Result<CatalogVersion> {
        Ok(match self.find_head().await?.0 {
            Some(s) => s.version.clone(),
            None => CatalogVersion::empty(),
        })
    }

    /// Every version still kept, oldest first, through the newest (versions removed by
    /// [`Catalog::expire_versions`] are left out).
    pub async fn log(&self) -> Result<Vec<CatalogVersion>> {
        let (head, floor) = self.find_head().await?;
        let head = match head {
            Some(s) => s.version.clone(),
            None => CatalogVersion::empty(),
        };
        let listed = self.list_versions().await?;
        let mut out = Vec::with_capacity(listed.len());
        for n in listed
            .into_iter()
            .filter(|n| *n >= floor && *n < head.version)
        {
            // `None`: expired by another handle between the listing and the read.
            if let Some(b) = self.version_bytes(n).await? {
                out.push(crate::log::parse_version(&self.version_location(n), &b, n)?);
            }
        }
        if head.version > 0 {
            out.push(head);
        }
        Ok(out)
    }

    /// The tables of the newest version, by name.
    pub async fn list_tables(&self) -> Result<Vec<TableName>> {
        let head = self.head().await?;
        head.tables.keys().map(|k| TableName::parse(k)).collect()
    }

    /// Load a table as of the newest catalog version.
    pub async fn table(&self, name: &str) -> Result<Table> {
        let head = self.head().await?;
        self.table_in(&head, name).await
    }

    /// Load a table as it was in catalog version `version`.
    pub async fn table_at_version(&self, name: &str, version: u64) -> Result<Table> {
        let v = self.version(version).await?;
        self.table_in(&v, name).await
    }

    /// A table as `committed` left it, without reading it back: how a writer continues from
    /// its own commit. `None` when that commit did not update `name`.
    pub fn table_after(&self, committed: &Committed, name: &str) -> Result<Option<Table>> {
        let name = TableName::parse(name)?;
        let key = name.to_string();
        let (Some((md, refs)), Some(Some(location))) =
            (committed.metadata.get(&key), committed.tables.get(&key))
        else {
            return Ok(None);
        };
        self.table_with(
            name,
            md.clone(),
            location.clone(),
            committed.version,
            refs.clone(),
        )
        .map(Some)
    }

    /// A read-only view of a table as a staged, uncommitted change would leave it: scan it,
    /// read its snapshots and refs, to build the next stage of a multi-table commit on data
    /// that is not committed yet (`None` for a change that installs no metadata). Its metadata
    /// location is a placeholder no commit can take for a base, so a change staged on the view
    /// itself is refused as a conflict; stage on the real table instead.
    pub fn staged_view(&self, change: &TableChange) -> Result<Option<Table>> {
        let Some(md) = change.metadata() else {
            return Ok(None);
        };
        let base = change
            .base
            .clone()
            .unwrap_or_else(|| self.default_table_location(&change.table));
        let location = format!(
            "{base}#staged-{}",
            change
                .snapshot_id
                .map(|s| s.to_string())
                .unwrap_or_default()
        );
        // Version 0: a view belongs to no catalog version.
        self.table_with(
            change.table.clone(),
            Arc::new(md.clone()),
            location,
            0,
            change.refs.clone(),
        )
        .map(Some)
    }

    /// Load a table from an already-read catalog version.
    pub async fn table_in(&self, v: &CatalogVersion, name: &str) -> Result<Table> {
        let name = TableName::parse(name)?;
        let entry = v
            .tables
            .get(&name.to_string())
            .ok_or_else(|| LakeError::NoSuchTable {
                table: name.to_string(),
                version: v.version,
            })?;
        let (md, refs) = self
            .read_metadata_and_refs(&name, &entry.metadata_location)
            .await?;
        self.table_with(
            name,
            md,
            entry.metadata_location.clone(),
            v.version,
            Some(refs),
        )
    }

    pub(crate) async fn read_metadata(
        &self,
        name: &TableName,
        location: &str,
    ) -> Result<TableMetadata> {
        Ok(self
            .read_metadata_and_refs(name, location)
            .await?
            .0
            .as_ref()
            .clone())
    }

    /// A table's metadata and its refs, parsed once per handle (a metadata file is never
    /// rewritten). Iceberg keeps the ref map private, so the same bytes are read a second time
    /// into a struct holding only the refs (cheaper than serialising the whole metadata again
    /// to find them).
    pub(crate) async fn read_metadata_and_refs(
        &self,
        name: &TableName,
        location: &str,
    ) -> Result<(Arc<TableMetadata>, Arc<RefMap>)> {
        self.metadata_cached(location, || async {
            let bad = |detail: String| LakeError::BadMetadata {
                table: name.to_string(),
                location: location.to_string(),
                detail,
            };
            let bytes = storage::read_optional(self.stores(), location)
                .await?
                .ok_or_else(|| bad("file does not exist".into()))?;
            let md =
                serde_json::from_slice::<TableMetadata>(&bytes).map_err(|e| bad(e.to_string()))?;
            let (refs, snapshots) =
                refs_and_snapshots_of(&bytes).map_err(|e| bad(e.to_string()))?;
            // The next commit of this table copies each snapshot's JSON from the file instead
            // of writing it again (see `metadata_json`).
            self.inner.snapshot_json.keep_read(&md, &snapshots);
            Ok((md, refs, bytes.len() as u64))
        })
        .await
    }

    /// A table from metadata already read, with its refs when the caller knows them.
    fn table_with(
        &self,
        name: TableName,
        md: Arc<TableMetadata>,
        location: String,
        version: u64,
        refs: Option<Arc<RefMap>>,
    ) -> Result<Table> {
        let runtime = iceberg::Runtime::try_current()
            .map_err(|e| LakeError::iceberg("the lake needs a tokio runtime", e))?;
        let ident = TableIdent::new(
            NamespaceIdent::new(name.namespace.clone()),
            name.table.clone(),
        );
        let t = IcebergTable::builder()
            .file_io(self.inner.file_io.clone())
            .metadata(md)
            .metadata_location(location)
            .identifier(ident)
            .runtime(runtime)
            .build()
            .map_err(|e| LakeError::iceberg(format!("opening {name}"), e))?;
        Ok(Table::new(self.clone(), name, t, version, refs))
    }

    /// The location new tables get: `<warehouse>/<namespace>/<table>`.
    pub fn default_table_location(&self, name: &TableName) -> String {
        storage::join(
            &self.inner.warehouse_url,
            &format!("{}/{}", name.namespace, name.table),
        )
    }

    /// Commit staged changes to any number of tables as one new catalog version.
    ///
    /// Writes each table's new metadata file, then the version with create-if-absent. If another
    /// writer took the version first, re-reads the log: when none of our tables moved, it commits
    /// on the new base; when one did, it returns [`LakeError::Conflict`] naming the table. When
    /// the store leaves the outcome in doubt and reading the version back cannot settle it, it
    /// returns [`LakeError::CommitOutcomeUnknown`] and deletes nothing it wrote. When its version
    /// landed but was expired, with the one after it, before this writer could look (it may
    /// have been built on), the tables it changed settle whether it was in the log: their
    /// metadata logs name ours (done: the version it had) or show another writer's commit right
    /// after the metadata we started from (retried as above); when neither is left to read, the
    /// outcome is unknown rather than risk applying the change twice.
    pub async fn commit(
        &self,
        changes: Vec<TableChange>,
        operation: &str,
        message: &str,
        properties: BTreeMap<String, String>,
    ) -> Result<Committed> {
        let mut seen = std::collections::BTreeSet::new();
        for change in &changes {
            if !seen.insert(change.table.to_string()) {
                return Err(LakeError::ChangedTwice {
                    table: change.table.to_string(),
                });
            }
        }
        // 1. New metadata files, each under a fresh unique name (never overwritten), a few at
        //    a time (a publish moves every table of the lake in one commit).
        //    Each is serialised and written on a task of its own, so the JSON of many tables
        //    is encoded on every core rather than on the committer's thread; the change goes to
        //    the task and comes back with what it wrote.
        const AT_ONCE: usize = 8;
        let tasks = changes.into_iter().map(|change| {
            let catalog = self.clone();
            let ctx = format!("writing the new metadata of {}", change.table);
            async move {
                crate::read::spawned(&ctx, async move {
                    let written = catalog.write_change_metadata(&change).await;
                    (change, written)
                })
                .await
            }
        });
        let joined: Vec<_> = futures::stream::iter(tasks)
            .buffered(AT_ONCE)
            .collect()
            .await;
        let mut changes = Vec::with_capacity(joined.len());
        let mut results: Vec<Result<Option<NewMetadata>>> = Vec::with_capacity(joined.len());
        let mut failed = None;
        for j in joined {
            match j {
                Ok((change, result)) => {
                    changes.push(change);
                    results.push(result);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        let mut new_locations: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut snapshots = BTreeMap::new();
        let mut written = Vec::new();
        let mut kept = BTreeMap::new();
        for (change, result) in changes.iter().zip(results) {
            let key = change.table.to_string();
            if let Some(s) = change.snapshot_id {
                snapshots.insert(key.clone(), s);
            }
            let loc = match (&change.kind, result) {
                (ChangeKind::Update(_), Ok(Some(w))) => {
                    written.push(w.location.clone());
                    let loc = w.location.clone();
                    kept.insert(key.clone(), w);
                    Some(loc)
                }
                (ChangeKind::Update(_), Ok(None)) => None,
                (ChangeKind::Update(_), Err(e)) => {
                    failed.get_or_insert(e);
                    None
                }
                (ChangeKind::Register(loc), _) => Some(loc.clone()),
                (ChangeKind::Drop, _) => None,
            };
            new_locations.insert(key, loc);
        }
        if let Some(e) = failed {
            // No version names these yet: they are ours to remove.
            self.delete_all(&written).await;
            return Err(e);
        }
        // Never name a file that is not there (an over-eager orphan sweep, a lost upload).
        if let Err(e) = self.check_added_files(&changes).await {
            self.delete_all(&written).await;
            return Err(e);
        }
        // A crash here leaves only orphans: no version names these files.
        self.check_failpoint(Failpoint::AfterMetadataFiles)?;

        // 2. The version, create-if-absent; on a lost race, re-check our tables and retry.
        let result = self
            .commit_version(&changes, &new_locations, operation, message, &properties)
            .await;
        match result {
            Ok(version) => {
                let mut metadata = BTreeMap::new();
                for c in changes {
                    let ChangeKind::Update(md) = c.kind else {
                        continue;
                    };
                    let key = c.table.to_string();
                    let md = Arc::new(*md);
                    // The next reader of this file in this handle (the next step of a run, the
                    // next run of a season) takes the metadata just written rather than parse
                    // it back: the file never changes, and its bytes are this metadata's.
                    let mut refs = c.refs;
                    if let Some(w) = kept.remove(&key) {
                        self.keep_parsed_metadata(&w.location, md.clone(), w.refs.clone(), w.bytes);
                        refs = Some(w.refs);
                    }
                    metadata.insert(key, (md, refs));
                }
                Ok(Committed {
                    version,
                    tables: new_locations,
                    snapshots,
                    metadata,
                })
            }
            Err(Failed {
                error,
                may_be_named,
            }) => {
                // Only when no version of ours can be in the log are the files ours to delete.
                if !may_be_named {
                    self.delete_all(&written).await;
                }
                Err(error)
            }
        }
    }

    /// The new metadata file of an update (`None` for other changes).
    async fn write_change_metadata(&self, change: &TableChange) -> Result<Option<NewMetadata>> {
        let ChangeKind::Update(md) = &change.kind else {
            return Ok(None);
        };
        let (location, bytes) = self
            .write_metadata(
                &change.table,
                md,
                change.base.as_deref(),
                change.refs.as_deref(),
            )
            .await?;
        // What the commit keeps for the next reader is the metadata as written; lake's own
        // tests check that a reader of the file parses exactly that (not every debug build:
        // parsing every commit back cost the season tests of crates using lake about a fifth).
        #[cfg(test)]
        {
            let parsed: std::result::Result<TableMetadata, _> = serde_json::from_slice(&bytes);
            assert!(
                parsed.as_ref().is_ok_and(|p| p == md.as_ref()),
                "the metadata of {} written to {location} parses back differently",
                change.table
            );
        }
        // Refs the writer did not pass are read from the bytes, as a reader of the file would.
        let refs = match &change.refs {
            Some(refs) => refs.clone(),
            None => Arc::new(refs_of(&bytes).map_err(|e| LakeError::BadMetadata {
                table: change.table.to_string(),
                location: location.clone(),
                detail: e.to_string(),
            })?),
        };
        Ok(Some(NewMetadata {
            location,
            refs,
            bytes: bytes.len() as u64,
        }))
    }

    async fn delete_all(&self, locations: &[String]) {
        for loc in locations {
            let _ = storage::delete(self.stores(), loc).await;
        }
    }

    /// Every data file the changes add must be in storage: HEAD requests, a few at a time.
    async fn check_added_files(&self, changes: &[TableChange]) -> Result<()> {
        const AT_ONCE: usize = 16;
        let mut checks = Vec::new();
        for change in changes {
            for f in &change.added_files {
                checks.push(self.check_data_file(&change.table, f));
            }
        }
        futures::stream::iter(checks)
            .buffer_unordered(AT_ONCE)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
    }

    async fn check_data_file(&self, table: &TableName, file: &str) -> Result<()> {
        match storage::read_head(self.stores(), file).await? {
            Some(_) => Ok(()),
            None => Err(LakeError::MissingDataFile {
                table: table.to_string(),
                file: file.to_string(),
            }),
        }
    }

    async fn commit_version(
        &self,
        changes: &[TableChange],
        new_locations: &BTreeMap<String, Option<String>>,
        operation: &str,
        message: &str,
        properties: &BTreeMap<String, String>,
    ) -> std::result::Result<u64, Failed> {
        let mut landed = false;
        let fail = |error: LakeError, landed: bool| Failed {
            may_be_named: landed || matches!(error, LakeError::CommitOutcomeUnknown { .. }),
            error,
        };
        let mut last = 0;
        // The version of ours that landed, was found below the floor with nothing after it,
        // and may have been built on before it expired (see `Written::Expired`).
        let mut expired: Option<u64> = None;
        for _attempt in 0..MAX_COMMIT_ATTEMPTS {
            let (head, floor) = self
                .find_head_for_commit()
                .await
                .map_err(|e| fail(e, landed))?;
            let head_version = head
                .as_ref()
                .map(|s| s.version.clone())
                .unwrap_or_else(CatalogVersion::empty);
            // A table of ours moved: if our expired version had been in the log, that is our
            // own change, and committing it again would apply it twice (an append's files
            // named twice). Settle it from the tables' metadata logs first.
            let moved = || {
                changes.iter().any(|c| {
                    head_version
                        .tables
                        .get(&c.table.to_string())
                        .map(|e| e.metadata_location.as_str())
                        != c.base.as_deref()
                })
            };
            if let Some(n) = expired
                && moved()
            {
                match self
                    .settle_expired(changes, new_locations, &head_version)
                    .await
                {
                    Some(true) => return Ok(n),
                    Some(false) => {}
                    None => {
                        return Err(fail(
                            LakeError::CommitOutcomeUnknown {
                                version: n,
                                detail: format!(
                                    "version {n} landed, but the log was expired past it and past the version after it before this writer could tell whether that version was written on it, and no table it changed shows whether it was kept (nothing was retried; reload and check before committing again)"
                                ),
                            },
                            true,
                        ));
                    }
                }
            }
            for change in changes {
                let key = change.table.to_string();
                let found = head_version
                    .tables
                    .get(&key)
                    .map(|e| e.metadata_location.as_str());
                if found != change.base.as_deref() {
                    let detail = match (change.base.as_deref(), found) {
                        (None, Some(_)) => "the table was created by another writer".to_string(),
                        (Some(_), None) => "the table was dropped by another writer".to_string(),
                        (Some(b), Some(f)) => format!(
                            "another writer committed {f} after this writer read {b} (catalog version {})",
                            head_version.version
                        ),
                        (None, None) => "unexpected".to_string(),
                    };
                    return Err(fail(LakeError::Conflict { table: key, detail }, landed));
                }
            }
            let mut next = head_version;
            next.changed = new_locations.keys().cloned().collect();
            for (key, loc) in new_locations {
                match loc {
                    Some(l) => {
                        next.tables.insert(
                            key.clone(),
                            TableEntry {
                                metadata_location: l.clone(),
                            },
                        );
                        if let Ok(name) = TableName::parse(key) {
                            next.namespaces.entry(name.namespace.clone()).or_default();
                        }
                    }
                    None => {
                        next.tables.remove(key);
                    }
                }
            }
            last = next.version + 1;
            let next = stamp(next, operation, message, properties);
            match self.write_next(head.as_deref(), floor, next).await {
                Ok(Written::Won(s)) => return Ok(s.version.version),
                Ok(Written::Lost { landed: l }) => landed |= l,
                Ok(Written::Expired { version }) => {
                    landed = true;
                    expired = Some(version);
                }
                Err(e) => return Err(fail(e, landed)),
            }
        }
        Err(fail(
            LakeError::TooManyRetries {
                attempts: MAX_COMMIT_ATTEMPTS,
                version: last,
            },
            landed,
        ))
    }

    /// Whether our version that landed and expired (see `Written::Expired`) had been in the
    /// log, told by the tables it changed as the head has them: `Some(true)` when a table's
    /// current metadata is ours or lists ours in its metadata log, `Some(false)` when the log
    /// shows the metadata we started from followed by another writer's, `None` when no table
    /// tells (dropped since, its log trimmed past ours, a create or a drop of ours).
    ///
    /// Sound because every commit writes its metadata under a fresh name and records the one
    /// it was built on: ours can only ever follow our base, and only ours names our file.
    async fn settle_expired(
        &self,
        changes: &[TableChange],
        new_locations: &BTreeMap<String, Option<String>>,
        head: &CatalogVersion,
    ) -> Option<bool> {
        let mut answer = None;
        for change in changes {
            let key = change.table.to_string();
            let (Some(base), Some(Some(ours)), Some(found)) = (
                change.base.as_deref(),
                new_locations.get(&key),
                head.tables.get(&key).map(|e| e.metadata_location.as_str()),
            ) else {
                continue;
            };
            if found == ours {
                return Some(true);
            }
            let Ok((md, _)) = self.read_metadata_and_refs(&change.table, found).await else {
                continue;
            };
            let chain: Vec<&str> = md
                .metadata_log()
                .iter()
                .map(|l| l.metadata_file.as_str())
                .chain(std::iter::once(found))
                .collect();
            if chain.contains(&ours.as_str()) {
                return Some(true);
            }
            if chain
                .iter()
                .position(|l| *l == base)
                .is_some_and(|i| i + 1 < chain.len())
            {
                answer = Some(false);
            }
        }
        answer
    }

    /// Commit namespace properties (creating the namespace if needed).
    pub async fn set_namespace(
        &self,
        namespace: &str,
        properties: BTreeMap<String, String>,
    ) -> Result<u64> {
        TableName::check_part(namespace, namespace)?;
        let message = format!("set namespace {namespace}");
        self.edit_namespaces(&message, |next| {
            next.namespaces
                .insert(namespace.to_string(), properties.clone());
            Ok(())
        })
        .await
    }

    /// Remove an empty namespace.
    pub async fn drop_namespace(&self, namespace: &str) -> Result<u64> {
        let message = format!("drop namespace {namespace}");
        self.edit_namespaces(&message, |next| {
            if next.namespaces.remove(namespace).is_none() {
                return Err(LakeError::NoSuchNamespace(namespace.to_string()));
            }
            if next
                .tables
                .keys()
                .any(|k| k.split('.').next() == Some(namespace))
            {
                return Err(LakeError::NamespaceNotEmpty(namespace.to_string()));
            }
            Ok(())
        })
        .await
    }

    /// Commit a namespace edit of the newest version as the next one, retrying lost races (and
    /// settling doubtful puts by reading back, as [`Catalog::commit`] does).
    async fn edit_namespaces(
        &self,
        message: &str,
        edit: impl Fn(&mut CatalogVersion) -> Result<()>,
    ) -> Result<u64> {
        let mut last = 0;
        // A version of ours that may have been in the log before it expired (see
        // `Written::Expired`): the edit is applied again on the new head, which is the same
        // namespaces either way, unless the edit now fails (a drop whose namespace is gone),
        // which may be because ours landed.
        let mut expired = None;
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let (head, floor) = self.find_head_for_commit().await?;
            let mut next = head
                .as_ref()
                .map(|s| s.version.clone())
                .unwrap_or_else(CatalogVersion::empty);
            if let Err(e) = edit(&mut next) {
                return Err(match expired {
                    Some(version) => LakeError::CommitOutcomeUnknown {
                        version,
                        detail: format!(
                            "version {version} landed and expired before this writer could tell whether it was in the log; applied again on the head, the change now fails ({e})"
                        ),
                    },
                    None => e,
                });
            }
            next.changed = Vec::new();
            last = next.version + 1;
            let next = stamp(next, "namespace", message, &BTreeMap::new());
            match self.write_next(head.as_deref(), floor, next).await? {
                Written::Won(s) => return Ok(s.version.version),
                Written::Expired { version } => expired = Some(version),
                Written::Lost { .. } => {}
            }
        }
        Err(LakeError::TooManyRetries {
            attempts: MAX_COMMIT_ATTEMPTS,
            version: last,
        })
    }

    async fn write_metadata(
        &self,
        name: &TableName,
        md: &TableMetadata,
        base: Option<&str>,
        refs: Option<&RefMap>,
    ) -> Result<(String, Bytes)> {
        // Every change that writes metadata (appends, ref moves, expiry, a new location) lands
        // here: the last guard against writing into another lake's folder.
        self.check_inside_warehouse(&name.to_string(), md.location())?;
        let next_number = base.and_then(metadata_number).map(|n| n + 1).unwrap_or(0);
        let loc = storage::join(
            md.location(),
            &format!(
                "metadata/{next_number:05}-{}.metadata.json",
                uuid::Uuid::new_v4()
            ),
        );
        let bytes = crate::metadata_json::to_vec(md, refs, &self.inner.snapshot_json)
            .map_err(|e| LakeError::Other(format!("serialising metadata of {name}: {e}")))?;
        let bytes = Bytes::from(bytes);
        if !storage::put_if_absent(self.stores(), &loc, bytes.clone()).await? {
            return Err(LakeError::Other(format!(
                "metadata file {loc} already exists"
            )));
        }
        Ok((loc, bytes))
    }
}

/// The `NNNNN` of `…/metadata/NNNNN-<uuid>.metadata.json`.
fn metadata_number(location: &str) -> Option<u64> {
    let file = location.rsplit('/').next()?;
    file.split('-').next()?.parse().ok()
}

/// A table's new metadata file, as a commit wrote it.
struct NewMetadata {
    location: String,
    refs: Arc<RefMap>,
    bytes: u64,
}

/// Why a commit failed, and whether a version of it may be in the log (then the files it
/// wrote must stay).
struct Failed {
    error: LakeError,
    may_be_named: bool,
}

/// `next` with what every new version says about the commit that writes it, and a fresh id.
fn stamp(
    mut next: CatalogVersion,
    operation: &str,
    message: &str,
    properties: &BTreeMap<String, String>,
) -> CatalogVersion {
    next.committed_at_ms = chrono::Utc::now().timestamp_millis();
    next.operation = operation.to_string();
    next.message = message.to_string();
    next.properties = properties.clone();
    next.commit_id = Some(uuid::Uuid::new_v4().to_string());
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_numbers_come_from_file_names() {
        assert_eq!(
            metadata_number("file:///w/t/metadata/00007-abc.metadata.json"),
            Some(7)
        );
        assert_eq!(
            metadata_number("file:///w/t/metadata/x.metadata.json"),
            None
        );
    }

    #[tokio::test]
    async fn refs_read_from_the_bytes_are_the_refs_iceberg_reads() {
        let c = Catalog::in_memory();
        let schema = arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "id",
            arrow_schema::DataType::Int64,
            false,
        )]);
        let t = c.create_table("a.t", &schema, &[]).await.unwrap();
        let bytes = storage::read_optional(c.stores(), t.metadata_location())
            .await
            .unwrap()
            .unwrap();
        // No snapshot yet: no refs at all.
        assert_eq!(refs_of(&bytes).unwrap(), RefMap::new());
        let md: TableMetadata = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(refs_of(&bytes).unwrap(), crate::types::ref_map(&md));
        // Branches and tags, and `main` from the current snapshot when `refs` lacks it.
        let json = br#"{"refs": {"audit": {"snapshot-id": 7, "type": "branch"},
            "v1": {"snapshot-id": 5, "type": "tag", "max-ref-age-ms": 10}},
            "current-snapshot-id": 9}"#;
        let mut want = RefMap::from([
            ("audit".to_string(), (true, 7)),
            ("v1".to_string(), (false, 5)),
            ("main".to_string(), (true, 9)),
        ]);
        want.set_retention(
            "v1",
            iceberg::spec::SnapshotRetention::Tag {
                max_ref_age_ms: Some(10),
            },
        );
        assert_eq!(refs_of(json).unwrap(), want);
        assert_eq!(refs_of(json).unwrap().retention().len(), 1);
        assert_eq!(
            refs_of(br#"{"current-snapshot-id": -1}"#).unwrap(),
            RefMap::new()
        );
    }

    #[tokio::test]
    async fn the_hint_may_lag_but_the_log_decides() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let fresh = || Catalog::open_store(store.clone(), "memory:///c", "memory:///w");
        let c = fresh();
        assert_eq!(c.latest_version_number().await.unwrap(), 0);
        c.set_namespace("a", BTreeMap::new()).await.unwrap();
        c.set_namespace("b", BTreeMap::new()).await.unwrap();
        // A stale hint (as after a writer crashed before updating it) still finds the head.
        storage::put(c.stores(), &c.hint_location(), Bytes::from("1"))
            .await
            .unwrap();
        assert_eq!(fresh().latest_version_number().await.unwrap(), 2);
        // A hint past the end of the log is ignored.
        storage::put(c.stores(), &c.hint_location(), Bytes::from("9"))
            .await
            .unwrap();
        assert_eq!(fresh().latest_version_number().await.unwrap(), 2);
        // No hint at all: the listing finds it.
        storage::delete(c.stores(), &c.hint_location())
            .await
            .unwrap();
        assert_eq!(fresh().head().await.unwrap().namespaces.len(), 2);
        // A handle that saw version 2 finds version 3 another handle wrote.
        fresh().set_namespace("c", BTreeMap::new()).await.unwrap();
        assert_eq!(c.latest_version_number().await.unwrap(), 3);
    }
}
