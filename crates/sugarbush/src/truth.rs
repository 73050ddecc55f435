//! The ground truth of a season, written beside `landing/` in `truth/`. The pipeline never
//! reads it; tests and `compare` weigh the pipeline against it.
//!
//! | file | one row per | what for |
//! | --- | --- | --- |
//! | `summary.json` | season | seed, scale, files per source, every fault count, volumes |
//! | `daily.csv` | UTC day × currency | true captured / refunded / net cents (= the settlements) |
//! | `fx_rates.csv` | rate date | the valid (corrected) USD→CAD rate, how often it was published |
//! | `awaiting.csv` | day, at 12:00 UTC | orders paid and not shipped: true, as a correct pipeline sees them, as the bucket brigade sees them |
//! | `orders.csv` | order | final state (highest LSN) and every lifecycle instant, so its status at any instant |
//! | `order_changes.csv` | change event | LSN, commit, receipt and landing instants, late and overtaken flags |
//! | `payment_events.csv` | distinct payment event | the parsed facts, deliveries and truncated copies |
//! | `bridge.csv` | month × as-of | the bucket brigade's month and each of its errors, from what landed by the as-of |
//! | `two_answers.csv` | month × as-of | the month's cash by processor date and its orders by order date, as of each as-of |
//!
//! Money is integer minor units (cents); rates are integer micro-units (1.371234 → 1371234).

use std::fs;
use std::io::{BufRead, BufReader};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result, SugarbushError};
use crate::landing::truth_dir;
use crate::source::Source;
use crate::time;

/// A payment currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Currency {
    Cad,
    Usd,
}

impl Currency {
    pub const ALL: [Currency; 2] = [Currency::Cad, Currency::Usd];

    /// `cad` or `usd`, as the settlements and the 2025-11-01 events write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Currency::Cad => "cad",
            Currency::Usd => "usd",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "cad" => Some(Currency::Cad),
            "usd" => Some(Currency::Usd),
            _ => None,
        }
    }
}

/// An order's status column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    Created,
    Paid,
    Shipped,
    Cancelled,
}

impl OrderStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Created => "created",
            OrderStatus::Paid => "paid",
            OrderStatus::Shipped => "shipped",
            OrderStatus::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "created" => Some(OrderStatus::Created),
            "paid" => Some(OrderStatus::Paid),
            "shipped" => Some(OrderStatus::Shipped),
            "cancelled" => Some(OrderStatus::Cancelled),
            _ => None,
        }
    }
}

/// How many of each injected fault the season holds. The same struct is in the
/// `GenerateReport` and in `truth/summary.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Landing files sent a second time, byte for byte, under a new name, later (always 7).
    pub resent_files: u64,
    /// Complete deliveries of a payment event beyond its first (same event id, same bytes).
    pub duplicate_deliveries: u64,
    /// Distinct payment events delivered more than once.
    pub events_delivered_twice: u64,
    /// Lines cut short by a crashing receiver (the event is delivered whole on the retry).
    pub truncated_lines: u64,
    /// Distinct payment events whose first delivery came an hour or more after `created`.
    pub late_webhooks: u64,
    /// Change events that arrived hours to two days late (two hours or more after commit).
    pub late_cdc_events: u64,
    /// Late change events that arrived after a newer change (higher LSN) of the same order.
    pub late_cdc_overtaken: u64,
    /// Distinct payment events in the 2026-08-01 shape.
    pub v2_events: u64,
    /// Complete payment lines in the 2026-08-01 shape (duplicate deliveries included).
    pub v2_deliveries: u64,
    /// Test orders created (each is deleted later).
    pub test_orders_created: u64,
    /// Test orders deleted (op `d`).
    pub test_orders_deleted: u64,
    /// Rates republished with a correction (same rate date, later file).
    pub republished_rates: u64,
}

/// Files, lines and bytes of one source in the landing zone (re-sent copies included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStats {
    pub source: Source,
    pub files: u64,
    pub lines: u64,
    pub bytes: u64,
}

/// One calendar month (UTC) of the season.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonthVolume {
    /// `2026-08`
    pub month: String,
    /// Real orders created (test orders excluded).
    pub orders_created: u64,
    /// Captures (charges) created in the month.
    pub captures: u64,
    pub refunds: u64,
    pub captured_cad_minor: i64,
    pub captured_usd_minor: i64,
    pub refunded_cad_minor: i64,
    pub refunded_usd_minor: i64,
    /// Gross in CAD cents, USD converted day by day at the day's rate (rounded per day).
    pub gross_cad_equivalent_minor: i64,
    /// Refunds in CAD cents, converted the same way.
    pub refunds_cad_equivalent_minor: i64,
    /// Net (gross − refunds) in CAD cents, USD converted per day: what finance computes
    /// from the settlement reports.
    pub net_cad_equivalent_minor: i64,
    /// USD share of the CAD-equivalent gross, in per mille.
    pub usd_share_permille: u64,
}

/// The size of the season.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Real orders created (test orders excluded).
    pub orders: u64,
    pub orders_paid: u64,
    pub orders_shipped: u64,
    /// Cancelled before payment (abandoned) and after payment (refunded in full).
    pub orders_cancelled: u64,
    /// Paid orders that really waited more than 72 hours to ship.
    pub orders_stuck_over_72h: u64,
    /// Change events committed (test orders included).
    pub change_events: u64,
    /// Distinct payment events.
    pub payment_events: u64,
    pub months: Vec<MonthVolume>,
    /// Mean of the true "paid, not shipped" count at the daily checkpoints 2026-08-08..2026-09-30.
    pub awaiting_shipment_mean: u64,
}

/// A rate published twice for one date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Republished {
    pub rate_date: NaiveDate,
    pub original_rate_micros: i64,
    pub corrected_rate_micros: i64,
    /// Relative names (under `landing/`) of the first and the corrected file.
    pub original_file: String,
    pub corrected_file: String,
}

/// The FX calendar.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FxSummary {
    /// Weekdays without a rate.
    pub holidays: Vec<NaiveDate>,
    pub first_rate_date: Option<NaiveDate>,
    pub last_rate_date: Option<NaiveDate>,
    /// Rate dates published (each business day once; the republished one counts once here).
    pub rate_dates: u64,
    pub republished: Vec<Republished>,
}

/// A landing file sent again under a new name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResentFile {
    pub source: Source,
    pub original: String,
    pub copy: String,
    pub sha256: String,
}

/// The season's time frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeasonWindow {
    /// First instant an order can be created.
    pub orders_from: DateTime<Utc>,
    /// Orders and charges are created before this instant.
    pub orders_until: DateTime<Utc>,
    /// Every file arrives before this instant.
    pub arrivals_until: DateTime<Utc>,
    /// USD events created from here on are in the 2026-08-01 shape.
    pub api_change_at: DateTime<Utc>,
    /// The business day used for diurnal volume: America/Halifax, UTC−3 all season (ADT).
    pub business_tz: String,
}

/// `truth/summary.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthSummary {
    pub generator: String,
    pub seed: u64,
    pub scale: u32,
    pub season: SeasonWindow,
    pub sources: Vec<SourceStats>,
    pub faults: FaultCounts,
    pub volume: Volume,
    pub fx: FxSummary,
    pub resent: Vec<ResentFile>,
}

/// Parses one row of a truth CSV file; implemented by each row type.
pub trait TruthRow: Sized {
    /// The file under `truth/`.
    const FILE: &'static str;
    /// Its header line.
    const HEADER: &'static str;
    /// Reads the fields of one line.
    fn parse_fields(fields: &[&str]) -> Option<Self>;
}

/// `daily.csv`: per UTC day and currency, what the deduplicated, correctly parsed events sum to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyTruth {
    pub date: NaiveDate,
    pub currency: Currency,
    pub captured_minor: i64,
    pub refunded_minor: i64,
    pub net_minor: i64,
    pub captures: u64,
    pub refunds: u64,
    /// USD rows: the rate date used (latest on or before the day) and the rate, micro-units.
    pub fx_rate_date: Option<NaiveDate>,
    pub fx_rate_micros: Option<i64>,
    /// Net in CAD cents: CAD as is; USD × rate, rounded half away from zero, per day (how
    /// finance converts the settlement reports).
    pub net_cad_minor: i64,
    /// Net in CAD cents with every USD event converted and rounded on its own (half away from
    /// zero), then summed: what a fact table with one CAD amount per event sums to. Differs
    /// from `net_cad_minor` by rounding only (a few cents a day at most).
    pub net_cad_minor_by_event: i64,
}

/// `fx_rates.csv`: the valid rate of each rate date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FxRateTruth {
    pub rate_date: NaiveDate,
    pub rate_micros: i64,
    /// How many files published this date (2 for the republished one).
    pub published: u32,
    /// The wrong rate first published, when it was corrected.
    pub corrected_from_micros: Option<i64>,
}

/// `awaiting.csv`: orders paid and not yet shipped (nor cancelled), at 12:00 UTC each day.
///
/// * `true_*`: by commit time, what the order database really held.
/// * `visible_*`: a correct pipeline at that instant: the highest-LSN change among those whose
///   landing file had arrived (what gold should show).
/// * `naive_*`: the story's bucket brigade: the last change *received* per order, files in
///   arrival order, re-sent files read again, deletes skipped.
///
/// `over_72h` counts those whose `paid` change (its `updated_at`) is more than 72 hours old.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitingTruth {
    pub at: DateTime<Utc>,
    pub true_waiting: u64,
    pub true_over_72h: u64,
    pub visible_waiting: u64,
    pub visible_over_72h: u64,
    pub naive_waiting: u64,
    pub naive_over_72h: u64,
}

/// `bridge.csv`: the story's bridge for one month (UTC, by each event's `created`), from the
/// files that had landed by `as_of`, computed from what the generator wrote (never by parsing
/// the files). `sugarshack compare` must find every figure.
///
/// * `naive_minor`: the bucket brigade: every complete delivery of an API 2025-11-01 charge,
///   in every file including re-sent copies, its integer amount added as it is (USD as CAD).
/// * `resent_minor`: what the re-sent copies added to it.
/// * `retries_minor`: what the second and later deliveries of an event added (copies aside).
/// * `v2_null_minor`: API 2026-08-01 charges, whose amount the bucket brigade reads as null.
/// * `refunds_minor`: refunds (positive), which it never subtracts (each in its own currency).
/// * `usd_minor`: USD events' CAD value (each converted and rounded on its own at its day's
///   rate) minus their USD amount.
/// * `end_minor`: the month's net in CAD, event by event: what `gold.mart_daily_cash` holds.
///   `naive - resent - retries + v2_null - refunds + usd = end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeTruth {
    /// `2026-08`.
    pub month: String,
    pub as_of: DateTime<Utc>,
    pub naive_minor: i64,
    pub resent_minor: i64,
    pub retries_minor: i64,
    pub v2_null_minor: i64,
    pub refunds_minor: i64,
    pub usd_minor: i64,
    pub end_minor: i64,
}

/// `two_answers.csv`: a month's two right answers as of each as-of (see [`as_ofs_for_month`]):
/// its cash by processor date (UTC day of each event, converted at that day's rate: the same
/// figure as [`BridgeTruth::end_minor`]) and its orders by order date (the Halifax day the
/// order was created; every event of the order converted at that day's rate), counting the
/// events that had landed by the as-of whose order a correct pipeline could see by then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswersTruth {
    pub month: String,
    pub as_of: DateTime<Utc>,
    pub cash_minor: i64,
    pub orders_minor: i64,
}

/// The as-ofs at which `truth/` weighs a month, the story's "two right answers" dates: the 8th,
/// 15th, 22nd and 30th of the next month and the 15th of the one after, at 12:00 UTC (a month
/// without a 30th has four).
pub fn as_ofs_for_month(year: i32, month: u32) -> Vec<DateTime<Utc>> {
    use chrono::TimeZone;
    let next = |y: i32, m: u32| if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let (y1, m1) = next(year, month);
    let (y2, m2) = next(y1, m1);
    [
        (y1, m1, 8),
        (y1, m1, 15),
        (y1, m1, 22),
        (y1, m1, 30),
        (y2, m2, 15),
    ]
    .into_iter()
    .filter_map(|(y, m, d)| Utc.with_ymd_and_hms(y, m, d, 12, 0, 0).single())
    .collect()
}

/// `orders.csv`: one row per order, written when its last change commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderTruth {
    pub order_id: String,
    pub customer_id: String,
    pub test: bool,
    pub currency: Currency,
    pub ship_region: String,
    pub total_minor: i64,
    pub charge_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
    pub shipped_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub refund_id: Option<String>,
    pub refunded_minor: i64,
    pub refunded_at: Option<DateTime<Utc>>,
    /// The status of the highest-LSN row image (a deleted order keeps its last status).
    pub final_status: OrderStatus,
    pub final_lsn: u64,
    pub changes: u32,
}

impl OrderTruth {
    /// The order's status at `t` by commit time, or `None` if it did not exist yet or had
    /// been deleted.
    pub fn status_at(&self, t: DateTime<Utc>) -> Option<OrderStatus> {
        let reached = |x: &Option<DateTime<Utc>>| x.is_some_and(|x| x <= t);
        if self.created_at > t || reached(&self.deleted_at) {
            return None;
        }
        Some(if reached(&self.cancelled_at) {
            OrderStatus::Cancelled
        } else if reached(&self.shipped_at) {
            OrderStatus::Shipped
        } else if reached(&self.paid_at) {
            OrderStatus::Paid
        } else {
            OrderStatus::Created
        })
    }
}

/// `order_changes.csv`: every change event, in LSN order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderChangeTruth {
    pub lsn: u64,
    pub order_id: String,
    /// `c`, `u` or `d`.
    pub op: String,
    /// The status of the row image (`before` for a delete).
    pub status: OrderStatus,
    pub committed_at: DateTime<Utc>,
    /// When the CDC sink received it.
    pub received_at: DateTime<Utc>,
    /// When the hourly file holding it arrived in the landing zone (its name's stamp).
    pub landed_at: DateTime<Utc>,
    pub late: bool,
    pub overtaken: bool,
}

/// A payment event's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentKind {
    /// `charge.succeeded`
    Capture,
    /// `charge.refunded`
    Refund,
}

/// `payment_events.csv`: every distinct payment event, in `created` order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentEventTruth {
    pub event_id: String,
    pub kind: PaymentKind,
    pub api_version: String,
    pub created: DateTime<Utc>,
    pub currency: Currency,
    pub amount_minor: i64,
    pub order_id: String,
    pub charge_id: String,
    pub refund_id: Option<String>,
    /// Complete deliveries (2 for a duplicated event).
    pub deliveries: u32,
    /// Truncated copies written before the complete one.
    pub truncated: u32,
    /// When the first complete delivery's file arrived in the landing zone.
    pub first_landed_at: DateTime<Utc>,
}

fn opt<T>(s: &str, f: impl Fn(&str) -> Option<T>) -> Option<Option<T>> {
    if s.is_empty() {
        Some(None)
    } else {
        f(s).map(Some)
    }
}

fn instant(s: &str) -> Option<DateTime<Utc>> {
    time::parse_rfc3339_ms(s).map(time::to_datetime)
}

fn date(s: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()
}

fn flag(s: &str) -> Option<bool> {
    match s {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl TruthRow for DailyTruth {
    const FILE: &'static str = "daily.csv";
    const HEADER: &'static str = "date,currency,captured_minor,refunded_minor,net_minor,captures,refunds,fx_rate_date,fx_rate,net_cad_minor,net_cad_minor_by_event";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [d, c, cap, re, net, ncap, nre, frd, fr, ncad, ncad_ev] = f else {
            return None;
        };
        Some(Self {
            date: date(d)?,
            currency: Currency::parse(c)?,
            captured_minor: cap.parse().ok()?,
            refunded_minor: re.parse().ok()?,
            net_minor: net.parse().ok()?,
            captures: ncap.parse().ok()?,
            refunds: nre.parse().ok()?,
            fx_rate_date: opt(frd, date)?,
            fx_rate_micros: opt(fr, parse_rate_micros)?,
            net_cad_minor: ncad.parse().ok()?,
            net_cad_minor_by_event: ncad_ev.parse().ok()?,
        })
    }
}

impl TruthRow for FxRateTruth {
    const FILE: &'static str = "fx_rates.csv";
    const HEADER: &'static str = "rate_date,rate,published,corrected_from";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [d, r, p, c] = f else { return None };
        Some(Self {
            rate_date: date(d)?,
            rate_micros: parse_rate_micros(r)?,
            published: p.parse().ok()?,
            corrected_from_micros: opt(c, parse_rate_micros)?,
        })
    }
}

impl TruthRow for AwaitingTruth {
    const FILE: &'static str = "awaiting.csv";
    const HEADER: &'static str = "at,true_waiting,true_over_72h,visible_waiting,visible_over_72h,naive_waiting,naive_over_72h";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [at, tw, to, vw, vo, nw, no] = f else {
            return None;
        };
        Some(Self {
            at: instant(at)?,
            true_waiting: tw.parse().ok()?,
            true_over_72h: to.parse().ok()?,
            visible_waiting: vw.parse().ok()?,
            visible_over_72h: vo.parse().ok()?,
            naive_waiting: nw.parse().ok()?,
            naive_over_72h: no.parse().ok()?,
        })
    }
}

impl TruthRow for BridgeTruth {
    const FILE: &'static str = "bridge.csv";
    const HEADER: &'static str = "month,as_of,naive_minor,resent_minor,retries_minor,v2_null_minor,refunds_minor,usd_minor,end_minor";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [month, as_of, naive, resent, retries, v2, refunds, usd, end] = f else {
            return None;
        };
        Some(Self {
            month: (*month).to_string(),
            as_of: instant(as_of)?,
            naive_minor: naive.parse().ok()?,
            resent_minor: resent.parse().ok()?,
            retries_minor: retries.parse().ok()?,
            v2_null_minor: v2.parse().ok()?,
            refunds_minor: refunds.parse().ok()?,
            usd_minor: usd.parse().ok()?,
            end_minor: end.parse().ok()?,
        })
    }
}

impl TruthRow for AnswersTruth {
    const FILE: &'static str = "two_answers.csv";
    const HEADER: &'static str = "month,as_of,cash_minor,orders_minor";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [month, as_of, cash, orders] = f else {
            return None;
        };
        Some(Self {
            month: (*month).to_string(),
            as_of: instant(as_of)?,
            cash_minor: cash.parse().ok()?,
            orders_minor: orders.parse().ok()?,
        })
    }
}

impl TruthRow for OrderTruth {
    const FILE: &'static str = "orders.csv";
    const HEADER: &'static str = "order_id,customer_id,test,currency,ship_region,total_minor,charge_id,created_at,paid_at,shipped_at,cancelled_at,deleted_at,refund_id,refunded_minor,refunded_at,final_status,final_lsn,changes";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [
            oid,
            cid,
            test,
            cur,
            region,
            total,
            ch,
            created,
            paid,
            shipped,
            cancelled,
            deleted,
            re,
            refunded,
            refunded_at,
            status,
            lsn,
            changes,
        ] = f
        else {
            return None;
        };
        Some(Self {
            order_id: nonempty(oid)?,
            customer_id: nonempty(cid)?,
            test: flag(test)?,
            currency: Currency::parse(cur)?,
            ship_region: nonempty(region)?,
            total_minor: total.parse().ok()?,
            charge_id: nonempty(ch),
            created_at: instant(created)?,
            paid_at: opt(paid, instant)?,
            shipped_at: opt(shipped, instant)?,
            cancelled_at: opt(cancelled, instant)?,
            deleted_at: opt(deleted, instant)?,
            refund_id: nonempty(re),
            refunded_minor: refunded.parse().ok()?,
            refunded_at: opt(refunded_at, instant)?,
            final_status: OrderStatus::parse(status)?,
            final_lsn: lsn.parse().ok()?,
            changes: changes.parse().ok()?,
        })
    }
}

impl TruthRow for OrderChangeTruth {
    const FILE: &'static str = "order_changes.csv";
    const HEADER: &'static str =
        "lsn,order_id,op,status,committed_at,received_at,landed_at,late,overtaken";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [
            lsn,
            oid,
            op,
            status,
            committed,
            received,
            landed,
            late,
            over,
        ] = f
        else {
            return None;
        };
        Some(Self {
            lsn: lsn.parse().ok()?,
            order_id: nonempty(oid)?,
            op: matches!(*op, "c" | "u" | "d").then(|| op.to_string())?,
            status: OrderStatus::parse(status)?,
            committed_at: instant(committed)?,
            received_at: instant(received)?,
            landed_at: instant(landed)?,
            late: flag(late)?,
            overtaken: flag(over)?,
        })
    }
}

impl TruthRow for PaymentEventTruth {
    const FILE: &'static str = "payment_events.csv";
    const HEADER: &'static str = "event_id,kind,api_version,created,currency,amount_minor,order_id,charge_id,refund_id,deliveries,truncated,first_landed_at";

    fn parse_fields(f: &[&str]) -> Option<Self> {
        let [
            eid,
            kind,
            api,
            created,
            cur,
            amount,
            oid,
            ch,
            re,
            deliveries,
            truncated,
            landed,
        ] = f
        else {
            return None;
        };
        Some(Self {
            event_id: nonempty(eid)?,
            kind: match *kind {
                "capture" => PaymentKind::Capture,
                "refund" => PaymentKind::Refund,
                _ => return None,
            },
            api_version: nonempty(api)?,
            created: instant(created)?,
            currency: Currency::parse(cur)?,
            amount_minor: amount.parse().ok()?,
            order_id: nonempty(oid)?,
            charge_id: nonempty(ch)?,
            refund_id: nonempty(re),
            deliveries: deliveries.parse().ok()?,
            truncated: truncated.parse().ok()?,
            first_landed_at: instant(landed)?,
        })
    }
}

/// `1.371234` → 1371234. Exactly six decimals, as the generator writes them.
pub fn parse_rate_micros(s: &str) -> Option<i64> {
    let (whole, frac) = s.split_once('.')?;
    if frac.len() != 6
        || whole.is_empty()
        || !whole.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Some(whole.parse::<i64>().ok()? * 1_000_000 + frac.parse::<i64>().ok()?)
}

/// 1371234 → `1.371234`.
pub fn format_rate_micros(micros: i64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// The rows of one truth CSV file, read one line at a time (bounded memory at any scale).
pub struct TruthRows<T> {
    path: PathBuf,
    lines: std::io::Lines<BufReader<fs::File>>,
    line: u64,
    _row: PhantomData<T>,
}

impl<T: TruthRow> TruthRows<T> {
    /// Opens `truth/<T::FILE>` and checks its header.
    pub fn open(warehouse_root: &Path) -> Result<Self> {
        let path = truth_dir(warehouse_root).join(T::FILE);
        let file = fs::File::open(&path).at(&path)?;
        let mut lines = BufReader::new(file).lines();
        let header = lines.next().transpose().at(&path)?;
        if header.as_deref() != Some(T::HEADER) {
            return Err(SugarbushError::BadTruth {
                path,
                line: 1,
                message: format!("expected the header {:?}", T::HEADER),
            });
        }
        Ok(Self {
            path,
            lines,
            line: 1,
            _row: PhantomData,
        })
    }
}

impl<T: TruthRow> Iterator for TruthRows<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        let line = match self.lines.next()? {
            Ok(line) => line,
            Err(e) => return Some(Err(e).at(&self.path)),
        };
        self.line += 1;
        let fields: Vec<&str> = line.split(',').collect();
        Some(
            T::parse_fields(&fields).ok_or_else(|| SugarbushError::BadTruth {
                path: self.path.clone(),
                line: self.line,
                message: format!("not a {} row: {line:?}", T::FILE),
            }),
        )
    }
}

/// The small part of the truth, loaded whole: the summary, the daily totals, the rates and the
/// awaiting-shipment checkpoints. The per-order and per-event files are streamed with
/// [`read_orders`], [`read_order_changes`] and [`read_payment_events`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truth {
    pub summary: TruthSummary,
    pub daily: Vec<DailyTruth>,
    pub fx_rates: Vec<FxRateTruth>,
    pub awaiting: Vec<AwaitingTruth>,
    pub bridge: Vec<BridgeTruth>,
    pub answers: Vec<AnswersTruth>,
}

impl Truth {
    /// The true totals of one UTC day and currency.
    pub fn daily_for(&self, date: NaiveDate, currency: Currency) -> Option<&DailyTruth> {
        self.daily
            .iter()
            .find(|d| d.date == date && d.currency == currency)
    }

    /// The valid USD→CAD rate for a day: the latest rate date on or before it.
    pub fn rate_for(&self, day: NaiveDate) -> Option<&FxRateTruth> {
        self.fx_rates.iter().rev().find(|r| r.rate_date <= day)
    }

    /// The awaiting-shipment checkpoint at exactly `at` (12:00 UTC of a season day).
    pub fn awaiting_at(&self, at: DateTime<Utc>) -> Option<&AwaitingTruth> {
        self.awaiting.iter().find(|a| a.at == at)
    }

    /// The bridge of `month` (`2026-08`) as of `at`.
    pub fn bridge_at(&self, month: &str, at: DateTime<Utc>) -> Option<&BridgeTruth> {
        self.bridge
            .iter()
            .find(|b| b.month == month && b.as_of == at)
    }

    /// The two right answers of `month`, one row per as-of, in as-of order.
    pub fn answers_for(&self, month: &str) -> Vec<&AnswersTruth> {
        self.answers.iter().filter(|a| a.month == month).collect()
    }
}

/// Loads `truth/` (the summary, daily totals, rates and awaiting checkpoints).
pub fn load_truth(warehouse_root: &Path) -> Result<Truth> {
    let path = truth_dir(warehouse_root).join("summary.json");
    let bytes = fs::read(&path).at(&path)?;
    let summary: TruthSummary =
        serde_json::from_slice(&bytes).map_err(|source| SugarbushError::Json { path, source })?;
    Ok(Truth {
        summary,
        daily: TruthRows::<DailyTruth>::open(warehouse_root)?.collect::<Result<_>>()?,
        fx_rates: TruthRows::<FxRateTruth>::open(warehouse_root)?.collect::<Result<_>>()?,
        awaiting: TruthRows::<AwaitingTruth>::open(warehouse_root)?.collect::<Result<_>>()?,
        bridge: TruthRows::<BridgeTruth>::open(warehouse_root)?.collect::<Result<_>>()?,
        answers: TruthRows::<AnswersTruth>::open(warehouse_root)?.collect::<Result<_>>()?,
    })
}

/// Every order's final state and lifecycle, streamed from `truth/orders.csv`.
pub fn read_orders(warehouse_root: &Path) -> Result<TruthRows<OrderTruth>> {
    TruthRows::open(warehouse_root)
}

/// Every change event, in LSN order, streamed from `truth/order_changes.csv`.
pub fn read_order_changes(warehouse_root: &Path) -> Result<TruthRows<OrderChangeTruth>> {
    TruthRows::open(warehouse_root)
}

/// Every distinct payment event, streamed from `truth/payment_events.csv`.
pub fn read_payment_events(warehouse_root: &Path) -> Result<TruthRows<PaymentEventTruth>> {
    TruthRows::open(warehouse_root)
}

/// Orders paid and not yet shipped (nor cancelled) at any instant, by commit time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Awaiting {
    pub waiting: u64,
    /// Of those, paid more than 72 hours before the instant.
    pub over_72h: u64,
}

/// The true awaiting-shipment count at any instant, streamed from `truth/orders.csv`.
pub fn awaiting_shipment(warehouse_root: &Path, at: DateTime<Utc>) -> Result<Awaiting> {
    let mut out = Awaiting::default();
    let limit = at - chrono::Duration::hours(72);
    for order in read_orders(warehouse_root)? {
        let order = order?;
        if order.status_at(at) == Some(OrderStatus::Paid) {
            out.waiting += 1;
            if order.paid_at.is_some_and(|p| p < limit) {
                out.over_72h += 1;
            }
        }
    }
    Ok(out)
}

/// `truth/README.md`: what each file is, for a person who opens the folder.
pub(crate) const README: &str = "\
# truth/

The ground truth of this season, written by `sugarbush` beside `landing/`. The pipeline never
reads it; tests and `sugarshack compare` weigh the pipeline against it. Money is integer minor
units (cents); rates have exactly six decimals. Instants are UTC.

| file | one row per | what |
| --- | --- | --- |
| summary.json | season | seed, scale, files per source, every injected fault's count, volumes, the FX calendar, the re-sent files |
| daily.csv | UTC day and currency | captured, refunded and net cents of the deduplicated, correctly parsed events (the settlement reports say the same); USD rows also carry the rate used (latest on or before the day) and the net in CAD cents, rounded half away from zero per day, and per event then summed |
| fx_rates.csv | rate date | the valid USD to CAD rate (after correction), how many files published it, the wrong rate it corrected |
| awaiting.csv | day, 12:00 UTC | orders paid and not shipped: true (commit time), visible (highest LSN among landed changes: what a correct pipeline shows), naive (last change received, re-sent files read again: the bucket brigade); and those paid more than 72 hours before |
| orders.csv | order | final state (highest LSN) and the instant of every lifecycle step, so its status at any instant |
| order_changes.csv | change event, in LSN order | commit, receipt and landing instants; late (two hours or more) and overtaken (arrived after a newer change of the same order) |
| payment_events.csv | distinct payment event | the facts any correct parser reads, complete and truncated deliveries, when the first complete one landed |
| bridge.csv | month and as-of | the bucket brigade's month (every delivery of an old-API charge in every landed file, re-sent copies too, USD added as CAD) and each error: re-sent copies, webhook retries, new-API amounts it reads as null, refunds it never subtracts, USD as CAD; ending at the month's true net in CAD |
| two_answers.csv | month and as-of | the month's cash by processor date and its orders by order date, from what had landed by the as-of (12:00 UTC on the 8th, 15th, 22nd and 30th of the next month and the 15th of the one after) |
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_trip() {
        assert_eq!(parse_rate_micros("1.371234"), Some(1_371_234));
        assert_eq!(format_rate_micros(1_371_234), "1.371234");
        assert_eq!(format_rate_micros(1_000_004), "1.000004");
        assert_eq!(parse_rate_micros("1.37123"), None);
        assert_eq!(parse_rate_micros("-1.371234"), None);
    }
}
