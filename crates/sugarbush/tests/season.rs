//! The default season, weighed: determinism, every fault in proportion and exactly as counted
//! in truth/, settlements equal to the truth, the API change, the FX calendar, the landing
//! layout and `landed(through)`, and the story's bucket-brigade numbers.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use chrono::{Datelike, Duration, NaiveDate, Weekday};
use sugarbush::{
    Currency, GenerateOptions, NoProgress, OrderStatus, SeasonConfig, Source, SugarbushError,
    awaiting_shipment, generate, landed, landing_digest, load_truth, parse_landing_name,
    read_order_changes, read_orders, read_payment_events,
};
use support::{at, end_of_time, lines, parse_change, parse_payment, resent_copies, season};

/// The digest of the default season's landing zone. If a change to the generator changes the
/// bytes on purpose, bump `GENERATOR_VERSION` and write the new digest here.
const DEFAULT_SEASON_DIGEST: &str =
    "74898cb05ab2385f6a5f21ca801f51eff19cf2e1af9628b547d8bfd3cb7c4c99";

#[test]
fn the_default_season_is_byte_identical_on_every_run() {
    let shared = season();
    let first = landing_digest(shared).expect("digest");

    // A second run, over a landing zone holding junk, with force: the junk goes, the bytes match.
    let dir = tempfile::tempdir().expect("temp dir");
    let junk = dir.path().join("landing/orders/2026-01-01/junk.txt");
    fs::create_dir_all(junk.parent().expect("parent")).expect("mkdir");
    fs::write(&junk, b"junk").expect("write junk");
    fs::create_dir_all(dir.path().join("truth")).expect("mkdir truth");
    fs::write(dir.path().join("truth/stale.json"), b"{}").expect("write stale truth");
    let report = generate(
        dir.path(),
        &SeasonConfig::default(),
        &GenerateOptions { force: true },
        &NoProgress,
    )
    .expect("generates");
    assert!(!junk.exists(), "force clears landing/");
    assert!(
        !dir.path().join("truth/stale.json").exists(),
        "force clears truth/"
    );
    let second = landing_digest(dir.path()).expect("digest");
    assert_eq!(first, second, "two runs of the default season differ");
    assert_eq!(
        second, DEFAULT_SEASON_DIGEST,
        "the default season's bytes changed: if on purpose, bump GENERATOR_VERSION and pin the new digest"
    );
    // The truth is deterministic too.
    for file in [
        "summary.json",
        "daily.csv",
        "orders.csv",
        "order_changes.csv",
        "payment_events.csv",
        "awaiting.csv",
        "fx_rates.csv",
    ] {
        let a = fs::read(shared.join("truth").join(file)).expect("read truth");
        let b = fs::read(dir.path().join("truth").join(file)).expect("read truth");
        assert!(a == b, "truth/{file} differs between runs");
    }
    // The report says what the truth says.
    let truth = load_truth(dir.path()).expect("truth loads");
    assert_eq!(report.faults, truth.summary.faults);
    assert_eq!(report.volume, truth.summary.volume);
    assert_eq!(report.sources, truth.summary.sources);
    assert_eq!(
        report.files,
        report.sources.iter().map(|s| s.files).sum::<u64>()
    );
}

#[test]
fn every_landing_file_was_last_modified_when_it_landed() {
    // A landing zone generated in a second reads like one filled over the season: each file's
    // modification time is the instant its name says it landed.
    let shared = season();
    let mut files = 0;
    for source in Source::ALL {
        for f in landed(shared, source, end_of_time()).expect("lists") {
            let modified = fs::metadata(&f.path)
                .and_then(|m| m.modified())
                .expect("mtime");
            assert_eq!(
                chrono::DateTime::<chrono::Utc>::from(modified),
                f.arrived_at,
                "{}",
                f.relative_name
            );
            files += 1;
        }
    }
    assert!(files > 1_000, "only {files} landing files");
}

#[test]
fn another_seed_gives_another_season() {
    let dir = tempfile::tempdir().expect("temp dir");
    let report = generate(
        dir.path(),
        &SeasonConfig { seed: 7, scale: 1 },
        &GenerateOptions::default(),
        &NoProgress,
    )
    .expect("generates");
    let default = load_truth(season()).expect("truth");
    assert_ne!(report.volume.orders, default.summary.volume.orders);
    assert_eq!(report.faults.resent_files, 7);
    assert_eq!(report.faults.republished_rates, 1);
}

#[test]
fn a_non_empty_landing_zone_is_refused_without_force() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir
        .path()
        .join("landing/payments/2026-08-01/20260801T010012Z-payments-20260801T00.jsonl");
    fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
    fs::write(&file, b"{}\n").expect("write");
    let err = generate(
        dir.path(),
        &SeasonConfig::default(),
        &GenerateOptions::default(),
        &NoProgress,
    )
    .expect_err("refuses");
    assert!(
        matches!(err, SugarbushError::LandingNotEmpty { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("landing"),
        "the error names the folder: {err}"
    );
    assert_eq!(
        fs::read(&file).expect("still there"),
        b"{}\n",
        "nothing was touched"
    );
    assert!(!dir.path().join("truth").exists());
}

#[test]
fn scale_zero_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let err = generate(
        dir.path(),
        &SeasonConfig { seed: 1, scale: 0 },
        &GenerateOptions::default(),
        &NoProgress,
    )
    .expect_err("refuses");
    assert!(
        matches!(err, SugarbushError::BadScale { scale: 0, .. }),
        "{err}"
    );
}

#[test]
fn every_fault_is_present_in_proportion_and_counted_exactly() {
    let root = season();
    let truth = load_truth(root).expect("truth");
    let f = &truth.summary.faults;

    // Re-sent files: exactly seven, byte for byte, under new names, later.
    let copies = resent_copies(root);
    assert_eq!(copies.len(), 7);
    assert_eq!(f.resent_files, 7);
    let listed: BTreeSet<&str> = truth
        .summary
        .resent
        .iter()
        .map(|r| r.copy.as_str())
        .collect();
    assert_eq!(listed, copies.iter().map(String::as_str).collect());
    for r in &truth.summary.resent {
        let a = parse_landing_name(&r.original).expect("name");
        let b = parse_landing_name(&r.copy).expect("name");
        assert!(b.arrived_at > a.arrived_at, "the copy arrives later");
        assert_ne!(r.original, r.copy);
    }
    let copies: BTreeSet<String> = copies.into_iter().collect();

    // Payments: duplicates, truncated lines, v2 events.
    let mut deliveries: BTreeMap<String, u64> = BTreeMap::new();
    let mut truncated = 0u64;
    let mut v2_lines = 0u64;
    let mut v2_events = BTreeSet::new();
    for l in lines(root, Source::Payments) {
        if copies.contains(&l.file) {
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(&l.text) {
            Err(_) => truncated += 1,
            Ok(j) => {
                let id = j["id"].as_str().expect("an event id").to_string();
                if j["api_version"] == "2026-08-01" {
                    v2_lines += 1;
                    v2_events.insert(id.clone());
                }
                *deliveries.entry(id).or_default() += 1;
            }
        }
    }
    let events = deliveries.len() as u64;
    let duplicates: u64 = deliveries.values().map(|n| n - 1).sum();
    let twice = deliveries.values().filter(|n| **n > 1).count() as u64;
    assert_eq!(events, truth.summary.volume.payment_events);
    assert_eq!(duplicates, f.duplicate_deliveries);
    assert_eq!(twice, f.events_delivered_twice);
    assert_eq!(truncated, f.truncated_lines);
    assert_eq!(v2_lines, f.v2_deliveries);
    assert_eq!(v2_events.len() as u64, f.v2_events);
    // About 1 in 40 delivered twice; "a few" truncated lines.
    let permille = duplicates * 1000 / events;
    assert!((20..=30).contains(&permille), "duplicates {permille}‰");
    assert!((2..=30).contains(&truncated), "truncated lines {truncated}");

    // Orders: late CDC events, overtaken ones, test orders created then deleted.
    let mut late = 0u64;
    let mut changes = 0u64;
    let mut per_order: BTreeMap<String, Vec<u64>> = BTreeMap::new(); // LSNs in arrival order
    let mut late_lsns = BTreeSet::new();
    let mut creates: BTreeMap<String, String> = BTreeMap::new();
    let mut deletes = BTreeSet::new();
    for l in lines(root, Source::Orders) {
        if copies.contains(&l.file) {
            continue;
        }
        let c = parse_change(&l.text);
        changes += 1;
        if (l.arrived_at.timestamp_millis() - c.ts_ms) > 90 * 60 * 1000 {
            late += 1;
            late_lsns.insert(c.lsn);
        }
        if c.op == "c" {
            creates.insert(c.order_id.clone(), c.customer_id.clone());
        }
        if c.op == "d" {
            deletes.insert(c.order_id.clone());
        }
        per_order.entry(c.order_id).or_default().push(c.lsn);
    }
    let overtaken = per_order
        .values()
        .flat_map(|lsns| {
            lsns.iter()
                .enumerate()
                .filter(|(i, lsn)| late_lsns.contains(lsn) && lsns[..*i].iter().any(|x| x > lsn))
                .map(|(_, lsn)| *lsn)
                .collect::<Vec<_>>()
        })
        .count() as u64;
    assert_eq!(changes, truth.summary.volume.change_events);
    assert_eq!(late, f.late_cdc_events);
    assert_eq!(overtaken, f.late_cdc_overtaken);
    let permille = late * 1000 / changes;
    assert!((16..=24).contains(&permille), "late CDC {permille}‰");
    assert!(overtaken > 0 && overtaken < late);
    assert_eq!(deletes.len() as u64, f.test_orders_deleted);
    assert_eq!(f.test_orders_created, f.test_orders_deleted);
    assert!(
        f.test_orders_deleted >= 20,
        "a few test orders: {}",
        f.test_orders_deleted
    );
    // Test orders are created, then deleted, and never paid.
    let test_customers: BTreeSet<&String> = deletes.iter().filter_map(|o| creates.get(o)).collect();
    assert!(test_customers.len() <= 3, "QA accounts: {test_customers:?}");

    // The republished rate.
    assert_eq!(f.republished_rates, 1);
    assert_eq!(truth.summary.fx.republished.len(), 1);
}

#[test]
fn settlements_equal_the_truth_and_the_parsed_events() {
    let root = season();
    let truth = load_truth(root).expect("truth");
    // What the story's parsers read, deduplicated on the event id.
    let mut seen = BTreeSet::new();
    let mut sums: BTreeMap<(NaiveDate, String), (i64, i64)> = BTreeMap::new();
    for l in lines(root, Source::Payments) {
        let Some(p) = parse_payment(&l.text) else {
            continue;
        };
        if !seen.insert(p.event_id.clone()) {
            continue;
        }
        let day = chrono::DateTime::from_timestamp(p.created, 0)
            .expect("instant")
            .date_naive();
        let e = sums.entry((day, p.currency.clone())).or_default();
        if p.refund {
            e.1 += p.amount;
        } else {
            e.0 += p.amount;
        }
    }
    let files = landed(root, Source::Settlements, end_of_time()).expect("landed");
    assert_eq!(files.len(), 91, "one per UTC day 2026-08-01..2026-10-30");
    let mut days = BTreeSet::new();
    for f in files {
        let text = fs::read_to_string(&f.path).expect("read");
        let mut rows = text.lines();
        assert_eq!(
            rows.next(),
            Some("settlement_date,currency,gross_minor,refunds_minor,net_minor")
        );
        for row in rows {
            let v: Vec<&str> = row.split(',').collect();
            let day: NaiveDate = v[0].parse().expect("a date");
            let (gross, refunds, net): (i64, i64, i64) = (
                v[2].parse().expect("int"),
                v[3].parse().expect("int"),
                v[4].parse().expect("int"),
            );
            assert_eq!(net, gross - refunds);
            let cur = match v[1] {
                "cad" => Currency::Cad,
                "usd" => Currency::Usd,
                other => panic!("currency {other}"),
            };
            let t = truth.daily_for(day, cur).expect("a truth row");
            assert_eq!(
                (gross, refunds, net),
                (t.captured_minor, t.refunded_minor, t.net_minor),
                "{day} {cur:?}"
            );
            let parsed = sums
                .get(&(day, v[1].to_string()))
                .copied()
                .unwrap_or_default();
            assert_eq!((gross, refunds), parsed, "{day} {cur:?}: the parsed events");
            // It arrives the next day.
            assert_eq!(f.arrived_at.date_naive(), day + Duration::days(1));
            days.insert(day);
        }
    }
    assert_eq!(days.len(), 91);
    // No money moves outside the settled days.
    let settled: i64 = truth
        .daily
        .iter()
        .filter(|d| days.contains(&d.date))
        .map(|d| d.net_minor)
        .sum();
    let all: i64 = truth.daily.iter().map(|d| d.net_minor).sum();
    assert_eq!(settled, all);
    // The truth's payment events say the same.
    let mut from_events: BTreeMap<(NaiveDate, Currency), i64> = BTreeMap::new();
    for e in read_payment_events(root).expect("events") {
        let e = e.expect("an event row");
        let sign = if e.kind == sugarbush::PaymentKind::Refund {
            -1
        } else {
            1
        };
        *from_events
            .entry((e.created.date_naive(), e.currency))
            .or_default() += sign * e.amount_minor;
    }
    for d in &truth.daily {
        assert_eq!(
            from_events.get(&(d.date, d.currency)).copied().unwrap_or(0),
            d.net_minor
        );
    }
    // CAD equivalents: per day (finance) and per event (a fact table) differ by rounding only.
    let mut by_event: BTreeMap<(NaiveDate, Currency), (i64, i64)> = BTreeMap::new();
    for e in read_payment_events(root).expect("events") {
        let e = e.expect("an event row");
        let day = e.created.date_naive();
        let sign = if e.kind == sugarbush::PaymentKind::Refund {
            -1
        } else {
            1
        };
        let rate = match e.currency {
            Currency::Cad => 1_000_000,
            Currency::Usd => truth.rate_for(day).expect("a rate").rate_micros,
        };
        // Half away from zero, in integers.
        let micro = i128::from(sign * e.amount_minor) * i128::from(rate);
        let cents = (micro.abs() + 500_000) / 1_000_000 * micro.signum();
        let entry = by_event.entry((day, e.currency)).or_default();
        entry.0 += cents as i64;
        entry.1 += 1;
    }
    for d in &truth.daily {
        let (cad, events) = by_event
            .get(&(d.date, d.currency))
            .copied()
            .unwrap_or_default();
        assert_eq!(cad, d.net_cad_minor_by_event, "{} {:?}", d.date, d.currency);
        assert!(
            (d.net_cad_minor - cad).abs() <= (events + 1) / 2,
            "{} {:?}",
            d.date,
            d.currency
        );
        if d.currency == Currency::Cad {
            assert_eq!(
                (d.net_cad_minor, d.net_cad_minor_by_event),
                (d.net_minor, d.net_minor)
            );
        } else {
            assert_eq!(
                d.fx_rate_micros,
                truth.rate_for(d.date).map(|r| r.rate_micros)
            );
        }
    }
}

#[test]
fn the_us_account_changes_api_version_on_august_17() {
    let root = season();
    let change = at("2026-08-17T00:00:00Z").timestamp();
    let (mut v1_usd, mut v2_usd, mut v1_cad, mut v2_refunds) = (0, 0, 0, 0);
    for l in lines(root, Source::Payments) {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(&l.text) else {
            continue;
        };
        let created = j["created"].as_i64().expect("created");
        let o = &j["data"]["object"];
        match j["api_version"].as_str().expect("api_version") {
            "2025-11-01" => {
                let cur = o["currency"].as_str().expect("a lower-case currency");
                assert!(o["amount"].is_i64(), "an integer amount: {}", l.text);
                assert!(
                    o["order_id"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("ord_"))
                );
                if cur == "usd" {
                    assert!(
                        created < change,
                        "a 2025-11-01 USD event after the change: {}",
                        l.text
                    );
                    v1_usd += 1;
                } else {
                    assert_eq!(cur, "cad");
                    v1_cad += 1;
                }
                if j["type"] == "charge.refunded" {
                    assert!(
                        o["refund"]["id"]
                            .as_str()
                            .is_some_and(|s| s.starts_with("re_"))
                    );
                    assert!(o["refund"]["amount"].is_i64());
                    assert!(o["refund"]["amount"].as_i64() <= o["amount"].as_i64());
                }
            }
            "2026-08-01" => {
                assert!(
                    created >= change,
                    "a 2026-08-01 event before the change: {}",
                    l.text
                );
                assert_eq!(o["amount"]["currency"], "USD", "only the US account moved");
                assert!(o["amount"]["value"].is_i64());
                assert!(o.get("order_id").is_none() && o.get("currency").is_none());
                assert!(
                    o["metadata"]["order_id"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("ord_"))
                );
                if j["type"] == "charge.refunded" {
                    assert_eq!(o["object"], "refund");
                    assert!(o["id"].as_str().is_some_and(|s| s.starts_with("re_")));
                    assert!(o["charge"].as_str().is_some_and(|s| s.starts_with("ch_")));
                    v2_refunds += 1;
                } else {
                    assert!(o["id"].as_str().is_some_and(|s| s.starts_with("ch_")));
                }
                v2_usd += 1;
            }
            other => panic!("unknown api_version {other}"),
        }
    }
    assert!(v1_usd > 1_000 && v2_usd > 1_000 && v1_cad > 10_000 && v2_refunds > 100);
}

#[test]
fn weekends_and_holidays_have_no_rates() {
    let root = season();
    let mut dates = BTreeMap::new();
    for f in landed(root, Source::FxRates, end_of_time()).expect("landed") {
        let text = fs::read_to_string(&f.path).expect("read");
        let mut rows = text.lines();
        assert_eq!(rows.next(), Some("rate_date,base,quote,rate"));
        let row: Vec<&str> = rows.next().expect("one rate").split(',').collect();
        assert_eq!(&row[1..3], ["USD", "CAD"]);
        assert!(
            sugarbush::parse_rate_micros(row[3]).is_some(),
            "six decimals: {}",
            row[3]
        );
        let date: NaiveDate = row[0].parse().expect("a date");
        *dates.entry(date).or_insert(0) += 1;
    }
    let holidays: BTreeSet<NaiveDate> = ["2026-09-07", "2026-09-30", "2026-10-12"]
        .iter()
        .map(|d| d.parse().expect("date"))
        .collect();
    let mut day: NaiveDate = "2026-07-31".parse().expect("date");
    let last: NaiveDate = "2026-10-30".parse().expect("date");
    while day <= last {
        let weekend = matches!(day.weekday(), Weekday::Sat | Weekday::Sun);
        let expected = !weekend && !holidays.contains(&day);
        assert_eq!(dates.contains_key(&day), expected, "{day}");
        day += Duration::days(1);
    }
    let truth = load_truth(root).expect("truth");
    assert_eq!(
        truth.summary.fx.holidays,
        holidays.into_iter().collect::<Vec<_>>()
    );
    // Saturday 2026-08-01 uses Friday's rate.
    let first = truth
        .rate_for("2026-08-01".parse().expect("date"))
        .expect("a rate");
    assert_eq!(first.rate_date.to_string(), "2026-07-31");
}

#[test]
fn august_12_is_republished_with_a_correction() {
    let root = season();
    let files: Vec<_> = landed(root, Source::FxRates, end_of_time())
        .expect("landed")
        .into_iter()
        .filter(|f| {
            fs::read_to_string(&f.path)
                .expect("read")
                .contains("\n2026-08-12,")
        })
        .collect();
    assert_eq!(files.len(), 2);
    assert!(files[1].arrived_at > files[0].arrived_at);
    let rate = |i: usize| {
        let text = fs::read_to_string(&files[i].path).expect("read");
        sugarbush::parse_rate_micros(text.trim_end().rsplit(',').next().expect("rate"))
            .expect("rate")
    };
    assert_ne!(rate(0), rate(1));
    let truth = load_truth(root).expect("truth");
    let r = &truth.summary.fx.republished[0];
    assert_eq!(r.rate_date.to_string(), "2026-08-12");
    assert_eq!(
        (r.original_rate_micros, r.corrected_rate_micros),
        (rate(0), rate(1))
    );
    assert_eq!(r.original_file, files[0].relative_name);
    assert_eq!(r.corrected_file, files[1].relative_name);
    let valid = truth
        .rate_for("2026-08-12".parse().expect("date"))
        .expect("a rate");
    assert_eq!(
        (
            valid.rate_micros,
            valid.published,
            valid.corrected_from_micros
        ),
        (rate(1), 2, Some(rate(0)))
    );
    // Every other rate date is published once.
    assert_eq!(
        truth.fx_rates.iter().filter(|r| r.published != 1).count(),
        1
    );
}

#[test]
fn landed_returns_only_what_had_arrived_in_arrival_order() {
    let root = season();
    for through in [
        "2026-07-31T00:00:00Z",
        "2026-08-16T23:59:00Z",
        "2026-08-17T12:00:00Z",
        "2026-09-08T12:00:00Z",
        "2026-11-01T00:00:00Z",
    ] {
        let through = at(through);
        for source in Source::ALL {
            let files = landed(root, source, through).expect("landed");
            assert!(
                files
                    .iter()
                    .all(|f| f.arrived_at <= through && f.source == source)
            );
            assert!(
                files
                    .windows(2)
                    .all(|w| (w[0].arrived_at, &w[0].relative_name)
                        < (w[1].arrived_at, &w[1].relative_name))
            );
            // Independently: walk the folder and count the names stamped at or before `through`.
            let mut expected = 0;
            for day in fs::read_dir(root.join("landing").join(source.as_str())).expect("dir") {
                for file in fs::read_dir(day.expect("entry").path()).expect("dir") {
                    let name = file
                        .expect("entry")
                        .file_name()
                        .to_string_lossy()
                        .into_owned();
                    let parsed = parse_landing_name(&name).expect("a landing name");
                    expected += usize::from(parsed.arrived_at <= through);
                }
            }
            assert_eq!(files.len(), expected, "{source} through {through}");
            for f in &files {
                assert!(f.path.ends_with(&f.relative_name));
                assert_eq!(
                    parse_landing_name(&f.relative_name)
                        .expect("name")
                        .arrived_at,
                    f.arrived_at
                );
                // The listing's size and time are the file's own.
                let meta = fs::metadata(&f.path).expect("metadata");
                let seen = f.seen.expect("a listed file was seen");
                assert_eq!(seen.bytes, meta.len(), "{}", f.relative_name);
                assert_eq!(seen.modified, meta.modified().ok(), "{}", f.relative_name);
            }
        }
    }
    assert!(
        landed(root, Source::Orders, at("2026-07-31T23:59:59Z"))
            .expect("landed")
            .is_empty()
    );
    // The first hour of orders lands a few seconds after 01:00.
    let first = landed(root, Source::Orders, at("2026-08-01T01:01:00Z")).expect("landed");
    assert_eq!(first.len(), 1);
    assert!(
        first[0]
            .relative_name
            .starts_with("orders/2026-08-01/20260801T0100")
    );
    assert!(
        first[0]
            .relative_name
            .ends_with("-orders-20260801T00.jsonl")
    );
}

#[test]
fn landed_skips_hidden_files_and_names_strangers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    assert!(
        landed(root, Source::Orders, end_of_time())
            .expect("nothing yet")
            .is_empty()
    );
    let day = root.join("landing/orders/2026-08-02");
    fs::create_dir_all(&day).expect("mkdir");
    fs::write(day.join("20260802T010005Z-orders-20260802T00.jsonl"), b"").expect("write");
    fs::write(day.join("20260802T000007Z-orders-20260801T23.jsonl"), b"").expect("write");
    fs::write(
        day.join(".20260802T020005Z-orders-20260802T01.jsonl.tmp"),
        b"",
    )
    .expect("write");
    let files = landed(root, Source::Orders, end_of_time()).expect("landed");
    let names: Vec<&str> = files.iter().map(|f| f.relative_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "orders/2026-08-02/20260802T000007Z-orders-20260801T23.jsonl",
            "orders/2026-08-02/20260802T010005Z-orders-20260802T00.jsonl"
        ]
    );
    fs::write(day.join("notes.txt"), b"").expect("write");
    let err = landed(root, Source::Orders, end_of_time()).expect_err("a stranger");
    assert!(err.to_string().contains("notes.txt"), "{err}");
    // A file in the wrong date folder is a stranger too.
    fs::remove_file(day.join("notes.txt")).expect("rm");
    let wrong_day = day.join("20260805T010005Z-orders-20260805T00.jsonl");
    fs::write(&wrong_day, b"").expect("write");
    let err = landed(root, Source::Orders, end_of_time()).expect_err("wrong day");
    assert!(err.to_string().contains("20260805T010005Z"), "{err}");
    // So is another source's file in this source's folder.
    fs::remove_file(&wrong_day).expect("rm");
    fs::write(day.join("20260802T030005Z-payments-20260802T02.jsonl"), b"").expect("write");
    let err = landed(root, Source::Orders, end_of_time()).expect_err("another source");
    assert!(err.to_string().contains("-payments-"), "{err}");
    fs::remove_file(day.join("20260802T030005Z-payments-20260802T02.jsonl")).expect("rm");
    // And a name that is not UTF-8.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let odd = day.join(std::ffi::OsStr::from_bytes(b"2026\xff-orders.jsonl"));
        fs::write(&odd, b"").expect("write");
        let err = landed(root, Source::Orders, end_of_time()).expect_err("not UTF-8");
        assert!(err.to_string().contains("orders.jsonl"), "{err}");
        fs::remove_file(&odd).expect("rm");
    }
    assert_eq!(
        landed(root, Source::Orders, end_of_time())
            .expect("strangers gone")
            .len(),
        2
    );
}

#[test]
fn nothing_lands_outside_the_season() {
    let root = season();
    let from = at("2026-07-31T00:00:00Z");
    let until = at("2026-11-01T00:00:00Z");
    for source in Source::ALL {
        let all = landed(root, source, end_of_time()).expect("landed");
        assert!(!all.is_empty());
        assert!(
            all.iter()
                .all(|f| f.arrived_at >= from && f.arrived_at < until),
            "{source}"
        );
    }
    // Orders and charges are created in August and September; refunds run into October.
    let orders_until = at("2026-10-01T00:00:00Z");
    for e in read_payment_events(root).expect("events") {
        let e = e.expect("row");
        assert!(e.created >= at("2026-08-01T00:00:00Z"));
        if e.kind == sugarbush::PaymentKind::Capture {
            assert!(
                e.created < orders_until,
                "a charge after September: {}",
                e.event_id
            );
        }
    }
    for o in read_orders(root).expect("orders") {
        let o = o.expect("row");
        assert!(o.created_at >= at("2026-08-01T00:00:00Z") && o.created_at < orders_until);
    }
}

#[test]
fn every_order_is_its_highest_lsn_change() {
    let root = season();
    let mut last: BTreeMap<String, (u64, String, bool)> = BTreeMap::new();
    let mut lsns = BTreeSet::new();
    for l in lines(root, Source::Orders) {
        let c = parse_change(&l.text);
        lsns.insert(c.lsn);
        let e = last.entry(c.order_id).or_insert((0, String::new(), false));
        if c.lsn > e.0 {
            *e = (c.lsn, c.status, c.op == "d");
        }
    }
    let mut n = 0;
    for o in read_orders(root).expect("orders") {
        let o = o.expect("row");
        let (lsn, status, deleted) = last.get(&o.order_id).expect("the order has changes");
        assert_eq!(o.final_lsn, *lsn, "{}", o.order_id);
        assert_eq!(o.final_status.as_str(), status);
        assert_eq!(o.deleted_at.is_some(), *deleted);
        assert_eq!(o.test, *deleted);
        n += 1;
    }
    assert_eq!(n, last.len());
    // The change log is the truth's too, with strictly increasing LSNs.
    let mut prev = 0;
    let mut count = 0;
    for c in read_order_changes(root).expect("changes") {
        let c = c.expect("row");
        assert!(c.lsn > prev);
        assert!(lsns.contains(&c.lsn));
        assert!(c.committed_at <= c.received_at && c.received_at <= c.landed_at);
        prev = c.lsn;
        count += 1;
    }
    assert_eq!(count, lsns.len());
}

/// The story's `naive_queue` and a correct fold, at the story's instant, against truth/.
#[test]
fn the_bucket_brigade_story_reproduces() {
    let root = season();
    let through = at("2026-09-08T12:00:00Z");
    let old = (through - Duration::hours(72)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let truth = load_truth(root).expect("truth");
    let point = truth.awaiting_at(through).expect("a checkpoint");

    // naive_queue: files in arrival order (re-sent copies too), the last change received wins,
    // deletes skipped.
    let mut naive: BTreeMap<String, (String, String)> = BTreeMap::new();
    // A correct fold: the highest LSN wins.
    let mut folded: BTreeMap<String, (u64, String, String, bool)> = BTreeMap::new();
    for f in landed(root, Source::Orders, through).expect("landed") {
        for line in fs::read_to_string(&f.path).expect("read").lines() {
            let c = parse_change(line);
            if c.op != "d" {
                naive.insert(c.order_id.clone(), (c.status.clone(), c.updated_at.clone()));
            }
            let e = folded
                .entry(c.order_id)
                .or_insert((0, String::new(), String::new(), false));
            if c.lsn > e.0 {
                *e = (c.lsn, c.status, c.updated_at, c.op == "d");
            }
        }
    }
    let waiting = |rows: &mut dyn Iterator<Item = (&String, &String)>| {
        let mut all = 0u64;
        let mut over = 0u64;
        for (status, updated) in rows {
            if status == "paid" {
                all += 1;
                over += u64::from(updated.as_str() < old.as_str());
            }
        }
        (all, over)
    };
    let bucket = waiting(&mut naive.values().map(|(s, u)| (s, u)));
    let gold = waiting(&mut folded.values().filter(|v| !v.3).map(|v| (&v.1, &v.2)));
    assert_eq!(bucket, (point.naive_waiting, point.naive_over_72h));
    assert_eq!(gold, (point.visible_waiting, point.visible_over_72h));
    let real = awaiting_shipment(root, through).expect("truth");
    assert_eq!(
        (real.waiting, real.over_72h),
        (point.true_waiting, point.true_over_72h)
    );

    // The story's shape: about 1,500 waiting; a handful really stuck; many more look stuck.
    assert!((1_300..=1_700).contains(&real.waiting), "{real:?}");
    assert!((1..=12).contains(&real.over_72h), "{real:?}");
    assert!(
        bucket.1 >= 5 * real.over_72h.max(1) && bucket.1 >= 25,
        "bucket {bucket:?} vs {real:?}"
    );
    assert!(gold.1 <= real.over_72h + 8, "gold {gold:?} vs {real:?}");
}

#[test]
fn the_volumes_are_close_to_the_story() {
    let truth = load_truth(season()).expect("truth");
    let v = &truth.summary.volume;
    for m in v.months.iter().filter(|m| m.month != "2026-10") {
        assert!((25_000..=30_000).contains(&m.orders_created), "{m:?}");
        assert!(
            (270_000_000..=340_000_000).contains(&m.gross_cad_equivalent_minor),
            "{m:?}"
        );
        assert!((250..=400).contains(&m.usd_share_permille), "{m:?}");
    }
    let sep = v
        .months
        .iter()
        .find(|m| m.month == "2026-09")
        .expect("September");
    let refunds = sep.refunds_cad_equivalent_minor * 1000 / sep.gross_cad_equivalent_minor;
    assert!((20..=80).contains(&refunds), "refunds {refunds}‰ of gross");
    assert!((1_300..=1_700).contains(&v.awaiting_shipment_mean), "{v:?}");
    // The orders' lifecycle truth is consistent with itself.
    for o in read_orders(season()).expect("orders") {
        let o = o.expect("row");
        if let (Some(p), Some(s)) = (o.paid_at, o.shipped_at) {
            assert!(p < s);
            assert_eq!(o.status_at(s), Some(OrderStatus::Shipped));
            assert_eq!(o.status_at(p), Some(OrderStatus::Paid));
        }
        assert_eq!(o.status_at(o.created_at - Duration::seconds(1)), None);
        assert_eq!(o.charge_id.is_some(), o.paid_at.is_some());
        assert!(o.refunded_minor <= o.total_minor);
    }
}

/// `truth/bridge.csv` and `truth/two_answers.csv`: the generator's own account of the story's
/// bridge and of the two right answers. Its bucket-brigade figure equals what reading the landed
/// files the naive way gives; its lines add up to the month's true net in CAD; each line is
/// material with the story's sign; cash settles while orders fall.
#[test]
fn the_bridge_and_the_two_answers_are_in_the_truth() {
    let root = season();
    let truth = load_truth(root).expect("truth");
    let as_ofs = sugarbush::as_ofs_for_month(2026, 8);
    assert_eq!(as_ofs.len(), 5);
    assert_eq!(as_ofs[0], at("2026-09-08T12:00:00Z"));
    assert_eq!(as_ofs[4], at("2026-10-15T12:00:00Z"));

    for b in &truth.bridge {
        assert_eq!(
            b.naive_minor - b.resent_minor - b.retries_minor + b.v2_null_minor - b.refunds_minor
                + b.usd_minor,
            b.end_minor,
            "the lines add up: {b:?}"
        );
    }

    // The bucket brigade, read from the files as they landed by the story's Tuesday.
    let tuesday = as_ofs[0];
    let mut naive = 0i64;
    for f in landed(root, Source::Payments, tuesday).expect("landed") {
        for line in fs::read(&f.path).expect("read").split(|b| *b == b'\n') {
            let Ok(j) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            let created = j["created"].as_i64().unwrap_or(0);
            let month = chrono::DateTime::from_timestamp(created, 0).map(|t| (t.year(), t.month()));
            if j["type"] == "charge.succeeded" && month == Some((2026, 8)) {
                naive += j["data"]["object"]["amount"].as_i64().unwrap_or(0);
            }
        }
    }
    let b = truth
        .bridge_at("2026-08", tuesday)
        .expect("August as of Sep 8");
    assert_eq!(b.naive_minor, naive, "the bucket brigade's month");
    for (amount, sign, what) in [
        (-b.resent_minor, -1, "re-sent files"),
        (-b.retries_minor, -1, "webhook retries"),
        (b.v2_null_minor, 1, "v2 amounts read as null"),
        (-b.refunds_minor, -1, "refunds"),
        (b.usd_minor, 1, "USD as CAD"),
    ] {
        assert_eq!(amount.signum(), sign, "{what}: {b:?}");
        assert!(amount.abs() >= 500_000, "{what} is material: {b:?}");
    }

    // By mid-October every August event has landed: cash is the true month, event by event.
    let august: i64 = truth
        .daily
        .iter()
        .filter(|d| d.date.year() == 2026 && d.date.month() == 8)
        .map(|d| d.net_cad_minor_by_event)
        .sum();
    let answers = truth.answers_for("2026-08");
    assert_eq!(answers.len(), 5);
    assert_eq!(answers[4].cash_minor, august);
    for (a, t) in answers.iter().zip(&as_ofs) {
        assert_eq!(a.as_of, *t);
        let bridge = truth.bridge_at("2026-08", *t).expect("a bridge per as-of");
        assert_eq!(a.cash_minor, bridge.end_minor, "cash is the bridge's end");
    }
    assert!(
        answers.iter().all(|a| a.cash_minor == august),
        "August cash is settled from Sep 8: {answers:?}"
    );
    assert!(
        answers
            .windows(2)
            .all(|w| w[1].orders_minor <= w[0].orders_minor)
            && answers[4].orders_minor < answers[0].orders_minor,
        "August orders fall as refunds trickle in: {answers:?}"
    );
}
