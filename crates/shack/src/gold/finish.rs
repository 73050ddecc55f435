//! One finish: read silver at one catalog version, build the four gold tables, replace the
//! touched order dates of `gold.mart_order_revenue`, and commit every gold table in one catalog
//! version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::str::FromStr;

use arrow_array::timezone::Tz;
use arrow_array::{
    Array, BooleanArray, Date32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use lake::{At, Catalog, CatalogVersion, LakeError, Literal, Replace, Struct, Table, TableChange};
use sugarbush::Progress;

use crate::error::{Result, ShackError};
use crate::silver::tables::{FX_RATES, ORDER_CHANGES, ORDERS, PAYMENTS};

use super::{
    FCT_PAYMENTS, FinishOptions, FinishReport, GoldTableReport, MART_DAILY_CASH,
    MART_ORDER_REVENUE, Order, Payment, Rates, TABLES, date_of, inputs, local_day, props,
    watermark_key,
};

/// The silver tables a finish reads.
const SILVER: [&str; 4] = [PAYMENTS, ORDERS, ORDER_CHANGES, FX_RATES];

/// Build gold from silver on `options.branch`: see the module docs of [`crate::gold`].
///
/// Every gold table gets a snapshot, all in one catalog commit of its own (a [`crate::run`]
/// commits gold together with the boil's silver instead). On any error nothing was committed.
pub async fn finish(
    catalog: &Catalog,
    options: &FinishOptions,
    progress: &(dyn Progress + Sync),
) -> Result<FinishReport> {
    let StagedFinish {
        mut report,
        changes,
        message,
        properties,
    } = stage_finish(catalog, options, &[], progress).await?;
    progress.message("committing");
    let committed = crate::layer::commit(
        catalog,
        changes,
        "finish",
        &message,
        properties,
        "the finish's commit",
    )
    .await?;
    progress.message("committed");
    report.catalog_version = Some(committed.version);
    Ok(report)
}

/// A finish staged and not committed: one change per gold table.
pub type StagedFinish = crate::layer::Staged<FinishReport>;

/// Everything [`finish`] does but the commit. `silver_staged`: silver changes staged and not
/// yet committed (a boil's, see [`crate::silver::stage_boil`]); gold is built from silver as
/// they leave it, and its watermarks name their snapshots — commit both in one catalog version.
pub async fn stage_finish(
    catalog: &Catalog,
    options: &FinishOptions,
    silver_staged: &[TableChange],
    progress: &(dyn Progress + Sync),
) -> Result<StagedFinish> {
    let tz = Tz::from_str(&options.business_time_zone).map_err(|e| ShackError::Settings {
        file: PathBuf::new(),
        key: Some("business_time_zone".into()),
        detail: format!("{:?} is not a time zone: {e}", options.business_time_zone),
    })?;
    let branch = options.branch.as_str();
    let finish_id = uuid::Uuid::now_v7().to_string();

    // 1. Silver and gold at one catalog version; gold created on first use.
    progress.message("opening tables");
    let first = catalog
        .head()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    for name in SILVER {
        if !first.tables.contains_key(name) {
            return Err(ShackError::NoSilver {
                table: name.to_string(),
            });
        }
    }
    let (head, created_tables) =
        crate::layer::open_tables(catalog, &TABLES, super::schema, super::partitioning, |_| {
            Default::default()
        })
        .await?;
    let mut silver: BTreeMap<&str, Table> = BTreeMap::new();
    for name in SILVER {
        silver.insert(name, open(catalog, &head, name).await?);
    }
    for change in silver_staged {
        let name = change.table().to_string();
        if let Some(slot) = SILVER.iter().find(|n| **n == name)
            && let Some(view) = catalog
                .staged_view(change)
                .map_err(|e| ShackError::lake(&name, e))?
        {
            silver.insert(slot, view);
        }
    }
    let mut gold: BTreeMap<&str, Table> = BTreeMap::new();
    for name in TABLES {
        gold.insert(name, open(catalog, &head, name).await?);
    }
    let consumed: BTreeMap<String, i64> = SILVER
        .iter()
        .filter_map(|n| silver[n].head(branch).map(|id| (n.to_string(), id)))
        .collect();
    if !consumed.contains_key(PAYMENTS) {
        return Err(ShackError::NoSilver {
            table: format!("{PAYMENTS} (branch {branch})"),
        });
    }

    // 2. All of silver that gold needs, at the consumed snapshots.
    progress.message("reading silver");
    let payments = read_payments(&scan_at(&silver[PAYMENTS], consumed.get(PAYMENTS)).await?)?;
    let orders = read_orders(&scan_at(&silver[ORDERS], consumed.get(ORDERS)).await?)?;
    let rates = read_rates(&scan_at(&silver[FX_RATES], consumed.get(FX_RATES)).await?)?;
    let days = super::order_days(&orders, &tz);
    let facts = super::facts(payments, &days, &rates);
    let cash = super::daily_cash(&facts);
    let queue = super::fulfilment_queue(&orders, options.through.timestamp_micros(), &tz);
    let usd_events_without_rate = facts
        .iter()
        .filter(|f| f.payment.currency == "usd" && f.fx_rate_micros.is_none())
        .count() as u64;
    let events_without_order = facts.iter().filter(|f| f.order_date.is_none()).count() as u64;

    // 3. Which order dates the new silver data touches (or every date).
    progress.message("finding the order dates that changed");
    let mart = &gold[MART_ORDER_REVENUE];
    let mut rebuilt_because = None;
    let mut touched_by: BTreeMap<String, u64> = BTreeMap::new();
    let touched: Option<BTreeSet<i32>> = if options.replay {
        None
    } else {
        match touched_dates(mart, &silver, &consumed, branch, &days, &rates, &facts, &tz).await {
            Ok((dates, by)) => {
                touched_by = by;
                Some(dates)
            }
            Err(why) => {
                rebuilt_because = Some(format!("{why}; every order date was rebuilt"));
                None
            }
        }
    };
    let revenue = super::order_revenue(&facts, &rates, touched.as_ref());
    let all_dates: BTreeSet<i32> = match &touched {
        Some(t) => t.clone(),
        None => facts.iter().filter_map(|f| f.order_date).collect(),
    };
    let mode = if options.replay {
        "replay"
    } else {
        "incremental"
    };

    // 4. Stage one snapshot per gold table and commit them as one.
    progress.message("staging");
    let mut staged: Vec<TableChange> = Vec::new();
    let mut reports = Vec::new();
    for name in TABLES {
        let mut properties = BTreeMap::from([
            (props::FINISH_ID.to_string(), finish_id.clone()),
            (props::MODE.to_string(), mode.to_string()),
            (props::THROUGH.to_string(), options.through.to_rfc3339()),
        ]);
        for input in inputs(name) {
            if let Some(id) = consumed.get(input) {
                properties.insert(watermark_key(input), id.to_string());
            }
        }
        let batch = match name {
            FCT_PAYMENTS => super::fct_payments_batch(&facts)?,
            MART_DAILY_CASH => super::daily_cash_batch(&cash)?,
            MART_ORDER_REVENUE => super::order_revenue_batch(&revenue)?,
            _ => super::fulfilment_queue_batch(&queue)?,
        };
        let rows = batch.num_rows() as u64;
        let batches: Vec<RecordBatch> = if rows > 0 { vec![batch] } else { Vec::new() };
        let t = &gold[name];
        let lake_err = |e| ShackError::lake(name, e);
        let whole = name != MART_ORDER_REVENUE || touched.is_none();
        let change = if whole {
            t.stage_replace(branch, &Replace::All, &batches, properties)
                .await
                .map_err(lake_err)?
        } else if all_dates.is_empty() {
            // Nothing touched: a snapshot still carries the new watermarks.
            t.stage_append(branch, &[], properties)
                .await
                .map_err(lake_err)?
        } else {
            let partitions: Vec<Struct> = all_dates
                .iter()
                .map(|d| Struct::from_iter([Some(Literal::date(*d))]))
                .collect();
            t.stage_replace(
                branch,
                &Replace::Partitions(partitions),
                &batches,
                properties,
            )
            .await
            .map_err(lake_err)?
        };
        reports.push(table_report(name, &change, rows, whole)?);
        staged.push(change);
    }

    let message = format!(
        "finish ({mode}) of {} on {branch} as of {}: {} order dates rebuilt",
        TABLES.join(", "),
        options.through.to_rfc3339(),
        all_dates.len()
    );
    let properties = BTreeMap::from([
        (props::FINISH_ID.to_string(), finish_id.clone()),
        ("sugarshack.branch".to_string(), branch.to_string()),
    ]);
    let report = FinishReport {
        finish_id,
        branch: branch.to_string(),
        through: options.through,
        mode: mode.to_string(),
        rebuilt_because,
        created_tables,
        silver: consumed,
        dates_rebuilt: all_dates.iter().map(|d| date_of(*d)).collect(),
        touched_by,
        usd_events_without_rate,
        events_without_order,
        tables: reports,
        catalog_version: None,
    };
    Ok(StagedFinish {
        report,
        changes: staged,
        message,
        properties,
    })
}

/// Order dates touched, and how many each input touched.
type Touched = (BTreeSet<i32>, BTreeMap<String, u64>);

/// The order dates touched since `gold.mart_order_revenue`'s watermarks, with how many each
/// input touched; `Err(why)` when they cannot be walked on from (every date is rebuilt then).
#[allow(clippy::too_many_arguments)]
async fn touched_dates(
    mart: &Table,
    silver: &BTreeMap<&str, Table>,
    consumed: &BTreeMap<String, i64>,
    branch: &str,
    days: &std::collections::HashMap<String, (i32, String)>,
    rates: &Rates,
    facts: &[super::Fact],
    tz: &Tz,
) -> std::result::Result<Touched, String> {
    let Some(head) = mart.head(branch) else {
        return Err(format!("{MART_ORDER_REVENUE} has no {branch} snapshot yet"));
    };
    let summary = mart.snapshot(head).map_err(|e| e.to_string())?.summary;
    let mut wm: BTreeMap<&str, Option<i64>> = BTreeMap::new();
    for input in inputs(MART_ORDER_REVENUE) {
        let key = watermark_key(input);
        let v = match summary.get(&key) {
            None => None,
            Some(v) => Some(v.trim().parse::<i64>().map_err(|_| {
                format!("{MART_ORDER_REVENUE} records {key} = {v:?}, not a snapshot id")
            })?),
        };
        if v.is_none() && consumed.contains_key(input) {
            return Err(format!(
                "{MART_ORDER_REVENUE} records no watermark of {input}"
            ));
        }
        wm.insert(input, v);
    }
    let mut dates = BTreeSet::new();
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen: BTreeSet<(&str, i32)> = BTreeSet::new();
    let mut note = |dates: &mut BTreeSet<i32>, why: &'static str, d: i32| {
        dates.insert(d);
        if seen.insert((why, d)) {
            *by.entry(why.to_string()).or_default() += 1;
        }
    };
    // New payment events: their orders' dates.
    for batch in new_rows(
        &silver[PAYMENTS],
        branch,
        wm[PAYMENTS],
        consumed.get(PAYMENTS),
    )
    .await?
    {
        let ids = strs(PAYMENTS, &batch, "order_id").map_err(|e| e.to_string())?;
        for i in 0..ids.len() {
            if let Some((d, _)) = days.get(ids.value(i)) {
                note(&mut dates, "payments", *d);
            }
        }
    }
    // New order changes (a late order, a status or region change, a delete): their dates.
    for batch in new_rows(
        &silver[ORDER_CHANGES],
        branch,
        wm[ORDER_CHANGES],
        consumed.get(ORDER_CHANGES),
    )
    .await?
    {
        let created = stamps(ORDER_CHANGES, &batch, "created_at").map_err(|e| e.to_string())?;
        for i in 0..created.len() {
            note(&mut dates, "orders", local_day(tz, created.value(i)));
        }
    }
    // A new or corrected rate: the dates whose order-date rate is not what it was.
    if wm[FX_RATES] != consumed.get(FX_RATES).copied() {
        let old = match wm[FX_RATES] {
            None => Rates::default(),
            Some(id) => {
                let t = &silver[FX_RATES];
                if t.snapshot(id).is_err() {
                    return Err(format!("{FX_RATES} no longer holds snapshot {id}"));
                }
                let batches = t.scan(&At::Snapshot(id)).await.map_err(|e| e.to_string())?;
                read_rates(&batches).map_err(|e| e.to_string())?
            }
        };
        let candidates: BTreeSet<i32> = facts.iter().filter_map(|f| f.order_date).collect();
        for d in candidates {
            if old.on_or_before(d) != rates.on_or_before(d) {
                note(&mut dates, "fx_rates", d);
            }
        }
    }
    Ok((dates, by))
}

/// What an append-only silver table's branch added after `after` through `through`.
async fn new_rows(
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

async fn open(catalog: &Catalog, head: &CatalogVersion, name: &str) -> Result<Table> {
    catalog
        .table_in(head, name)
        .await
        .map_err(|e| ShackError::lake(name, e))
}

async fn scan_at(table: &Table, snapshot: Option<&i64>) -> Result<Vec<RecordBatch>> {
    match snapshot {
        None => Ok(Vec::new()),
        Some(id) => table
            .scan(&At::Snapshot(*id))
            .await
            .map_err(|e| ShackError::lake(table.name().to_string(), e)),
    }
}

fn table_report(
    name: &str,
    change: &TableChange,
    rows: u64,
    whole: bool,
) -> Result<GoldTableReport> {
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
    Ok(GoldTableReport {
        table: name.to_string(),
        snapshot_id: id,
        operation: summary.operation.as_str().to_string(),
        rows,
        total_rows: summary
            .additional_properties
            .get("total-records")
            .and_then(|v| v.parse().ok()),
        rewritten_whole: whole,
    })
}

// ---- reading silver rows ---------------------------------------------------------------------

fn bad(table: &str, detail: String) -> ShackError {
    ShackError::BadTable {
        table: table.to_string(),
        detail,
    }
}

fn col<'a, T: 'static>(table: &str, b: &'a RecordBatch, name: &str, nulls: bool) -> Result<&'a T> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| bad(table, format!("no column {name:?}")))?;
    if !nulls && c.null_count() > 0 {
        return Err(bad(table, format!("column {name:?} holds nulls")));
    }
    c.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| bad(table, format!("column {name:?} is {}", c.data_type())))
}

fn strs<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    col(table, b, name, false)
}

fn longs<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a Int64Array> {
    col(table, b, name, false)
}

fn stamps<'a>(
    table: &str,
    b: &'a RecordBatch,
    name: &str,
) -> Result<&'a TimestampMicrosecondArray> {
    col(table, b, name, false)
}

/// The rows of `silver.payments`.
pub(crate) fn read_payments(batches: &[RecordBatch]) -> Result<Vec<Payment>> {
    let t = PAYMENTS;
    let mut out = Vec::new();
    for b in batches {
        let event_id = strs(t, b, "event_id")?;
        let event_type = strs(t, b, "event_type")?;
        let api = strs(t, b, "api_version")?;
        let charge = strs(t, b, "charge_id")?;
        let refund: &StringArray = col(t, b, "refund_id", true)?;
        let order = strs(t, b, "order_id")?;
        let amount = longs(t, b, "amount_minor")?;
        let currency = strs(t, b, "currency")?;
        let created = stamps(t, b, "created_at")?;
        let file = strs(t, b, "_landing_file")?;
        let line = longs(t, b, "_line")?;
        let snap = longs(t, b, "_bronze_snapshot_id")?;
        let arrived = stamps(t, b, "_arrived_at")?;
        for i in 0..b.num_rows() {
            out.push(Payment {
                event_id: event_id.value(i).to_string(),
                event_type: event_type.value(i).to_string(),
                api_version: api.value(i).to_string(),
                charge_id: charge.value(i).to_string(),
                refund_id: (!refund.is_null(i)).then(|| refund.value(i).to_string()),
                order_id: order.value(i).to_string(),
                amount_minor: amount.value(i),
                currency: currency.value(i).to_string(),
                created_at_us: created.value(i),
                landing_file: file.value(i).to_string(),
                line: line.value(i),
                bronze_snapshot_id: snap.value(i),
                arrived_us: arrived.value(i),
            });
        }
    }
    Ok(out)
}

/// The rows of `silver.orders`.
pub(crate) fn read_orders(batches: &[RecordBatch]) -> Result<Vec<Order>> {
    let t = ORDERS;
    let mut out = Vec::new();
    for b in batches {
        let id = strs(t, b, "order_id")?;
        let customer = strs(t, b, "customer_id")?;
        let status = strs(t, b, "status")?;
        let currency = strs(t, b, "currency")?;
        let total = longs(t, b, "total_minor")?;
        let region = strs(t, b, "ship_region")?;
        let created = stamps(t, b, "created_at")?;
        let updated = stamps(t, b, "updated_at")?;
        let deleted: &BooleanArray = col(t, b, "is_deleted", false)?;
        for i in 0..b.num_rows() {
            out.push(Order {
                order_id: id.value(i).to_string(),
                customer_id: customer.value(i).to_string(),
                status: status.value(i).to_string(),
                currency: currency.value(i).to_string(),
                total_minor: total.value(i),
                ship_region: region.value(i).to_string(),
                created_at_us: created.value(i),
                updated_at_us: updated.value(i),
                is_deleted: deleted.value(i),
            });
        }
    }
    Ok(out)
}

/// The USD→CAD rates of `silver.fx_rates`.
pub(crate) fn read_rates(batches: &[RecordBatch]) -> Result<Rates> {
    let t = FX_RATES;
    let mut out = Vec::new();
    for b in batches {
        let date: &Date32Array = col(t, b, "rate_date", false)?;
        let base = strs(t, b, "base")?;
        let quote = strs(t, b, "quote")?;
        let rate = longs(t, b, "rate_micros")?;
        for i in 0..b.num_rows() {
            if base.value(i) == "USD" && quote.value(i) == "CAD" {
                out.push((date.value(i), rate.value(i)));
            }
        }
    }
    Ok(Rates::new(out))
}
