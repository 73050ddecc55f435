//! The boil: silver, from bronze, on the `audit` branch.
//!
//! Silver's four jobs (the story's reverse osmosis and evaporator):
//!
//! 1. **Parse by version, quarantine the rest** ([`parse`]). Payments are read through one
//!    registry of API versions ([`parse::PAYMENT_PARSERS`]); [`BoilOptions::parsers`] says which
//!    entries are enabled. Every bronze line becomes exactly one of: a parsed row, a duplicate
//!    delivery, a CSV header, or a row of `silver.quarantine` with a reason.
//! 2. **Deduplicate on the event's own id**: `silver.payments` holds one row per event id — the
//!    first delivery (bronze batch, then arrival, file, line) — and a run only inserts ids the
//!    table has never held. Nothing in it is ever updated.
//! 3. **Fold change logs by LSN, not arrival**: `silver.orders` holds each order's highest-LSN
//!    change; an incoming change replaces the stored row only when its LSN is higher, so a late
//!    lower-LSN change never overwrites a newer one, and deletes stay as tombstones
//!    (`is_deleted`). The upsert is lake's copy-on-write MERGE ([`lake::Merge`] by order id and
//!    creation instant, update only when the incoming `_lsn` is greater). `silver.orders` is
//!    partitioned by the day its order was created, so a merge opens and rewrites only the
//!    recent days the new changes belong to. An order's creation instant is the one it was
//!    first delivered with (silver's row, or its first change in delivery order): a change
//!    that moves it is quarantined as `created_at_changed`, in a daily run as in a full build.
//! 4. **Check each row** ([`CheckReport`]): unique and not null keys, accepted values, positive
//!    amounts (severity error: the boil fails before it commits anything), and payment → order
//!    (severity warn: CDC lags the webhooks).
//!
//! ## Incremental by snapshot id
//! Each silver table's snapshot summary records, per bronze table it consumes, the bronze
//! snapshot id it consumed through, under `sugarshack.watermark.bronze.<source>`. A boil reads
//! only what the bronze branch's ancestry added after that snapshot (`Table::read_incremental`),
//! never a time filter. Every silver table that consumes a source that moved gets a snapshot
//! (possibly adding no rows, to carry the watermark); all of them land in one catalog commit.
//! Nothing new in bronze: nothing is committed. With [`BoilOptions::replay`] (or when a
//! watermark names a bronze snapshot that is gone, or the tables disagree) every silver table is
//! rebuilt from all of bronze as a new snapshot (`Replace::All`; history stays).
//!
//! What an incremental boil reads of silver ([`BoilReport::silver_rows_read`]), each read an
//! Iceberg scan whose filter prunes data files by partition and column bounds before any is
//! opened:
//! - `silver.payments`: the event ids held on the UTC days of the new events' `created_at`
//!   (a redelivery carries its event's own instant, so a held id is on that day). The table is
//!   partitioned by that day; one made unpartitioned by an older version is kept as it is and
//!   pruned by its files' `created_at` bounds. Its cost follows the new events' days.
//! - `silver.orders`: `order_id, _lsn, created_at` of the orders the new changes and payments
//!   name, looked up by id (`Table::lookup`): first on the days the changed orders were created
//!   (the partition, and part of the merge key), then the ids those days did not answer — a
//!   refund's order may be weeks old, a payment's order CDC has not delivered yet is nowhere,
//!   an order whose `created_at` moved is on another day — on every other day. Order ids are
//!   random, so neither partitions nor column bounds can find them, and a bounded guess would
//!   make the payment → order check and the moved-`created_at` quarantine wrong: `silver.orders` is
//!   written with a bloom filter on `order_id` in row groups of 512 rows
//!   ([`tables::ORDERS_ROW_GROUP_ROWS`]), and only the row groups whose filter may hold an
//!   asked id are read. The second lookup reads about one row group per order it finds (a
//!   default-scale day's file holds two), plus every file's footer and filters; what it reads
//!   follows the ids asked and the days they name, not the table's history.
//! - `silver.fx_rates`, `silver.settlements`: whole (a few rows a day).
//!
//! FX rates are kept exactly as `i64` micro-units (`rate_micros`, scaled by 10^6). A republished
//! rate date keeps both publications in `silver.fx_rate_history`; `silver.fx_rates` holds the
//! latest publication (by arrival, then file, then line; a file rewritten in place and tapped
//! again is later than its first version) with how many there were.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let catalog = lake::Catalog::open_local("catalog", "warehouse")?;
//! let options = shack::BoilOptions {
//!     // What the CLI does with SUGAR_PARSERS=2025-11-01: the story's August 17 morning.
//!     parsers: shack::silver::parse_version_list("2025-11-01"),
//!     ..shack::BoilOptions::default()
//! };
//! let report = shack::boil(&catalog, &options, &shack::NoProgress).await?;
//! print!("{}", report.render());
//! # Ok(()) }
//! ```

pub(crate) mod boil;
mod json;
pub mod parse;
pub mod tables;

use std::collections::BTreeMap;

use serde::Serialize;
use sugarbush::Source;

pub(crate) use boil::enabled_parsers;
pub use boil::{StagedBoil, boil, stage_boil};
pub use parse::{
    PAYMENT_PARSERS, Parsed, PaymentParser, Reason, known_versions, parse_version_list,
};

use crate::bronze;
use crate::tap::thousands;

/// Snapshot summary keys a boil writes.
pub mod props {
    /// The boil run's id (a UUID v7).
    pub const BOIL_ID: &str = "sugarshack.boil.id";
    /// `incremental` or `replay`.
    pub const MODE: &str = "sugarshack.boil.mode";
    /// The payment API versions that were enabled.
    pub const PARSERS: &str = "sugarshack.boil.parsers";
}

/// The summary key under which a silver table records how far it consumed `bronze.<source>`:
/// `sugarshack.watermark.bronze.<source>` (the lake-wide watermark convention).
pub fn watermark_key(source: Source) -> String {
    let name = bronze::table_name(source);
    lake::TableName::parse(&name)
        .map(|t| lake::watermark_key(&t))
        .unwrap_or_else(|_| format!("{}{name}", lake::WATERMARK_PREFIX))
}

/// The bronze sources each silver table consumes.
pub fn inputs(table: &str) -> Vec<Source> {
    match table {
        tables::PAYMENT_EVENTS | tables::PAYMENTS => vec![Source::Payments],
        tables::ORDER_CHANGES | tables::ORDERS => vec![Source::Orders],
        tables::FX_RATE_HISTORY | tables::FX_RATES => vec![Source::FxRates],
        tables::SETTLEMENTS => vec![Source::Settlements],
        tables::QUARANTINE => Source::ALL.to_vec(),
        _ => Vec::new(),
    }
}

/// How a boil runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoilOptions {
    /// The branch read in bronze and written in silver.
    pub branch: String,
    /// The payment API versions whose parsers are enabled (the CLI reads `SUGAR_PARSERS`, a
    /// comma list, with [`parse_version_list`]). Default: every entry of the registry. A
    /// version the registry does not know is refused.
    pub parsers: Vec<String>,
    /// Rebuild every silver table from all of bronze (as new snapshots; history stays).
    pub replay: bool,
}

impl Default for BoilOptions {
    fn default() -> Self {
        BoilOptions {
            branch: bronze::AUDIT_BRANCH.to_string(),
            parsers: known_versions(),
            replay: false,
        }
    }
}

/// What one bronze source gave this run, both sides counted:
/// `rows_read == parsed + duplicates + quarantined + headers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceReport {
    pub source: Source,
    /// `bronze.<source>`.
    pub table: String,
    /// The watermark this run started from (exclusive); `None`: from the beginning.
    pub after: Option<i64>,
    /// The bronze snapshot consumed through (the new watermark); `None`: bronze is empty.
    pub through: Option<i64>,
    /// Bronze lines read.
    pub rows_read: u64,
    /// Lines that became silver rows (for payments: first deliveries of ids never seen).
    pub parsed: u64,
    /// Payment deliveries of an event id already taken (this run or before).
    pub duplicates: u64,
    pub quarantined: u64,
    /// CSV header lines.
    pub headers: u64,
    /// Quarantined lines by reason.
    pub reasons: BTreeMap<String, u64>,
}

impl SourceReport {
    /// `rows_read - (parsed + duplicates + quarantined + headers)`: zero when every line is
    /// accounted for.
    pub fn unaccounted(&self) -> i64 {
        self.rows_read as i64
            - (self.parsed + self.duplicates + self.quarantined + self.headers) as i64
    }
}

/// A silver table this run committed a snapshot to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TableReport {
    pub table: String,
    pub snapshot_id: i64,
    /// `append`, `overwrite` or `delete`, as the snapshot records it.
    pub operation: String,
    /// Rows this model wrote (new rows, or the whole table on a rebuild).
    pub rows: u64,
    /// Rows the snapshot added, as its summary says: `rows` plus the rows a copy-on-write
    /// replace wrote again because they shared a data file with a replaced row.
    pub rows_added: u64,
    /// Rows the snapshot removed (replaced rows, and the rewritten ones' old copies).
    pub rows_removed: u64,
    /// Rows in the table after this run.
    pub total_rows: Option<u64>,
    /// For a merge (`silver.orders`): data files it opened, skipped unread, and rewrote.
    pub merge: Option<MergeStats>,
    /// The table was written whole (a rebuild; `silver.fx_rates` and `silver.settlements`,
    /// a few rows a day, on every run): `rows` is then the whole table.
    pub rewritten_whole: bool,
}

/// What a copy-on-write merge had to touch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeStats {
    pub files_read: usize,
    pub files_pruned_by_partition: usize,
    pub files_pruned_by_bounds: usize,
    pub files_rewritten: usize,
    pub inserted: usize,
    pub updated: usize,
    /// Matched rows left as they were (their stored LSN was not lower).
    pub unchanged: usize,
}

/// How bad a failing check is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the boil before anything is committed.
    Error,
    /// Reported; the boil goes on.
    Warn,
}

/// One row-level check and how many rows failed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// dbt-style: `unique_silver_payments_event_id`.
    pub name: String,
    pub severity: Severity,
    /// Rows checked.
    pub rows: u64,
    /// Rows that failed.
    pub failing: u64,
}

/// What a boil did, in the story's shape ([`BoilReport::render`]) or as JSON (serde).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BoilReport {
    pub boil_id: String,
    pub branch: String,
    /// `incremental` or `replay`.
    pub mode: String,
    /// Why a run that was not asked to replay rebuilt anyway.
    pub rebuilt_because: Option<String>,
    /// The payment API versions enabled.
    pub parsers: Vec<String>,
    /// Silver tables this run created.
    pub created_tables: Vec<String>,
    pub sources: Vec<SourceReport>,
    /// Every check run, failing or not.
    pub checks: Vec<CheckReport>,
    /// Snapshots committed, one per silver table written.
    pub tables: Vec<TableReport>,
    /// Bronze lines read (the incremental part, or all of bronze on a rebuild).
    pub bronze_rows_read: u64,
    /// Silver rows read back to merge against (payment ids on the new events' days, order LSNs
    /// on the changes' days and by id elsewhere, rates, settlements), after the reads' filters.
    pub silver_rows_read: u64,
    /// The catalog version that committed this run; `None` when nothing was committed.
    pub catalog_version: Option<u64>,
}

impl BoilReport {
    /// True when bronze held nothing this run had not consumed.
    pub fn nothing_new(&self) -> bool {
        self.catalog_version.is_none() && self.tables.is_empty()
    }

    /// Warnings: checks of severity warn that failed.
    pub fn warnings(&self) -> impl Iterator<Item = &CheckReport> {
        self.checks
            .iter()
            .filter(|c| c.severity == Severity::Warn && c.failing > 0)
    }

    /// The story's lines, aligned:
    ///
    /// ```text
    /// boiled   8 models, 17 tests (incremental, parsers 2025-11-01)
    ///   read     payments       284 rows    226 parsed    0 duplicate    58 quarantined    0 headers
    ///   quarantined payments: 58 unsupported_api_version
    ///   warn     relationships_silver_payments_order_id__silver_orders_order_id: 1 rows
    ///   wrote    silver.payments      +226 rows   15,224 in all
    /// ```
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.nothing_new() {
            out.push_str("  nothing new in bronze: silver is up to date\n");
            return out;
        }
        let verb = if self.mode == "replay" {
            "replayed"
        } else {
            "boiled"
        };
        out.push_str(&format!(
            "  {verb:<8} {} models, {} tests ({}, parsers {})\n",
            self.tables.len(),
            self.checks.len(),
            self.mode,
            if self.parsers.is_empty() {
                "none".to_string()
            } else {
                self.parsers.join(", ")
            }
        ));
        if let Some(why) = &self.rebuilt_because {
            out.push_str(&format!("  rebuilt  {why}\n"));
        }
        let w = |f: &dyn Fn(&SourceReport) -> u64| {
            self.sources
                .iter()
                .map(|s| thousands(f(s)).len())
                .max()
                .unwrap_or(1)
        };
        let (wr, wp, wd, wq, wh) = (
            w(&|s| s.rows_read),
            w(&|s| s.parsed),
            w(&|s| s.duplicates),
            w(&|s| s.quarantined),
            w(&|s| s.headers),
        );
        for s in &self.sources {
            out.push_str(&format!(
                "  read     {:<12} {:>wr$} rows  {:>wp$} parsed  {:>wd$} duplicate  {:>wq$} quarantined  {:>wh$} headers\n",
                s.source.as_str(),
                thousands(s.rows_read),
                thousands(s.parsed),
                thousands(s.duplicates),
                thousands(s.quarantined),
                thousands(s.headers),
            ));
        }
        for s in self.sources.iter().filter(|s| s.quarantined > 0) {
            let mut reasons: Vec<(&String, &u64)> = s.reasons.iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let parts: Vec<String> = reasons
                .iter()
                .map(|(r, n)| format!("{} {r}", thousands(**n)))
                .collect();
            out.push_str(&format!(
                "  quarantined {}: {}\n",
                s.source.as_str(),
                parts.join(", ")
            ));
        }
        for c in self.checks.iter().filter(|c| c.failing > 0) {
            let word = match c.severity {
                Severity::Warn => "warn",
                Severity::Error => "FAIL",
            };
            out.push_str(&format!(
                "  {word:<8} {}: {} rows\n",
                c.name,
                thousands(c.failing)
            ));
        }
        let tw = self.tables.iter().map(|t| t.table.len()).max().unwrap_or(0);
        let aw = self
            .tables
            .iter()
            .map(|t| thousands(t.rows).len())
            .max()
            .unwrap_or(1);
        for t in &self.tables {
            let total = t
                .total_rows
                .map(|n| format!("  {} in all", thousands(n)))
                .unwrap_or_default();
            let rewritten = t.rows_added.saturating_sub(t.rows);
            let rewritten = if t.rewritten_whole && self.mode != "replay" {
                " (rewritten whole)".to_string()
            } else if rewritten > 0 && self.mode != "replay" {
                format!(" ({} rewritten copy-on-write)", thousands(rewritten))
            } else {
                String::new()
            };
            out.push_str(&format!(
                "  wrote    {:<tw$}  +{:>aw$} rows{total}{rewritten}\n",
                t.table,
                thousands(t.rows),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_key_is_the_lake_convention() {
        assert_eq!(
            watermark_key(Source::FxRates),
            "sugarshack.watermark.bronze.fx_rates"
        );
    }

    #[test]
    fn every_table_consumes_something_and_quarantine_consumes_all() {
        for t in tables::TABLES {
            assert!(!inputs(t).is_empty(), "{t}");
        }
        assert_eq!(inputs(tables::QUARANTINE), Source::ALL.to_vec());
    }

    #[test]
    fn render_shows_counts_warnings_and_tables() {
        let report = BoilReport {
            boil_id: "b".into(),
            branch: "audit".into(),
            mode: "incremental".into(),
            rebuilt_because: None,
            parsers: vec!["2025-11-01".into()],
            created_tables: Vec::new(),
            sources: vec![SourceReport {
                source: Source::Payments,
                table: "bronze.payments".into(),
                rows_read: 284,
                parsed: 220,
                duplicates: 6,
                quarantined: 58,
                headers: 0,
                after: None,
                through: Some(7),
                reasons: BTreeMap::from([("unsupported_api_version".to_string(), 58)]),
            }],
            checks: vec![CheckReport {
                name: "relationships_silver_payments_order_id__silver_orders_order_id".into(),
                severity: Severity::Warn,
                rows: 220,
                failing: 1,
            }],
            tables: vec![TableReport {
                table: "silver.payments".into(),
                snapshot_id: 1,
                operation: "append".into(),
                rows: 220,
                rows_added: 220,
                rows_removed: 0,
                total_rows: Some(15_224),
                merge: None,
                rewritten_whole: false,
            }],
            bronze_rows_read: 284,
            silver_rows_read: 0,
            catalog_version: Some(3),
        };
        let want = "  boiled   1 models, 1 tests (incremental, parsers 2025-11-01)
  read     payments     284 rows  220 parsed  6 duplicate  58 quarantined  0 headers
  quarantined payments: 58 unsupported_api_version
  warn     relationships_silver_payments_order_id__silver_orders_order_id: 1 rows
  wrote    silver.payments  +220 rows  15,224 in all
";
        assert_eq!(report.render(), want);
        let json = serde_json::to_value(&report).expect("serialises");
        assert_eq!(json["sources"][0]["source"], "payments");
        assert_eq!(json["checks"][0]["severity"], "warn");
        assert_eq!(report.sources[0].unaccounted(), 0);
        assert_eq!(report.warnings().count(), 1);
    }
}
