//! The experiment on the lake: bronze as an Iceberg table the loader appends to (one snapshot
//! per commit, the loader's clock in the snapshot summary), models reading it incrementally
//! after their stored snapshot id, expiry that protects those ids, the model targets
//! materialized as Iceberg tables, and the daily reconciliation run as SQL over them.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::compute::cast;
use arrow_array::{
    Array, ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use lake::{At, Catalog, ExpireOptions, Table};

use crate::TideError;
use crate::args::format_duration_ms;
use crate::experiment::{Bronze, Plan, Sink};
use crate::generator::{DAY_MS, EventType, Row};
use crate::model::{Model, Watermark};

/// The bronze table the loader commits to.
pub const BRONZE: &str = "tide.listing_event";
/// Snapshot summary key: the loader's (simulated) commit time, ms since the epoch.
pub const SUMMARY_LOADED_AT_MS: &str = "tide.loaded-at-ms";
/// Snapshot summary key on a target: the bronze snapshot the model consumed through. It is the
/// lake's watermark convention ([`lake::watermark_key`] of [`BRONZE`]), so the lake's own
/// expiry keeps what a target still names.
pub const SUMMARY_SOURCE_SNAPSHOT: &str = "sugarshack.watermark.tide.listing_event";

/// True for the tables this experiment creates: bronze and the model targets.
pub(crate) fn is_tide_table(name: &str) -> bool {
    name == BRONZE || name.starts_with("tide.fct_listing_event_")
}

/// Refuse a lake that holds (in any kept catalog version) tables that are not the tide's: the
/// tide's tidy keeps one catalog version and removes unreachable files with no grace period,
/// which would erase that lake's time travel. A lake of the tide's own tables is left to the
/// usual checks.
pub(crate) async fn refuse_foreign_tables(catalog: &Catalog, lake: &str) -> Result<(), TideError> {
    let mut foreign = std::collections::BTreeSet::new();
    for v in catalog.log().await? {
        foreign.extend(v.tables.into_keys().filter(|t| !is_tide_table(t)));
    }
    if foreign.is_empty() {
        return Ok(());
    }
    Err(TideError::ForeignTables {
        lake: lake.to_string(),
        tables: foreign.into_iter().collect(),
    })
}

/// `listing_event`'s columns (the targets have the same ones).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("event_id", DataType::Int64, false),
        Field::new(
            "event_ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
        Field::new("listing_id", DataType::Int64, false),
        Field::new("seller_id", DataType::Int64, false),
        Field::new("event_type", DataType::Utf8, false),
        Field::new("price_cents", DataType::Int64, false),
    ]))
}

/// Rows as one Arrow batch.
pub fn to_batch(rows: &[Row]) -> Result<RecordBatch, TideError> {
    let i64s = |f: fn(&Row) -> i64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        i64s(|r| r.event_id),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(rows.iter().map(|r| r.event_ts_ms * 1_000))
                .with_timezone("+00:00"),
        ),
        i64s(|r| r.listing_id),
        i64s(|r| r.seller_id),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.event_type.as_str()),
        )),
        i64s(|r| r.price_cents),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}

fn column(batch: &RecordBatch, name: &str, as_type: &DataType) -> Result<ArrayRef, TideError> {
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| TideError::Bronze(format!("a batch has no column {name:?}")))?;
    if col.null_count() > 0 {
        return Err(TideError::Bronze(format!("column {name:?} holds nulls")));
    }
    Ok(cast(col, as_type)?)
}

fn int64s(batch: &RecordBatch, name: &str) -> Result<Int64Array, TideError> {
    let c = column(batch, name, &DataType::Int64)?;
    c.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| TideError::Bronze(format!("column {name:?} is not integers")))
}

fn strings(batch: &RecordBatch, name: &str) -> Result<StringArray, TideError> {
    let c = column(batch, name, &DataType::Utf8)?;
    c.as_any()
        .downcast_ref::<StringArray>()
        .cloned()
        .ok_or_else(|| TideError::Bronze(format!("column {name:?} is not text")))
}

/// Rows back from an Arrow batch (as read from bronze).
pub fn from_batch(batch: &RecordBatch) -> Result<Vec<Row>, TideError> {
    let event_id = int64s(batch, "event_id")?;
    let event_ts = int64s(batch, "event_ts")?; // microseconds
    let listing_id = int64s(batch, "listing_id")?;
    let seller_id = int64s(batch, "seller_id")?;
    let event_type = strings(batch, "event_type")?;
    let price = int64s(batch, "price_cents")?;
    (0..batch.num_rows())
        .map(|i| {
            Ok(Row {
                event_id: event_id.value(i),
                event_ts_ms: event_ts.value(i).div_euclid(1_000),
                listing_id: listing_id.value(i),
                seller_id: seller_id.value(i),
                event_type: EventType::parse(event_type.value(i)).ok_or_else(|| {
                    TideError::Bronze(format!("unknown event_type {:?}", event_type.value(i)))
                })?,
                price_cents: price.value(i),
            })
        })
        .collect()
}

/// What the lake side did.
#[derive(Clone, Debug, Default)]
pub(crate) struct LakeStats {
    pub commits: u64,
    pub expired: u64,
    pub max_retained: u64,
    pub reads: u64,
    pub snapshots_read: u64,
    /// Snapshots whose data files were read from storage (each once).
    pub snapshots_fetched: u64,
    pub t_commit: std::time::Duration,
    pub t_read: std::time::Duration,
    pub t_expire: std::time::Duration,
}

/// Bronze as an Iceberg table of the lake.
///
/// A model's read is the lake's incremental read, in its two steps: which snapshots the branch
/// added after the model's watermark ([`Table::snapshots_between`], the ancestry walk), then the
/// data files each of them added ([`Table::files_added_by`], [`Table::read_data_files`]). A
/// snapshot's rows never change, so they are fetched once and shared by every cadence that
/// consumes them, until every model's watermark has passed them.
pub(crate) struct LakeBronze {
    catalog: Catalog,
    /// The table as of the newest catalog version (`None`: reload before use).
    table: Option<Table>,
    /// Rows of snapshots some model has not consumed yet, by snapshot id: (sequence, rows).
    fetched: BTreeMap<i64, (i64, Arc<Vec<Row>>)>,
    pub stats: LakeStats,
}

impl LakeBronze {
    /// Create the bronze table (refusing a lake that already has one).
    pub async fn create(catalog: Catalog) -> Result<Self, TideError> {
        let table = match catalog.create_table(BRONZE, &schema(), &[]).await {
            Ok(t) => t,
            Err(lake::LakeError::TableExists(t)) => return Err(TideError::LakeNotEmpty(t)),
            Err(e) => return Err(e.into()),
        };
        Ok(LakeBronze {
            catalog,
            table: Some(table),
            fetched: BTreeMap::new(),
            stats: LakeStats::default(),
        })
    }

    async fn table(&mut self) -> Result<Table, TideError> {
        if let Some(t) = &self.table {
            return Ok(t.clone());
        }
        let t = self.catalog.table(BRONZE).await?;
        self.table = Some(t.clone());
        Ok(t)
    }

    async fn rows_of(
        &mut self,
        table: &Table,
        s: &lake::SnapshotInfo,
    ) -> Result<Arc<Vec<Row>>, TideError> {
        if let Some((_, rows)) = self.fetched.get(&s.snapshot_id) {
            return Ok(rows.clone());
        }
        let files = table.files_added_by(s).await?;
        let mut rows = Vec::new();
        if !files.is_empty() {
            for b in table.read_data_files(&files).await? {
                rows.extend(from_batch(&b)?);
            }
        }
        let rows = Arc::new(rows);
        self.stats.snapshots_fetched += 1;
        self.fetched
            .insert(s.snapshot_id, (s.sequence_number, rows.clone()));
        Ok(rows)
    }
}

impl Bronze for LakeBronze {
    async fn commit(&mut self, loaded_at_ms: i64, rows: &[Row]) -> Result<(), TideError> {
        let t0 = std::time::Instant::now();
        let batch = to_batch(rows)?;
        let at = chrono::DateTime::from_timestamp_millis(loaded_at_ms)
            .map(|d| d.to_rfc3339())
            .unwrap_or_default();
        let props = BTreeMap::from([
            (SUMMARY_LOADED_AT_MS.to_string(), loaded_at_ms.to_string()),
            ("tide.loaded-at".to_string(), at.clone()),
            ("tide.rows".to_string(), rows.len().to_string()),
        ]);
        // The loader is bronze's only writer: stage on the table it holds and commit; a
        // conflict would mean someone else writes here, and is an error.
        let table = self.table().await?;
        let change = table.stage_append("main", &[batch], props).await?;
        let committed = self
            .catalog
            .commit(
                vec![change],
                "append",
                &format!("load {BRONZE} at {at}"),
                BTreeMap::new(),
            )
            .await?;
        // Continue from the commit's own metadata (the next stage checks it is still the head).
        let table = self
            .catalog
            .table_after(&committed, BRONZE)?
            .ok_or_else(|| TideError::Bronze(format!("the load commit did not update {BRONZE}")))?;
        self.stats.max_retained = self.stats.max_retained.max(table.snapshots().len() as u64);
        self.table = Some(table);
        self.stats.commits += 1;
        self.stats.t_commit += t0.elapsed();
        Ok(())
    }

    async fn read_after(
        &mut self,
        after: Option<i64>,
        now_ms: i64,
    ) -> Result<(Option<i64>, Vec<Row>), TideError> {
        let t0 = std::time::Instant::now();
        let table = self.table().await?;
        let snapshots = table.snapshots_between("main", after, None)?;
        let through = snapshots.last().map(|s| s.snapshot_id).or(after);
        let mut rows = Vec::new();
        let (mut last_seq, mut last_loaded) = (i64::MIN, i64::MIN);
        for s in &snapshots {
            let loaded: i64 = s
                .summary
                .get(SUMMARY_LOADED_AT_MS)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    TideError::Bronze(format!(
                        "snapshot {} has no {SUMMARY_LOADED_AT_MS}",
                        s.snapshot_id
                    ))
                })?;
            // Visibility order is snapshot order, and a run never sees the future.
            if s.sequence_number <= last_seq || loaded <= last_loaded || loaded > now_ms {
                return Err(TideError::Bronze(format!(
                    "snapshot {} (sequence {}, loaded at {loaded}) is out of order for a read at {now_ms}",
                    s.snapshot_id, s.sequence_number
                )));
            }
            (last_seq, last_loaded) = (s.sequence_number, loaded);
            rows.extend_from_slice(&self.rows_of(&table, s).await?);
        }
        self.stats.reads += 1;
        self.stats.snapshots_read += snapshots.len() as u64;
        self.stats.t_read += t0.elapsed();
        Ok((through, rows))
    }

    async fn expire(&mut self, protect: &[i64]) -> Result<(), TideError> {
        let t0 = std::time::Instant::now();
        // Every model has consumed the snapshots up to the oldest watermark: drop their rows.
        let seqs: Option<Vec<i64>> = protect
            .iter()
            .map(|id| self.fetched.get(id).map(|(seq, _)| *seq))
            .collect();
        if let Some(oldest) = seqs.and_then(|v| v.into_iter().min()) {
            self.fetched.retain(|_, (seq, _)| *seq > oldest);
        }
        let opts = ExpireOptions {
            // Snapshot timestamps are wall clock; age means nothing here. Keep the head and
            // everything from the oldest model watermark on.
            older_than_ms: i64::MAX,
            retain_last: 1,
            protect: protect.to_vec(),
        };
        // The models are the only consumers and `protect` is where each has read to, which is
        // at or past what its target last recorded: expire by those, staged on the table this
        // loader holds (the catalog-wide expiry would also keep back to each target's recorded
        // watermark, up to a simulated day of snapshots more).
        let table = self.table().await?;
        if let Some((change, expired)) = table.stage_expire(&opts)? {
            self.catalog
                .commit(
                    vec![change],
                    "expire-snapshots",
                    &format!("expire {} snapshots of {BRONZE}", expired.len()),
                    BTreeMap::new(),
                )
                .await?;
            self.stats.expired += expired.len() as u64;
        }
        self.table = None;
        self.stats.t_expire += t0.elapsed();
        Ok(())
    }
}

/// One materialized target.
#[derive(Clone, Debug)]
pub(crate) struct TargetTable {
    pub model: usize,
    pub target: usize,
    /// `namespace.table`.
    pub name: String,
}

/// The table name of one target: `tide.fct_listing_event_15m_a`, and for the story's model
/// on its schedule `tide.fct_listing_event_story_a`.
pub(crate) fn target_name(m: &Model, w: Watermark) -> String {
    let model = match m.schedule {
        Some(_) => "story".to_string(),
        None => format_duration_ms(m.cadence_ms),
    };
    format!("tide.fct_listing_event_{model}_{}", w.name())
}

/// The model targets as Iceberg tables: every flush commits, in one catalog commit across all
/// of them, the rows each target kept since the last one, with the model's state in the new
/// snapshot's summary — for (b), the bronze snapshot id it consumed through, which the model
/// then reads back and continues from.
pub(crate) struct LakeSink {
    catalog: Catalog,
    /// Per model, per target: the table.
    names: Vec<Vec<String>>,
    /// Catalog commits of the targets.
    pub commits: u64,
    /// Tidy the lake once a simulated week ([`LakeSink::tidy`]).
    pub tidy: bool,
    /// What the weekly tidy removed: catalog versions, and files no kept version reached.
    pub versions_expired: u64,
    pub files_removed: u64,
    pub t_flush: std::time::Duration,
    pub t_tidy: std::time::Duration,
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.to_rfc3339())
        .unwrap_or_default()
}

impl LakeSink {
    /// Create every target of the plan's models, empty, in one catalog commit.
    pub async fn create(catalog: Catalog, plan: &Plan) -> Result<Self, TideError> {
        let mut names = Vec::new();
        let mut changes = Vec::new();
        for spec in plan.model_specs() {
            let m = Model::from_spec(&spec);
            let mut per_model = Vec::new();
            for t in &m.targets {
                let name = target_name(&m, t.watermark);
                changes.push(catalog.stage_create_table(&name, &schema(), &[]).await?);
                per_model.push(name);
            }
            names.push(per_model);
        }
        match catalog
            .commit(
                changes,
                "create-table",
                "create the tide model targets",
                BTreeMap::new(),
            )
            .await
        {
            Ok(_) => {}
            Err(lake::LakeError::Conflict { table, .. }) => {
                return Err(TideError::LakeNotEmpty(table));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(LakeSink {
            catalog,
            names,
            commits: 0,
            tidy: true,
            versions_expired: 0,
            files_removed: 0,
            t_flush: std::time::Duration::ZERO,
            t_tidy: std::time::Duration::ZERO,
        })
    }

    /// Every target table.
    pub fn tables(&self) -> Vec<TargetTable> {
        let mut out = Vec::new();
        for (mi, per_model) in self.names.iter().enumerate() {
            for (ti, name) in per_model.iter().enumerate() {
                out.push(TargetTable {
                    model: mi,
                    target: ti,
                    name: name.clone(),
                });
            }
        }
        out
    }
}

impl Sink for LakeSink {
    async fn flush(&mut self, models: &mut [Model], now_ms: i64) -> Result<(), TideError> {
        let t0 = std::time::Instant::now();
        let mut changes = Vec::new();
        let mut written: Vec<(usize, usize)> = Vec::new();
        for (mi, m) in models.iter_mut().enumerate() {
            let (cadence_ms, runs, last_run, consumed) =
                (m.cadence_ms, m.runs, m.last_run_ms, m.consumed);
            for (ti, t) in m.targets.iter_mut().enumerate() {
                let rows = t.take_pending();
                if rows.is_empty() {
                    continue;
                }
                let mut props = BTreeMap::from([
                    ("tide.model".to_string(), "fct_listing_event".to_string()),
                    ("tide.cadence".to_string(), format_duration_ms(cadence_ms)),
                    ("tide.watermark".to_string(), t.watermark.describe()),
                    ("tide.runs".to_string(), runs.to_string()),
                    (
                        "tide.last-run".to_string(),
                        last_run.map(rfc3339).unwrap_or_default(),
                    ),
                    ("tide.source-table".to_string(), BRONZE.to_string()),
                ]);
                match t.watermark {
                    Watermark::SnapshotId => {
                        if let Some(id) = consumed {
                            props.insert(SUMMARY_SOURCE_SNAPSHOT.to_string(), id.to_string());
                        }
                    }
                    _ => {
                        if let Some(ts) = t.max_event_ts() {
                            props.insert("tide.max-event-ts".to_string(), rfc3339(ts));
                        }
                    }
                }
                let table = self.catalog.table(&self.names[mi][ti]).await?;
                changes.push(
                    table
                        .stage_append("main", &[to_batch(&rows)?], props)
                        .await?,
                );
                written.push((mi, ti));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let committed = self
            .catalog
            .commit(
                changes,
                "model-run",
                &format!("fct_listing_event through {}", rfc3339(now_ms)),
                BTreeMap::new(),
            )
            .await?;
        self.commits += 1;
        // (b)'s watermark is the target's own state: read it back and continue from it.
        for (mi, ti) in written {
            let m = &mut models[mi];
            if m.targets[ti].watermark != Watermark::SnapshotId {
                continue;
            }
            let name = &self.names[mi][ti];
            let table = self
                .catalog
                .table_at_version(name, committed.version)
                .await?;
            let head = table.head("main").ok_or_else(|| {
                TideError::Target(format!("{name} has no snapshot after its commit"))
            })?;
            let stored: Option<i64> = table
                .snapshot(head)?
                .summary
                .get(SUMMARY_SOURCE_SNAPSHOT)
                .and_then(|v| v.parse().ok());
            if stored != m.consumed {
                return Err(TideError::Target(format!(
                    "{name} stored watermark {stored:?}, the model holds {:?}",
                    m.consumed
                )));
            }
            m.consumed = stored;
        }
        self.t_flush += t0.elapsed();
        if self.tidy && self.commits.is_multiple_of(TIDY_EVERY_FLUSHES) {
            self.tidy().await?;
        }
        Ok(())
    }
}

/// Tidy the lake every this many target commits (a simulated week), and at the end.
const TIDY_EVERY_FLUSHES: u64 = 7;

impl LakeSink {
    /// What a lake does between runs, once a simulated week: each target keeps only its newest
    /// snapshot (the one whose summary carries the model's state), the catalog keeps only its
    /// newest version, and the files no kept version reaches are removed. Without it every
    /// expired bronze snapshot's metadata stays on disk (1.1 GB over ninety days). Removal
    /// needs no grace period: this lake's only writer is this run, and it is between commits.
    pub(crate) async fn tidy(&mut self) -> Result<(), TideError> {
        if !self.tidy {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let opts = ExpireOptions {
            older_than_ms: i64::MAX,
            retain_last: 1,
            protect: Vec::new(),
        };
        let marks = self.catalog.watermarks().await?;
        let mut changes = Vec::new();
        for name in self.names.iter().flatten() {
            let table = self.catalog.table(name).await?;
            let mut opts = opts.clone();
            if let Some(ids) = marks.get(table.name()) {
                opts.protect.extend(ids.iter().copied());
            }
            if let Some((change, _)) = table.stage_expire(&opts)? {
                changes.push(change);
            }
        }
        if !changes.is_empty() {
            self.catalog
                .commit(
                    changes,
                    "expire-snapshots",
                    "the model targets keep their newest snapshot",
                    BTreeMap::new(),
                )
                .await?;
        }
        self.versions_expired += self.catalog.expire_versions(1).await?.len() as u64;
        let removed = self
            .catalog
            .remove_orphans(chrono::Utc::now().timestamp_millis(), 0)
            .await?;
        self.files_removed += removed.total() as u64;
        self.t_tidy += t0.elapsed();
        Ok(())
    }
}

/// The story's reconciliation for one target.
pub(crate) fn story_sql(target: &str) -> String {
    format!(
        "with src as (\n    select date_trunc('day', event_ts) as d, count(*) as n\n    from {BRONZE} group by 1),\nmdl as (\n    select date_trunc('day', event_ts) as d, count(*) as n\n    from {target} group by 1)\nselect src.d, src.n as source_rows, coalesce(mdl.n, 0) as model_rows,\n       src.n - coalesce(mdl.n, 0) as missing\nfrom src left join mdl using (d)\nwhere src.n <> coalesce(mdl.n, 0)\norder by src.d"
    )
}

/// Every target's reconciliation in one statement (bronze is scanned once).
pub(crate) fn all_targets_sql(tables: &[TargetTable]) -> String {
    let mdl: Vec<String> = tables
        .iter()
        .map(|t| {
            format!(
                "    select '{n}' as target, date_trunc('day', event_ts) as d, count(*) as n from {n} group by date_trunc('day', event_ts)",
                n = t.name
            )
        })
        .collect();
    let names: Vec<String> = tables.iter().map(|t| format!("('{}')", t.name)).collect();
    format!(
        "with src as (\n    select date_trunc('day', event_ts) as d, count(*) as n\n    from {BRONZE} group by 1),\nmdl as (\n{}),\ntargets as (select column1 as target from (values {}))\nselect targets.target, src.d, src.n as source_rows, coalesce(mdl.n, 0) as model_rows,\n       src.n - coalesce(mdl.n, 0) as missing\nfrom src cross join targets\nleft join mdl on mdl.target = targets.target and mdl.d = src.d\norder by targets.target, src.d",
        mdl.join("\n    union all\n"),
        names.join(", ")
    )
}

/// Run the reconciliation over the lake: per target, per day (index from `start_ms`),
/// (source rows, model rows).
pub(crate) async fn reconcile(
    catalog: &Catalog,
    tables: &[TargetTable],
    start_ms: i64,
) -> Result<(String, BTreeMap<String, BTreeMap<i64, (u64, u64)>>), TideError> {
    let sql = all_targets_sql(tables);
    let ctx = catalog.sql(None, &At::Main).await?;
    let batches = ctx.query(&sql).await?;
    let mut out: BTreeMap<String, BTreeMap<i64, (u64, u64)>> = BTreeMap::new();
    for b in &batches {
        let target = strings(b, "target")?;
        let d = b
            .column_by_name("d")
            .ok_or_else(|| TideError::Target("the reconciliation returned no day column".into()))?;
        let d = cast(d, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let d = cast(&d, &DataType::Int64)?;
        let d = d
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| {
                TideError::Target("the reconciliation's days are not timestamps".into())
            })?;
        let src = int64s(b, "source_rows")?;
        let mdl = int64s(b, "model_rows")?;
        for i in 0..b.num_rows() {
            let day = (d.value(i).div_euclid(1_000) - start_ms).div_euclid(DAY_MS);
            let count = |v: i64| u64::try_from(v).unwrap_or(0);
            out.entry(target.value(i).to_string())
                .or_default()
                .insert(day, (count(src.value(i)), count(mdl.value(i))));
        }
    }
    Ok((sql, out))
}

fn micros(ms: i64) -> i64 {
    ms.saturating_mul(1_000)
}

/// The story's business figures over the lake: per event type, before and after the change,
/// source and model rows and GMV; and the catalogue at each cutoff.
pub(crate) fn business_sql(target: &str, split_ms: i64) -> String {
    let side = |table: &str| {
        format!(
            "select event_type, arrow_cast(event_ts, 'Int64') >= {split} as after, count(*) as n, \
             sum(case when event_type = 'sold' then price_cents else 0 end) as v \
             from {table} group by 1, 2",
            split = micros(split_ms)
        )
    };
    format!(
        "with s as ({}),\nm as ({})\nselect s.event_type, s.after, s.n as source_rows, coalesce(m.n, 0) as model_rows,\n       s.v as source_gmv, coalesce(m.v, 0) as model_gmv\nfrom s left join m on s.event_type = m.event_type and s.after = m.after\norder by 1, 2",
        side(BRONZE),
        side(target)
    )
}

/// Listings live in the shop at `cutoff_ms` (created before it, not sold or delisted before
/// it), those the model does not show as live, their last price (only the missing listings'
/// prices are looked up), and the model's extras. Only the rows that create or end a listing
/// are grouped, so the query holds one small state per listing.
pub(crate) fn catalogue_sql(target: &str, cutoff_ms: i64) -> String {
    let c = micros(cutoff_ms);
    let state = |table: &str| {
        format!(
            "select listing_id, \
             min(case when event_type = 'listing_created' then ts end) as created, \
             min(case when event_type <> 'listing_created' then ts end) as gone \
             from (select listing_id, event_type, arrow_cast(event_ts, 'Int64') as ts from {table} \
             where event_type in ('listing_created', 'sold', 'delisted')) \
             where ts < {c} group by listing_id"
        )
    };
    format!(
        "with s as ({}),\nm as ({}),\n\
         st as (select s.listing_id, s.created is not null and s.gone is null as shop, \
         coalesce(m.created is not null and m.gone is null, false) as wh \
         from s left join m on s.listing_id = m.listing_id),\n\
         p as (select listing_id, last_value(price_cents order by ts, event_id) as price \
         from (select listing_id, price_cents, event_id, arrow_cast(event_ts, 'Int64') as ts from {BRONZE} \
         where event_type in ('listing_created', 'price_changed')) \
         where ts < {c} and listing_id in (select listing_id from st where shop and not wh) \
         group by listing_id)\n\
         select \
         sum(case when shop then 1 else 0 end) as shop_live, \
         sum(case when shop and not wh then 1 else 0 end) as missing, \
         sum(case when shop and not wh then coalesce(p.price, 0) else 0 end) as missing_value, \
         sum(case when wh and not shop then 1 else 0 end) as extra\n\
         from st left join p on st.listing_id = p.listing_id",
        state(BRONZE),
        state(target),
    )
}

fn first_i64(batches: &[RecordBatch], name: &str) -> Result<i64, TideError> {
    for b in batches {
        if b.num_rows() == 0 {
            continue;
        }
        let col = b
            .column_by_name(name)
            .ok_or_else(|| TideError::Target(format!("the catalogue has no column {name:?}")))?;
        if col.is_null(0) {
            return Ok(0);
        }
        let c = cast(col, &DataType::Int64)?;
        return c
            .as_any()
            .downcast_ref::<Int64Array>()
            .map(|a| a.value(0))
            .ok_or_else(|| TideError::Target(format!("column {name:?} is not an integer")));
    }
    Ok(0)
}

/// Run the story's business SQL over the lake.
pub(crate) async fn story_business(
    catalog: &Catalog,
    target: &str,
    split_ms: i64,
    cutoffs_ms: &[i64],
) -> Result<crate::story::StorySql, TideError> {
    let ctx = catalog.sql(None, &At::Main).await?;
    let sql = business_sql(target, split_ms);
    let mut out = crate::story::StorySql::default();
    for b in &ctx.query(&sql).await? {
        let t = strings(b, "event_type")?;
        let after = column(b, "after", &DataType::Boolean)?;
        let after = after
            .as_any()
            .downcast_ref::<arrow_array::BooleanArray>()
            .cloned()
            .ok_or_else(|| TideError::Target("the phase column is not a boolean".into()))?;
        let (sn, mn) = (int64s(b, "source_rows")?, int64s(b, "model_rows")?);
        let (sv, mv) = (int64s(b, "source_gmv")?, int64s(b, "model_gmv")?);
        for i in 0..b.num_rows() {
            let count = |v: i64| u64::try_from(v).unwrap_or(0);
            out.by_type.insert(
                (t.value(i).to_string(), after.value(i)),
                (
                    count(sn.value(i)),
                    count(mn.value(i)),
                    sv.value(i),
                    mv.value(i),
                ),
            );
        }
    }
    let mut sqls = vec![sql];
    for c in cutoffs_ms {
        let q = catalogue_sql(target, *c);
        let batches = ctx.query(&q).await?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        out.catalogue.push(crate::story::Catalogue {
            at: chrono::DateTime::from_timestamp_millis(*c)
                .map(|d| d.format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_default(),
            shop_live: count(first_i64(&batches, "shop_live")?),
            missing: count(first_i64(&batches, "missing")?),
            missing_value_cents: first_i64(&batches, "missing_value")?,
            extra: count(first_i64(&batches, "extra")?),
        });
        sqls.push(q);
    }
    out.sql = sqls.join(";\n\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_survive_arrow() -> Result<(), TideError> {
        let rows = vec![
            Row {
                event_id: 7,
                event_ts_ms: 1_780_444_800_123,
                listing_id: 8,
                seller_id: 9,
                event_type: EventType::Sold,
                price_cents: 1_234,
            },
            Row {
                event_id: 8,
                event_ts_ms: 1_780_444_801_000,
                listing_id: 9,
                seller_id: 999_999,
                event_type: EventType::ListingCreated,
                price_cents: 200,
            },
        ];
        assert_eq!(from_batch(&to_batch(&rows)?)?, rows);
        Ok(())
    }

    #[test]
    fn the_target_watermark_is_the_lakes_convention() -> Result<(), TideError> {
        let key = lake::watermark_key(&lake::TableName::parse(BRONZE)?);
        assert_eq!(SUMMARY_SOURCE_SNAPSHOT, key);
        assert!(SUMMARY_SOURCE_SNAPSHOT.starts_with(lake::WATERMARK_PREFIX));
        Ok(())
    }

    #[test]
    fn target_names_are_lake_names() {
        let n = target_name(
            &Model::new(900_000, &[], 0),
            Watermark::MaxEventTsLookback {
                lookback_ms: 1_800_000,
            },
        );
        assert_eq!(n, "tide.fct_listing_event_15m_a_lb30m");
        assert!(lake::TableName::parse(&n).is_ok());
        let odd = target_name(&Model::new(5_400_000, &[], 0), Watermark::SnapshotId);
        assert!(lake::TableName::parse(&odd).is_ok());
    }
}
