//! Typed errors: every one names the table, ref, snapshot, version or file it is about.

use thiserror::Error;

/// Result with [`LakeError`].
pub type Result<T, E = LakeError> = std::result::Result<T, E>;

/// What went wrong in the lake, in terms a person can act on.
#[derive(Debug, Error)]
pub enum LakeError {
    /// The table name is not `namespace.table` made of letters, digits and `_`.
    #[error("invalid table name {name:?}: {detail}")]
    InvalidName { name: String, detail: String },

    /// The table name's namespace is a warehouse folder the lake does not own (the landing
    /// zone, the ground truth): a table there would put its files among them.
    #[error(
        "table name {name:?}: namespace {namespace:?} is reserved, tables live at <warehouse>/<namespace>/<table> and {detail}; choose another namespace"
    )]
    ReservedNamespace {
        name: String,
        namespace: String,
        detail: String,
    },

    /// No such table in the catalog version that was read.
    #[error("table {table} does not exist (catalog version {version})")]
    NoSuchTable { table: String, version: u64 },

    /// A table of that name already exists.
    #[error("table {0} already exists")]
    TableExists(String),

    /// No such namespace.
    #[error("namespace {0} does not exist")]
    NoSuchNamespace(String),

    /// The namespace still holds tables.
    #[error("namespace {0} is not empty")]
    NamespaceNotEmpty(String),

    /// A branch or tag the caller named is not in the table.
    #[error("table {table} has no {kind} named {name:?}")]
    NoSuchRef {
        table: String,
        kind: &'static str,
        name: String,
    },

    /// A ref that should be created already exists.
    #[error("table {table} already has a ref named {name:?}")]
    RefExists { table: String, name: String },

    /// A snapshot id the caller named is not in the table.
    #[error("table {table} has no snapshot {snapshot_id}")]
    NoSuchSnapshot { table: String, snapshot_id: i64 },

    /// A catalog version that does not exist.
    #[error("catalog version {version} does not exist (the latest is {latest})")]
    NoSuchVersion { version: u64, latest: u64 },

    /// The catalog has never been written.
    #[error("no catalog at {0} (run a command that creates tables first)")]
    NoCatalog(String),

    /// A catalog version written by a newer sugarshack.
    #[error(
        "catalog version file {location} has format {found}; this build reads up to {supported}"
    )]
    UnsupportedFormat {
        location: String,
        found: u32,
        supported: u32,
    },

    /// A catalog version file that cannot be parsed.
    #[error("malformed catalog version file {location}: {detail}")]
    BadCatalogVersion { location: String, detail: String },

    /// A table metadata file that is missing, truncated or not Iceberg metadata.
    #[error("malformed table metadata {location} (table {table}): {detail}")]
    BadMetadata {
        table: String,
        location: String,
        detail: String,
    },

    /// Another writer changed the table since this writer read it.
    #[error("commit conflict on {table}: {detail}; reload the table and retry")]
    Conflict { table: String, detail: String },

    /// Catalog versions kept being taken by other writers.
    #[error(
        "commit gave up after {attempts} attempts: catalog version {version} kept being taken by other writers"
    )]
    TooManyRetries { attempts: u32, version: u64 },

    /// A fast-forward whose target does not descend from the branch head.
    #[error(
        "cannot fast-forward {table} branch {branch:?} from snapshot {from} to {to}: {from} is not an ancestor of {to}"
    )]
    NotFastForward {
        table: String,
        branch: String,
        from: i64,
        to: i64,
    },

    /// An incremental read across a snapshot that did not only append.
    #[error(
        "incremental read of {table}: snapshot {snapshot_id} is a {operation}, not an append; read the branch in full instead"
    )]
    NotAppendOnly {
        table: String,
        snapshot_id: i64,
        operation: String,
    },

    /// An incremental read from a branch's start, where snapshots of its ancestry were expired:
    /// what they added cannot be read snapshot by snapshot.
    #[error(
        "incremental read of {table} from the start: snapshot {snapshot_id} of its ancestry was expired; read the branch in full instead"
    )]
    HistoryExpired { table: String, snapshot_id: i64 },

    /// A snapshot whose rows are not just the rows of its data files (it has delete files), where
    /// a caller asked for its data files' differences.
    #[error(
        "{table} at snapshot {snapshot_id} has delete files: its rows are not the rows of its data files alone; read it whole instead"
    )]
    HasDeleteFiles { table: String, snapshot_id: i64 },

    /// `after` is not an ancestor of `through` on the branch.
    #[error("incremental read of {table}: snapshot {after} is not an ancestor of {through}")]
    NotAncestor {
        table: String,
        after: i64,
        through: i64,
    },

    /// Rows that do not fit the table's schema.
    #[error("rows do not fit table {table}: {detail}")]
    Schema { table: String, detail: String },

    /// A location that is not a usable URL or path.
    #[error("bad location {location}: {detail}")]
    Location { location: String, detail: String },

    /// Reading or writing an object failed.
    #[error("storage error at {location}: {source}")]
    Store {
        location: String,
        #[source]
        source: Box<object_store::Error>,
    },

    /// An error from the Iceberg library, with what we were doing.
    #[error("{context}: {source}")]
    Iceberg {
        context: String,
        #[source]
        source: Box<iceberg::Error>,
    },

    /// An Arrow error, with what we were doing.
    #[error("{context}: {source}")]
    Arrow {
        context: String,
        #[source]
        source: Box<arrow_schema::ArrowError>,
    },

    /// A DataFusion error (planning or running SQL).
    #[error("{0}")]
    DataFusion(Box<datafusion::error::DataFusionError>),

    /// A write aimed at a tag: only branches take snapshots.
    #[error("table {table}: {name:?} is a tag; only branches take writes")]
    WriteToTag { table: String, name: String },

    /// `main` is what readers see: it can be moved, never removed.
    #[error("table {table}: the main branch cannot be removed")]
    CannotRemoveMain { table: String },

    /// A commit names a data file that is not in storage (a lost upload, an over-eager sweep).
    #[error("commit to {table} refused: its data file {file} is missing")]
    MissingDataFile { table: String, file: String },

    /// One catalog commit carries two changes to the same table.
    #[error("one commit changes table {table} twice")]
    ChangedTwice { table: String },

    /// Table metadata of a format version this build does not write correctly.
    #[error(
        "table {table} ({location}) is Iceberg format v{found}; sugarshack reads and writes v2 only"
    )]
    UnsupportedTableFormat {
        table: String,
        location: String,
        found: u8,
    },

    /// A write to a table whose location lies outside this catalog's warehouse. Iceberg metadata
    /// records absolute paths, so a lake folder copied (or moved) still names the original's
    /// folders, and a table registered from another lake lives in that lake's. Written here,
    /// its files would land where this lake never sweeps and the other lake's orphan removal
    /// deletes them. Reads stay allowed.
    #[error(
        "{table} is read-only in this lake: it lives at {location}, outside this lake's warehouse {warehouse} (a lake folder copied or moved still names the original's folders: Iceberg metadata records absolute paths; a table registered from another lake stays that lake's). Writing would put this lake's files in a folder whose own maintenance deletes them as orphans; nothing was written"
    )]
    OutsideWarehouse {
        table: String,
        location: String,
        warehouse: String,
    },

    /// A write that cannot honour the table's delete files (position or equality deletes).
    #[error("table {table}: {detail}")]
    DeleteFilesUnsupported { table: String, detail: String },

    /// The catalog store failed in a way that leaves a commit's outcome unknown, and reading the
    /// log back could not settle it. Nothing written was deleted; re-read the log before retrying.
    #[error("the outcome of the commit of catalog version {version} is unknown: {detail}")]
    CommitOutcomeUnknown { version: u64, detail: String },

    /// The catalog log is missing a version below its head (a file deleted by hand, a damaged
    /// store): a writer that took the version before the hole for the head wrote into it. Its
    /// version was taken back; nothing was committed.
    #[error(
        "commit refused, nothing was committed: catalog version {version} was missing below version {next}, which does not follow from what was written there (`sugarshack verify` names the gap)"
    )]
    LogGap { version: u64, next: u64 },

    /// A merge's incoming rows hold one key more than once: which of them wins is not defined.
    #[error("merge into {table} refused: the incoming rows hold key {key} more than once")]
    DuplicateMergeKey { table: String, key: String },

    /// Orphan removal deleted nothing: a file the kept catalog versions name could not be read,
    /// so what it reaches is unknown (`verify` names every such file).
    #[error(
        "orphan removal refused: {count} file(s) the kept catalog versions name could not be read, so what they reach is unknown; the first: {first} (run verify)"
    )]
    UnreadableReach { count: usize, first: String },

    /// The store cannot write an object only if it is absent (S3 `If-None-Match: *`), so two
    /// writers could both win one catalog version: the lake refuses to write there.
    #[error(
        "the store at {location} cannot create objects only if absent ({detail}); the catalog needs that to keep two writers from both committing"
    )]
    NoCreateIfAbsent { location: String, detail: String },

    /// A local file or folder could not be flushed to disk. Before a catalog version is written
    /// this fails the commit (nothing names the file); after, the commit's outcome is reported
    /// unknown (see `LAKE_FSYNC`).
    #[error("could not flush {path} to disk: {detail}")]
    NotDurable { path: String, detail: String },

    /// A failure injected on purpose by a test or a crash drill.
    #[error("injected failure at {0}")]
    Injected(&'static str),

    /// Anything else, with its context.
    #[error("{0}")]
    Other(String),
}

impl LakeError {
    pub(crate) fn store(location: impl Into<String>, source: object_store::Error) -> Self {
        LakeError::Store {
            location: location.into(),
            source: Box::new(source),
        }
    }

    pub(crate) fn iceberg(context: impl Into<String>, source: iceberg::Error) -> Self {
        LakeError::Iceberg {
            context: context.into(),
            source: Box::new(source),
        }
    }

    pub(crate) fn arrow(context: impl Into<String>, source: arrow_schema::ArrowError) -> Self {
        LakeError::Arrow {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// True for errors a writer resolves by reloading and retrying.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            LakeError::Conflict { .. } | LakeError::TooManyRetries { .. }
        )
    }
}

impl From<datafusion::error::DataFusionError> for LakeError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        LakeError::DataFusion(Box::new(e))
    }
}
