//! `sugarshack run` as a scheduler meets it: the story's August 17 morning with its exit codes;
//! the process killed (SIGKILL) at random moments, restarted each time, never leaving one table's
//! `main` at another publish than the rest and ending equal to an uninterrupted lake; two runs at
//! once never publishing a mix; time travel by published as-of, a rollback and a run forward.

mod support;

use support::{command, sugarshack};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use lake::{At, Catalog};

/// The exit status of a blocked run (documented in `sugarshack run --help`).
const BLOCKED: i32 = 3;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn season(dir: &Path) {
    let o = sugarshack(dir, &["sugarbush"], &[]);
    assert!(o.status.success(), "sugarbush: {}", stderr(&o));
}

fn open(dir: &Path) -> Catalog {
    Catalog::open_local(dir.join("catalog"), dir.join("warehouse")).expect("open the lake")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn graded(name: &str) -> bool {
    ["bronze.", "silver.", "gold."]
        .iter()
        .any(|ns| name.starts_with(ns))
}

/// In ONE catalog version: every graded table's `main`, and the snapshots the last publish
/// recorded in that version's publish log. They must be the same map: every table at one
/// publish. Returns the number of publishes so far.
async fn assert_one_publish(catalog: &Catalog, when: &str) -> usize {
    let head = catalog.head().await.expect("head");
    let log = shack::publish::read_log_in(catalog, &head)
        .await
        .expect("publish log");
    let last = log.iter().rev().find(|r| r.is_published());
    for name in head.tables.keys().filter(|n| graded(n)) {
        let t = catalog.table_in(&head, name).await.expect("table");
        let main = t.head("main");
        let published = last.and_then(|r| r.snapshots.get(name).copied());
        assert_eq!(
            main, published,
            "{when}: {name}'s main is not at the last publish (catalog version {})",
            head.version
        );
    }
    log.iter().filter(|r| r.is_published()).count()
}

/// Columns that name a run rather than hold data: tap ids and wall-clock instants, and snapshot
/// ids and sequence numbers (the same rows committed by other commits).
const RUN_SPECIFIC: [&str; 5] = [
    "tap_id",
    "tapped_at",
    "snapshot_id",
    "sequence_number",
    "_bronze_snapshot_id",
];

/// Every graded table at `main`, each row as text without run-specific columns, sorted.
async fn lake_rows(catalog: &Catalog) -> BTreeMap<String, Vec<String>> {
    let head = catalog.head().await.expect("head");
    let mut out = BTreeMap::new();
    for name in head.tables.keys().filter(|n| graded(n)) {
        let t = catalog.table_in(&head, name).await.expect("table");
        let mut rows = Vec::new();
        for b in t.scan(&At::Main).await.expect("scan") {
            let schema = b.schema();
            let keep: Vec<usize> = (0..b.num_columns())
                .filter(|i| !RUN_SPECIFIC.contains(&schema.field(*i).name().as_str()))
                .collect();
            for r in 0..b.num_rows() {
                let cells: Vec<String> = keep
                    .iter()
                    .map(|i| {
                        arrow::util::display::array_value_to_string(b.column(*i), r)
                            .expect("displayable")
                    })
                    .collect();
                rows.push(cells.join("|"));
            }
        }
        rows.sort();
        out.insert(name.clone(), rows);
    }
    out
}

/// The story's August 17 morning, as a scheduler sees it: 0 when published, 3 when an audit
/// blocks, 1 on an error — and the lines the story prints.
#[test]
fn the_august_17_morning_exits_3_then_a_replay_exits_0() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    season(dir);
    let o = sugarshack(dir, &["run", "--through", "2026-08-16"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).ends_with("Published gold as of 2026-08-16 23:59 UTC.\n"),
        "{}",
        stdout(&o)
    );

    let morning = ["run", "--through", "2026-08-17T12:00"];
    let o = sugarshack(dir, &morning, &[("SUGAR_PARSERS", "2025-11-01")]);
    let out = stdout(&o);
    print!("{out}");
    assert_eq!(o.status.code(), Some(BLOCKED), "{out}{}", stderr(&o));
    assert!(out.starts_with("as of 2026-08-17 12:00 UTC\n"), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("  BLOCK  quarantine rate  "))
        .expect("the quarantine audit blocks");
    assert!(
        line.contains("payments 2") && line.contains("(mostly unsupported_api_version)"),
        "{line}"
    );
    for audit in ["conservation", "fx coverage", "reconciliation"] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!(" {audit} ")) && !l.contains("BLOCK")),
            "{audit} does not block: {out}"
        );
    }
    assert!(
        out.ends_with("\nNot published. gold still shows the build as of 2026-08-16 23:59 UTC.\n"),
        "{out}"
    );

    // What the blocked build would publish: bronze, silver and gold ahead, the marts' values.
    let d = sugarshack(dir, &["diff"], &[]);
    let diff = stdout(&d);
    assert!(d.status.success(), "{}", stderr(&d));
    assert!(diff.starts_with("main..audit\n"), "{diff}");
    for table in [
        "bronze.payments",
        "silver.quarantine",
        "gold.mart_daily_cash",
    ] {
        assert!(
            diff.lines()
                .any(|l| l.trim_start().starts_with(&format!("{table} "))),
            "{table} differs: {diff}"
        );
    }
    assert!(
        diff.contains("gold.mart_daily_cash  2026-08-16 cad  net_minor: "),
        "{diff}"
    );

    let st = stdout(&sugarshack(dir, &["status"], &[]));
    assert!(
        st.contains("tapped     through 2026-08-17T12:00:00Z"),
        "{st}"
    );
    assert!(
        st.contains("published  publish 1 as of 2026-08-16 23:59 UTC"),
        "{st}"
    );
    assert!(
        st.contains("blocked    last as of 2026-08-17 12:00 UTC: quarantine rate: "),
        "{st}"
    );
    let tables = stdout(&sugarshack(dir, &["tables", "--format", "json"], &[]));
    let tables: serde_json::Value = serde_json::from_str(&tables).expect("json");
    let gold = tables
        .as_array()
        .expect("rows")
        .iter()
        .find(|t| t["table"] == "gold.mart_daily_cash")
        .expect("gold.mart_daily_cash listed");
    assert!(
        gold["metadata_location"]
            .as_str()
            .is_some_and(|l| l.ends_with(".metadata.json"))
    );
    let about = stdout(&sugarshack(dir, &["describe", "gold.fct_payments"], &[]));
    assert!(
        about.contains("processor_date  identity   processor_date"),
        "{about}"
    );

    let mut replay = morning.to_vec();
    replay.push("--replay");
    let o = sugarshack(dir, &replay, &[]);
    let out = stdout(&o);
    print!("{out}");
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("  nothing new has arrived\n"), "{out}");
    assert!(out.contains("  PASS   quarantine rate  "), "{out}");
    assert!(
        out.ends_with("\nPublished gold as of 2026-08-17 12:00 UTC.\n"),
        "{out}"
    );

    let d = sugarshack(dir, &["diff"], &[]);
    assert_eq!(
        stdout(&d),
        "main..audit\n  no table differs\n",
        "published: nothing left"
    );
    // A ref no table holds is an error that names it, not a diff from an empty lake.
    let d = sugarshack(dir, &["diff", "publish-99..main"], &[]);
    assert_eq!(d.status.code(), Some(1), "{}", stdout(&d));
    assert!(stdout(&d).is_empty(), "{}", stdout(&d));
    assert!(
        stderr(&d)
            .contains("no bronze, silver or gold table has a branch or tag named \"publish-99\""),
        "{}",
        stderr(&d)
    );
    let d = sugarshack(dir, &["diff", "publish-1..publish-2"], &[]);
    assert!(d.status.success(), "{}", stderr(&d));
    assert!(
        stdout(&d).starts_with("publish-1..publish-2\n")
            && stdout(&d).contains(" changed values:\n"),
        "{}",
        stdout(&d)
    );

    // An error is neither: a parser the registry does not know.
    let o = sugarshack(dir, &morning, &[("SUGAR_PARSERS", "1999-01-01")]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("1999-01-01"), "{}", stderr(&o));
    rt().block_on(async {
        assert_eq!(assert_one_publish(&open(dir), "after the story").await, 2);
    });
}

/// A deterministic stream of kill delays (xorshift, from a fixed seed), each drawn from a span
/// the caller gives.
struct Delays(u64);

impl Delays {
    /// The next delay, uniform in [lo, hi) milliseconds.
    fn next_ms(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo)
    }
}

/// Kill `sugarshack run` with SIGKILL at pseudo-random moments, many times over a stretch of the
/// season, restarting each time. After every kill: in one catalog version, every table's `main`
/// is at the last publish (never some moved and others not). At the end: the lake equals one
/// that ran the same days uninterrupted, row for row, every bronze, silver and gold table —
/// nothing tapped lost or doubled.
#[test]
fn killed_at_random_moments_every_main_stays_at_one_publish() {
    let killed = tempfile::tempdir().expect("tempdir");
    let calm = tempfile::tempdir().expect("tempdir");
    season(killed.path());
    season(calm.path());
    let days: Vec<String> = (10..=19).map(|d| format!("2026-08-{d}T12:00")).collect();
    let rt = rt();
    let mut delays = Delays(0x5eed_cafe_f00d_0017);
    let mut kills = 0;
    let mut finished_before_kill = 0;
    for day in &days {
        // The same day uninterrupted first: how long it takes here bounds the kill delays, so
        // the kills land mid-run however fast this machine and this build are.
        let started = Instant::now();
        let o = sugarshack(calm.path(), &["run", "--through", day.as_str()], &[]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        let calm_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Up to four kills a day, then a run left to finish.
        for attempt in 0..=4 {
            let args = ["run", "--through", day.as_str()];
            if attempt == 4 {
                let o = sugarshack(killed.path(), &args, &[]);
                assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
                break;
            }
            let mut child = command(killed.path(), &args, &[])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn sugarshack run");
            let delay = Duration::from_millis(delays.next_ms(20, calm_ms.max(40)));
            let start = Instant::now();
            let mut done = None;
            while start.elapsed() < delay {
                if let Some(status) = child.try_wait().expect("wait") {
                    done = Some(status);
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            match done {
                Some(status) => {
                    assert_eq!(status.code(), Some(0), "{day}: an unkilled run published");
                    finished_before_kill += 1;
                }
                None => {
                    child.kill().expect("SIGKILL");
                    child.wait().expect("reap");
                    kills += 1;
                }
            }
            rt.block_on(assert_one_publish(
                &open(killed.path()),
                &format!("{day}, after attempt {attempt}"),
            ));
        }
    }
    println!(
        "{kills} kills over {} days ({finished_before_kill} runs finished before their kill)",
        days.len()
    );
    assert!(kills >= 20, "only {kills} kills landed mid-run");
    rt.block_on(async {
        let k = open(killed.path());
        let c = open(calm.path());
        assert_one_publish(&k, "at the end").await;
        let (a, b) = (lake_rows(&k).await, lake_rows(&c).await);
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "the same tables"
        );
        for (table, rows) in &b {
            assert!(!rows.is_empty() || table.ends_with("quarantine"), "{table}");
            assert_eq!(a[table].len(), rows.len(), "{table}: row count");
            assert_eq!(&a[table], rows, "{table}: row for row");
        }
    });
    // The lake's own check: every file every kept version names is there.
    let o = sugarshack(killed.path(), &["verify"], &[]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// Two runs at once on one lake: one publishes; the other publishes after it (each publish
/// moving every table) or stops with a clear conflict — never a mixed publish.
#[test]
fn two_runs_at_once_never_publish_a_mix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    season(dir);
    let o = sugarshack(dir, &["run", "--through", "2026-08-16"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (i, day) in ["2026-08-17T12:00", "2026-08-18T12:00"].iter().enumerate() {
        let spawn = || {
            command(dir, &["run", "--through", day], &[])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        };
        let (a, b) = (spawn(), spawn());
        let outs = [
            a.wait_with_output().expect("wait"),
            b.wait_with_output().expect("wait"),
        ];
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        println!("{day}: exit codes {codes:?}");
        assert!(codes.contains(&Some(0)), "one of them publishes: {codes:?}");
        for o in &outs {
            match o.status.code() {
                Some(0) => {}
                Some(1) => {
                    let e = stderr(o);
                    println!("{day}: the other stopped: {e}");
                    assert!(
                        e.contains("conflict") || e.contains("another"),
                        "a clear conflict message: {e}"
                    );
                }
                other => panic!("{day}: exit {other:?}: {}{}", stdout(o), stderr(o)),
            }
        }
        rt().block_on(async {
            let n = assert_one_publish(&open(dir), day).await;
            assert!(n >= 2 + i, "{day}: {n} publishes");
        });
    }
}

/// `sum(net_minor)` of gold's daily cash through the binary, with extra `query` arguments.
fn net_cash(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "query",
        "select sum(net_minor) as n from gold.mart_daily_cash",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    sugarshack(dir, &args, &[])
}

fn net_cash_ok(dir: &Path, extra: &[&str]) -> i64 {
    let o = net_cash(dir, extra);
    assert!(o.status.success(), "query {extra:?}: {}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json rows");
    rows[0]["n"].as_i64().expect("a sum")
}

fn bronze_rows(dir: &Path) -> i64 {
    let o = sugarshack(
        dir,
        &[
            "query",
            "select count(*) as n from bronze.payments",
            "--branch",
            "audit",
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json rows");
    rows[0]["n"].as_i64().expect("a count")
}

/// Time travel by published as-of, then a rollback and a run: `--as-of` reads what that
/// publish's gold held (before the first publish it says so); a rollback puts every table back
/// at once, keeps the abandoned heads under tags and bronze whole; the next run moves forward
/// to the same numbers again.
#[test]
fn time_travel_then_roll_back_then_run_forward() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    season(dir);
    let mut cash = Vec::new();
    for through in ["2026-08-16", "2026-08-17T12:00", "2026-08-18T12:00"] {
        let o = sugarshack(dir, &["run", "--through", through], &[]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        cash.push(net_cash_ok(dir, &[]));
    }
    assert!(cash[0] < cash[1] && cash[1] < cash[2], "{cash:?}");
    // Each publish, by its as-of and by its number.
    assert_eq!(
        net_cash_ok(dir, &["--as-of", "2026-08-16T23:59:59"]),
        cash[0]
    );
    assert_eq!(net_cash_ok(dir, &["--as-of", "2026-08-17T12:00"]), cash[1]);
    assert_eq!(net_cash_ok(dir, &["--as-of", "2026-08-18T09:00"]), cash[1]);
    assert_eq!(net_cash_ok(dir, &["--as-of", "2026-09-30"]), cash[2]);
    assert_eq!(net_cash_ok(dir, &["--publish", "1"]), cash[0]);
    let early = net_cash(dir, &["--as-of", "2026-08-01"]);
    assert_eq!(early.status.code(), Some(1));
    assert!(
        stderr(&early).contains("nothing was published at or before 2026-08-01 23:59 UTC"),
        "{}",
        stderr(&early)
    );
    let tapped = bronze_rows(dir);
    // A named checkpoint of every table, read back by name; the lake's own names are refused.
    let o = sugarshack(dir, &["tag", "before-the-rollback"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("tagged   before-the-rollback at the main head of "),
        "{}",
        stdout(&o)
    );
    let reserved = sugarshack(dir, &["tag", "publish-9"], &[]);
    assert_eq!(reserved.status.code(), Some(1));
    assert!(
        stderr(&reserved).contains("is reserved"),
        "{}",
        stderr(&reserved)
    );
    let empty = sugarshack(dir, &["tag", ""], &[]);
    assert_eq!(empty.status.code(), Some(1));
    assert_eq!(stderr(&empty), "error: a tag needs a name: \"\" is empty\n");
    // A name `diff FROM..TO` could not address is refused before anything is written.
    let ranged = sugarshack(dir, &["tag", "x..y"], &[]);
    assert_eq!(ranged.status.code(), Some(1));
    assert_eq!(
        stderr(&ranged),
        "error: \"x..y\" cannot name a tag: it holds \"..\", which `diff FROM..TO` reads as a range\n"
    );

    let o = sugarshack(
        dir,
        &["rollback", "--to", "2", "--reason", "test a rollback"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Rolled back to publish 2 "),
        "{}",
        stdout(&o)
    );
    assert_eq!(net_cash_ok(dir, &[]), cash[1], "main is back at publish 2");
    assert_eq!(
        net_cash_ok(dir, &["--branch", "audit"]),
        cash[1],
        "audit too"
    );
    assert_eq!(
        net_cash_ok(dir, &["--branch", "rollback-4-main"]),
        cash[2],
        "the abandoned head is kept by its tag"
    );
    assert_eq!(bronze_rows(dir), tapped, "bronze keeps every tapped row");
    assert_eq!(
        net_cash_ok(dir, &["--branch", "before-the-rollback"]),
        cash[2],
        "the checkpoint still reads what it tagged"
    );
    rt().block_on(async {
        assert_one_publish(&open(dir), "after the rollback").await;
    });
    let bad = sugarshack(dir, &["rollback", "--to", "9", "--reason", "x"], &[]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("the publishes are 1 to 4"),
        "{}",
        stderr(&bad)
    );

    // The next run boils again what came after publish 2, taps nothing twice, and arrives at
    // the same numbers.
    let o = sugarshack(dir, &["run", "--through", "2026-08-18T12:00"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("  nothing new has arrived\n"),
        "{}",
        stdout(&o)
    );
    assert_eq!(net_cash_ok(dir, &[]), cash[2]);
    assert_eq!(bronze_rows(dir), tapped);
    let o = sugarshack(dir, &["history", "--format", "json"], &[]);
    let log: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let statuses: Vec<&str> = log
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["status"].as_str())
        .collect();
    assert_eq!(
        statuses,
        [
            "published",
            "published",
            "published",
            "rolled back",
            "published"
        ]
    );
    rt().block_on(async {
        assert_one_publish(&open(dir), "after running forward").await;
    });

    // Bronze tapped ahead of the mornings a season would play: none of them can publish (their
    // as-of would show rows before those arrived), so nothing runs, `main` stays, and the
    // season says so and fails rather than reporting success.
    let o = sugarshack(dir, &["tap", "--through", "2026-08-20T12:00"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sugarshack(dir, &["season", "--through", "2026-08-19T12:00"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("skipped 1 morning(s) before 2026-08-"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).starts_with(
            "error: no morning was run: every one left is before a landing file bronze already holds; `main` stays as published as of 2026-08-18 12:00 UTC (`sugarshack run --through 2026-08-"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(net_cash_ok(dir, &[]), cash[2], "main did not move");
}

/// `sugarshack season` on an empty folder: generates the season, runs a morning at a time, the
/// story's August 17 blocked and then replayed and published; played again, it says so and
/// changes nothing. A `run` that would take the lake back in time is refused.
#[test]
fn season_plays_the_mornings_and_a_second_play_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let o = sugarshack(dir, &["season", "--through", "2026-08-18T12:00"], &[]);
    let out = stdout(&o);
    print!("{out}");
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("2026-08-01 12:00  published"), "{out}");
    let blocked = lines
        .iter()
        .position(|l| l.starts_with("2026-08-17 12:00  blocked  (BLOCK quarantine rate: "))
        .expect("the 17th blocks");
    assert!(
        lines[blocked].contains("(mostly unsupported_api_version)"),
        "{out}"
    );
    assert!(
        lines[blocked + 1].starts_with("2026-08-17 12:00  published after a replay"),
        "{out}"
    );
    assert!(
        lines[blocked + 2].starts_with("2026-08-18 12:00  published"),
        "{out}"
    );
    assert!(
        out.contains("season: 19 runs, 18 published, 1 blocked"),
        "{out}"
    );
    assert!(
        out.contains("gold is published as of 2026-08-18 12:00 UTC (publish 18)"),
        "{out}"
    );
    let log = |dir: &Path| {
        let o = sugarshack(dir, &["log", "--format", "json"], &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let before = log(dir);
    // History: every record with the rows its graded tables held and how long its run took.
    let h = sugarshack(dir, &["history", "--format", "json"], &[]);
    assert!(h.status.success(), "{}", stderr(&h));
    let h: serde_json::Value = serde_json::from_str(&stdout(&h)).expect("json");
    let h = h.as_array().expect("records");
    assert_eq!(h.len(), 19, "18 publishes and a block");
    let rows: Vec<i64> = h.iter().filter_map(|r| r["rows"].as_i64()).collect();
    assert_eq!(rows.len(), 19, "{h:?}");
    assert!(
        rows.windows(2).all(|w| w[1] >= w[0]) && rows[0] > 0,
        "rows only grow: {rows:?}"
    );
    assert!(
        h.iter()
            .all(|r| r["took"].as_f64().is_some_and(|s| s > 0.0)),
        "{h:?}"
    );
    let again = sugarshack(dir, &["season", "--through", "2026-08-18T12:00"], &[]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        stdout(&again),
        "the season is already played: publish 18 as of 2026-08-18 12:00 UTC; nothing to do\n"
    );
    assert_eq!(log(dir), before, "a second play commits nothing");

    // A run at the last publish's as-of with nothing new commits nothing.
    let same = sugarshack(dir, &["run", "--through", "2026-08-18T12:00"], &[]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert_eq!(
        stdout(&same),
        "nothing new has landed since publish 18 (as of 2026-08-18 12:00:00 UTC) and nothing waits on `audit`: nothing to do\n"
    );
    assert_eq!(log(dir), before, "a run with nothing to do commits nothing");

    let back = sugarshack(dir, &["run", "--through", "2026-08-10"], &[]);
    assert_eq!(back.status.code(), Some(1));
    assert!(
        stderr(&back).contains("a run cannot go back in time"),
        "{}",
        stderr(&back)
    );
    assert_eq!(log(dir), before, "a refused run commits nothing");
    rt().block_on(async {
        assert_eq!(assert_one_publish(&open(dir), "after the season").await, 18);
    });
}

/// `compare` on the story's Tuesday: the bridge from the bucket brigade's August to gold's adds
/// up line by line and ends exactly at gold; each of the five errors is material (C$5,000 or
/// more) with the story's sign; the queue both ways equals the season's truth.
#[test]
fn compare_bridges_the_bucket_brigade_to_gold_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    season(dir);
    let tuesday = "2026-09-08T12:00";
    let o = sugarshack(dir, &["run", "--through", tuesday], &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = sugarshack(dir, &["compare", "--through", tuesday], &[]);
    print!("{}", stdout(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(matches)"), "{}", stdout(&o));
    let o = sugarshack(
        dir,
        &["compare", "--through", tuesday, "--format", "json"],
        &[],
    );
    let c: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(c["month"], "2026-08");
    let mut running = c["naive_minor"].as_i64().expect("naive");
    let lines = c["lines"].as_array().expect("lines");
    let labels: Vec<&str> = lines.iter().filter_map(|l| l["label"].as_str()).collect();
    assert_eq!(
        labels,
        [
            "re-sent files counted twice",
            "webhook retries counted twice",
            "v2 amounts read as null",
            "refunds never subtracted",
            "USD added as if it were CAD"
        ]
    );
    for (l, sign) in lines.iter().zip([-1i64, -1, 1, -1, 1]) {
        let amount = l["amount_minor"].as_i64().expect("amount");
        running += amount;
        assert_eq!(l["running_minor"].as_i64(), Some(running), "{l}");
        assert_eq!(amount.signum(), sign, "the story's sign: {l}");
        assert!(amount.abs() >= 500_000, "material (C$5,000 or more): {l}");
    }
    assert_eq!(c["end_minor"].as_i64(), Some(running));
    assert_eq!(
        c["gold_minor"].as_i64(),
        Some(running),
        "the bridge ends at gold"
    );

    let truth = sugarbush::load_truth(&dir.join("warehouse")).expect("truth");
    let at = chrono::DateTime::parse_from_rfc3339("2026-09-08T12:00:00Z")
        .expect("instant")
        .with_timezone(&chrono::Utc);
    // Every figure is the one the generator wrote into truth/ from what it generated.
    let b = truth.bridge_at("2026-08", at).expect("truth's bridge");
    assert_eq!(
        c["naive_minor"].as_i64(),
        Some(b.naive_minor),
        "the bucket brigade"
    );
    let amounts: Vec<i64> = lines
        .iter()
        .filter_map(|l| l["amount_minor"].as_i64())
        .collect();
    assert_eq!(
        amounts,
        [
            -b.resent_minor,
            -b.retries_minor,
            b.v2_null_minor,
            -b.refunds_minor,
            b.usd_minor
        ],
        "each line is truth's"
    );
    assert_eq!(
        c["gold_minor"].as_i64(),
        Some(b.end_minor),
        "gold is truth's month"
    );
    let want = truth.awaiting_at(at).expect("a noon checkpoint");
    assert_eq!(
        (
            c["queue_naive"]["waiting"].as_u64(),
            c["queue_naive"]["over_72h"].as_u64()
        ),
        (Some(want.naive_waiting), Some(want.naive_over_72h)),
        "the bucket brigade's queue"
    );
    assert_eq!(
        (
            c["queue_gold"]["waiting"].as_u64(),
            c["queue_gold"]["over_72h"].as_u64()
        ),
        (Some(want.visible_waiting), Some(want.visible_over_72h)),
        "gold's queue is what a correct pipeline sees"
    );
}

/// Two right answers: August cash by processor date stays put while August orders by order
/// date fall as refunds trickle in — each figure read by time travel, and equal to SQL over
/// the same publish.
#[test]
fn two_right_answers_by_time_travel() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    season(dir);
    let as_ofs = [
        "2026-09-08T12:00",
        "2026-09-15T12:00",
        "2026-09-22T12:00",
        "2026-09-30T12:00",
        "2026-10-15T12:00",
    ];
    for t in as_ofs {
        let o = sugarshack(dir, &["run", "--through", t], &[]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    }
    let o = sugarshack(dir, &["two-answers", "--format", "json"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), as_ofs.len());
    let sql = |sql: &str, as_of: &str| -> i64 {
        let o = sugarshack(
            dir,
            &["query", sql, "--as-of", as_of, "--format", "json"],
            &[],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
        v[0]["n"].as_i64().expect("a sum")
    };
    let mut orders = Vec::new();
    for (r, t) in rows.iter().zip(as_ofs) {
        let cash = r["cash_minor"].as_i64().expect("cash");
        let ord = r["orders_minor"].as_i64().expect("orders");
        assert_eq!(
            cash,
            sql(
                "select sum(net_cad_minor) as n from gold.mart_daily_cash \
                 where processor_date >= '2026-08-01' and processor_date < '2026-09-01'",
                t
            ),
            "cash as of {t}"
        );
        assert_eq!(
            ord,
            sql(
                "select sum(net_cad_minor) as n from gold.mart_order_revenue \
                 where order_date >= '2026-08-01' and order_date < '2026-09-01'",
                t
            ),
            "orders as of {t}"
        );
        orders.push((cash, ord));
    }
    let truth = sugarbush::load_truth(&dir.join("warehouse")).expect("truth");
    let want: Vec<(i64, i64)> = truth
        .answers_for("2026-08")
        .iter()
        .map(|a| (a.cash_minor, a.orders_minor))
        .collect();
    assert_eq!(orders, want, "the two answers are truth's, as of each date");
    assert!(
        orders.iter().all(|(c, _)| *c == orders[0].0),
        "August cash is settled: {orders:?}"
    );
    assert!(
        orders.windows(2).all(|w| w[1].1 <= w[0].1) && orders[4].1 < orders[0].1,
        "August orders fall as refunds trickle in: {orders:?}"
    );
}

/// What a user meets at the prompt: `| head` ends quietly in every format, SQL from stdin, a row
/// limit with the count, a hint when a table has nothing at `main`, one-line errors.
#[test]
fn the_prompt_is_quiet_and_helpful() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // A folder that holds no lake: one line saying so and what to do, and nothing left behind.
    let empty = tempfile::tempdir().expect("tempdir");
    for args in [vec!["status"], vec!["query", "select 1"], vec!["history"]] {
        let o = sugarshack(empty.path(), &args, &[]);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(
            e.starts_with(
                "error: no lake here: catalog does not exist (`sugarshack season` builds one"
            ) && e.lines().count() == 1,
            "{args:?}: {e}"
        );
    }
    // `boil` needs bronze, so a lake; `tap` and `run` start one only from a landing zone.
    let o = sugarshack(empty.path(), &["boil"], &[]);
    assert!(
        stderr(&o).starts_with("error: no lake here: "),
        "{}",
        stderr(&o)
    );
    for args in [
        vec!["tap", "--through", "2026-08-02"],
        vec!["run", "--through", "2026-08-02"],
    ] {
        let o = sugarshack(empty.path(), &args, &[]);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).starts_with("error: no landing zone to tap: warehouse")
                && stderr(&o).contains("nothing was created"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // A season through a day before its first morning has nothing to play.
    let o = sugarshack(empty.path(), &["season", "--through", "2026-07-20"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: nothing to play: --through 2026-07-20 23:59:59 UTC is before the season's first morning (2026-08-01 12:00:00 UTC); nothing was written\n"
    );
    assert_eq!(
        std::fs::read_dir(empty.path()).expect("read").count(),
        0,
        "nothing left behind"
    );
    season(dir);
    let o = sugarshack(dir, &["tap", "--through", "2026-08-03"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Nothing published yet: compare has no gold to weigh, and says so.
    let o = sugarshack(dir, &["compare", "--through", "2026-08-03"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: nothing to compare: nothing was published at or before 2026-08-03 23:59 UTC; compare weighs a published gold (`sugarshack history` lists the publishes)\n"
    );
    // Nothing published yet: main is empty, and the hint says where the rows are.
    let o = sugarshack(
        dir,
        &["query", "select count(*) as n from bronze.orders"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "bronze.orders has nothing at main (nothing of it published yet, or emptied by a rollback to before it was first written): try --branch audit"
        ),
        "{}",
        stderr(&o)
    );
    let o = sugarshack(dir, &["run", "--through", "2026-08-03"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for format in ["table", "json", "csv"] {
        for args in [
            vec!["branches", "--format", format],
            vec!["query", "select * from bronze.orders", "--format", format],
        ] {
            let mut child = command(dir, &args, &[])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            let mut first = [0u8; 10];
            child
                .stdout
                .take()
                .expect("stdout")
                .read_exact(&mut first)
                .expect("some output");
            // The reader goes away, as `| head -c 10` does.
            let o = child.wait_with_output().expect("wait");
            assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
            assert_eq!(stderr(&o), "", "{args:?} ends quietly");
        }
    }
    // A report has no CSV form: the parser says so (exit 2) instead of printing the table.
    for cmd in ["status", "verify", "history"] {
        let o = sugarshack(dir, &[cmd, "--format", "csv"], &[]);
        if cmd == "history" {
            assert_eq!(
                o.status.code(),
                Some(0),
                "history lists rows: {}",
                stderr(&o)
            );
            continue;
        }
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stdout(&o));
        assert!(
            stderr(&o).contains("invalid value 'csv'")
                && stderr(&o).contains("[possible values: table, json]"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    let mut child = command(dir, &["query", "-", "--format", "json"], &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"select count(*) as n from gold.fct_payments")
        .expect("write the SQL");
    let o = child.wait_with_output().expect("wait");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert!(v[0]["n"].as_i64().is_some_and(|n| n > 0), "{v}");
    let o = sugarshack(
        dir,
        &[
            "query",
            "select order_id from silver.orders",
            "--limit",
            "2",
        ],
        &[],
    );
    let out = stdout(&o);
    assert!(
        out.contains("rows, the first 2 shown: --limit 0 shows all)"),
        "{out}"
    );
    // One line, no backtrace, no debug formatting.
    let o = sugarshack(dir, &["query", "select nope from gold.fct_payments"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.starts_with("error: ") && e.lines().count() == 1, "{e}");
    assert!(e.contains("nope"), "{e}");
}

/// `expire` after a stretch of the season: every publish still reads the same, the warehouse
/// shrinks, a second expire frees nothing, and the next run carries on.
#[test]
fn expire_frees_space_and_keeps_every_publish() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let o = sugarshack(
        dir,
        &[
            "season",
            "--through",
            "2026-08-08T12:00",
            "--format",
            "json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Each morning's run says how many landing lines it added to bronze: every day of August
    // brings some.
    let season: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let runs = season["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 8, "{season}");
    assert!(
        runs.iter()
            .all(|r| r["new_rows"].as_u64().is_some_and(|n| n > 0)),
        "{season}"
    );
    let sums = |dir: &Path| -> Vec<i64> {
        (1..=8)
            .map(|n| {
                let p = n.to_string();
                net_cash_ok(dir, &["--publish", p.as_str()])
            })
            .collect()
    };
    let before = sums(dir);
    let expire = |dir: &Path| -> serde_json::Value {
        let o = sugarshack(
            dir,
            &[
                "expire",
                "--older-than",
                "0s",
                "--orphan-grace-minutes",
                "0",
                "--format",
                "json",
            ],
            &[],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).expect("json")
    };
    let first = expire(dir);
    println!("{first}");
    assert!(
        first["snapshots_expired"].as_u64().unwrap_or(0) > 0,
        "{first}"
    );
    assert!(first["files_removed"].as_u64().unwrap_or(0) > 0, "{first}");
    assert!(
        first["warehouse_bytes_after"].as_u64() < first["warehouse_bytes_before"].as_u64(),
        "disk use drops: {first}"
    );
    assert_eq!(sums(dir), before, "every publish reads the same");
    let second = expire(dir);
    assert_eq!(second["snapshots_expired"], 0, "{second}");
    assert_eq!(second["catalog_versions_expired"], 0, "{second}");
    assert_eq!(second["files_removed"], 0, "{second}");
    assert_eq!(
        second["warehouse_bytes_after"], second["warehouse_bytes_before"],
        "a second expire frees nothing"
    );
    let o = sugarshack(dir, &["verify"], &[]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let o = sugarshack(dir, &["run", "--through", "2026-08-09T12:00"], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the next run carries on: {}",
        stderr(&o)
    );
}
