//! The four audits a run is graded by, as the story names them: **quarantine rate**,
//! **conservation**, **fx coverage** and **reconciliation** ([`standard`]).
//!
//! Each reads exactly the snapshots grading recorded ([`GradeContext::sql`]: every table at its
//! graded `audit` snapshot) and says PASS, WARN or BLOCK with one line. The judgements are pure
//! functions of the figures read ([`quarantine_rate`](crate::grade::quarantine_rate),
//! [`conservation`], [`fx_coverage`], [`reconciliation`]), so their thresholds are tested on
//! small inputs; the async wrappers only gather the numbers.
//!
//! - Quarantine rate: per source, the bronze rows that arrived since the last publish — the
//!   `audit` snapshots after the one the last publish reached, through the graded one, counted
//!   from their snapshot summaries — and how many of them `silver.quarantine` holds (by the
//!   bronze snapshot each quarantined row's lineage names).
//! - Conservation: `silver.payments` and `gold.fct_payments` agree on the number of payment
//!   events and on their signed net per currency; and for every source, bronze rows = parsed +
//!   duplicate deliveries + quarantined + CSV headers, difference exactly zero. It is counted
//!   from the tables themselves, not from the boil's own report: an audit that believed the
//!   code it audits would not be one. Every figure is a sum over rows, so a grade carries the
//!   last publish's figures (its evidence) to the graded snapshots: less the rows of each
//!   table's data files removed since, plus those of the files added since
//!   ([`lake::Catalog::sql_changes`], by the two snapshots' file lists, whatever operations lie
//!   between: appends, partition replacements, whole rewrites); a reach no file was added
//!   to or removed from is zero without a query. It reads every table whole
//!   instead when nothing was published, the last publish has no figures (a rollback), a table
//!   has delete files or is new, and in one grade of [`CONSERVATION_WHOLE_EVERY`], where it
//!   also checks the carried figures against the whole read and BLOCKs when they differ. The
//!   evidence's `basis` says which it did. A bare `count(*)` of a table is the record counts
//!   its manifests keep per data file (as any Iceberg engine answers it), summed without
//!   planning a query ([`SqlContext::count_rows`]); the sums and grouped counts read the
//!   columns they need, again without a query ([`SqlContext::read_columns`]), and add them up
//!   in code (a carried grade reads a day's changed rows: planning a query for each cost more
//!   than reading them).
//! - FX coverage: every USD event of `gold.fct_payments` has a rate; the reason names how old
//!   the oldest rate used was (weekends and holidays use the last business day's). Its figures
//!   are sums too: the USD events, those without a rate, and the events counted by how many
//!   days older than their processor date their rate is (the oldest rate is the largest of
//!   those days still counting events), so a grade carries them from the last publish as
//!   conservation does, and reads `gold.fct_payments` whole when conservation would, checking
//!   what it carried. A few of the events without a rate are named from a whole read.
//! - Reconciliation: for every settlement line, `gold.mart_daily_cash` equals the processor's
//!   gross, refunds and net to the cent, and every day and currency with cash in gold has a
//!   settlement line. A gap on a day that closed less than
//!   [`Settings::settling_hours`](crate::Settings::settling_hours) before the as-of warns (late
//!   webhooks still settling), a missing line there is awaited; an older gap, or a settlement
//!   that never came, blocks.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::compute::cast;
use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use lake::{Catalog, SqlContext};
use serde_json::json;
use sugarbush::Source;

use crate::bronze::{self, AUDIT_BRANCH};
use crate::gold::{self, date_of};
use crate::grade::{self, Audit, AuditFn, AuditResult, GradeContext, SourceIntake, Verdict};
use crate::silver::parse::{self, Parsed};
use crate::silver::tables as silver;
use crate::tap::thousands;
use crate::{Result, ShackError};

/// The four audits, in the order the story prints them.
pub fn standard() -> Vec<Arc<dyn Audit>> {
    vec![
        Arc::new(AuditFn::new("quarantine rate", quarantine_rate_audit)),
        Arc::new(AuditFn::new(CONSERVATION, conservation_audit)),
        Arc::new(AuditFn::new(FX_COVERAGE, fx_coverage_audit)),
        Arc::new(AuditFn::new("reconciliation", reconciliation_audit)),
    ]
}

// ---- reading query results -------------------------------------------------------------------

fn bad_result(what: &str, detail: impl Into<String>) -> ShackError {
    ShackError::BadTable {
        table: what.to_string(),
        detail: detail.into(),
    }
}

/// True when `table` has a graded `audit` snapshot (a table with none holds nothing to grade:
/// a source nothing has arrived for yet).
fn graded(ctx: &GradeContext, table: &str) -> bool {
    ctx.snapshots.contains_key(table)
}

async fn query(sql: &SqlContext, what: &str, text: &str) -> Result<Vec<RecordBatch>> {
    sql.query(text)
        .await
        .map_err(|e| ShackError::lake(format!("{what} ({text})"), e))
}

/// True when `from` (a table as `sql` names it) reads no data file, so every figure over it
/// alone is zero or absent and no query need be parsed, optimised and planned: most often a
/// reach of [`Catalog::sql_changes`] no file was added to or removed from (an append-only
/// table removes none).
async fn reads_nothing(sql: &SqlContext, what: &str, from: &str) -> Result<bool> {
    sql.reads_no_files(from)
        .await
        .map_err(|e| ShackError::lake(format!("{what} ({from})"), e))
}

/// `columns` of every row of `from` (a table as `sql` names it), read as a query's scan reads
/// them but without parsing, optimising and planning one ([`SqlContext::read_columns`]): the
/// audits filter, group and add up a grade's few thousand changed rows in code, where a query
/// cost more to plan than to run.
async fn columns_of(
    sql: &SqlContext,
    what: &str,
    from: &str,
    columns: &[&str],
) -> Result<Vec<RecordBatch>> {
    sql.read_columns(from, columns).await.map_err(|e| {
        ShackError::lake(
            format!("{what} (reading {} of {from})", columns.join(", ")),
            e,
        )
    })
}

/// `total + n`, or an error naming `what` when the sum leaves a 64-bit integer (SQL's `sum`
/// would have wrapped silently).
fn add(total: i64, n: i64, what: &str) -> Result<i64> {
    total
        .checked_add(n)
        .ok_or_else(|| bad_result(what, "a sum overflows a 64-bit integer"))
}

/// Column `col` of `b` as integers (any integer or date type; dates as epoch days).
fn int_array(b: &RecordBatch, col: usize, what: &str) -> Result<Int64Array> {
    let Some(c) = b.columns().get(col) else {
        return Err(bad_result(what, format!("no column {col}")));
    };
    let c = if matches!(c.data_type(), DataType::Date32) {
        cast(c, &DataType::Int32).map_err(|e| bad_result(what, e.to_string()))?
    } else {
        c.clone()
    };
    let c = cast(&c, &DataType::Int64).map_err(|e| bad_result(what, e.to_string()))?;
    c.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| bad_result(what, "not an integer column"))
}

/// Column `col` of `b` as strings.
fn str_array(b: &RecordBatch, col: usize, what: &str) -> Result<StringArray> {
    let Some(c) = b.columns().get(col) else {
        return Err(bad_result(what, format!("no column {col}")));
    };
    let c = cast(c, &DataType::Utf8).map_err(|e| bad_result(what, e.to_string()))?;
    c.as_any()
        .downcast_ref::<StringArray>()
        .cloned()
        .ok_or_else(|| bad_result(what, "not a string column"))
}

/// Column `col` of every batch as integers (any integer or date type; dates as epoch days).
fn ints(batches: &[RecordBatch], col: usize, what: &str) -> Result<Vec<Option<i64>>> {
    let mut out = Vec::new();
    for b in batches {
        out.extend(int_array(b, col, what)?.iter());
    }
    Ok(out)
}

/// Column `col` of every batch as strings.
fn strings(batches: &[RecordBatch], col: usize, what: &str) -> Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for b in batches {
        out.extend(
            str_array(b, col, what)?
                .iter()
                .map(|s| s.map(str::to_string)),
        );
    }
    Ok(out)
}

/// The single integer a one-row aggregate returned (0 for no row or a null sum).
fn scalar(batches: &[RecordBatch], col: usize, what: &str) -> Result<i64> {
    Ok(ints(batches, col, what)?
        .into_iter()
        .next()
        .flatten()
        .unwrap_or(0))
}

fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "+" };
    let abs = minor.unsigned_abs();
    format!("{sign}{}.{:02}", thousands(abs / 100), abs % 100)
}

// ---- 1. quarantine rate ------------------------------------------------------------------------

/// What each source took in since the last publish: bronze rows from the snapshot summaries of
/// the `audit` snapshots after the last publish's, quarantined rows by the bronze snapshot their
/// lineage names.
pub async fn intake_since_last_publish(
    catalog: &Catalog,
    ctx: &GradeContext,
) -> Result<Vec<SourceIntake>> {
    let mut intakes = Vec::new();
    let mut by_snapshot: BTreeMap<i64, usize> = BTreeMap::new();
    for source in Source::ALL {
        let name = bronze::table_name(source);
        let mut intake = SourceIntake {
            source: source.as_str().to_string(),
            ..SourceIntake::default()
        };
        if let Some(graded) = ctx.snapshots.get(&name).copied() {
            let table = ctx.table(catalog, &name).await?;
            let added = table
                .snapshots_between(AUDIT_BRANCH, ctx.previous_snapshot(&name), Some(graded))
                .map_err(|e| ShackError::lake(&name, e))?;
            for s in added {
                let rows = s
                    .summary
                    .get("added-records")
                    .map(|v| v.parse::<u64>())
                    .transpose()
                    .map_err(|e| {
                        bad_result(
                            &name,
                            format!("snapshot {}: added-records {e}", s.snapshot_id),
                        )
                    })?
                    .unwrap_or(0);
                intake.rows += rows;
                by_snapshot.insert(s.snapshot_id, intakes.len());
            }
            // A CSV file's header line is a bronze row but no arrival: the rate is over the
            // data lines. The new rows of these sources are a few lines a day.
            if matches!(source, Source::FxRates | Source::Settlements) && intake.rows > 0 {
                let new = table
                    .read_incremental(AUDIT_BRANCH, ctx.previous_snapshot(&name), Some(graded))
                    .await
                    .map_err(|e| ShackError::lake(&name, e))?;
                let batches: Vec<RecordBatch> =
                    new.parts.into_iter().flat_map(|p| p.batches).collect();
                let raw_col = batches
                    .first()
                    .and_then(|b| b.schema().index_of("_raw").ok())
                    .unwrap_or(0);
                let headers = strings(&batches, raw_col, &name)?
                    .into_iter()
                    .flatten()
                    .filter(|raw| is_csv_header(source, raw))
                    .count() as u64;
                intake.rows = intake.rows.saturating_sub(headers);
            }
        }
        intakes.push(intake);
    }
    if by_snapshot.is_empty() || !ctx.snapshots.contains_key(silver::QUARANTINE) {
        return Ok(intakes);
    }
    let ids = by_snapshot
        .keys()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let sql = ctx.sql(catalog).await?;
    let rows = query(
        &sql,
        silver::QUARANTINE,
        &format!(
            "SELECT source, reason, _bronze_snapshot_id, count(*) FROM {} \
             WHERE _bronze_snapshot_id IN ({ids}) GROUP BY source, reason, _bronze_snapshot_id",
            silver::QUARANTINE
        ),
    )
    .await?;
    let reasons = strings(&rows, 1, silver::QUARANTINE)?;
    let snapshots = ints(&rows, 2, silver::QUARANTINE)?;
    let counts = ints(&rows, 3, silver::QUARANTINE)?;
    for ((reason, snapshot), n) in reasons.into_iter().zip(snapshots).zip(counts) {
        // A row's source is the bronze table its snapshot belongs to.
        let Some(&i) = snapshot.and_then(|s| by_snapshot.get(&s)) else {
            continue;
        };
        let reason = reason.unwrap_or_else(|| "no reason".to_string());
        *intakes[i].quarantined.entry(reason).or_default() += n.unwrap_or(0).max(0) as u64;
    }
    Ok(intakes)
}

fn quarantine_rate_audit<'a>(
    catalog: &'a Catalog,
    ctx: &'a GradeContext,
) -> BoxFuture<'a, Result<AuditResult>> {
    async move {
        let mut intakes = intake_since_last_publish(catalog, ctx).await?;
        // A source nothing arrived for has nothing to say (the story's line names two).
        intakes.retain(|i| i.rows > 0);
        Ok(grade::quarantine_rate(&intakes, &ctx.settings))
    }
    .boxed()
}

// ---- 2. conservation ---------------------------------------------------------------------------

/// Both sides of one source's bronze → silver count.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceBalance {
    pub source: String,
    pub bronze: i64,
    /// Parsed rows including later deliveries of an id already taken.
    pub parsed: i64,
    pub quarantined: i64,
    pub headers: i64,
}

impl SourceBalance {
    /// Bronze rows not accounted for (negative: silver holds more than bronze gave).
    pub fn difference(&self) -> i64 {
        self.bronze - (self.parsed + self.quarantined + self.headers)
    }
}

/// Payment events and their signed net per currency, as one layer holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventTotals {
    pub events: i64,
    /// Captures positive, refunds negative, per currency (a currency whose net is zero is left
    /// out: conservation compares a missing currency as zero).
    pub net_minor: BTreeMap<String, i64>,
}

/// The conservation audit's judgement: BLOCK when silver and gold disagree on the count or the
/// net of payment events, or any source's bronze rows are not exactly accounted for.
pub fn conservation(
    silver: &EventTotals,
    gold: &EventTotals,
    balances: &[SourceBalance],
) -> AuditResult {
    let mut problems = Vec::new();
    if silver.events != gold.events {
        problems.push(format!(
            "silver has {} payment events, gold {}",
            thousands(silver.events.max(0) as u64),
            thousands(gold.events.max(0) as u64)
        ));
    }
    let currencies: std::collections::BTreeSet<&String> = silver
        .net_minor
        .keys()
        .chain(gold.net_minor.keys())
        .collect();
    for c in currencies {
        let s = silver.net_minor.get(c).copied().unwrap_or(0);
        let g = gold.net_minor.get(c).copied().unwrap_or(0);
        if s != g {
            problems.push(format!(
                "{} net differs by {} (gold - silver)",
                c.to_uppercase(),
                money(g - s)
            ));
        }
    }
    for b in balances {
        let d = b.difference();
        if d != 0 {
            problems.push(format!(
                "{}: {} bronze rows, {} parsed + {} quarantined + {} headers ({} unaccounted)",
                b.source, b.bronze, b.parsed, b.quarantined, b.headers, d
            ));
        }
    }
    let evidence = json!({
        "silver": silver,
        "gold": gold,
        "sources": balances,
    });
    if problems.is_empty() {
        let rows: i64 = balances.iter().map(|b| b.bronze).sum();
        AuditResult::new(
            CONSERVATION,
            Verdict::Pass,
            format!(
                "{} events, same count and same net in silver and gold; {} bronze rows all accounted for",
                thousands(silver.events.max(0) as u64),
                thousands(rows.max(0) as u64)
            ),
            evidence,
        )
    } else {
        AuditResult::new(CONSERVATION, Verdict::Block, problems.join("; "), evidence)
    }
}

/// Where conservation's queries read: the graded tables whole, or the rows of the data files
/// each graded table added or removed since the last publish (see [`Catalog::sql_changes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    Whole,
    Added,
    Removed,
}

impl Reach {
    /// The name `table` has in this reach's session.
    fn table(self, table: &str) -> String {
        match self {
            Reach::Whole => table.to_string(),
            Reach::Added => format!("{}.{table}", lake::ADDED),
            Reach::Removed => format!("{}.{table}", lake::REMOVED),
        }
    }
}

/// How an event's amount counts toward its currency's net.
#[derive(Clone, Copy)]
enum Net {
    /// As it is (`gold.fct_payments` signs refunds itself).
    AsIs,
    /// Negated for a refund (`silver.payments`, whose `event_type` says which).
    RefundsNegated,
}

/// The events of `reach` of `table` and their net per currency (a null currency as
/// `(none)`), a null amount adding nothing: what `SELECT currency, count(*), sum(signed)
/// GROUP BY currency` gave.
async fn event_totals(
    ctx: &GradeContext,
    sql: &SqlContext,
    reach: Reach,
    table: &str,
    net: Net,
) -> Result<EventTotals> {
    let from = reach.table(table);
    if !graded(ctx, table) || reads_nothing(sql, table, &from).await? {
        return Ok(EventTotals::default());
    }
    let columns: &[&str] = match net {
        Net::AsIs => &["currency", "amount_minor"],
        Net::RefundsNegated => &["currency", "amount_minor", "event_type"],
    };
    let rows = columns_of(sql, table, &from, columns).await?;
    let mut t = EventTotals::default();
    // Batch by batch, in the arrays read (a whole read holds every payment event).
    for b in &rows {
        let currency = str_array(b, 0, table)?;
        let amount = int_array(b, 1, table)?;
        let kind = match net {
            Net::AsIs => None,
            Net::RefundsNegated => Some(str_array(b, 2, table)?),
        };
        for i in 0..b.num_rows() {
            t.events += 1;
            if amount.is_null(i) {
                continue;
            }
            let refund = kind
                .as_ref()
                .is_some_and(|k| !k.is_null(i) && k.value(i) == "refund");
            let signed = if refund {
                amount
                    .value(i)
                    .checked_neg()
                    .ok_or_else(|| bad_result(table, "a refund's amount cannot be negated"))?
            } else {
                amount.value(i)
            };
            let key = if currency.is_null(i) {
                "(none)"
            } else {
                currency.value(i)
            };
            match t.net_minor.get_mut(key) {
                Some(n) => *n = add(*n, signed, table)?,
                None => {
                    t.net_minor.insert(key.to_string(), signed);
                }
            }
        }
    }
    // A net of zero is no net: whether a currency's rows are all gone or net to nothing, the
    // figures read the same (conservation compares a missing currency as zero).
    t.net_minor.retain(|_, n| *n != 0);
    Ok(t)
}

/// CSV header lines among a bronze table's rows (the parser decides what a header is).
async fn headers(
    ctx: &GradeContext,
    sql: &SqlContext,
    reach: Reach,
    source: Source,
) -> Result<i64> {
    if !graded(ctx, &bronze::table_name(source)) {
        return Ok(0);
    }
    let (table, first_field) = match source {
        Source::FxRates => (bronze::table_name(source), "rate_date"),
        Source::Settlements => (bronze::table_name(source), "settlement_date"),
        // JSON-lines sources have no header line.
        Source::Orders | Source::Payments => return Ok(0),
    };
    let from = reach.table(&table);
    if reads_nothing(sql, &table, &from).await? {
        return Ok(0);
    }
    let rows = columns_of(sql, &table, &from, &["_raw"]).await?;
    let mut n = 0;
    for b in &rows {
        for raw in str_array(b, 0, &table)?.iter().flatten() {
            n += i64::from(raw.contains(first_field) && is_csv_header(source, raw));
        }
    }
    Ok(n)
}

/// Whether a bronze line of a CSV source is its header (the parser decides).
fn is_csv_header(source: Source, raw: &str) -> bool {
    match source {
        Source::FxRates => matches!(parse::parse_fx(raw, true), Parsed::Header),
        Source::Settlements => matches!(parse::parse_settlement(raw, true), Parsed::Header),
        Source::Orders | Source::Payments => false,
    }
}

/// How a table's rows are tallied: counted, or by summing a column.
#[derive(Clone, Copy)]
enum Tally {
    /// `count(*)`: summed from the manifests' record counts ([`SqlContext::count_rows`]).
    Rows,
    /// `sum(column)`: read.
    Sum(&'static str),
}

/// `tally` over `table`, or 0 when `table` is not graded.
async fn tally_if_graded(
    ctx: &GradeContext,
    sql: &SqlContext,
    reach: Reach,
    table: &str,
    tally: Tally,
) -> Result<i64> {
    if !graded(ctx, table) {
        return Ok(0);
    }
    let from = reach.table(table);
    match tally {
        Tally::Rows => sql
            .count_rows(&from)
            .await
            .map_err(|e| ShackError::lake(format!("{table} (count(*) of {from})"), e)),
        Tally::Sum(_) if reads_nothing(sql, table, &from).await? => Ok(0),
        Tally::Sum(column) => {
            let rows = columns_of(sql, table, &from, &[column]).await?;
            ints(&rows, 0, table)?
                .into_iter()
                .flatten()
                .try_fold(0, |total, n| add(total, n, table))
        }
    }
}

/// The append-only silver table that holds every parsed row of `source`, and how its rows
/// count (settlements keep the latest publication per day and currency, with how many there
/// were).
fn parsed_table(source: Source) -> (&'static str, Tally) {
    match source {
        Source::Payments => (silver::PAYMENT_EVENTS, Tally::Rows),
        Source::Orders => (silver::ORDER_CHANGES, Tally::Rows),
        Source::FxRates => (silver::FX_RATE_HISTORY, Tally::Rows),
        Source::Settlements => (silver::SETTLEMENTS, Tally::Sum("publications")),
    }
}

async fn source_balances(
    ctx: &GradeContext,
    sql: &SqlContext,
    reach: Reach,
) -> Result<Vec<SourceBalance>> {
    let from = reach.table(silver::QUARANTINE);
    let quarantine = if !graded(ctx, silver::QUARANTINE)
        || reads_nothing(sql, silver::QUARANTINE, &from).await?
    {
        Vec::new()
    } else {
        columns_of(sql, silver::QUARANTINE, &from, &["source"]).await?
    };
    // Quarantined rows by source (a row without one counts for none).
    let mut q: BTreeMap<String, i64> = BTreeMap::new();
    for source in strings(&quarantine, 0, silver::QUARANTINE)?
        .into_iter()
        .flatten()
    {
        *q.entry(source).or_default() += 1;
    }
    let balances = Source::ALL.map(|source| {
        let q = &q;
        async move {
            let table = bronze::table_name(source);
            let (parsed_table, parsed_tally) = parsed_table(source);
            let (bronze_rows, parsed, headers) = futures::try_join!(
                tally_if_graded(ctx, sql, reach, &table, Tally::Rows),
                tally_if_graded(ctx, sql, reach, parsed_table, parsed_tally),
                headers(ctx, sql, reach, source),
            )?;
            Ok::<_, ShackError>(SourceBalance {
                source: source.as_str().to_string(),
                bronze: bronze_rows,
                parsed,
                quarantined: q.get(source.as_str()).copied().unwrap_or(0),
                headers,
            })
        }
    });
    futures::future::try_join_all(balances).await
}

/// Every figure the conservation audit compares. Each is a sum over rows, so the figures of a
/// table are the figures of its parts added up, which is how a grade carries the last
/// publish's figures forward ([`ConservationTotals::carried`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConservationTotals {
    pub silver: EventTotals,
    pub gold: EventTotals,
    pub sources: Vec<SourceBalance>,
}

impl ConservationTotals {
    /// The figures of `self`'s rows, less `removed`'s, plus `added`'s.
    pub fn carried(&self, added: &Self, removed: &Self) -> Self {
        let events = |base: &EventTotals, add: &EventTotals, rem: &EventTotals| {
            let mut t = base.clone();
            t.events += add.events - rem.events;
            for (c, n) in &add.net_minor {
                *t.net_minor.entry(c.clone()).or_default() += n;
            }
            for (c, n) in &rem.net_minor {
                *t.net_minor.entry(c.clone()).or_default() -= n;
            }
            t.net_minor.retain(|_, n| *n != 0);
            t
        };
        let mut sources = self.sources.clone();
        for part in added.sources.iter().chain(&removed.sources) {
            if !sources.iter().any(|s| s.source == part.source) {
                sources.push(SourceBalance {
                    source: part.source.clone(),
                    ..SourceBalance::default()
                });
            }
        }
        for s in &mut sources {
            let sign_of = |list: &[SourceBalance], sign: i64, s: &mut SourceBalance| {
                if let Some(p) = list.iter().find(|p| p.source == s.source) {
                    s.bronze += sign * p.bronze;
                    s.parsed += sign * p.parsed;
                    s.quarantined += sign * p.quarantined;
                    s.headers += sign * p.headers;
                }
            };
            sign_of(&added.sources, 1, s);
            sign_of(&removed.sources, -1, s);
        }
        ConservationTotals {
            silver: events(&self.silver, &added.silver, &removed.silver),
            gold: events(&self.gold, &added.gold, &removed.gold),
            sources,
        }
    }
}

/// Every table conservation reads.
fn conserved_tables() -> Vec<String> {
    let mut out = vec![
        silver::PAYMENTS.to_string(),
        gold::FCT_PAYMENTS.to_string(),
        silver::QUARANTINE.to_string(),
    ];
    for source in Source::ALL {
        out.push(bronze::table_name(source));
        out.push(parsed_table(source).0.to_string());
    }
    out
}

/// Conservation's figures over `reach` of the session `sql`.
async fn conservation_totals(
    ctx: &GradeContext,
    sql: &SqlContext,
    reach: Reach,
) -> Result<ConservationTotals> {
    let (silver, gold, sources) = futures::try_join!(
        event_totals(ctx, sql, reach, silver::PAYMENTS, Net::RefundsNegated),
        event_totals(ctx, sql, reach, gold::FCT_PAYMENTS, Net::AsIs),
        source_balances(ctx, sql, reach),
    )?;
    Ok(ConservationTotals {
        silver,
        gold,
        sources,
    })
}

/// Conservation's figures read from every conserved table whole at the graded snapshots (what
/// one grade in [`CONSERVATION_WHOLE_EVERY`] does, and what a carried figure must equal).
pub async fn conservation_figures(
    catalog: &Catalog,
    ctx: &GradeContext,
) -> Result<ConservationTotals> {
    let sql = ctx.sql(catalog).await?;
    conservation_totals(ctx, &sql, Reach::Whole).await
}

/// A grade reads every conserved table whole at least once in this many: the grades between
/// carry the figures forward, and the whole read also checks what they carried.
pub const CONSERVATION_WHOLE_EVERY: u64 = 7;

/// The last publish's conservation figures carried to the graded snapshots.
struct Carried<T> {
    totals: T,
    /// The publish carried from.
    publish: u64,
    /// Grades carried in a row since the last whole read, this one included.
    chain: u64,
}

/// What a carried audit judges, and how it got it (see [`carried_or_whole`]).
struct Figures<T> {
    figures: T,
    /// The evidence's `basis`: carried (from which publish, how many in a row) or whole (why).
    basis: serde_json::Value,
    /// Figures carried to this grade that the whole read must equal.
    check: Option<Carried<T>>,
}

impl<T: PartialEq + serde::Serialize> Figures<T> {
    /// `result` (the judgement of these figures) with their basis, blocked when figures carried
    /// to this grade differ from the whole read ([`check_carried`]).
    fn finish(&self, mut result: AuditResult) -> AuditResult {
        result.evidence["basis"] = self.basis.clone();
        check_carried(
            result,
            &self.figures,
            self.check.as_ref().map(|c| (c.publish, &c.totals)),
        )
    }
}

/// The figures `carried` from the last publish while fewer than [`CONSERVATION_WHOLE_EVERY`]
/// grades in a row have carried them; otherwise (or when they cannot be carried) `whole`, read.
async fn carried_or_whole<T>(
    carried: std::result::Result<Carried<T>, String>,
    whole: impl std::future::Future<Output = Result<T>>,
) -> Result<Figures<T>> {
    match carried {
        Ok(c) if c.chain < CONSERVATION_WHOLE_EVERY => Ok(Figures {
            basis: json!({
                "read": format!("changes since publish {}", c.publish),
                "chain": c.chain,
            }),
            figures: c.totals,
            check: None,
        }),
        carried => {
            let figures = whole.await?;
            let why = match &carried {
                Ok(_) => format!("one grade in {CONSERVATION_WHOLE_EVERY} reads whole"),
                Err(why) => why.clone(),
            };
            Ok(Figures {
                figures,
                basis: json!({ "read": "whole", "why": why, "chain": 0 }),
                check: carried.ok(),
            })
        }
    }
}

/// The last publish's figures, less the rows of every conserved table's data files removed
/// since, plus those of the files added since; `Err` says why they cannot be carried.
async fn carry(
    catalog: &Catalog,
    ctx: &GradeContext,
) -> std::result::Result<Carried<ConservationTotals>, String> {
    let (base, previous, publish, chain) = last_figures::<ConservationTotals>(ctx, CONSERVATION)?;
    let mut tables = Vec::new();
    for name in conserved_tables() {
        match (previous.snapshots.get(&name), ctx.snapshots.get(&name)) {
            (Some(from), Some(to)) => tables.push((name, *from, *to)),
            (None, None) => {}
            (None, Some(_)) => return Err(format!("{name} was not in publish {publish}")),
            (Some(_), None) => return Err(format!("{name} has no graded snapshot")),
        }
    }
    let list: Vec<(&str, i64, i64)> = tables
        .iter()
        .map(|(n, f, t)| (n.as_str(), *f, *t))
        .collect();
    let sql = catalog
        .sql_changes(ctx.version, &list)
        .await
        .map_err(|e| e.to_string())?;
    let (added, removed) = futures::try_join!(
        conservation_totals(ctx, &sql, Reach::Added),
        conservation_totals(ctx, &sql, Reach::Removed),
    )
    .map_err(|e| e.to_string())?;
    Ok(Carried {
        totals: base.carried(&added, &removed),
        publish,
        chain,
    })
}

/// The conservation audit's name: its results carry it, and the next grade finds its figures
/// in the last publish by it.
const CONSERVATION: &str = "conservation";

/// A whole read's result, and BLOCK when the figures carried from publish `carried.0` differ
/// from it: rows appeared or went between two file lists without the lake saying so.
pub fn check_carried<T: PartialEq + serde::Serialize>(
    mut result: AuditResult,
    whole: &T,
    carried: Option<(u64, &T)>,
) -> AuditResult {
    let Some((publish, carried)) = carried else {
        return result;
    };
    if carried == whole {
        return result;
    }
    result.evidence["carried"] = json!(carried);
    let problem = format!(
        "figures carried from publish {publish} by the files changed since differ from a whole read"
    );
    result.reason = if result.verdict == Verdict::Block {
        format!("{problem}; {}", result.reason)
    } else {
        problem
    };
    result.verdict = Verdict::Block;
    result
}

fn conservation_audit<'a>(
    catalog: &'a Catalog,
    ctx: &'a GradeContext,
) -> BoxFuture<'a, Result<AuditResult>> {
    async move {
        let f = carried_or_whole(
            carry(catalog, ctx).await,
            conservation_figures(catalog, ctx),
        )
        .await?;
        let t = &f.figures;
        Ok(f.finish(conservation(&t.silver, &t.gold, &t.sources)))
    }
    .boxed()
}

// ---- 3. fx coverage ------------------------------------------------------------------------------

/// The FX-coverage audit's judgement, given how many USD events there are, which have no rate
/// (a few of their ids) and the oldest rate used, in days before its event's processor date.
pub fn fx_coverage(
    usd_events: i64,
    without_rate: i64,
    examples: &[String],
    oldest_days: Option<i64>,
) -> AuditResult {
    let evidence = json!({
        "usd_events": usd_events,
        "without_rate": without_rate,
        "examples": examples,
        "oldest_rate_days": oldest_days,
    });
    if without_rate > 0 {
        let more = if without_rate as usize > examples.len() {
            ", …"
        } else {
            ""
        };
        return AuditResult::new(
            FX_COVERAGE,
            Verdict::Block,
            format!(
                "{} of {} USD events have no rate on or before their day ({}{more})",
                thousands(without_rate as u64),
                thousands(usd_events.max(0) as u64),
                examples.join(", ")
            ),
            evidence,
        );
    }
    let reason = match oldest_days {
        None => "no USD events".to_string(),
        Some(d) => format!(
            "every USD event has a rate; the oldest used is {d} day{} old",
            if d == 1 { "" } else { "s" }
        ),
    };
    AuditResult::new(FX_COVERAGE, Verdict::Pass, reason, evidence)
}

/// The FX-coverage audit's figures over `gold.fct_payments`' USD events (its evidence holds
/// them, so the next grade can carry them by the files changed since).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FxFigures {
    pub usd_events: i64,
    pub without_rate: i64,
    /// The USD events whose processor date and rate date are both known, by how many days
    /// older than the processor date the rate is.
    pub by_gap_days: BTreeMap<i64, i64>,
}

impl FxFigures {
    /// How many days old the oldest rate used is (`None`: no event has a rate date).
    pub fn oldest_days(&self) -> Option<i64> {
        self.by_gap_days
            .iter()
            .rev()
            .find(|(_, n)| **n != 0)
            .map(|(d, _)| *d)
    }

    /// The figures of `self`'s rows, less `removed`'s, plus `added`'s; `None` when a count
    /// would fall below zero (what changed does not add up to what was there).
    pub fn carried(&self, added: &Self, removed: &Self) -> Option<Self> {
        let mut t = self.clone();
        t.usd_events += added.usd_events - removed.usd_events;
        t.without_rate += added.without_rate - removed.without_rate;
        for (d, n) in &added.by_gap_days {
            *t.by_gap_days.entry(*d).or_default() += n;
        }
        for (d, n) in &removed.by_gap_days {
            *t.by_gap_days.entry(*d).or_default() -= n;
        }
        t.by_gap_days.retain(|_, n| *n != 0);
        let counts_hold =
            t.usd_events >= 0 && t.without_rate >= 0 && t.by_gap_days.values().all(|n| *n > 0);
        counts_hold.then_some(t)
    }
}

/// The FX-coverage figures over `reach` of the session `sql`.
async fn fx_totals(sql: &SqlContext, reach: Reach) -> Result<FxFigures> {
    let t = gold::FCT_PAYMENTS;
    let from = reach.table(t);
    if reads_nothing(sql, t, &from).await? {
        return Ok(FxFigures::default());
    }
    // One pass over the events: the USD ones (any case), how many lack a rate, and by how many
    // days each one's rate is older than its processor date.
    let columns = [
        "currency",
        "processor_date",
        "fx_rate_date",
        "fx_rate_micros",
    ];
    let rows = columns_of(sql, t, &from, &columns).await?;
    let mut f = FxFigures::default();
    for b in &rows {
        let currency = str_array(b, 0, t)?;
        let [day, rate_day, rate] = [1, 2, 3].map(|i| int_array(b, i, t));
        let (day, rate_day, rate) = (day?, rate_day?, rate?);
        for i in 0..b.num_rows() {
            if currency.is_null(i) || !is_usd(currency.value(i)) {
                continue;
            }
            f.usd_events += 1;
            f.without_rate += i64::from(rate.is_null(i) || rate_day.is_null(i));
            if !day.is_null(i) && !rate_day.is_null(i) {
                *f.by_gap_days
                    .entry(day.value(i) - rate_day.value(i))
                    .or_default() += 1;
            }
        }
    }
    Ok(f)
}

/// Whether `currency` is `usd` in any case, as SQL's `lower(currency) = 'usd'` (Unicode lower
/// case) finds it.
fn is_usd(currency: &str) -> bool {
    currency.eq_ignore_ascii_case("usd")
        || (!currency.is_ascii() && currency.to_lowercase() == "usd")
}

/// The FX-coverage figures read from `gold.fct_payments` whole at its graded snapshot (what a
/// carried figure must equal).
pub async fn fx_figures(catalog: &Catalog, ctx: &GradeContext) -> Result<FxFigures> {
    if !graded(ctx, gold::FCT_PAYMENTS) {
        return Ok(FxFigures::default());
    }
    let sql = ctx.sql(catalog).await?;
    fx_totals(&sql, Reach::Whole).await
}

/// The figures audit `name` recorded in its evidence at the last publish, that publish, its
/// number and how many grades in a row (this one included) will have carried them; `Err`
/// says why there are none to carry.
fn last_figures<'a, T: serde::de::DeserializeOwned>(
    ctx: &'a GradeContext,
    name: &str,
) -> std::result::Result<(T, &'a crate::publish::PublishRecord, u64, u64), String> {
    let Some(previous) = &ctx.previous else {
        return Err("nothing published yet".into());
    };
    let publish = previous.publish_number.unwrap_or_default();
    let evidence = previous
        .audits
        .iter()
        .find(|a| a.name == name)
        .map(|a| &a.evidence)
        .ok_or_else(|| format!("publish {publish} recorded no {name} figures"))?;
    let figures: T = serde_json::from_value(evidence.clone())
        .map_err(|e| format!("publish {publish}'s {name} figures do not read: {e}"))?;
    let chain = evidence["basis"]["chain"].as_u64().unwrap_or(0) + 1;
    Ok((figures, previous, publish, chain))
}

/// The last publish's FX-coverage figures carried to the graded snapshot of
/// `gold.fct_payments`; `Err` says why they cannot be.
async fn carry_fx(
    catalog: &Catalog,
    ctx: &GradeContext,
) -> std::result::Result<Carried<FxFigures>, String> {
    let t = gold::FCT_PAYMENTS;
    let (base, previous, publish, chain) = last_figures::<FxFigures>(ctx, FX_COVERAGE)?;
    let (Some(from), Some(to)) = (previous.snapshots.get(t), ctx.snapshots.get(t)) else {
        return Err(format!(
            "{t} is not in both publish {publish} and this grade"
        ));
    };
    let sql = catalog
        .sql_changes(ctx.version, &[(t, *from, *to)])
        .await
        .map_err(|e| e.to_string())?;
    let (added, removed) = futures::try_join!(
        fx_totals(&sql, Reach::Added),
        fx_totals(&sql, Reach::Removed),
    )
    .map_err(|e| e.to_string())?;
    let totals = base
        .carried(&added, &removed)
        .ok_or_else(|| format!("{t}'s files changed since publish {publish} do not add up"))?;
    Ok(Carried {
        totals,
        publish,
        chain,
    })
}

/// The FX-coverage audit's name, as [`CONSERVATION`] is.
const FX_COVERAGE: &str = "fx coverage";

/// [`fx_coverage`]'s judgement of `f`, its evidence holding the figures the next grade carries.
fn fx_judged(f: &FxFigures, examples: &[String]) -> AuditResult {
    let mut r = fx_coverage(f.usd_events, f.without_rate, examples, f.oldest_days());
    r.evidence["by_gap_days"] = json!(f.by_gap_days);
    r
}

fn fx_coverage_audit<'a>(
    catalog: &'a Catalog,
    ctx: &'a GradeContext,
) -> BoxFuture<'a, Result<AuditResult>> {
    async move {
        let t = gold::FCT_PAYMENTS;
        if !graded(ctx, t) {
            return Ok(fx_judged(&FxFigures::default(), &[]));
        }
        let f = carried_or_whole(carry_fx(catalog, ctx).await, fx_figures(catalog, ctx)).await?;
        let examples = if f.figures.without_rate > 0 {
            let sql = ctx.sql(catalog).await?;
            let rows = query(
                &sql,
                t,
                &format!(
                    "SELECT event_id, processor_date FROM {t} WHERE lower(currency) = 'usd' \
                     AND (fx_rate_micros IS NULL OR fx_rate_date IS NULL) \
                     ORDER BY processor_date, event_id LIMIT 3"
                ),
            )
            .await?;
            let ids = strings(&rows, 0, t)?;
            let days = ints(&rows, 1, t)?;
            ids.into_iter()
                .zip(days)
                .map(|(id, d)| {
                    let day = d
                        .and_then(|d| i32::try_from(d).ok())
                        .map(|d| date_of(d).to_string())
                        .unwrap_or_default();
                    format!("{} on {day}", id.unwrap_or_default())
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut judged = f.finish(fx_judged(&f.figures, &examples));
        // Revenue converts a USD event at its ORDER date's rate (mart_order_revenue): an order
        // dated before the first rate has none, and the mart leaves the event out. Counted
        // here so that never passes silently.
        if let Some((first, n)) = usd_ordered_before_first_rate(catalog, ctx).await?
            && n > 0
        {
            judged.evidence["ordered_before_first_rate"] = json!(n);
            if judged.verdict != Verdict::Block {
                judged.verdict = Verdict::Block;
                judged.reason = format!(
                    "{} USD events are on orders dated before the first rate ({first}): mart_order_revenue cannot convert them",
                    thousands(n.max(0) as u64)
                );
            }
        }
        Ok(judged)
    }
    .boxed()
}

/// The first USD→CAD rate date, and how many USD events of `gold.fct_payments` have an order
/// date before it (`None` when no rate is graded: every USD event then lacks one, which the
/// processor-date figures already block on). The date is a literal, so the files'
/// `order_date` bounds leave out nearly every file before one is opened.
async fn usd_ordered_before_first_rate(
    catalog: &Catalog,
    ctx: &GradeContext,
) -> Result<Option<(NaiveDate, i64)>> {
    if !graded(ctx, silver::FX_RATES) || !graded(ctx, gold::FCT_PAYMENTS) {
        return Ok(None);
    }
    let sql = ctx.sql(catalog).await?;
    let what = "the first FX rate";
    let rates = columns_of(
        &sql,
        what,
        silver::FX_RATES,
        &["rate_date", "base", "quote"],
    )
    .await?;
    let days = ints(&rates, 0, what)?;
    let bases = strings(&rates, 1, what)?;
    let quotes = strings(&rates, 2, what)?;
    let usd_cad = |b: &Option<String>, q: &Option<String>| {
        b.as_deref() == Some("USD") && q.as_deref() == Some("CAD")
    };
    let first = days
        .into_iter()
        .zip(bases.iter().zip(&quotes))
        .filter(|(_, (b, q))| usd_cad(b, q))
        .filter_map(|(d, _)| d)
        .min();
    let Some(first) = first.and_then(|d| i32::try_from(d).ok()).map(date_of) else {
        return Ok(None);
    };
    let what = "USD events ordered before the first FX rate";
    let n = scalar(
        &query(
            &sql,
            what,
            &format!(
                "SELECT count(*) FROM {} WHERE order_date < DATE '{first}' AND lower(currency) = 'usd'",
                gold::FCT_PAYMENTS
            ),
        )
        .await?,
        0,
        what,
    )?;
    Ok(Some((first, n)))
}

// ---- 4. reconciliation ---------------------------------------------------------------------------

/// One settlement line beside gold's cash for its day and currency, or gold's cash for a day
/// and currency the processor has not settled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SettlementCheck {
    pub day: NaiveDate,
    pub currency: String,
    /// The processor's gross, refunds, net; `None` when no settlement line names the day and
    /// currency.
    pub settled: Option<(i64, i64, i64)>,
    /// Gold's captured, refunded, net (zeros when gold has no cash that day).
    pub gold: (i64, i64, i64),
}

/// The reconciliation audit's judgement: every settlement line must equal gold's cash to the
/// cent, and every day and currency gold holds cash for must have a settlement line. A gap, or
/// a missing line, on a day that closed (its next midnight UTC) less than `settling_hours`
/// before `as_of` is still settling: a gap WARNs, a missing line is awaited (the report lands
/// the next morning) and not judged. Older gaps and missing lines BLOCK. Lines are judged in
/// day order.
pub fn reconciliation(
    lines: &[SettlementCheck],
    as_of: DateTime<Utc>,
    settling_hours: u32,
) -> AuditResult {
    let mut settling = Vec::new();
    let mut broken = Vec::new();
    let mut gaps = Vec::new();
    let mut missing = Vec::new();
    let mut awaited = 0usize;
    for l in lines {
        let closed = l
            .day
            .succ_opt()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc());
        let still_settling =
            closed.is_some_and(|c| as_of - c < Duration::hours(i64::from(settling_hours)));
        let Some(settled) = l.settled else {
            if l.gold == (0, 0, 0) {
                continue;
            }
            if still_settling {
                awaited += 1;
                continue;
            }
            missing.push(json!({
                "day": l.day.to_string(),
                "currency": l.currency,
                "gold": [l.gold.0, l.gold.1, l.gold.2],
            }));
            broken.push(format!(
                "no settlement for {} {} (gold net {})",
                l.day,
                l.currency.to_uppercase(),
                money(l.gold.2).trim_start_matches('+')
            ));
            continue;
        };
        if settled == l.gold {
            continue;
        }
        let gap = format!(
            "{} {} net off by {}",
            l.day,
            l.currency.to_uppercase(),
            money(l.gold.2 - settled.2)
        );
        gaps.push(json!({
            "day": l.day.to_string(),
            "currency": l.currency,
            "settled": [settled.0, settled.1, settled.2],
            "gold": [l.gold.0, l.gold.1, l.gold.2],
            "settling": still_settling,
        }));
        if still_settling {
            settling.push(gap);
        } else {
            broken.push(gap);
        }
    }
    let settled_lines = lines.iter().filter(|l| l.settled.is_some()).count();
    let evidence = json!({
        "settlement_lines": settled_lines,
        "settling_hours": settling_hours,
        "gaps": gaps,
        "missing": missing,
        "awaited": awaited,
    });
    let first3 = |v: &[String]| {
        let more = if v.len() > 3 {
            format!(" … ({} in all)", v.len())
        } else {
            String::new()
        };
        format!("{}{more}", v[..v.len().min(3)].join("; "))
    };
    if !broken.is_empty() {
        let mut reason = first3(&broken);
        if !settling.is_empty() {
            reason.push_str(&format!("; and {} still settling", settling.len()));
        }
        AuditResult::new("reconciliation", Verdict::Block, reason, evidence)
    } else if !settling.is_empty() {
        AuditResult::new(
            "reconciliation",
            Verdict::Warn,
            format!("still settling: {}", first3(&settling)),
            evidence,
        )
    } else if settled_lines == 0 {
        AuditResult::new(
            "reconciliation",
            Verdict::Pass,
            "no settlement has arrived yet",
            evidence,
        )
    } else {
        AuditResult::new(
            "reconciliation",
            Verdict::Pass,
            format!(
                "{} settlement lines match to the cent",
                thousands(settled_lines as u64)
            ),
            evidence,
        )
    }
}

/// One line of silver.settlements or gold.mart_daily_cash: its day (epoch days), its currency
/// in lower case, and its three figures (gross or captured, refunds, net), `None` where null.
struct CashLine {
    day: Option<i64>,
    currency: Option<String>,
    figures: [Option<i64>; 3],
}

/// The lines of `table`: `columns` are its day, currency and three figures, in that order.
async fn cash_lines(
    sql: &SqlContext,
    table: &str,
    columns: [&str; 5],
    what: &str,
) -> Result<Vec<CashLine>> {
    let rows = sql
        .read_columns(table, &columns)
        .await
        .map_err(|e| ShackError::lake(format!("{what} (reading {table})"), e))?;
    let days = ints(&rows, 0, what)?;
    let currencies = strings(&rows, 1, what)?;
    let [a, b, c] = [2, 3, 4].map(|i| ints(&rows, i, what));
    let (a, b, c) = (a?, b?, c?);
    Ok(days
        .into_iter()
        .zip(currencies)
        .zip(a.into_iter().zip(b).zip(c))
        .map(|((day, currency), ((a, b), c))| CashLine {
            day,
            currency: currency.map(|c| c.to_lowercase()),
            figures: [a, b, c],
        })
        .collect())
}

/// Settlement lines against gold's cash lines, as SQL's full outer join on day and lower-cased
/// currency gives them: a line on either side with no partner stands alone (a null currency
/// never matches), n lines on one side meeting m on the other give n × m, and the lines come
/// in day order, then currency (a null one last, as the empty string). A null figure counts as
/// zero; a line without a day (or with one out of range) is an error.
fn settlements_against_cash(
    settled: Vec<CashLine>,
    cash: Vec<CashLine>,
    what: &str,
) -> Result<Vec<SettlementCheck>> {
    type Figures = [Option<i64>; 3];
    /// A group's place in the order the lines come out: day, whether the currency is null,
    /// the currency, then a number that gives each line of a null currency a group of its own
    /// (it matches nothing).
    type Key = (NaiveDate, bool, String, usize);
    // The settlement and cash lines of each day and currency.
    let mut groups: BTreeMap<Key, (Vec<Figures>, Vec<Figures>)> = BTreeMap::new();
    let sides = settled
        .into_iter()
        .map(|l| (l, true))
        .chain(cash.into_iter().map(|l| (l, false)));
    for (lone, (line, is_settlement)) in sides.enumerate() {
        let Some(day) = line.day.and_then(|d| i32::try_from(d).ok()) else {
            return Err(bad_result(what, "a settlement or cash line without a date"));
        };
        let key = match line.currency {
            Some(currency) => (date_of(day), false, currency, 0),
            None => (date_of(day), true, String::new(), lone),
        };
        let (s, c) = groups.entry(key).or_default();
        if is_settlement {
            s.push(line.figures);
        } else {
            c.push(line.figures);
        }
    }
    let zero = |f: &Figures| (f[0].unwrap_or(0), f[1].unwrap_or(0), f[2].unwrap_or(0));
    let mut lines = Vec::new();
    for ((day, _, currency, _), (s, c)) in groups {
        let line = |settled: Option<&Figures>, gold: Option<&Figures>| SettlementCheck {
            day,
            currency: currency.clone(),
            settled: settled.map(zero),
            gold: gold.map(zero).unwrap_or((0, 0, 0)),
        };
        match (s.is_empty(), c.is_empty()) {
            (false, false) => {
                for sf in &s {
                    lines.extend(c.iter().map(|cf| line(Some(sf), Some(cf))));
                }
            }
            (false, true) => lines.extend(s.iter().map(|sf| line(Some(sf), None))),
            (true, _) => lines.extend(c.iter().map(|cf| line(None, Some(cf)))),
        }
    }
    Ok(lines)
}

fn reconciliation_audit<'a>(
    catalog: &'a Catalog,
    ctx: &'a GradeContext,
) -> BoxFuture<'a, Result<AuditResult>> {
    async move {
        if !graded(ctx, gold::MART_DAILY_CASH) {
            return Ok(reconciliation(&[], ctx.as_of, ctx.settings.settling_hours));
        }
        let sql = ctx.sql(catalog).await?;
        let what = "settlements against gold.mart_daily_cash";
        // Two small tables (a line per day and currency on each side), read without a query
        // and joined here: planning a full outer join, its repartitioning and a sort cost more
        // than the rows do. No settlement has ever arrived (silver.settlements has no
        // snapshot): gold's cash alone, every line of it unsettled.
        let settled = if graded(ctx, silver::SETTLEMENTS) {
            cash_lines(
                &sql,
                silver::SETTLEMENTS,
                [
                    "settlement_date",
                    "currency",
                    "gross_minor",
                    "refunds_minor",
                    "net_minor",
                ],
                what,
            )
            .await?
        } else {
            Vec::new()
        };
        let cash = cash_lines(
            &sql,
            gold::MART_DAILY_CASH,
            [
                "processor_date",
                "currency",
                "captured_minor",
                "refunded_minor",
                "net_minor",
            ],
            what,
        )
        .await?;
        let lines = settlements_against_cash(settled, cash, what)?;
        Ok(reconciliation(
            &lines,
            ctx.as_of,
            ctx.settings.settling_hours,
        ))
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(d: u32, h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 8, d, h, 0, 0)
            .single()
            .expect("instant")
    }

    fn line(d: u32, currency: &str, settled_net: i64, gold_net: i64) -> SettlementCheck {
        SettlementCheck {
            day: NaiveDate::from_ymd_opt(2026, 8, d).expect("day"),
            currency: currency.to_string(),
            settled: Some((settled_net, 0, settled_net)),
            gold: (gold_net, 0, gold_net),
        }
    }

    fn unsettled(d: u32, currency: &str, gold_net: i64) -> SettlementCheck {
        SettlementCheck {
            settled: None,
            ..line(d, currency, 0, gold_net)
        }
    }

    fn cash_line(day: i64, currency: Option<&str>, net: i64) -> CashLine {
        CashLine {
            day: Some(day),
            currency: currency.map(str::to_string),
            figures: [Some(net), None, Some(net)],
        }
    }

    /// The join the reconciliation reads its lines by gives what SQL's full outer join on day
    /// and currency gave: partners matched, lone lines on
    /// either side, n × m for repeated keys, a null currency matching nothing and sorting last,
    /// day order then currency, null figures as zero; a line without a day is an error.
    #[test]
    fn settlements_meet_gold_cash_as_a_full_outer_join_would() {
        let day = |d: u32| NaiveDate::from_ymd_opt(2026, 8, d).expect("day");
        let epoch = |d: u32| i64::from(crate::gold::epoch_days(day(d)));
        let settled = vec![
            cash_line(epoch(16), Some("usd"), 5),
            cash_line(epoch(15), Some("cad"), 1),
            cash_line(epoch(15), None, 7),
            cash_line(epoch(17), Some("usd"), 2),
            cash_line(epoch(17), Some("usd"), 3),
        ];
        let cash = vec![
            cash_line(epoch(15), Some("cad"), 1),
            cash_line(epoch(15), Some("usd"), 4),
            cash_line(epoch(16), Some("usd"), 6),
            cash_line(epoch(17), Some("usd"), 9),
            cash_line(epoch(17), Some("usd"), 8),
            cash_line(epoch(15), None, 11),
        ];
        let lines = settlements_against_cash(settled, cash, "test").expect("lines");
        type Line<'a> = (NaiveDate, &'a str, Option<(i64, i64, i64)>, (i64, i64, i64));
        let got: Vec<Line<'_>> = lines
            .iter()
            .map(|l| (l.day, l.currency.as_str(), l.settled, l.gold))
            .collect();
        let mut expected = vec![
            (day(15), "cad", Some((1, 0, 1)), (1, 0, 1)),
            (day(15), "usd", None, (4, 0, 4)),
            (day(15), "", Some((7, 0, 7)), (0, 0, 0)),
            (day(15), "", None, (11, 0, 11)),
            (day(16), "usd", Some((5, 0, 5)), (6, 0, 6)),
        ];
        for s in [2, 3] {
            for c in [9, 8] {
                expected.push((day(17), "usd", Some((s, 0, s)), (c, 0, c)));
            }
        }
        // Lines of one day and currency come in no set order, as from SQL.
        fn sorted(mut v: Vec<Line<'_>>) -> Vec<Line<'_>> {
            v.sort_by_key(|l| (l.0, l.1.is_empty(), l.1, l.2.is_some(), l.2, l.3));
            v
        }
        assert_eq!(sorted(got.clone()), sorted(expected));
        let order: Vec<(NaiveDate, bool, &str)> =
            got.iter().map(|l| (l.0, l.1.is_empty(), l.1)).collect();
        assert!(order.is_sorted(), "{order:?}");
        let none = CashLine {
            day: None,
            currency: Some("usd".into()),
            figures: [None; 3],
        };
        let err = settlements_against_cash(vec![none], Vec::new(), "test").unwrap_err();
        assert!(err.to_string().contains("without a date"), "{err}");
    }

    /// Cash in gold on a day the processor never settled: awaited (not judged) while the day is
    /// settling, blocked after; a day without cash needs no settlement.
    #[test]
    fn a_settlement_that_never_came_blocks_after_the_window() {
        let lines = [
            line(15, "cad", 100, 100),
            unsettled(15, "usd", 0),
            unsettled(16, "usd", 12_345),
        ];
        let early = reconciliation(&lines, at(18, 23), 48);
        assert_eq!(early.verdict, Verdict::Pass, "{early:?}");
        assert_eq!(early.reason, "1 settlement lines match to the cent");
        assert_eq!(early.evidence["awaited"], 1);
        let late = reconciliation(&lines, at(19, 0), 48);
        assert_eq!(late.verdict, Verdict::Block);
        assert_eq!(
            late.reason,
            "no settlement for 2026-08-16 USD (gold net 123.45)"
        );
        assert_eq!(late.evidence["missing"][0]["day"], "2026-08-16");
        // Only unsettled cash, still awaited: nothing has arrived yet.
        assert_eq!(
            reconciliation(&lines[2..], at(17, 12), 48).reason,
            "no settlement has arrived yet"
        );
    }

    #[test]
    fn matching_lines_pass() {
        let r = reconciliation(
            &[line(15, "cad", 100, 100), line(15, "usd", 5, 5)],
            at(17, 12),
            48,
        );
        assert_eq!(r.verdict, Verdict::Pass);
        assert_eq!(r.reason, "2 settlement lines match to the cent");
    }

    #[test]
    fn a_gap_warns_while_settling_and_blocks_later() {
        // 2026-08-16 closed at 2026-08-17 00:00; at 12:00 that is 12 hours: settling.
        let lines = [line(16, "cad", 1_000_000, 970_199)];
        let early = reconciliation(&lines, at(17, 12), 48);
        assert_eq!(early.verdict, Verdict::Warn);
        assert_eq!(
            early.reason,
            "still settling: 2026-08-16 CAD net off by -298.01"
        );
        // 47 hours after close: still settling; 48 hours: blocks.
        assert_eq!(
            reconciliation(&lines, at(18, 23), 48).verdict,
            Verdict::Warn
        );
        let late = reconciliation(&lines, at(19, 0), 48);
        assert_eq!(late.verdict, Verdict::Block);
        assert_eq!(late.reason, "2026-08-16 CAD net off by -298.01");
        // The window is a setting.
        assert_eq!(reconciliation(&lines, at(19, 0), 72).verdict, Verdict::Warn);
    }

    #[test]
    fn an_old_gap_blocks_even_beside_a_settling_one() {
        let r = reconciliation(
            &[line(10, "usd", 500, 400), line(16, "cad", 10, 20)],
            at(17, 12),
            48,
        );
        assert_eq!(r.verdict, Verdict::Block);
        assert_eq!(
            r.reason,
            "2026-08-10 USD net off by -1.00; and 1 still settling"
        );
    }

    #[test]
    fn no_settlement_yet_passes() {
        assert_eq!(reconciliation(&[], at(1, 0), 48).verdict, Verdict::Pass);
    }

    #[test]
    fn conservation_blocks_on_count_net_or_unaccounted_rows() {
        let totals = |events: i64, cad: i64| EventTotals {
            events,
            net_minor: BTreeMap::from([("cad".to_string(), cad)]),
        };
        let balanced = SourceBalance {
            source: "payments".into(),
            bronze: 10,
            parsed: 8,
            quarantined: 2,
            headers: 0,
        };
        let ok = conservation(
            &totals(8, 500),
            &totals(8, 500),
            std::slice::from_ref(&balanced),
        );
        assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
        assert_eq!(
            ok.reason,
            "8 events, same count and same net in silver and gold; 10 bronze rows all accounted for"
        );
        let fanned = conservation(&totals(8, 500), &totals(9, 500), &[]);
        assert_eq!(fanned.verdict, Verdict::Block);
        assert_eq!(fanned.reason, "silver has 8 payment events, gold 9");
        let net = conservation(&totals(8, 500), &totals(8, 450), &[]);
        assert_eq!(net.reason, "CAD net differs by -0.50 (gold - silver)");
        let lost = SourceBalance {
            parsed: 7,
            ..balanced
        };
        let r = conservation(&totals(8, 500), &totals(8, 500), &[lost]);
        assert_eq!(r.verdict, Verdict::Block);
        assert_eq!(
            r.reason,
            "payments: 10 bronze rows, 7 parsed + 2 quarantined + 0 headers (1 unaccounted)"
        );
    }

    fn figures(events: i64, nets: &[(&str, i64)], bronze: i64, parsed: i64) -> ConservationTotals {
        let totals = EventTotals {
            events,
            net_minor: nets.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
        };
        ConservationTotals {
            silver: totals.clone(),
            gold: totals,
            sources: vec![SourceBalance {
                source: "payments".into(),
                bronze,
                parsed,
                quarantined: 1,
                headers: 0,
            }],
        }
    }

    #[test]
    fn figures_are_carried_by_what_was_added_and_removed() {
        let base = figures(10, &[("cad", 500), ("usd", 300)], 12, 11);
        // A replaced partition: its old rows out (all of usd), new rows in.
        let removed = figures(4, &[("cad", 100), ("usd", 300)], 0, 0);
        let added = figures(6, &[("cad", 250), ("eur", 40)], 7, 6);
        let carried = base.carried(&added, &removed);
        let mut expect = figures(12, &[("cad", 650), ("eur", 40)], 19, 17);
        // The quarantined counts add up too: 1 + 1 - 1.
        expect.sources[0].quarantined = 1;
        assert_eq!(carried, expect);
        // Nothing changed: the same figures.
        let none = ConservationTotals::default();
        assert_eq!(base.carried(&none, &none), base);
        // A source first seen since the last publish is added to the list.
        let mut new_source = ConservationTotals::default();
        new_source.sources.push(SourceBalance {
            source: "orders".into(),
            bronze: 3,
            parsed: 3,
            ..SourceBalance::default()
        });
        let with = base.carried(&new_source, &none);
        assert_eq!(with.sources.len(), 2);
        assert_eq!(with.sources[1].bronze, 3);
        // Figures round-trip through a publish record's evidence.
        let r = conservation(&base.silver, &base.gold, &base.sources);
        let read: ConservationTotals = serde_json::from_value(r.evidence).unwrap();
        assert_eq!(read, base);
    }

    #[test]
    fn carried_figures_that_differ_from_a_whole_read_block() {
        let whole = figures(10, &[("cad", 500)], 11, 10);
        let pass = conservation(&whole.silver, &whole.gold, &whole.sources);
        assert_eq!(pass.verdict, Verdict::Pass);
        let same = check_carried(pass.clone(), &whole, Some((4, &whole)));
        assert_eq!(same, pass);
        let off = figures(10, &[("cad", 501)], 11, 10);
        let r = check_carried(pass.clone(), &whole, Some((4, &off)));
        assert_eq!(r.verdict, Verdict::Block);
        assert_eq!(
            r.reason,
            "figures carried from publish 4 by the files changed since differ from a whole read"
        );
        assert_eq!(r.evidence["carried"]["silver"]["net_minor"]["cad"], 501);
        assert_eq!(check_carried(pass.clone(), &whole, None), pass);
    }

    #[test]
    fn fx_coverage_blocks_on_a_missing_rate_and_names_the_oldest_used() {
        let ok = fx_coverage(120, 0, &[], Some(2));
        assert_eq!(ok.verdict, Verdict::Pass);
        assert_eq!(
            ok.reason,
            "every USD event has a rate; the oldest used is 2 days old"
        );
        assert_eq!(fx_coverage(0, 0, &[], None).reason, "no USD events");
        let r = fx_coverage(120, 4, &["evt_1 on 2026-08-01".to_string()], Some(0));
        assert_eq!(r.verdict, Verdict::Block);
        assert_eq!(
            r.reason,
            "4 of 120 USD events have no rate on or before their day (evt_1 on 2026-08-01, …)"
        );
    }

    #[test]
    fn fx_figures_are_carried_and_the_oldest_rate_goes_with_its_events() {
        let fx = |usd, without, gaps: &[(i64, i64)]| FxFigures {
            usd_events: usd,
            without_rate: without,
            by_gap_days: gaps.iter().copied().collect(),
        };
        let base = fx(10, 0, &[(0, 6), (1, 3), (3, 1)]);
        assert_eq!(base.oldest_days(), Some(3));
        // A partition rewritten: its old rows (with the 3-day-old rate) go, new rows come.
        let removed = fx(4, 0, &[(0, 3), (3, 1)]);
        let added = fx(5, 1, &[(0, 4)]);
        let carried = base.carried(&added, &removed).expect("adds up");
        assert_eq!(carried, fx(11, 1, &[(0, 7), (1, 3)]));
        assert_eq!(carried.oldest_days(), Some(1));
        assert_eq!(FxFigures::default().oldest_days(), None);
        // More removed than was there: the file lists do not add up.
        assert_eq!(
            base.carried(&FxFigures::default(), &fx(1, 0, &[(2, 1)])),
            None
        );
        assert_eq!(base.carried(&FxFigures::default(), &fx(11, 0, &[])), None);
        // What the evidence holds reads back as the same figures.
        let evidence = fx_coverage(11, 1, &[], carried.oldest_days());
        let mut evidence = evidence.evidence;
        evidence["by_gap_days"] = json!(carried.by_gap_days);
        let read: FxFigures = serde_json::from_value(evidence).expect("figures");
        assert_eq!(read, carried);
    }

    #[test]
    fn usd_is_found_in_any_case_as_sql_lower_finds_it() {
        for c in ["usd", "USD", "Usd", "uSD"] {
            assert!(is_usd(c), "{c}");
        }
        for c in ["us", "usdx", "cad", "", "u\u{17f}d", "\u{fc}sd"] {
            assert!(!is_usd(c), "{c}");
            assert_eq!(is_usd(c), c.to_lowercase() == "usd", "{c}");
        }
    }

    #[test]
    fn money_is_signed_with_cents() {
        assert_eq!(money(-29801), "-298.01");
        assert_eq!(money(123_456_789), "+1,234,567.89");
        assert_eq!(money(0), "+0.00");
    }
}
