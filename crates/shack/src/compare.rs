//! Weigh the barrels: the old pipeline's month against gold's, one error at a time.
//!
//! The "bucket brigade" is how Saltbox's first dashboard computed a month's revenue, straight
//! from the landing files: every `charge.succeeded` line created that month (UTC), its
//! `data.object.amount` read as an integer (an API 2026-08-01 amount is an object, so it reads
//! as null and is skipped), every file read (re-sent copies too), every delivery counted,
//! refunds ignored, US dollars added as if they were Canadian. [`compare`] computes that number,
//! then each error's amount *directly* from the same files — never as a remainder — and adds
//! them up to the end, which must be what `gold.mart_daily_cash` says for the month at the
//! publish being compared: "matches", or the gap.
//!
//! It also counts the awaiting-shipment queue both ways: the bucket brigade keeps the last
//! change it *received* per order (files in arrival order, re-sent copies read again, deletes
//! skipped), against `gold.fulfilment_queue`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use arrow::compute::cast;
use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use lake::{At, Catalog};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sugarbush::Source;

use crate::publish::{self, PublishRecord};
use crate::silver::parse::{self, Parsed, Parsers};
use crate::{Result, ShackError, gold, thousands};

/// One line of the bridge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BridgeLine {
    pub label: String,
    /// Signed, in CAD minor units (the bucket brigade's units until the currency line).
    pub amount_minor: i64,
    /// The running total after this line.
    pub running_minor: i64,
}

/// Awaiting shipment: all, and paid more than 72 hours before the as-of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Queue {
    pub waiting: u64,
    pub over_72h: u64,
}

/// What [`compare`] found.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// `2026-08`.
    pub month: String,
    /// The publish compared (gold as it published), and its as-of.
    pub publish: u64,
    pub as_of: DateTime<Utc>,
    /// The bucket brigade's number.
    pub naive_minor: i64,
    pub lines: Vec<BridgeLine>,
    /// The bridge's end.
    pub end_minor: i64,
    /// `gold.mart_daily_cash`: the month's net in CAD at the publish.
    pub gold_minor: i64,
    pub queue_naive: Queue,
    pub queue_gold: Queue,
}

impl Comparison {
    /// True when the bridge ends exactly at gold.
    pub fn matches(&self) -> bool {
        self.end_minor == self.gold_minor
    }

    /// The story's table.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} net revenue, as of {} (publish {})\n\n",
            self.month,
            self.as_of.format("%Y-%m-%d %H:%M UTC"),
            self.publish
        );
        out.push_str(&format!(
            "  {:<34} {:>13}    {:>15}\n",
            "bucket brigade dashboard",
            "",
            cad(self.naive_minor)
        ));
        for l in &self.lines {
            let sign = if l.amount_minor < 0 { '-' } else { '+' };
            out.push_str(&format!(
                "  {:<34} {sign} {:>11}    {:>15}\n",
                l.label,
                plain(l.amount_minor.abs()),
                cad(l.running_minor)
            ));
        }
        out.push('\n');
        let verdict = if self.matches() {
            "matches".to_string()
        } else {
            format!(
                "the bridge ends {} away",
                cad(self.end_minor - self.gold_minor)
            )
        };
        out.push_str(&format!(
            "  gold.mart_daily_cash {} ({verdict})\n\n",
            cad(self.gold_minor)
        ));
        out.push_str(&format!(
            "  {:<22} {:>8} {:>10}\n",
            "awaiting shipment", "all", "over 72h"
        ));
        for (who, q) in [
            ("bucket brigade", self.queue_naive),
            ("gold", self.queue_gold),
        ] {
            out.push_str(&format!(
                "  {:<22} {:>8} {:>10}\n",
                who,
                thousands(q.waiting),
                thousands(q.over_72h)
            ));
        }
        out
    }
}

fn plain(minor: i64) -> String {
    let abs = minor.unsigned_abs();
    let sign = if minor < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", thousands(abs / 100), abs % 100)
}

/// CAD minor units as the lake prints them: `C$1,479,502.22`, `-C$12.34`.
pub fn cad(minor: i64) -> String {
    let abs = minor.unsigned_abs();
    let sign = if minor < 0 { "-" } else { "" };
    format!("{sign}C${}.{:02}", thousands(abs / 100), abs % 100)
}

fn bad(what: &str, detail: impl Into<String>) -> ShackError {
    ShackError::BadTable {
        table: what.to_string(),
        detail: detail.into(),
    }
}

/// The month before `t`'s (`2026-09-08` → 2026-08).
pub fn month_before(t: DateTime<Utc>) -> (i32, u32) {
    let (y, m) = (t.year(), t.month());
    if m == 1 { (y - 1, 12) } else { (y, m - 1) }
}

/// Per event id, gold's signed CAD amount and processor date, at the publish.
async fn gold_events(catalog: &Catalog, tag: &str) -> Result<HashMap<String, (Option<i64>, i32)>> {
    let t = catalog
        .table(gold::FCT_PAYMENTS)
        .await
        .map_err(|e| ShackError::lake(gold::FCT_PAYMENTS, e))?;
    let batches = t
        .scan(&At::reference(tag))
        .await
        .map_err(|e| ShackError::lake(gold::FCT_PAYMENTS, e))?;
    let mut out = HashMap::new();
    for b in &batches {
        let ids = col::<StringArray>(b, "event_id", &DataType::Utf8)?;
        let cad = col::<Int64Array>(b, "amount_cad_minor", &DataType::Int64)?;
        let day = col::<Int64Array>(b, "processor_date", &DataType::Int64)?;
        for i in 0..b.num_rows() {
            let c = (!cad.is_null(i)).then(|| cad.value(i));
            out.insert(ids.value(i).to_string(), (c, day.value(i) as i32));
        }
    }
    Ok(out)
}

fn col<A: Array + Clone + 'static>(b: &RecordBatch, name: &str, ty: &DataType) -> Result<A> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| bad(gold::FCT_PAYMENTS, format!("no column {name}")))?;
    let c = if matches!(c.data_type(), DataType::Date32) {
        cast(c, &DataType::Int32).map_err(|e| bad(name, e.to_string()))?
    } else {
        c.clone()
    };
    let c = cast(&c, ty).map_err(|e| bad(name, e.to_string()))?;
    c.as_any()
        .downcast_ref::<A>()
        .cloned()
        .ok_or_else(|| bad(name, "unexpected type"))
}

/// Compare the bucket brigade's `month` (default: the month before the publish's as-of) with
/// gold as the last publish at or before `through` left it. The landing files read are those
/// that had arrived by that publish's as-of (what its gold was built from).
pub async fn compare(
    catalog: &Catalog,
    warehouse_root: &Path,
    through: DateTime<Utc>,
    month: Option<(i32, u32)>,
) -> Result<Comparison> {
    let record: PublishRecord = publish::publish_at_or_before(catalog, through)
        .await?
        .ok_or_else(|| ShackError::NothingToCompare {
            detail: format!(
                "nothing was published at or before {}; compare weighs a published gold",
                through.format("%Y-%m-%d %H:%M UTC")
            ),
        })?;
    let month = month.unwrap_or_else(|| month_before(through));
    compare_publish(catalog, warehouse_root, &record, month).await
}

/// [`compare`] at one publish record (a rollback's record included: its own number and tag),
/// for `month`; the landing files are read as they had arrived by the record's as-of.
pub async fn compare_publish(
    catalog: &Catalog,
    warehouse_root: &Path,
    record: &PublishRecord,
    (year, mon): (i32, u32),
) -> Result<Comparison> {
    let as_of = record.as_of;
    let tag = record.tag().ok_or_else(|| ShackError::NothingToCompare {
        detail: format!(
            "record {} is a blocked run, not a publish; compare weighs a published gold",
            record.seq
        ),
    })?;
    let first = NaiveDate::from_ymd_opt(year, mon, 1)
        .ok_or_else(|| bad("--month", format!("{year}-{mon:02} is not a month")))?;
    let in_month = |us: i64| {
        Utc.timestamp_micros(us)
            .single()
            .is_some_and(|t| t.year() == year && t.month() == mon)
    };

    // 1. The landing files, as the bucket brigade reads them, and as silver would.
    let gold_by_event = gold_events(catalog, &tag).await?;
    let parsers = Parsers::all();
    // The bucket brigade adds whatever integer a line holds: summed wide, so no landing file can
    // overflow it; a total past 64 bits is refused below, naming it.
    let mut naive = 0i128;
    let mut resent = 0i128;
    let mut retries = 0i128;
    let mut v2_null = 0i64;
    let mut refunds = 0i64;
    let mut usd = 0i64;
    let mut missing_in_gold = 0i64;
    // Lines of the month either reading found, and gold's days of the month with cash.
    let mut month_lines = 0usize;
    let mut gold_days = 0usize;
    let mut seen_files: HashSet<[u8; 32]> = HashSet::new();
    let mut seen_events: HashSet<String> = HashSet::new();
    let files = sugarbush::landed(warehouse_root, Source::Payments, as_of)
        .map_err(|e| bad("the landing zone", e.to_string()))?;
    for f in files {
        let bytes = std::fs::read(&f.path)
            .map_err(|e| bad(&f.path.display().to_string(), e.to_string()))?;
        let copy = !seen_files.insert(Sha256::digest(&bytes).into());
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            // The bucket brigade: JSON or skip; charges created this month; an integer amount.
            let j: Option<Value> = serde_json::from_slice(line).ok();
            let naive_amount = j.as_ref().and_then(|j| {
                let charge = j.get("type").and_then(Value::as_str) == Some("charge.succeeded");
                let created = j.get("created").and_then(Value::as_i64)?;
                let amount = j.pointer("/data/object/amount").and_then(Value::as_i64)?;
                (charge && in_month(created.saturating_mul(1_000_000))).then_some(amount)
            });
            let naive_wide = i128::from(naive_amount.unwrap_or(0));
            naive += naive_wide;
            month_lines += usize::from(naive_amount.is_some());
            if copy {
                resent += naive_wide;
                continue;
            }
            // Silver's reading of the same line.
            let Ok(text) = std::str::from_utf8(line) else {
                continue;
            };
            let Parsed::Row(e) = parse::parse_payment(text, true, &parsers) else {
                continue;
            };
            if !seen_events.insert(e.event_id.clone()) {
                retries += naive_wide;
                continue;
            }
            if !in_month(e.created_at_us) {
                continue;
            }
            month_lines += 1;
            let signed = if e.event_type == "refund" {
                refunds += e.amount_minor;
                -e.amount_minor
            } else {
                if naive_amount.is_none() {
                    v2_null += e.amount_minor;
                }
                e.amount_minor
            };
            match gold_by_event.get(&e.event_id) {
                Some((Some(c), _)) if e.currency == "usd" => usd += c - signed,
                Some(_) => {}
                None => missing_in_gold += signed,
            }
        }
    }

    // 2. Gold's month.
    let cash = catalog
        .table(gold::MART_DAILY_CASH)
        .await
        .map_err(|e| ShackError::lake(gold::MART_DAILY_CASH, e))?
        .scan(&At::reference(&tag))
        .await
        .map_err(|e| ShackError::lake(gold::MART_DAILY_CASH, e))?;
    let first_day = gold::epoch_days(first);
    let next_month = if mon == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, mon + 1, 1)
    }
    .ok_or_else(|| bad("--month", "no next month"))?;
    let end_day = gold::epoch_days(next_month);
    let mut gold_minor = 0i64;
    for b in &cash {
        let day = col::<Int64Array>(b, "processor_date", &DataType::Int64)?;
        let net = col::<Int64Array>(b, "net_cad_minor", &DataType::Int64)?;
        for i in 0..b.num_rows() {
            let d = day.value(i) as i32;
            if (first_day..end_day).contains(&d) && !net.is_null(i) {
                gold_minor += net.value(i);
                gold_days += 1;
            }
        }
    }

    if month_lines == 0 && gold_days == 0 {
        return Err(ShackError::NothingToCompare {
            detail: format!(
                "no payment of {year}-{mon:02} had landed by publish {}'s as-of ({}), and its gold holds no cash that month",
                record.publish_number.unwrap_or_default(),
                as_of.format("%Y-%m-%d %H:%M UTC")
            ),
        });
    }

    // 3. The bridge, line by line.
    let narrow = |what: &str, v: i128| {
        i64::try_from(v).map_err(|_| {
            bad(
                "the landing zone's payments",
                format!(
                    "the bucket brigade's {what} ({v} minor units) does not fit in 64 bits: a landing file holds an absurd amount"
                ),
            )
        })
    };
    let mut lines = Vec::new();
    let mut running = naive;
    let mut steps = vec![
        ("re-sent files counted twice", -resent),
        ("webhook retries counted twice", -retries),
        ("v2 amounts read as null", i128::from(v2_null)),
        ("refunds never subtracted", -i128::from(refunds)),
        ("USD added as if it were CAD", i128::from(usd)),
    ];
    if missing_in_gold != 0 {
        steps.push(("events gold does not hold", -i128::from(missing_in_gold)));
    }
    for (label, amount) in steps {
        running += amount;
        lines.push(BridgeLine {
            label: label.to_string(),
            amount_minor: narrow(label, amount)?,
            running_minor: narrow("running total", running)?,
        });
    }
    let end_minor = narrow("end total", running)?;
    let naive = narrow("month's total", naive)?;

    // 4. The awaiting-shipment queue, both ways.
    let queue_naive = naive_queue(warehouse_root, as_of)?;
    let queue_gold = gold_queue(catalog, &tag).await?;

    Ok(Comparison {
        month: format!("{year}-{mon:02}"),
        publish: record.publish_number.unwrap_or_default(),
        as_of,
        naive_minor: naive,
        lines,
        end_minor,
        gold_minor,
        queue_naive,
        queue_gold,
    })
}

/// The bucket brigade's queue: the last change received per order says `paid`.
fn naive_queue(warehouse_root: &Path, as_of: DateTime<Utc>) -> Result<Queue> {
    let mut latest: BTreeMap<String, (String, Option<i64>)> = BTreeMap::new();
    let files = sugarbush::landed(warehouse_root, Source::Orders, as_of)
        .map_err(|e| bad("the landing zone", e.to_string()))?;
    for f in files {
        let bytes = std::fs::read(&f.path)
            .map_err(|e| bad(&f.path.display().to_string(), e.to_string()))?;
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(j) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            let Some(after) = j.get("after").filter(|a| a.is_object()) else {
                continue;
            };
            let (Some(id), Some(status)) = (
                after.get("order_id").and_then(Value::as_str),
                after.get("status").and_then(Value::as_str),
            ) else {
                continue;
            };
            let updated = after
                .get("updated_at")
                .and_then(Value::as_str)
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.timestamp_micros());
            latest.insert(id.to_string(), (status.to_string(), updated));
        }
    }
    let limit = (as_of - Duration::hours(72)).timestamp_micros();
    let mut q = Queue::default();
    for (status, updated) in latest.values() {
        if status == "paid" {
            q.waiting += 1;
            if updated.is_some_and(|u| u < limit) {
                q.over_72h += 1;
            }
        }
    }
    Ok(q)
}

async fn gold_queue(catalog: &Catalog, tag: &str) -> Result<Queue> {
    let batches = catalog
        .table(gold::FULFILMENT_QUEUE)
        .await
        .map_err(|e| ShackError::lake(gold::FULFILMENT_QUEUE, e))?
        .scan(&At::reference(tag))
        .await
        .map_err(|e| ShackError::lake(gold::FULFILMENT_QUEUE, e))?;
    let mut q = Queue::default();
    for b in &batches {
        let over = b
            .column_by_name("over_72h")
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
            .ok_or_else(|| bad(gold::FULFILMENT_QUEUE, "no boolean column over_72h"))?;
        q.waiting += b.num_rows() as u64;
        q.over_72h += (0..over.len())
            .filter(|i| !over.is_null(*i) && over.value(*i))
            .count() as u64;
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_and_months() {
        assert_eq!(cad(31_948_285), "C$319,482.85");
        assert_eq!(plain(-1_628_717), "-16,287.17");
        let t = Utc
            .with_ymd_and_hms(2026, 9, 8, 12, 0, 0)
            .single()
            .expect("t");
        assert_eq!(month_before(t), (2026, 8));
        let j = Utc
            .with_ymd_and_hms(2027, 1, 2, 0, 0, 0)
            .single()
            .expect("t");
        assert_eq!(month_before(j), (2026, 12));
    }
}

/// One as-of of the "two right answers" table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Answers {
    pub as_of: DateTime<Utc>,
    /// The publish read (`None`: nothing published by then).
    pub publish: Option<u64>,
    /// The month's cash by processor date (`gold.mart_daily_cash`), CAD minor units.
    pub cash_minor: Option<i64>,
    /// The month's orders by order date (`gold.mart_order_revenue`), CAD minor units.
    pub orders_minor: Option<i64>,
}

/// The as-ofs of the story's table for a month: the 8th, 15th, 22nd and 30th of the next month
/// and the 15th of the one after, at noon UTC (the as-ofs sugarbush's truth weighs).
pub fn default_as_ofs(year: i32, month: u32) -> Vec<DateTime<Utc>> {
    sugarbush::as_ofs_for_month(year, month)
}

/// Sum of `value` over the rows of `table` at `tag` whose `day` column falls in [from, to).
async fn month_sum(
    catalog: &Catalog,
    table: &str,
    tag: &str,
    day: &str,
    value: &str,
    (from, to): (i32, i32),
) -> Result<i64> {
    let batches = catalog
        .table(table)
        .await
        .map_err(|e| ShackError::lake(table, e))?
        .scan(&At::reference(tag))
        .await
        .map_err(|e| ShackError::lake(table, e))?;
    let mut sum = 0i64;
    for b in &batches {
        let d = col::<Int64Array>(b, day, &DataType::Int64)?;
        let v = col::<Int64Array>(b, value, &DataType::Int64)?;
        for i in 0..b.num_rows() {
            if (from..to).contains(&(d.value(i) as i32)) && !v.is_null(i) {
                sum += v.value(i);
            }
        }
    }
    Ok(sum)
}

/// Two right answers: a month's cash by processor date and its orders by order date, as of
/// each instant (time travel to the last publish at or before it). Cash settles; orders keep
/// falling as refunds of that month's orders trickle in.
pub async fn two_answers(
    catalog: &Catalog,
    (year, month): (i32, u32),
    as_ofs: &[DateTime<Utc>],
) -> Result<Vec<Answers>> {
    let first = NaiveDate::from_ymd_opt(year, month, 1)
        .ok_or_else(|| bad("--month", format!("{year}-{month:02} is not a month")))?;
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    }
    .ok_or_else(|| bad("--month", "no next month"))?;
    let days = (gold::epoch_days(first), gold::epoch_days(next));
    let mut out = Vec::with_capacity(as_ofs.len());
    for t in as_ofs {
        let Some(record) = publish::publish_at_or_before(catalog, *t).await? else {
            out.push(Answers {
                as_of: *t,
                publish: None,
                cash_minor: None,
                orders_minor: None,
            });
            continue;
        };
        let tag = record.tag().unwrap_or_default();
        let cash = month_sum(
            catalog,
            gold::MART_DAILY_CASH,
            &tag,
            "processor_date",
            "net_cad_minor",
            days,
        )
        .await?;
        let orders = month_sum(
            catalog,
            gold::MART_ORDER_REVENUE,
            &tag,
            "order_date",
            "net_cad_minor",
            days,
        )
        .await?;
        out.push(Answers {
            as_of: *t,
            publish: record.publish_number,
            cash_minor: Some(cash),
            orders_minor: Some(orders),
        });
    }
    Ok(out)
}

/// The story's table of [`two_answers`].
pub fn render_answers(month: &str, rows: &[Answers]) -> String {
    let mut out = format!(
        "{:<18} {:>22} {:>22}\n",
        "as of",
        format!("{month} cash"),
        format!("{month} orders")
    );
    out.push_str(&format!(
        "{:<18} {:>22} {:>22}\n",
        "", "(by processor date)", "(by order date)"
    ));
    for r in rows {
        let show = |v: Option<i64>| v.map(cad).unwrap_or_else(|| "not published".into());
        out.push_str(&format!(
            "{:<18} {:>22} {:>22}\n",
            r.as_of.format("%Y-%m-%d %H:%M"),
            show(r.cash_minor),
            show(r.orders_minor)
        ));
    }
    out
}
