//! The incremental finish: gold walked on from the silver snapshots its last finish consumed,
//! reading what changed since and the few partitions it touches, never all of silver.
//!
//! From the watermarks `gold.mart_order_revenue` records (every gold table of one finish
//! records the same), a finish reads:
//!
//! 1. the payment events `silver.payments` appended since, the order changes
//!    `silver.order_changes` appended since, and `silver.fx_rates` at both snapshots (a few
//!    dozen rows): the days whose USD rate is not what it was, up to the last day silver's
//!    payments and orders reach (their files' upper bounds);
//! 2. the changed orders as they are now (a bloom-filter lookup on `silver.orders`) and the
//!    events `gold.fct_payments` holds for them (a lookup on its `order_id`): an event whose
//!    order date or region is no longer its order's moves, and its processor date is rebuilt;
//!    a status change moves nothing;
//! 3. the touched processor dates — the new events', the moved events', the re-priced days —
//!    whole, from `silver.payments` (partitioned by that day) and the orders they name. These
//!    replace their partitions of `gold.fct_payments`, and their rows of `gold.mart_daily_cash`
//!    (read whole: a few rows a day);
//! 4. `gold.mart_order_revenue`: an order date whose rate changed, or that an event moved into
//!    or out of, is recomputed from all its events (its orders, read from their creation days,
//!    and their events, looked up); any other date a new event falls on is its old rows plus
//!    the new events (a paid order counts once: the lookup says whether it had a capture);
//! 5. `gold.fulfilment_queue`: the old queue without the changed orders, plus those now paid.
//!
//! What a run reads follows what arrived (new events, changes, re-priced days), not how much
//! history the tables hold. Anything that cannot be walked on from (no watermark, a silver
//! table rewritten rather than appended to, gold tables of different finishes) is an `Err`
//! with the reason, and the caller rebuilds every date.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::timezone::Tz;
use arrow_array::{Array, BooleanArray, Date32Array, RecordBatch};
use lake::iceberg::expr::{Predicate, Reference};
use lake::iceberg::spec::{Datum, Literal, PrimitiveLiteral, Struct, Transform};
use lake::{At, LakeError, Replace, Table};

use crate::error::{Result, ShackError};
use crate::silver::boil::{day_ranges, within};
use crate::silver::tables::{FX_RATES, ORDER_CHANGES, ORDERS, PAYMENTS};

use super::finish::{
    read_cash, read_facts, read_orders, read_payments, read_queue, read_rates, read_revenue,
};
use super::{
    CashRow, DAY_US, FCT_PAYMENTS, FULFILMENT_QUEUE, Fact, MART_DAILY_CASH, MART_ORDER_REVENUE,
    Order, QueueRow, Rates, RevenueRow, TABLES, inputs, local_day, props, rate_for, to_cad_minor,
    utc_day, watermark_key,
};

/// Which rows of a gold table a finish replaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    /// Every row.
    Whole,
    /// The rows of these dates (processor dates, or order dates) only.
    Dates(BTreeSet<i32>),
}

/// What a finish writes: the rows of each gold table and which rows they replace.
pub(super) struct Outputs {
    pub facts: Vec<Fact>,
    pub facts_scope: Scope,
    pub cash: Vec<CashRow>,
    pub cash_scope: Scope,
    pub revenue: Vec<RevenueRow>,
    pub revenue_scope: Scope,
    pub queue: Vec<QueueRow>,
    /// Order dates rebuilt, and how many each input touched.
    pub dates: BTreeSet<i32>,
    pub touched_by: BTreeMap<String, u64>,
    pub usd_events_without_rate: u64,
    pub events_without_order: u64,
    /// Rows read, by where from (for the report).
    pub read: BTreeMap<String, u64>,
}

/// The columns of `silver.payments` gold reads.
pub(super) const PAYMENT_COLUMNS: [&str; 13] = [
    "event_id",
    "event_type",
    "api_version",
    "charge_id",
    "refund_id",
    "order_id",
    "amount_minor",
    "currency",
    "created_at",
    "_landing_file",
    "_line",
    "_bronze_snapshot_id",
    "_arrived_at",
];

/// The columns of `silver.orders` gold reads.
pub(super) const ORDER_COLUMNS: [&str; 9] = [
    "order_id",
    "customer_id",
    "status",
    "currency",
    "total_minor",
    "ship_region",
    "created_at",
    "updated_at",
    "is_deleted",
];

/// Everything an incremental finish starts from.
pub(super) struct Inputs<'a> {
    pub silver: &'a BTreeMap<&'a str, Table>,
    pub gold: &'a BTreeMap<&'a str, Table>,
    /// The silver snapshots this finish consumes.
    pub consumed: &'a BTreeMap<String, i64>,
    pub rates: &'a Rates,
    pub branch: &'a str,
    pub through_us: i64,
    pub tz: &'a Tz,
}

fn lake_err(table: &str) -> impl Fn(LakeError) -> ShackError + '_ {
    move |e| ShackError::lake(table, e)
}

/// Walk gold on from its watermarks: `Ok(Err(why))` when it cannot be (every date is rebuilt
/// then), `Err` when reading failed.
pub(super) async fn walk_on(i: &Inputs<'_>) -> Result<std::result::Result<Outputs, String>> {
    // 1. Where the last finish left gold.
    let mut heads: BTreeMap<&str, i64> = BTreeMap::new();
    for name in TABLES {
        match i.gold[name].head(i.branch) {
            Some(id) => heads.insert(name, id),
            None => return Ok(Err(format!("{name} has no {} snapshot yet", i.branch))),
        };
    }
    let summary = |name: &str| -> Result<BTreeMap<String, String>> {
        Ok(i.gold[name]
            .snapshot(heads[name])
            .map_err(lake_err(name))?
            .summary)
    };
    let mart_summary = summary(MART_ORDER_REVENUE)?;
    let mut wm: BTreeMap<&str, Option<i64>> = BTreeMap::new();
    for input in inputs(MART_ORDER_REVENUE) {
        let key = watermark_key(input);
        let v = match mart_summary.get(&key) {
            None => None,
            Some(v) => match v.trim().parse::<i64>() {
                Ok(id) => Some(id),
                Err(_) => {
                    return Ok(Err(format!(
                        "{MART_ORDER_REVENUE} records {key} = {v:?}, not a snapshot id"
                    )));
                }
            },
        };
        if v.is_none() && i.consumed.contains_key(input) {
            return Ok(Err(format!(
                "{MART_ORDER_REVENUE} records no watermark of {input}"
            )));
        }
        wm.insert(input, v);
    }
    for name in [FCT_PAYMENTS, MART_DAILY_CASH, FULFILMENT_QUEUE] {
        let s = summary(name)?;
        for input in inputs(name) {
            let v = s.get(&watermark_key(input)).map(|v| v.trim().to_string());
            if v != wm[input].map(|id| id.to_string()) {
                return Ok(Err(format!(
                    "{name} and {MART_ORDER_REVENUE} record different snapshots of {input}"
                )));
            }
        }
    }
    let fct_summary = summary(FCT_PAYMENTS)?;
    let count = |key: &str| {
        fct_summary
            .get(key)
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let (Some(old_without_order), Some(old_without_rate)) = (
        count(props::EVENTS_WITHOUT_ORDER),
        count(props::USD_EVENTS_WITHOUT_RATE),
    ) else {
        return Ok(Err(format!(
            "{FCT_PAYMENTS} records no count of its events without an order or a rate"
        )));
    };
    let mut read: BTreeMap<String, u64> = BTreeMap::new();
    let mut note_read =
        |what: &str, n: usize| *read.entry(what.to_string()).or_default() += n as u64;

    // 2. What silver added since, and the days whose rate changed.
    let new_payments = match new_rows(
        &i.silver[PAYMENTS],
        i.branch,
        wm[PAYMENTS],
        i.consumed.get(PAYMENTS),
    )
    .await
    {
        Ok(b) => read_payments(&b)?,
        Err(why) => return Ok(Err(why)),
    };
    note_read("silver.payments (new)", new_payments.len());
    let change_batches = match new_rows(
        &i.silver[ORDER_CHANGES],
        i.branch,
        wm[ORDER_CHANGES],
        i.consumed.get(ORDER_CHANGES),
    )
    .await
    {
        Ok(b) => b,
        Err(why) => return Ok(Err(why)),
    };
    let mut changed: BTreeSet<String> = BTreeSet::new();
    for b in &change_batches {
        let ids = super::finish::strs(ORDER_CHANGES, b, "order_id")?;
        changed.extend((0..ids.len()).map(|k| ids.value(k).to_string()));
    }
    note_read("silver.order_changes (new)", changed.len());
    let old_rates = if wm[FX_RATES] == i.consumed.get(FX_RATES).copied() {
        i.rates.clone()
    } else {
        match wm[FX_RATES] {
            None => Rates::default(),
            Some(id) => {
                let t = &i.silver[FX_RATES];
                if t.snapshot(id).is_err() {
                    return Ok(Err(format!("{FX_RATES} no longer holds snapshot {id}")));
                }
                let batches = t
                    .scan(&At::Snapshot(id))
                    .await
                    .map_err(lake_err(FX_RATES))?;
                read_rates(&batches)?
            }
        }
    };
    // Rates as they were re-price nothing: no day is walked and no bound read. Otherwise a
    // re-priced day that no payment (processor date) and no order (order date) falls on
    // changes nothing: the days stop at the last one silver's payments and orders reach, not
    // at `through` (a `--through` centuries ahead would otherwise mark millions of empty days).
    let repriced = if old_rates == *i.rates {
        BTreeSet::new()
    } else {
        let horizon = utc_day(i.through_us).max(local_day(i.tz, i.through_us));
        let reach = match futures::try_join!(
            latest(&i.silver[PAYMENTS], i.consumed.get(PAYMENTS), "created_at"),
            latest(&i.silver[ORDERS], i.consumed.get(ORDERS), "created_at"),
        )? {
            (Some(p), Some(o)) => utc_day(p).max(local_day(i.tz, o)),
            _ => horizon,
        };
        changed_days(&old_rates, i.rates, horizon.min(reach))
    };

    // 3. The changed orders now, and the events gold holds for them: which moved. One lookup
    //    in gold for the changed orders' events and for whether the orders of new captures
    //    were already paid (step 5): each lookup reads every fct file's footer. The two
    //    lookups do not depend on each other and run at once (their files' reads and decodes
    //    overlap), and so do the whole reads of the small tables steps 5 and 6 use.
    let fct = &i.gold[FCT_PAYMENTS];
    let fct_at = At::Snapshot(heads[FCT_PAYMENTS]);
    let mut asked: BTreeSet<String> = new_payments
        .iter()
        .filter(|p| p.event_type == "capture")
        .map(|p| p.order_id.clone())
        .collect();
    asked.extend(changed.iter().cloned());
    let (found, mut held, small) = futures::try_join!(
        lookup_orders(i, &changed),
        lookup_facts(fct, &fct_at, &asked, None),
        read_small(i, &heads),
    )?;
    let mut orders: HashMap<String, Order> = HashMap::new();
    note_read("silver.orders (looked up)", found.len());
    orders.extend(found.into_iter().map(|o| (o.order_id.clone(), o)));
    let info = |orders: &HashMap<String, Order>, id: &str| -> Option<(i32, String)> {
        orders
            .get(id)
            .filter(|o| !o.is_deleted)
            .map(|o| (local_day(i.tz, o.created_at_us), o.ship_region.clone()))
    };
    note_read("gold.fct_payments (looked up)", held.len());
    let mut touched: BTreeSet<i32> = new_payments
        .iter()
        .map(|p| utc_day(p.created_at_us))
        .collect();
    let mut moved: BTreeSet<i32> = BTreeSet::new();
    for f in held
        .iter()
        .filter(|f| changed.contains(&f.payment.order_id))
    {
        let now = info(&orders, &f.payment.order_id);
        if now.as_ref().map(|n| n.0) != f.order_date
            || now.as_ref().map(|n| n.1.as_str()) != f.ship_region.as_deref()
        {
            touched.insert(f.processor_date);
            moved.extend(f.order_date);
            moved.extend(now.map(|n| n.0));
        }
    }
    touched.extend(
        repriced
            .iter()
            .copied()
            .filter(|d| *d <= utc_day(i.through_us)),
    );

    // 4. The touched processor dates, whole: silver's events and the orders they name.
    let payments = if touched.is_empty() {
        Vec::new()
    } else {
        let ranges = day_ranges(touched.iter().map(|d| i64::from(*d) * DAY_US));
        match (within("created_at", &ranges), i.consumed.get(PAYMENTS)) {
            (Some(filter), Some(id)) => {
                let (batches, _) = i.silver[PAYMENTS]
                    .scan_where(&At::Snapshot(*id), &PAYMENT_COLUMNS, filter)
                    .await
                    .map_err(lake_err(PAYMENTS))?;
                read_payments(&batches)?
            }
            _ => Vec::new(),
        }
    };
    note_read("silver.payments (touched days)", payments.len());
    let unknown: BTreeSet<String> = payments
        .iter()
        .map(|p| p.order_id.clone())
        .filter(|id| !orders.contains_key(id))
        .collect();
    let found = lookup_orders(i, &unknown).await?;
    note_read("silver.orders (looked up)", found.len());
    orders.extend(found.into_iter().map(|o| (o.order_id.clone(), o)));
    let days: HashMap<String, (i32, String)> = orders
        .keys()
        .filter_map(|id| info(&orders, id).map(|v| (id.clone(), v)))
        .collect();
    let new_facts = super::facts(payments, &days, i.rates);
    let old_facts = if touched.is_empty() {
        Vec::new()
    } else {
        let columns = super::column_names(FCT_PAYMENTS)?;
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let (batches, _) = fct
            .scan_where(&fct_at, &columns, dates_in("processor_date", &touched))
            .await
            .map_err(lake_err(FCT_PAYMENTS))?;
        read_facts(&batches)?
    };
    note_read("gold.fct_payments (touched days)", old_facts.len());

    // The counts the report carries, walked on by the touched days' old and new events.
    let without_order = |f: &[Fact]| f.iter().filter(|f| f.order_date.is_none()).count() as i64;
    let without_rate = |f: &[Fact]| {
        f.iter()
            .filter(|f| f.payment.currency == "usd" && f.fx_rate_micros.is_none())
            .count() as i64
    };
    let events_without_order =
        old_without_order - without_order(&old_facts) + without_order(&new_facts);
    let usd_events_without_rate =
        old_without_rate - without_rate(&old_facts) + without_rate(&new_facts);
    let (Ok(events_without_order), Ok(usd_events_without_rate)) = (
        u64::try_from(events_without_order),
        u64::try_from(usd_events_without_rate),
    ) else {
        return Ok(Err(format!(
            "{FCT_PAYMENTS}'s recorded counts of events without an order or a rate disagree \
             with its rows"
        )));
    };

    // Which events are new, and which moved (checked again here on every touched event).
    let old_by_id: HashMap<&str, &Fact> = old_facts
        .iter()
        .map(|f| (f.payment.event_id.as_str(), f))
        .collect();
    let new_ids: HashSet<&str> = new_facts
        .iter()
        .map(|f| f.payment.event_id.as_str())
        .collect();
    let mut added: Vec<&Fact> = Vec::new();
    for f in &new_facts {
        match old_by_id.get(f.payment.event_id.as_str()) {
            None => added.push(f),
            Some(old) => {
                if old.order_date != f.order_date || old.ship_region != f.ship_region {
                    moved.extend(old.order_date);
                    moved.extend(f.order_date);
                }
            }
        }
    }
    for old in &old_facts {
        if !new_ids.contains(old.payment.event_id.as_str()) {
            moved.extend(old.order_date);
        }
    }

    // 5. Order revenue: recomputed dates, and dates walked on by their new events.
    let order_horizon = local_day(i.tz, i.through_us);
    let mut full: BTreeSet<i32> = moved.clone();
    full.extend(repriced.iter().copied().filter(|d| *d <= order_horizon));
    let by_payments: BTreeSet<i32> = added.iter().filter_map(|f| f.order_date).collect();
    let walked: BTreeSet<i32> = by_payments.difference(&full).copied().collect();
    let all_dates: BTreeSet<i32> = full.union(&walked).copied().collect();
    let mart = &i.gold[MART_ORDER_REVENUE];
    // An unpartitioned mart was read whole (one small file): the dates walked on are its old
    // rows there, and its other dates' rows are kept as they were, to be written back whole. A
    // mart partitioned by order date (as an earlier version made it) has the dates' rows read
    // here and their partitions replaced.
    let (old_revenue, kept_revenue): (Vec<RevenueRow>, Vec<RevenueRow>) =
        if let Some(batches) = &small.revenue {
            let rows = read_revenue(batches)?;
            note_read("gold.mart_order_revenue", rows.len());
            rows.into_iter()
                .partition(|r| all_dates.contains(&r.order_date))
        } else if all_dates.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let columns = super::column_names(MART_ORDER_REVENUE)?;
            let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
            let (batches, _) = mart
                .scan_where(
                    &At::Snapshot(heads[MART_ORDER_REVENUE]),
                    &columns,
                    dates_in("order_date", &all_dates),
                )
                .await
                .map_err(lake_err(MART_ORDER_REVENUE))?;
            (read_revenue(&batches)?, Vec::new())
        };
    let mut revenue =
        recompute_dates(i, &full, &new_facts, &touched, fct, &fct_at, &mut note_read).await?;
    let mut groups: BTreeMap<(i32, String), RevenueRow> = old_revenue
        .iter()
        .filter(|r| walked.contains(&r.order_date))
        .map(|r| ((r.order_date, r.ship_region.clone()), r.clone()))
        .collect();
    let capture_orders: BTreeSet<String> = added
        .iter()
        .filter(|f| f.is_capture() && f.order_date.is_some_and(|d| walked.contains(&d)))
        .map(|f| f.payment.order_id.clone())
        .collect();
    // New events are the new payments, whose orders step 3 asked for; any other is asked now.
    let unasked: BTreeSet<String> = capture_orders.difference(&asked).cloned().collect();
    held.extend(lookup_facts(fct, &fct_at, &unasked, None).await?);
    let paid_before: HashSet<String> = held
        .into_iter()
        .filter(|f| {
            capture_orders.contains(&f.payment.order_id)
                && f.is_capture()
                && f.order_date
                    .is_some_and(|d| rate_for(i.rates, &f.payment.currency, d).is_some())
        })
        .map(|f| f.payment.order_id)
        .collect();
    let mut counted: HashSet<&str> = HashSet::new();
    for f in &added {
        let (Some(day), Some(region)) = (f.order_date, f.ship_region.as_deref()) else {
            continue;
        };
        if !walked.contains(&day) {
            continue;
        }
        let usd = i.rates.on_or_before(day);
        let r = groups
            .entry((day, region.to_string()))
            .or_insert_with(|| RevenueRow {
                order_date: day,
                ship_region: region.to_string(),
                fx_rate_date: usd.map(|u| u.0),
                fx_rate_micros: usd.map(|u| u.1),
                ..RevenueRow::default()
            });
        let Some((_, rate)) = rate_for(i.rates, &f.payment.currency, day) else {
            continue;
        };
        let cad = to_cad_minor(f.signed_minor, rate);
        if f.is_capture() {
            let order = f.payment.order_id.as_str();
            if !paid_before.contains(order) && counted.insert(order) {
                r.paid_orders += 1;
            }
            r.gross_cad_minor += cad;
        } else {
            r.refunds_cad_minor -= cad;
        }
        r.net_cad_minor += cad;
    }
    revenue.extend(groups.into_values());
    revenue.extend(kept_revenue);
    revenue.sort_by(|a, b| (a.order_date, &a.ship_region).cmp(&(b.order_date, &b.ship_region)));

    // Report only dates that hold rows, before or after.
    let held_dates: BTreeSet<i32> = old_revenue
        .iter()
        .chain(revenue.iter())
        .map(|r| r.order_date)
        .filter(|d| all_dates.contains(d))
        .collect();
    let mut touched_by: BTreeMap<String, u64> = BTreeMap::new();
    for (why, set) in [
        ("payments", &by_payments),
        ("orders", &moved),
        ("fx_rates", &repriced),
    ] {
        let n = set.intersection(&held_dates).count() as u64;
        if n > 0 {
            touched_by.insert(why.to_string(), n);
        }
    }

    // 6. The queue: the old one without the changed orders, and those now paid.
    let mut waiting: Vec<Order> = read_queue(&small.queue)?
        .into_iter()
        .filter(|o| !changed.contains(&o.order_id))
        .collect();
    note_read("gold.fulfilment_queue", waiting.len());
    waiting.extend(changed.iter().filter_map(|id| orders.get(id)).cloned());
    let queue = super::fulfilment_queue(&waiting, i.through_us, i.tz);

    // Cash as revenue: a mart partitioned by processor date replaces the touched dates'
    // partitions; one that is not is read whole and written back whole.
    let mut cash = super::daily_cash(&new_facts);
    let cash_scope = if let Some(batches) = &small.cash {
        let rows = read_cash(batches)?;
        note_read("gold.mart_daily_cash", rows.len());
        cash.extend(
            rows.into_iter()
                .filter(|r| !touched.contains(&r.processor_date)),
        );
        cash.sort_by(|a, b| (a.processor_date, &a.currency).cmp(&(b.processor_date, &b.currency)));
        Scope::Whole
    } else {
        Scope::Dates(touched.clone())
    };
    let dates: BTreeSet<i32> = all_dates.intersection(&held_dates).copied().collect();
    let revenue_scope = if small.revenue.is_some() {
        Scope::Whole
    } else {
        Scope::Dates(dates.clone())
    };
    Ok(Ok(Outputs {
        facts: new_facts,
        facts_scope: Scope::Dates(touched),
        cash,
        cash_scope,
        revenue,
        revenue_scope,
        queue,
        dates,
        touched_by,
        usd_events_without_rate,
        events_without_order,
        read: read.into_iter().filter(|(_, n)| *n > 0).collect(),
    }))
}

/// The revenue rows of order dates `full`, from all their events: their live orders (read
/// from their creation days in `silver.orders`), those orders' events on the touched
/// processor dates (`new_facts`, as this run built them) and on every other date (looked up in
/// `gold.fct_payments`, where they did not change).
async fn recompute_dates(
    i: &Inputs<'_>,
    full: &BTreeSet<i32>,
    new_facts: &[Fact],
    touched: &BTreeSet<i32>,
    fct: &Table,
    fct_at: &At,
    note_read: &mut impl FnMut(&str, usize),
) -> Result<Vec<RevenueRow>> {
    let Some(orders_id) = i.consumed.get(ORDERS) else {
        return Ok(Vec::new());
    };
    if full.is_empty() {
        return Ok(Vec::new());
    }
    // A local day lies within the UTC day before it, itself and the one after.
    let ranges = day_ranges(
        full.iter()
            .flat_map(|d| (i64::from(*d) - 1..=i64::from(*d) + 1).map(|u| u * DAY_US)),
    );
    let Some(filter) = within("created_at", &ranges) else {
        return Ok(Vec::new());
    };
    let (batches, _) = i.silver[ORDERS]
        .scan_where(&At::Snapshot(*orders_id), &ORDER_COLUMNS, filter)
        .await
        .map_err(lake_err(ORDERS))?;
    let ids: BTreeSet<String> = read_orders(&batches)?
        .into_iter()
        .filter(|o| !o.is_deleted && full.contains(&local_day(i.tz, o.created_at_us)))
        .map(|o| o.order_id)
        .collect();
    note_read("silver.orders (recomputed dates)", ids.len());
    let elsewhere = if touched.is_empty() {
        None
    } else {
        Some(dates_in("processor_date", touched).negate())
    };
    let mut facts: Vec<Fact> = lookup_facts(fct, fct_at, &ids, elsewhere)
        .await?
        .into_iter()
        .filter(|f| !touched.contains(&f.processor_date))
        .collect();
    note_read("gold.fct_payments (recomputed dates)", facts.len());
    facts.extend(
        new_facts
            .iter()
            .filter(|f| f.order_date.is_some_and(|d| full.contains(&d)))
            .cloned(),
    );
    Ok(super::order_revenue(&facts, i.rates, Some(full)))
}

/// The days through `horizon` whose latest rate on or before them differs between `old` and
/// `new`.
pub(super) fn changed_days(old: &Rates, new: &Rates, horizon: i32) -> BTreeSet<i32> {
    let first = old
        .by_date
        .first()
        .into_iter()
        .chain(new.by_date.first())
        .map(|r| r.0)
        .min();
    let Some(first) = first else {
        return BTreeSet::new();
    };
    (first..=horizon)
        .filter(|d| old.on_or_before(*d) != new.on_or_before(*d))
        .collect()
}

/// The latest value of the timestamp `column` of `table` at snapshot `at`, from its data files'
/// upper bounds (manifests only, no data file read); `None` when there is no snapshot, no data
/// file, or a file that records no bound for the column.
async fn latest(table: &Table, at: Option<&i64>, column: &str) -> Result<Option<i64>> {
    let Some(at) = at else {
        return Ok(None);
    };
    let Some(field) = table.metadata().current_schema().field_by_name(column) else {
        return Ok(None);
    };
    let name = table.name().to_string();
    let files = table
        .data_files(&At::Snapshot(*at))
        .await
        .map_err(lake_err(&name))?;
    let mut most: Option<i64> = None;
    for f in &files {
        match f.upper_bounds().get(&field.id).map(|d| d.literal()) {
            Some(PrimitiveLiteral::Long(us)) => most = Some(most.map_or(*us, |m| m.max(*us))),
            _ => return Ok(None),
        }
    }
    Ok(most)
}

/// `column` (a date) is one of `dates`.
pub(super) fn dates_in(column: &str, dates: &BTreeSet<i32>) -> Predicate {
    Reference::new(column).is_in(dates.iter().map(|d| Datum::date(*d)))
}

/// The gold tables a walk reads whole: the queue always, each mart when it is unpartitioned
/// (`None`: partitioned by its date, as an earlier version made it, and read by date).
struct Small {
    queue: Vec<RecordBatch>,
    cash: Option<Vec<RecordBatch>>,
    revenue: Option<Vec<RecordBatch>>,
}

/// Read [`Small`]'s tables at the heads the walk goes on from, all at once.
async fn read_small(i: &Inputs<'_>, heads: &BTreeMap<&str, i64>) -> Result<Small> {
    let whole = |name: &'static str| async move {
        i.gold[name]
            .scan(&At::Snapshot(heads[name]))
            .await
            .map_err(lake_err(name))
    };
    let unless_by = |name: &'static str, column: &'static str| async move {
        if partitioned_by(&i.gold[name], column) {
            Ok(None)
        } else {
            whole(name).await.map(Some)
        }
    };
    let (queue, cash, revenue) = futures::try_join!(
        whole(FULFILMENT_QUEUE),
        unless_by(MART_DAILY_CASH, "processor_date"),
        unless_by(MART_ORDER_REVENUE, "order_date"),
    )?;
    Ok(Small {
        queue,
        cash,
        revenue,
    })
}

/// Whether `table`'s default partition spec is `column`'s identity alone.
pub(super) fn partitioned_by(table: &Table, column: &str) -> bool {
    let meta = table.metadata();
    let spec = meta.default_partition_spec();
    matches!(spec.fields(), [f] if f.transform == Transform::Identity
        && meta.current_schema().field_by_id(f.source_id).is_some_and(|s| s.name == column))
}

/// The rows of a gold table in `dates` of `column`: whole partitions when the table is
/// partitioned by that column (as a finish creates it), else the rows themselves (a table
/// made before it was partitioned: its files holding such rows are rewritten).
pub(super) fn replace_dates(table: &Table, column: &str, dates: &BTreeSet<i32>) -> Replace {
    if partitioned_by(table, column) {
        return Replace::Partitions(
            dates
                .iter()
                .map(|d| Struct::from_iter([Some(Literal::date(*d))]))
                .collect(),
        );
    }
    let (name, column, dates) = (table.name().to_string(), column.to_string(), dates.clone());
    Replace::Rows(Arc::new(move |b: &RecordBatch| {
        let c = b
            .column_by_name(&column)
            .and_then(|c| c.as_any().downcast_ref::<Date32Array>())
            .ok_or_else(|| LakeError::Schema {
                table: name.clone(),
                detail: format!("no date column {column:?}"),
            })?;
        Ok(c.iter()
            .map(|v| Some(v.is_some_and(|d| dates.contains(&d))))
            .collect::<BooleanArray>())
    }))
}

/// What an append-only silver table's branch added after `after` through `through`;
/// `Err(why)` when it was not only appended to.
pub(super) async fn new_rows(
    table: &Table,
    branch: &str,
    after: Option<i64>,
    through: Option<&i64>,
) -> std::result::Result<Vec<RecordBatch>, String> {
    let Some(through) = through.copied() else {
        return Ok(Vec::new());
    };
    if after == Some(through) {
        return Ok(Vec::new());
    }
    let inc = table
        .read_incremental(branch, after, Some(through))
        .await
        .map_err(|e| e.to_string())?;
    Ok(inc.batches().cloned().collect())
}

/// The rows of `silver.orders` (at the consumed snapshot) of these order ids.
async fn lookup_orders(i: &Inputs<'_>, ids: &BTreeSet<String>) -> Result<Vec<Order>> {
    let Some(id) = i.consumed.get(ORDERS) else {
        return Ok(Vec::new());
    };
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let keys: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let found = i.silver[ORDERS]
        .lookup(&At::Snapshot(*id), "order_id", &keys, &ORDER_COLUMNS, None)
        .await
        .map_err(lake_err(ORDERS))?;
    read_orders(&found.batches)
}

/// The events of `gold.fct_payments` at `at` of these order ids (among the files `filter` may
/// hold).
async fn lookup_facts(
    fct: &Table,
    at: &At,
    ids: &BTreeSet<String>,
    filter: Option<Predicate>,
) -> Result<Vec<Fact>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let keys: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let columns = super::column_names(FCT_PAYMENTS)?;
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let found = fct
        .lookup(at, "order_id", &keys, &columns, filter)
        .await
        .map_err(lake_err(FCT_PAYMENTS))?;
    read_facts(&found.batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_rate_reprices_the_days_up_to_the_next_and_a_correction_its_own() {
        let old = Rates::new(vec![(10, 1_370_000), (13, 1_380_000)]);
        // Monday's rate (day 16) arrives: Monday through the horizon.
        let new = Rates::new(vec![(10, 1_370_000), (13, 1_380_000), (16, 1_390_000)]);
        assert_eq!(changed_days(&old, &new, 18), BTreeSet::from([16, 17, 18]));
        // Friday's (day 10) is corrected: Friday through Sunday.
        let fixed = Rates::new(vec![(10, 1_371_000), (13, 1_380_000)]);
        assert_eq!(changed_days(&old, &fixed, 18), BTreeSet::from([10, 11, 12]));
        assert!(changed_days(&old, &old, 18).is_empty());
        assert!(changed_days(&Rates::default(), &Rates::default(), 18).is_empty());
        // The first rate ever: every day from it.
        assert_eq!(
            changed_days(&Rates::default(), &Rates::new(vec![(17, 1)]), 18),
            BTreeSet::from([17, 18])
        );
    }
}
