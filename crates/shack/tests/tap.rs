//! The tap's promises, checked against hand-made landing zones and the default season:
//! idempotent, content-addressed, crash-safe, every line exactly once, `main` untouched.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::sync::Mutex;

use arrow_array::{Array, LargeBinaryArray, RecordBatch, StringArray};
use chrono::{DateTime, Utc};
use common::*;
use lake::{At, Failpoint, LakeError, RefOp};
use shack::{ShackError, Source, TapOptions, bronze};

type Line = Vec<u8>;

/// Every row of a bronze source table at audit: (file, line) → bytes, counting repeats.
fn bronze_lines(batches: &[RecordBatch]) -> (HashMap<(String, i64), Line>, usize) {
    let mut out = HashMap::new();
    let mut repeats = 0;
    for b in batches {
        let raw = b
            .column_by_name("_raw")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .expect("_raw");
        let bytes = b
            .column_by_name("_raw_bytes")
            .and_then(|c| c.as_any().downcast_ref::<LargeBinaryArray>())
            .expect("_raw_bytes");
        let files = str_column(std::slice::from_ref(b), "_landing_file");
        let lines = int_column(std::slice::from_ref(b), "_line");
        for i in 0..b.num_rows() {
            let v = if bytes.is_null(i) {
                raw.value(i).as_bytes().to_vec()
            } else {
                bytes.value(i).to_vec()
            };
            let key = (files[i].clone().expect("file"), lines[i]);
            if out.insert(key, v).is_some() {
                repeats += 1;
            }
        }
    }
    (out, repeats)
}

/// The re-sent copies of the default season, by relative name.
fn resent_copies(season: &std::path::Path) -> BTreeMap<String, sugarbush::ResentFile> {
    let truth = sugarbush::load_truth(season).expect("truth");
    truth
        .summary
        .resent
        .into_iter()
        .map(|r| (r.copy.clone(), r))
        .collect()
}

fn arrived(rel: &str) -> DateTime<Utc> {
    sugarbush::parse_landing_name(rel)
        .expect("landing name")
        .arrived_at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tapping_twice_changes_nothing() {
    let season = season();
    let lake = Lake::new();
    let first = lake.tap(&season, aug16()).await;
    println!("{}", first.render());
    assert_eq!(
        first.batches.iter().map(|b| b.source).collect::<Vec<_>>(),
        Source::ALL.to_vec()
    );
    assert_eq!(first.created_tables, bronze::table_names());
    assert!(first.catalog_version.is_some());
    let version = lake.catalog.head().await.expect("head").version;
    let refs = lake.refs().await;
    let files = lake.files();

    let again = lake.tap(&season, aug16()).await;
    assert!(again.nothing_new(), "{again:?}");
    assert_eq!(again.catalog_version, None);
    assert_eq!(again.orphans_removed, 0);
    assert_eq!(again.orphans_kept, 0);
    assert!(again.created_tables.is_empty());
    assert_eq!(lake.catalog.head().await.expect("head").version, version);
    assert_eq!(lake.refs().await, refs, "same snapshot ids");
    assert_eq!(lake.files(), files, "no new files on disk");
    assert!(again.render().ends_with("  nothing new has arrived\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resent_files_are_recognised_under_new_names_and_recorded() {
    let season = season();
    let copies = resent_copies(&season);
    assert!(!copies.is_empty(), "the season re-sends files");
    let end = utc(2026, 12, 31, 0, 0, 0);
    let lake = Lake::new();
    let first = lake.tap(&season, aug16()).await;
    let second = lake.tap(&season, end).await;

    let early = copies.keys().filter(|c| arrived(c) <= aug16()).count();
    assert_eq!(first.skipped_duplicates, early);
    assert_eq!(second.skipped_duplicates, copies.len() - early);
    let reported: BTreeMap<String, (String, String)> = first
        .duplicates
        .iter()
        .chain(&second.duplicates)
        .map(|d| (d.file.clone(), (d.original_file.clone(), d.sha256.clone())))
        .collect();
    let expected: BTreeMap<String, (String, String)> = copies
        .iter()
        .map(|(c, r)| (c.clone(), (r.original.clone(), r.sha256.clone())))
        .collect();
    assert_eq!(reported, expected);

    // Recorded in bronze itself, queryable with SQL, in the same commits as the lines.
    let audit = At::reference(bronze::AUDIT_BRANCH);
    let rows = lake
        .sql(
            &audit,
            "select file, original_file, sha256 from bronze.landing_files \
             where status = 'duplicate' order by file",
        )
        .await;
    let files = str_column(&rows, "file");
    let originals = str_column(&rows, "original_file");
    let shas = str_column(&rows, "sha256");
    let recorded: BTreeMap<String, (String, String)> = (0..files.len())
        .map(|i| {
            (
                files[i].clone().expect("file"),
                (
                    originals[i].clone().expect("original"),
                    shas[i].clone().expect("sha"),
                ),
            )
        })
        .collect();
    assert_eq!(recorded, expected);

    // The copies' lines are not in bronze; their originals' are.
    for source in Source::ALL {
        let batches = lake.audit_rows(&bronze::table_name(source)).await;
        let in_bronze: BTreeSet<String> = str_column(&batches, "_landing_file")
            .into_iter()
            .flatten()
            .collect();
        for (copy, r) in copies.iter().filter(|(_, r)| r.source == source) {
            assert!(!in_bronze.contains(copy), "{copy} was tapped again");
            assert!(in_bronze.contains(&r.original), "{} is missing", r.original);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_landing_line_through_t_is_in_bronze_exactly_once() {
    let season = season();
    let copies = resent_copies(&season);
    let truth = sugarbush::load_truth(&season).expect("truth");
    let end = utc(2026, 12, 31, 0, 0, 0);
    let lake = Lake::new();
    for through in [
        aug16(),
        utc(2026, 8, 17, 12, 0, 0),
        utc(2026, 9, 10, 6, 0, 0),
        end,
    ] {
        lake.tap(&season, through).await;
    }

    let audit = At::reference(bronze::AUDIT_BRANCH);
    let mut unparseable_payments = 0u64;
    for source in Source::ALL {
        let table = bronze::table_name(source);
        // Landing side: every line of every file that is not a re-sent copy, per arrival day.
        let mut landing: BTreeMap<String, i64> = BTreeMap::new();
        let mut lines: HashMap<(String, i64), Line> = HashMap::new();
        for f in sugarbush::landed(&season, source, end).expect("landed") {
            if copies.contains_key(&f.relative_name) {
                continue;
            }
            let day = f.arrived_at.format("%Y-%m-%d").to_string();
            let bytes = fs::read(&f.path).expect("read landing file");
            let file_lines = file_lines(&bytes);
            *landing.entry(day).or_default() += file_lines.len() as i64;
            for (i, l) in file_lines.into_iter().enumerate() {
                lines.insert((f.relative_name.clone(), i as i64 + 1), l);
            }
        }
        // Bronze side, by SQL: the same days from the lineage columns.
        let per_day = lake
            .sql(
                &audit,
                &format!(
                    "select split_part(_landing_file, '/', 2) as day, count(*) as n \
                     from {table} group by 1 order by 1"
                ),
            )
            .await;
        let days = str_column(&per_day, "day");
        let counts = int_column(&per_day, "n");
        let bronze: BTreeMap<String, i64> = days
            .into_iter()
            .map(|d| d.expect("day"))
            .zip(counts)
            .collect();
        let all_days: BTreeSet<&String> = landing.keys().chain(bronze.keys()).collect();
        for day in all_days {
            let l = landing.get(day).copied().unwrap_or(0);
            let b = bronze.get(day).copied().unwrap_or(0);
            assert_eq!(
                l - b,
                0,
                "{table} {day}: {l} landing lines, {b} bronze rows"
            );
        }
        // And line by line, byte for byte, no (file, line) twice.
        let (rows, repeats) = bronze_lines(&lake.audit_rows(&table).await);
        assert_eq!(repeats, 0, "{table} holds a line twice");
        assert_eq!(rows.len(), lines.len(), "{table}");
        for (key, want) in &lines {
            assert_eq!(rows.get(key), Some(want), "{table} {key:?}");
        }
        if source == Source::Payments {
            unparseable_payments = rows
                .values()
                .filter(|l| serde_json::from_slice::<serde_json::Value>(l).is_err())
                .count() as u64;
        }
    }
    // Including the crashed receiver's truncated lines, kept as they arrived.
    assert!(truth.summary.faults.truncated_lines > 0);
    assert_eq!(unparseable_payments, truth.summary.faults.truncated_lines);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_data_files_and_commit_leaves_the_previous_state() {
    let season = season();
    let day1 = utc(2026, 8, 3, 0, 0, 0);
    let clean = Lake::new();
    clean.tap_with(&season, day1, &no_grace()).await;
    let clean_next = clean.tap_with(&season, aug16(), &no_grace()).await;

    for point in [Failpoint::AfterDataFiles, Failpoint::AfterMetadataFiles] {
        let lake = Lake::new();
        lake.tap_with(&season, day1, &no_grace()).await;
        let version = lake.catalog.head().await.expect("head").version;
        let refs = lake.refs().await;
        let audit = At::reference(bronze::AUDIT_BRANCH);
        let count = "select count(*) as n from bronze.payments";
        let before = int_column(&lake.sql(&audit, count).await, "n");
        let files = lake.files();

        lake.catalog.set_failpoint(Some(point));
        let err = shack::tap(
            &lake.catalog,
            &season,
            aug16(),
            &no_grace(),
            &shack::NoProgress,
        )
        .await
        .expect_err("the injected crash");
        assert!(
            matches!(&err, ShackError::Lake { error, .. } if matches!(**error, LakeError::Injected(_))),
            "{err}"
        );
        lake.catalog.set_failpoint(None);

        // Readers see the previous state: same version, same snapshots, same rows.
        assert_eq!(lake.catalog.head().await.expect("head").version, version);
        assert_eq!(lake.refs().await, refs);
        assert_eq!(int_column(&lake.sql(&audit, count).await, "n"), before);
        let debris: Vec<String> = lake
            .files()
            .into_keys()
            .filter(|f| !files.contains_key(f))
            .collect();
        assert!(!debris.is_empty(), "{point:?} left files behind");

        // The next tap removes the orphans first, then taps the batch exactly once.
        let next = lake.tap_with(&season, aug16(), &no_grace()).await;
        assert_eq!(next.orphans_removed, debris.len(), "{point:?}: {debris:?}");
        let now = lake.files();
        assert!(debris.iter().all(|f| !now.contains_key(f)));
        assert!(next.render().contains("  removed  "));
        let shape = |r: &shack::TapReport| -> Vec<(Source, usize, u64, i64)> {
            r.batches
                .iter()
                .map(|b| (b.source, b.files, b.rows, b.sequence_number))
                .collect()
        };
        assert_eq!(shape(&next), shape(&clean_next), "{point:?}");
        assert_eq!(next.skipped_duplicates, clean_next.skipped_duplicates);
        for source in Source::ALL {
            let table = bronze::table_name(source);
            let (mine, repeats) = bronze_lines(&lake.audit_rows(&table).await);
            let (theirs, _) = bronze_lines(&clean.audit_rows(&table).await);
            assert_eq!(repeats, 0, "{table}");
            assert_eq!(mine, theirs, "{table} after {point:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_younger_than_the_grace_are_kept_and_stay_invisible() {
    let l = Landing::new();
    let t1 = utc(2026, 8, 1, 1, 0, 0);
    let t2 = utc(2026, 8, 1, 2, 0, 0);
    l.put(Source::Orders, t1, "20260801T00", b"{\"op\":\"c\"}\n");
    l.put(Source::Orders, t2, "20260801T01", b"{\"op\":\"u\"}\n");
    let lake = Lake::new();
    lake.tap(l.root(), t1).await;
    let files = lake.files();
    lake.catalog.set_failpoint(Some(Failpoint::AfterDataFiles));
    let crashed = shack::tap(
        &lake.catalog,
        l.root(),
        t2,
        &TapOptions::default(),
        &shack::NoProgress,
    )
    .await;
    assert!(crashed.is_err());
    lake.catalog.set_failpoint(None);
    let debris = lake.files().len() - files.len();
    assert!(debris > 0);

    // Within the grace a crashed run's files look like a live writer's: they stay.
    let next = lake.tap(l.root(), t2).await;
    assert_eq!(next.orphans_removed, 0);
    assert_eq!(next.orphans_kept, debris);
    assert!(next.render().contains("younger than the 1h grace period"));
    assert_eq!(next.rows(), 1, "the batch is tapped once all the same");
    let mut raw = str_column(&lake.audit_rows("bronze.orders").await, "_raw");
    raw.sort();
    assert_eq!(
        raw,
        vec![
            Some("{\"op\":\"c\"}".to_string()),
            Some("{\"op\":\"u\"}".to_string())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_are_kept_as_sent_even_when_truncated_empty_or_not_utf8() {
    let l = Landing::new();
    let t = utc(2026, 8, 2, 0, 0, 12);
    let pay = l.put(
        Source::Payments,
        t,
        "20260801T23",
        b"{\"a\":1}\r\n\n{\"caf\xe9\":2}\n{\"id\": \"evt_1\", \"tru",
    );
    let fx = l.put(
        Source::FxRates,
        t,
        "2026-07-31",
        b"2026-07-31,USD,CAD,1.3712",
    );
    let empty = l.put(Source::Settlements, t, "2026-08-01", b"");
    let lake = Lake::new();
    let report = lake.tap(l.root(), t).await;
    let by_source: BTreeMap<Source, (usize, u64)> = report
        .batches
        .iter()
        .map(|b| (b.source, (b.files, b.rows)))
        .collect();
    assert_eq!(by_source.get(&Source::Payments), Some(&(1, 4)));
    assert_eq!(by_source.get(&Source::FxRates), Some(&(1, 1)));
    assert_eq!(by_source.get(&Source::Settlements), Some(&(1, 0)));
    assert_eq!(by_source.get(&Source::Orders), None);

    let rows = lake.audit_rows("bronze.payments").await;
    let (lines, _) = bronze_lines(&rows);
    let want: Vec<&[u8]> = vec![
        b"{\"a\":1}\r",
        b"",
        b"{\"caf\xe9\":2}",
        b"{\"id\": \"evt_1\", \"tru",
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            lines
                .get(&(pay.clone(), i as i64 + 1))
                .map(|v| v.as_slice()),
            Some(*w)
        );
    }
    // Non-UTF-8 is flagged by its exact bytes and readable as text with U+FFFD.
    let flagged = lake
        .sql(
            &At::reference(bronze::AUDIT_BRANCH),
            "select _line, _raw from bronze.payments where _raw_bytes is not null",
        )
        .await;
    assert_eq!(int_column(&flagged, "_line"), vec![3]);
    assert_eq!(
        str_column(&flagged, "_raw"),
        vec![Some("{\"caf\u{fffd}\":2}".to_string())]
    );
    let fx_rows = lake.audit_rows("bronze.fx_rates").await;
    assert_eq!(
        str_column(&fx_rows, "_raw"),
        vec![Some("2026-07-31,USD,CAD,1.3712".to_string())]
    );
    assert_eq!(str_column(&fx_rows, "_landing_file"), vec![Some(fx)]);
    // The empty file is recorded as tapped, with no lines.
    let lf = lake
        .sql(
            &At::reference(bronze::AUDIT_BRANCH),
            &format!("select status, lines from bronze.landing_files where file = '{empty}'"),
        )
        .await;
    assert_eq!(str_column(&lf, "status"), vec![Some("tapped".to_string())]);
    assert_eq!(int_column(&lf, "lines"), vec![0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_file_that_disappears_is_left_alone_and_copies_in_one_run_are_caught() {
    let l = Landing::new();
    let t1 = utc(2026, 8, 1, 1, 0, 0);
    let t2 = utc(2026, 8, 1, 2, 0, 0);
    let a = l.put(Source::Orders, t1, "20260801T00", b"x\ny\n");
    let e1 = l.put(Source::Orders, t1, "20260801T00q", b"");
    let lake = Lake::new();
    let first = lake.tap(l.root(), t1).await;
    assert_eq!(first.rows(), 2);

    // `a` disappears (a dangling link in its place): its lines are in bronze, so the tap leaves
    // it alone; one that opened it again would fail.
    let path = l.path(&a);
    fs::remove_file(&path).expect("remove");
    std::os::unix::fs::symlink(l.root().join("nowhere"), &path).expect("symlink");
    let b = l.put(Source::Orders, t2, "20260801T00r", b"x\ny\n"); // a re-send of `a`
    let c = l.put(Source::Orders, t2, "20260801T01", b"z\n");
    let d = l.put(Source::Orders, t2, "20260801T01r", b"z\n"); // a re-send within the run
    let e2 = l.put(Source::Orders, t2, "20260801T01q", b""); // empty again: not a copy
    let second = lake.tap(l.root(), t2).await;
    let dups: BTreeMap<String, String> = second
        .duplicates
        .iter()
        .map(|x| (x.file.clone(), x.original_file.clone()))
        .collect();
    assert_eq!(
        dups,
        BTreeMap::from([(b.clone(), a.clone()), (d.clone(), c.clone())])
    );
    assert_eq!(second.batches.len(), 1);
    assert_eq!(second.batches[0].files, 2, "c and the empty file");
    assert_eq!(second.rows(), 1);
    let rows = lake.audit_rows("bronze.orders").await;
    let in_bronze: BTreeSet<String> = str_column(&rows, "_landing_file")
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(in_bronze, BTreeSet::from([a, c]));
    let lf = lake.audit_rows(bronze::LANDING_FILES).await;
    let status: BTreeMap<String, String> = str_column(&lf, "file")
        .into_iter()
        .flatten()
        .zip(str_column(&lf, "status").into_iter().flatten())
        .collect();
    assert_eq!(status.len(), 6);
    assert_eq!(status.get(&e1).map(String::as_str), Some("tapped"));
    assert_eq!(status.get(&e2).map(String::as_str), Some("tapped"));
    assert_eq!(status.get(&b).map(String::as_str), Some("duplicate"));
    assert_eq!(status.get(&d).map(String::as_str), Some("duplicate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_is_untouched_by_taps() {
    let season = season();
    let lake = Lake::new();
    lake.tap(&season, utc(2026, 8, 3, 0, 0, 0)).await;
    let count = "select count(*) as n from bronze.orders";
    for name in bronze::table_names() {
        let t = lake.catalog.table(&name).await.expect("table");
        assert_eq!(t.head("main"), None, "{name}: main moved");
        assert!(t.head(bronze::AUDIT_BRANCH).is_some());
    }
    assert_eq!(int_column(&lake.sql(&At::Main, count).await, "n"), vec![0]);

    // Publish by hand (fast-forward main to audit), then tap more: main stays put.
    let mut published = BTreeMap::new();
    for name in bronze::table_names() {
        let t = lake.catalog.table(&name).await.expect("table");
        let head = t.head(bronze::AUDIT_BRANCH).expect("audit head");
        lake.catalog
            .update_refs(
                &name,
                &[RefOp::FastForward {
                    branch: "main".into(),
                    to: head,
                }],
                "publish",
            )
            .await
            .expect("publish");
        published.insert(name, head);
    }
    let at_main = int_column(&lake.sql(&At::Main, count).await, "n");
    let next = lake.tap(&season, utc(2026, 8, 5, 0, 0, 0)).await;
    assert!(next.rows() > 0);
    for (name, head) in &published {
        let t = lake.catalog.table(name).await.expect("table");
        assert_eq!(t.head("main"), Some(*head), "{name}: main moved");
        let audit = t.head(bronze::AUDIT_BRANCH).expect("audit");
        assert_ne!(audit, *head, "{name}: audit did not move");
        assert!(t.is_ancestor(*head, audit));
    }
    assert_eq!(int_column(&lake.sql(&At::Main, count).await, "n"), at_main);
}

#[derive(Default)]
struct Recorder {
    total: Mutex<u64>,
    done: Mutex<u64>,
}

impl shack::Progress for Recorder {
    fn set_total(&self, n: u64) {
        if let Ok(mut t) = self.total.lock() {
            *t += n;
        }
    }
    fn inc(&self, n: u64) {
        if let Ok(mut d) = self.done.lock() {
            *d += n;
        }
    }
    fn message(&self, _m: &str) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_batches_give_many_data_files_and_the_same_rows_and_a_batch_is_one_snapshot() {
    let l = Landing::new();
    let t = utc(2026, 8, 2, 0, 0, 0);
    let body: String = (1..=20).map(|i| format!("{{\"n\":{i}}}\n")).collect();
    let f1 = l.put(
        Source::Payments,
        utc(2026, 8, 1, 23, 0, 5),
        "20260801T22",
        body.as_bytes(),
    );
    l.put(Source::Payments, t, "20260801T23", b"{\"n\":21}\n");
    let lake = Lake::new();
    let options = TapOptions {
        max_batch_rows: 3,
        ..TapOptions::default()
    };
    let progress = Recorder::default();
    let report = shack::tap(&lake.catalog, l.root(), t, &options, &progress)
        .await
        .expect("tap");
    assert_eq!(*progress.total.lock().expect("lock"), 2);
    assert_eq!(*progress.done.lock().expect("lock"), 2);
    let batch = &report.batches[0];
    assert_eq!((batch.files, batch.rows), (2, 21));
    assert!(batch.data_files >= 7, "{} data files", batch.data_files);

    // The batch is the snapshot: its sequence number, its summary, the rows it added.
    let table = lake.catalog.table("bronze.payments").await.expect("table");
    let snap = table.snapshot(batch.snapshot_id).expect("snapshot");
    assert_eq!(snap.sequence_number, batch.sequence_number);
    assert_eq!(table.head(bronze::AUDIT_BRANCH), Some(batch.snapshot_id));
    assert_eq!(
        snap.summary.get(bronze::props::TAP_ID),
        Some(&report.tap_id)
    );
    let added = table
        .read_incremental(bronze::AUDIT_BRANCH, None, None)
        .await
        .expect("incremental");
    assert_eq!(added.num_rows(), 21);
    let lines: Vec<i64> = int_column(&lake.audit_rows("bronze.payments").await, "_line");
    assert_eq!(lines.len(), 21);
    let lf = lake.audit_rows(bronze::LANDING_FILES).await;
    let snaps = int_column(&lf, "snapshot_id");
    let seqs = int_column(&lf, "sequence_number");
    assert!(snaps.iter().all(|s| *s == batch.snapshot_id));
    assert!(seqs.iter().all(|s| *s == batch.sequence_number));

    // JSON for machines.
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["batches"][0]["source"], "payments");
    assert_eq!(json["batches"][0]["rows"], 21);
    assert_eq!(json["skipped_duplicates"], 0);
    let _ = f1;
}

/// A progress that runs `f` once, when the tap says it is about to commit: the moment a
/// concurrent writer can slip in between a tap's data files and its commit.
struct BeforeCommit<F: Fn() + Sync> {
    f: F,
    fired: std::sync::atomic::AtomicBool,
}

impl<F: Fn() + Sync> BeforeCommit<F> {
    fn new(f: F) -> Self {
        BeforeCommit {
            f,
            fired: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<F: Fn() + Sync> shack::Progress for BeforeCommit<F> {
    fn set_total(&self, _n: u64) {}
    fn inc(&self, _n: u64) {}
    fn message(&self, m: &str) {
        if m == "committing" && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            (self.f)();
        }
    }
}

/// Run a future to completion from synchronous code inside a multi-thread runtime.
fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// Two hours of orders and payments, one file each per hour.
fn two_hours() -> (Landing, DateTime<Utc>, DateTime<Utc>) {
    let l = Landing::new();
    let t1 = utc(2026, 8, 1, 1, 0, 0);
    let t2 = utc(2026, 8, 1, 2, 0, 0);
    for (t, label, n) in [(t1, "20260801T00", 1), (t2, "20260801T01", 2)] {
        l.put(
            Source::Orders,
            t,
            label,
            format!("{{\"lsn\":{n}}}\n").as_bytes(),
        );
        l.put(
            Source::Payments,
            t,
            label,
            format!("{{\"evt\":{n}}}\n").as_bytes(),
        );
    }
    (l, t1, t2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_during_a_tap_is_absorbed_and_main_stays_where_it_was_published() {
    let (l, t1, t2) = two_hours();
    let lake = Lake::new();
    lake.tap(l.root(), t1).await;
    let catalog = lake.catalog.clone();
    let published = Mutex::new(BTreeMap::new());
    let publish = BeforeCommit::new(|| {
        block_on(async {
            for name in bronze::table_names() {
                let t = catalog.table(&name).await.expect("table");
                // Tables no tap has written yet (no files arrived) have nothing to publish.
                let Some(head) = t.head(bronze::AUDIT_BRANCH) else {
                    continue;
                };
                let op = RefOp::FastForward {
                    branch: "main".into(),
                    to: head,
                };
                catalog
                    .update_refs(&name, &[op], "publish")
                    .await
                    .expect("publish");
                published.lock().expect("lock").insert(name, head);
            }
        })
    });
    let report = shack::tap(
        &lake.catalog,
        l.root(),
        t2,
        &TapOptions::default(),
        &publish,
    )
    .await
    .expect("the tap lands on the published tables");
    assert_eq!(report.rows(), 2);
    let published = published.lock().expect("lock").clone();
    assert_eq!(published.len(), 3, "orders, payments, landing_files");
    for (name, head) in published.iter() {
        let t = lake.catalog.table(name).await.expect("table");
        assert_eq!(t.head("main"), Some(*head), "{name}");
        let audit = t.head(bronze::AUDIT_BRANCH).expect("audit");
        assert!(t.is_ancestor(*head, audit), "{name}");
    }
    let mut raw = str_column(&lake.audit_rows("bronze.orders").await, "_raw");
    raw.sort();
    assert_eq!(
        raw,
        vec![Some("{\"lsn\":1}".into()), Some("{\"lsn\":2}".into())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_concurrent_taps_one_wins_and_no_file_is_taken_twice() {
    let (l, t1, t2) = two_hours();
    let lake = Lake::new();
    lake.tap(l.root(), t1).await;
    let catalog = lake.catalog.clone();
    let root = l.root().to_path_buf();
    let other = Mutex::new(None);
    let rival = BeforeCommit::new(|| {
        let r = block_on(shack::tap(
            &catalog,
            &root,
            t2,
            &TapOptions::default(),
            &shack::NoProgress,
        ))
        .expect("the rival tap");
        *other.lock().expect("lock") = Some(r);
    });
    let err = shack::tap(&lake.catalog, l.root(), t2, &TapOptions::default(), &rival)
        .await
        .expect_err("the slower tap must not commit");
    assert!(err.is_conflict(), "{err}");
    let other = other.lock().expect("lock").take().expect("rival ran");
    assert_eq!(other.rows(), 2);
    // The rival's sweep saw the slower tap's data files in flight and left them alone.
    assert!(other.orphans_kept > 0);
    assert_eq!(other.orphans_removed, 0);
    for table in ["bronze.orders", "bronze.payments"] {
        let (lines, repeats) = bronze_lines(&lake.audit_rows(table).await);
        assert_eq!((lines.len(), repeats), (2, 0), "{table}");
    }
    assert!(lake.tap(l.root(), t2).await.nothing_new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_without_grace_would_rob_a_tap_in_flight_and_the_lake_refuses_its_commit() {
    let (l, t1, t2) = two_hours();
    let lake = Lake::new();
    lake.tap(l.root(), t1).await;
    let version = lake.catalog.head().await.expect("head").version;
    let catalog = lake.catalog.clone();
    let root = l.root().to_path_buf();
    let swept = Mutex::new(0);
    // Why the grace exists: a sweep that takes every unnamed file for a crashed run's.
    let reckless = BeforeCommit::new(|| {
        let r = block_on(shack::tap(
            &catalog,
            &root,
            t1,
            &no_grace(),
            &shack::NoProgress,
        ))
        .expect("the reckless sweep");
        *swept.lock().expect("lock") = r.orphans_removed;
    });
    let result = shack::tap(
        &lake.catalog,
        l.root(),
        t2,
        &TapOptions::default(),
        &reckless,
    )
    .await;
    assert!(*swept.lock().expect("lock") > 0);
    assert!(result.is_err(), "a commit naming deleted files must fail");
    assert_eq!(lake.catalog.head().await.expect("head").version, version);
    let next = lake.tap(l.root(), t2).await;
    assert_eq!(next.rows(), 2);
}

/// The CLI may spawn a tap on a runtime: its future must be `Send`.
#[allow(dead_code)]
fn the_tap_future_is_send(catalog: &lake::Catalog, root: &std::path::Path) {
    fn send<T: Send>(_: T) {}
    send(shack::tap(
        catalog,
        root,
        aug16(),
        &TapOptions::default(),
        &shack::NoProgress,
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_file_and_commit_nothing() {
    let (l, t1, _) = two_hours();
    let lake = Lake::new();
    // A landing file that cannot be read.
    let dangling = l.path("payments/2026-08-01/20260801T005959Z-payments-20260731T23.jsonl");
    std::os::unix::fs::symlink(l.root().join("nowhere"), &dangling).expect("symlink");
    let err = shack::tap(
        &lake.catalog,
        l.root(),
        t1,
        &TapOptions::default(),
        &shack::NoProgress,
    )
    .await
    .expect_err("unreadable file");
    let msg = err.to_string();
    assert!(
        msg.contains("20260801T005959Z-payments-20260731T23.jsonl"),
        "{msg}"
    );
    assert!(msg.contains("nothing was committed"), "{msg}");
    fs::remove_file(&dangling).expect("remove");

    // A stray file in the landing zone.
    let stray = l.path("orders/2026-08-01/notes.txt");
    fs::write(&stray, b"hello").expect("write");
    let err = shack::tap(
        &lake.catalog,
        l.root(),
        t1,
        &TapOptions::default(),
        &shack::NoProgress,
    )
    .await
    .expect_err("stray file");
    assert!(err.to_string().contains("notes.txt"), "{err}");
    fs::remove_file(&stray).expect("remove");

    // Nothing of either failed run is in bronze; the next tap takes everything once.
    let report = lake.tap(l.root(), t1).await;
    assert_eq!(report.rows(), 2);
}

/// Set a landing file's modification time to `t` (a file written long before the tap).
fn set_mtime(l: &Landing, rel: &str, t: DateTime<Utc>) {
    let f = fs::File::options()
        .write(true)
        .open(l.path(rel))
        .expect("open landing file");
    f.set_modified(t.into()).expect("set mtime");
}

/// Rows of `bronze.landing_files` at audit for one file: (status, sha256, original, snapshot).
async fn records_of(lake: &Lake, file: &str) -> Vec<(String, String, Option<String>, i64)> {
    let lf = lake.audit_rows(bronze::LANDING_FILES).await;
    let files = str_column(&lf, "file");
    let status = str_column(&lf, "status");
    let shas = str_column(&lf, "sha256");
    let originals = str_column(&lf, "original_file");
    let snaps = int_column(&lf, "snapshot_id");
    let mut out: Vec<_> = (0..files.len())
        .filter(|i| files[*i].as_deref() == Some(file))
        .map(|i| {
            (
                status[i].clone().expect("status"),
                shas[i].clone().expect("sha"),
                originals[i].clone(),
                snaps[i],
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_landing_file_rewritten_in_place_is_recorded_warned_and_tapped_once_as_a_new_version() {
    let l = Landing::new();
    let t = utc(2026, 8, 1, 1, 0, 0);
    let a = l.put(Source::Orders, t, "20260801T00a", b"a1\na2\n");
    let b = l.put(Source::Orders, t, "20260801T00b", b"b1\nb2\n");
    let c = l.put(Source::Orders, t, "20260801T00c", b"c1\n");
    let d = l.put(Source::Orders, t, "20260801T00d", b"d1\n");
    let lake = Lake::new();
    let first = lake.tap(l.root(), t).await;
    assert_eq!(first.rows(), 6);
    assert!(first.changed.is_empty());
    let sha_of = |file: &str, r: &[(String, String, Option<String>, i64)]| {
        assert_eq!(r.len(), 1, "{file}: {r:?}");
        r[0].1.clone()
    };
    let old_a = sha_of(&a, &records_of(&lake, &a).await);
    let old_b = sha_of(&b, &records_of(&lake, &b).await);

    // Rewritten in place after the tap, the same name each time: longer, the same size with
    // other bytes, the very same bytes, and the bytes of another tapped file.
    l.put(Source::Orders, t, "20260801T00a", b"a1\na2\na3\n");
    l.put(Source::Orders, t, "20260801T00b", b"b1\nB2\n");
    l.put(Source::Orders, t, "20260801T00c", b"c1\n");
    l.put(Source::Orders, t, "20260801T00d", b"c1\n");
    let second = lake.tap(l.root(), t).await;
    assert!(!second.nothing_new(), "{second:?}");
    assert!(second.catalog_version.is_some());
    let changed: BTreeMap<String, (String, u64, Option<String>)> = second
        .changed
        .iter()
        .map(|x| {
            assert_ne!(x.previous_sha256, x.sha256);
            (
                x.file.clone(),
                (x.previous_sha256.clone(), x.lines, x.original_file.clone()),
            )
        })
        .collect();
    assert_eq!(changed.len(), 3, "{changed:?}");
    assert_eq!(changed.get(&a), Some(&(old_a.clone(), 3, None)));
    assert_eq!(changed.get(&b), Some(&(old_b.clone(), 2, None)));
    assert_eq!(changed.get(&d).map(|x| x.2.clone()), Some(Some(c.clone())));
    assert!(second.duplicates.is_empty(), "a rewrite is not a re-send");
    assert_eq!(second.batches.len(), 1);
    assert_eq!((second.batches[0].files, second.rows()), (2, 5));

    // A warning for people and for machines.
    let text = second.render();
    for file in [&a, &b, &d] {
        assert!(
            text.lines()
                .any(|line| line.starts_with("  warn     ") && line.contains(file.as_str())),
            "{text}"
        );
    }
    assert!(!text.contains(&format!("{c} was rewritten")), "{text}");
    let json = serde_json::to_value(&second).expect("json");
    assert_eq!(json["changed"].as_array().map(Vec::len), Some(3));
    assert_eq!(json["changed"][0]["file"], a.as_str());
    assert_eq!(json["changed"][0]["previous_sha256"], old_a.as_str());

    // Recorded: each version its own row; the new lines are in bronze next to the old ones.
    let batch = second.batches[0].snapshot_id;
    let ra = records_of(&lake, &a).await;
    assert_eq!(ra.len(), 2, "{ra:?}");
    assert_eq!(ra[0].0, "changed");
    assert_eq!((ra[0].2.clone(), ra[0].3), (None, batch));
    assert_eq!(
        (ra[1].0.as_str(), ra[1].1.as_str()),
        ("tapped", old_a.as_str())
    );
    let rd = records_of(&lake, &d).await;
    assert_eq!(rd[0].0, "changed");
    assert_eq!((rd[0].2.clone(), rd[0].3), (Some(c.clone()), i64::MIN));
    assert_eq!(
        records_of(&lake, &c).await.len(),
        1,
        "same bytes: not a change"
    );
    let rows = lake.audit_rows("bronze.orders").await;
    let raw: Vec<(String, String, String)> = str_column(&rows, "_landing_file")
        .into_iter()
        .zip(str_column(&rows, "_file_sha256"))
        .zip(str_column(&rows, "_raw"))
        .map(|((f, s), r)| (f.expect("file"), s.expect("sha"), r.expect("raw")))
        .collect();
    assert_eq!(raw.len(), 11, "6 lines, then 3 of a and 2 of b again");
    let of = |file: &str, sha: &str| -> Vec<String> {
        let mut v: Vec<String> = raw
            .iter()
            .filter(|(f, s, _)| f == file && s == sha)
            .map(|(_, _, r)| r.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(of(&a, &old_a), ["a1", "a2"]);
    assert_eq!(of(&a, &ra[0].1), ["a1", "a2", "a3"]);
    assert_eq!(of(&b, &old_b), ["b1", "b2"]);
    assert_eq!(of(&b, &records_of(&lake, &b).await[0].1), ["B2", "b1"]);

    // Idempotent: the new versions are recorded, so the next tap leaves them alone.
    let version = lake.catalog.head().await.expect("head").version;
    let files = lake.files();
    let third = lake.tap(l.root(), t).await;
    assert!(third.nothing_new(), "{third:?}");
    assert!(third.changed.is_empty());
    assert_eq!(lake.catalog.head().await.expect("head").version, version);
    assert_eq!(lake.files(), files);
    assert!(third.render().ends_with("  nothing new has arrived\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_file_is_hashed_again_only_when_its_size_or_time_says_it_may_have_changed() {
    let l = Landing::new();
    let t = utc(2026, 8, 1, 1, 0, 0);
    let long_ago = utc(2000, 1, 1, 0, 0, 0); // long before any tap of this test starts
    let a = l.put(Source::Orders, t, "20260801T00a", b"a1\n");
    let b = l.put(Source::Orders, t, "20260801T00b", b"b1\n");
    set_mtime(&l, &a, long_ago);
    set_mtime(&l, &b, long_ago);
    let lake = Lake::new();
    lake.tap(l.root(), t).await;

    // Untouched since: nothing to look at.
    let progress = Recorder::default();
    let again = shack::tap(
        &lake.catalog,
        l.root(),
        t,
        &TapOptions::default(),
        &progress,
    )
    .await
    .expect("tap");
    assert!(again.nothing_new());
    assert_eq!(*progress.total.lock().expect("lock"), 0, "nothing hashed");

    // Rewritten with the same size: its new modification time gives it away.
    l.put(Source::Orders, t, "20260801T00b", b"B1\n");
    let progress = Recorder::default();
    let changed = shack::tap(
        &lake.catalog,
        l.root(),
        t,
        &TapOptions::default(),
        &progress,
    )
    .await
    .expect("tap");
    assert_eq!(*progress.total.lock().expect("lock"), 1, "only b hashed");
    assert_eq!(
        changed.changed.iter().map(|c| &c.file).collect::<Vec<_>>(),
        vec![&b]
    );
    assert_eq!(changed.rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_empty_landing_zone_is_an_error_naming_the_folder() {
    let l = Landing::new();
    let lake = Lake::new();
    let dir = l.root().join("landing");
    let options = TapOptions::default();
    let tap = |through| {
        shack::tap(
            &lake.catalog,
            l.root(),
            through,
            &options,
            &shack::NoProgress,
        )
    };
    let t1 = utc(2026, 8, 1, 1, 0, 0);
    let t2 = utc(2026, 8, 1, 2, 0, 0);

    // No landing folder at all: a wrong warehouse, not a quiet day.
    let err = tap(t1).await.expect_err("no landing zone");
    assert!(
        matches!(&err, ShackError::NoLandingZone { dir: d, missing: true } if *d == dir),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(msg.contains("nothing was committed"), "{msg}");
    assert!(
        lake.files().is_empty(),
        "nothing written: {:?}",
        lake.files()
    );

    // A landing folder (even with source folders) holding no landing file.
    fs::create_dir_all(dir.join("orders").join("2026-08-01")).expect("mkdir");
    let err = tap(t1).await.expect_err("empty landing zone");
    assert!(
        matches!(&err, ShackError::NoLandingZone { dir: d, missing: false } if *d == dir),
        "{err:?}"
    );
    assert!(err.to_string().contains("holds no landing files"), "{err}");
    assert!(
        lake.files().is_empty(),
        "nothing written: {:?}",
        lake.files()
    );

    // Files that arrive later than `through` make it a quiet day, not an error.
    l.put(Source::Orders, t2, "20260801T01", b"{\"lsn\":1}\n");
    let quiet = tap(t1).await.expect("a quiet day");
    assert!(quiet.nothing_new(), "{quiet:?}");
    assert!(quiet.render().ends_with("  nothing new has arrived\n"));
    assert_eq!(tap(t2).await.expect("tap").rows(), 1);
    // And once everything is tapped, nothing new is nothing new.
    assert!(tap(t2).await.expect("tap").nothing_new());
}

/// `bronze.landing_files` does not gain a data file per tap for ever: once it holds
/// `LEDGER_FILES_KEPT` files, a tap writes its rows back as one file with the new ones. No
/// record is lost or changed on the way, and every landed file is recorded exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_is_compacted_and_keeps_every_record() {
    let season = season();
    let lake = Lake::new();
    let mut before: Vec<String> = Vec::new();
    let mut compacted = 0;
    let mut through = aug16();
    for _ in 0..(shack::LEDGER_FILES_KEPT + 4) {
        through += chrono::Duration::hours(6);
        let report = lake.tap(&season, through).await;
        assert!(
            report.catalog_version.is_some(),
            "new files every six hours"
        );
        let ledger = lake
            .catalog
            .table(bronze::LANDING_FILES)
            .await
            .expect("ledger");
        let files = ledger
            .data_files(&At::reference(bronze::AUDIT_BRANCH))
            .await
            .expect("files")
            .len();
        assert!(
            files <= shack::LEDGER_FILES_KEPT,
            "{files} ledger files after a tap"
        );
        compacted += usize::from(files == 1 && !before.is_empty());
        let now = rows_as_text(&lake.audit_rows(bronze::LANDING_FILES).await);
        let mut left = now.clone();
        for row in &before {
            let i = left
                .iter()
                .position(|r| r == row)
                .unwrap_or_else(|| panic!("a record was lost or changed: {row}"));
            left.swap_remove(i);
        }
        assert!(!left.is_empty(), "the tap's own records");
        before = now;
    }
    assert!(compacted >= 1, "the ledger was written back as one file");
    let names = str_column(&lake.audit_rows(bronze::LANDING_FILES).await, "file");
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "every file recorded once");
    let landed: usize = Source::ALL
        .iter()
        .map(|s| {
            sugarbush::landed(&season, *s, through)
                .expect("landed")
                .len()
        })
        .sum();
    assert_eq!(names.len(), landed, "every landed file recorded");
}

/// A file tapped within a minute of its last write (as a tap that runs when files land does) is
/// hashed again by the next tap; once that write is safely older than the run, the tap records
/// the file as `verified` with what it commits, and later taps leave it alone: what a tap reads
/// follows what is new, not how many files were ever tapped as they landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_tapped_as_it_landed_is_verified_once_then_left_alone() {
    let l = Landing::new();
    let t = utc(2026, 8, 1, 1, 0, 0);
    let a = l.put(Source::Orders, t, "a", b"a1\n");
    let lake = Lake::new();
    // Tapped at T1, with its last write a few seconds before: within the slack.
    let tap = |through| {
        let lake = &lake;
        let root = l.root();
        async move {
            let seen = Recorder::default();
            let r = shack::tap(&lake.catalog, root, through, &TapOptions::default(), &seen)
                .await
                .expect("tap");
            let total = *seen.total.lock().expect("total");
            (r, total)
        }
    };
    let (first, hashed) = tap(t).await;
    assert_eq!((first.rows(), hashed), (1, 1));
    let lf = lake.audit_rows(bronze::LANDING_FILES).await;
    let t1 = DateTime::<Utc>::from_timestamp_micros(
        lf[0]
            .column_by_name("tapped_at")
            .and_then(|c| {
                c.as_any()
                    .downcast_ref::<arrow_array::TimestampMicrosecondArray>()
            })
            .expect("tapped_at")
            .value(0),
    )
    .expect("an instant");
    set_mtime(
        &l,
        &a,
        t1 - chrono::Duration::seconds(60) + chrono::Duration::microseconds(1),
    );
    std::thread::sleep(std::time::Duration::from_millis(5));

    // The next tap hashes it again, finds its bytes, and records that with its new file.
    let b = l.put(Source::Orders, t, "b", b"b1\n");
    set_mtime(&l, &b, t1 - chrono::Duration::hours(1));
    let (second, hashed) = tap(t).await;
    assert_eq!((second.rows(), hashed), (1, 2), "a hashed again, b new");
    let statuses: Vec<String> = records_of(&lake, &a)
        .await
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(statuses, ["tapped", "verified"]);
    assert!(second.changed.is_empty());

    // Settled: the tap after reads only what is new.
    let c = l.put(Source::Orders, t, "c", b"c1\n");
    set_mtime(&l, &c, t1 - chrono::Duration::hours(1));
    let (third, hashed) = tap(t).await;
    assert_eq!((third.rows(), hashed), (1, 1), "only c");
    assert_eq!(records_of(&lake, &a).await.len(), 2);
    // And the same `through` again writes nothing.
    let before = lake.refs().await;
    let (again, hashed) = tap(t).await;
    assert_eq!((again.rows(), hashed, again.catalog_version), (0, 0, None));
    assert_eq!(lake.refs().await, before);
}
