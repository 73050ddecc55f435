//! The finish: gold, from silver, on the `audit` branch (the story's finishing pan).
//!
//! Four tables, all computed in Rust from silver read at one catalog version, and committed in
//! ONE catalog commit (their own, or a run's with the boil's silver):
//!
//! * [`FCT_PAYMENTS`]: every money movement of `silver.payments`, signed (refunds negative), with
//!   its `processor_date` (the UTC day the processor booked it: settlements use it) and its
//!   `order_date` (the business-time-zone day the customer ordered, from `silver.orders`; null
//!   while CDC lags or when the order was deleted), and its CAD value. Partitioned by
//!   `processor_date`; a run replaces the dates it touched.
//! * [`MART_DAILY_CASH`]: per processor date and currency, captured, refunded and net in minor
//!   units and in CAD minor units (the sum of the events' rounded CAD). The processor dates
//!   `gold.fct_payments` replaces are recomputed; the table is unpartitioned (two rows a day at
//!   any scale) and written back whole, one file, with the other dates' rows as they were.
//! * [`MART_ORDER_REVENUE`]: per order date and ship region, paid orders, gross, refunds and net
//!   in CAD minor units, every event converted at the ORDER date's rate (captures and refunds
//!   alike, so a full refund nets its order to exactly zero). Incremental: only the order dates
//!   new silver data touches are recomputed, see "Incremental" below; unpartitioned (a row per
//!   ship region a day, at any scale) and written back whole, one file.
//! * [`FULFILMENT_QUEUE`]: orders paid, not shipped, not cancelled, not deleted, with how long
//!   each has waited since it was paid (its `updated_at`: the paid change) as of the run's
//!   `through`. Rewritten whole (it is small: the orders waiting), from the last queue and the
//!   orders that changed.
//!
//! Why the marts are not partitioned by day: their size follows the calendar, not the data (a
//! season is 110 rows of cash and about 1,400 of revenue at every scale), so a day's partition
//! was a file of two rows or a few dozen, and a late-season run, whose refunds reach back a
//! month, read and wrote one such file per day touched, and the reconciliation audit read one
//! per day of the season. A mart made partitioned by an earlier version keeps its spec and has
//! its touched days' partitions replaced ([`lake::Replace::Partitions`]), as before.
//!
//! ## FX and rounding
//! USD converts at the latest `silver.fx_rates` USD→CAD rate on or before the day (weekends and
//! holidays use the last business day's rate); `fx_rate_date` says which. DataFusion has no ASOF
//! JOIN, so the join is done in Rust on the sorted rates ([`Rates::on_or_before`], a binary
//! search: the rates are validity ranges `[rate_date, next rate_date)`). Money never touches a
//! float: a CAD amount is `round_half_away(amount_minor × rate_micros / 10⁶)` in `i128`
//! ([`to_cad_minor`]), the story's `round(amount / 100.0 * rate, 2)` per event, and the same
//! rule sugarbush's truth uses for `net_cad_minor_by_event`.
//!
//! ## Business time zone
//! `order_date` is the day in [`FinishOptions::business_time_zone`] (default `America/Halifax`,
//! the settings' default), through the IANA database arrow already links (chrono-tz), so no new
//! dependency. The season (August–September 2026) is all daylight time, UTC−3, which is exactly
//! the fixed offset sugarbush's generator uses (`HALIFAX_OFFSET`), so both agree on every day.
//!
//! ## Incremental by snapshot id
//! Every gold snapshot records, under `sugarshack.watermark.silver.<table>`
//! ([`lake::watermark_key`]), the `silver.<table>` snapshot it consumed. A run walks gold on
//! from those watermarks, reading what silver added since (its appends, with
//! `Table::read_incremental`) and the partitions that touches, never all of silver: the new
//! payment events' processor dates, the processor dates of events whose order moved (a late
//! order, a delete, a new region — not a status change), and the days whose USD rate changed
//! (a new or corrected rate in `silver.fx_rates`, compared at the old and the new snapshot).
//! An order date a new event falls on is walked on from its old rows; an order date an event
//! moved into or out of, or whose rate changed, is recomputed from all its events. Those dates
//! are rebuilt however old: no fixed look-back window. The steps, and what each reads, are in
//! the `delta` module's docs; [`FinishReport::rows_read`] says what a run read. A replay, a
//! missing or unreadable watermark, gold tables of different finishes, or a silver table
//! rebuilt in between (not append-only) rebuilds every date from all of silver.

mod delta;
mod finish;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::bronze;
use crate::error::{Result, ShackError};
use crate::tap::thousands;

pub use finish::{StagedFinish, finish, stage_finish};

/// The namespace of the gold tables.
pub const NAMESPACE: &str = "gold";
/// Every money movement, signed, with both dates and its CAD value.
pub const FCT_PAYMENTS: &str = "gold.fct_payments";
/// Cash per processor date and currency: what finance reconciles with the settlements.
pub const MART_DAILY_CASH: &str = "gold.mart_daily_cash";
/// Revenue per order date and region: what product and marketing use.
pub const MART_ORDER_REVENUE: &str = "gold.mart_order_revenue";
/// Orders paid and waiting to ship.
pub const FULFILMENT_QUEUE: &str = "gold.fulfilment_queue";

/// Every gold table, in the order a finish stages them.
pub const TABLES: [&str; 4] = [
    FCT_PAYMENTS,
    MART_DAILY_CASH,
    MART_ORDER_REVENUE,
    FULFILMENT_QUEUE,
];

/// The silver tables each gold table consumes (their snapshot ids are its watermarks).
pub fn inputs(table: &str) -> Vec<&'static str> {
    use crate::silver::tables::{FX_RATES, ORDER_CHANGES, ORDERS, PAYMENTS};
    match table {
        FCT_PAYMENTS | MART_DAILY_CASH => vec![PAYMENTS, ORDERS, FX_RATES],
        MART_ORDER_REVENUE => vec![PAYMENTS, ORDERS, ORDER_CHANGES, FX_RATES],
        FULFILMENT_QUEUE => vec![ORDERS],
        _ => Vec::new(),
    }
}

/// The summary key under which a gold table records the `silver.<table>` snapshot it consumed.
pub fn watermark_key(silver_table: &str) -> String {
    lake::TableName::parse(silver_table)
        .map(|t| lake::watermark_key(&t))
        .unwrap_or_else(|_| format!("{}{silver_table}", lake::WATERMARK_PREFIX))
}

/// Snapshot summary keys a finish writes (besides the watermarks).
pub mod props {
    /// The finish run's id (a UUID v7).
    pub const FINISH_ID: &str = "sugarshack.finish.id";
    /// `incremental` or `replay`.
    pub const MODE: &str = "sugarshack.finish.mode";
    /// The run's through instant (RFC 3339).
    pub const THROUGH: &str = "sugarshack.finish.through";
    /// On `gold.fct_payments`: how many of its events have no (live) order.
    pub const EVENTS_WITHOUT_ORDER: &str = "sugarshack.finish.events-without-order";
    /// On `gold.fct_payments`: how many of its USD events have no rate.
    pub const USD_EVENTS_WITHOUT_RATE: &str = "sugarshack.finish.usd-events-without-rate";
}

/// How a finish runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishOptions {
    /// The branch read in silver and written in gold.
    pub branch: String,
    /// The run's through instant: what the build is as of (the fulfilment queue's waits are
    /// measured to it). Passed in, never the wall clock.
    pub through: DateTime<Utc>,
    /// Rebuild every gold table whole (as new snapshots; history stays).
    pub replay: bool,
    /// The IANA zone whose days are order days (the settings' `business_time_zone`).
    pub business_time_zone: String,
}

impl FinishOptions {
    /// An incremental finish on `audit` as of `through`, in the default business time zone.
    pub fn new(through: DateTime<Utc>) -> Self {
        FinishOptions {
            branch: bronze::AUDIT_BRANCH.to_string(),
            through,
            replay: false,
            business_time_zone: crate::config::Settings::default().business_time_zone,
        }
    }

    /// As [`FinishOptions::new`], in the business time zone of `settings`.
    pub fn with_settings(through: DateTime<Utc>, settings: &crate::config::Settings) -> Self {
        FinishOptions {
            business_time_zone: settings.business_time_zone.clone(),
            ..FinishOptions::new(through)
        }
    }
}

/// A gold table this run committed a snapshot to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GoldTableReport {
    pub table: String,
    pub snapshot_id: i64,
    /// `append` or `overwrite`, as the snapshot records it.
    pub operation: String,
    /// Rows this run wrote (the whole table, or the rebuilt dates' rows).
    pub rows: u64,
    /// Rows in the table after this run.
    pub total_rows: Option<u64>,
    /// Written whole (every run for `gold.fulfilment_queue`; every table on a rebuild).
    pub rewritten_whole: bool,
}

/// What a finish did, in the story's shape ([`FinishReport::render`]) or as JSON (serde).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FinishReport {
    pub finish_id: String,
    pub branch: String,
    pub through: DateTime<Utc>,
    /// `incremental` or `replay`.
    pub mode: String,
    /// Why a run that was not asked to replay rebuilt every order date.
    pub rebuilt_because: Option<String>,
    /// Gold tables this run created.
    pub created_tables: Vec<String>,
    /// The `audit` snapshot of each silver table consumed (the new watermarks).
    pub silver: BTreeMap<String, i64>,
    /// Order dates of `gold.mart_order_revenue` rebuilt (every date on a replay).
    pub dates_rebuilt: Vec<NaiveDate>,
    /// How many order dates each input touched (`payments`: a new event's; `orders`: an
    /// event moved into or out of it; `fx_rates`: its rate changed; a date two inputs touched
    /// counts in both).
    pub touched_by: BTreeMap<String, u64>,
    /// USD events with no rate on or before their day (the FX-coverage audit's concern).
    pub usd_events_without_rate: u64,
    /// Payment events whose order silver does not hold (CDC lag) or holds deleted.
    pub events_without_order: u64,
    /// Rows this run read, by table and why (`silver.payments (new)`, `gold.fct_payments
    /// (looked up)`, …): what an incremental run's cost follows.
    pub rows_read: BTreeMap<String, u64>,
    pub tables: Vec<GoldTableReport>,
    /// The catalog version that committed this run.
    pub catalog_version: Option<u64>,
}

impl FinishReport {
    /// Rows of a gold table this run wrote.
    pub fn rows(&self, table: &str) -> Option<u64> {
        self.tables
            .iter()
            .find(|t| t.table == table)
            .map(|t| t.rows)
    }

    /// The story's lines:
    ///
    /// ```text
    ///   finished 4 models (incremental) as of 2026-08-17 12:00 UTC
    ///   rebuilt  3 order dates: 2026-08-09, 2026-08-16, 2026-08-17
    ///   wrote    gold.fct_payments        15,224 rows (rewritten whole)
    /// ```
    pub fn render(&self) -> String {
        let mut out = format!(
            "  finished {} models ({}) as of {}\n",
            self.tables.len(),
            self.mode,
            self.through.format("%Y-%m-%d %H:%M UTC")
        );
        if let Some(why) = &self.rebuilt_because {
            out.push_str(&format!("  rebuilt  {why}\n"));
        }
        let dates = if self.dates_rebuilt.len() > 6 {
            format!(
                "{} … {}",
                self.dates_rebuilt[0],
                self.dates_rebuilt[self.dates_rebuilt.len() - 1]
            )
        } else {
            self.dates_rebuilt
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "  rebuilt  {} order dates{}{dates}\n",
            self.dates_rebuilt.len(),
            if dates.is_empty() { "" } else { ": " }
        ));
        if self.usd_events_without_rate > 0 {
            out.push_str(&format!(
                "  warn     {} USD events have no rate on or before their day\n",
                thousands(self.usd_events_without_rate)
            ));
        }
        if self.events_without_order > 0 {
            out.push_str(&format!(
                "  note     {} payment events have no (live) order yet: no order date\n",
                thousands(self.events_without_order)
            ));
        }
        let tw = self.tables.iter().map(|t| t.table.len()).max().unwrap_or(0);
        let rw = self
            .tables
            .iter()
            .map(|t| thousands(t.rows).len())
            .max()
            .unwrap_or(1);
        for t in &self.tables {
            let total = match t.total_rows {
                Some(n) if !t.rewritten_whole => format!("  {} in all", thousands(n)),
                _ => String::new(),
            };
            let whole = if t.rewritten_whole {
                " (rewritten whole)"
            } else {
                ""
            };
            out.push_str(&format!(
                "  wrote    {:<tw$}  {:>rw$} rows{total}{whole}\n",
                t.table,
                thousands(t.rows)
            ));
        }
        out
    }
}

// ---- the pure core -------------------------------------------------------------------------

const DAY_US: i64 = 86_400_000_000;

/// The UTC day (days since 1970-01-01) of an instant in microseconds.
pub fn utc_day(us: i64) -> i32 {
    us.div_euclid(DAY_US) as i32
}

/// Days since 1970-01-01 of a date.
pub fn epoch_days(d: NaiveDate) -> i32 {
    d.signed_duration_since(DateTime::UNIX_EPOCH.date_naive())
        .num_days() as i32
}

/// The date `days` after 1970-01-01.
pub fn date_of(days: i32) -> NaiveDate {
    DateTime::UNIX_EPOCH.date_naive() + chrono::Duration::days(i64::from(days))
}

/// The day (days since 1970-01-01) of an instant in `tz`.
pub fn local_day<Z: TimeZone>(tz: &Z, us: i64) -> i32 {
    let utc = DateTime::from_timestamp_micros(us).unwrap_or(DateTime::UNIX_EPOCH);
    epoch_days(utc.with_timezone(tz).date_naive())
}

/// `amount_minor × rate_micros / 10⁶` rounded half away from zero, exactly (`i128`): the
/// story's `round(amount / 100.0 * rate, 2)` in cents, and sugarbush's rule.
pub fn to_cad_minor(amount_minor: i64, rate_micros: i64) -> i64 {
    let p = i128::from(amount_minor) * i128::from(rate_micros);
    let d = 1_000_000i128;
    let q = if p >= 0 {
        (p + d / 2) / d
    } else {
        (p - d / 2) / d
    };
    q as i64
}

/// USD→CAD rates by rate date: validity ranges `[rate_date, next rate_date)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// (rate date, rate micros), sorted by date, one per date.
    pub by_date: Vec<(i32, i64)>,
}

impl Rates {
    pub fn new(mut rates: Vec<(i32, i64)>) -> Rates {
        rates.sort();
        rates.dedup_by_key(|r| r.0);
        Rates { by_date: rates }
    }

    /// The latest rate on or before `day`: (rate date, rate micros).
    pub fn on_or_before(&self, day: i32) -> Option<(i32, i64)> {
        let n = self.by_date.partition_point(|(d, _)| *d <= day);
        n.checked_sub(1).map(|i| self.by_date[i])
    }
}

/// The rate a currency converts at on `day`: CAD at 1 (dated `day`), USD at the latest rate on
/// or before it; `None` when USD has none.
pub fn rate_for(rates: &Rates, currency: &str, day: i32) -> Option<(i32, i64)> {
    if currency == "usd" {
        rates.on_or_before(day)
    } else {
        Some((day, 1_000_000))
    }
}

/// A row of `silver.payments`, as gold reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    pub event_id: String,
    pub event_type: String,
    pub api_version: String,
    pub charge_id: String,
    pub refund_id: Option<String>,
    pub order_id: String,
    /// Positive, as silver holds it.
    pub amount_minor: i64,
    pub currency: String,
    pub created_at_us: i64,
    pub landing_file: String,
    pub line: i64,
    pub bronze_snapshot_id: i64,
    pub arrived_us: i64,
}

/// A row of `silver.orders`, as gold reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    pub order_id: String,
    pub customer_id: String,
    pub status: String,
    pub currency: String,
    pub total_minor: i64,
    pub ship_region: String,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub is_deleted: bool,
}

/// A row of `gold.fct_payments`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    pub payment: Payment,
    /// Captures positive, refunds negative.
    pub signed_minor: i64,
    pub processor_date: i32,
    /// The live order's day in the business time zone; `None` for no (live) order.
    pub order_date: Option<i32>,
    pub ship_region: Option<String>,
    pub fx_rate_date: Option<i32>,
    pub fx_rate_micros: Option<i64>,
    pub amount_cad_minor: Option<i64>,
}

impl Fact {
    pub fn is_capture(&self) -> bool {
        self.payment.event_type == "capture"
    }
}

/// Where a live order's day and region come from: order id → (order date, ship region).
pub fn order_days<Z: TimeZone>(orders: &[Order], tz: &Z) -> HashMap<String, (i32, String)> {
    orders
        .iter()
        .filter(|o| !o.is_deleted)
        .map(|o| {
            (
                o.order_id.clone(),
                (local_day(tz, o.created_at_us), o.ship_region.clone()),
            )
        })
        .collect()
}

/// `gold.fct_payments`, sorted by event id.
pub fn facts(
    payments: Vec<Payment>,
    orders: &HashMap<String, (i32, String)>,
    rates: &Rates,
) -> Vec<Fact> {
    let mut out: Vec<Fact> = payments
        .into_iter()
        .map(|p| {
            let signed_minor = if p.event_type == "capture" {
                p.amount_minor
            } else {
                -p.amount_minor
            };
            let processor_date = utc_day(p.created_at_us);
            let order = orders.get(&p.order_id);
            let rate = rate_for(rates, &p.currency, processor_date);
            Fact {
                signed_minor,
                processor_date,
                order_date: order.map(|o| o.0),
                ship_region: order.map(|o| o.1.clone()),
                fx_rate_date: rate.map(|r| r.0),
                fx_rate_micros: rate.map(|r| r.1),
                amount_cad_minor: rate.map(|r| to_cad_minor(signed_minor, r.1)),
                payment: p,
            }
        })
        .collect();
    out.sort_by(|a, b| a.payment.event_id.cmp(&b.payment.event_id));
    out
}

/// A row of `gold.mart_daily_cash`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CashRow {
    pub processor_date: i32,
    pub currency: String,
    pub captures: i64,
    pub refunds: i64,
    pub captured_minor: i64,
    /// Positive.
    pub refunded_minor: i64,
    pub net_minor: i64,
    /// The rate used (USD; CAD rows carry the day itself and 1.000000).
    pub fx_rate_date: Option<i32>,
    pub fx_rate_micros: Option<i64>,
    /// Sums of the events' rounded CAD; `None` when an event has no rate.
    pub captured_cad_minor: Option<i64>,
    pub refunded_cad_minor: Option<i64>,
    pub net_cad_minor: Option<i64>,
}

/// `gold.mart_daily_cash`, sorted by processor date and currency.
pub fn daily_cash(facts: &[Fact]) -> Vec<CashRow> {
    let mut out: BTreeMap<(i32, &str), CashRow> = BTreeMap::new();
    for f in facts {
        let r = out
            .entry((f.processor_date, f.payment.currency.as_str()))
            .or_insert_with(|| CashRow {
                processor_date: f.processor_date,
                currency: f.payment.currency.clone(),
                fx_rate_date: f.fx_rate_date,
                fx_rate_micros: f.fx_rate_micros,
                captured_cad_minor: Some(0),
                refunded_cad_minor: Some(0),
                net_cad_minor: Some(0),
                ..CashRow::default()
            });
        let add = |acc: &mut Option<i64>, v: Option<i64>| {
            *acc = acc.zip(v).map(|(a, v)| a + v);
        };
        if f.is_capture() {
            r.captures += 1;
            r.captured_minor += f.signed_minor;
            add(&mut r.captured_cad_minor, f.amount_cad_minor);
        } else {
            r.refunds += 1;
            r.refunded_minor -= f.signed_minor;
            add(&mut r.refunded_cad_minor, f.amount_cad_minor.map(|v| -v));
        }
        r.net_minor += f.signed_minor;
        add(&mut r.net_cad_minor, f.amount_cad_minor);
    }
    out.into_values().collect()
}

/// A row of `gold.mart_order_revenue`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevenueRow {
    pub order_date: i32,
    pub ship_region: String,
    /// Distinct orders with a capture.
    pub paid_orders: i64,
    pub gross_cad_minor: i64,
    /// Positive.
    pub refunds_cad_minor: i64,
    pub net_cad_minor: i64,
    /// The USD rate of the order date (latest on or before it).
    pub fx_rate_date: Option<i32>,
    pub fx_rate_micros: Option<i64>,
}

/// `gold.mart_order_revenue` for the order dates in `dates` (every date when `None`), sorted by
/// order date and region. Every event converts at its ORDER date's rate. USD events of a date
/// without a rate are left out (counted by [`FinishReport::usd_events_without_rate`]).
pub fn order_revenue(
    facts: &[Fact],
    rates: &Rates,
    dates: Option<&BTreeSet<i32>>,
) -> Vec<RevenueRow> {
    /// A group's row and the orders with a capture in it (only counted: a hash set, which
    /// costs a hash per capture where an ordered set compared order ids a dozen times).
    type Group<'a> = (RevenueRow, HashSet<&'a str>);
    let mut out: BTreeMap<(i32, &str), Group> = BTreeMap::new();
    for f in facts {
        let (Some(day), Some(region)) = (f.order_date, f.ship_region.as_deref()) else {
            continue;
        };
        if dates.is_some_and(|d| !d.contains(&day)) {
            continue;
        }
        let usd = rates.on_or_before(day);
        let (r, paid) = out.entry((day, region)).or_insert_with(|| {
            (
                RevenueRow {
                    order_date: day,
                    ship_region: region.to_string(),
                    fx_rate_date: usd.map(|u| u.0),
                    fx_rate_micros: usd.map(|u| u.1),
                    ..RevenueRow::default()
                },
                HashSet::new(),
            )
        });
        let Some((_, rate)) = rate_for(rates, &f.payment.currency, day) else {
            continue;
        };
        let cad = to_cad_minor(f.signed_minor, rate);
        if f.is_capture() {
            paid.insert(f.payment.order_id.as_str());
            r.gross_cad_minor += cad;
        } else {
            r.refunds_cad_minor -= cad;
        }
        r.net_cad_minor += cad;
    }
    out.into_values()
        .map(|(mut r, paid)| {
            r.paid_orders = paid.len() as i64;
            r
        })
        .collect()
}

/// A row of `gold.fulfilment_queue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRow {
    pub order: Order,
    pub order_date: i32,
    /// When it was paid: the `updated_at` of its paid change (its current row).
    pub paid_at_us: i64,
    /// `through − paid_at`, in whole seconds (never negative).
    pub waited_seconds: i64,
    /// Paid more than [`STUCK_HOURS`] before `through` (to the microsecond).
    pub over_72h: bool,
    pub as_of_us: i64,
}

/// Hours after which a paid order counts as stuck.
pub const STUCK_HOURS: i64 = 72;

/// `gold.fulfilment_queue`: live orders whose status is `paid` (not shipped, not cancelled, not
/// deleted), sorted by how long they waited (longest first), then order id.
pub fn fulfilment_queue<Z: TimeZone>(orders: &[Order], through_us: i64, tz: &Z) -> Vec<QueueRow> {
    let mut out: Vec<QueueRow> = orders
        .iter()
        .filter(|o| !o.is_deleted && o.status == "paid")
        .map(|o| QueueRow {
            order: o.clone(),
            order_date: local_day(tz, o.created_at_us),
            paid_at_us: o.updated_at_us,
            waited_seconds: (through_us - o.updated_at_us).max(0) / 1_000_000,
            over_72h: through_us - o.updated_at_us > STUCK_HOURS * 3_600_000_000,
            as_of_us: through_us,
        })
        .collect();
    out.sort_by(|a, b| {
        b.waited_seconds
            .cmp(&a.waited_seconds)
            .then_with(|| a.order.order_id.cmp(&b.order.order_id))
    });
    out
}

// ---- Arrow batches -------------------------------------------------------------------------

use crate::cols::Cols;

/// `gold.fct_payments`.
pub fn fct_payments_batch(rows: &[Fact]) -> Result<RecordBatch> {
    let p = || rows.iter().map(|f| &f.payment);
    Cols::new()
        .str("event_id", p().map(|p| p.event_id.as_str()))
        .str("event_type", p().map(|p| p.event_type.as_str()))
        .str("charge_id", p().map(|p| p.charge_id.as_str()))
        .opt_str("refund_id", p().map(|p| p.refund_id.as_deref()))
        .str("order_id", p().map(|p| p.order_id.as_str()))
        .str("currency", p().map(|p| p.currency.as_str()))
        .i64("amount_minor", rows.iter().map(|f| f.signed_minor))
        .ts("created_at", p().map(|p| p.created_at_us))
        .date("processor_date", rows.iter().map(|f| f.processor_date))
        .opt_date("order_date", rows.iter().map(|f| f.order_date))
        .opt_str("ship_region", rows.iter().map(|f| f.ship_region.as_deref()))
        .opt_date("fx_rate_date", rows.iter().map(|f| f.fx_rate_date))
        .opt_i64("fx_rate_micros", rows.iter().map(|f| f.fx_rate_micros))
        .opt_i64("amount_cad_minor", rows.iter().map(|f| f.amount_cad_minor))
        .str("api_version", p().map(|p| p.api_version.as_str()))
        .str("_landing_file", p().map(|p| p.landing_file.as_str()))
        .i64("_line", p().map(|p| p.line))
        .i64("_bronze_snapshot_id", p().map(|p| p.bronze_snapshot_id))
        .ts("_arrived_at", p().map(|p| p.arrived_us))
        .finish(FCT_PAYMENTS)
}

/// `gold.mart_daily_cash`.
pub fn daily_cash_batch(rows: &[CashRow]) -> Result<RecordBatch> {
    let r = || rows.iter();
    Cols::new()
        .date("processor_date", r().map(|r| r.processor_date))
        .str("currency", r().map(|r| r.currency.as_str()))
        .i64("captures", r().map(|r| r.captures))
        .i64("refunds", r().map(|r| r.refunds))
        .i64("captured_minor", r().map(|r| r.captured_minor))
        .i64("refunded_minor", r().map(|r| r.refunded_minor))
        .i64("net_minor", r().map(|r| r.net_minor))
        .opt_date("fx_rate_date", r().map(|r| r.fx_rate_date))
        .opt_i64("fx_rate_micros", r().map(|r| r.fx_rate_micros))
        .opt_i64("captured_cad_minor", r().map(|r| r.captured_cad_minor))
        .opt_i64("refunded_cad_minor", r().map(|r| r.refunded_cad_minor))
        .opt_i64("net_cad_minor", r().map(|r| r.net_cad_minor))
        .finish(MART_DAILY_CASH)
}

/// `gold.mart_order_revenue`.
pub fn order_revenue_batch(rows: &[RevenueRow]) -> Result<RecordBatch> {
    let r = || rows.iter();
    Cols::new()
        .date("order_date", r().map(|r| r.order_date))
        .str("ship_region", r().map(|r| r.ship_region.as_str()))
        .i64("paid_orders", r().map(|r| r.paid_orders))
        .i64("gross_cad_minor", r().map(|r| r.gross_cad_minor))
        .i64("refunds_cad_minor", r().map(|r| r.refunds_cad_minor))
        .i64("net_cad_minor", r().map(|r| r.net_cad_minor))
        .opt_date("fx_rate_date", r().map(|r| r.fx_rate_date))
        .opt_i64("fx_rate_micros", r().map(|r| r.fx_rate_micros))
        .finish(MART_ORDER_REVENUE)
}

/// `gold.fulfilment_queue`.
pub fn fulfilment_queue_batch(rows: &[QueueRow]) -> Result<RecordBatch> {
    let o = || rows.iter().map(|r| &r.order);
    let r = || rows.iter();
    Cols::new()
        .str("order_id", o().map(|o| o.order_id.as_str()))
        .str("customer_id", o().map(|o| o.customer_id.as_str()))
        .str("ship_region", o().map(|o| o.ship_region.as_str()))
        .str("currency", o().map(|o| o.currency.as_str()))
        .i64("total_minor", o().map(|o| o.total_minor))
        .date("order_date", r().map(|r| r.order_date))
        .ts("created_at", o().map(|o| o.created_at_us))
        .ts("paid_at", r().map(|r| r.paid_at_us))
        .ts("as_of", r().map(|r| r.as_of_us))
        .i64("waited_seconds", r().map(|r| r.waited_seconds))
        .bool("over_72h", r().map(|r| r.over_72h))
        .finish(FULFILMENT_QUEUE)
}

/// The schema of a gold table (the schema its builder gives no rows).
pub fn schema(table: &str) -> Result<SchemaRef> {
    let batch = match table {
        FCT_PAYMENTS => fct_payments_batch(&[])?,
        MART_DAILY_CASH => daily_cash_batch(&[])?,
        MART_ORDER_REVENUE => order_revenue_batch(&[])?,
        FULFILMENT_QUEUE => fulfilment_queue_batch(&[])?,
        other => {
            return Err(ShackError::BadTable {
                table: other.to_string(),
                detail: "not a gold table".into(),
            });
        }
    };
    Ok(batch.schema())
}

/// The column names of a gold table, in its schema's order (what a read of every column
/// asks for).
pub(crate) fn column_names(table: &str) -> Result<Vec<String>> {
    Ok(schema(table)?
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect())
}

/// How a gold table is partitioned (when a finish creates it): `gold.fct_payments` by
/// `processor_date` (a run replaces the dates it touched); the marts and `gold.fulfilment_queue`,
/// small and written back whole each run, not at all. A table made with another spec keeps it:
/// a `gold.fct_payments` made before it was partitioned has its touched dates' rows rewritten,
/// marts made partitioned by day have their touched days' partitions replaced.
pub fn partitioning(table: &str) -> Vec<lake::PartitionField> {
    match table {
        FCT_PAYMENTS => vec![lake::PartitionField::identity("processor_date")],
        _ => Vec::new(),
    }
}

/// The write properties of a gold table: `gold.fct_payments` is written with a bloom filter
/// on `order_id` in small row groups, as `silver.orders` is
/// ([`crate::silver::tables::properties`]), so a finish finds the events of the orders that
/// changed by reading only the row groups that may hold them.
pub fn properties(table: &str) -> BTreeMap<String, String> {
    match table {
        FCT_PAYMENTS => crate::silver::tables::bloom_properties("order_id"),
        _ => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> i32 {
        epoch_days(NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date"))
    }

    fn us(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s)
            .expect("instant")
            .timestamp_micros()
    }

    fn pay(id: &str, kind: &str, order: &str, amount: i64, currency: &str, at: &str) -> Payment {
        Payment {
            event_id: id.into(),
            event_type: kind.into(),
            api_version: "2025-11-01".into(),
            charge_id: "ch".into(),
            refund_id: (kind == "refund").then(|| "re".into()),
            order_id: order.into(),
            amount_minor: amount,
            currency: currency.into(),
            created_at_us: us(at),
            landing_file: "payments/x.jsonl".into(),
            line: 1,
            bronze_snapshot_id: 1,
            arrived_us: us(at),
        }
    }

    fn order(id: &str, at: &str, status: &str, deleted: bool) -> Order {
        Order {
            order_id: id.into(),
            customer_id: "c".into(),
            status: status.into(),
            currency: "usd".into(),
            total_minor: 10_001,
            ship_region: "NS".into(),
            created_at_us: us(at),
            updated_at_us: us(at),
            is_deleted: deleted,
        }
    }

    #[test]
    fn rounding_is_half_away_from_zero_in_integers() {
        assert_eq!(to_cad_minor(5, 100_000), 1); // 0.5 → 1
        assert_eq!(to_cad_minor(-5, 100_000), -1);
        assert_eq!(to_cad_minor(4, 100_000), 0);
        assert_eq!(to_cad_minor(10_000, 1_371_234), 13_712);
        assert_eq!(to_cad_minor(-10_000, 1_371_234), -13_712);
        // Far beyond what an f64 holds exactly.
        assert_eq!(
            to_cad_minor(9_007_199_254_740_993, 1_000_000),
            9_007_199_254_740_993
        );
    }

    #[test]
    fn weekends_use_fridays_rate_and_nothing_before_the_first() {
        // Friday 2026-08-14, Monday 2026-08-17.
        let rates = Rates::new(vec![
            (day("2026-08-17"), 1_380_000),
            (day("2026-08-14"), 1_370_000),
        ]);
        assert_eq!(
            rates.on_or_before(day("2026-08-15")),
            Some((day("2026-08-14"), 1_370_000))
        );
        assert_eq!(
            rates.on_or_before(day("2026-08-16")),
            Some((day("2026-08-14"), 1_370_000))
        );
        assert_eq!(
            rates.on_or_before(day("2026-08-17")),
            Some((day("2026-08-17"), 1_380_000))
        );
        assert_eq!(rates.on_or_before(day("2026-08-13")), None);
        assert_eq!(
            rate_for(&rates, "cad", day("2026-08-13")),
            Some((day("2026-08-13"), 1_000_000))
        );
    }

    #[test]
    fn the_order_date_is_the_halifax_day_and_the_processor_date_the_utc_day() {
        let tz = crate::config::Settings::default()
            .business_tz()
            .expect("tz");
        // 22:00 in Halifax (ADT, UTC−3) on August 31 is September 1 in UTC.
        let at = us("2026-09-01T01:00:00Z");
        assert_eq!(local_day(&tz, at), day("2026-08-31"));
        assert_eq!(utc_day(at), day("2026-09-01"));
        assert_eq!(
            local_day(&tz, us("2026-09-01T03:00:00Z")),
            day("2026-09-01")
        );
        // After daylight time ends (November 1) Halifax is UTC−4.
        assert_eq!(
            local_day(&tz, us("2026-11-10T03:30:00Z")),
            day("2026-11-09")
        );
    }

    #[test]
    fn a_full_refund_nets_its_order_to_zero_by_order_date_but_not_in_cash() {
        let tz = crate::config::Settings::default()
            .business_tz()
            .expect("tz");
        let rates = Rates::new(vec![
            (day("2026-08-07"), 1_370_001),
            (day("2026-08-10"), 1_391_117),
        ]);
        // Ordered and paid on Saturday the 8th (Friday's rate), refunded in full on the 12th.
        let orders = vec![order("o1", "2026-08-08T15:00:00Z", "cancelled", false)];
        let days = order_days(&orders, &tz);
        let f = facts(
            vec![
                pay("e1", "capture", "o1", 10_001, "usd", "2026-08-08T15:01:00Z"),
                pay("e2", "refund", "o1", 10_001, "usd", "2026-08-12T09:00:00Z"),
            ],
            &days,
            &rates,
        );
        assert_eq!(f[0].fx_rate_date, Some(day("2026-08-07")));
        assert_eq!(f[1].fx_rate_date, Some(day("2026-08-10")));
        let cash: i64 = daily_cash(&f).iter().filter_map(|r| r.net_cad_minor).sum();
        assert_ne!(cash, 0, "cash converts on the days the money moved");
        let rev = order_revenue(&f, &rates, None);
        assert_eq!(rev.len(), 1);
        assert_eq!(
            (rev[0].paid_orders, rev[0].net_cad_minor),
            (1, 0),
            "exactly zero"
        );
        assert_eq!(rev[0].gross_cad_minor, rev[0].refunds_cad_minor);
        assert_eq!(rev[0].gross_cad_minor, to_cad_minor(10_001, 1_370_001));
    }

    #[test]
    fn deleted_and_unknown_orders_have_no_order_date() {
        let tz = crate::config::Settings::default()
            .business_tz()
            .expect("tz");
        let orders = vec![order("t1", "2026-08-08T15:00:00Z", "paid", true)];
        let f = facts(
            vec![
                pay("e1", "capture", "t1", 100, "cad", "2026-08-08T15:01:00Z"),
                pay(
                    "e2",
                    "capture",
                    "nobody",
                    100,
                    "cad",
                    "2026-08-08T15:01:00Z",
                ),
            ],
            &order_days(&orders, &tz),
            &Rates::default(),
        );
        assert!(f.iter().all(|f| f.order_date.is_none()));
        assert!(order_revenue(&f, &Rates::default(), None).is_empty());
        assert_eq!(daily_cash(&f)[0].net_minor, 200);
        assert!(fulfilment_queue(&orders, us("2026-08-09T00:00:00Z"), &tz).is_empty());
    }

    #[test]
    fn the_queue_holds_paid_live_orders_with_their_wait() {
        let tz = crate::config::Settings::default()
            .business_tz()
            .expect("tz");
        let orders = vec![
            order("a", "2026-08-01T12:00:00Z", "paid", false),
            order("b", "2026-08-04T12:00:00Z", "paid", false),
            order("c", "2026-08-01T12:00:00Z", "shipped", false),
            order("d", "2026-08-01T12:00:00Z", "cancelled", false),
        ];
        let q = fulfilment_queue(&orders, us("2026-08-05T12:00:00Z"), &tz);
        let got: Vec<(&str, i64)> = q
            .iter()
            .map(|r| (r.order.order_id.as_str(), r.waited_seconds))
            .collect();
        assert_eq!(got, vec![("a", 4 * 86_400), ("b", 86_400)]);
        let b = fulfilment_queue_batch(&q).expect("batch");
        assert_eq!(b.num_rows(), 2);
    }

    #[test]
    fn every_table_has_a_schema_and_the_report_renders() {
        for t in TABLES {
            assert!(schema(t).is_ok(), "{t}");
            assert!(!inputs(t).is_empty(), "{t}");
        }
        assert_eq!(
            watermark_key("silver.payments"),
            "sugarshack.watermark.silver.payments"
        );
        let report = FinishReport {
            finish_id: "f".into(),
            branch: "audit".into(),
            through: Utc
                .with_ymd_and_hms(2026, 8, 17, 12, 0, 0)
                .single()
                .expect("instant"),
            mode: "incremental".into(),
            rebuilt_because: None,
            created_tables: Vec::new(),
            silver: BTreeMap::new(),
            dates_rebuilt: vec![date_of(day("2026-08-09")), date_of(day("2026-08-17"))],
            touched_by: BTreeMap::new(),
            usd_events_without_rate: 0,
            events_without_order: 0,
            rows_read: BTreeMap::new(),
            tables: vec![GoldTableReport {
                table: MART_ORDER_REVENUE.into(),
                snapshot_id: 1,
                operation: "overwrite".into(),
                rows: 26,
                total_rows: Some(1_000),
                rewritten_whole: false,
            }],
            catalog_version: Some(4),
        };
        assert_eq!(
            report.render(),
            "  finished 1 models (incremental) as of 2026-08-17 12:00 UTC
  rebuilt  2 order dates: 2026-08-09, 2026-08-17
  wrote    gold.mart_order_revenue  26 rows  1,000 in all
"
        );
        let json = serde_json::to_value(&report).expect("json");
        assert_eq!(json["dates_rebuilt"][0], "2026-08-09");
    }
}
