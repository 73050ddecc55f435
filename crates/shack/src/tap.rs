//! The tap: landing files in, bronze out, on the `audit` branch, in one catalog commit.
//!
//! A tap
//! 1. lists the landing files of every source that had arrived by `through` (the name says
//!    when); a warehouse without a `landing/` folder, or whose `landing/` holds no landing file
//!    at all, is an error ([`ShackError::NoLandingZone`]) naming the folder, before anything is
//!    touched;
//! 2. removes orphans: files under the tables that no catalog version names and that are older
//!    than the grace period (what a crashed run left), and reports how many;
//! 3. creates the bronze tables on first use (one commit, before any data);
//! 4. reads `bronze.landing_files` at the branch: what each recorded name held when last looked
//!    at (hash, size, when) and the hashes of the files whose lines are in bronze;
//! 5. for every listed file whose name it has not seen, and every recorded one that may have
//!    been rewritten in place since (see below): hashes it; a recorded file with its recorded
//!    bytes is left alone; the same bytes as a tapped file of that source make it a duplicate
//!    (recorded with its original, not read again); otherwise streams its lines into Arrow
//!    batches of bounded size and writes them as data files as it goes;
//! 6. stages one snapshot per source that has new files, then one of `bronze.landing_files`
//!    naming each file with the snapshot that holds it (once that table holds
//!    [`LEDGER_FILES_KEPT`] data files, its rows are written back with the new ones as one
//!    file), and commits them all as one catalog version. Before that commit no reader can see
//!    any of it; after it, all of it.
//!
//! Nothing new means nothing written and nothing committed: the same `through` twice leaves the
//! catalog, the tables and the files on disk exactly as they were.
//!
//! ## A landing file rewritten in place
//! Landing files are meant to be written once. One that is rewritten after the tap recorded it
//! (same name, other bytes) is never skipped silently and never lost: its new bytes are a new
//! version, recorded as `changed` in `bronze.landing_files` and tapped into `bronze.<source>`
//! next to the old lines (same `_landing_file`, another `_file_sha256`; when the new bytes are
//! those of a file already tapped, they are recorded with that original and not read again), and
//! the report warns ([`TapReport::changed`]). The next tap sees the new version as recorded and
//! leaves it alone.
//!
//! A recorded file is not hashed again on every run (that would read the whole landing zone each
//! time): only when its size differs from the recorded one, or its modification time is not
//! at least [`MTIME_SLACK`] before the start of the run that recorded it (the slack covers coarse
//! file system clocks). A rewrite that keeps both the size and an old modification time (a copy
//! that preserves times, e.g. `cp -p`) is therefore not seen, as with `make` or `rsync`. A
//! recorded file that has since disappeared is left alone too: its lines are in bronze already.
//! A file recorded within the slack of its last write (tapped as it landed) is hashed again by
//! later taps; the first one that finds its bytes unchanged once that write is safely older than
//! the run records it (`verified`) when it commits, so a tap's reading follows what is new, not
//! how many files were ever tapped soon after they landed.
//!
//! ## The grace period
//! Orphan removal cannot tell a crashed tap's files from those of a writer that is still
//! running: both are files no catalog version names yet. Age is the only safe signal, so a file
//! is removed only once it is older than [`TapOptions::orphan_grace`] (default one hour), and a
//! tap refuses to commit if it spent more than half that grace writing (so its own files are
//! always well inside the grace of any concurrent tap's sweep). A crashed tap's debris is
//! invisible to readers meanwhile (they follow metadata, never folders) and is removed by the
//! first tap after it has aged past the grace. A zero grace removes every unnamed file at once:
//! right only when nothing else writes to the lake (a test, a crash drill, a laptop).
//!
//! A tap never deletes its own files when a commit fails: a failed commit may have landed (a
//! timeout after the write), and deleting files a committed version names would corrupt it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use chrono::{DateTime, Timelike, Utc};
use lake::iceberg::spec::DataFile;
use lake::{At, Catalog, LakeError, Replace, Table, TableChange};
use serde::Serialize;
use sugarbush::{LandedFile, Progress, Seen, Source};

use crate::bronze::{
    self, LANDING_FILES, STATUS_CHANGED, STATUS_DUPLICATE, STATUS_TAPPED, STATUS_VERIFIED, props,
};
use crate::error::{Result, ShackError};
use crate::lines::{self, LineReader, Lineage, RowBuffer};

/// How a tap runs.
#[derive(Clone, Debug)]
pub struct TapOptions {
    /// The branch the tap commits to (created from `main`'s head on first use).
    pub branch: String,
    /// Unnamed files younger than this are left alone by the orphan sweep: a writer may still be
    /// about to commit them. See the module docs.
    pub orphan_grace: Duration,
    /// Sweep orphans before tapping (default). A sweep reads every kept catalog version's
    /// metadata and manifests, so its cost grows with the lake's history; [`crate::run`] turns
    /// it off unless an earlier run was interrupted (see its docs).
    pub sweep_orphans: bool,
    /// Refuse, before writing anything, when bronze on the branch already holds a landing file
    /// that arrived after `through`. A run sets it: its publish says "as of `through`", and
    /// silver is boiled from all of bronze, so a file tapped earlier by a tap further ahead (or
    /// kept across a rollback) would be published under an as-of it arrived after.
    pub refuse_later_arrivals: bool,
    /// At most this many lines per Arrow batch (and so per data file write).
    pub max_batch_rows: usize,
    /// At most about this many bytes of lines per Arrow batch.
    pub max_batch_bytes: usize,
}

impl Default for TapOptions {
    fn default() -> Self {
        TapOptions {
            branch: bronze::AUDIT_BRANCH.to_string(),
            orphan_grace: Duration::from_secs(60 * 60),
            sweep_orphans: true,
            refuse_later_arrivals: false,
            max_batch_rows: 64 * 1024,
            max_batch_bytes: 64 * 1024 * 1024,
        }
    }
}

/// One source's batch: the snapshot that made its new lines visible.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BatchReport {
    pub source: Source,
    /// `bronze.<source>`.
    pub table: String,
    /// The snapshot that is the batch: its id is the watermark downstream models keep.
    pub snapshot_id: i64,
    /// Its sequence number: the batch's place in the table's visibility order.
    pub sequence_number: i64,
    /// Landing files tapped.
    pub files: usize,
    /// Lines tapped.
    pub rows: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Parquet data files written.
    pub data_files: usize,
}

/// A landing file with the same bytes as one already tapped: recorded, not tapped again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DuplicateReport {
    pub source: Source,
    /// The re-sent file, relative to `landing/`.
    pub file: String,
    /// The tapped file with the same bytes.
    pub original_file: String,
    pub sha256: String,
}

/// A warning: a recorded landing file that was rewritten in place (same name, other bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChangedReport {
    pub source: Source,
    /// The rewritten file, relative to `landing/`.
    pub file: String,
    /// What it held when bronze last recorded it.
    pub previous_sha256: String,
    /// What it holds now: the version this run recorded.
    pub sha256: String,
    /// Lines of the new version tapped into `bronze.<source>` (0 when `original_file` is set).
    pub lines: u64,
    /// When the new bytes are those of a file already tapped, that file: then they were recorded
    /// and not tapped again.
    pub original_file: Option<String>,
}

/// What a tap did, in the story's shape ([`TapReport::render`]) or as JSON (serde).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TapReport {
    /// Landing files that had arrived by this instant were considered.
    pub through: DateTime<Utc>,
    pub branch: String,
    /// This run's id, in every snapshot summary and `bronze.landing_files` row it wrote.
    pub tap_id: String,
    pub tapped_at: DateTime<Utc>,
    /// Bronze tables this run created.
    pub created_tables: Vec<String>,
    /// Files no catalog version named that the sweep removed.
    pub orphans_removed: usize,
    /// Files no catalog version named that the sweep kept: younger than the grace, or written
    /// since a writer that may still be at work began (another run's files, not yet committed).
    pub orphans_kept: usize,
    /// The grace period, in seconds.
    pub orphan_grace_secs: u64,
    /// One per source that had new files, in source order.
    pub batches: Vec<BatchReport>,
    /// Re-sent files recognised in this run.
    pub duplicates: Vec<DuplicateReport>,
    /// How many re-sent files were skipped (`duplicates.len()`).
    pub skipped_duplicates: usize,
    /// Warnings: recorded landing files rewritten in place since, found in this run. Their new
    /// versions are recorded as `changed` and (unless already in bronze) tapped.
    pub changed: Vec<ChangedReport>,
    /// The catalog version that committed this run; `None` when there was nothing to commit.
    pub catalog_version: Option<u64>,
}

impl TapReport {
    /// True when nothing had arrived (or changed) that bronze did not already know.
    pub fn nothing_new(&self) -> bool {
        self.batches.is_empty() && self.duplicates.is_empty() && self.changed.is_empty()
    }

    /// Lines tapped by this run, all sources.
    pub fn rows(&self) -> u64 {
        self.batches.iter().map(|b| b.rows).sum()
    }

    /// The story's lines, aligned, then a `warn` line per file rewritten in place:
    ///
    /// ```text
    /// as of 2026-08-16 23:59:59 UTC
    ///   tapped   orders       batch   1   384 files   43,035 rows
    ///   skipped  3 file(s) with the same bytes as one already in bronze
    ///   warn     orders/2026-08-16/….jsonl was rewritten after it was tapped (sha256 3f1a… now 9c0b…): its new version is tapped next to the old lines
    /// ```
    pub fn render(&self) -> String {
        let mut out = format!("as of {}\n", as_of(&self.through));
        if self.orphans_removed > 0 {
            out.push_str(&format!(
                "  removed  {} orphan file(s) that no commit names (left by a crashed run)\n",
                thousands(self.orphans_removed as u64)
            ));
        }
        if self.orphans_kept > 0 {
            out.push_str(&format!(
                "  kept     {} unnamed file(s) younger than the {} grace period or written since another writer still at work began (it may still commit them)\n",
                thousands(self.orphans_kept as u64),
                human_duration(self.orphan_grace_secs)
            ));
        }
        if self.nothing_new() {
            out.push_str("  nothing new has arrived\n");
            return out;
        }
        let seq_w = self
            .batches
            .iter()
            .map(|b| b.sequence_number.to_string().len())
            .max()
            .unwrap_or(0)
            .max(3);
        let files_w = self
            .batches
            .iter()
            .map(|b| thousands(b.files as u64).len())
            .max()
            .unwrap_or(0)
            .max(3)
            + 3;
        let rows_w = self
            .batches
            .iter()
            .map(|b| thousands(b.rows).len())
            .max()
            .unwrap_or(0)
            .max(6)
            + 3;
        for b in &self.batches {
            out.push_str(&format!(
                "  tapped   {:<12} batch {:>seq_w$}{:>files_w$} files{:>rows_w$} rows\n",
                b.source.as_str(),
                b.sequence_number,
                thousands(b.files as u64),
                thousands(b.rows),
            ));
        }
        if self.skipped_duplicates > 0 {
            out.push_str(&format!(
                "  skipped  {} file(s) with the same bytes as one already in bronze\n",
                thousands(self.skipped_duplicates as u64)
            ));
        }
        for c in &self.changed {
            let what = match &c.original_file {
                Some(o) => format!("its new bytes are those of {o}, already in bronze"),
                None => "its new version is tapped next to the old lines".to_string(),
            };
            out.push_str(&format!(
                "  warn     {} was rewritten after it was tapped (sha256 {}… now {}…): {what}\n",
                c.file,
                short_sha(&c.previous_sha256),
                short_sha(&c.sha256),
            ));
        }
        out
    }
}

/// The first 12 hex digits of a sha256: enough to tell two versions apart in a report.
fn short_sha(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn as_of(t: &DateTime<Utc>) -> String {
    if t.second() == 0 && t.nanosecond() == 0 {
        t.format("%Y-%m-%d %H:%M UTC").to_string()
    } else {
        t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
    }
}

/// `43035` → `43,035` (the season generator's grouping, so both reports agree).
pub use sugarbush::thousands;

fn human_duration(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A recorded file is hashed again when its modification time is later than this before the
/// start of the run that recorded it (or its size differs). See the module docs.
pub const MTIME_SLACK: Duration = Duration::from_secs(60);

/// What bronze already knows, from `bronze.landing_files` at the branch.
struct Known {
    /// Every landing file name recorded (in any status) → its latest record.
    names: HashMap<String, Recorded, Fold>,
    /// (source, sha256) of every file version whose lines are in bronze → its name.
    tapped: HashMap<(String, String), String, Fold>,
    /// The ledger's rows as read, and the data files that held them.
    ledger: Vec<RecordBatch>,
    ledger_files: BTreeSet<String>,
    /// The landing file in bronze that arrived last, and when (microseconds).
    latest_arrival: Option<(i64, String)>,
}

/// How many data files `bronze.landing_files` may hold before a tap writes its rows back as
/// one file with the new ones. Every tap reads the whole ledger (a few dozen rows a run), and
/// each run appended a file of its own: a late-season tap opened one small file per day of the
/// season. Compacted at this many, a tap reads at most this many files, and one tap in this
/// many rewrites the ledger (a few thousand rows a season at any scale: a row per landing file).
pub const LEDGER_FILES_KEPT: usize = 8;

/// The hasher of [`Known`]'s maps (keys taken from the tap's own ledger).
type Fold = foldhash::fast::RandomState;

/// What a landing file held when a tap last recorded it.
struct Recorded {
    sha256: String,
    bytes: i64,
    /// When the run that recorded it started, in µs since the epoch.
    tapped_at_us: i64,
}

impl Recorded {
    /// False when the file cannot have been rewritten since it was recorded: its size is the
    /// recorded one and it was last modified well before the recording run started (so the
    /// recorded hash was taken of these bytes). A file that is gone cannot hold anything new.
    /// `seen` is what this run's listing found (one lookup per file, relative to its folder).
    fn may_have_changed(&self, seen: Option<&Seen>) -> bool {
        let Some(seen) = seen else {
            return false;
        };
        if i64::try_from(seen.bytes).ok() != Some(self.bytes) {
            return true;
        }
        let Some(modified) = seen.modified else {
            // No modification times here: only the hash can tell.
            return true;
        };
        !written_before(modified, self.tapped_at_us)
    }
}

/// Whether a file last modified at `modified` was written at least [`MTIME_SLACK`] before the
/// instant `us` (µs since the epoch): a hash taken at `us` is of its final bytes.
fn written_before(modified: std::time::SystemTime, us: i64) -> bool {
    let modified_us = DateTime::<Utc>::from(modified).timestamp_micros();
    let slack_us = i64::try_from(MTIME_SLACK.as_micros()).unwrap_or(i64::MAX);
    modified_us <= us.saturating_sub(slack_us)
}

impl Known {
    async fn load(table: &Table, branch: &str) -> Result<Known> {
        let at = if table.head(branch).is_some() {
            At::reference(branch)
        } else {
            At::Main
        };
        // One snapshot for the rows and the files, so the files are exactly those the rows
        // came from (a compaction replaces them).
        let lake_err = |e| ShackError::lake(LANDING_FILES, e);
        let at = match table.resolve(&at).map_err(lake_err)? {
            Some(id) => At::Snapshot(id),
            None => at,
        };
        let batches = table.scan(&at).await.map_err(lake_err)?;
        let ledger_files = table
            .data_file_paths(&at)
            .await
            .map_err(lake_err)?
            .into_iter()
            .collect();
        // A row per landing file of the season: every tap builds these maps from the whole
        // ledger, so they are sized once and hash with foldhash, quicker than std's SipHash on
        // keys this long (a path; a source and a sha256).
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let mut known = Known {
            names: HashMap::with_capacity_and_hasher(rows, Fold::default()),
            tapped: HashMap::with_capacity_and_hasher(rows, Fold::default()),
            ledger: Vec::new(),
            ledger_files,
            latest_arrival: None,
        };
        for b in &batches {
            let file = string_column(b, "file")?;
            let source = string_column(b, "source")?;
            let status = string_column(b, "status")?;
            let sha = string_column(b, "sha256")?;
            let bytes = column::<Int64Array>(b, "bytes")?;
            let tapped_at = column::<TimestampMicrosecondArray>(b, "tapped_at")?;
            let original = column::<StringArray>(b, "original_file")?;
            let arrived_at = column::<TimestampMicrosecondArray>(b, "arrived_at")?;
            for i in 0..b.num_rows() {
                let name = file.value(i);
                // Lines in bronze: a tapped file, or a changed one whose bytes were new.
                let in_bronze = status.value(i) == STATUS_TAPPED
                    || (status.value(i) == STATUS_CHANGED && original.is_null(i));
                if in_bronze {
                    known.tapped.insert(
                        (source.value(i).to_string(), sha.value(i).to_string()),
                        name.to_string(),
                    );
                    if !arrived_at.is_null(i)
                        && known
                            .latest_arrival
                            .as_ref()
                            .is_none_or(|(us, _)| arrived_at.value(i) > *us)
                    {
                        known.latest_arrival = Some((arrived_at.value(i), name.to_string()));
                    }
                }
                if bytes.is_null(i) || tapped_at.is_null(i) {
                    return Err(ShackError::BadTable {
                        table: LANDING_FILES.to_string(),
                        detail: format!("the row of {name} has no bytes or tapped_at"),
                    });
                }
                let record = Recorded {
                    sha256: sha.value(i).to_string(),
                    bytes: bytes.value(i),
                    tapped_at_us: tapped_at.value(i),
                };
                // A name recorded more than once was rewritten in place: the latest row counts.
                match known.names.get(name) {
                    Some(r) if r.tapped_at_us >= record.tapped_at_us => {}
                    _ => {
                        known.names.insert(name.to_string(), record);
                    }
                }
            }
        }
        known.ledger = batches;
        Ok(known)
    }
}

/// A column of `bronze.landing_files` as the array type its schema says (nulls allowed).
fn column<'a, A: Array + 'static>(b: &'a RecordBatch, name: &str) -> Result<&'a A> {
    let col = b.column_by_name(name).ok_or_else(|| ShackError::BadTable {
        table: LANDING_FILES.to_string(),
        detail: format!("no column {name:?}"),
    })?;
    col.as_any()
        .downcast_ref::<A>()
        .ok_or_else(|| ShackError::BadTable {
            table: LANDING_FILES.to_string(),
            detail: format!(
                "column {name:?} is of an unexpected type {}",
                col.data_type()
            ),
        })
}

/// A string column of `bronze.landing_files` that holds no nulls.
fn string_column<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    let arr = column::<StringArray>(b, name)?;
    if arr.null_count() > 0 {
        return Err(ShackError::BadTable {
            table: LANDING_FILES.to_string(),
            detail: format!("column {name:?} holds nulls"),
        });
    }
    Ok(arr)
}

/// One landing file this run records in `bronze.landing_files`.
struct FileRecord {
    source: Source,
    file: String,
    /// `tapped`, `duplicate` or `changed`.
    status: &'static str,
    sha256: String,
    bytes: u64,
    lines: u64,
    arrived_at: DateTime<Utc>,
    original_file: Option<String>,
    /// For a file rewritten in place, the hash of its recorded version.
    previous_sha256: Option<String>,
}

/// One source's new lines, written and not yet committed.
struct Pending {
    source: Source,
    files: Vec<FileRecord>,
    rows: u64,
    bytes: u64,
    data_files: Vec<DataFile>,
}

/// A landing file to read, with the hash bronze recorded for its name when it was tapped before
/// (`None`: a name bronze has never seen).
type ToRead = (LandedFile, Option<String>);

/// Tap every landing file that had arrived by `through` into bronze, on `options.branch`.
///
/// `warehouse_root` holds `landing/` (as written by `sugarbush`); the catalog may live anywhere.
/// Returns what was tapped; on any error nothing was committed, and the files written so far are
/// orphans the next tap removes once they are older than the grace period.
pub async fn tap(
    catalog: &Catalog,
    warehouse_root: &Path,
    through: DateTime<Utc>,
    options: &TapOptions,
    progress: &(dyn Progress + Sync),
) -> Result<TapReport> {
    tap_as(catalog, warehouse_root, through, options, progress, None).await
}

/// [`tap`] as the marked work `mine` (a run's or a tap's): its sweep does not keep files for
/// that mark, since the work has written nothing yet.
pub(crate) async fn tap_as(
    catalog: &Catalog,
    warehouse_root: &Path,
    through: DateTime<Utc>,
    options: &TapOptions,
    progress: &(dyn Progress + Sync),
    mine: Option<&lake::WorkMark>,
) -> Result<TapReport> {
    let tapped_at = Utc::now();
    let tap_id = uuid::Uuid::now_v7().to_string();
    let branch = options.branch.as_str();

    // 1. What has arrived, before anything is touched: no landing zone is an error.
    let listed = list_landing(warehouse_root, through)?;

    // 2. Orphans first, before this run writes anything of its own.
    let orphans = if options.sweep_orphans {
        progress.message("removing orphans");
        let grace_ms = i64::try_from(options.orphan_grace.as_millis()).unwrap_or(i64::MAX);
        let now_ms = Utc::now().timestamp_millis();
        match mine {
            Some(mark) => catalog.remove_orphans_as(mark, now_ms, grace_ms).await,
            None => catalog.remove_orphans(now_ms, grace_ms).await,
        }
        .map_err(|e| ShackError::lake("the catalog", e))?
    } else {
        lake::OrphanReport::default()
    };

    // 3. The tables, all read at one catalog version.
    let (tables, created_tables) = open_tables(catalog).await?;
    let table = |name: &str| -> Result<&Table> {
        tables.get(name).ok_or_else(|| {
            ShackError::lake(
                name,
                LakeError::Other(format!("{name} is missing after creation")),
            )
        })
    };

    // 4. What bronze knows.
    let mut known = Known::load(table(LANDING_FILES)?, branch).await?;
    if options.refuse_later_arrivals
        && let Some((us, file)) = &known.latest_arrival
        && *us > through.timestamp_micros()
    {
        return Err(ShackError::BronzeAhead {
            through,
            arrived: DateTime::from_timestamp_micros(*us).unwrap_or(through),
            file: file.clone(),
        });
    }

    // 5. What has arrived that bronze has not seen, and what it has seen that may have been
    //    rewritten since (with the hash it had then).
    let mut arrived: Vec<(Source, Vec<ToRead>)> = Vec::new();
    for (source, files) in listed {
        let mut todo = Vec::new();
        for f in files {
            match known.names.get(&f.relative_name) {
                None => todo.push((f, None)),
                Some(r) => {
                    if r.may_have_changed(f.seen.as_ref()) {
                        let previous = r.sha256.clone();
                        todo.push((f, Some(previous)));
                    }
                }
            }
        }
        arrived.push((source, todo));
    }
    progress.set_total(arrived.iter().map(|(_, f)| f.len() as u64).sum());

    let write_started = Instant::now();
    let mut pending: Vec<Pending> = Vec::new();
    // Files recorded without taking their lines: duplicates, and changed files whose new bytes
    // are already in bronze.
    let mut untapped: Vec<FileRecord> = Vec::new();
    for (source, files) in arrived {
        if files.is_empty() {
            continue;
        }
        let name = bronze::table_name(source);
        let t = table(&name)?;
        let mut buffer = RowBuffer::new(
            bronze::source_schema(),
            options.max_batch_rows,
            options.max_batch_bytes,
        );
        let mut p = Pending {
            source,
            files: Vec::new(),
            rows: 0,
            bytes: 0,
            data_files: Vec::new(),
        };
        progress.message(&format!("tapping {source}"));
        let paths: Vec<&std::path::Path> = files.iter().map(|(f, _)| f.path.as_path()).collect();
        let digests = lines::digest_all(&paths);
        for ((f, previous_sha256), d) in files.into_iter().zip(digests) {
            let d = d?;
            if previous_sha256.as_deref() == Some(d.sha256.as_str()) {
                // Touched, not changed: the recorded bytes. Once its last write is safely
                // older than this run, recording that settles it: later taps leave it alone
                // rather than hash it on every run (a file tapped within a minute of landing).
                if f.seen
                    .as_ref()
                    .and_then(|s| s.modified)
                    .is_some_and(|m| written_before(m, tapped_at.timestamp_micros()))
                {
                    untapped.push(FileRecord {
                        source,
                        file: f.relative_name,
                        status: STATUS_VERIFIED,
                        sha256: d.sha256,
                        bytes: d.bytes,
                        lines: d.lines,
                        arrived_at: f.arrived_at,
                        original_file: None,
                        previous_sha256: None,
                    });
                }
                progress.inc(1);
                continue;
            }
            let changed = previous_sha256.is_some();
            let key = (source.as_str().to_string(), d.sha256.clone());
            // An empty file has no content to be a copy of: it is tapped (zero lines), never a
            // duplicate of another empty file.
            if d.bytes > 0
                && let Some(original) = known.tapped.get(&key)
            {
                untapped.push(FileRecord {
                    source,
                    file: f.relative_name,
                    status: if changed {
                        STATUS_CHANGED
                    } else {
                        STATUS_DUPLICATE
                    },
                    sha256: d.sha256,
                    bytes: d.bytes,
                    lines: d.lines,
                    arrived_at: f.arrived_at,
                    original_file: Some(original.clone()),
                    previous_sha256,
                });
                progress.inc(1);
                continue;
            }
            let lineage = Lineage {
                file: &f.relative_name,
                sha256: &d.sha256,
                arrived_us: f.arrived_at.timestamp_micros(),
            };
            let mut reader = LineReader::open(&f.path)?;
            while let Some((number, line)) = reader.next_line()? {
                buffer.push(number, line, &lineage);
                if buffer.is_full() {
                    let batch = buffer.take(&name)?;
                    p.data_files.extend(write(t, &name, batch).await?);
                }
            }
            let (sha, lines_read) = reader.finish();
            if sha != d.sha256 {
                return Err(ShackError::FileChanged {
                    file: f.relative_name,
                    first: d.sha256,
                    second: sha,
                });
            }
            p.rows += lines_read;
            p.bytes += d.bytes;
            known.tapped.insert(key, f.relative_name.clone());
            p.files.push(FileRecord {
                source,
                file: f.relative_name,
                status: if changed {
                    STATUS_CHANGED
                } else {
                    STATUS_TAPPED
                },
                sha256: d.sha256,
                bytes: d.bytes,
                lines: lines_read,
                arrived_at: f.arrived_at,
                original_file: None,
                previous_sha256,
            });
            progress.inc(1);
        }
        if !buffer.is_empty() {
            let batch = buffer.take(&name)?;
            p.data_files.extend(write(t, &name, batch).await?);
        }
        if !p.files.is_empty() {
            pending.push(p);
        }
    }

    let duplicates: Vec<DuplicateReport> = untapped
        .iter()
        .filter(|d| d.status == STATUS_DUPLICATE)
        .map(|d| DuplicateReport {
            source: d.source,
            file: d.file.clone(),
            original_file: d.original_file.clone().unwrap_or_default(),
            sha256: d.sha256.clone(),
        })
        .collect();
    let mut changed: Vec<ChangedReport> = pending
        .iter()
        .flat_map(|p| &p.files)
        .chain(&untapped)
        .filter_map(|r| {
            let previous_sha256 = r.previous_sha256.clone()?;
            Some(ChangedReport {
                source: r.source,
                file: r.file.clone(),
                previous_sha256,
                sha256: r.sha256.clone(),
                lines: if r.original_file.is_some() {
                    0
                } else {
                    r.lines
                },
                original_file: r.original_file.clone(),
            })
        })
        .collect();
    changed.sort_by(|a, b| a.source.cmp(&b.source).then_with(|| a.file.cmp(&b.file)));
    if !changed.is_empty() {
        progress.message(&format!(
            "{} landing file(s) were rewritten after they were tapped",
            changed.len()
        ));
    }
    let mut report = TapReport {
        through,
        branch: branch.to_string(),
        tap_id: tap_id.clone(),
        tapped_at,
        created_tables,
        orphans_removed: orphans.total(),
        orphans_kept: orphans.too_young + orphans.at_work,
        orphan_grace_secs: options.orphan_grace.as_secs(),
        batches: Vec::new(),
        skipped_duplicates: duplicates.len(),
        duplicates,
        changed,
        catalog_version: None,
    };
    // Files only verified are recorded when the tap commits anyway: a commit of its own for
    // them would make the same `through` twice write something.
    if pending.is_empty() && untapped.iter().all(|r| r.status == STATUS_VERIFIED) {
        progress.message("nothing new has arrived");
        return Ok(report);
    }

    // 6. Stage a snapshot per source, then the record of files, and commit them as one. If
    //    another writer moved one of these tables meanwhile without moving the branch (a publish
    //    of `main`, an expiry), the same data files are staged again on the new metadata; if it
    //    moved the branch, what this tap took may overlap what that writer took: refuse.
    progress.message("committing");
    let run = Run {
        tap_id: &tap_id,
        tapped_at,
        through,
        through_s: through.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        branch,
    };
    let mut tables = tables;
    let mut attempt = 0;
    let committed = loop {
        attempt += 1;
        let (changes, batches) = stage_all(&tables, &pending, &untapped, &known, &run).await?;
        report.batches = batches;
        let elapsed = write_started.elapsed();
        if !options.orphan_grace.is_zero() && elapsed * 2 > options.orphan_grace {
            return Err(ShackError::OutlivedGrace {
                elapsed,
                grace: options.orphan_grace,
            });
        }
        let properties = BTreeMap::from([
            (props::TAP_ID.to_string(), tap_id.clone()),
            (props::THROUGH.to_string(), run.through_s.clone()),
            ("sugarshack.branch".to_string(), branch.to_string()),
        ]);
        match catalog
            .commit(changes, "tap", &commit_message(&report), properties)
            .await
        {
            Ok(c) => break c,
            Err(LakeError::Conflict { table, detail }) => {
                let (fresh, _) = open_tables(catalog).await?;
                if attempt >= COMMIT_ATTEMPTS || !same_branch_heads(&tables, &fresh, branch) {
                    return Err(ShackError::Conflict {
                        step: "tap".into(),
                        table,
                        detail,
                    });
                }
                progress.message("another writer moved a bronze table's refs; staging again");
                tables = fresh;
            }
            Err(other) => return Err(ShackError::lake("the tap's commit", other)),
        }
    };
    report.catalog_version = Some(committed.version);
    progress.message("committed");
    Ok(report)
}

/// Every source's landing files that had arrived by `through`, in source order. A landing zone
/// that is not there, or holds no landing file at all (whenever it arrived), is an error: a
/// wrong warehouse must not look like a quiet day.
fn list_landing(
    warehouse_root: &Path,
    through: DateTime<Utc>,
) -> Result<Vec<(Source, Vec<LandedFile>)>> {
    let dir = sugarbush::landing_dir(warehouse_root);
    if !dir.is_dir() {
        return Err(ShackError::NoLandingZone { dir, missing: true });
    }
    let list = |source: Source, through: DateTime<Utc>| {
        sugarbush::landed(warehouse_root, source, through).map_err(|error| ShackError::Landing {
            source_name: source.as_str(),
            error,
        })
    };
    // Each source on a thread of its own: a listing looks up every landing file's size and
    // modification time (how a rewrite in place is noticed), which grows with the landing
    // zone, and the lookups of one folder do not wait on another's.
    let listed = std::thread::scope(|scope| {
        let listing: Vec<_> = Source::ALL
            .into_iter()
            .map(|source| (source, scope.spawn(move || list(source, through))))
            .collect();
        listing
            .into_iter()
            .map(|(source, thread)| {
                let files = thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                files.map(|files| (source, files))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    if listed.iter().all(|(_, files)| files.is_empty()) {
        // Nothing by `through`: a quiet day, unless nothing ever arrived at all.
        let mut any = false;
        for source in Source::ALL {
            if !list(source, DateTime::<Utc>::MAX_UTC)?.is_empty() {
                any = true;
                break;
            }
        }
        if !any {
            return Err(ShackError::NoLandingZone {
                dir,
                missing: false,
            });
        }
    }
    Ok(listed)
}

/// How many times a tap stages its commit again after writers that did not touch its branch.
const COMMIT_ATTEMPTS: u32 = 8;

/// What every snapshot and record of one run carries.
struct Run<'a> {
    tap_id: &'a str,
    tapped_at: DateTime<Utc>,
    through: DateTime<Utc>,
    through_s: String,
    branch: &'a str,
}

/// True when no bronze table's branch (nor, where the branch does not exist yet, `main`, which it
/// would start from) moved between `old` and `new`: what this tap read is still what it builds on.
fn same_branch_heads(
    old: &BTreeMap<String, Table>,
    new: &BTreeMap<String, Table>,
    branch: &str,
) -> bool {
    old.iter().all(|(name, o)| {
        new.get(name).is_some_and(|n| {
            n.head(branch) == o.head(branch)
                && (o.head(branch).is_some() || n.head("main") == o.head("main"))
        })
    })
}

/// Stage a snapshot per source with new files, then the `bronze.landing_files` snapshot naming
/// them and the files recorded without their lines (its data file is written here, as it names
/// the staged snapshots).
async fn stage_all(
    tables: &BTreeMap<String, Table>,
    pending: &[Pending],
    untapped: &[FileRecord],
    known: &Known,
    run: &Run<'_>,
) -> Result<(Vec<TableChange>, Vec<BatchReport>)> {
    let table = |name: &str| -> Result<&Table> {
        tables.get(name).ok_or_else(|| {
            ShackError::lake(
                name,
                LakeError::Other(format!("{name} is not in the catalog")),
            )
        })
    };
    // The bronze tables are staged at once, each on a task of its own (each writes its own
    // manifests), in the order of `pending`; `bronze.landing_files` after them, since its rows
    // name their snapshots.
    let mut jobs = Vec::new();
    for p in pending {
        let name = bronze::table_name(p.source);
        let properties = BTreeMap::from([
            (props::TAP_ID.to_string(), run.tap_id.to_string()),
            (props::THROUGH.to_string(), run.through_s.clone()),
            (props::FILES.to_string(), p.files.len().to_string()),
            (props::ROWS.to_string(), p.rows.to_string()),
        ]);
        let t = table(&name)?.clone();
        let (branch, data_files) = (run.branch.to_string(), p.data_files.clone());
        jobs.push(crate::par::job(async move {
            let change = t
                .stage_files(&branch, data_files, None, properties)
                .await
                .map_err(|e| ShackError::lake(&name, e))?;
            Ok((name, change))
        }));
    }
    let staged = crate::par::on_tasks("bronze", pending.len(), jobs).await?;
    let mut changes = Vec::new();
    let mut batches = Vec::new();
    let mut records: Vec<(&FileRecord, Option<(i64, i64)>)> = Vec::new();
    for (p, (name, change)) in pending.iter().zip(staged) {
        let (snapshot_id, sequence_number) = staged_snapshot(&name, &change)?;
        batches.push(BatchReport {
            source: p.source,
            table: name,
            snapshot_id,
            sequence_number,
            files: p.files.len(),
            rows: p.rows,
            bytes: p.bytes,
            data_files: p.data_files.len(),
        });
        records.extend(
            p.files
                .iter()
                .map(|f| (f, Some((snapshot_id, sequence_number)))),
        );
        changes.push(change);
    }
    records.extend(untapped.iter().map(|d| (d, None)));
    let batch = landing_files_batch(&records, run)?;
    let lf = table(LANDING_FILES)?;
    let properties = BTreeMap::from([
        (props::TAP_ID.to_string(), run.tap_id.to_string()),
        (props::THROUGH.to_string(), run.through_s.clone()),
        (props::FILES.to_string(), records.len().to_string()),
    ]);
    // The ledger's rows written back with the new ones, replacing exactly the files they were
    // read from, once it holds `LEDGER_FILES_KEPT` files (a retry after a lost race stages
    // again only when the branch did not move, so those files are still the live ones).
    let (lf_files, replace) = if known.ledger_files.len() >= LEDGER_FILES_KEPT {
        let mut all = known.ledger.clone();
        all.push(batch);
        // A ledger file another writer added holds rows of its own landing files: it never
        // conflicts with this rewrite, and is kept without being opened.
        let replace = Replace::Files {
            paths: known.ledger_files.clone(),
            conflicts: Arc::new(|b: &RecordBatch| {
                Ok(BooleanArray::from(vec![false; b.num_rows()]))
            }),
            may_conflict: Some(Arc::new(|_, _| false)),
        };
        (
            lf.write_data_files(&all)
                .await
                .map_err(|e| ShackError::lake(LANDING_FILES, e))?,
            Some(replace),
        )
    } else {
        (write(lf, LANDING_FILES, batch).await?, None)
    };
    let change = lf
        .stage_files(run.branch, lf_files, replace.as_ref(), properties)
        .await
        .map_err(|e| ShackError::lake(LANDING_FILES, e))?;
    changes.push(change);
    Ok((changes, batches))
}

async fn write(table: &Table, name: &str, batch: RecordBatch) -> Result<Vec<DataFile>> {
    table
        .write_data_files(&[batch])
        .await
        .map_err(|e| ShackError::lake(name, e))
}

fn staged_snapshot(table: &str, change: &TableChange) -> Result<(i64, i64)> {
    let missing = || {
        ShackError::lake(
            table,
            LakeError::Other("the staged change adds no snapshot".into()),
        )
    };
    let id = change.snapshot_id().ok_or_else(missing)?;
    let seq = change
        .metadata()
        .and_then(|m| m.snapshot_by_id(id))
        .map(|s| s.sequence_number())
        .ok_or_else(missing)?;
    Ok((id, seq))
}

fn commit_message(report: &TapReport) -> String {
    let mut parts: Vec<String> = report
        .batches
        .iter()
        .map(|b| format!("{} {} files {} rows", b.source, b.files, b.rows))
        .collect();
    if report.skipped_duplicates > 0 {
        parts.push(format!(
            "{} re-sent file(s) skipped",
            report.skipped_duplicates
        ));
    }
    if !report.changed.is_empty() {
        parts.push(format!(
            "{} file(s) rewritten in place",
            report.changed.len()
        ));
    }
    format!(
        "tap through {} to {}: {}",
        report
            .through
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        report.branch,
        parts.join(", ")
    )
}

fn landing_files_batch(
    records: &[(&FileRecord, Option<(i64, i64)>)],
    run: &Run<'_>,
) -> Result<RecordBatch> {
    let schema = bronze::landing_files_schema();
    let ts_type = bronze::timestamp_type();
    let n = records.len();
    let mut file = StringBuilder::new();
    let mut source = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut sha = StringBuilder::new();
    let mut bytes = Int64Builder::with_capacity(n);
    let mut lines = Int64Builder::with_capacity(n);
    let mut arrived = TimestampMicrosecondBuilder::with_capacity(n);
    let mut original = StringBuilder::new();
    let mut snapshot = Int64Builder::with_capacity(n);
    let mut sequence = Int64Builder::with_capacity(n);
    let mut tap = StringBuilder::new();
    let mut tapped = TimestampMicrosecondBuilder::with_capacity(n);
    let mut thru = TimestampMicrosecondBuilder::with_capacity(n);
    let long = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (r, batch) in records {
        file.append_value(&r.file);
        source.append_value(r.source.as_str());
        status.append_value(r.status);
        sha.append_value(&r.sha256);
        bytes.append_value(long(r.bytes));
        lines.append_value(long(r.lines));
        arrived.append_value(r.arrived_at.timestamp_micros());
        original.append_option(r.original_file.as_deref());
        snapshot.append_option(batch.map(|b| b.0));
        sequence.append_option(batch.map(|b| b.1));
        tap.append_value(run.tap_id);
        tapped.append_value(run.tapped_at.timestamp_micros());
        thru.append_value(run.through.timestamp_micros());
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(file.finish()),
        Arc::new(source.finish()),
        Arc::new(status.finish()),
        Arc::new(sha.finish()),
        Arc::new(bytes.finish()),
        Arc::new(lines.finish()),
        Arc::new(arrived.finish().with_data_type(ts_type.clone())),
        Arc::new(original.finish()),
        Arc::new(snapshot.finish()),
        Arc::new(sequence.finish()),
        Arc::new(tap.finish()),
        Arc::new(tapped.finish().with_data_type(ts_type.clone())),
        Arc::new(thru.finish().with_data_type(ts_type)),
    ];
    RecordBatch::try_new(schema, columns).map_err(|e| ShackError::BadTable {
        table: LANDING_FILES.to_string(),
        detail: format!("building the batch of landing files: {e}"),
    })
}

/// Load the bronze tables at one catalog version, creating the missing ones in one commit.
async fn open_tables(catalog: &Catalog) -> Result<(BTreeMap<String, Table>, Vec<String>)> {
    let cat = |e| ShackError::lake("the catalog", e);
    let mut head = catalog.head().await.map_err(cat)?;
    let mut wanted: Vec<(String, arrow_schema::SchemaRef, Vec<lake::PartitionField>)> = Source::ALL
        .into_iter()
        .map(|s| {
            (
                bronze::table_name(s),
                bronze::source_schema(),
                bronze::source_partitioning(),
            )
        })
        .collect();
    wanted.push((
        LANDING_FILES.to_string(),
        bronze::landing_files_schema(),
        Vec::new(),
    ));
    let mut created = Vec::new();
    let missing: Vec<_> = wanted
        .iter()
        .filter(|(name, _, _)| !head.tables.contains_key(name))
        .collect();
    if !missing.is_empty() {
        let mut changes = Vec::new();
        for (name, schema, partition) in &missing {
            changes.push(
                catalog
                    .stage_create_table(name, schema, partition)
                    .await
                    .map_err(|e| ShackError::lake(name.as_str(), e))?,
            );
        }
        let names: Vec<String> = missing.iter().map(|(n, _, _)| n.clone()).collect();
        match catalog
            .commit(
                changes,
                "create-table",
                &format!("create {}", names.join(", ")),
                BTreeMap::new(),
            )
            .await
        {
            Ok(_) => created = names,
            // Another tap created them first: use its tables.
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(cat(e)),
        }
        head = catalog.head().await.map_err(cat)?;
    }
    let names: Vec<&str> = wanted.iter().map(|(name, _, _)| name.as_str()).collect();
    let opened = crate::layer::open_all(catalog, &head, &names).await?;
    let mut tables = BTreeMap::new();
    for ((name, schema, _), t) in wanted.iter().zip(opened) {
        check_schema(name, &t, schema)?;
        tables.insert(name.clone(), t);
    }
    Ok((tables, created))
}

/// A table of the right name but another shape was not made by this tap: say so before writing.
fn check_schema(name: &str, table: &Table, want: &arrow_schema::SchemaRef) -> Result<()> {
    let have = table
        .arrow_schema()
        .map_err(|e| ShackError::lake(name, e))?;
    let shape = |s: &arrow_schema::Schema| -> Vec<(String, arrow_schema::DataType)> {
        s.fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect()
    };
    if shape(&have) != shape(want) {
        return Err(ShackError::BadTable {
            table: name.to_string(),
            detail: format!(
                "its columns are ({}), a bronze table's are ({})",
                have.fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", "),
                want.fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(43_035), "43,035");
        assert_eq!(thousands(4_303_500), "4,303,500");
    }

    fn report() -> TapReport {
        let through = DateTime::parse_from_rfc3339("2026-08-16T23:59:59Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let batch = |source: Source, seq: i64, files: usize, rows: u64| BatchReport {
            source,
            table: bronze::table_name(source),
            snapshot_id: 1,
            sequence_number: seq,
            files,
            rows,
            bytes: 0,
            data_files: 1,
        };
        TapReport {
            through,
            branch: "audit".into(),
            tap_id: "t".into(),
            tapped_at: through,
            created_tables: Vec::new(),
            orphans_removed: 0,
            orphans_kept: 0,
            orphan_grace_secs: 3600,
            batches: vec![
                batch(Source::Orders, 1, 384, 43_035),
                batch(Source::Payments, 2, 384, 15_382),
                batch(Source::FxRates, 3, 12, 12),
                batch(Source::Settlements, 4, 15, 30),
            ],
            duplicates: Vec::new(),
            skipped_duplicates: 3,
            changed: Vec::new(),
            catalog_version: Some(6),
        }
    }

    #[test]
    fn render_lines_up_like_the_story() {
        let want = "\
as of 2026-08-16 23:59:59 UTC
  tapped   orders       batch   1   384 files   43,035 rows
  tapped   payments     batch   2   384 files   15,382 rows
  tapped   fx_rates     batch   3    12 files       12 rows
  tapped   settlements  batch   4    15 files       30 rows
  skipped  3 file(s) with the same bytes as one already in bronze
";
        assert_eq!(report().render(), want);
    }

    #[test]
    fn render_warns_of_each_file_rewritten_in_place() {
        let mut r = report();
        r.batches.truncate(1);
        r.skipped_duplicates = 0;
        let changed = |file: &str, original_file: Option<&str>| ChangedReport {
            source: Source::Orders,
            file: file.into(),
            previous_sha256: "3f1a2b3c4d5e6f7a8b9c".into(),
            sha256: "9c0b1a2b3c4d5e6f7a8b".into(),
            lines: 2,
            original_file: original_file.map(String::from),
        };
        r.changed = vec![
            changed("orders/2026-08-16/a.jsonl", None),
            changed(
                "orders/2026-08-16/b.jsonl",
                Some("orders/2026-08-16/c.jsonl"),
            ),
        ];
        assert_eq!(
            r.render(),
            "\
as of 2026-08-16 23:59:59 UTC
  tapped   orders       batch   1   384 files   43,035 rows
  warn     orders/2026-08-16/a.jsonl was rewritten after it was tapped (sha256 3f1a2b3c4d5e… now 9c0b1a2b3c4d…): its new version is tapped next to the old lines
  warn     orders/2026-08-16/b.jsonl was rewritten after it was tapped (sha256 3f1a2b3c4d5e… now 9c0b1a2b3c4d…): its new bytes are those of orders/2026-08-16/c.jsonl, already in bronze
"
        );
        r.batches.clear();
        assert!(!r.nothing_new(), "a rewrite is news");
    }

    #[test]
    fn render_says_when_nothing_is_new() {
        let mut r = report();
        r.batches.clear();
        r.skipped_duplicates = 0;
        r.orphans_removed = 2;
        assert_eq!(
            r.render(),
            "as of 2026-08-16 23:59:59 UTC\n  removed  2 orphan file(s) that no commit names (left by a crashed run)\n  nothing new has arrived\n"
        );
    }
}
