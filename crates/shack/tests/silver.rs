//! The boil's promises, checked against the default season and its truth: every bronze line
//! accounted for, versions quarantined until their parser is enabled and then replayed without
//! loss, orders folded by LSN, payments once each, incremental runs equal to a rebuild.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use arrow_array::RecordBatch;
use chrono::{DateTime, Utc};
use common::*;
use lake::At;
use shack::silver::{self, BoilOptions, BoilReport, tables};
use shack::{Source, bronze};

fn audit() -> At {
    At::reference(bronze::AUDIT_BRANCH)
}

async fn boil(lake: &Lake, options: &BoilOptions) -> BoilReport {
    let report = shack::boil(&lake.catalog, options, &shack::NoProgress)
        .await
        .expect("boil");
    print!("{}", report.render());
    report
}

fn only_v1() -> BoilOptions {
    BoilOptions {
        parsers: silver::parse_version_list(sugarbush::API_V1),
        ..BoilOptions::default()
    }
}

fn replay() -> BoilOptions {
    BoilOptions {
        replay: true,
        ..BoilOptions::default()
    }
}

/// Every row of a table at audit as a line of text, sorted: tables compared row for row.
async fn table_rows(lake: &Lake, table: &str) -> Vec<String> {
    let batches = audit_rows(lake, table).await;
    rows_as_text(&batches)
}

/// A full build from bronze (a replay boil) leaves `tables` row for row as the daily boils did.
async fn a_full_build_gives_the_same(lake: &Lake, tables: &[&str]) {
    let mut daily = BTreeMap::new();
    for t in tables {
        daily.insert(*t, table_rows(lake, t).await);
    }
    let rebuilt = boil(lake, &replay()).await;
    assert_eq!(rebuilt.mode, "replay");
    for (t, rows) in daily {
        assert_eq!(table_rows(lake, t).await, rows, "{t}");
    }
}

/// (file, line) of every row of some batches.
fn keys(batches: &[RecordBatch]) -> Vec<(String, i64)> {
    let files = str_column(batches, "_landing_file");
    let lines = int_column(batches, "_line");
    files
        .into_iter()
        .zip(lines)
        .map(|(f, l)| (f.expect("file"), l))
        .collect()
}

/// Rows of a table at audit; empty when the table has no audit branch yet.
async fn audit_rows(lake: &Lake, table: &str) -> Vec<RecordBatch> {
    let t = lake.catalog.table(table).await.expect("table");
    if t.head(bronze::AUDIT_BRANCH).is_none() {
        return Vec::new();
    }
    lake.audit_rows(table).await
}

async fn query(lake: &Lake, sql: &str) -> Vec<RecordBatch> {
    lake.sql(&audit(), sql).await
}

const HEADERS: [(Source, &str); 2] = [
    (Source::FxRates, silver::parse::FX_HEADER),
    (Source::Settlements, silver::parse::SETTLEMENTS_HEADER),
];

/// Both sides counted: every bronze line at audit is exactly one of parsed (a row of the
/// source's parsed table), quarantined, or a header; duplicate deliveries are the parsed
/// payment rows flagged `is_duplicate`, and `silver.payments` holds the others.
async fn assert_conservation(lake: &Lake) {
    for source in Source::ALL {
        let bronze_rows = audit_rows(lake, &bronze::table_name(source)).await;
        let bronze_keys: Vec<(String, i64)> = keys(&bronze_rows);
        let raws = str_column(&bronze_rows, "_raw");
        let header = HEADERS.iter().find(|(s, _)| *s == source).map(|h| h.1);
        let headers: Vec<(String, i64)> = bronze_keys
            .iter()
            .zip(&raws)
            .filter(|(_, r)| {
                header.is_some_and(|h| r.as_deref().map(|r| r.trim_end_matches('\r')) == Some(h))
            })
            .map(|(k, _)| k.clone())
            .collect();
        let parsed_table = match source {
            Source::Orders => tables::ORDER_CHANGES,
            Source::Payments => tables::PAYMENT_EVENTS,
            Source::FxRates => tables::FX_RATE_HISTORY,
            Source::Settlements => tables::SETTLEMENTS,
        };
        // silver.settlements keeps the latest publication per key; the season publishes each
        // once, so it holds every parsed settlement line.
        let parsed = keys(&audit_rows(lake, parsed_table).await);
        let quarantined = keys(
            &query(
                lake,
                &format!(
                    "select _landing_file, _line from silver.quarantine where source = '{}'",
                    source.as_str()
                ),
            )
            .await,
        );
        let mut accounted: Vec<(String, i64)> = parsed
            .iter()
            .chain(&quarantined)
            .chain(&headers)
            .cloned()
            .collect();
        let total = accounted.len();
        accounted.sort();
        accounted.dedup();
        assert_eq!(
            accounted.len(),
            total,
            "{source}: a line is in two places (parsed, quarantined, header)"
        );
        let bronze_set: BTreeSet<(String, i64)> = bronze_keys.iter().cloned().collect();
        assert_eq!(
            bronze_set.len(),
            bronze_keys.len(),
            "{source}: bronze keys unique"
        );
        let accounted: BTreeSet<(String, i64)> = accounted.into_iter().collect();
        assert_eq!(
            bronze_set.len() as i64 - accounted.len() as i64,
            0,
            "{source}: bronze {} lines, silver accounts for {}",
            bronze_set.len(),
            accounted.len()
        );
        assert_eq!(
            bronze_set, accounted,
            "{source}: the same lines on both sides"
        );
        println!(
            "conservation {source}: {} bronze = {} parsed + {} quarantined + {} headers",
            bronze_set.len(),
            parsed.len(),
            quarantined.len(),
            headers.len()
        );
    }
    // Payments: every parsed delivery is a first delivery (in silver.payments) or a duplicate.
    let events = audit_rows(lake, tables::PAYMENT_EVENTS).await;
    let dup = str_column(&events, "is_duplicate");
    let firsts: BTreeSet<(String, i64)> = keys(&events)
        .into_iter()
        .zip(dup)
        .filter(|(_, d)| d.as_deref() == Some("false"))
        .map(|(k, _)| k)
        .collect();
    let payments: Vec<(String, i64)> = keys(&audit_rows(lake, tables::PAYMENTS).await);
    let payment_set: BTreeSet<(String, i64)> = payments.iter().cloned().collect();
    assert_eq!(payment_set.len(), payments.len());
    assert_eq!(
        firsts, payment_set,
        "silver.payments = the first deliveries"
    );
}

fn sum_report(reports: &[&BoilReport]) -> BTreeMap<Source, [u64; 5]> {
    let mut out: BTreeMap<Source, [u64; 5]> = BTreeMap::new();
    for r in reports {
        for s in &r.sources {
            assert_eq!(s.unaccounted(), 0, "{s:?}");
            let e = out.entry(s.source).or_default();
            e[0] += s.rows_read;
            e[1] += s.parsed;
            e[2] += s.duplicates;
            e[3] += s.quarantined;
            e[4] += s.headers;
        }
    }
    out
}

/// The whole season, boiled once: conservation, orders equal the truth's highest-LSN state,
/// payments once each and their daily totals equal the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_season_boiled_equals_the_truth() {
    let season = season();
    let lake = Lake::new();
    let end = utc(2026, 12, 31, 0, 0, 0);
    let started = Instant::now();
    lake.tap(&season, end).await;
    let tapped = started.elapsed();
    let report = boil(&lake, &BoilOptions::default()).await;
    println!("tap {tapped:?}, boil {:?}", started.elapsed() - tapped);
    assert!(report.catalog_version.is_some());
    assert_eq!(report.tables.len(), tables::TABLES.len());
    let truth = sugarbush::load_truth(&season).expect("truth");

    // Every line accounted for; the report says the same.
    assert_conservation(&lake).await;
    let sums = sum_report(&[&report]);
    let pay = sums[&Source::Payments];
    assert_eq!(pay[2], truth.summary.faults.duplicate_deliveries);
    assert_eq!(
        report
            .sources
            .iter()
            .find(|s| s.source == Source::Payments)
            .and_then(|s| s.reasons.get("unparseable_json"))
            .copied()
            .unwrap_or(0),
        truth.summary.faults.truncated_lines,
        "every truncated line, and only those, quarantined as unparseable_json"
    );
    assert_eq!(pay[3], truth.summary.faults.truncated_lines);
    assert_eq!(sums[&Source::Orders][3], 0, "no order line is quarantined");
    assert_eq!(sums[&Source::FxRates][3], 0);
    assert_eq!(sums[&Source::Settlements][3], 0);

    // Orders: each order's row is its highest-LSN change in the truth.
    let orders = audit_rows(&lake, tables::ORDERS).await;
    let ids = str_column(&orders, "order_id");
    let status = str_column(&orders, "status");
    let lsn = int_column(&orders, "_lsn");
    let deleted = str_column(&orders, "is_deleted");
    let total = int_column(&orders, "total_minor");
    let currency = str_column(&orders, "currency");
    let mut silver_orders: HashMap<String, (String, i64, bool, i64, String)> = HashMap::new();
    for (i, id) in ids.into_iter().enumerate() {
        let id = id.expect("id");
        let row = (
            status[i].clone().expect("status"),
            lsn[i],
            deleted[i].as_deref() == Some("true"),
            total[i],
            currency[i].clone().expect("currency"),
        );
        assert!(silver_orders.insert(id, row).is_none(), "an order twice");
    }
    let mut n = 0;
    let mut tombstones = 0;
    for o in sugarbush::read_orders(&season).expect("orders") {
        let o = o.expect("order");
        n += 1;
        let got = silver_orders
            .get(&o.order_id)
            .unwrap_or_else(|| panic!("{} missing from silver.orders", o.order_id));
        let want = (
            o.final_status.as_str().to_string(),
            o.final_lsn as i64,
            o.deleted_at.is_some(),
            o.total_minor,
            o.currency.as_str().to_string(),
        );
        assert_eq!(got, &want, "{}", o.order_id);
        tombstones += usize::from(want.2);
    }
    assert_eq!(n, silver_orders.len());
    assert!(tombstones > 0, "test orders stay as tombstones");
    assert_eq!(
        tombstones as u64, truth.summary.faults.test_orders_deleted,
        "every deleted test order is a tombstone"
    );

    // Payments: no event id twice, and the truth's totals per UTC day and currency.
    let rows = query(
        &lake,
        "select count(*) as n, count(distinct event_id) as d from silver.payments",
    )
    .await;
    assert_eq!(int_column(&rows, "n"), int_column(&rows, "d"));
    assert_eq!(
        int_column(&rows, "n")[0] as u64,
        truth.summary.volume.payment_events
    );
    let rows = query(
        &lake,
        "select cast(cast(created_at as date) as varchar) as day, currency, \
         sum(case when event_type = 'capture' then amount_minor else 0 end) as captured, \
         sum(case when event_type = 'refund' then amount_minor else 0 end) as refunded, \
         count(*) as events \
         from silver.payments group by 1, 2",
    )
    .await;
    let days = str_column(&rows, "day");
    let curs = str_column(&rows, "currency");
    let captured = int_column(&rows, "captured");
    let refunded = int_column(&rows, "refunded");
    let mut got: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    for (i, day) in days.into_iter().enumerate() {
        got.insert(
            (day.expect("day"), curs[i].clone().expect("cur")),
            (captured[i], refunded[i]),
        );
    }
    let want: BTreeMap<(String, String), (i64, i64)> = truth
        .daily
        .iter()
        .filter(|d| d.captures + d.refunds > 0)
        .map(|d| {
            (
                (d.date.to_string(), d.currency.as_str().to_string()),
                (d.captured_minor, d.refunded_minor),
            )
        })
        .collect();
    assert_eq!(got, want, "daily totals per UTC day and currency");

    // FX: the republished date holds the correction, and history shows both publications.
    for r in &truth.summary.fx.republished {
        let rows = query(
            &lake,
            &format!(
                "select rate_micros, publications from silver.fx_rates where rate_date = date '{}'",
                r.rate_date
            ),
        )
        .await;
        assert_eq!(
            int_column(&rows, "rate_micros"),
            vec![r.corrected_rate_micros]
        );
        assert_eq!(int_column(&rows, "publications"), vec![2]);
        let hist = query(
            &lake,
            &format!(
                "select rate_micros from silver.fx_rate_history where rate_date = date '{}' order by _arrived_at",
                r.rate_date
            ),
        )
        .await;
        assert_eq!(
            int_column(&hist, "rate_micros"),
            vec![r.original_rate_micros, r.corrected_rate_micros]
        );
    }
    let fx = audit_rows(&lake, tables::FX_RATES).await;
    assert_eq!(common::rows(&fx) as u64, truth.summary.fx.rate_dates);

    // Nothing new: nothing committed.
    let version = lake.catalog.head().await.expect("head").version;
    let again = boil(&lake, &BoilOptions::default()).await;
    assert!(again.nothing_new(), "{again:?}");
    assert_eq!(again.bronze_rows_read, 0);
    assert_eq!(lake.catalog.head().await.expect("head").version, version);
}

/// August 17 as it was: only the old parser, so the US account's new-version events are
/// quarantined; then the parser is enabled and silver replayed from bronze: none are, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_api_version_is_quarantined_until_its_parser_and_a_replay() {
    let season = season();
    let lake = Lake::new();
    let through = utc(2026, 8, 17, 12, 0, 0);
    lake.tap(&season, through).await;
    let before = boil(&lake, &only_v1()).await;
    let payments = before
        .sources
        .iter()
        .find(|s| s.source == Source::Payments)
        .expect("payments");
    let unsupported = payments
        .reasons
        .get("unsupported_api_version")
        .copied()
        .unwrap_or(0);
    assert!(unsupported > 0, "{payments:?}");

    // The quarantined lines are exactly the new-version deliveries bronze holds.
    let q = query(
        &lake,
        "select _raw from silver.quarantine where reason = 'unsupported_api_version'",
    )
    .await;
    let quarantined_ids: HashSet<String> = str_column(&q, "_raw")
        .into_iter()
        .map(|raw| {
            let j: serde_json::Value =
                serde_json::from_str(&raw.expect("raw")).expect("a complete line");
            assert_eq!(j["api_version"], sugarbush::API_V2);
            j["id"].as_str().expect("id").to_string()
        })
        .collect();
    assert_eq!(
        q.iter().map(|b| b.num_rows()).sum::<usize>() as u64,
        unsupported
    );
    let landed_v2: HashSet<String> = sugarbush::read_payment_events(&season)
        .expect("events")
        .map(|e| e.expect("event"))
        .filter(|e| e.api_version == sugarbush::API_V2 && e.first_landed_at <= through)
        .map(|e| e.event_id)
        .collect();
    assert!(!landed_v2.is_empty());
    assert_eq!(
        quarantined_ids, landed_v2,
        "every landed v2 event, and only those"
    );
    let in_payments = query(
        &lake,
        &format!(
            "select count(*) as n from silver.payments where api_version = '{}'",
            sugarbush::API_V2
        ),
    )
    .await;
    assert_eq!(int_column(&in_payments, "n"), vec![0]);
    let payments_before = rows(&audit_rows(&lake, tables::PAYMENTS).await);
    assert_conservation(&lake).await;

    // Enable both, replay: none quarantined, none lost.
    let after = boil(&lake, &replay()).await;
    assert_eq!(after.mode, "replay");
    assert_eq!(after.parsers, silver::known_versions());
    let q = query(
        &lake,
        "select count(*) as n from silver.quarantine where reason = 'unsupported_api_version'",
    )
    .await;
    assert_eq!(int_column(&q, "n"), vec![0]);
    let v2_rows = query(
        &lake,
        &format!(
            "select event_id from silver.payments where api_version = '{}'",
            sugarbush::API_V2
        ),
    )
    .await;
    let v2_ids: HashSet<String> = str_column(&v2_rows, "event_id")
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(v2_ids, landed_v2, "none lost");
    assert_eq!(
        rows(&audit_rows(&lake, tables::PAYMENTS).await),
        payments_before + landed_v2.len()
    );
    assert_conservation(&lake).await;
    // The replay is new snapshots: the quarantining run is still in history.
    let q = lake.catalog.table(tables::QUARANTINE).await.expect("table");
    assert!(q.snapshots().len() >= 2);
}

/// One boil per day and one full rebuild give the same silver, row for row; an incremental boil
/// reads only what bronze added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_boils_equal_a_rebuild_row_for_row() {
    let season = season();
    let lake = Lake::new();
    let start = utc(2026, 8, 10, 23, 59, 59);
    lake.tap(&season, start).await;
    let first = boil(&lake, &BoilOptions::default()).await;
    let mut reports = vec![first];
    let mut incremental_read = Vec::new();
    // August 11..18: the republished rate (12th, corrected on the 13th) and the API change.
    for day in 11..=18 {
        let through: DateTime<Utc> = utc(2026, 8, day, 23, 59, 59);
        let tapped = lake.tap(&season, through).await;
        let version = lake.catalog.head().await.expect("head").version;
        let started = Instant::now();
        let r = boil(&lake, &BoilOptions::default()).await;
        let elapsed = started.elapsed();
        assert_eq!(
            r.catalog_version,
            Some(version + 1),
            "every silver table of a run in one catalog commit"
        );
        // Every table fed by a source that moved gets a snapshot (no FX file on weekends).
        assert!(r.tables.iter().any(|t| t.table == tables::QUARANTINE));
        assert_eq!(r.mode, "incremental");
        assert_eq!(
            r.bronze_rows_read,
            tapped.rows(),
            "an incremental boil reads exactly the lines the tap added"
        );
        let merge = r
            .tables
            .iter()
            .find(|t| t.table == tables::ORDERS)
            .and_then(|t| t.merge.clone())
            .expect("orders merged");
        assert!(
            merge.files_pruned_by_partition > merge.files_read,
            "the merge skips old days unread: {merge:?}"
        );
        println!("merge of Aug {day}: {merge:?}");
        incremental_read.push((day, r.bronze_rows_read, r.silver_rows_read, elapsed));
        reports.push(r);
    }
    let daily: BTreeMap<&str, Vec<String>> = {
        let mut m = BTreeMap::new();
        for t in tables::TABLES {
            m.insert(t, table_rows(&lake, t).await);
        }
        m
    };
    let refs: Vec<&BoilReport> = reports.iter().collect();
    let sums = sum_report(&refs);
    assert_conservation(&lake).await;

    let started = Instant::now();
    let rebuilt = boil(&lake, &replay()).await;
    let replay_elapsed = started.elapsed();
    for t in tables::TABLES {
        let again = table_rows(&lake, t).await;
        assert_eq!(again.len(), daily[t].len(), "{t}: row count");
        assert_eq!(again, daily[t], "{t}: row for row");
    }
    let rebuilt_sums = sum_report(&[&rebuilt]);
    assert_eq!(
        sums, rebuilt_sums,
        "the same lines parsed, duplicated, quarantined, headers"
    );
    for (day, bronze_read, silver_read, elapsed) in &incremental_read {
        println!(
            "cost: incremental boil of Aug {day}: {bronze_read} bronze rows + {silver_read} silver rows read, {elapsed:?}"
        );
    }
    println!(
        "cost: replay: {} bronze rows + {} silver rows read, {replay_elapsed:?}",
        rebuilt.bronze_rows_read, rebuilt.silver_rows_read
    );
    let max_incremental = incremental_read.iter().map(|r| r.1).max().unwrap_or(0);
    assert!(max_incremental * 3 < rebuilt.bronze_rows_read);
}

/// A check of severity error fails the boil before anything is committed; the relationship
/// check only warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_before_their_orders_warn_and_commit() {
    let landing = Landing::new();
    let at = utc(2026, 8, 2, 0, 0, 12);
    let v1 = r#"{"id":"evt_a","type":"charge.succeeded","api_version":"2025-11-01","created":1785628800,"data":{"object":{"id":"ch_a","order_id":"ord_nowhere","amount":500,"currency":"cad"}}}"#;
    // The same event with its amount twice: which one the producer meant is not defined.
    let twice = v1.replace(r#""amount":500"#, r#""amount":500,"amount":50000"#);
    let mut lines: Vec<u8> = Vec::new();
    for l in [
        v1.as_bytes(),
        v1.as_bytes(),
        &v1.as_bytes()[..40],
        b"",
        b"\xff\xfegarbage",
        twice.as_bytes(),
    ] {
        lines.extend_from_slice(l);
        lines.push(b'\n');
    }
    landing.put(Source::Payments, at, "20260801T23", &lines);
    landing.put(
        Source::FxRates,
        at,
        "2026-08-01",
        b"rate_date,base,quote,rate\n2026-08-01,USD,CAD,1.368000\n2026-08-01,USD,CAD,1.3680001\n",
    );
    let lake = Lake::new();
    lake.tap(landing.root(), at).await;
    let r = boil(&lake, &BoilOptions::default()).await;
    let warn: Vec<_> = r.warnings().collect();
    assert_eq!(warn.len(), 1);
    assert_eq!(warn[0].failing, 1);
    let p = r
        .sources
        .iter()
        .find(|s| s.source == Source::Payments)
        .expect("payments");
    assert_eq!(
        (p.rows_read, p.parsed, p.duplicates, p.quarantined),
        (6, 1, 1, 4)
    );
    assert_eq!(p.reasons.get("unparseable_json"), Some(&1));
    assert_eq!(p.reasons.get("empty_line"), Some(&1));
    assert_eq!(p.reasons.get("not_utf8"), Some(&1));
    assert_eq!(p.reasons.get("duplicate_key"), Some(&1));
    let fx = r
        .sources
        .iter()
        .find(|s| s.source == Source::FxRates)
        .expect("fx");
    assert_eq!(
        (fx.rows_read, fx.parsed, fx.quarantined, fx.headers),
        (3, 1, 1, 1)
    );
    assert!(
        r.render()
            .contains("warn     relationships_silver_payments_order_id")
    );
    assert_conservation(&lake).await;

    // An unknown parser is refused before anything is read.
    let err = shack::boil(
        &lake.catalog,
        &BoilOptions {
            parsers: vec!["2099-01-01".into()],
            ..BoilOptions::default()
        },
        &shack::NoProgress,
    )
    .await
    .expect_err("unknown parser");
    assert!(
        matches!(err, shack::ShackError::UnknownParser { .. }),
        "{err}"
    );
}

/// Boiling before any tap says what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boiling_an_empty_lake_says_bronze_is_missing() {
    let lake = Lake::new();
    let err = shack::boil(&lake.catalog, &BoilOptions::default(), &shack::NoProgress)
        .await
        .expect_err("no bronze");
    assert!(matches!(err, shack::ShackError::NoBronze { .. }), "{err}");
    assert!(
        lake.catalog.head().await.expect("head").tables.is_empty(),
        "nothing created"
    );
}

/// A change event line as the CDC sink writes it.
fn change(op: &str, lsn: u64, order: &str, status: &str) -> String {
    let image = format!(
        r#"{{"order_id":"{order}","customer_id":"cus_1","status":"{status}","currency":"cad","total_minor":1500,"ship_region":"CA-NS","created_at":"2026-08-01T00:00:00.000Z","updated_at":"2026-08-01T00:00:00.000Z"}}"#
    );
    let (before, after) = if op == "d" {
        (image, "null".to_string())
    } else {
        ("null".to_string(), image)
    };
    format!(
        r#"{{"op":"{op}","lsn":{lsn},"before":{before},"after":{after},"ts_ms":1785542400000}}"#
    ) + "\n"
}

/// silver.orders at audit: order → (status, lsn, is_deleted).
async fn orders_state(lake: &Lake) -> BTreeMap<String, (String, i64, bool)> {
    let b = audit_rows(lake, tables::ORDERS).await;
    let ids = str_column(&b, "order_id");
    let status = str_column(&b, "status");
    let lsn = int_column(&b, "_lsn");
    let deleted = str_column(&b, "is_deleted");
    (0..ids.len())
        .map(|i| {
            (
                ids[i].clone().expect("id"),
                (
                    status[i].clone().expect("status"),
                    lsn[i],
                    deleted[i].as_deref() == Some("true"),
                ),
            )
        })
        .collect()
}

/// Across runs, the highest LSN wins whatever arrives later; a delete stays a tombstone that a
/// late update cannot resurrect; a replay folds to the same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_lower_lsn_changes_never_overwrite_and_tombstones_stay() {
    let landing = Landing::new();
    let lake = Lake::new();
    let t1 = utc(2026, 8, 2, 1, 0, 0);
    let t2 = utc(2026, 8, 2, 2, 0, 0);
    let t3 = utc(2026, 8, 2, 3, 0, 0);
    let state = |v: &[(&str, &str, i64, bool)]| -> BTreeMap<String, (String, i64, bool)> {
        v.iter()
            .map(|(id, s, l, d)| (id.to_string(), (s.to_string(), *l, *d)))
            .collect()
    };

    let body = change("c", 10, "ord_a", "created")
        + &change("c", 11, "ord_b", "created")
        + &change("u", 30, "ord_a", "paid");
    landing.put(Source::Orders, t1, "20260802T00", body.as_bytes());
    lake.tap(landing.root(), t1).await;
    boil(&lake, &BoilOptions::default()).await;
    assert_eq!(
        orders_state(&lake).await,
        state(&[
            ("ord_a", "paid", 30, false),
            ("ord_b", "created", 11, false)
        ])
    );

    // A late change with a lower LSN arrives after the newer one; ord_b is deleted.
    let body = change("u", 20, "ord_a", "cancelled") + &change("d", 40, "ord_b", "created");
    landing.put(Source::Orders, t2, "20260802T01", body.as_bytes());
    lake.tap(landing.root(), t2).await;
    boil(&lake, &BoilOptions::default()).await;
    assert_eq!(
        orders_state(&lake).await,
        state(&[("ord_a", "paid", 30, false), ("ord_b", "created", 40, true)])
    );

    // A late update of the deleted order cannot bring it back; a newer one of ord_a wins.
    let body = change("u", 35, "ord_b", "paid") + &change("u", 50, "ord_a", "shipped");
    landing.put(Source::Orders, t3, "20260802T02", body.as_bytes());
    lake.tap(landing.root(), t3).await;
    let r = boil(&lake, &BoilOptions::default()).await;
    let want = state(&[
        ("ord_a", "shipped", 50, false),
        ("ord_b", "created", 40, true),
    ]);
    assert_eq!(orders_state(&lake).await, want);
    let orders = r
        .tables
        .iter()
        .find(|t| t.table == tables::ORDERS)
        .expect("orders");
    assert_eq!(orders.rows, 1, "only ord_a's newer change is written");
    assert_eq!(orders.total_rows, Some(2));
    assert_eq!(rows(&audit_rows(&lake, tables::ORDER_CHANGES).await), 7);

    let before = table_rows(&lake, tables::ORDERS).await;
    boil(&lake, &replay()).await;
    assert_eq!(table_rows(&lake, tables::ORDERS).await, before);
}

/// A watermark naming a bronze snapshot the branch no longer holds (bronze was rolled back):
/// the boil says so and rebuilds from what bronze holds, rather than failing or skipping rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_bronze_no_longer_holds_rebuilds_silver() {
    let landing = Landing::new();
    let lake = Lake::new();
    let t1 = utc(2026, 8, 2, 1, 0, 0);
    let t2 = utc(2026, 8, 2, 2, 0, 0);
    let event = |id: &str| {
        format!(
            r#"{{"id":"{id}","type":"charge.succeeded","api_version":"2025-11-01","created":1785628800,"data":{{"object":{{"id":"ch_{id}","order_id":"ord_1","amount":500,"currency":"cad"}}}}}}"#
        ) + "\n"
    };
    landing.put(
        Source::Payments,
        t1,
        "20260802T00",
        event("evt_1").as_bytes(),
    );
    let first = lake.tap(landing.root(), t1).await;
    boil(&lake, &BoilOptions::default()).await;
    landing.put(
        Source::Payments,
        t2,
        "20260802T01",
        event("evt_2").as_bytes(),
    );
    lake.tap(landing.root(), t2).await;
    boil(&lake, &BoilOptions::default()).await;
    assert_eq!(rows(&audit_rows(&lake, tables::PAYMENTS).await), 2);

    let snapshot = first.batches[0].snapshot_id;
    lake.catalog
        .update_refs(
            &bronze::table_name(Source::Payments),
            &[lake::RefOp::Reset {
                branch: bronze::AUDIT_BRANCH.into(),
                to: snapshot,
            }],
            "rollback",
        )
        .await
        .expect("reset");
    let r = boil(&lake, &BoilOptions::default()).await;
    assert_eq!(r.mode, "replay");
    assert!(
        r.rebuilt_because
            .as_deref()
            .is_some_and(|w| w.contains("no longer holds")),
        "{r:?}"
    );
    assert!(r.render().contains("rebuilt"));
    let ids = str_column(&audit_rows(&lake, tables::PAYMENTS).await, "event_id");
    assert_eq!(ids, vec![Some("evt_1".to_string())]);
    assert_conservation(&lake).await;
}

#[test]
fn the_boil_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let catalog = lake::Catalog::in_memory();
    let options = BoilOptions::default();
    let fut = shack::boil(&catalog, &options, &shack::NoProgress);
    send(&fut);
}

/// An FX file rewritten in place (the same name, a corrected rate) and tapped again: its new
/// rate is the latest publication, in a daily run as in a full build, and the history keeps
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_rewritten_in_place_publishes_its_new_rate() {
    let landing = Landing::new();
    let lake = Lake::new();
    let at = utc(2026, 8, 1, 21, 0, 0);
    landing.put(
        Source::FxRates,
        at,
        "2026-08-01",
        b"rate_date,base,quote,rate\n2026-08-01,USD,CAD,1.368000\n",
    );
    lake.tap(landing.root(), at).await;
    boil(&lake, &BoilOptions::default()).await;
    landing.put(
        Source::FxRates,
        at,
        "2026-08-01",
        b"rate_date,base,quote,rate\n2026-08-01,USD,CAD,1.371234\n",
    );
    let second = lake.tap(landing.root(), utc(2026, 8, 2, 1, 0, 0)).await;
    assert_eq!(second.changed.len(), 1, "{second:?}");
    boil(&lake, &BoilOptions::default()).await;
    let rates = audit_rows(&lake, tables::FX_RATES).await;
    assert_eq!(int_column(&rates, "rate_micros"), vec![1_371_234]);
    assert_eq!(int_column(&rates, "publications"), vec![2]);
    let mut history = int_column(
        &audit_rows(&lake, tables::FX_RATE_HISTORY).await,
        "rate_micros",
    );
    history.sort();
    assert_eq!(history, vec![1_368_000, 1_371_234]);
    a_full_build_gives_the_same(&lake, &[tables::FX_RATES]).await;
}

/// A payment event redelivered with another `created` (on another UTC day than its first
/// delivery) is a duplicate in a daily run, as in a full build: silver.payments keeps the first
/// delivery only, so gold does not count the charge twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_on_another_day_is_a_duplicate() {
    let landing = Landing::new();
    let lake = Lake::new();
    let t1 = utc(2026, 8, 2, 1, 0, 0);
    let t2 = utc(2026, 8, 4, 1, 0, 0);
    let event = |id: &str, created: i64| {
        format!(
            r#"{{"id":"{id}","type":"charge.succeeded","api_version":"2025-11-01","created":{created},"data":{{"object":{{"id":"ch_{id}","order_id":"ord_1","amount":500,"currency":"cad"}}}}}}"#
        ) + "\n"
    };
    // 2026-08-02T00:00Z, then the same event stamped 2026-08-03T00:00Z.
    landing.put(
        Source::Payments,
        t1,
        "20260802T00",
        event("evt_1", 1_785_628_800).as_bytes(),
    );
    lake.tap(landing.root(), t1).await;
    boil(&lake, &BoilOptions::default()).await;
    let body = event("evt_1", 1_785_715_200) + &event("evt_2", 1_785_715_200);
    landing.put(Source::Payments, t2, "20260804T00", body.as_bytes());
    lake.tap(landing.root(), t2).await;
    let r = boil(&lake, &BoilOptions::default()).await;
    let p = r
        .sources
        .iter()
        .find(|s| s.source == Source::Payments)
        .expect("payments");
    assert_eq!((p.rows_read, p.parsed, p.duplicates), (2, 1, 1));
    let rows = audit_rows(&lake, tables::PAYMENTS).await;
    let mut ids = str_column(&rows, "event_id");
    ids.sort();
    assert_eq!(
        ids,
        vec![Some("evt_1".to_string()), Some("evt_2".to_string())]
    );
    assert_conservation(&lake).await;
    a_full_build_gives_the_same(&lake, &[tables::PAYMENTS]).await;
}

/// A change that moves its order's creation instant (part of silver.orders' merge key, so it
/// would add a second row) is quarantined as `created_at_changed` with its line, and the boil
/// goes on: the order keeps its first row, the other changes land, every bronze line is
/// accounted for, and a full build from bronze comes out the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_change_that_moves_created_at_is_quarantined() {
    let landing = Landing::new();
    let lake = Lake::new();
    let t1 = utc(2026, 8, 2, 1, 0, 0);
    let t2 = utc(2026, 8, 2, 2, 0, 0);
    landing.put(
        Source::Orders,
        t1,
        "20260802T00",
        change("c", 10, "ord_a", "created").as_bytes(),
    );
    lake.tap(landing.root(), t1).await;
    boil(&lake, &BoilOptions::default()).await;
    let moved = change("u", 20, "ord_a", "paid").replacen(
        "2026-08-01T00:00:00.000Z",
        "2026-07-01T00:00:00.000Z",
        1,
    );
    let body = moved.clone() + &change("c", 5, "ord_b", "created");
    landing.put(Source::Orders, t2, "20260802T01", body.as_bytes());
    lake.tap(landing.root(), t2).await;
    let r = boil(&lake, &BoilOptions::default()).await;
    let orders = r
        .sources
        .iter()
        .find(|s| s.source == Source::Orders)
        .expect("orders");
    assert_eq!((orders.parsed, orders.quarantined), (1, 1));
    assert_eq!(orders.reasons.get("created_at_changed"), Some(&1));
    assert!(r.checks.iter().all(|c| c.failing == 0), "{:?}", r.checks);
    let state = orders_state(&lake).await;
    assert_eq!(
        state,
        BTreeMap::from([
            ("ord_a".to_string(), ("created".to_string(), 10, false)),
            ("ord_b".to_string(), ("created".to_string(), 5, false)),
        ])
    );
    let q = audit_rows(&lake, tables::QUARANTINE).await;
    assert_eq!(
        str_column(&q, "reason"),
        vec![Some("created_at_changed".to_string())]
    );
    assert_eq!(
        str_column(&q, "_raw"),
        vec![Some(moved.trim_end().to_string())]
    );
    assert_conservation(&lake).await;
    // A full build meets the same lines in one batch and quarantines the same change.
    a_full_build_gives_the_same(
        &lake,
        &[tables::ORDERS, tables::ORDER_CHANGES, tables::QUARANTINE],
    )
    .await;
}

/// A bronze snapshot that is not an append since the watermark (a compaction rewrote the
/// lines): incremental reads cannot cross it, so the boil says so and rebuilds, and silver comes
/// out the same (lineage names the snapshot that first made each line visible).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_bronze_makes_the_boil_rebuild_to_the_same_silver() {
    let landing = Landing::new();
    let lake = Lake::new();
    let t1 = utc(2026, 8, 2, 1, 0, 0);
    let body = change("c", 10, "ord_a", "created") + &change("u", 30, "ord_a", "paid");
    landing.put(Source::Orders, t1, "20260802T00", body.as_bytes());
    lake.tap(landing.root(), t1).await;
    boil(&lake, &BoilOptions::default()).await;
    let mut before = BTreeMap::new();
    for t in tables::TABLES {
        before.insert(t, table_rows(&lake, t).await);
    }

    let name = bronze::table_name(Source::Orders);
    let lines = audit_rows(&lake, &name).await;
    lake.catalog
        .replace(
            &name,
            bronze::AUDIT_BRANCH,
            &lake::Replace::All,
            &lines,
            BTreeMap::new(),
        )
        .await
        .expect("compaction");
    let r = boil(&lake, &BoilOptions::default()).await;
    assert_eq!(r.mode, "replay");
    assert!(
        r.rebuilt_because
            .as_deref()
            .is_some_and(|w| w.contains("not an append")),
        "{r:?}"
    );
    for t in tables::TABLES {
        assert_eq!(table_rows(&lake, t).await, before[t], "{t}");
    }
    // And the next boil is incremental again, from the compacted head.
    let again = boil(&lake, &BoilOptions::default()).await;
    assert!(again.nothing_new(), "{again:?}");
}

/// Rows in a silver table at audit, as its snapshot summary says.
async fn total_rows(lake: &Lake, table: &str) -> u64 {
    let t = lake.catalog.table(table).await.expect("table");
    let head = t.head(bronze::AUDIT_BRANCH).expect("audit head");
    t.snapshot(head)
        .expect("snapshot")
        .summary
        .get("total-records")
        .and_then(|v| v.parse().ok())
        .expect("total-records")
}

/// The boil's progress messages, each with the time since the one before it (the time the
/// step it names took, for the `reading …` ones).
struct Reads(std::sync::Mutex<(Instant, Vec<String>)>);

impl Reads {
    fn new() -> Reads {
        Reads(std::sync::Mutex::new((Instant::now(), Vec::new())))
    }
}

impl shack::Progress for Reads {
    fn set_total(&self, _n: u64) {}
    fn inc(&self, _n: u64) {}
    fn message(&self, m: &str) {
        let mut g = self.0.lock().expect("lock");
        let took = g.0.elapsed();
        g.0 = Instant::now();
        if let Some(last) = g.1.last_mut() {
            last.push_str(&format!(" ({took:.1?})"));
        }
        g.1.push(m.to_string());
    }
}

/// The rows, data files opened and data files held of one of the boil's reads of silver, from
/// its message: `read {rows} {what} from {opened} of {held} data files of {table}`.
fn read_of(messages: &[String], what: &str) -> (u64, u64, u64) {
    let m = messages
        .iter()
        .find(|m| m.contains(&format!(" {what} from ")))
        .unwrap_or_else(|| panic!("no read of {what} in {messages:?}"));
    let words: Vec<&str> = m.split(' ').collect();
    let at = words.iter().position(|w| *w == "from").expect("from");
    (
        words[1].parse().expect("rows"),
        words[at + 1].parse().expect("files opened"),
        words[at + 3].parse().expect("files held"),
    )
}

/// One lookup of silver.orders by id, from its message: `read {rows} order rows from {read} of
/// {held} row groups in {files} of {files} data files of silver.orders, found {found}`.
#[derive(Debug)]
struct Lookup {
    rows: u64,
    groups_read: u64,
    groups_held: u64,
    found: u64,
}

fn lookups(messages: &[String]) -> Vec<Lookup> {
    let n = |w: &str| -> u64 {
        w.trim_matches(|c: char| !c.is_ascii_digit())
            .replace(',', "")
            .parse()
            .unwrap_or_else(|_| panic!("a number: {w:?}"))
    };
    messages
        .iter()
        .filter(|m| m.starts_with("read ") && m.contains(" order rows from "))
        .map(|m| {
            let w: Vec<&str> = m.split(' ').collect();
            let found = w.iter().position(|w| *w == "found").expect("found");
            Lookup {
                rows: n(w[1]),
                groups_read: n(w[5]),
                groups_held: n(w[7]),
                found: n(w[found + 1]),
            }
        })
        .collect()
}

/// An incremental boil's cost follows the new bronze rows, not the table's history: a daily
/// boil late in the season looks for the payment ids it already holds only in the days the new
/// events belong to (a partition or two of the fifty), and looks the orders its changes and
/// payments name up by id: on the changes' creation days, then (the few a refund names from
/// weeks back) on the other days, where `silver.orders`' bloom filters skip every row group
/// that holds none of them but a false positive or two. It reads under a fourth of what a boil
/// that read both tables whole would (15–23% on Sep 21–23, with row groups of
/// [`tables::ORDERS_ROW_GROUP_ROWS`]), and its result still equals a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_boil_reads_the_days_its_rows_touch_not_the_history() {
    let season = season();
    let lake = Lake::new();
    // Three days at the start of the season, seven weeks at once, then three days late in it.
    let mut late = Vec::new();
    for (month, day) in [(8, 1), (8, 2), (8, 3), (9, 20), (9, 21), (9, 22), (9, 23)] {
        let tapped = lake.tap(&season, utc(2026, month, day, 23, 59, 59)).await;
        let reads = Reads::new();
        let started = Instant::now();
        let r = shack::boil(&lake.catalog, &BoilOptions::default(), &reads)
            .await
            .expect("boil");
        let elapsed = started.elapsed();
        assert_eq!(r.mode, "incremental");
        let messages = reads.0.into_inner().expect("lock").1;
        for m in messages.iter().filter(|m| m.contains("silver")) {
            println!("  {m}");
        }
        let payments = total_rows(&lake, tables::PAYMENTS).await;
        let orders = total_rows(&lake, tables::ORDERS).await;
        println!(
            "cost: boil through 2026-{month:02}-{day:02}: {} bronze rows, {} silver rows read ({payments} rows in silver.payments, {orders} in silver.orders), {elapsed:?}",
            tapped.rows(),
            r.silver_rows_read
        );
        if month == 9 && day > 20 {
            late.push((day, messages, r.silver_rows_read, payments, orders));
        }
    }
    for (day, messages, silver_read, payments, orders) in &late {
        let (ids, files, _) = read_of(messages, "payment ids");
        assert!(
            ids * 20 < *payments && files <= 3,
            "Sep {day}: {ids} payment ids from {files} files, of {payments}"
        );
        let looked = lookups(messages);
        assert_eq!(looked.len(), 2, "Sep {day}: {looked:?}");
        let order_rows: u64 = looked.iter().map(|l| l.rows).sum();
        assert!(
            order_rows * 2 < *orders,
            "Sep {day}: {order_rows} order rows read of {orders}: {looked:?}"
        );
        // The other days: a row group per old order found, and a false positive or few; never
        // the history. At this scale a day's orders are two row groups, so the few dozen old
        // orders a day's refunds name cost a row group each, on a third of the days or fewer.
        let other = &looked[1];
        let group = tables::ORDERS_ROW_GROUP_ROWS as u64;
        assert!(
            other.groups_read <= other.found + 8
                && other.groups_read * 2 < other.groups_held
                && other.rows <= other.groups_read * group,
            "Sep {day}: the other days' lookup read more row groups than it found ids: {other:?}"
        );
        assert!(
            silver_read * 4 < payments + orders,
            "Sep {day}: {silver_read} silver rows read of {}",
            payments + orders
        );
    }
    let daily: BTreeMap<&str, Vec<String>> = {
        let mut m = BTreeMap::new();
        for t in [tables::PAYMENTS, tables::PAYMENT_EVENTS, tables::ORDERS] {
            m.insert(t, table_rows(&lake, t).await);
        }
        m
    };
    boil(&lake, &replay()).await;
    for (t, rows) in &daily {
        assert_eq!(&table_rows(&lake, t).await, rows, "{t}: row for row");
    }
}

/// A lake made before `silver.payments` was partitioned keeps its unpartitioned table: a boil
/// writes it as it is, finds the ids it holds by the data files' `created_at` bounds (only the
/// recent files are opened), and still equals a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpartitioned_silver_payments_is_kept_and_pruned_by_file_bounds() {
    let season = season();
    let lake = Lake::new();
    let schema = tables::schema(tables::PAYMENTS).expect("schema");
    lake.catalog
        .create_table(tables::PAYMENTS, &schema, &[])
        .await
        .expect("the table as an older version made it");
    for day in 18..=20 {
        lake.tap(&season, utc(2026, 9, day, 23, 59, 59)).await;
        let reads = Reads::new();
        let r = shack::boil(&lake.catalog, &BoilOptions::default(), &reads)
            .await
            .expect("boil");
        assert_eq!(r.mode, "incremental");
        let messages = reads.0.into_inner().expect("lock").1;
        for m in messages.iter().filter(|m| m.contains("silver")) {
            println!("  {m}");
        }
        if day == 20 {
            // Sep 18 boiled seven weeks into one file and Sep 19 appended one: the 20th's
            // events (and their redeliveries) can only be in the second.
            let (ids, opened, held) = read_of(&messages, "payment ids");
            assert_eq!(
                (opened, held),
                (1, 2),
                "Sep {day}: {ids} payment ids from {opened} of {held} files"
            );
        }
    }
    let t = lake.catalog.table(tables::PAYMENTS).await.expect("table");
    assert!(
        t.metadata().default_partition_spec().is_unpartitioned(),
        "an existing table keeps its spec"
    );
    let daily = table_rows(&lake, tables::PAYMENTS).await;
    boil(&lake, &replay()).await;
    assert_eq!(table_rows(&lake, tables::PAYMENTS).await, daily);
}

async fn marks(lake: &Lake) -> Vec<String> {
    lake.catalog.unfinished_work().await.expect("marks")
}

/// A boil on its own marks its work: a failed one leaves the mark, and the next tap sweeps
/// the files it wrote before it failed.
#[tokio::test]
async fn a_failed_boil_leaves_its_mark_and_the_next_tap_sweeps_its_files() {
    let lake = Lake::new();
    lake.tap_with(&season(), aug16(), &no_grace()).await;
    lake.catalog
        .set_failpoint(Some(lake::Failpoint::AfterDataFiles));
    let failed = shack::boil(&lake.catalog, &BoilOptions::default(), &shack::NoProgress).await;
    lake.catalog.set_failpoint(None);
    assert!(failed.is_err(), "the failpoint stops the commit");
    let left = marks(&lake).await;
    assert!(left.len() == 1 && left[0].starts_with("boil-"), "{left:?}");
    let next = shack::tap_alone(
        &lake.catalog,
        &season(),
        utc(2026, 8, 17, 12, 0, 0),
        &no_grace(),
        &shack::NoProgress,
    )
    .await
    .expect("tap");
    assert!(next.orphans_removed > 0, "{}", next.render());
    let left = marks(&lake).await;
    assert!(left.is_empty(), "{left:?} after {}", next.render());
    // And a boil that succeeds takes its mark back.
    boil(&lake, &BoilOptions::default()).await;
    assert!(marks(&lake).await.is_empty());
}
