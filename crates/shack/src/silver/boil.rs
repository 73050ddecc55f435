//! One boil: read what bronze added since the watermarks (or all of it), parse, deduplicate,
//! fold, check, and commit every silver table in one catalog version.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, LargeBinaryArray, RecordBatch, StringArray};
use futures::StreamExt;
use lake::iceberg::expr::{Predicate, Reference};
use lake::iceberg::spec::Datum;
use lake::{
    At, Catalog, CatalogVersion, LakeError, MatchCondition, Merge, Replace, Table, TableChange,
};
use sugarbush::{Progress, Source, thousands};

use crate::bronze::{self, LANDING_FILES};
use crate::error::{Result, ShackError};

use super::parse::{
    self, CURRENCIES, EVENT_TYPES, Parsed, Parsers, Reason, STATUSES, known_versions,
};
use super::tables::{
    self, FxRow, Lineage, OrderRow, PaymentRow, QuarantineRow, SettlementRow, TABLES,
};
use super::{
    BoilOptions, BoilReport, CheckReport, MergeStats, Severity, SourceReport, TableReport, inputs,
    props, watermark_key,
};

/// A bronze line with its lineage: where its text is in the read's batches, not a copy of it
/// (a full build holds every line of bronze at once; a copy held all of that text twice).
struct BronzeRow {
    /// The batch of [`BronzeRead::batches`] that holds the line.
    batch: u32,
    /// Its row in that batch.
    row: u32,
    lineage: Lineage,
}

/// What a boil read of one bronze table: its lines' columns (`_raw`, `_raw_bytes` only, the
/// rest dropped as read) and one [`BronzeRow`] per line.
#[derive(Default)]
struct BronzeRead {
    batches: Vec<RecordBatch>,
    rows: Vec<BronzeRow>,
}

/// The columns of a bronze table the boil reads (its `_file_sha256` is the tap's business).
const BRONZE_COLUMNS: [&str; 5] = [
    "_raw",
    "_raw_bytes",
    "_landing_file",
    "_line",
    "_arrived_at",
];

/// A bronze line's text as stored, and its bytes when they are not UTF-8: one batch's
/// columns (the arrays share the read's buffers).
struct RawColumns {
    raw: StringArray,
    bytes: LargeBinaryArray,
}

/// Each batch's [`RawColumns`] while some of its lines are still to be parsed.
///
/// A full build parses the whole of bronze; holding every batch until the last line was parsed
/// held all of bronze's text beside every row parsed from it (the full build's peak). Lines
/// are parsed in lineage order, close to the order bronze is read in, so a batch whose lines
/// are all parsed is let go as the parse goes.
struct LiveColumns {
    columns: Vec<Option<RawColumns>>,
    /// Lines of each batch not parsed yet.
    left: Vec<u32>,
}

impl LiveColumns {
    /// The `_raw` and `_raw_bytes` columns of every batch of a read, each kept until the last
    /// of `rows` that points into it is [released](Self::release).
    fn new(table: &str, batches: Vec<RecordBatch>, rows: &[BronzeRow]) -> Result<LiveColumns> {
        let columns = batches
            .iter()
            .map(|b| {
                Ok(Some(RawColumns {
                    raw: tables::strs(table, b, "_raw")?.clone(),
                    bytes: raw_bytes_column(table, b)?.clone(),
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut left = vec![0u32; columns.len()];
        for r in rows {
            if let Some(n) = left.get_mut(r.batch as usize) {
                *n += 1;
            }
        }
        Ok(LiveColumns { columns, left })
    }

    /// The error for a line whose batch was let go before it was parsed (a bug in the boil's
    /// bookkeeping, not in the data).
    fn gone(table: &str) -> ShackError {
        ShackError::BadTable {
            table: table.to_string(),
            detail: "a line's batch was let go before the line was parsed".into(),
        }
    }

    /// `rows` are parsed: let go of each batch none of whose lines are left.
    fn release(&mut self, rows: &[BronzeRow]) {
        for r in rows {
            let b = r.batch as usize;
            if let Some(n) = self.left.get_mut(b) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.columns[b] = None;
                }
            }
        }
    }
}

impl BronzeRead {
    /// Keep `b`'s lines (each with the snapshot `snapshot_of` says added its landing file) and
    /// only the two columns the parse needs.
    fn push(
        &mut self,
        table: &str,
        b: &RecordBatch,
        snapshot_of: impl Fn(&str) -> Option<(i64, i64)>,
    ) -> Result<()> {
        let index = u32::try_from(self.batches.len()).map_err(|_| ShackError::BadTable {
            table: table.to_string(),
            detail: "more batches than a boil reads at once".into(),
        })?;
        let file = tables::strs(table, b, "_landing_file")?;
        let line = tables::longs(table, b, "_line")?;
        let arrived = tables::stamps(table, b, "_arrived_at")?;
        let mut last = None;
        // The snapshot of the last run of one file's lines, asked once per run, not per line.
        let mut snap: Option<(Arc<str>, (i64, i64))> = None;
        for i in 0..b.num_rows() {
            let f = file.value(i);
            let name = tables::shared_name(&mut last, f);
            let (snapshot_id, sequence_number) = match &snap {
                Some((held, s)) if Arc::ptr_eq(held, &name) => *s,
                _ => {
                    let s = snapshot_of(f).ok_or_else(|| ShackError::BadTable {
                        table: table.to_string(),
                        detail: format!("{LANDING_FILES} does not say which snapshot holds {f}"),
                    })?;
                    snap = Some((name.clone(), s));
                    s
                }
            };
            self.rows.push(BronzeRow {
                batch: index,
                row: i as u32,
                lineage: Lineage {
                    sequence_number,
                    arrived_us: arrived.value(i),
                    file: name,
                    line: line.value(i),
                    snapshot_id,
                },
            });
        }
        let keep = ["_raw", "_raw_bytes"]
            .iter()
            .map(|c| {
                b.schema().index_of(c).map_err(|_| ShackError::BadTable {
                    table: table.to_string(),
                    detail: format!("no column {c:?}"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let kept = b.project(&keep).map_err(|e| ShackError::BadTable {
            table: table.to_string(),
            detail: format!("keeping its line columns: {e}"),
        })?;
        self.batches.push(kept);
        Ok(())
    }
}

impl RawColumns {
    /// The line's text, and whether its bytes were UTF-8.
    fn line(&self, row: usize) -> (&str, bool) {
        (self.raw.value(row), self.bytes.is_null(row))
    }

    /// The line's bytes as landed, when they were not UTF-8.
    fn bytes(&self, row: usize) -> Option<Vec<u8>> {
        (!self.bytes.is_null(row)).then(|| self.bytes.value(row).to_vec())
    }
}

fn raw_bytes_column<'a>(table: &str, b: &'a RecordBatch) -> Result<&'a LargeBinaryArray> {
    b.column_by_name("_raw_bytes")
        .and_then(|c| c.as_any().downcast_ref::<LargeBinaryArray>())
        .ok_or_else(|| ShackError::BadTable {
            table: table.to_string(),
            detail: "no binary column \"_raw_bytes\"".into(),
        })
}

/// Boil silver from bronze on `options.branch`: see the module docs of [`crate::silver`].
///
/// On any error nothing was committed (a failed check included); the data files written so far
/// are orphans the next run's or tap's sweep removes (the boil marks its work in the catalog,
/// `boil-<uuid>`, and a failed one leaves the mark for them to find).
pub async fn boil(
    catalog: &Catalog,
    options: &BoilOptions,
    progress: &(dyn Progress + Sync),
) -> Result<BoilReport> {
    crate::run::marked(
        catalog,
        crate::run::BOIL_MARK,
        boil_unmarked(catalog, options, progress),
    )
    .await
}

async fn boil_unmarked(
    catalog: &Catalog,
    options: &BoilOptions,
    progress: &(dyn Progress + Sync),
) -> Result<BoilReport> {
    let StagedBoil {
        mut report,
        changes,
        message,
        properties,
    } = stage_boil(catalog, options, progress).await?;
    if changes.is_empty() {
        return Ok(report);
    }
    progress.message("committing");
    let committed = crate::layer::commit(
        catalog,
        changes,
        "boil",
        &message,
        properties,
        "the boil's commit",
    )
    .await?;
    report.catalog_version = Some(committed.version);
    progress.message("committed");
    Ok(report)
}

/// A boil staged and not committed (none of its changes when nothing new arrived).
pub type StagedBoil = crate::layer::Staged<BoilReport>;

/// Everything [`boil`] does but the commit.
pub async fn stage_boil(
    catalog: &Catalog,
    options: &BoilOptions,
    progress: &(dyn Progress + Sync),
) -> Result<StagedBoil> {
    let parsers = enabled_parsers(&options.parsers)?;
    let boil_id = uuid::Uuid::now_v7().to_string();
    let branch = options.branch.as_str();

    // 1. Every table at one catalog version; silver's created on first use.
    progress.message("opening tables");
    let first = catalog
        .head()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    for name in bronze::table_names() {
        if !first.tables.contains_key(&name) {
            return Err(ShackError::NoBronze { table: name });
        }
    }
    let (head, created_tables) = crate::layer::open_tables(
        catalog,
        &TABLES,
        tables::schema,
        tables::partitioning,
        tables::properties,
    )
    .await?;
    let mut bronze_tables: BTreeMap<Source, Table> = BTreeMap::new();
    for source in Source::ALL {
        let name = bronze::table_name(source);
        let t = catalog.table_in(&head, &name).await.map_err(|e| match e {
            LakeError::NoSuchTable { .. } => ShackError::NoBronze {
                table: name.clone(),
            },
            e => ShackError::lake(&name, e),
        })?;
        bronze_tables.insert(source, t);
    }
    let silver: BTreeMap<&'static str, Table> = TABLES
        .into_iter()
        .zip(crate::layer::open_all(catalog, &head, &TABLES).await?)
        .collect();

    // 2. Where each source's watermark is, and whether it can be walked on from.
    let mut rebuilt_because = None;
    let mut after: BTreeMap<Source, Option<i64>> = BTreeMap::new();
    if !options.replay {
        for source in Source::ALL {
            let b = &bronze_tables[&source];
            match watermark(&silver, source, branch) {
                Ok(Some(id)) if !b.head(branch).is_some_and(|h| b.is_ancestor(id, h)) => {
                    rebuilt_because = Some(format!(
                        "the watermark names snapshot {id} of {}, which its {branch} branch no longer holds; silver was rebuilt from all of bronze",
                        bronze::table_name(source)
                    ));
                }
                Ok(wm) => {
                    after.insert(source, wm);
                }
                Err(why) => {
                    rebuilt_because = Some(format!("{why}; silver was rebuilt from all of bronze"))
                }
            }
        }
    }
    // 3. Read bronze: the new part, or all of it. Incremental reads cross appends only: a
    //    bronze snapshot of another kind since the watermark (a compaction) means a rebuild.
    let mut reads: BTreeMap<Source, (BronzeRead, Option<i64>)> = BTreeMap::new();
    if !options.replay && rebuilt_because.is_none() {
        progress.message("reading what bronze added");
        // The sources are read at once; their results are taken in order, as if one by one.
        let read = futures::future::join_all(Source::ALL.into_iter().map(|source| {
            let wm = after.get(&source).copied().flatten();
            let table = &bronze_tables[&source];
            async move { (source, read_new(table, branch, wm).await) }
        }))
        .await;
        for (source, result) in read {
            match result {
                Ok(r) => {
                    reads.insert(source, r);
                }
                Err(ShackError::Lake { error, .. })
                    if matches!(
                        *error,
                        LakeError::NotAppendOnly { .. } | LakeError::HistoryExpired { .. }
                    ) =>
                {
                    rebuilt_because =
                        Some(format!("{error}; silver was rebuilt from all of bronze"));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
    }
    let rebuild = options.replay || rebuilt_because.is_some();
    if rebuild {
        after.clear();
        reads.clear();
    }
    if rebuild {
        progress.message("reading all of bronze");
        let files = file_batches(catalog, &head, branch).await?;
        for source in Source::ALL {
            reads.insert(
                source,
                read_all(&bronze_tables[&source], branch, &files).await?,
            );
        }
    }
    let advanced: BTreeSet<Source> = Source::ALL
        .into_iter()
        .filter(|s| rebuild || reads[s].1 != after.get(s).copied().flatten())
        .collect();
    let bronze_rows_read: u64 = reads.values().map(|(r, _)| r.rows.len() as u64).sum();

    let mut report = BoilReport {
        boil_id: boil_id.clone(),
        branch: branch.to_string(),
        mode: if rebuild { "replay" } else { "incremental" }.to_string(),
        rebuilt_because,
        parsers: parsers.versions(),
        created_tables,
        sources: Vec::new(),
        checks: Vec::new(),
        tables: Vec::new(),
        bronze_rows_read,
        silver_rows_read: 0,
        catalog_version: None,
    };
    if advanced.is_empty() {
        for source in Source::ALL {
            let wm = after.get(&source).copied().flatten();
            report.sources.push(source_report(source, wm, wm));
        }
        progress.message("nothing new in bronze");
        return Ok(StagedBoil {
            report,
            changes: Vec::new(),
            message: String::new(),
            properties: BTreeMap::new(),
        });
    }

    // 4. Parse every line into exactly one outcome.
    progress.message("parsing");
    let mut sources: BTreeMap<Source, SourceReport> = BTreeMap::new();
    let mut quarantine: Vec<QuarantineRow> = Vec::new();
    let mut payments: Vec<PaymentRow> = Vec::new();
    let mut changes: Vec<OrderRow> = Vec::new();
    let mut fx: Vec<FxRow> = Vec::new();
    let mut settlements: Vec<SettlementRow> = Vec::new();
    // One source at a time, each source's lines dropped once parsed.
    for (source, (read, through)) in reads {
        let table = bronze::table_name(source);
        let BronzeRead { batches, mut rows } = read;
        let mut live = LiveColumns::new(&table, batches, &rows)?;
        // Unstable: no two lines share a lineage (a landing file is tapped once), and it needs
        // no buffer beside the rows.
        rows.sort_unstable_by(|a, b| a.lineage.cmp(&b.lineage));
        let mut rep = source_report(source, after.get(&source).copied().flatten(), through);
        rep.rows_read = rows.len() as u64;
        // The most rows this source can add, asked for once rather than doubled as they come.
        match source {
            Source::Payments => payments.reserve(rows.len()),
            Source::Orders => changes.reserve(rows.len()),
            Source::FxRates => fx.reserve(rows.len()),
            Source::Settlements => settlements.reserve(rows.len()),
        }
        // A slice of lines at a time; a batch is let go once its last line is parsed.
        for part in rows.chunks(PARSE_AT_ONCE) {
            let parsed = parse_lines(source, part, &live.columns, &parsers)
                .ok_or_else(|| LiveColumns::gone(&table))?;
            for (row, line) in part.iter().zip(parsed) {
                let outcome: std::result::Result<bool, Reason> = match line {
                    Line::Payment(p) => match p {
                        Parsed::Row(event) => {
                            payments.push(PaymentRow {
                                event,
                                is_duplicate: false,
                                lineage: row.lineage.clone(),
                            });
                            Ok(true)
                        }
                        Parsed::Header => Ok(false),
                        Parsed::Quarantine(r) => Err(r),
                    },
                    Line::Order(o) => match o {
                        Parsed::Row(change) => {
                            changes.push(OrderRow {
                                change,
                                lineage: row.lineage.clone(),
                            });
                            Ok(true)
                        }
                        Parsed::Header => Ok(false),
                        Parsed::Quarantine(r) => Err(r),
                    },
                    Line::Fx(f) => match f {
                        Parsed::Row(rate) => {
                            fx.push(FxRow {
                                rate,
                                publications: 1,
                                lineage: row.lineage.clone(),
                            });
                            Ok(true)
                        }
                        Parsed::Header => Ok(false),
                        Parsed::Quarantine(r) => Err(r),
                    },
                    Line::Settlement(t) => match t {
                        Parsed::Row(settlement) => {
                            settlements.push(SettlementRow {
                                settlement,
                                publications: 1,
                                lineage: row.lineage.clone(),
                            });
                            Ok(true)
                        }
                        Parsed::Header => Ok(false),
                        Parsed::Quarantine(r) => Err(r),
                    },
                };
                match outcome {
                    Ok(true) => rep.parsed += 1,
                    Ok(false) => rep.headers += 1,
                    Err(reason) => {
                        rep.quarantined += 1;
                        *rep.reasons.entry(reason.as_str().to_string()).or_default() += 1;
                        let (raw, raw_bytes) = live.columns[row.batch as usize]
                            .as_ref()
                            .map(|at| {
                                (
                                    at.line(row.row as usize).0.to_string(),
                                    at.bytes(row.row as usize),
                                )
                            })
                            .ok_or_else(|| LiveColumns::gone(&table))?;
                        quarantine.push(QuarantineRow {
                            source: source.as_str(),
                            reason: reason.as_str(),
                            raw,
                            raw_bytes,
                            lineage: row.lineage.clone(),
                        });
                    }
                }
            }
            live.release(part);
        }
        sources.insert(source, rep);
    }

    // 5. Payments: first delivery per event id, and only ids silver.payments never held. A
    //    redelivery carries its event's own `created_at`, so an id silver.payments holds is
    //    nearly always held on the UTC day of that instant: those days are read first (pruned
    //    by partition, or by the data files' `created_at` bounds in a lake made before the
    //    partitioning). A sender that redelivers an event with another `created` puts it on
    //    another day: the ids those days did not answer are looked up on every other day, by
    //    the bloom filter on `event_id` (see silver.orders' lookup), so such a redelivery is a
    //    duplicate in a daily run as in a full build.
    let mut silver_rows_read = 0u64;
    let mut seen: HashSet<String> = HashSet::new();
    if !rebuild && advanced.contains(&Source::Payments) {
        let name = tables::PAYMENTS;
        let days = day_ranges(payments.iter().map(|p| p.event.created_at_us));
        if let Some(filter) = within("created_at", &days) {
            progress.message("reading the payment ids silver holds on the new events' days");
            let read = read_where(&silver[name], branch, &["event_id"], filter.clone()).await?;
            silver_rows_read += read.rows();
            progress.message(&read.describe("payment ids"));
            add_ids(&mut seen, name, &read.batches)?;
            let unanswered: HashSet<&str> = payments
                .iter()
                .map(|p| p.event.event_id.as_str())
                .filter(|id| !seen.contains(*id))
                .collect();
            if !unanswered.is_empty() && silver[name].head(branch).is_some() {
                progress.message(&format!(
                    "looking up {} new payment ids in {name} on the other days",
                    thousands(unanswered.len() as u64)
                ));
                let found = silver[name]
                    .lookup(
                        &At::reference(branch),
                        "event_id",
                        &unanswered,
                        &[],
                        Some(filter.negate()),
                    )
                    .await
                    .map_err(|e| ShackError::lake(name, e))?;
                silver_rows_read += found.rows_read;
                progress.message(&describe_lookup(&found, "payment", name));
                add_ids(&mut seen, name, &found.batches)?;
            }
        }
    }
    for p in &mut payments {
        if !seen.insert(p.event.event_id.clone()) {
            p.is_duplicate = true;
        }
    }
    // A full build's every event id, copied: not needed past here.
    drop(seen);
    let duplicates = payments.iter().filter(|p| p.is_duplicate).count() as u64;
    if let Some(rep) = sources.get_mut(&Source::Payments) {
        rep.duplicates = duplicates;
        rep.parsed -= duplicates;
    }
    let new_payments: Vec<&PaymentRow> = payments.iter().filter(|p| !p.is_duplicate).collect();

    // 6. Orders: the highest LSN per order among the new changes (the earliest delivery on a
    //    tie), kept only where it beats the LSN silver.orders holds. Three questions need the
    //    stored rows of some orders: each changed order's LSN, whether its `created_at` moved
    //    (part of the merge key: its stored row would be on another day), and whether each new
    //    payment's order exists at all (a refund's order may be weeks old). Order ids are
    //    random, so neither partitions nor column bounds can find them; silver.orders is
    //    written with a bloom filter on `order_id` per small row group, and the lookup reads
    //    only the row groups that may hold an asked id. What it reads grows with the ids asked
    //    and the days they were created on, not with the table's history.
    let mut existing_lsn: HashMap<String, i64> = HashMap::new();
    let mut existing_created: HashMap<String, i64> = HashMap::new();
    let orders_table = &silver[tables::ORDERS];
    if !rebuild
        && (advanced.contains(&Source::Orders) || advanced.contains(&Source::Payments))
        && orders_table.head(branch).is_some()
    {
        let asked: HashSet<&str> = new_payments
            .iter()
            .map(|p| p.event.order_id.as_str())
            .chain(changes.iter().map(|c| c.change.order_id.as_str()))
            .collect();
        // A change carries its order's creation instant, so the changed orders are looked up
        // on those days first (the partition prunes the rest); new payments' orders are mostly
        // there too. The ids still unanswered (a refund's order may be weeks old; a payment's
        // order CDC has not delivered yet is nowhere) are looked up on every other day, where
        // the bloom filters skip the row groups that hold none of them.
        let days = day_ranges(changes.iter().map(|c| c.change.created_at_us));
        let on_days = within("created_at", &days);
        let mut steps = vec![(on_days.clone(), "on the changes' creation days")];
        if let Some(on_days) = on_days {
            steps.push((Some(on_days.negate()), "on the other days"));
        }
        for (filter, which) in steps {
            let ids: HashSet<&str> = asked
                .iter()
                .copied()
                .filter(|id| !existing_lsn.contains_key(*id))
                .collect();
            if ids.is_empty() {
                break;
            }
            progress.message(&format!(
                "looking up {} order ids in silver.orders {which}",
                thousands(ids.len() as u64)
            ));
            let found = orders_table
                .lookup(
                    &At::reference(branch),
                    "order_id",
                    &ids,
                    &["_lsn", "created_at"],
                    filter,
                )
                .await
                .map_err(|e| ShackError::lake(tables::ORDERS, e))?;
            silver_rows_read += found.rows_read;
            progress.message(&describe_lookup(&found, "order", tables::ORDERS));
            fold_order_keys(&found.batches, &mut existing_lsn, &mut existing_created)?;
        }
    }
    // An order's `created_at` is the one it was first delivered with: silver's row, or its
    // first change in delivery order. The merge key holds it, so a change that moved it would
    // add a second row for the order: such a change is quarantined (`created_at_changed`), in
    // a full build as in a daily run, and the run goes on.
    let moved = created_at_moved(&changes, &existing_created);
    if !moved.is_empty() {
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut changes)
            .into_iter()
            .enumerate()
            .partition(|(i, _)| !moved.contains(i));
        changes = kept.into_iter().map(|(_, c)| c).collect();
        let gone: Vec<OrderRow> = gone.into_iter().map(|(_, c)| c).collect();
        progress.message(&format!(
            "quarantining {} order change(s) that moved their order's created_at",
            gone.len()
        ));
        let mut raw = raw_lines(&bronze_tables[&Source::Orders], branch, &gone).await?;
        let reason = Reason::CreatedAtChanged;
        for c in gone {
            let key = (c.lineage.file.to_string(), c.lineage.line);
            let (text, bytes) = raw.remove(&key).ok_or_else(|| ShackError::BadTable {
                table: bronze::table_name(Source::Orders),
                detail: format!("line {} of {} is not on {branch}", key.1, key.0),
            })?;
            quarantine.push(QuarantineRow {
                source: Source::Orders.as_str(),
                reason: reason.as_str(),
                raw: text,
                raw_bytes: bytes,
                lineage: c.lineage,
            });
            if let Some(rep) = sources.get_mut(&Source::Orders) {
                rep.parsed -= 1;
                rep.quarantined += 1;
                *rep.reasons.entry(reason.as_str().to_string()).or_default() += 1;
            }
        }
    }
    let mut winners: HashMap<&str, &OrderRow> = HashMap::new();
    for c in &changes {
        let id = c.change.order_id.as_str();
        if winners.get(id).is_none_or(|w| c.change.lsn > w.change.lsn) {
            winners.insert(id, c);
        }
    }
    let mut upserts: Vec<&OrderRow> = winners
        .values()
        .copied()
        .filter(|w| {
            existing_lsn
                .get(&w.change.order_id)
                .is_none_or(|e| w.change.lsn > *e)
        })
        .collect();
    upserts.sort_by(|a, b| a.change.order_id.cmp(&b.change.order_id));

    // 7. FX rates and settlements: the latest publication per key wins; both small, rewritten.
    let (fx_current, fx_read) = if advanced.contains(&Source::FxRates) {
        let existing = if rebuild {
            Vec::new()
        } else {
            tables::read_fx_rates(&scan(&silver[tables::FX_RATES], branch).await?)?
        };
        let n = existing.len() as u64;
        let merged = latest(
            existing,
            fx.clone(),
            |r| (r.rate.rate_date, r.rate.base, r.rate.quote),
            |r| &r.lineage,
            |r| &mut r.publications,
        );
        (merged, n)
    } else {
        (Vec::new(), 0)
    };
    let (settle_current, settle_read) = if advanced.contains(&Source::Settlements) {
        let existing = if rebuild {
            Vec::new()
        } else {
            tables::read_settlements(&scan(&silver[tables::SETTLEMENTS], branch).await?)?
        };
        let n = existing.len() as u64;
        let merged = latest(
            existing,
            settlements,
            |r| (r.settlement.settlement_date, r.settlement.currency),
            |r| &r.lineage,
            |r| &mut r.publications,
        );
        (merged, n)
    } else {
        (Vec::new(), 0)
    };
    silver_rows_read += fx_read + settle_read;
    report.silver_rows_read = silver_rows_read;

    // 8. Row-level checks on what this run writes. Errors stop here, before any commit.
    progress.message("checking");
    let order_ids: HashSet<&str> = existing_lsn
        .keys()
        .map(String::as_str)
        .chain(winners.keys().copied())
        .collect();
    let mut checks = Vec::new();
    payment_checks(&mut checks, &new_payments, &order_ids);
    order_checks(&mut checks, &upserts);
    // The merge key holds created_at: a change that moved it would add a second row (such
    // changes were quarantined above; this holds the rest to it).
    checks.push(check(
        "immutable_silver_orders_created_at",
        Severity::Error,
        upserts.iter(),
        |w| {
            existing_created
                .get(&w.change.order_id)
                .is_none_or(|c| *c == w.change.created_at_us)
        },
    ));
    fx_checks(&mut checks, &fx_current, &settle_current);
    for s in sources.values() {
        checks.push(CheckReport {
            name: format!("conservation_bronze_{}", s.source.as_str()),
            severity: Severity::Error,
            rows: s.rows_read,
            failing: s.unaccounted().unsigned_abs(),
        });
    }
    checks.push(check(
        "accepted_values_silver_quarantine_reason",
        Severity::Error,
        quarantine.iter(),
        |q| Reason::ALL.iter().any(|r| r.as_str() == q.reason),
    ));
    report.sources = sources.into_values().collect();
    report.checks = checks;
    let failures: Vec<String> = report
        .checks
        .iter()
        .filter(|c| c.severity == Severity::Error && c.failing > 0)
        .map(|c| format!("{}: {} rows", c.name, c.failing))
        .collect();
    if !failures.is_empty() {
        return Err(ShackError::ChecksFailed { failures });
    }

    // 9. Stage one snapshot per silver table whose inputs moved, and commit them as one.
    progress.message("staging");
    let mut through: BTreeMap<Source, Option<i64>> = BTreeMap::new();
    for s in &report.sources {
        through.insert(s.source, s.through);
    }
    // What the checks looked orders up by: not needed to write.
    drop(order_ids);
    drop(winners);
    // The tables are staged a few at a time, each on a task of its own (each writes its own
    // files; the commit that follows is one), their reports and changes kept in the order of
    // `TABLES`. A table's batch is built when a slot is free for it, so a full build holds a
    // few tables' rows as Arrow, not all eight.
    let mut staging = Vec::new();
    for name in TABLES {
        let ins = inputs(name);
        if !rebuild && !ins.iter().any(|s| advanced.contains(s)) {
            continue;
        }
        let mut properties = BTreeMap::from([
            (props::BOIL_ID.to_string(), boil_id.clone()),
            (props::MODE.to_string(), report.mode.clone()),
            (props::PARSERS.to_string(), report.parsers.join(",")),
        ]);
        for s in &ins {
            if let Some(Some(id)) = through.get(s) {
                properties.insert(watermark_key(*s), id.to_string());
            }
        }
        staging.push((name, properties));
    }
    let (payments, new_payments, changes, upserts) = (&payments, &new_payments, &changes, &upserts);
    let (fx, fx_current, settle_current, quarantine) =
        (&fx, &fx_current, &settle_current, &quarantine);
    let batch_of = |name: &str| -> Result<RecordBatch> {
        match name {
            tables::PAYMENT_EVENTS => {
                tables::payment_events_batch(&payments.iter().collect::<Vec<_>>())
            }
            tables::PAYMENTS => tables::payments_batch(new_payments),
            tables::ORDER_CHANGES => {
                tables::order_changes_batch(&changes.iter().collect::<Vec<_>>())
            }
            tables::ORDERS => tables::orders_batch(upserts),
            tables::FX_RATE_HISTORY => tables::fx_history_batch(&fx.iter().collect::<Vec<_>>()),
            tables::FX_RATES => tables::fx_rates_batch(&fx_current.iter().collect::<Vec<_>>()),
            tables::SETTLEMENTS => {
                tables::settlements_batch(&settle_current.iter().collect::<Vec<_>>())
            }
            _ => tables::quarantine_batch(&quarantine.iter().collect::<Vec<_>>()),
        }
    };
    let mut staging = staging.into_iter();
    let jobs = std::iter::from_fn(|| {
        let (name, properties) = staging.next()?;
        let batch = match batch_of(name) {
            Ok(b) => b,
            Err(e) => return Some(crate::par::job(async move { Err(e) })),
        };
        let t = silver[name].clone();
        let branch = branch.to_string();
        let whole = rebuild || matches!(name, tables::FX_RATES | tables::SETTLEMENTS);
        Some(crate::par::job(async move {
            let model_rows = batch.num_rows() as u64;
            let batches: Vec<RecordBatch> = if batch.num_rows() > 0 {
                vec![batch]
            } else {
                Vec::new()
            };
            let branch = branch.as_str();
            let lake_err = |e| ShackError::lake(name, e);
            let mut merge_stats = None;
            let change = if whole {
                t.stage_replace(branch, &Replace::All, &batches, properties)
                    .await
                    .map_err(lake_err)?
            } else if name == tables::ORDERS && !batches.is_empty() {
                // Insert new orders; replace a stored one only when the incoming LSN is higher.
                let merge = Merge::new(tables::ORDERS_MERGE_KEY)
                    .when_matched_update_if(MatchCondition::incoming_greater("_lsn"));
                let staged = t
                    .stage_merge(branch, &batches, &merge, properties.clone())
                    .await
                    .map_err(lake_err)?;
                let r = &staged.report;
                merge_stats = Some(MergeStats {
                    files_read: r.files_read,
                    files_pruned_by_partition: r.files_pruned_by_partition,
                    files_pruned_by_bounds: r.files_pruned_by_bounds,
                    files_rewritten: r.files_rewritten,
                    inserted: r.inserted,
                    updated: r.updated,
                    unchanged: r.unchanged_matches,
                });
                match staged.change {
                    Some(c) => c,
                    // Nothing to change: a snapshot still carries the new watermark.
                    None => t
                        .stage_append(branch, &[], properties)
                        .await
                        .map_err(lake_err)?,
                }
            } else {
                t.stage_append(branch, &batches, properties)
                    .await
                    .map_err(lake_err)?
            };
            let mut tr = table_report(name, &change, model_rows)?;
            tr.merge = merge_stats;
            tr.rewritten_whole = whole;
            Ok((tr, change))
        }))
    });
    let done = crate::par::on_tasks("silver", STAGE_AT_ONCE, jobs).await?;
    let mut staged: Vec<TableChange> = Vec::new();
    for (tr, change) in done {
        report.tables.push(tr);
        staged.push(change);
    }

    let message = format!(
        "boil ({}) of {} from bronze on {branch}: {}",
        report.mode,
        report
            .tables
            .iter()
            .map(|t| t.table.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        report
            .sources
            .iter()
            .map(|s| format!("{} {} rows", s.source, s.rows_read))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let properties = BTreeMap::from([
        (props::BOIL_ID.to_string(), boil_id),
        ("sugarshack.branch".to_string(), branch.to_string()),
    ]);
    Ok(StagedBoil {
        report,
        changes: staged,
        message,
        properties,
    })
}

/// One bronze line, read by its source's parser.
#[derive(Debug, PartialEq)]
enum Line {
    Payment(Parsed<parse::PaymentEvent>),
    Order(Parsed<parse::OrderChange>),
    Fx(Parsed<parse::FxRate>),
    Settlement(Parsed<parse::Settlement>),
}

/// Silver tables staged at once: enough to keep both cores busy while one table waits on its
/// files, few enough that a full build does not hold every table's batch at the same time.
const STAGE_AT_ONCE: usize = 2;

/// Lines per thread below which parsing stays on the calling thread.
const PARSE_CHUNK_MIN: usize = 8_192;

/// Lines parsed at once (then turned into rows, and their batches let go when done): a few
/// chunks per core, a few tens of megabytes of text.
const PARSE_AT_ONCE: usize = 1 << 16;

/// Read every line of one source, in order: parsing is a pure function of each line, so a large
/// read is parsed on every core ([`crate::par::map_in_order`]) with the sequential outcome.
/// `None` if a line's batch is not among `columns` (let go too early).
fn parse_lines(
    source: Source,
    rows: &[BronzeRow],
    columns: &[Option<RawColumns>],
    parsers: &Parsers,
) -> Option<Vec<Line>> {
    crate::par::map_in_order(rows, PARSE_CHUNK_MIN, |row| {
        let at = columns.get(row.batch as usize)?.as_ref()?;
        let (raw, utf8) = at.line(row.row as usize);
        Some(match source {
            Source::Payments => Line::Payment(parse::parse_payment(raw, utf8, parsers)),
            Source::Orders => Line::Order(parse::parse_order(raw, utf8)),
            Source::FxRates => Line::Fx(parse::parse_fx(raw, utf8)),
            Source::Settlements => Line::Settlement(parse::parse_settlement(raw, utf8)),
        })
    })
    .into_iter()
    .collect()
}

/// Record each row's `_lsn` and `created_at` by order id (`order_id, _lsn, created_at` batches of
/// silver.orders).
fn fold_order_keys(
    batches: &[RecordBatch],
    lsn: &mut HashMap<String, i64>,
    created: &mut HashMap<String, i64>,
) -> Result<()> {
    let name = tables::ORDERS;
    for b in batches {
        let ids = tables::strs(name, b, "order_id")?;
        let lsns = tables::longs(name, b, "_lsn")?;
        let at = tables::stamps(name, b, "created_at")?;
        for i in 0..ids.len() {
            lsn.insert(ids.value(i).to_string(), lsns.value(i));
            created.insert(ids.value(i).to_string(), at.value(i));
        }
    }
    Ok(())
}

fn source_report(source: Source, after: Option<i64>, through: Option<i64>) -> SourceReport {
    SourceReport {
        source,
        table: bronze::table_name(source),
        after,
        through,
        rows_read: 0,
        parsed: 0,
        duplicates: 0,
        quarantined: 0,
        headers: 0,
        reasons: BTreeMap::new(),
    }
}

/// The latest publication per key: `existing` rows, then `incoming` ones in publication order;
/// an incoming row replaces the stored one when its publication key is higher, or the same: the
/// same line of the same landing file, read again because the file was rewritten in place and
/// tapped again (incoming lines are always in a later bronze snapshot than silver's, and among
/// themselves they are ordered by their snapshot's sequence number), so the rewrite wins in a
/// daily run as in a full build. Every publication is counted. Returned sorted by key.
fn latest<R, K: Ord + Clone>(
    existing: Vec<R>,
    mut incoming: Vec<R>,
    key: impl Fn(&R) -> K,
    lineage: impl Fn(&R) -> &Lineage,
    publications: impl Fn(&mut R) -> &mut i64,
) -> Vec<R> {
    let mut out: BTreeMap<K, R> = BTreeMap::new();
    for r in existing {
        out.insert(key(&r), r);
    }
    incoming.sort_by(|a, b| {
        let (a, b) = (lineage(a), lineage(b));
        a.publication_key()
            .cmp(&b.publication_key())
            .then(a.sequence_number.cmp(&b.sequence_number))
    });
    for mut r in incoming {
        let k = key(&r);
        match out.remove(&k) {
            None => {
                *publications(&mut r) = 1;
                out.insert(k, r);
            }
            Some(mut old) => {
                let total = *publications(&mut old) + 1;
                let mut winner = if lineage(&r).publication_key() >= lineage(&old).publication_key()
                {
                    r
                } else {
                    old
                };
                *publications(&mut winner) = total;
                out.insert(k, winner);
            }
        }
    }
    out.into_values().collect()
}

fn check<'a, T: 'a>(
    name: &str,
    severity: Severity,
    rows: impl Iterator<Item = &'a T>,
    ok: impl Fn(&T) -> bool,
) -> CheckReport {
    let (mut n, mut failing) = (0u64, 0u64);
    for r in rows {
        n += 1;
        failing += u64::from(!ok(r));
    }
    CheckReport {
        name: name.to_string(),
        severity,
        rows: n,
        failing,
    }
}

/// Rows whose key was already taken (by an earlier row of `keys`, or by `taken`).
fn unique<K: std::hash::Hash + Eq>(
    name: &str,
    keys: impl Iterator<Item = K>,
    taken: impl Fn(&K) -> bool,
) -> CheckReport {
    let mut seen = HashSet::new();
    let (mut n, mut failing) = (0u64, 0u64);
    for k in keys {
        n += 1;
        if taken(&k) || seen.contains(&k) {
            failing += 1;
        } else {
            seen.insert(k);
        }
    }
    CheckReport {
        name: name.to_string(),
        severity: Severity::Error,
        rows: n,
        failing,
    }
}

fn payment_checks(out: &mut Vec<CheckReport>, rows: &[&PaymentRow], order_ids: &HashSet<&str>) {
    let e = || rows.iter().map(|r| &r.event);
    out.push(unique(
        "unique_silver_payments_event_id",
        e().map(|p| p.event_id.as_str()),
        |_| false,
    ));
    out.push(check(
        "not_null_silver_payments_event_id",
        Severity::Error,
        e(),
        |p| !p.event_id.is_empty(),
    ));
    out.push(check(
        "accepted_values_silver_payments_event_type",
        Severity::Error,
        e(),
        |p| EVENT_TYPES.contains(&p.event_type),
    ));
    out.push(check(
        "accepted_values_silver_payments_currency",
        Severity::Error,
        e(),
        |p| CURRENCIES.contains(&p.currency),
    ));
    out.push(check(
        "positive_silver_payments_amount_minor",
        Severity::Error,
        e(),
        |p| p.amount_minor > 0,
    ));
    out.push(check(
        "not_null_silver_payments_order_id",
        Severity::Error,
        e(),
        |p| !p.order_id.is_empty(),
    ));
    out.push(check(
        "relationships_silver_payments_order_id__silver_orders_order_id",
        Severity::Warn,
        e(),
        |p| order_ids.contains(p.order_id.as_str()),
    ));
}

fn order_checks(out: &mut Vec<CheckReport>, rows: &[&OrderRow]) {
    let c = || rows.iter().map(|r| &r.change);
    out.push(unique(
        "unique_silver_orders_order_id",
        c().map(|o| o.order_id.as_str()),
        |_| false,
    ));
    out.push(check(
        "not_null_silver_orders_order_id",
        Severity::Error,
        c(),
        |o| !o.order_id.is_empty(),
    ));
    out.push(check(
        "accepted_values_silver_orders_status",
        Severity::Error,
        c(),
        |o| STATUSES.contains(&o.status),
    ));
    out.push(check(
        "accepted_values_silver_orders_currency",
        Severity::Error,
        c(),
        |o| CURRENCIES.contains(&o.currency),
    ));
}

fn fx_checks(out: &mut Vec<CheckReport>, fx: &[FxRow], settlements: &[SettlementRow]) {
    out.push(unique(
        "unique_silver_fx_rates_rate_date_base_quote",
        fx.iter()
            .map(|r| (r.rate.rate_date, r.rate.base, r.rate.quote)),
        |_| false,
    ));
    out.push(check(
        "positive_silver_fx_rates_rate_micros",
        Severity::Error,
        fx.iter(),
        |r| r.rate.rate_micros > 0,
    ));
    out.push(unique(
        "unique_silver_settlements_settlement_date_currency",
        settlements
            .iter()
            .map(|r| (r.settlement.settlement_date, r.settlement.currency)),
        |_| false,
    ));
    out.push(check(
        "accepted_values_silver_settlements_currency",
        Severity::Error,
        settlements.iter(),
        |r| CURRENCIES.contains(&r.settlement.currency),
    ));
}

fn table_report(name: &str, change: &TableChange, rows: u64) -> Result<TableReport> {
    let missing = || {
        ShackError::lake(
            name,
            LakeError::Other("the staged change adds no snapshot".into()),
        )
    };
    let id = change.snapshot_id().ok_or_else(missing)?;
    let snap = change
        .metadata()
        .and_then(|m| m.snapshot_by_id(id))
        .ok_or_else(missing)?;
    let summary = snap.summary();
    let num = |k: &str| {
        summary
            .additional_properties
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
    };
    Ok(TableReport {
        table: name.to_string(),
        snapshot_id: id,
        operation: summary.operation.as_str().to_string(),
        rows,
        rows_added: num("added-records").unwrap_or(0),
        rows_removed: num("deleted-records").unwrap_or(0),
        total_rows: num("total-records"),
        merge: None,
        rewritten_whole: false,
    })
}

/// The watermark of `bronze.<source>` the silver tables consuming it record at their branch
/// head: the same in all of them, or an error saying how they differ.
fn watermark(
    silver: &BTreeMap<&'static str, Table>,
    source: Source,
    branch: &str,
) -> std::result::Result<Option<i64>, String> {
    let key = watermark_key(source);
    let mut seen: BTreeMap<Option<i64>, Vec<&str>> = BTreeMap::new();
    for name in TABLES.into_iter().filter(|t| inputs(t).contains(&source)) {
        let t = &silver[name];
        let value =
            match t.head(branch) {
                None => None,
                Some(id) => {
                    let s = t.snapshot(id).map_err(|e| e.to_string())?;
                    match s.summary.get(&key) {
                        None => None,
                        Some(v) => Some(v.trim().parse::<i64>().map_err(|_| {
                            format!("{name} records {key} = {v:?}, not a snapshot id")
                        })?),
                    }
                }
            };
        seen.entry(value).or_default().push(name);
    }
    if seen.len() > 1 {
        let parts: Vec<String> = seen
            .iter()
            .map(|(v, names)| {
                format!(
                    "{} at {}",
                    names.join(", "),
                    v.map_or("none".to_string(), |v| v.to_string())
                )
            })
            .collect();
        return Err(format!(
            "the silver tables consuming {} record different watermarks ({})",
            bronze::table_name(source),
            parts.join("; ")
        ));
    }
    Ok(seen.into_keys().next().flatten())
}

const DAY_US: i64 = 86_400_000_000;

/// The UTC days holding `stamps` (microseconds), as inclusive ranges with adjacent days
/// merged, in order.
pub(crate) fn day_ranges(stamps: impl Iterator<Item = i64>) -> Vec<(i64, i64)> {
    let days: BTreeSet<i64> = stamps.map(|t| t.div_euclid(DAY_US)).collect();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for d in days {
        let start = d.saturating_mul(DAY_US);
        let end = start.saturating_add(DAY_US - 1);
        match out.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(start) => *last = end,
            _ => out.push((start, end)),
        }
    }
    out
}

/// Every `event_id` of `batches` (read from `table`) into `seen`.
fn add_ids(seen: &mut HashSet<String>, table: &str, batches: &[RecordBatch]) -> Result<()> {
    for b in batches {
        let ids = tables::strs(table, b, "event_id")?;
        seen.extend((0..ids.len()).map(|i| ids.value(i).to_string()));
    }
    Ok(())
}

/// What a lookup by id read, for the progress line: `read 1,024 order rows from 2 of 180 row
/// groups in 2 of 90 data files of silver.orders, found 3`.
fn describe_lookup(found: &lake::Lookup, rows: &str, table: &str) -> String {
    format!(
        "read {} {rows} rows from {} of {} row groups in {} of {} data files of {table}, found {}{}",
        thousands(found.rows_read),
        thousands(found.row_groups_read as u64),
        thousands(found.row_groups_held as u64),
        found.files_read,
        found.files_planned,
        thousands(found.num_rows() as u64),
        match found.files_unfiltered {
            0 => String::new(),
            n => format!(" ({n} written without a bloom filter, read whole)"),
        }
    )
}

/// The positions in `changes` (in delivery order) of the changes whose `created_at` is not the
/// one their order was first delivered with: `stored`'s (silver's rows), or else the first of
/// `changes` for that order.
fn created_at_moved(changes: &[OrderRow], stored: &HashMap<String, i64>) -> HashSet<usize> {
    let mut first: HashMap<&str, i64> = HashMap::new();
    let mut moved = HashSet::new();
    for (i, c) in changes.iter().enumerate() {
        let id = c.change.order_id.as_str();
        let created = match stored.get(id) {
            Some(at) => *at,
            None => *first.entry(id).or_insert(c.change.created_at_us),
        };
        if created != c.change.created_at_us {
            moved.insert(i);
        }
    }
    moved
}

/// The text (and the bytes, when not UTF-8) of `rows`' lines as bronze holds them on `branch`,
/// by (landing file, line): read again for the few lines quarantined after the parse let their
/// text go.
async fn raw_lines(
    table: &Table,
    branch: &str,
    rows: &[OrderRow],
) -> Result<HashMap<(String, i64), (String, Option<Vec<u8>>)>> {
    let wanted: HashSet<(&str, i64)> = rows
        .iter()
        .map(|r| (&*r.lineage.file, r.lineage.line))
        .collect();
    let files: BTreeSet<&str> = wanted.iter().map(|(f, _)| *f).collect();
    let filter = Reference::new("_landing_file").is_in(files.into_iter().map(Datum::string));
    let read = read_where(
        table,
        branch,
        &["_raw", "_raw_bytes", "_landing_file", "_line"],
        filter,
    )
    .await?;
    let name = &table.name().to_string();
    let mut out = HashMap::new();
    for b in &read.batches {
        let at = RawColumns {
            raw: tables::strs(name, b, "_raw")?.clone(),
            bytes: raw_bytes_column(name, b)?.clone(),
        };
        let file = tables::strs(name, b, "_landing_file")?;
        let line = tables::longs(name, b, "_line")?;
        for i in 0..b.num_rows() {
            let key = (file.value(i), line.value(i));
            if wanted.contains(&key) {
                out.insert(
                    (key.0.to_string(), key.1),
                    (at.line(i).0.to_string(), at.bytes(i)),
                );
            }
        }
    }
    Ok(out)
}

/// `column` (a timestamp) within one of `ranges`; `None` when there are none.
pub(crate) fn within(column: &str, ranges: &[(i64, i64)]) -> Option<Predicate> {
    ranges
        .iter()
        .map(|(lo, hi)| {
            Reference::new(column)
                .greater_than_or_equal_to(Datum::timestamptz_micros(*lo))
                .and(Reference::new(column).less_than_or_equal_to(Datum::timestamptz_micros(*hi)))
        })
        .reduce(Predicate::or)
}

/// What [`read_where`] read: the rows, and the data files it opened of those the snapshot
/// holds.
struct Read {
    table: String,
    batches: Vec<RecordBatch>,
    files_opened: usize,
    files_held: Option<u64>,
}

impl Read {
    fn rows(&self) -> u64 {
        self.batches.iter().map(|b| b.num_rows() as u64).sum()
    }

    fn describe(&self, what: &str) -> String {
        let held = self
            .files_held
            .map(|n| format!(" of {n}"))
            .unwrap_or_default();
        format!(
            "read {} {what} from {}{held} data files of {}",
            self.rows(),
            self.files_opened,
            self.table
        )
    }
}

/// The parser registry with only `versions` enabled (all when empty), or the unknown version.
pub(crate) fn enabled_parsers(versions: &[String]) -> Result<Parsers> {
    Parsers::enable(versions).map_err(|version| ShackError::UnknownParser {
        version,
        known: known_versions(),
    })
}

/// Only `columns` of the rows of a table at the branch that `filter` may hold. The filter goes
/// to iceberg's scan planning, so data files whose partition or column bounds cannot hold a
/// match are never opened; within the files opened, Parquet row groups and rows are filtered
/// by it too.
async fn read_where(
    table: &Table,
    branch: &str,
    columns: &[&str],
    filter: Predicate,
) -> Result<Read> {
    let name = table.name().to_string();
    let mut read = Read {
        table: name.clone(),
        batches: Vec::new(),
        files_opened: 0,
        files_held: None,
    };
    let Some(head) = table.head(branch) else {
        return Ok(read);
    };
    read.files_held = table.snapshot(head).ok().and_then(|s| {
        s.summary
            .get("total-data-files")
            .and_then(|v| v.parse().ok())
    });
    let (batches, files) = table
        .scan_where(&At::Snapshot(head), columns, filter)
        .await
        .map_err(|e| ShackError::lake(&name, e))?;
    read.files_opened = files;
    read.batches = batches;
    Ok(read)
}

async fn scan(table: &Table, branch: &str) -> Result<Vec<RecordBatch>> {
    if table.head(branch).is_none() {
        return Ok(Vec::new());
    }
    table
        .scan(&At::reference(branch))
        .await
        .map_err(|e| ShackError::lake(table.name().to_string(), e))
}

/// The rows a bronze table's branch added after `after`, each with the snapshot that added it.
async fn read_new(
    table: &Table,
    branch: &str,
    after: Option<i64>,
) -> Result<(BronzeRead, Option<i64>)> {
    let name = table.name().to_string();
    let Some(head) = table.head(branch) else {
        return Ok((BronzeRead::default(), after));
    };
    if after == Some(head) {
        return Ok((BronzeRead::default(), after));
    }
    let inc = table
        .read_incremental(branch, after, Some(head))
        .await
        .map_err(|e| ShackError::lake(&name, e))?;
    let through = inc.through;
    let mut out = BronzeRead::default();
    for part in inc.parts {
        let snap = (part.snapshot.snapshot_id, part.snapshot.sequence_number);
        for b in part.batches {
            out.push(&name, &b, |_| Some(snap))?;
        }
    }
    Ok((out, through))
}

/// `bronze.landing_files` at the branch: landing file → (snapshot id, sequence number).
async fn file_batches(
    catalog: &Catalog,
    head: &CatalogVersion,
    branch: &str,
) -> Result<HashMap<String, (i64, i64)>> {
    let t = catalog
        .table_in(head, LANDING_FILES)
        .await
        .map_err(|e| match e {
            LakeError::NoSuchTable { .. } => ShackError::NoBronze {
                table: LANDING_FILES.to_string(),
            },
            e => ShackError::lake(LANDING_FILES, e),
        })?;
    let mut out = HashMap::new();
    for b in scan(&t, branch).await? {
        let file = tables::strs(LANDING_FILES, &b, "file")?;
        let col = |n: &str| {
            b.column_by_name(n)
                .and_then(|c| c.as_any().downcast_ref::<arrow_array::Int64Array>())
                .ok_or_else(|| ShackError::BadTable {
                    table: LANDING_FILES.to_string(),
                    detail: format!("no long column {n:?}"),
                })
        };
        let snap = col("snapshot_id")?;
        let seq = col("sequence_number")?;
        for i in 0..b.num_rows() {
            if !snap.is_null(i) && !seq.is_null(i) {
                out.insert(file.value(i).to_string(), (snap.value(i), seq.value(i)));
            }
        }
    }
    Ok(out)
}

/// Every row of a bronze table at the branch, each with the snapshot that added its file (from
/// `bronze.landing_files`, so it holds even where old snapshots were expired).
async fn read_all(
    table: &Table,
    branch: &str,
    files: &HashMap<String, (i64, i64)>,
) -> Result<(BronzeRead, Option<i64>)> {
    let name = table.name().to_string();
    let mut out = BronzeRead::default();
    if let Some(head) = table.head(branch) {
        let mut batches = table
            .scan_columns_stream(&At::Snapshot(head), &BRONZE_COLUMNS)
            .await
            .map_err(|e| ShackError::lake(&name, e))?;
        while let Some(b) = batches.next().await {
            let b = b.map_err(|e| ShackError::lake(&name, e))?;
            out.push(&name, &b, |file| files.get(file).copied())?;
        }
    }
    Ok((out, table.head(branch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::ArrayRef;

    fn lin(arrived_us: i64, line: i64) -> Lineage {
        Lineage {
            sequence_number: 0,
            arrived_us,
            file: "f".into(),
            line,
            snapshot_id: 1,
        }
    }

    /// Lines parsed on several threads come back in their own order, each as the parser reads
    /// it alone: good lines, quarantined ones and a line that is not UTF-8 alike.
    #[test]
    fn lines_parsed_in_chunks_keep_their_order_and_outcome() {
        let n = PARSE_CHUNK_MIN * 3 + 17;
        let lines: Vec<(String, Option<Vec<u8>>)> = (0..n)
            .map(|i| {
                let raw = match i % 5 {
                    0 => "{\"op\":\"c\"".to_string(),
                    1 => format!(
                        r#"{{"op":"u","lsn":{i},"ts_ms":1785542400000,"after":{{"order_id":"ord_{i}","customer_id":"cus_1","status":"paid","currency":"CAD","total_minor":{i},"ship_region":"CA-NS","created_at":"2026-08-01T00:00:00Z","updated_at":"2026-08-02T00:00:00Z"}}}}"#
                    ),
                    _ => format!(
                        r#"{{"op":"c","lsn":{i},"ts_ms":1785542400000,"after":{{"order_id":"ord_{i}","customer_id":"cus_{i}","status":"created","currency":"usd","total_minor":{},"ship_region":"US-NY","created_at":"2026-08-01T00:00:00Z","updated_at":"2026-08-01T00:00:00Z"}}}}"#,
                        i * 3
                    ),
                };
                (raw, (i % 97 == 0).then(|| vec![0xff]))
            })
            .collect();
        // The lines in two batches, as a read of two files hands them over.
        let half = n / 2;
        let arrays: Vec<(StringArray, LargeBinaryArray)> = [&lines[..half], &lines[half..]]
            .iter()
            .map(|part| {
                (
                    part.iter().map(|(r, _)| Some(r.as_str())).collect(),
                    part.iter().map(|(_, b)| b.as_deref()).collect(),
                )
            })
            .collect();
        let columns: Vec<Option<RawColumns>> = arrays
            .into_iter()
            .map(|(raw, bytes)| Some(RawColumns { raw, bytes }))
            .collect();
        let rows: Vec<BronzeRow> = (0..n)
            .map(|i| BronzeRow {
                batch: u32::from(i >= half),
                row: (if i >= half { i - half } else { i }) as u32,
                lineage: lin(0, i as i64),
            })
            .collect();
        let parsers = Parsers::all();
        let together = parse_lines(Source::Orders, &rows, &columns, &parsers)
            .expect("every line's batch is there");
        let one_by_one: Vec<Line> = lines
            .iter()
            .map(|(raw, bytes)| Line::Order(parse::parse_order(raw, bytes.is_none())))
            .collect();
        assert_eq!(together.len(), n);
        assert_eq!(together, one_by_one);
        let kept = together
            .iter()
            .filter(|l| matches!(l, Line::Order(Parsed::Row(_))))
            .count();
        assert!(kept > n / 2 && kept < n, "{kept} of {n} parsed");
    }

    /// A batch is let go when the last of its lines is parsed, not before, whatever order the
    /// lines come in; a parse that asks for a batch already let go says so instead of guessing.
    #[test]
    fn a_batch_is_let_go_once_its_last_line_is_parsed() {
        let batch = |lines: &[&str]| {
            let raw: StringArray = lines.iter().map(|l| Some(*l)).collect();
            let bytes: LargeBinaryArray = lines.iter().map(|_| None::<&[u8]>).collect();
            RecordBatch::try_from_iter([
                ("_raw", Arc::new(raw) as ArrayRef),
                ("_raw_bytes", Arc::new(bytes) as ArrayRef),
            ])
            .expect("a batch of two columns")
        };
        let row = |batch: u32, row: u32| BronzeRow {
            batch,
            row,
            lineage: lin(0, i64::from(batch * 10 + row)),
        };
        // Lines of batch 0 and 1 interleaved, as when a landing file's lines span two batches.
        let rows = vec![row(0, 0), row(1, 0), row(0, 1), row(1, 1), row(2, 0)];
        let mut live = LiveColumns::new(
            "bronze.orders",
            vec![batch(&["a", "b"]), batch(&["c", "d"]), batch(&["e"])],
            &rows,
        )
        .expect("both columns are there");
        let held = |live: &LiveColumns| -> Vec<bool> {
            live.columns.iter().map(Option::is_some).collect()
        };
        assert_eq!(held(&live), [true, true, true]);
        live.release(&rows[..2]);
        assert_eq!(held(&live), [true, true, true]);
        live.release(&rows[2..3]);
        assert_eq!(held(&live), [false, true, true]);
        let parsers = Parsers::all();
        // Batch 1 is still there; batch 0 is not, and a parse that needs it comes back empty.
        assert!(parse_lines(Source::Orders, &rows[3..4], &live.columns, &parsers).is_some());
        assert!(parse_lines(Source::Orders, &rows[..1], &live.columns, &parsers).is_none());
        live.release(&rows[3..]);
        assert_eq!(held(&live), [false, false, false]);
    }

    #[test]
    fn the_latest_publication_wins_and_all_are_counted() {
        let row = |arrived, rate| FxRow {
            rate: parse::FxRate {
                rate_date: 1,
                base: "USD",
                quote: "CAD",
                rate_micros: rate,
            },
            publications: 1,
            lineage: lin(arrived, 2),
        };
        let key = |r: &FxRow| r.rate.rate_date;
        // One run with both publications, in any order.
        let both = latest(
            Vec::new(),
            vec![row(20, 1_371_234), row(10, 1_390_000)],
            key,
            |r| &r.lineage,
            |r| &mut r.publications,
        );
        assert_eq!(both.len(), 1);
        assert_eq!(
            (both[0].rate.rate_micros, both[0].publications),
            (1_371_234, 2)
        );
        // Two runs give the same row.
        let first = latest(
            Vec::new(),
            vec![row(10, 1_390_000)],
            key,
            |r| &r.lineage,
            |r| &mut r.publications,
        );
        let second = latest(
            first,
            vec![row(20, 1_371_234)],
            key,
            |r| &r.lineage,
            |r| &mut r.publications,
        );
        assert_eq!(second, both);
    }

    #[test]
    fn unique_counts_repeats_and_taken_keys() {
        let c = unique("u", ["a", "b", "a", "c"].into_iter(), |k| *k == "c");
        assert_eq!((c.rows, c.failing), (4, 2));
    }
}
