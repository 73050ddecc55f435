//! The run's promises (tap → boil → finish → grade → publish), on the default season:
//! the story's August 17 morning blocks and a replay publishes; a block moves no `main`; one run
//! per day through the season equals one rebuild row for row; a reconciliation gap warns while
//! its day is settling and blocks after.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Duration, Utc};
use common::*;
use lake::At;
use shack::audits::EventTotals;
use shack::grade::LAYERS;
use shack::silver::tables as silver;
use shack::{RunOptions, RunReport, Source, Verdict, gold, publish};

async fn run(lake: &Lake, landing: &Path, through: DateTime<Utc>, replay: bool) -> RunReport {
    run_with(
        lake,
        landing,
        RunOptions {
            replay,
            ..RunOptions::new(through)
        },
    )
    .await
}

async fn run_with(lake: &Lake, landing: &Path, options: RunOptions) -> RunReport {
    let now_ms = options.through.timestamp_millis();
    let r = shack::run(&lake.catalog, landing, &options, now_ms, &shack::NoProgress)
        .await
        .expect("run");
    print!("{}", r.render());
    r
}

fn verdict(r: &RunReport, audit: &str) -> Verdict {
    r.grade
        .results
        .iter()
        .find(|a| a.name == audit)
        .map(|a| a.verdict)
        .expect("the audit ran")
}

/// Every graded table's head on `branch`, in the newest catalog version.
async fn heads(lake: &Lake, branch: &str) -> BTreeMap<String, Option<i64>> {
    let head = lake.catalog.head().await.expect("head");
    let mut out = BTreeMap::new();
    for name in head.tables.keys() {
        if LAYERS.iter().any(|ns| name.starts_with(&format!("{ns}."))) {
            let t = lake.catalog.table_in(&head, name).await.expect("table");
            out.insert(name.clone(), t.head(branch));
        }
    }
    out
}

/// One CAD order created 2026-08-10 11:00 UTC (landed five minutes later) and its capture of
/// 100.00 CAD (created at noon), landed at `paid_landed`: the payment's landing file.
fn one_paid_order(landing: &Landing, paid_landed: DateTime<Utc>) -> String {
    landing.put(
        Source::Orders,
        utc(2026, 8, 10, 11, 5, 0),
        "cdc",
        br#"{"op":"c","lsn":7,"before":null,"after":{"order_id":"ord_1","customer_id":"cus_1","status":"created","currency":"cad","total_minor":10000,"ship_region":"CA-NS","created_at":"2026-08-10T11:00:00.000Z","updated_at":"2026-08-10T11:00:00.000Z"},"ts_ms":1786359600000}
"#,
    );
    landing.put(
        Source::Payments,
        paid_landed,
        "webhooks",
        br#"{"id":"evt_1","type":"charge.succeeded","api_version":"2025-11-01","created":1786363200,"data":{"object":{"id":"ch_1","order_id":"ord_1","amount":10000,"currency":"cad"}}}
"#,
    )
}

/// Every row of a table at `at` as a line of text, sorted.
async fn table_rows(lake: &Lake, table: &str, at: &At) -> Vec<String> {
    let t = lake.catalog.table(table).await.expect("table");
    let batches = t.scan(at).await.expect("scan");
    rows_as_text(&batches)
}

/// The story's August 17 morning: with only the old parser a fifth of the morning's payment
/// events are quarantined as unsupported_api_version, the quarantine-rate audit blocks, and no
/// table's `main` moves; with both parsers and a replay the same build passes and every `main`
/// moves, in one catalog version, to exactly the graded snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_august_17_morning_blocks_and_a_replay_publishes() {
    let season = season();
    let lake = Lake::new();
    let first = run(&lake, &season, aug16(), false).await;
    assert!(first.published(), "August 16 publishes");
    let published = heads(&lake, "main").await;
    assert!(published.values().all(Option::is_some), "{published:?}");

    let morning = utc(2026, 8, 17, 12, 0, 0);
    let blocked = run_with(
        &lake,
        &season,
        RunOptions {
            parsers: shack::silver::parse_version_list("2025-11-01"),
            ..RunOptions::new(morning)
        },
    )
    .await;
    assert!(!blocked.published());
    let q = &blocked.grade.results[0];
    assert_eq!(
        (q.name.as_str(), q.verdict),
        ("quarantine rate", Verdict::Block)
    );
    let payments = &q.evidence["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["source"] == "payments")
        .expect("payments arrived")
        .clone();
    let pct = payments["percent"].as_f64().expect("percent");
    assert!((15.0..=25.0).contains(&pct), "about a fifth: {pct}");
    assert!(
        q.reason.contains("(mostly unsupported_api_version)"),
        "{}",
        q.reason
    );
    // Only what arrived since the last publish counts: the morning's rows, not the season's.
    assert!(
        payments["rows"].as_u64().expect("rows") < 1_000,
        "{payments}"
    );
    assert_eq!(
        blocked.publish.render(),
        "Not published. gold still shows the build as of 2026-08-16 23:59 UTC."
    );
    assert_eq!(
        heads(&lake, "main").await,
        published,
        "a block moves no main"
    );
    let log = publish::publishes(&lake.catalog).await.expect("log");
    assert_eq!(
        log.iter().map(|r| r.status()).collect::<Vec<_>>(),
        ["published", "blocked"]
    );
    // gold at main is still August 16's.
    let at_main = table_rows(&lake, gold::FCT_PAYMENTS, &At::Main).await;
    let at_tag = table_rows(&lake, gold::FCT_PAYMENTS, &At::reference("publish-1")).await;
    assert_eq!(at_main, at_tag);

    let replayed = run(&lake, &season, morning, true).await;
    assert!(replayed.tap.nothing_new(), "nothing is tapped twice");
    // Silver and the gold built from it land in one catalog version, gold's watermarks naming
    // the silver snapshots of that same version; the version before has neither.
    let v = replayed.finish.catalog_version.expect("gold committed");
    assert_eq!(
        replayed.boil.catalog_version,
        Some(v),
        "silver in gold's commit"
    );
    let (with, before) = (
        lake.catalog.version(v).await.expect("version"),
        lake.catalog.version(v - 1).await.expect("version before"),
    );
    assert_eq!(
        replayed.finish.silver.len(),
        4,
        "{:?}",
        replayed.finish.silver
    );
    for (table, snapshot) in &replayed.finish.silver {
        let now = lake.catalog.table_in(&with, table).await.expect("table");
        assert_eq!(now.head("audit"), Some(*snapshot), "{table}");
        let then = lake.catalog.table_in(&before, table).await.expect("table");
        assert_ne!(then.head("audit"), Some(*snapshot), "{table} before");
    }
    for table in gold::TABLES {
        let then = lake.catalog.table_in(&before, table).await.expect("table");
        let now = lake.catalog.table_in(&with, table).await.expect("table");
        assert_ne!(
            then.head("audit"),
            now.head("audit"),
            "{table} moved in {v}"
        );
    }
    assert_eq!(verdict(&replayed, "quarantine rate"), Verdict::Pass);
    assert!(replayed.published(), "{}", replayed.render());
    let moved = heads(&lake, "main").await;
    for (table, snapshot) in replayed.grade.snapshots() {
        assert_eq!(
            moved[table],
            Some(*snapshot),
            "{table} at its graded snapshot"
        );
    }
    for table in silver::TABLES.iter().chain(gold::TABLES.iter()) {
        assert_ne!(moved[*table], published[*table], "{table} moved");
    }
    let version = publish::publish_version(&lake.catalog, &replayed.publish.record)
        .await
        .expect("version");
    assert_eq!(version, Some(replayed.publish.version));
    // The catalog version before the publish has no main moved; the publish's has all.
    let before = lake
        .catalog
        .version(replayed.publish.version - 1)
        .await
        .expect("version before");
    for table in silver::TABLES.iter().chain(gold::TABLES.iter()) {
        let t = lake.catalog.table_in(&before, table).await.expect("table");
        assert_eq!(
            t.head("main"),
            published[*table],
            "{table} moved before the publish"
        );
    }
    let quarantined = lake
        .sql(
            &At::Main,
            "select count(*) as n from silver.quarantine where reason = 'unsupported_api_version'",
        )
        .await;
    assert_eq!(int_column(&quarantined, "n"), [0]);
}

/// One run a day through the whole season, then one replay as of the same instant: every
/// silver and gold table identical row for row. On the way: which audits warned or blocked,
/// and the season's end published with every audit passing or warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_runs_through_the_season_equal_one_rebuild() {
    let season = season();
    let lake = Lake::new();
    let first_day = utc(2026, 8, 1, 12, 0, 0);
    let mut through = first_day;
    let mut published = 0;
    let mut blocked = Vec::new();
    let mut carried = 0;
    let mut fx_carried = 0;
    while through <= utc(2026, 11, 1, 12, 0, 0) {
        let r = run(&lake, &season, through, false).await;
        carried += conservation_is_a_whole_read(&lake, &r).await;
        fx_carried += fx_coverage_is_a_whole_read(&lake, &r).await;
        if r.published() {
            published += 1;
        } else {
            blocked.push((through, r.grade.render()));
        }
        through += Duration::days(1);
    }
    through -= Duration::days(1);
    println!("{published} published; blocked: {blocked:?}");
    // The first noon has no settlement, no fx rate yet: nothing blocks a season that is right.
    assert!(blocked.is_empty(), "{blocked:#?}");

    let mut daily = BTreeMap::new();
    for t in silver::TABLES.iter().chain(gold::TABLES.iter()) {
        daily.insert(*t, table_rows(&lake, t, &At::reference("audit")).await);
    }
    // The grades between the whole ones carried conservation's figures forward.
    assert!(
        carried * 10 >= published * 8,
        "{carried} of {published} carried"
    );
    assert!(
        fx_carried * 10 >= published * 8,
        "fx coverage: {fx_carried} of {published} carried"
    );
    let rebuilt = run(&lake, &season, through, true).await;
    whole_figures_are_what_sql_says(&lake, &rebuilt).await;
    conservation_is_a_whole_read(&lake, &rebuilt).await;
    fx_coverage_is_a_whole_read(&lake, &rebuilt).await;
    assert!(rebuilt.published());
    for t in silver::TABLES.iter().chain(gold::TABLES.iter()) {
        let again = table_rows(&lake, t, &At::Main).await;
        assert_eq!(again.len(), daily[t].len(), "{t}: row count");
        assert_eq!(again, daily[t], "{t}: row for row");
    }
    for r in &rebuilt.grade.results {
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.render());
    }
}

/// Audit `name`'s figures in `r`'s grade (its evidence) equal `whole`, a whole read of the
/// graded snapshots, however the audit got them; 1 when it carried them from the last publish.
fn figures_equal<T>(r: &RunReport, name: &str, whole: &T) -> usize
where
    T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let audit = r
        .grade
        .results
        .iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("{name} ran"));
    let figures: T = serde_json::from_value(audit.evidence.clone())
        .unwrap_or_else(|e| panic!("{name}'s figures: {e}"));
    assert_eq!(
        &figures,
        whole,
        "as of {}: {}",
        r.grade.as_of(),
        audit.render()
    );
    let basis = audit.evidence["basis"]["read"].as_str().expect("a basis");
    usize::from(basis.starts_with("changes since publish"))
}

/// The rows of a query of `r`'s graded snapshots.
async fn sql_rows(lake: &Lake, r: &RunReport, text: &str) -> Vec<arrow_array::RecordBatch> {
    let sql = r.grade.context.sql(&lake.catalog).await.expect("a session");
    sql.query(text)
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Column `col` of a query's rows as integers (a count, a sum, epoch days).
fn sql_ints(rows: &[arrow_array::RecordBatch], col: usize) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for b in rows {
        let c = b.column(col);
        let c = if matches!(c.data_type(), arrow_schema::DataType::Date32) {
            arrow::compute::cast(c, &arrow_schema::DataType::Int32).expect("days")
        } else {
            c.clone()
        };
        let c = arrow::compute::cast(&c, &arrow_schema::DataType::Int64).expect("an integer");
        let a = c
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("Int64");
        out.extend(a.iter());
    }
    out
}

/// A query's first row's first value.
async fn sql_one(lake: &Lake, r: &RunReport, text: &str) -> i64 {
    sql_ints(&sql_rows(lake, r, text).await, 0)[0].unwrap_or(0)
}

/// The events and net per currency of a `currency, count(*), sum(..)` query.
async fn sql_events(lake: &Lake, r: &RunReport, table: &str, signed: &str) -> EventTotals {
    let text = format!("SELECT currency, count(*), sum({signed}) FROM {table} GROUP BY currency");
    let rows = sql_rows(lake, r, &text).await;
    let currencies = common::str_column(&rows, "currency");
    let (counts, nets) = (sql_ints(&rows, 1), sql_ints(&rows, 2));
    let mut t = EventTotals::default();
    for ((c, n), net) in currencies.into_iter().zip(counts).zip(nets) {
        t.events += n.unwrap_or(0);
        *t.net_minor
            .entry(c.unwrap_or_else(|| "(none)".into()))
            .or_default() += net.unwrap_or(0);
    }
    t.net_minor.retain(|_, n| *n != 0);
    t
}

/// The conservation and FX-coverage audits add up and group rows in code; a whole read of the
/// graded snapshots gives the figures SQL's aggregates give over the same tables.
async fn whole_figures_are_what_sql_says(lake: &Lake, r: &RunReport) {
    let whole = shack::audits::conservation_figures(&lake.catalog, &r.grade.context)
        .await
        .expect("a whole read");
    let refunds = "CASE WHEN event_type = 'refund' THEN -amount_minor ELSE amount_minor END";
    let silver_totals = sql_events(lake, r, "silver.payments", refunds).await;
    assert_eq!(whole.silver, silver_totals);
    assert!(silver_totals.net_minor.len() >= 2, "{silver_totals:?}");
    let gold_totals = sql_events(lake, r, "gold.fct_payments", "amount_minor").await;
    assert_eq!(whole.gold, gold_totals);
    let quarantined = sql_rows(
        lake,
        r,
        "SELECT source, count(*) FROM silver.quarantine GROUP BY source",
    )
    .await;
    let q: BTreeMap<String, i64> = common::str_column(&quarantined, "source")
        .into_iter()
        .zip(sql_ints(&quarantined, 1))
        .filter_map(|(s, n)| Some((s?, n?)))
        .collect();
    assert!(q.values().sum::<i64>() > 0, "the season quarantines rows");
    for b in &whole.sources {
        let quarantined = q.get(&b.source).copied().unwrap_or(0);
        assert_eq!(b.quarantined, quarantined, "{}: quarantined", b.source);
        let (csv, field) = match b.source.as_str() {
            "fx_rates" => (true, "rate_date"),
            "settlements" => (true, "settlement_date"),
            _ => (false, ""),
        };
        if csv {
            let text = format!(
                "SELECT count(*) FROM bronze.{} WHERE strpos(_raw, '{field}') > 0",
                b.source
            );
            assert_eq!(
                b.headers,
                sql_one(lake, r, &text).await,
                "{}: headers",
                b.source
            );
        }
    }
    let settlements = whole
        .sources
        .iter()
        .find(|b| b.source == "settlements")
        .expect("settlements");
    let publications = sql_one(lake, r, "SELECT sum(publications) FROM silver.settlements").await;
    assert_eq!(settlements.parsed, publications);
    assert!(publications > 0);

    let fx = shack::audits::fx_figures(&lake.catalog, &r.grade.context)
        .await
        .expect("a whole read");
    let groups = sql_rows(
        lake,
        r,
        "SELECT processor_date, fx_rate_date, count(*), \
         count(*) FILTER (WHERE fx_rate_micros IS NULL OR fx_rate_date IS NULL) \
         FROM gold.fct_payments WHERE lower(currency) = 'usd' GROUP BY processor_date, fx_rate_date",
    )
    .await;
    let (days, rate_days) = (sql_ints(&groups, 0), sql_ints(&groups, 1));
    let (counts, without) = (sql_ints(&groups, 2), sql_ints(&groups, 3));
    let mut want = shack::audits::FxFigures::default();
    for (((p, d), n), w) in days.into_iter().zip(rate_days).zip(counts).zip(without) {
        want.usd_events += n.unwrap_or(0);
        want.without_rate += w.unwrap_or(0);
        if let (Some(p), Some(d)) = (p, d) {
            *want.by_gap_days.entry(p - d).or_default() += n.unwrap_or(0);
        }
    }
    assert_eq!(fx, want);
    assert!(
        want.usd_events > 0 && want.by_gap_days.len() >= 2,
        "{want:?}"
    );
}

/// The conservation audit's figures equal a whole read; 1 when it carried them.
async fn conservation_is_a_whole_read(lake: &Lake, r: &RunReport) -> usize {
    let whole = shack::audits::conservation_figures(&lake.catalog, &r.grade.context)
        .await
        .expect("a whole read");
    figures_equal(r, "conservation", &whole)
}

/// The FX-coverage audit's figures, and the oldest rate its reason names, equal a whole read
/// of `gold.fct_payments`; 1 when it carried them.
async fn fx_coverage_is_a_whole_read(lake: &Lake, r: &RunReport) -> usize {
    let whole = shack::audits::fx_figures(&lake.catalog, &r.grade.context)
        .await
        .expect("a whole read");
    let carried = figures_equal(r, "fx coverage", &whole);
    let oldest = r
        .grade
        .results
        .iter()
        .find(|a| a.name == "fx coverage")
        .and_then(|a| a.evidence["oldest_rate_days"].as_i64());
    assert_eq!(oldest, whole.oldest_days(), "as of {}", r.grade.as_of());
    carried
}

/// A settlement that gold's cash does not match: while its day closed less than 48 hours ago
/// the reconciliation warns (late webhooks may still come); after that it blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciliation_gap_warns_while_settling_then_blocks() {
    let landing = Landing::new();
    landing.put(
        Source::Settlements,
        utc(2026, 8, 11, 6, 30, 0),
        "2026-08-10",
        b"settlement_date,currency,gross_minor,refunds_minor,net_minor\n2026-08-10,cad,22345,0,22345\n",
    );
    // One order and its capture of 100.00 CAD; the processor settles 223.45 for the day.
    one_paid_order(&landing, utc(2026, 8, 10, 12, 5, 0));
    landing.put(
        Source::FxRates,
        utc(2026, 8, 10, 21, 0, 0),
        "2026-08-10",
        b"rate_date,base,quote,rate\n2026-08-10,USD,CAD,1.370000\n",
    );
    let lake = Lake::new();
    let settling = run(&lake, landing.root(), utc(2026, 8, 11, 12, 0, 0), false).await;
    assert_eq!(verdict(&settling, "reconciliation"), Verdict::Warn);
    assert_eq!(
        settling.grade.results[3].reason,
        "still settling: 2026-08-10 CAD net off by -123.45"
    );
    assert!(settling.published(), "a warning does not block");
    let still = run(&lake, landing.root(), utc(2026, 8, 12, 23, 59, 0), false).await;
    assert_eq!(verdict(&still, "reconciliation"), Verdict::Warn);
    let late = run(&lake, landing.root(), utc(2026, 8, 13, 0, 0, 0), false).await;
    assert_eq!(verdict(&late, "reconciliation"), Verdict::Block);
    assert_eq!(
        late.grade.results[3].reason,
        "2026-08-10 CAD net off by -123.45"
    );
    assert!(!late.published());
    assert_eq!(
        late.publish.render(),
        "Not published. gold still shows the build as of 2026-08-12 23:59 UTC."
    );
}

/// Cash in gold on a day the processor never sent a settlement for: awaited while the day is
/// settling, then the run blocks naming the day, instead of passing for want of a line to check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_that_never_arrives_blocks_after_the_window() {
    let landing = Landing::new();
    one_paid_order(&landing, utc(2026, 8, 10, 12, 5, 0));
    let lake = Lake::new();
    let awaited = run(&lake, landing.root(), utc(2026, 8, 11, 12, 0, 0), false).await;
    assert_eq!(verdict(&awaited, "reconciliation"), Verdict::Pass);
    assert!(awaited.published());
    // The processor settles the next day (nothing to settle, and it says so), not August 10.
    landing.put(
        Source::Settlements,
        utc(2026, 8, 12, 6, 30, 0),
        "2026-08-11",
        b"settlement_date,currency,gross_minor,refunds_minor,net_minor\n2026-08-11,cad,0,0,0\n",
    );
    let still = run(&lake, landing.root(), utc(2026, 8, 12, 23, 59, 0), false).await;
    assert_eq!(verdict(&still, "reconciliation"), Verdict::Pass);
    assert_eq!(
        still.grade.results[3].reason,
        "1 settlement lines match to the cent"
    );
    let late = run(&lake, landing.root(), utc(2026, 8, 13, 0, 0, 0), false).await;
    assert_eq!(verdict(&late, "reconciliation"), Verdict::Block);
    assert_eq!(
        late.grade.results[3].reason,
        "no settlement for 2026-08-10 CAD (gold net 100.00)"
    );
    assert!(!late.published());
}

/// A publish says "as of T": a run through T, after bronze was tapped further (by a `tap`, or
/// before a rollback), is refused before it writes anything, naming the file that arrived later
/// and the as-of that would hold it; it leaves no unfinished work for the next run to sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_publishes_what_arrived_after_its_as_of() {
    let landing = Landing::new();
    let later = one_paid_order(&landing, utc(2026, 8, 12, 12, 5, 0));
    let lake = Lake::new();
    lake.tap(landing.root(), utc(2026, 8, 12, 23, 0, 0)).await;
    let before = lake.refs().await;
    let refused = shack::run(
        &lake.catalog,
        landing.root(),
        &RunOptions::new(utc(2026, 8, 11, 12, 0, 0)),
        0,
        &shack::NoProgress,
    )
    .await
    .expect_err("bronze holds a file that arrived after the as-of");
    assert!(
        matches!(&refused, shack::ShackError::BronzeAhead { file, .. } if *file == later),
        "{refused}"
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "bronze on `audit` already holds {later}, which arrived at 2026-08-12 12:05:00 UTC, after --through 2026-08-11 12:00:00 UTC: a publish as of 2026-08-11 12:00:00 UTC would include it; run --through 2026-08-12 12:05:00 UTC or later (nothing was written)"
        )
    );
    assert_eq!(lake.refs().await, before, "no bronze ref moved");
    assert!(
        publish::publishes(&lake.catalog)
            .await
            .expect("log")
            .is_empty(),
        "nothing published"
    );
    assert!(
        lake.catalog
            .unfinished_work()
            .await
            .expect("work")
            .is_empty(),
        "the refused run left no mark"
    );
    // Through the later arrival, the same lake publishes.
    let r = run(&lake, landing.root(), utc(2026, 8, 12, 23, 0, 0), false).await;
    assert!(r.published());
}

/// The bucket brigade sums whatever integers the landing files hold: amounts whose sum passes
/// 64 bits are a typed error naming the landing zone, never an overflow panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_refuses_a_brigade_sum_past_64_bits() {
    let landing = Landing::new();
    one_paid_order(&landing, utc(2026, 8, 10, 12, 5, 0));
    let lake = Lake::new();
    let through = utc(2026, 8, 11, 12, 0, 0);
    assert!(run(&lake, landing.root(), through, false).await.published());
    let fine = shack::compare::compare(&lake.catalog, landing.root(), through, Some((2026, 8)))
        .await
        .expect("compare");
    assert_eq!(fine.naive_minor, 10000);
    // A month with no payment and no gold cash has nothing to weigh: it says so, rather than
    // a bridge of zeros that "matches".
    let empty = shack::compare::compare(&lake.catalog, landing.root(), through, Some((2026, 5)))
        .await
        .expect_err("nothing in May");
    assert_eq!(
        empty.to_string(),
        "nothing to compare: no payment of 2026-05 had landed by publish 1's as-of (2026-08-11 12:00 UTC), and its gold holds no cash that month (`sugarshack history` lists the publishes)"
    );
    // A file the lake never tapped (stamped before the publish, written after it), whose two
    // amounts sum past i64::MAX.
    let huge = format!(
        "{{\"id\":\"evt_9\",\"type\":\"charge.succeeded\",\"api_version\":\"2025-11-01\",\"created\":1786363200,\"data\":{{\"object\":{{\"id\":\"ch_9\",\"order_id\":\"ord_1\",\"amount\":{},\"currency\":\"cad\"}}}}}}\n",
        i64::MAX - 1
    );
    landing.put(
        Source::Payments,
        utc(2026, 8, 10, 13, 0, 0),
        "webhooks",
        huge.as_bytes(),
    );
    let err = shack::compare::compare(&lake.catalog, landing.root(), through, Some((2026, 8)))
        .await
        .expect_err("past 64 bits");
    assert!(err.to_string().contains("does not fit in 64 bits"), "{err}");
}

/// Revenue converts a USD event at its order date's rate: an order dated before the first rate
/// cannot be converted, and the fx coverage audit blocks naming it, rather than the event
/// silently missing from gold.mart_order_revenue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usd_order_before_the_first_rate_blocks_fx_coverage() {
    let landing = Landing::new();
    landing.put(
        Source::Orders,
        utc(2026, 8, 10, 11, 5, 0),
        "cdc",
        br#"{"op":"c","lsn":7,"before":null,"after":{"order_id":"ord_1","customer_id":"cus_1","status":"created","currency":"usd","total_minor":10000,"ship_region":"US-ME","created_at":"2026-08-10T11:00:00.000Z","updated_at":"2026-08-10T11:00:00.000Z"},"ts_ms":1786359600000}
"#,
    );
    landing.put(
        Source::FxRates,
        utc(2026, 8, 11, 21, 0, 0),
        "2026-08-11",
        b"rate_date,base,quote,rate\n2026-08-11,USD,CAD,1.370000\n",
    );
    landing.put(
        Source::Payments,
        utc(2026, 8, 12, 12, 5, 0),
        "webhooks",
        br#"{"id":"evt_1","type":"charge.succeeded","api_version":"2025-11-01","created":1786536000,"data":{"object":{"id":"ch_1","order_id":"ord_1","amount":10000,"currency":"usd"}}}
"#,
    );
    let lake = Lake::new();
    let r = run(&lake, landing.root(), utc(2026, 8, 12, 23, 0, 0), false).await;
    assert_eq!(verdict(&r, "fx coverage"), Verdict::Block);
    assert_eq!(
        r.grade.results[2].reason,
        "1 USD events are on orders dated before the first rate (2026-08-11): mart_order_revenue cannot convert them"
    );
    assert!(!r.published());
}

/// A rollback to a publish from before the first settlement arrived: the settlement tables,
/// first written later, go back to empty (as they were), their heads kept by tags; the next
/// run writes them again from bronze, to the same rows as before the rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_to_before_a_table_was_first_written_empties_it_and_the_next_run_rebuilds_it() {
    let season = season();
    let lake = Lake::new();
    let aug1 = utc(2026, 8, 1, 12, 0, 0);
    let aug6 = utc(2026, 8, 6, 12, 0, 0);
    assert!(run(&lake, &season, aug1, false).await.published());
    assert!(run(&lake, &season, aug6, false).await.published());
    let later = ["bronze.settlements", "silver.settlements"];
    let mut before = BTreeMap::new();
    for t in later {
        let rows = table_rows(&lake, t, &At::Main).await;
        assert!(!rows.is_empty(), "{t} has rows by August 6");
        before.insert(t, rows);
    }
    let cash = table_rows(&lake, "gold.mart_daily_cash", &At::Main).await;

    let o = publish::rollback(&lake.catalog, 1, "test", 0)
        .await
        .expect("a rollback to publish 1");
    assert_eq!(o.emptied, later);
    assert!(o.render().contains(
        "(bronze.settlements, silver.settlements first written after publish 1: empty again, as then)"
    ), "{}", o.render());
    let main = heads(&lake, "main").await;
    let audit = heads(&lake, "audit").await;
    for t in later {
        assert_eq!(main[t], None, "{t} main");
        assert!(table_rows(&lake, t, &At::Main).await.is_empty(), "{t}");
        assert!(
            table_rows(&lake, t, &At::reference("rollback-3-main"))
                .await
                .len()
                == before[t].len(),
            "{t}'s abandoned head is kept"
        );
    }
    assert_eq!(audit["silver.settlements"], None);
    assert!(
        audit["bronze.settlements"].is_some(),
        "bronze keeps every row"
    );
    assert!(
        table_rows(&lake, "gold.mart_daily_cash", &At::Main)
            .await
            .len()
            < cash.len(),
        "gold is back at August 1"
    );
    // `main` is behind the publish it abandoned: every table one run back, the settlements
    // back to nothing.
    let d = shack::diff::diff(&lake.catalog, "publish-2", "main")
        .await
        .expect("diff");
    for t in &d.tables {
        assert_eq!((t.ahead, t.behind), (None, Some(1)), "{}", t.table);
        if let Some(rows) = before.get(t.table.as_str()) {
            assert_eq!((t.rows_added, t.rows_removed), (0, rows.len() as u64));
        }
    }

    // The next run through August 6 writes them again from bronze: the same rows as before.
    assert!(run(&lake, &season, aug6, false).await.published());
    for t in later {
        assert_eq!(table_rows(&lake, t, &At::Main).await, before[t], "{t}");
    }
    assert_eq!(
        table_rows(&lake, "gold.mart_daily_cash", &At::Main).await,
        cash
    );
}

/// The season on a lake whose bronze was tapped ahead (as a rollback leaves it): the mornings
/// before the last file bronze holds arrived are skipped and said so, never refused and never
/// published with rows from after their as-of; the season goes on from the next morning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_season_skips_the_mornings_before_what_bronze_already_holds() {
    let season = season();
    let lake = Lake::new();
    let tapped = utc(2026, 8, 4, 12, 0, 0);
    lake.tap(&season, tapped).await;
    let options = shack::SeasonOptions {
        through: Some(utc(2026, 8, 6, 12, 0, 0)),
        ..Default::default()
    };
    let mut seen = Vec::new();
    let report = shack::play_season(
        &lake.catalog,
        &season,
        &options,
        &shack::NoProgress,
        &mut |r| seen.push(r.through),
    )
    .await
    .expect("the season plays on");
    let skipped = report.skipped.as_ref().expect("mornings skipped");
    assert_eq!(skipped.mornings, 3, "August 1 to 3");
    assert!(
        skipped.arrived > utc(2026, 8, 3, 12, 0, 0) && skipped.arrived <= tapped,
        "{}",
        skipped.arrived
    );
    assert_eq!(
        seen,
        [4, 5, 6].map(|d| utc(2026, 8, d, 12, 0, 0)),
        "the runs go on from August 4"
    );
    assert!(report.runs.iter().all(|r| r.published));
    assert!(
        report.render_summary().starts_with(&format!(
            "skipped 3 morning(s) before {}: bronze on `audit` already holds {}",
            skipped.arrived.format("%Y-%m-%d %H:%M UTC"),
            skipped.file
        )),
        "{}",
        report.render_summary()
    );
}
