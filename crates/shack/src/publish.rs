//! The publish: the one act the lake exists for.
//!
//! When no audit of a [`Grade`] blocks, ONE catalog commit
//! - fast-forwards `main` of every graded table (bronze, silver, gold) to exactly the `audit`
//!   snapshot grading recorded — never to whatever `audit` holds at publish time, so a write that
//!   landed on `audit` after grading started stays unpublished until a later grade reads it;
//! - tags each of those snapshots `publish-<n>`, so no snapshot or catalog-version expiry can take
//!   away what publish `n` reached;
//! - appends the decision to the publish log, [`LOG_TABLE`].
//!
//! No reader can see one table moved and another not: the catalog version before the commit has
//! none of them moved, the one it creates has all of them.
//!
//! When an audit blocks, no `main` moves; the blocked run is appended to the log in a commit of
//! its own, and `audit` keeps the run for inspection and for the next run to continue from.
//!
//! ## The publish log
//!
//! `ops.publish_log` is an Iceberg table of its own, written on its `main` directly: it records
//! decisions and is not graded, so it lives outside the graded namespaces (a grade never lists
//! it, a publish never fast-forwards it, a rollback of the layers never rewinds it). One row per
//! decision:
//!
//! | column           | type                  | what it holds                                                 |
//! |------------------|-----------------------|---------------------------------------------------------------|
//! | `seq`            | long, required        | the record's number in the log, from 1 (published or blocked) |
//! | `publish_number` | long, optional        | `n` of a publish (tag `publish-<n>`); null when blocked       |
//! | `status`         | string, required      | `published` or `blocked`                                      |
//! | `as_of`          | timestamptz, required | the run's `--through`: what the build is as of                |
//! | `audits`         | string, required      | JSON list of every audit's name, verdict, reason and evidence |
//! | `snapshots`      | string, required      | JSON object: each graded table's graded `audit` snapshot id   |
//! | `graded_version` | long, required        | the catalog version grading read those snapshots from          |
//! | `base_version`   | long, required        | the catalog version the commit was staged on                   |
//! | `recorded_at`    | timestamptz, required | when the decision was recorded (wall clock, passed in)        |
//!
//! The catalog version a record lands in cannot be written into the record itself (the commit
//! creates it; if another writer takes `base_version + 1` first and none of the publish's tables
//! moved, the lake commits on the newer base). So the row holds `base_version` (the commit lands
//! after it), the commit carries the record's `seq` as the catalog-version property
//! [`PROP_SEQ`], and [`publish_version`] finds the exact version from there; a publish returns it
//! directly ([`PublishOutcome::version`]).
//!
//! ## Racing publishes
//!
//! A publish is staged on the newest catalog version. If the commit loses a race it is restaged on
//! the new head and retried — but only while the log's last publish is still the one grading saw:
//! once another run has published since this grading started, the grade is stale ("since the
//! last publish" meant another publish) and the publish is refused with
//! [`ShackError::PublishConflict`], nothing committed. Two runs racing therefore give one publish
//! and one clear conflict, never a mix: every publish commit includes the log table, so two of
//! them can never both commit on the same base.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arrow::compute::cast;
use arrow_array::{
    Array, ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use chrono::{DateTime, TimeZone, Utc};
use lake::{At, Catalog, CatalogVersion, LakeError, RefOp, Table};
use serde::Serialize;

use crate::bronze::timestamp_type;
use crate::grade::{AuditResult, Grade};
use crate::{Result, ShackError};

/// The publish log.
pub const LOG_TABLE: &str = "ops.publish_log";

/// `status` of a run whose grade let it publish.
pub const STATUS_PUBLISHED: &str = "published";
/// `status` of a run an audit blocked.
pub const STATUS_BLOCKED: &str = "blocked";
/// `status` of a rollback: a publish (it has a number and a tag) of an earlier publish's
/// snapshots; its one `audits` entry, named [`ROLLBACK`], holds the reason.
pub const STATUS_ROLLED_BACK: &str = "rolled back";
/// The name of a rollback record's one `audits` entry.
pub const ROLLBACK: &str = "rollback";

/// Catalog-version property of a publish-log commit: the record's `seq`.
pub const PROP_SEQ: &str = "sugarshack.publish.seq";
/// Catalog-version property of a publish commit: the publish number.
pub const PROP_NUMBER: &str = "sugarshack.publish.number";
/// Catalog-version property of a publish-log commit: `published` or `blocked`.
pub const PROP_STATUS: &str = "sugarshack.publish.status";
/// Catalog-version property of a publish or a block recorded by [`crate::run`]: how long the
/// run took from its start to its decision, in milliseconds.
pub const PROP_TOOK_MS: &str = "sugarshack.run.took-ms";

/// How many times a publish that lost a commit race to an unrelated write is restaged.
const RETRIES: u32 = 16;

/// The tag that marks what publish `n` reached on every table.
pub fn tag(n: u64) -> String {
    format!("publish-{n}")
}

/// An as-of as people type it: RFC 3339 (seconds optional: `2026-08-17T12:00Z`,
/// `2026-08-17T12:00-03:00`), `2026-08-17T12:00[:00]` or `2026-08-17 12:00[:00]` (UTC), or a
/// day, meaning its last second (`2026-08-16` is 23:59:59 UTC). What `--through`, `--as-of` and
/// the dashboard's `?as_of=` all accept.
pub fn parse_as_of(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    // `2026-08-17T12:00Z`: RFC 3339 but for its seconds.
    if let (Some(minutes), Some(zone)) = (s.get(..16), s.get(16..))
        && (zone.starts_with(['Z', 'z', '+', '-']))
        && let Ok(t) = DateTime::parse_from_rfc3339(&format!("{minutes}:00{zone}"))
    {
        return Some(t.with_timezone(&Utc));
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, f) {
            return Some(Utc.from_utc_datetime(&t));
        }
    }
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(23, 59, 59))
        .map(|t| Utc.from_utc_datetime(&t))
}

/// The schema of [`LOG_TABLE`].
pub fn log_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("publish_number", DataType::Int64, true),
        Field::new("status", DataType::Utf8, false),
        Field::new("as_of", timestamp_type(), false),
        Field::new("audits", DataType::Utf8, false),
        Field::new("snapshots", DataType::Utf8, false),
        Field::new("graded_version", DataType::Int64, false),
        Field::new("base_version", DataType::Int64, false),
        Field::new("recorded_at", timestamp_type(), false),
    ]))
}

/// One row of the publish log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishRecord {
    /// The record's number in the log, from 1.
    pub seq: u64,
    /// `n` of tag `publish-<n>`, for a publish; `None` when blocked.
    pub publish_number: Option<u64>,
    /// The run's `--through`.
    pub as_of: DateTime<Utc>,
    /// Every audit's finding.
    pub audits: Vec<AuditResult>,
    /// Each graded table's graded snapshot: for a publish, where its `main` went.
    pub snapshots: BTreeMap<String, i64>,
    /// The catalog version grading read.
    pub graded_version: u64,
    /// The catalog version the commit was staged on (it landed in a later one:
    /// [`publish_version`]).
    pub base_version: u64,
    /// When the decision was recorded, ms since the epoch.
    pub recorded_at_ms: i64,
}

impl PublishRecord {
    /// True for a publish, false for a blocked run.
    pub fn is_published(&self) -> bool {
        self.publish_number.is_some()
    }

    /// True for a rollback record (see [`rollback`]).
    pub fn is_rollback(&self) -> bool {
        self.is_published() && self.audits.len() == 1 && self.audits[0].name == ROLLBACK
    }

    /// `published`, `blocked` or `rolled back`.
    pub fn status(&self) -> &'static str {
        if self.is_rollback() {
            STATUS_ROLLED_BACK
        } else if self.is_published() {
            STATUS_PUBLISHED
        } else {
            STATUS_BLOCKED
        }
    }

    /// The tag a publish left on every table (`None` when blocked).
    pub fn tag(&self) -> Option<String> {
        self.publish_number.map(tag)
    }

    /// Where to read `table` as this publish left it (`None`: blocked, or not a published table).
    pub fn at(&self, table: &str) -> Option<At> {
        if !self.is_published() {
            return None;
        }
        self.snapshots.get(table).map(|s| At::Snapshot(*s))
    }
}

/// What [`publish`] did.
#[derive(Clone, Debug)]
pub struct PublishOutcome {
    /// The record it appended to the log.
    pub record: PublishRecord,
    /// The catalog version its commit created.
    pub version: u64,
    /// The last publish before this decision (`None`: none yet).
    pub previous: Option<PublishRecord>,
}

impl PublishOutcome {
    /// True when `main` moved.
    pub fn published(&self) -> bool {
        self.record.is_published()
    }

    /// The decision's line: `Published gold as of 2026-08-17 12:00 UTC.` or
    /// `Not published. gold still shows the build as of 2026-08-16 23:59 UTC.`
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for PublishOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.published() {
            write!(f, "Published gold as of {}.", stamp(self.record.as_of))
        } else {
            match &self.previous {
                Some(p) => write!(
                    f,
                    "Not published. gold still shows the build as of {}.",
                    stamp(p.as_of)
                ),
                None => write!(f, "Not published. Nothing has been published yet."),
            }
        }
    }
}

fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// Publish a grade: when no audit blocks, move `main` of every graded table to its graded
/// snapshot, tag it and log the publish, in ONE catalog commit; when one blocks, move nothing
/// and log the block in a commit of its own. `now_ms` is the wall clock the log records. The
/// as-of recorded is the grade's (the one its audits judged).
///
/// Errors: [`ShackError::PublishConflict`] when another run published after this grading started
/// (nothing committed; grade again); lake errors as [`ShackError::Lake`] (a `main` that is no
/// longer an ancestor of the graded snapshot, after a rollback, is `NotFastForward`).
pub async fn publish(catalog: &Catalog, grade: &Grade, now_ms: i64) -> Result<PublishOutcome> {
    publish_run(catalog, grade, now_ms, None).await
}

/// [`publish`], recording how long the run took (`took_ms`, [`PROP_TOOK_MS`]) in the catalog
/// version of the decision.
pub async fn publish_run(
    catalog: &Catalog,
    grade: &Grade,
    now_ms: i64,
    took_ms: Option<i64>,
) -> Result<PublishOutcome> {
    catalog
        .create_table_if_absent(LOG_TABLE, &log_schema(), &[])
        .await
        .map_err(|e| ShackError::lake(LOG_TABLE, e))?;
    let ctx = &grade.context;
    let blocked = grade.blocked();
    let graded_last = ctx.previous.as_ref().map(|p| p.seq);
    for _ in 0..RETRIES {
        let head = catalog
            .head()
            .await
            .map_err(|e| ShackError::lake("the catalog", e))?;
        let log_table = catalog
            .table_in(&head, LOG_TABLE)
            .await
            .map_err(|e| ShackError::lake(LOG_TABLE, e))?;
        let tail = read_log_tail(&log_table).await?;
        let previous = tail.last_published;
        if !blocked && previous.as_ref().map(|p| p.seq) != graded_last {
            return Err(conflict(grade, previous.as_ref()));
        }
        let seq = tail.newest_seq + 1;
        let publish_number = (!blocked).then(|| {
            previous
                .as_ref()
                .and_then(|p| p.publish_number)
                .unwrap_or(0)
                + 1
        });
        let record = PublishRecord {
            seq,
            publish_number,
            as_of: ctx.as_of,
            audits: grade.results.clone(),
            snapshots: ctx.snapshots.clone(),
            graded_version: ctx.version,
            base_version: head.version,
            recorded_at_ms: now_ms,
        };
        let mut changes = Vec::with_capacity(ctx.snapshots.len() + 1);
        if let Some(n) = publish_number {
            for (name, snapshot) in &ctx.snapshots {
                let table = catalog
                    .table_in(&head, name)
                    .await
                    .map_err(|e| ShackError::lake(name, e))?;
                let ops = [
                    RefOp::FastForward {
                        branch: "main".into(),
                        to: *snapshot,
                    },
                    RefOp::CreateTag {
                        name: tag(n),
                        snapshot_id: *snapshot,
                    },
                ];
                changes.push(
                    table
                        .stage_refs(&ops)
                        .map_err(|e| ShackError::lake(name, e))?,
                );
            }
        }
        let row = record_batch(&record)?;
        changes.push(
            log_table
                .stage_append("main", &[row], BTreeMap::new())
                .await
                .map_err(|e| ShackError::lake(LOG_TABLE, e))?,
        );
        let mut props = BTreeMap::from([
            (PROP_SEQ.to_string(), seq.to_string()),
            (PROP_STATUS.to_string(), record.status().to_string()),
        ]);
        if let Some(ms) = took_ms {
            props.insert(PROP_TOOK_MS.to_string(), ms.to_string());
        }
        let (operation, message) = match publish_number {
            Some(n) => {
                props.insert(PROP_NUMBER.to_string(), n.to_string());
                (
                    "publish",
                    format!(
                        "publish {n}: main of {} tables to the snapshots graded in version {}, as of {}",
                        ctx.snapshots.len(),
                        ctx.version,
                        stamp(ctx.as_of)
                    ),
                )
            }
            None => (
                "publish-blocked",
                format!(
                    "blocked: {}",
                    grade
                        .results
                        .iter()
                        .filter(|r| r.verdict == crate::grade::Verdict::Block)
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        };
        match catalog.commit(changes, operation, &message, props).await {
            Ok(c) => {
                return Ok(PublishOutcome {
                    record,
                    version: c.version,
                    previous,
                });
            }
            // Another writer moved one of the tables: restage on the new head (the check above
            // refuses if what moved was another publish).
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(ShackError::lake(LOG_TABLE, e)),
        }
    }
    Err(ShackError::PublishConflict {
        detail: format!(
            "the tables kept moving under {RETRIES} attempts to commit the publish of the grade of catalog version {}; run again",
            ctx.version
        ),
    })
}

fn conflict(grade: &Grade, now: Option<&PublishRecord>) -> ShackError {
    let seen = match &grade.context.previous {
        Some(p) => format!(
            "publish {} (as of {})",
            p.publish_number.unwrap_or_default(),
            stamp(p.as_of)
        ),
        None => "no publish".to_string(),
    };
    let now = match now {
        Some(p) => format!(
            "publish {} (as of {})",
            p.publish_number.unwrap_or_default(),
            stamp(p.as_of)
        ),
        None => "no publish".to_string(),
    };
    ShackError::PublishConflict {
        detail: format!(
            "grading started at catalog version {} after {seen}, but the log now ends at {now}: another run published in between; run again to grade what it left on audit",
            grade.context.version
        ),
    }
}

fn record_batch(r: &PublishRecord) -> Result<RecordBatch> {
    let json = |v: serde_json::Result<String>| {
        v.map_err(|e| ShackError::BadTable {
            table: LOG_TABLE.to_string(),
            detail: format!("cannot serialise a record: {e}"),
        })
    };
    let audits = json(serde_json::to_string(&r.audits))?;
    let snapshots = json(serde_json::to_string(&r.snapshots))?;
    let ts = |micros: i64| {
        Arc::new(TimestampMicrosecondArray::from(vec![micros]).with_timezone("+00:00")) as ArrayRef
    };
    let int = |v: u64| Arc::new(Int64Array::from(vec![v as i64])) as ArrayRef;
    let columns: Vec<ArrayRef> = vec![
        int(r.seq),
        Arc::new(Int64Array::from(vec![r.publish_number.map(|n| n as i64)])),
        Arc::new(StringArray::from(vec![r.status()])),
        ts(r.as_of.timestamp_micros()),
        Arc::new(StringArray::from(vec![audits])),
        Arc::new(StringArray::from(vec![snapshots])),
        int(r.graded_version),
        int(r.base_version),
        ts(r.recorded_at_ms.saturating_mul(1000)),
    ];
    RecordBatch::try_new(log_schema(), columns).map_err(|e| ShackError::BadTable {
        table: LOG_TABLE.to_string(),
        detail: format!("cannot build a record: {e}"),
    })
}

/// Every record of the log in `table` (at `main`), by `seq`.
async fn read_log(table: &Table) -> Result<Vec<PublishRecord>> {
    // The log as last read, by the table's uuid and its `main` snapshot id (a snapshot's rows
    // never change): time travel, `compare` and a rollback read the whole log, one data file
    // per record (a run reads only its tail: [`read_log_tail`]). When `main` has moved
    // on from the snapshot last read by appends only (a publish, a blocked run, a rollback
    // each append one row), only what those appends added is read; anything else (another
    // table, a `main` moved back, a rewrite) reads the log whole.
    type LastRead = Option<(uuid::Uuid, Option<i64>, Vec<PublishRecord>)>;
    static LAST_READ: std::sync::Mutex<LastRead> = std::sync::Mutex::new(None);
    let key = (table.metadata().uuid(), table.head("main"));
    let last = LAST_READ.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let added = match last {
        Some((uuid, head, log)) if (uuid, head) == key => return Ok(log),
        Some((uuid, Some(head), log)) if uuid == key.0 && key.1.is_some() => {
            match table.read_incremental("main", Some(head), key.1).await {
                Ok(added) => Some((log, added)),
                Err(LakeError::NotAppendOnly { .. } | LakeError::NotAncestor { .. }) => None,
                Err(e) => return Err(ShackError::lake(LOG_TABLE, e)),
            }
        }
        _ => None,
    };
    let mut out = Vec::new();
    match added {
        Some((log, added)) => {
            out = log;
            for b in added.batches() {
                parse_batch(b, &mut out)?;
            }
        }
        None => {
            let batches = table
                .scan(&At::Main)
                .await
                .map_err(|e| ShackError::lake(LOG_TABLE, e))?;
            for b in &batches {
                parse_batch(b, &mut out)?;
            }
        }
    }
    out.sort_by_key(|r| r.seq);
    *LAST_READ.lock().unwrap_or_else(|p| p.into_inner()) = Some((key.0, key.1, out.clone()));
    Ok(out)
}

/// What a run needs of the publish log: its newest record's `seq`, its last publish, and how
/// many records it holds. A daily run needs no more, and the log grows by a data file a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogTail {
    /// The highest `seq` in the log (0 when it is empty): the next record is this plus one.
    pub newest_seq: u64,
    /// The newest published record (`None` when nothing was ever published).
    pub last_published: Option<PublishRecord>,
    /// How many records the log holds.
    pub records: u64,
}

impl LogTail {
    fn of(log: &[PublishRecord]) -> LogTail {
        LogTail {
            newest_seq: log.iter().map(|r| r.seq).max().unwrap_or(0),
            last_published: log.iter().rev().find(|r| r.is_published()).cloned(),
            records: log.len() as u64,
        }
    }
}

/// The [`LogTail`] of the log in `table` (at `main`), read from its newest appends back to the
/// last publish, not from the whole log: `main`'s ancestry is walked newest first, and each
/// append's rows read, until one of them holds a published record (usually the first: a run that
/// publishes appends its record in the publish commit). The rows an unbroken run of newest
/// appends added are all live at `main`, and each record's `seq` was the log's highest plus one
/// when it was appended, so the newest append holds the highest `seq`. Anything else on the way
/// (a rewrite of the log, an expired parent, a head with no record count) reads the log whole,
/// as [`read_log`] does.
async fn read_log_tail(table: &Table) -> Result<LogTail> {
    type LastTail = Option<(uuid::Uuid, Option<i64>, LogTail)>;
    static LAST_TAIL: std::sync::Mutex<LastTail> = std::sync::Mutex::new(None);
    let key = (table.metadata().uuid(), table.head("main"));
    if let Some((uuid, head, tail)) = LAST_TAIL.lock().unwrap_or_else(|p| p.into_inner()).clone()
        && (uuid, head) == key
    {
        return Ok(tail);
    }
    let tail = match walk_log_tail(table, key.1).await? {
        Some(tail) => tail,
        None => LogTail::of(&read_log(table).await?),
    };
    *LAST_TAIL.lock().unwrap_or_else(|p| p.into_inner()) = Some((key.0, key.1, tail.clone()));
    Ok(tail)
}

/// [`read_log_tail`]'s walk: `None` when the log must be read whole instead.
async fn walk_log_tail(table: &Table, head: Option<i64>) -> Result<Option<LogTail>> {
    let Some(head) = head else {
        return Ok(Some(LogTail::default()));
    };
    let ancestry = table
        .ancestry(head)
        .map_err(|e| ShackError::lake(LOG_TABLE, e))?;
    let Some(records) = ancestry
        .first()
        .and_then(|s| s.summary.get("total-records"))
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return Ok(None);
    };
    let mut seen = Vec::new();
    let mut found = false;
    for s in &ancestry {
        if s.operation != "append" {
            return Ok(None);
        }
        let added = match table
            .read_incremental("main", s.parent_id, Some(s.snapshot_id))
            .await
        {
            Ok(added) => added,
            Err(LakeError::NotAppendOnly { .. } | LakeError::NotAncestor { .. }) => {
                return Ok(None);
            }
            Err(e) => return Err(ShackError::lake(LOG_TABLE, e)),
        };
        for b in added.batches() {
            parse_batch(b, &mut seen)?;
        }
        found = seen.iter().any(PublishRecord::is_published);
        if found {
            break;
        }
    }
    // No publish among the appends walked, and the walk stopped at an expired parent: the rows
    // of the snapshots before it are still live, and may hold one.
    if !found && ancestry.last().is_some_and(|s| s.parent_id.is_some()) {
        return Ok(None);
    }
    seen.sort_by_key(|r| r.seq);
    Ok(Some(LogTail {
        records,
        ..LogTail::of(&seen)
    }))
}

/// The [`LogTail`] of the log as it stood in catalog version `v` (empty when it did not exist
/// yet).
pub async fn log_tail_in(catalog: &Catalog, v: &CatalogVersion) -> Result<LogTail> {
    match catalog.table_in(v, LOG_TABLE).await {
        Ok(t) => read_log_tail(&t).await,
        Err(LakeError::NoSuchTable { .. }) => Ok(LogTail::default()),
        Err(e) => Err(ShackError::lake(LOG_TABLE, e)),
    }
}

/// The log as it stood in catalog version `v` (empty when it did not exist yet): with the
/// tables of the same version, what a reader of that version sees published.
pub async fn read_log_in(catalog: &Catalog, v: &CatalogVersion) -> Result<Vec<PublishRecord>> {
    match catalog.table_in(v, LOG_TABLE).await {
        Ok(t) => read_log(&t).await,
        Err(LakeError::NoSuchTable { .. }) => Ok(Vec::new()),
        Err(e) => Err(ShackError::lake(LOG_TABLE, e)),
    }
}

fn bad_row(detail: impl Into<String>) -> ShackError {
    ShackError::BadTable {
        table: LOG_TABLE.to_string(),
        detail: detail.into(),
    }
}

fn column(b: &RecordBatch, name: &str, ty: &DataType) -> Result<ArrayRef> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| bad_row(format!("no column {name}")))?;
    cast(c, ty).map_err(|e| bad_row(format!("column {name}: {e}")))
}

fn parse_batch(b: &RecordBatch, out: &mut Vec<PublishRecord>) -> Result<()> {
    let ts_type = timestamp_type();
    let ints = |name: &str| -> Result<Int64Array> {
        let c = column(b, name, &DataType::Int64)?;
        c.as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| bad_row(format!("column {name} is not a long")))
    };
    let strings = |name: &str| -> Result<StringArray> {
        let c = column(b, name, &DataType::Utf8)?;
        c.as_any()
            .downcast_ref::<StringArray>()
            .cloned()
            .ok_or_else(|| bad_row(format!("column {name} is not a string")))
    };
    let times = |name: &str| -> Result<TimestampMicrosecondArray> {
        let c = column(b, name, &ts_type)?;
        c.as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .cloned()
            .ok_or_else(|| bad_row(format!("column {name} is not a timestamp")))
    };
    let seq = ints("seq")?;
    let number = ints("publish_number")?;
    let status = strings("status")?;
    let as_of = times("as_of")?;
    let audits = strings("audits")?;
    let snapshots = strings("snapshots")?;
    let graded = ints("graded_version")?;
    let base = ints("base_version")?;
    let recorded = times("recorded_at")?;
    let unsigned = |v: i64, what: &str| {
        u64::try_from(v).map_err(|_| bad_row(format!("{what} {v} is negative")))
    };
    for i in 0..b.num_rows() {
        let s = seq.value(i);
        let publish_number = if number.is_null(i) {
            None
        } else {
            Some(unsigned(number.value(i), "publish_number")?)
        };
        let consistent = match status.value(i) {
            STATUS_PUBLISHED | STATUS_ROLLED_BACK => publish_number.is_some(),
            STATUS_BLOCKED => publish_number.is_none(),
            _ => false,
        };
        if !consistent {
            return Err(bad_row(format!(
                "record {s} has status {:?} and publish_number {publish_number:?}",
                status.value(i)
            )));
        }
        let as_of = Utc
            .timestamp_micros(as_of.value(i))
            .single()
            .ok_or_else(|| bad_row(format!("record {s}: as_of out of range")))?;
        let audits: Vec<AuditResult> = serde_json::from_str(audits.value(i))
            .map_err(|e| bad_row(format!("record {s}: audits: {e}")))?;
        let snapshots: BTreeMap<String, i64> = serde_json::from_str(snapshots.value(i))
            .map_err(|e| bad_row(format!("record {s}: snapshots: {e}")))?;
        out.push(PublishRecord {
            seq: unsigned(s, "seq")?,
            publish_number,
            as_of,
            audits,
            snapshots,
            graded_version: unsigned(graded.value(i), "graded_version")?,
            base_version: unsigned(base.value(i), "base_version")?,
            recorded_at_ms: recorded.value(i).div_euclid(1000),
        });
    }
    Ok(())
}

/// Every record of the publish log (published and blocked), oldest first.
pub async fn publishes(catalog: &Catalog) -> Result<Vec<PublishRecord>> {
    let head = catalog
        .head()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    read_log_in(catalog, &head).await
}

/// The newest publish (`None` when nothing was ever published), read from the log's newest
/// records back to it ([`LogTail`]), not from the whole log.
pub async fn last_published(catalog: &Catalog) -> Result<Option<PublishRecord>> {
    let head = catalog
        .head()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    Ok(log_tail_in(catalog, &head).await?.last_published)
}

/// Time travel: the publish a reader asking "as of `as_of`" sees — the publish with the latest
/// as-of at or before it (of several with that as-of, the last recorded).
pub async fn publish_at_or_before(
    catalog: &Catalog,
    as_of: DateTime<Utc>,
) -> Result<Option<PublishRecord>> {
    Ok(publishes(catalog)
        .await?
        .into_iter()
        .filter(|r| r.is_published() && r.as_of <= as_of)
        .max_by_key(|r| (r.as_of, r.seq)))
}

/// The catalog version a log record landed in: the first version after its `base_version`
/// whose commit carries its `seq` ([`PROP_SEQ`]). `None` when that version has been expired.
pub async fn publish_version(catalog: &Catalog, record: &PublishRecord) -> Result<Option<u64>> {
    Ok(publish_version_info(catalog, record)
        .await?
        .map(|v| v.version))
}

/// The catalog version where `record` landed, with its properties ([`PROP_TOOK_MS`], …).
pub async fn publish_version_info(
    catalog: &Catalog,
    record: &PublishRecord,
) -> Result<Option<lake::CatalogVersion>> {
    let latest = catalog
        .latest_version_number()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    let want = record.seq.to_string();
    for n in record.base_version + 1..=latest {
        match catalog.version(n).await {
            Ok(v) => {
                if v.properties.get(PROP_SEQ) == Some(&want)
                    && v.changed.iter().any(|t| t == LOG_TABLE)
                {
                    return Ok(Some(v));
                }
            }
            Err(LakeError::NoSuchVersion { .. }) => {}
            Err(e) => return Err(ShackError::lake("the catalog", e)),
        }
    }
    Ok(None)
}

/// What [`rollback`] did.
#[derive(Clone, Debug)]
pub struct RollbackOutcome {
    /// The publish rolled back to.
    pub to: PublishRecord,
    /// The record appended to the log (a publish of `to`'s snapshots, with its own number).
    pub record: PublishRecord,
    /// The catalog version its commit created.
    pub version: u64,
    /// Per table, the heads it abandoned, by the tag that keeps each: `rollback-<n>-main`,
    /// `rollback-<n>-audit`.
    pub abandoned: BTreeMap<String, BTreeMap<String, i64>>,
    /// Tables first written after the publish rolled back to: their `main` (and a silver or
    /// gold table's `audit`) now points at nothing, as it did then.
    pub emptied: Vec<String>,
}

impl RollbackOutcome {
    /// `Rolled back to publish 1 (as of …) as publish 3: …`
    pub fn render(&self) -> String {
        let n = self.record.publish_number.unwrap_or_default();
        let tags: usize = self.abandoned.values().map(|m| m.len()).sum();
        let to = self.to.publish_number.unwrap_or_default();
        let emptied = match self.emptied.as_slice() {
            [] => String::new(),
            names => format!(
                " ({} first written after publish {to}: empty again, as then)",
                names.join(", ")
            ),
        };
        format!(
            "Rolled back to publish {to} (as of {}) as publish {n}: main of {} tables{emptied} and audit of every silver and gold table moved back in catalog version {}; {tags} abandoned head(s) kept by tags rollback-{n}-main / rollback-{n}-audit. Bronze keeps every tapped row: the next run rebuilds silver and gold from it.\n",
            stamp(self.to.as_of),
            self.record.snapshots.len() + self.emptied.len(),
            self.version,
        )
    }
}

/// Roll the lake back to publish `to`, in ONE catalog commit: `main` of every bronze, silver and
/// gold table, and `audit` of every silver and gold table, go back to the snapshots publish `to`
/// reached; every head that moves is first tagged (`rollback-<n>-main`, `rollback-<n>-audit`,
/// `n` the new record's number) so nothing is lost; the rollback is appended to the publish log
/// as a publish of those snapshots (status `rolled back`, with `reason`). Bronze's `audit` keeps
/// every tapped row — raw data is never rolled back — so the next run continues from there:
/// silver's watermarks (in the snapshots rolled back to) name bronze snapshots still in bronze's
/// ancestry, and it boils again what came after them.
///
/// A table first written after publish `to` goes back to before its first snapshot: `main`
/// (and a silver or gold table's `audit`) points at nothing, so it reads empty, as it did at that
/// publish; its heads are tagged like every other abandoned head, and the next run writes it
/// again from bronze.
///
/// Errors: `to` is not a publish number in the log; another writer committing meanwhile
/// (nothing committed; run it again).
pub async fn rollback(
    catalog: &Catalog,
    to: u64,
    reason: &str,
    now_ms: i64,
) -> Result<RollbackOutcome> {
    let lake_err = |what: &str, e| ShackError::lake(what, e);
    let head = catalog
        .head()
        .await
        .map_err(|e| lake_err("the catalog", e))?;
    let log = read_log_in(catalog, &head).await?;
    let numbers: Vec<u64> = log.iter().filter_map(|r| r.publish_number).collect();
    let target = log
        .iter()
        .find(|r| r.publish_number == Some(to))
        .cloned()
        .ok_or_else(|| ShackError::NoSuchPublish {
            number: to,
            detail: match (numbers.first(), numbers.last()) {
                (Some(a), Some(b)) => format!("the publishes are {a} to {b}"),
                _ => "nothing has been published yet".to_string(),
            },
        })?;
    let log_table = catalog
        .table_in(&head, LOG_TABLE)
        .await
        .map_err(|e| lake_err(LOG_TABLE, e))?;
    let n = numbers.iter().max().copied().unwrap_or(0) + 1;
    let seq = log.iter().map(|r| r.seq).max().unwrap_or(0) + 1;
    let mut changes = Vec::new();
    let mut abandoned: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    let mut emptied = Vec::new();
    for name in head.tables.keys() {
        let Some((ns, _)) = name.split_once('.') else {
            continue;
        };
        if !crate::grade::LAYERS.contains(&ns) {
            continue;
        }
        // A table first written after publish `to` (settlements arrive days after the first
        // orders) goes back to before its first snapshot: `main` reads empty, as it did then.
        let snapshot = target.snapshots.get(name).copied();
        let table = catalog
            .table_in(&head, name)
            .await
            .map_err(|e| lake_err(name, e))?;
        let mut ops = Vec::new();
        let branches: &[&str] = if ns == "bronze" {
            &["main"]
        } else {
            &["main", crate::bronze::AUDIT_BRANCH]
        };
        for branch in branches {
            if let Some(h) = table.head(branch)
                && Some(h) != snapshot
            {
                let keep = format!("rollback-{n}-{branch}");
                ops.push(RefOp::CreateTag {
                    name: keep.clone(),
                    snapshot_id: h,
                });
                abandoned.entry(name.clone()).or_default().insert(keep, h);
            }
            ops.push(match snapshot {
                Some(to) => RefOp::Reset {
                    branch: branch.to_string(),
                    to,
                },
                None => RefOp::Empty {
                    branch: branch.to_string(),
                },
            });
        }
        match snapshot {
            Some(snapshot_id) => ops.push(RefOp::CreateTag {
                name: tag(n),
                snapshot_id,
            }),
            None => emptied.push(name.clone()),
        }
        changes.push(table.stage_refs(&ops).map_err(|e| lake_err(name, e))?);
    }
    let record = PublishRecord {
        seq,
        publish_number: Some(n),
        as_of: target.as_of,
        audits: vec![AuditResult::new(
            ROLLBACK,
            crate::grade::Verdict::Pass,
            format!("to publish {to}: {reason}"),
            serde_json::json!({ "to": to, "reason": reason, "abandoned": abandoned }),
        )],
        snapshots: target
            .snapshots
            .iter()
            .filter(|(t, _)| head.tables.contains_key(*t))
            .map(|(t, s)| (t.clone(), *s))
            .collect(),
        graded_version: target.graded_version,
        base_version: head.version,
        recorded_at_ms: now_ms,
    };
    changes.push(
        log_table
            .stage_append("main", &[record_batch(&record)?], BTreeMap::new())
            .await
            .map_err(|e| lake_err(LOG_TABLE, e))?,
    );
    let props = BTreeMap::from([
        (PROP_SEQ.to_string(), seq.to_string()),
        (PROP_STATUS.to_string(), STATUS_ROLLED_BACK.to_string()),
        (PROP_NUMBER.to_string(), n.to_string()),
    ]);
    let message = format!(
        "rollback to publish {to} (as of {}) as publish {n}: {reason}",
        stamp(target.as_of)
    );
    let committed = catalog
        .commit(changes, "rollback", &message, props)
        .await
        .map_err(|e| {
            if e.is_conflict() {
                ShackError::PublishConflict {
                    detail: format!(
                        "another writer committed while the rollback to publish {to} was staged; nothing was rolled back, run it again: {e}"
                    ),
                }
            } else {
                lake_err("the rollback's commit", e)
            }
        })?;
    Ok(RollbackOutcome {
        to: target,
        record,
        version: committed.version,
        abandoned,
        emptied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_as_of_as_people_type_it() {
        let noon = Utc.with_ymd_and_hms(2026, 8, 17, 12, 0, 0).single();
        for s in [
            "2026-08-17T12:00:00Z",
            "2026-08-17T12:00Z",
            "2026-08-17t12:00z",
            "2026-08-17T09:00-03:00",
            "2026-08-17T14:00+02:00",
            "2026-08-17T12:00",
            "2026-08-17 12:00:00",
        ] {
            assert_eq!(parse_as_of(s), noon, "{s}");
        }
        assert_eq!(
            parse_as_of("2026-08-16"),
            Utc.with_ymd_and_hms(2026, 8, 16, 23, 59, 59).single()
        );
        for bad in [
            "2026-08-17T12Z",
            "2026-08-17T12:00Q",
            "noon",
            "2026-13-01",
            "",
        ] {
            assert_eq!(parse_as_of(bad), None, "{bad}");
        }
    }
}
