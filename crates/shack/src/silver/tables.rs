//! Silver's tables: their names, their rows, and the Arrow batches those rows become. Each
//! table's schema is the schema of the batch its builder makes from no rows, so the shape
//! written and the shape created can never disagree.
//!
//! Every table carries the bronze lineage of the line it came from: `_landing_file`, `_line`,
//! `_bronze_snapshot_id` (the bronze snapshot that made the line visible) and `_arrived_at`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{
    Array, Date32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::SchemaRef;

use crate::cols::Cols;
use crate::error::{Result, ShackError};

use super::parse::{FxRate, OrderChange, PaymentEvent, Settlement};

/// The namespace of the silver tables.
pub const NAMESPACE: &str = "silver";
/// Every parsed payment delivery (duplicates flagged), append-only.
pub const PAYMENT_EVENTS: &str = "silver.payment_events";
/// One row per payment event id, first delivery wins, never updated.
pub const PAYMENTS: &str = "silver.payments";
/// Every parsed change event of the orders table, append-only.
pub const ORDER_CHANGES: &str = "silver.order_changes";
/// Each order's current state: its highest-LSN change; deletes kept as tombstones.
pub const ORDERS: &str = "silver.orders";
/// Every parsed FX publication, append-only: a corrected rate date shows both rows here.
pub const FX_RATE_HISTORY: &str = "silver.fx_rate_history";
/// One row per rate date and pair: the latest publication.
pub const FX_RATES: &str = "silver.fx_rates";
/// One row per settlement date and currency: the latest publication.
pub const SETTLEMENTS: &str = "silver.settlements";
/// Every bronze line silver could not use, with its reason, never dropped.
pub const QUARANTINE: &str = "silver.quarantine";

/// Every silver table, in the order a boil stages them.
pub const TABLES: [&str; 8] = [
    ORDER_CHANGES,
    ORDERS,
    PAYMENT_EVENTS,
    PAYMENTS,
    FX_RATE_HISTORY,
    FX_RATES,
    SETTLEMENTS,
    QUARANTINE,
];

/// Where a silver row came from in bronze. Ordered as deliveries are: bronze batch (sequence
/// number) first, then arrival, file and line (then the snapshot).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lineage {
    /// The bronze snapshot's sequence number (not stored: it orders deliveries within a run).
    pub sequence_number: i64,
    pub arrived_us: i64,
    /// Shared by every line of one landing file.
    pub file: Arc<str>,
    pub line: i64,
    pub snapshot_id: i64,
}

/// The fields in declaration order, as a derived `Ord` would compare them, except that two
/// lines sharing one name of their file (`shared_name`) skip comparing it byte by byte: a
/// full build sorts millions of lines, nearly every pair from one file (`memcmp` was the largest
/// single cost in a scale-100 build's profile, 13% of its samples, this sort among its callers).
impl Ord for Lineage {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sequence_number
            .cmp(&other.sequence_number)
            .then(self.arrived_us.cmp(&other.arrived_us))
            .then_with(|| {
                if Arc::ptr_eq(&self.file, &other.file) {
                    std::cmp::Ordering::Equal
                } else {
                    self.file.cmp(&other.file)
                }
            })
            .then(self.line.cmp(&other.line))
            .then(self.snapshot_id.cmp(&other.snapshot_id))
    }
}

impl PartialOrd for Lineage {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Lineage {
    /// The publication order of CSV rows: arrival, then file, then line (the same whichever run
    /// reads them).
    pub fn publication_key(&self) -> (i64, &str, i64) {
        (self.arrived_us, &self.file, self.line)
    }
}

/// The lineage columns every silver table ends with.
impl Cols {
    fn lineage<'a>(self, rows: impl Iterator<Item = &'a Lineage> + Clone) -> Cols {
        self.str("_landing_file", rows.clone().map(|l| &*l.file))
            .i64("_line", rows.clone().map(|l| l.line))
            .i64("_bronze_snapshot_id", rows.clone().map(|l| l.snapshot_id))
            .ts("_arrived_at", rows.map(|l| l.arrived_us))
    }
}

/// A payment delivery as `silver.payment_events` and `silver.payments` hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentRow {
    pub event: PaymentEvent,
    /// A later delivery of an event id already taken (`silver.payment_events` only).
    pub is_duplicate: bool,
    pub lineage: Lineage,
}

fn payment_cols(rows: &[&PaymentRow]) -> Cols {
    let e = || rows.iter().map(|r| &r.event);
    Cols::new()
        .str("event_id", e().map(|e| e.event_id.as_str()))
        .str("event_type", e().map(|e| e.event_type))
        .str("api_version", e().map(|e| e.api_version.as_str()))
        .str("charge_id", e().map(|e| e.charge_id.as_str()))
        .opt_str("refund_id", e().map(|e| e.refund_id.as_deref()))
        .str("order_id", e().map(|e| e.order_id.as_str()))
        .i64("amount_minor", e().map(|e| e.amount_minor))
        .str("currency", e().map(|e| e.currency))
        .ts("created_at", e().map(|e| e.created_at_us))
}

/// `silver.payment_events`.
pub fn payment_events_batch(rows: &[&PaymentRow]) -> Result<RecordBatch> {
    payment_cols(rows)
        .bool("is_duplicate", rows.iter().map(|r| r.is_duplicate))
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(PAYMENT_EVENTS)
}

/// `silver.payments`.
pub fn payments_batch(rows: &[&PaymentRow]) -> Result<RecordBatch> {
    payment_cols(rows)
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(PAYMENTS)
}

/// A change event as `silver.order_changes` and `silver.orders` hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderRow {
    pub change: OrderChange,
    pub lineage: Lineage,
}

fn order_cols(rows: &[&OrderRow]) -> Cols {
    let c = || rows.iter().map(|r| &r.change);
    Cols::new()
        .str("order_id", c().map(|c| c.order_id.as_str()))
        .str("customer_id", c().map(|c| c.customer_id.as_str()))
        .str("status", c().map(|c| c.status))
        .str("currency", c().map(|c| c.currency))
        .i64("total_minor", c().map(|c| c.total_minor))
        .str("ship_region", c().map(|c| c.ship_region.as_str()))
        .ts("created_at", c().map(|c| c.created_at_us))
        .ts("updated_at", c().map(|c| c.updated_at_us))
        .ts("committed_at", c().map(|c| c.committed_at_us))
        .bool("is_deleted", c().map(|c| c.is_deleted))
}

/// `silver.order_changes`.
pub fn order_changes_batch(rows: &[&OrderRow]) -> Result<RecordBatch> {
    let c = || rows.iter().map(|r| &r.change);
    order_cols(rows)
        .i64("lsn", c().map(|c| c.lsn))
        .str("op", c().map(|c| c.op))
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(ORDER_CHANGES)
}

/// `silver.orders`.
pub fn orders_batch(rows: &[&OrderRow]) -> Result<RecordBatch> {
    order_cols(rows)
        .i64("_lsn", rows.iter().map(|r| r.change.lsn))
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(ORDERS)
}

/// A publication of a rate (history) or the winning one (current, with how many there were).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FxRow {
    pub rate: FxRate,
    /// Publications seen for this rate date and pair (`silver.fx_rates` only).
    pub publications: i64,
    pub lineage: Lineage,
}

fn fx_cols(rows: &[&FxRow]) -> Cols {
    let r = || rows.iter().map(|r| &r.rate);
    Cols::new()
        .date("rate_date", r().map(|r| r.rate_date))
        .str("base", r().map(|r| r.base))
        .str("quote", r().map(|r| r.quote))
        .i64("rate_micros", r().map(|r| r.rate_micros))
}

/// `silver.fx_rate_history`.
pub fn fx_history_batch(rows: &[&FxRow]) -> Result<RecordBatch> {
    fx_cols(rows)
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(FX_RATE_HISTORY)
}

/// `silver.fx_rates`.
pub fn fx_rates_batch(rows: &[&FxRow]) -> Result<RecordBatch> {
    fx_cols(rows)
        .i64("publications", rows.iter().map(|r| r.publications))
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(FX_RATES)
}

/// A settlement row, the latest publication of its date and currency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementRow {
    pub settlement: Settlement,
    pub publications: i64,
    pub lineage: Lineage,
}

/// `silver.settlements`.
pub fn settlements_batch(rows: &[&SettlementRow]) -> Result<RecordBatch> {
    let s = || rows.iter().map(|r| &r.settlement);
    Cols::new()
        .date("settlement_date", s().map(|s| s.settlement_date))
        .str("currency", s().map(|s| s.currency))
        .i64("gross_minor", s().map(|s| s.gross_minor))
        .i64("refunds_minor", s().map(|s| s.refunds_minor))
        .i64("net_minor", s().map(|s| s.net_minor))
        .i64("publications", rows.iter().map(|r| r.publications))
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(SETTLEMENTS)
}

/// A bronze line silver could not use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantineRow {
    /// `orders`, `payments`, `fx_rates` or `settlements`.
    pub source: &'static str,
    pub reason: &'static str,
    pub raw: String,
    /// The exact bytes when they are not UTF-8 (as bronze keeps them).
    pub raw_bytes: Option<Vec<u8>>,
    pub lineage: Lineage,
}

/// `silver.quarantine`.
pub fn quarantine_batch(rows: &[&QuarantineRow]) -> Result<RecordBatch> {
    Cols::new()
        .str("source", rows.iter().map(|r| r.source))
        .str("reason", rows.iter().map(|r| r.reason))
        .str("_raw", rows.iter().map(|r| r.raw.as_str()))
        .bin("_raw_bytes", rows.iter().map(|r| r.raw_bytes.as_deref()))
        .lineage(rows.iter().map(|r| &r.lineage))
        .finish(QUARANTINE)
}

/// The schema of a silver table (the schema its builder gives no rows).
pub fn schema(table: &str) -> Result<SchemaRef> {
    let batch = match table {
        PAYMENT_EVENTS => payment_events_batch(&[])?,
        PAYMENTS => payments_batch(&[])?,
        ORDER_CHANGES => order_changes_batch(&[])?,
        ORDERS => orders_batch(&[])?,
        FX_RATE_HISTORY => fx_history_batch(&[])?,
        FX_RATES => fx_rates_batch(&[])?,
        SETTLEMENTS => settlements_batch(&[])?,
        QUARANTINE => quarantine_batch(&[])?,
        other => {
            return Err(ShackError::BadTable {
                table: other.to_string(),
                detail: "not a silver table".into(),
            });
        }
    };
    Ok(batch.schema())
}

/// How a silver table is partitioned (when a boil creates it: an existing table keeps the spec
/// it was made with, and is read and written in that spec). `silver.orders` by the day its
/// order was created: an order's changes come within days of its creation, so a merge of new
/// changes opens and rewrites only recent days (the partition column is part of the merge key,
/// so lake prunes by it). `silver.payments` by the day of its event's `created_at`: a
/// redelivery carries the same instant, so a boil looks for the ids it already holds in the
/// new events' days only. Lakes made before it was partitioned prune by the data files'
/// `created_at` bounds instead. The others are unpartitioned: they are only appended to or
/// rebuilt whole.
pub fn partitioning(table: &str) -> Vec<lake::PartitionField> {
    match table {
        ORDERS | PAYMENTS => vec![lake::PartitionField::day("created_at")],
        _ => Vec::new(),
    }
}

/// The most rows a row group of `silver.orders` (and `gold.fct_payments`) holds. A lookup by
/// id (see [`properties`]) decodes the key column of each row group that may hold an asked id:
/// smaller groups decode fewer rows per id, larger ones keep the footers small (a new process
/// decodes the footer of every file a lookup plans, a file per day of the season) and scans
/// fast. At 128 a default-scale day's file held seven or eight groups and a late-September run
/// spent more decoding footers than it saved in rows; 512 (two groups a day's file) made
/// fresh-process daily runs faster early and late: sixteen turns of each on lakes each layout
/// built day by day, medians, Aug 5 143.7 → 129.2 ms and Sep 24 207.7 → 180.5 ms (1,024: 127.5
/// and 188.4 ms, a late run decoding a whole day's ids for each old order a refund names).
pub const ORDERS_ROW_GROUP_ROWS: usize = 512;

/// The false-positive probability of `silver.orders`' bloom filter on `order_id`, per id
/// asked and row group. A day's lookup asks for about a thousand ids that silver does not hold
/// (payments whose order CDC has not delivered yet): at 1% each, every row group would answer
/// "maybe" to one of them. At 1e-5 about one row group in a hundred does, for about two
/// kilobytes of filter per row group of [`ORDERS_ROW_GROUP_ROWS`] rows.
pub const ORDERS_BLOOM_FPP: f64 = 0.00001;

/// The write properties of a silver table (set when a boil creates it, and on a table made
/// before they were chosen; files already written keep their layout). `silver.orders` is
/// written with a bloom filter on `order_id` in row groups of [`ORDERS_ROW_GROUP_ROWS`] rows,
/// so a boil finds the orders a day's payments and changes name by reading only the row groups
/// that may hold them: order ids are random, so neither the day partitions nor the column
/// bounds can. `silver.payments` is written the same way on `event_id`, so a boil finds an
/// event redelivered with another `created` (on another day) without reading every day.
pub fn properties(table: &str) -> BTreeMap<String, String> {
    match table {
        ORDERS => bloom_properties("order_id"),
        PAYMENTS => bloom_properties("event_id"),
        _ => BTreeMap::new(),
    }
}

/// The table properties that write `column` with a bloom filter at [`ORDERS_BLOOM_FPP`] per
/// row group of [`ORDERS_ROW_GROUP_ROWS`] rows (what a lookup by `column` reads little of).
pub fn bloom_properties(column: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            format!("{}{column}", lake::PROP_BLOOM_COLUMN),
            "true".into(),
        ),
        (
            format!("{}{column}", lake::PROP_BLOOM_FPP_COLUMN),
            ORDERS_BLOOM_FPP.to_string(),
        ),
        (
            lake::PROP_ROW_GROUP_LIMIT.to_string(),
            ORDERS_ROW_GROUP_ROWS.to_string(),
        ),
    ])
}

/// The key `silver.orders` is merged by: the order id, and its creation instant (immutable in
/// the source: every row image of an order carries the same `created_at`; a boil quarantines a
/// change that would move it).
pub const ORDERS_MERGE_KEY: [&str; 2] = ["order_id", "created_at"];

// ---- reading rows back -------------------------------------------------------------------

fn bad(table: &str, detail: String) -> ShackError {
    ShackError::BadTable {
        table: table.to_string(),
        detail,
    }
}

fn column<'a, T: 'static>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a T> {
    let col = b
        .column_by_name(name)
        .ok_or_else(|| bad(table, format!("no column {name:?}")))?;
    if col.null_count() > 0 {
        return Err(bad(table, format!("column {name:?} holds nulls")));
    }
    col.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| bad(table, format!("column {name:?} is {}", col.data_type())))
}

pub(crate) fn strs<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    column::<StringArray>(table, b, name)
}

pub(crate) fn longs<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a Int64Array> {
    column::<Int64Array>(table, b, name)
}

pub(crate) fn stamps<'a>(
    table: &str,
    b: &'a RecordBatch,
    name: &str,
) -> Result<&'a TimestampMicrosecondArray> {
    column::<TimestampMicrosecondArray>(table, b, name)
}

fn dates<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a Date32Array> {
    column::<Date32Array>(table, b, name)
}

fn lineage_of(table: &str, b: &RecordBatch) -> Result<Vec<Lineage>> {
    let file = strs(table, b, "_landing_file")?;
    let line = longs(table, b, "_line")?;
    let snap = longs(table, b, "_bronze_snapshot_id")?;
    let arrived = stamps(table, b, "_arrived_at")?;
    let mut last = None;
    Ok((0..b.num_rows())
        .map(|i| Lineage {
            sequence_number: 0,
            arrived_us: arrived.value(i),
            file: shared_name(&mut last, file.value(i)),
            line: line.value(i),
            snapshot_id: snap.value(i),
        })
        .collect())
}

/// `name` as an [`Arc<str>`], the one `last` holds when it is the same name (the lines of a
/// batch come from a few landing files, one after another): one copy of a file's name per run
/// of its lines, not one per line.
pub(crate) fn shared_name(last: &mut Option<Arc<str>>, name: &str) -> Arc<str> {
    match last {
        Some(held) if &**held == name => held.clone(),
        _ => last.insert(Arc::from(name)).clone(),
    }
}

/// Interns a currency or code read back from a table into the accepted `&'static str`.
fn known(table: &str, list: &[&'static str], s: &str) -> Result<&'static str> {
    list.iter()
        .copied()
        .find(|c| *c == s)
        .ok_or_else(|| bad(table, format!("holds {s:?}, not one of {list:?}")))
}

/// The rows of `silver.fx_rates`.
pub fn read_fx_rates(batches: &[RecordBatch]) -> Result<Vec<FxRow>> {
    let t = FX_RATES;
    let mut out = Vec::new();
    for b in batches {
        let date = dates(t, b, "rate_date")?;
        let base = strs(t, b, "base")?;
        let quote = strs(t, b, "quote")?;
        let rate = longs(t, b, "rate_micros")?;
        let pubs = longs(t, b, "publications")?;
        for (i, lineage) in lineage_of(t, b)?.into_iter().enumerate() {
            out.push(FxRow {
                rate: FxRate {
                    rate_date: date.value(i),
                    base: known(t, &super::parse::FX_CURRENCIES, base.value(i))?,
                    quote: known(t, &super::parse::FX_CURRENCIES, quote.value(i))?,
                    rate_micros: rate.value(i),
                },
                publications: pubs.value(i),
                lineage,
            });
        }
    }
    Ok(out)
}

/// The rows of `silver.settlements`.
pub fn read_settlements(batches: &[RecordBatch]) -> Result<Vec<SettlementRow>> {
    let t = SETTLEMENTS;
    let mut out = Vec::new();
    for b in batches {
        let date = dates(t, b, "settlement_date")?;
        let cur = strs(t, b, "currency")?;
        let gross = longs(t, b, "gross_minor")?;
        let refunds = longs(t, b, "refunds_minor")?;
        let net = longs(t, b, "net_minor")?;
        let pubs = longs(t, b, "publications")?;
        for (i, lineage) in lineage_of(t, b)?.into_iter().enumerate() {
            out.push(SettlementRow {
                settlement: Settlement {
                    settlement_date: date.value(i),
                    currency: known(t, &super::parse::CURRENCIES, cur.value(i))?,
                    gross_minor: gross.value(i),
                    refunds_minor: refunds.value(i),
                    net_minor: net.value(i),
                },
                publications: pubs.value(i),
                lineage,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::DataType;

    #[test]
    fn lineage_orders_by_its_fields_whether_or_not_names_are_shared() {
        let lin = |seq: i64, arrived: i64, file: Arc<str>, line: i64| Lineage {
            sequence_number: seq,
            arrived_us: arrived,
            file,
            line,
            snapshot_id: 7,
        };
        let key = |l: &Lineage| (l.sequence_number, l.arrived_us, l.file.to_string(), l.line);
        let a: Arc<str> = Arc::from("a.jsonl");
        let a_again: Arc<str> = Arc::from("a.jsonl");
        let b: Arc<str> = Arc::from("b.jsonl");
        let all = [
            lin(1, 5, a.clone(), 2),
            lin(1, 5, a_again.clone(), 1),
            lin(1, 5, b.clone(), 0),
            lin(1, 4, b.clone(), 9),
            lin(0, 9, a.clone(), 3),
            lin(1, 5, a.clone(), 1),
        ];
        for x in &all {
            for y in &all {
                assert_eq!(x.cmp(y), key(x).cmp(&key(y)), "{x:?} against {y:?}");
                assert_eq!(x == y, key(x) == key(y));
            }
        }
    }

    #[test]
    fn lines_of_one_landing_file_share_its_name() {
        let mut last = None;
        let names: Vec<Arc<str>> = ["a.jsonl", "a.jsonl", "b.jsonl", "b.jsonl", "a.jsonl"]
            .iter()
            .map(|f| shared_name(&mut last, f))
            .collect();
        assert_eq!(
            names.iter().map(|n| &**n).collect::<Vec<_>>(),
            ["a.jsonl", "a.jsonl", "b.jsonl", "b.jsonl", "a.jsonl"]
        );
        assert!(Arc::ptr_eq(&names[0], &names[1]));
        assert!(Arc::ptr_eq(&names[2], &names[3]));
        assert!(!Arc::ptr_eq(&names[1], &names[2]));
        // A file seen again after another is a new copy: only a run is shared.
        assert!(!Arc::ptr_eq(&names[0], &names[4]));
    }

    #[test]
    fn every_table_has_lineage_and_a_schema() {
        for t in TABLES {
            let s = schema(t).expect("schema");
            for c in [
                "_landing_file",
                "_line",
                "_bronze_snapshot_id",
                "_arrived_at",
            ] {
                assert!(s.field_with_name(c).is_ok(), "{t} lacks {c}");
            }
        }
        let money = schema(PAYMENTS).expect("schema");
        assert_eq!(
            money
                .field_with_name("amount_minor")
                .map(|f| f.data_type().clone())
                .ok(),
            Some(DataType::Int64)
        );
    }

    #[test]
    fn fx_rates_round_trip() {
        let row = FxRow {
            rate: FxRate {
                rate_date: 20_677,
                base: "USD",
                quote: "CAD",
                rate_micros: 1_371_234,
            },
            publications: 2,
            lineage: Lineage {
                sequence_number: 0,
                arrived_us: 5,
                file: "fx_rates/x.csv".into(),
                line: 2,
                snapshot_id: 9,
            },
        };
        let b = fx_rates_batch(&[&row]).expect("batch");
        assert_eq!(read_fx_rates(&[b]).expect("read"), vec![row]);
    }
}
