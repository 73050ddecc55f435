//! The finish's promises, checked against the default season and its truth: August cash equals
//! the settlements and the truth to the cent, every USD event has the right rate (weekends use
//! Friday's), a full refund nets its order to exactly zero by order date, the fulfilment queue
//! is what a correct pipeline sees, and daily finishes equal one rebuild row for row.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use chrono::{DateTime, Datelike, NaiveDate, Utc, Weekday};
use common::*;
use lake::At;
use shack::gold::{self, FinishOptions, FinishReport};
use shack::{BoilOptions, bronze};

fn audit() -> At {
    At::reference(bronze::AUDIT_BRANCH)
}

async fn boil(lake: &Lake) {
    let r = shack::boil(&lake.catalog, &BoilOptions::default(), &shack::NoProgress)
        .await
        .expect("boil");
    print!("{}", r.render());
}

async fn finish(lake: &Lake, through: DateTime<Utc>, replay: bool) -> FinishReport {
    let options = FinishOptions {
        replay,
        ..FinishOptions::new(through)
    };
    let r = shack::finish(&lake.catalog, &options, &shack::NoProgress)
        .await
        .expect("finish");
    print!("{}", r.render());
    r
}

async fn query(lake: &Lake, sql: &str) -> Vec<arrow_array::RecordBatch> {
    lake.sql(&audit(), sql).await
}

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("a date")
}

/// Every row of a table at audit as a line of text, sorted: tables compared row for row.
async fn table_rows(lake: &Lake, table: &str) -> Vec<String> {
    let batches = lake.audit_rows(table).await;
    rows_as_text(&batches)
}

/// Half away from zero, written again here so the test does not trust the code it checks.
fn cad(minor: i64, micros: i64) -> i64 {
    let p = i128::from(minor) * i128::from(micros);
    let half = if p >= 0 { 500_000 } else { -500_000 };
    ((p + half) / 1_000_000) as i64
}

/// The whole season, tapped, boiled and finished once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_season_finished_reconciles_to_the_cent() {
    let season = season();
    let lake = Lake::new();
    let end = utc(2026, 12, 31, 0, 0, 0);
    let started = Instant::now();
    lake.tap(&season, end).await;
    boil(&lake).await;
    let boiled = started.elapsed();
    let report = finish(&lake, end, false).await;
    println!(
        "tap+boil {boiled:?}, finish {:?}",
        started.elapsed() - boiled
    );
    assert_eq!(report.tables.len(), gold::TABLES.len());
    assert!(report.catalog_version.is_some());
    assert_eq!(report.usd_events_without_rate, 0);
    let truth = sugarbush::load_truth(&season).expect("truth");

    // Every gold table records the silver snapshot it consumed.
    for t in gold::TABLES {
        let table = lake.catalog.table(t).await.expect("table");
        let head = table.head(bronze::AUDIT_BRANCH).expect("audit head");
        let summary = table.snapshot(head).expect("snapshot").summary;
        for input in gold::inputs(t) {
            assert_eq!(
                summary.get(&gold::watermark_key(input)),
                Some(&report.silver[input].to_string()),
                "{t} records {input}"
            );
        }
    }

    // Cash: every settlement line equals gold's day and currency, to the cent.
    let rows = query(
        &lake,
        "select cast(s.settlement_date as varchar) as d, s.currency, \
                s.gross_minor, s.refunds_minor, s.net_minor, \
                coalesce(c.captured_minor, 0) as captured_minor, \
                coalesce(c.refunded_minor, 0) as refunded_minor, \
                coalesce(c.net_minor, 0) as gold_net \
         from silver.settlements s left join gold.mart_daily_cash c \
           on c.processor_date = s.settlement_date and c.currency = s.currency \
         order by 1, 2",
    )
    .await;
    let (days, curs) = (str_column(&rows, "d"), str_column(&rows, "currency"));
    let cols: Vec<Vec<i64>> = [
        "gross_minor",
        "refunds_minor",
        "net_minor",
        "captured_minor",
        "refunded_minor",
        "gold_net",
    ]
    .iter()
    .map(|c| int_column(&rows, c))
    .collect();
    assert!(days.len() > 100, "settlement lines: {}", days.len());
    let mut august: BTreeMap<String, [i64; 3]> = BTreeMap::new();
    for (i, day) in days.iter().enumerate() {
        let (d, cur) = (
            day.clone().expect("day"),
            curs[i].clone().expect("currency"),
        );
        assert_eq!(
            (cols[0][i], cols[1][i], cols[2][i]),
            (cols[3][i], cols[4][i], cols[5][i]),
            "{d} {cur}: settlement vs gold"
        );
        if d.starts_with("2026-08") {
            let a = august.entry(cur).or_default();
            a[0] += cols[2][i];
            a[1] += cols[5][i];
        }
    }
    for t in truth.daily.iter().filter(|t| t.date.month() == 8) {
        august.entry(t.currency.as_str().to_string()).or_default()[2] += t.net_minor;
    }
    let gold_august = query(
        &lake,
        "select currency, sum(net_minor) as net, sum(net_cad_minor) as net_cad \
         from gold.mart_daily_cash \
         where processor_date >= date '2026-08-01' and processor_date < date '2026-09-01' \
         group by currency order by currency",
    )
    .await;
    let nets = int_column(&gold_august, "net");
    let net_cad: i64 = int_column(&gold_august, "net_cad").iter().sum();
    assert_eq!(nets.len(), 2);
    for (i, (cur, [settled, gold, truth])) in august.iter().enumerate() {
        println!("August {cur}: settlements {settled}, gold {gold}, truth {truth}");
        assert_eq!(settled, gold, "{cur}");
        assert_eq!(settled, truth, "{cur}");
        assert_eq!(nets[i], *gold, "{cur}");
    }
    let truth_cad: i64 = truth
        .daily
        .iter()
        .filter(|t| t.date.month() == 8)
        .map(|t| t.net_cad_minor_by_event)
        .sum();
    println!("August cash in CAD: gold {net_cad}, truth (per event) {truth_cad}");
    assert_eq!(net_cad, truth_cad, "CAD per event, rounded half away");

    // FX: every USD event has the latest rate on or before its processor date; weekend events
    // use Friday's; the CAD value is the event's amount at that rate, rounded half away.
    let fct = query(
        &lake,
        "select cast(processor_date as varchar) as d, cast(fx_rate_date as varchar) as r, \
                fx_rate_micros, amount_minor, amount_cad_minor \
         from gold.fct_payments where currency = 'usd'",
    )
    .await;
    let (pd, rd) = (str_column(&fct, "d"), str_column(&fct, "r"));
    let (micros, amount, amount_cad) = (
        int_column(&fct, "fx_rate_micros"),
        int_column(&fct, "amount_minor"),
        int_column(&fct, "amount_cad_minor"),
    );
    let mut weekend = 0;
    for (i, processor_day) in pd.iter().enumerate() {
        let day = date(processor_day.as_deref().expect("processor date"));
        let rate_day = date(rd[i].as_deref().expect("every USD event has a rate"));
        let want = truth.rate_for(day).expect("truth has a rate");
        assert_eq!((rate_day, micros[i]), (want.rate_date, want.rate_micros));
        assert_eq!(amount_cad[i], cad(amount[i], micros[i]));
        if matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
            weekend += 1;
            assert_eq!(rate_day.weekday(), Weekday::Fri, "{day} uses {rate_day}");
            assert!((day - rate_day).num_days() <= 2);
        }
    }
    assert!(weekend > 1_000, "weekend USD events: {weekend}");

    // By order date: every (date, region) is its orders' events at the order date's rate, and
    // a fully refunded order contributes exactly zero.
    let events = query(
        &lake,
        "select order_id, cast(order_date as varchar) as d, ship_region, currency, amount_minor, \
                event_type from gold.fct_payments where order_date is not null",
    )
    .await;
    let (oid, od, region, cur, kind) = (
        str_column(&events, "order_id"),
        str_column(&events, "d"),
        str_column(&events, "ship_region"),
        str_column(&events, "currency"),
        str_column(&events, "event_type"),
    );
    let amounts = int_column(&events, "amount_minor");
    // order → (date, region, captured minor, refunded minor, net CAD at the order date's rate)
    let mut orders: HashMap<String, (String, String, i64, i64, i64)> = HashMap::new();
    for (i, id) in oid.iter().enumerate() {
        let d = od[i].clone().expect("date");
        let rate = if cur[i].as_deref() == Some("usd") {
            truth.rate_for(date(&d)).expect("rate").rate_micros
        } else {
            1_000_000
        };
        let o = orders.entry(id.clone().expect("id")).or_insert((
            d,
            region[i].clone().expect("region"),
            0,
            0,
            0,
        ));
        if kind[i].as_deref() == Some("capture") {
            o.2 += amounts[i];
        } else {
            o.3 -= amounts[i];
        }
        o.4 += cad(amounts[i], rate);
    }
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut full_refunds = 0;
    for (d, r, captured, refunded, net) in orders.values() {
        if *captured > 0 && captured == refunded {
            full_refunds += 1;
            assert_eq!(*net, 0, "a full refund nets its order to exactly zero");
        }
        *want.entry((d.clone(), r.clone())).or_default() += net;
    }
    assert!(full_refunds > 10, "fully refunded orders: {full_refunds}");
    let mart = query(
        &lake,
        "select cast(order_date as varchar) as d, ship_region, net_cad_minor, gross_cad_minor, \
                refunds_cad_minor from gold.mart_order_revenue",
    )
    .await;
    let (md, mr) = (str_column(&mart, "d"), str_column(&mart, "ship_region"));
    let (mn, mg, mf) = (
        int_column(&mart, "net_cad_minor"),
        int_column(&mart, "gross_cad_minor"),
        int_column(&mart, "refunds_cad_minor"),
    );
    let mut got: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (i, d) in md.iter().enumerate() {
        assert_eq!(mn[i], mg[i] - mf[i]);
        got.insert(
            (d.clone().expect("date"), mr[i].clone().expect("region")),
            mn[i],
        );
    }
    assert_eq!(got, want, "mart_order_revenue by order date and region");
    let august_orders: i64 = got
        .iter()
        .filter(|((d, _), _)| d.starts_with("2026-08"))
        .map(|(_, n)| n)
        .sum();
    println!("August: cash C${net_cad} by processor date, orders C${august_orders} by order date");
}

/// One finish per day over a stretch, then one rebuild: every gold table row for row. Each
/// day's fulfilment queue is what a correct pipeline sees at that noon (the truth's `visible`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_finishes_equal_a_rebuild_row_for_row() {
    let season = season();
    let truth = sugarbush::load_truth(&season).expect("truth");
    let lake = Lake::new();
    let start = utc(2026, 8, 10, 12, 0, 0);
    lake.tap(&season, start).await;
    boil(&lake).await;
    let first = finish(&lake, start, false).await;
    assert!(
        first.rebuilt_because.is_some(),
        "the first finish builds every date"
    );
    let mut through = start;
    let mut old_dates = 0;
    let mut fx_touched = 0;
    // August 11..20: a rate republished with a correction (12th, corrected on the 13th), a
    // weekend, and the payments API change (17th).
    for day in 11..=20 {
        through = utc(2026, 8, day, 12, 0, 0);
        lake.tap(&season, through).await;
        boil(&lake).await;
        let version = lake.catalog.head().await.expect("head").version;
        let r = finish(&lake, through, false).await;
        assert_eq!(
            r.catalog_version,
            Some(version + 1),
            "every gold table of a run in one catalog commit"
        );
        assert_eq!(r.mode, "incremental");
        assert!(r.rebuilt_because.is_none(), "{:?}", r.rebuilt_because);
        assert!(!r.dates_rebuilt.is_empty());
        let all = query(
            &lake,
            "select distinct order_date from gold.mart_order_revenue",
        )
        .await;
        assert!(
            r.dates_rebuilt.len() < rows(&all),
            "Aug {day}: only the touched dates ({} of {})",
            r.dates_rebuilt.len(),
            rows(&all)
        );
        let today = through.date_naive();
        old_dates += r
            .dates_rebuilt
            .iter()
            .filter(|d| (today - **d).num_days() > 3)
            .count();
        fx_touched += r.touched_by.get("fx_rates").copied().unwrap_or(0);
        let held = rows(&query(&lake, "select event_id from silver.payments").await);
        let read: u64 = r
            .rows_read
            .iter()
            .filter(|(what, _)| what.starts_with("silver.payments"))
            .map(|(_, n)| n)
            .sum();
        assert!(
            !r.rows_read.keys().any(|k| k.ends_with("(all)")),
            "Aug {day}: walked on, not read whole: {:?}",
            r.rows_read
        );
        assert!(
            (read as usize) < held,
            "Aug {day}: read {read} of silver.payments' {held} rows"
        );
        // The marts follow the calendar, not the data: unpartitioned, written back whole as
        // one file, never a file per day touched.
        for mart in [gold::MART_DAILY_CASH, gold::MART_ORDER_REVENUE] {
            let t = lake.catalog.table(mart).await.expect("mart");
            assert!(t.metadata().default_partition_spec().is_unpartitioned());
            let files = t.data_files(&audit()).await.expect("files");
            assert_eq!(files.len(), 1, "Aug {day}: {mart} is one file");
            let report = r.tables.iter().find(|t| t.table == mart).expect("mart");
            assert!(report.rewritten_whole, "Aug {day}: {mart} written whole");
        }
        println!(
            "Aug {day}: rebuilt {:?} ({:?})",
            r.dates_rebuilt, r.touched_by
        );

        let q = query(
            &lake,
            "select count(*) as n, sum(case when over_72h then 1 else 0 end) as stuck \
             from gold.fulfilment_queue",
        )
        .await;
        let want = truth.awaiting_at(through).expect("a noon checkpoint");
        assert_eq!(
            (
                int_column(&q, "n")[0] as u64,
                int_column(&q, "stuck")[0] as u64
            ),
            (want.visible_waiting, want.visible_over_72h),
            "Aug {day}: the queue a correct pipeline sees"
        );
    }
    assert!(
        fx_touched > 0,
        "new and corrected rates touch the dates they price"
    );
    assert!(
        old_dates > 0,
        "late data rebuilt order dates older than any short look-back window"
    );
    let mut daily = BTreeMap::new();
    for t in gold::TABLES {
        daily.insert(t, table_rows(&lake, t).await);
    }
    let rebuilt = finish(&lake, through, true).await;
    assert_eq!(rebuilt.mode, "replay");
    for t in gold::TABLES {
        let again = table_rows(&lake, t).await;
        assert!(!again.is_empty(), "{t} has rows");
        assert_eq!(again.len(), daily[t].len(), "{t}: row count");
        assert_eq!(again, daily[t], "{t}: row for row");
    }
    // A finish with nothing new in silver touches no date and changes no row.
    let idle = finish(&lake, through, false).await;
    assert!(idle.dates_rebuilt.is_empty(), "{:?}", idle.dates_rebuilt);
    for t in gold::TABLES {
        assert_eq!(
            table_rows(&lake, t).await,
            daily[t],
            "{t} after an idle finish"
        );
    }
}

/// Finishing before anything was boiled says which silver table is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finishing_an_unboiled_lake_says_silver_is_missing() {
    let lake = Lake::new();
    let err = shack::finish(
        &lake.catalog,
        &FinishOptions::new(aug16()),
        &shack::NoProgress,
    )
    .await
    .expect_err("no silver");
    assert!(matches!(err, shack::ShackError::NoSilver { .. }), "{err}");
    assert!(err.to_string().contains("silver."), "{err}");
}

/// A lake of the default season tapped, boiled and finished through `through`.
async fn finished_at(through: DateTime<Utc>) -> Lake {
    let season = season();
    let lake = Lake::new();
    lake.tap(&season, through).await;
    boil(&lake).await;
    finish(&lake, through, false).await;
    lake
}

/// Raise the USD rate dated `day` in `silver.fx_rates` on audit by 0.001 CAD, keeping the
/// table's watermarks (as a republished rate would arrive, without a boil).
async fn correct_rate(lake: &Lake, day: &str) {
    use shack::silver::tables;
    let fx = lake
        .catalog
        .table(tables::FX_RATES)
        .await
        .expect("fx table");
    let head = fx.head(bronze::AUDIT_BRANCH).expect("fx head");
    let summary = fx.snapshot(head).expect("snapshot").summary;
    let keep: BTreeMap<String, String> = summary
        .into_iter()
        .filter(|(k, _)| k.starts_with(lake::WATERMARK_PREFIX))
        .collect();
    let mut rows = tables::read_fx_rates(&lake.audit_rows(tables::FX_RATES).await).expect("rates");
    let on = gold::epoch_days(date(day));
    let row = rows
        .iter_mut()
        .find(|r| r.rate.rate_date == on && r.rate.base == "USD")
        .unwrap_or_else(|| panic!("a USD rate dated {day}"));
    row.rate.rate_micros += 1_000;
    let refs: Vec<&tables::FxRow> = rows.iter().collect();
    let batch = tables::fx_rates_batch(&refs).expect("batch");
    lake.catalog
        .replace(
            tables::FX_RATES,
            bronze::AUDIT_BRANCH,
            &lake::Replace::All,
            &[batch],
            keep,
        )
        .await
        .expect("correct the rate");
}

/// Every gold table at audit, row for row, then the same after a rebuild.
async fn assert_equals_a_rebuild(lake: &Lake, through: DateTime<Utc>) {
    let mut incremental = BTreeMap::new();
    for t in gold::TABLES {
        incremental.insert(t, table_rows(lake, t).await);
    }
    finish(lake, through, true).await;
    for t in gold::TABLES {
        assert_eq!(
            table_rows(lake, t).await,
            incremental[t],
            "{t}: row for row"
        );
    }
}

/// A corrected rate alone (nothing else new in silver) rebuilds exactly the order dates it
/// prices, from its rate date up to the next rate date, and the result equals a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrected_rate_rebuilds_exactly_the_dates_it_prices() {
    let through = utc(2026, 8, 12, 12, 0, 0);
    let lake = finished_at(through).await;

    // Correct Friday August 7's rate in silver.fx_rates (keeping its watermarks).
    correct_rate(&lake, "2026-08-07").await;

    let r = finish(&lake, through, false).await;
    assert_eq!(
        r.dates_rebuilt,
        vec![date("2026-08-07"), date("2026-08-08"), date("2026-08-09")],
        "Friday's rate prices Friday, Saturday and Sunday"
    );
    assert_eq!(r.touched_by.get("fx_rates"), Some(&3));
    assert_eq!(r.touched_by.len(), 1, "{:?}", r.touched_by);
    assert_equals_a_rebuild(&lake, through).await;
}

/// A corrected latest rate prices every day after it, but a finish as of a moment centuries
/// ahead rebuilds only the days silver's orders and payments reach, not every day up to it,
/// and still equals a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_finished_far_ahead_reprices_only_days_that_hold_data() {
    let through = utc(2026, 8, 12, 12, 0, 0);
    let lake = finished_at(through).await;

    // Tuesday August 11's rate is the latest: it prices the 11th and everything after.
    correct_rate(&lake, "2026-08-11").await;
    let far = utc(9999, 12, 31, 23, 59, 0);
    let r = finish(&lake, far, false).await;
    assert_eq!(r.mode, "incremental");
    assert_eq!(
        r.dates_rebuilt,
        vec![date("2026-08-11"), date("2026-08-12")],
        "the 11th and the 12th hold orders; no later day holds anything"
    );
    assert_eq!(r.touched_by.get("fx_rates"), Some(&2), "{:?}", r.touched_by);
    assert_equals_a_rebuild(&lake, far).await;
}

/// A silver replay (every silver table rewritten, as after `--replay` on August 17) cannot be
/// walked on from by snapshot: the next finish says so, rebuilds every order date, and gives
/// the same gold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silver_replay_makes_the_finish_rebuild_every_date() {
    let through = utc(2026, 8, 11, 12, 0, 0);
    let lake = finished_at(through).await;
    let mut before = BTreeMap::new();
    for t in gold::TABLES {
        before.insert(t, table_rows(&lake, t).await);
    }
    let replay = BoilOptions {
        replay: true,
        ..BoilOptions::default()
    };
    shack::boil(&lake.catalog, &replay, &shack::NoProgress)
        .await
        .expect("replay");
    let r = finish(&lake, through, false).await;
    let why = r.rebuilt_because.clone().expect("a reason to rebuild");
    assert!(why.contains("silver."), "{why}");
    let all = query(
        &lake,
        "select distinct order_date from gold.mart_order_revenue",
    )
    .await;
    assert_eq!(r.dates_rebuilt.len(), rows(&all));
    for t in gold::TABLES {
        assert_eq!(table_rows(&lake, t).await, before[t], "{t}: row for row");
    }
}

/// Two finishes at once: at most one commits per gold table state; a loser is a conflict with
/// nothing committed, never a mix (every gold table's head is one finish's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_finishes_at_once_never_mix() {
    let season = season();
    let lake = Lake::new();
    let through = utc(2026, 8, 11, 12, 0, 0);
    lake.tap(&season, through).await;
    boil(&lake).await;
    let options = FinishOptions::with_settings(through, &shack::Settings::default());
    let (a, b) = tokio::join!(
        shack::finish(&lake.catalog, &options, &shack::NoProgress),
        shack::finish(&lake.catalog, &options, &shack::NoProgress)
    );
    let mut committed = Vec::new();
    for r in [a, b] {
        match r {
            Ok(r) => committed.push(r.finish_id),
            Err(e) => assert!(e.is_conflict(), "a loser is a conflict: {e}"),
        }
    }
    assert!(!committed.is_empty(), "one of them commits");
    let mut heads = std::collections::BTreeSet::new();
    for t in gold::TABLES {
        let table = lake.catalog.table(t).await.expect("table");
        let head = table.head(bronze::AUDIT_BRANCH).expect("audit head");
        let summary = table.snapshot(head).expect("snapshot").summary;
        heads.insert(summary[gold::props::FINISH_ID].clone());
    }
    assert_eq!(heads.len(), 1, "every gold table's head is one finish's");
    assert!(committed.contains(heads.iter().next().expect("one")));
}

/// Gold tables of an older lake keep their spec: a `gold.fct_payments` made before it was
/// partitioned by processor date has its touched dates' rows rewritten, marts made partitioned
/// by day have their touched days' partitions replaced (not the whole table rewritten), and
/// daily finishes still equal a rebuild row for row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpartitioned_gold_from_an_older_lake_walks_on_too() {
    let season = season();
    let lake = Lake::new();
    let start = utc(2026, 8, 10, 12, 0, 0);
    lake.tap(&season, start).await;
    boil(&lake).await;
    let mut changes = Vec::new();
    for t in gold::TABLES {
        let schema = gold::schema(t).expect("schema");
        let partitioning = match t {
            gold::MART_ORDER_REVENUE => vec![lake::PartitionField::identity("order_date")],
            gold::MART_DAILY_CASH => vec![lake::PartitionField::identity("processor_date")],
            _ => Vec::new(),
        };
        changes.push(
            lake.catalog
                .stage_create_table(t, &schema, &partitioning)
                .await
                .expect("stage"),
        );
    }
    lake.catalog
        .commit(
            changes,
            "create-table",
            "gold as an older lake made it",
            BTreeMap::new(),
        )
        .await
        .expect("create gold");
    finish(&lake, start, false).await;
    let mut through = start;
    for day in 11..=13 {
        through = utc(2026, 8, day, 12, 0, 0);
        lake.tap(&season, through).await;
        boil(&lake).await;
        let r = finish(&lake, through, false).await;
        assert!(r.rebuilt_because.is_none(), "{:?}", r.rebuilt_because);
        for t in [
            gold::FCT_PAYMENTS,
            gold::MART_DAILY_CASH,
            gold::MART_ORDER_REVENUE,
        ] {
            let report = r.tables.iter().find(|r| r.table == t).expect("table");
            assert!(
                !report.rewritten_whole,
                "Aug {day}: {t}: only the touched dates"
            );
        }
        let revenue = lake
            .catalog
            .table(gold::MART_ORDER_REVENUE)
            .await
            .expect("mart");
        assert!(
            revenue.data_files(&audit()).await.expect("files").len() > 1,
            "a mart partitioned by day keeps a file per day"
        );
    }
    let mut daily = BTreeMap::new();
    for t in gold::TABLES {
        daily.insert(t, table_rows(&lake, t).await);
    }
    finish(&lake, through, true).await;
    for t in gold::TABLES {
        assert_eq!(table_rows(&lake, t).await, daily[t], "{t}: row for row");
    }
}
