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
use futures::StreamExt;
use lake::{At, Catalog, LakeError, Replace, Table, TableChange};
use sugarbush::Progress;

use crate::error::{Result, ShackError};
use crate::silver::tables::{FX_RATES, ORDER_CHANGES, ORDERS, PAYMENTS};

use super::delta::{self, Scope};
use super::{
    CashRow, FCT_PAYMENTS, Fact, FinishOptions, FinishReport, GoldTableReport, MART_DAILY_CASH,
    MART_ORDER_REVENUE, Order, Payment, Rates, RevenueRow, TABLES, date_of, inputs, props,
    watermark_key,
};

/// The silver tables a finish reads.
const SILVER: [&str; 4] = [PAYMENTS, ORDERS, ORDER_CHANGES, FX_RATES];

/// Build gold from silver on `options.branch`: see the module docs of [`crate::gold`].
///
/// Every gold table gets a snapshot, all in one catalog commit of its own (a [`crate::run`]
/// commits gold together with the boil's silver instead). On any error nothing was committed;
/// the finish marks its work in the catalog (`finish-<uuid>`), so the next run or tap sweeps
/// what a failed one wrote.
pub async fn finish(
    catalog: &Catalog,
    options: &FinishOptions,
    progress: &(dyn Progress + Sync),
) -> Result<FinishReport> {
    crate::run::marked(
        catalog,
        crate::run::FINISH_MARK,
        finish_unmarked(catalog, options, progress),
    )
    .await
}

async fn finish_unmarked(
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
    let (head, created_tables) = crate::layer::open_tables(
        catalog,
        &TABLES,
        super::schema,
        super::partitioning,
        super::properties,
    )
    .await?;
    let mut silver: BTreeMap<&str, Table> = SILVER
        .into_iter()
        .zip(crate::layer::open_all(catalog, &head, &SILVER).await?)
        .collect();
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
    let gold: BTreeMap<&str, Table> = TABLES
        .into_iter()
        .zip(crate::layer::open_all(catalog, &head, &TABLES).await?)
        .collect();
    let consumed: BTreeMap<String, i64> = SILVER
        .iter()
        .filter_map(|n| silver[n].head(branch).map(|id| (n.to_string(), id)))
        .collect();
    if !consumed.contains_key(PAYMENTS) {
        return Err(ShackError::NoSilver {
            table: format!("{PAYMENTS} (branch {branch})"),
        });
    }

    // 2. Walk gold on from its watermarks, or build it from all of silver.
    let rates = read_rates(&scan_at(&silver[FX_RATES], consumed.get(FX_RATES)).await?)?;
    let through_us = options.through.timestamp_micros();
    let mut rebuilt_because = None;
    let out = if options.replay {
        None
    } else {
        progress.message("reading what changed in silver");
        let inputs = delta::Inputs {
            silver: &silver,
            gold: &gold,
            consumed: &consumed,
            rates: &rates,
            branch,
            through_us,
            tz: &tz,
        };
        match delta::walk_on(&inputs).await? {
            Ok(out) => Some(out),
            Err(why) => {
                rebuilt_because = Some(format!("{why}; every order date was rebuilt"));
                None
            }
        }
    };
    let out = match out {
        Some(out) => out,
        None => {
            progress.message("reading silver");
            whole(&silver, &consumed, rates, through_us, &tz).await?
        }
    };
    let mode = if options.replay {
        "replay"
    } else {
        "incremental"
    };

    // 3. Stage one snapshot per gold table and commit them as one. The tables are staged at
    //    once (each writes its own files; the commit that follows is one), their reports and
    //    changes kept in the order of `TABLES`.
    progress.message("staging");
    let mut jobs = Vec::new();
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
        let (batch, scope, column) = match name {
            FCT_PAYMENTS => {
                properties.insert(
                    props::EVENTS_WITHOUT_ORDER.to_string(),
                    out.events_without_order.to_string(),
                );
                properties.insert(
                    props::USD_EVENTS_WITHOUT_RATE.to_string(),
                    out.usd_events_without_rate.to_string(),
                );
                (
                    super::fct_payments_batch(&out.facts)?,
                    &out.facts_scope,
                    "processor_date",
                )
            }
            MART_DAILY_CASH => (
                super::daily_cash_batch(&out.cash)?,
                &out.cash_scope,
                "processor_date",
            ),
            MART_ORDER_REVENUE => (
                super::order_revenue_batch(&out.revenue)?,
                &out.revenue_scope,
                "order_date",
            ),
            _ => (
                super::fulfilment_queue_batch(&out.queue)?,
                &Scope::Whole,
                "",
            ),
        };
        let rows = batch.num_rows() as u64;
        let batches: Vec<RecordBatch> = if rows > 0 { vec![batch] } else { Vec::new() };
        let t = gold[name].clone();
        let whole = *scope == Scope::Whole;
        // What the new rows replace; `None`: nothing touched, a snapshot still carries the new
        // watermarks.
        let replace = match scope {
            Scope::Whole => Some(Replace::All),
            Scope::Dates(dates) if dates.is_empty() && batches.is_empty() => None,
            Scope::Dates(dates) => Some(delta::replace_dates(&t, column, dates)),
        };
        let branch = branch.to_string();
        jobs.push(crate::par::job(async move {
            let lake_err = |e| ShackError::lake(name, e);
            let change = match &replace {
                Some(replace) => t
                    .stage_replace(&branch, replace, &batches, properties)
                    .await
                    .map_err(lake_err)?,
                None => t
                    .stage_append(&branch, &[], properties)
                    .await
                    .map_err(lake_err)?,
            };
            let report = table_report(name, &change, rows, whole)?;
            Ok((report, change))
        }));
    }
    // Each on a task of its own: the four encode their files and manifests on both cores.
    let (reports, staged): (Vec<_>, Vec<TableChange>) =
        crate::par::on_tasks("gold", TABLES.len(), jobs)
            .await?
            .into_iter()
            .unzip();

    let message = format!(
        "finish ({mode}) of {} on {branch} as of {}: {} order dates rebuilt",
        TABLES.join(", "),
        options.through.to_rfc3339(),
        out.dates.len()
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
        dates_rebuilt: out.dates.iter().map(|d| date_of(*d)).collect(),
        touched_by: out.touched_by,
        usd_events_without_rate: out.usd_events_without_rate,
        events_without_order: out.events_without_order,
        rows_read: out.read,
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

/// Every gold row from all of silver at the consumed snapshots (a replay, the first finish,
/// or a finish that cannot walk on from its watermarks).
async fn whole(
    silver: &BTreeMap<&str, Table>,
    consumed: &BTreeMap<String, i64>,
    rates: Rates,
    through_us: i64,
    tz: &Tz,
) -> Result<delta::Outputs> {
    let payments = read_whole(
        &silver[PAYMENTS],
        consumed.get(PAYMENTS),
        &delta::PAYMENT_COLUMNS,
        read_payments,
    )
    .await?;
    let orders = read_whole(
        &silver[ORDERS],
        consumed.get(ORDERS),
        &delta::ORDER_COLUMNS,
        read_orders,
    )
    .await?;
    let read = BTreeMap::from([
        (format!("{PAYMENTS} (all)"), payments.len() as u64),
        (format!("{ORDERS} (all)"), orders.len() as u64),
    ]);
    let days = super::order_days(&orders, tz);
    let facts = super::facts(payments, &days, &rates);
    let cash = super::daily_cash(&facts);
    let queue = super::fulfilment_queue(&orders, through_us, tz);
    let revenue = super::order_revenue(&facts, &rates, None);
    let usd_events_without_rate = facts
        .iter()
        .filter(|f| f.payment.currency == "usd" && f.fx_rate_micros.is_none())
        .count() as u64;
    let events_without_order = facts.iter().filter(|f| f.order_date.is_none()).count() as u64;
    let dates: BTreeSet<i32> = revenue.iter().map(|r| r.order_date).collect();
    Ok(delta::Outputs {
        facts,
        facts_scope: Scope::Whole,
        cash,
        cash_scope: Scope::Whole,
        revenue,
        revenue_scope: Scope::Whole,
        queue,
        dates,
        touched_by: BTreeMap::new(),
        usd_events_without_rate,
        events_without_order,
        read,
    })
}

/// The rows of `table` at `snapshot` (none without one), `columns` of each read and turned into
/// rows a batch at a time: a whole finish holds the rows, not the batches as well.
async fn read_whole<T>(
    table: &Table,
    snapshot: Option<&i64>,
    columns: &[&str],
    rows: impl Fn(&[RecordBatch]) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let Some(id) = snapshot else {
        return Ok(Vec::new());
    };
    let lake_err = |e| ShackError::lake(table.name().to_string(), e);
    let mut batches = table
        .scan_columns_stream(&At::Snapshot(*id), columns)
        .await
        .map_err(lake_err)?;
    let mut out = Vec::new();
    while let Some(b) = batches.next().await {
        out.extend(rows(std::slice::from_ref(&b.map_err(lake_err)?))?);
    }
    Ok(out)
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

pub(super) fn strs<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
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

/// The columns a payment event is read from, in `silver.payments` and `gold.fct_payments`
/// alike.
struct PaymentColumns<'a> {
    event_id: &'a StringArray,
    event_type: &'a StringArray,
    api: &'a StringArray,
    charge: &'a StringArray,
    refund: &'a StringArray,
    order: &'a StringArray,
    amount: &'a Int64Array,
    currency: &'a StringArray,
    created: &'a TimestampMicrosecondArray,
    file: &'a StringArray,
    line: &'a Int64Array,
    snap: &'a Int64Array,
    arrived: &'a TimestampMicrosecondArray,
}

impl<'a> PaymentColumns<'a> {
    fn of(t: &str, b: &'a RecordBatch) -> Result<Self> {
        Ok(PaymentColumns {
            event_id: strs(t, b, "event_id")?,
            event_type: strs(t, b, "event_type")?,
            api: strs(t, b, "api_version")?,
            charge: strs(t, b, "charge_id")?,
            refund: col(t, b, "refund_id", true)?,
            order: strs(t, b, "order_id")?,
            amount: longs(t, b, "amount_minor")?,
            currency: strs(t, b, "currency")?,
            created: stamps(t, b, "created_at")?,
            file: strs(t, b, "_landing_file")?,
            line: longs(t, b, "_line")?,
            snap: longs(t, b, "_bronze_snapshot_id")?,
            arrived: stamps(t, b, "_arrived_at")?,
        })
    }

    /// Row `i`, with `amount_minor` as the table holds it.
    fn payment(&self, i: usize) -> Payment {
        Payment {
            event_id: self.event_id.value(i).to_string(),
            event_type: self.event_type.value(i).to_string(),
            api_version: self.api.value(i).to_string(),
            charge_id: self.charge.value(i).to_string(),
            refund_id: opt(self.refund.is_valid(i), self.refund.value(i).to_string()),
            order_id: self.order.value(i).to_string(),
            amount_minor: self.amount.value(i),
            currency: self.currency.value(i).to_string(),
            created_at_us: self.created.value(i),
            landing_file: self.file.value(i).to_string(),
            line: self.line.value(i),
            bronze_snapshot_id: self.snap.value(i),
            arrived_us: self.arrived.value(i),
        }
    }
}

/// The rows of `silver.payments`.
pub(crate) fn read_payments(batches: &[RecordBatch]) -> Result<Vec<Payment>> {
    let mut out = Vec::new();
    for b in batches {
        let c = PaymentColumns::of(PAYMENTS, b)?;
        out.extend((0..b.num_rows()).map(|i| c.payment(i)));
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

fn dates<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a Date32Array> {
    col(table, b, name, false)
}

fn opt_dates<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a Date32Array> {
    col(table, b, name, true)
}

fn opt_longs<'a>(table: &str, b: &'a RecordBatch, name: &str) -> Result<&'a Int64Array> {
    col(table, b, name, true)
}

fn opt<T>(valid: bool, v: T) -> Option<T> {
    valid.then_some(v)
}

/// The rows of `gold.fct_payments` (as [`super::fct_payments_batch`] wrote them).
pub(crate) fn read_facts(batches: &[RecordBatch]) -> Result<Vec<Fact>> {
    let t = FCT_PAYMENTS;
    let mut out = Vec::new();
    for b in batches {
        let c = PaymentColumns::of(t, b)?;
        let processor = dates(t, b, "processor_date")?;
        let order_date = opt_dates(t, b, "order_date")?;
        let region: &StringArray = col(t, b, "ship_region", true)?;
        let rate_date = opt_dates(t, b, "fx_rate_date")?;
        let rate = opt_longs(t, b, "fx_rate_micros")?;
        let cad = opt_longs(t, b, "amount_cad_minor")?;
        for i in 0..b.num_rows() {
            // Gold holds the amount signed; the event's own amount is positive.
            let signed = c.amount.value(i);
            out.push(Fact {
                payment: Payment {
                    amount_minor: signed.abs(),
                    ..c.payment(i)
                },
                signed_minor: signed,
                processor_date: processor.value(i),
                order_date: opt(order_date.is_valid(i), order_date.value(i)),
                ship_region: opt(region.is_valid(i), region.value(i).to_string()),
                fx_rate_date: opt(rate_date.is_valid(i), rate_date.value(i)),
                fx_rate_micros: opt(rate.is_valid(i), rate.value(i)),
                amount_cad_minor: opt(cad.is_valid(i), cad.value(i)),
            });
        }
    }
    Ok(out)
}

/// The rows of `gold.mart_daily_cash`.
pub(crate) fn read_cash(batches: &[RecordBatch]) -> Result<Vec<CashRow>> {
    let t = super::MART_DAILY_CASH;
    let mut out = Vec::new();
    for b in batches {
        let day = dates(t, b, "processor_date")?;
        let currency = strs(t, b, "currency")?;
        let captures = longs(t, b, "captures")?;
        let refunds = longs(t, b, "refunds")?;
        let captured = longs(t, b, "captured_minor")?;
        let refunded = longs(t, b, "refunded_minor")?;
        let net = longs(t, b, "net_minor")?;
        let rate_date = opt_dates(t, b, "fx_rate_date")?;
        let rate = opt_longs(t, b, "fx_rate_micros")?;
        let captured_cad = opt_longs(t, b, "captured_cad_minor")?;
        let refunded_cad = opt_longs(t, b, "refunded_cad_minor")?;
        let net_cad = opt_longs(t, b, "net_cad_minor")?;
        for i in 0..b.num_rows() {
            out.push(CashRow {
                processor_date: day.value(i),
                currency: currency.value(i).to_string(),
                captures: captures.value(i),
                refunds: refunds.value(i),
                captured_minor: captured.value(i),
                refunded_minor: refunded.value(i),
                net_minor: net.value(i),
                fx_rate_date: opt(rate_date.is_valid(i), rate_date.value(i)),
                fx_rate_micros: opt(rate.is_valid(i), rate.value(i)),
                captured_cad_minor: opt(captured_cad.is_valid(i), captured_cad.value(i)),
                refunded_cad_minor: opt(refunded_cad.is_valid(i), refunded_cad.value(i)),
                net_cad_minor: opt(net_cad.is_valid(i), net_cad.value(i)),
            });
        }
    }
    Ok(out)
}

/// The rows of `gold.mart_order_revenue`.
pub(crate) fn read_revenue(batches: &[RecordBatch]) -> Result<Vec<RevenueRow>> {
    let t = MART_ORDER_REVENUE;
    let mut out = Vec::new();
    for b in batches {
        let day = dates(t, b, "order_date")?;
        let region = strs(t, b, "ship_region")?;
        let paid = longs(t, b, "paid_orders")?;
        let gross = longs(t, b, "gross_cad_minor")?;
        let refunds = longs(t, b, "refunds_cad_minor")?;
        let net = longs(t, b, "net_cad_minor")?;
        let rate_date = opt_dates(t, b, "fx_rate_date")?;
        let rate = opt_longs(t, b, "fx_rate_micros")?;
        for i in 0..b.num_rows() {
            out.push(RevenueRow {
                order_date: day.value(i),
                ship_region: region.value(i).to_string(),
                paid_orders: paid.value(i),
                gross_cad_minor: gross.value(i),
                refunds_cad_minor: refunds.value(i),
                net_cad_minor: net.value(i),
                fx_rate_date: opt(rate_date.is_valid(i), rate_date.value(i)),
                fx_rate_micros: opt(rate.is_valid(i), rate.value(i)),
            });
        }
    }
    Ok(out)
}

/// The orders `gold.fulfilment_queue` holds, as `silver.orders` held them when they were
/// queued (paid, live; `updated_at` their paid change's).
pub(crate) fn read_queue(batches: &[RecordBatch]) -> Result<Vec<Order>> {
    let t = super::FULFILMENT_QUEUE;
    let mut out = Vec::new();
    for b in batches {
        let id = strs(t, b, "order_id")?;
        let customer = strs(t, b, "customer_id")?;
        let region = strs(t, b, "ship_region")?;
        let currency = strs(t, b, "currency")?;
        let total = longs(t, b, "total_minor")?;
        let created = stamps(t, b, "created_at")?;
        let paid = stamps(t, b, "paid_at")?;
        for i in 0..b.num_rows() {
            out.push(Order {
                order_id: id.value(i).to_string(),
                customer_id: customer.value(i).to_string(),
                status: "paid".to_string(),
                currency: currency.value(i).to_string(),
                total_minor: total.value(i),
                ship_region: region.value(i).to_string(),
                created_at_us: created.value(i),
                updated_at_us: paid.value(i),
                is_deleted: false,
            });
        }
    }
    Ok(out)
}
