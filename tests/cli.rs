//! End to end through the `sugarshack` binary, as a user runs it: generate the season, tap it
//! into bronze, look inside, survive a crash between the data files and the commit.

mod support;

use support::sugarshack;

use std::path::Path;

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = sugarshack(dir, args, &[]);
    assert!(
        out.status.success(),
        "sugarshack {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn count(dir: &Path, sql: &str, branch: &str) -> i64 {
    let out = ok(dir, &["query", sql, "--branch", branch, "--format", "json"]);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("json rows");
    rows[0]["n"].as_i64().expect("a count named n")
}

fn landed_lines(dir: &Path, through: &str) -> i64 {
    let through = chrono::DateTime::parse_from_rfc3339(through)
        .unwrap()
        .with_timezone(&chrono::Utc);
    let mut n = 0;
    for source in sugarbush::Source::ALL {
        // A re-sent file (same bytes, new name) is tapped once.
        let mut seen = std::collections::HashSet::new();
        for f in sugarbush::landed(&dir.join("warehouse"), source, through).unwrap() {
            let bytes = std::fs::read(&f.path).unwrap();
            let lines = bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count() as i64;
            if seen.insert(bytes) {
                n += lines;
            }
        }
    }
    n
}

#[test]
fn season_tap_query_and_a_crash_drill() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A URL never becomes a local folder: sugarbush needs a local landing zone and says so.
    let refused = sugarshack(d, &["--warehouse", "s3://lake/warehouse", "sugarbush"], &[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("local folder"));
    assert!(!d.join("s3:").exists());

    let season = ok(d, &["sugarbush"]);
    assert!(season.contains("7 re-sent files"), "{season}");
    // A second generation refuses to overwrite the landing zone.
    let again = sugarshack(d, &["sugarbush"], &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("landing"));

    // Tap through the end of 2026-08-16, then again: nothing new, no new catalog version.
    let first = ok(d, &["tap", "--through", "2026-08-16"]);
    assert!(
        first.contains("tapped   orders") && first.contains("batch"),
        "{first}"
    );
    let log_before = ok(d, &["log", "--format", "json"]);
    let second = ok(d, &["tap", "--through", "2026-08-16"]);
    assert!(second.contains("nothing new has arrived"), "{second}");
    assert_eq!(ok(d, &["log", "--format", "json"]), log_before);

    // Every landing line through T is in bronze once; main has not moved.
    let through = "2026-08-16T23:59:59Z";
    let lines = "select count(*) as n from (select _line from bronze.orders union all select _line from bronze.payments \
                 union all select _line from bronze.fx_rates union all select _line from bronze.settlements)";
    assert_eq!(count(d, lines, "audit"), landed_lines(d, through));
    assert_eq!(count(d, lines, "main"), 0);

    // A crash after the data files are written, before the commit.
    let tapped_before = count(d, lines, "audit");
    let crash = sugarshack(
        d,
        &["tap", "--through", "2026-08-17T12:00"],
        &[("SUGARSHACK_FAILPOINT", "after-data-files")],
    );
    assert!(!crash.status.success(), "the drill must fail");
    assert!(String::from_utf8_lossy(&crash.stderr).contains("injected failure"));
    assert_eq!(
        count(d, lines, "audit"),
        tapped_before,
        "readers see the previous state"
    );
    assert_eq!(
        ok(d, &["log", "--format", "json"]),
        log_before,
        "no catalog version was written"
    );

    // The failed tap left its work mark: the next tap knows to sweep.
    let marks = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d.join("catalog/work"))
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        marks(d).iter().any(|m| m.starts_with("tap-")),
        "{:?}",
        marks(d)
    );

    // The next tap removes the debris first, then taps the batch exactly once.
    let next = ok(d, &["tap", "--through", "2026-08-17T12:00"]);
    assert!(
        next.contains("removed") && next.contains("orphan"),
        "{next}"
    );
    assert_eq!(marks(d), Vec::<String>::new(), "every mark is taken back");
    assert_eq!(
        count(d, lines, "audit"),
        landed_lines(d, "2026-08-17T12:00:00Z")
    );

    // Looking inside.
    let snaps = ok(d, &["snapshots", "bronze.payments"]);
    assert_eq!(snaps.lines().count(), 3, "header and two batches:\n{snaps}");
    let branches = ok(d, &["branches"]);
    assert!(
        branches.contains("bronze.landing_files") && branches.contains("audit"),
        "{branches}"
    );
    let dups = count(
        d,
        "select count(*) as n from bronze.landing_files where status = 'duplicate'",
        "audit",
    );
    assert!(dups >= 1);
    let bad = sugarshack(d, &["query", "select * from bronze.nope"], &[]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("bronze.nope"), "{err}");

    // Maintenance keeping only the newest catalog version: the log is one version long and
    // the lake reads the same rows.
    let tapped = count(d, lines, "audit");
    let maintained = ok(
        d,
        &[
            "maintain",
            "--keep-versions",
            "1",
            "--orphan-grace-minutes",
            "0",
        ],
    );
    assert!(
        maintained.contains("expired  catalog versions"),
        "{maintained}"
    );
    let log: serde_json::Value =
        serde_json::from_str(&ok(d, &["log", "--format", "json"])).expect("json log");
    assert_eq!(log.as_array().map(Vec::len), Some(1), "{log}");
    assert_eq!(count(d, lines, "audit"), tapped);
    let verified = ok(d, &["verify"]);
    assert!(verified.contains("no problems"), "{verified}");
}

/// A lake in a folder whose path holds a space and a non-ASCII letter: maintenance with no
/// grace must keep every live file (it once compared decoded paths with percent-encoded
/// locations and deleted them all), and `verify` finds every file it should.
#[test]
fn maintenance_in_a_path_with_a_space_and_an_accent_keeps_every_live_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("My Lake").join("Café");
    std::fs::create_dir_all(&d).unwrap();
    ok(&d, &["sugarbush"]);
    ok(&d, &["tap", "--through", "2026-08-20"]);
    let lines = "select count(*) as n from (select _line from bronze.orders union all select _line from bronze.payments \
                 union all select _line from bronze.fx_rates union all select _line from bronze.settlements)";
    let tapped = count(&d, lines, "audit");
    assert_eq!(tapped, landed_lines(&d, "2026-08-20T23:59:59Z"));

    // Silver from bronze, with only the old payments parser (the story's August 17 morning
    // would quarantine the new API version's events; through the 20th there are some).
    let out = sugarshack(&d, &["boil"], &[("SUGAR_PARSERS", "2025-11-01")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let boiled = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(boiled.contains("unsupported_api_version"), "{boiled}");
    let replayed = ok(&d, &["boil", "--replay"]);
    assert!(!replayed.contains("unsupported_api_version"), "{replayed}");

    let maintained = ok(&d, &["maintain", "--orphan-grace-minutes", "0"]);
    assert!(
        maintained.contains("removed 0 orphan files"),
        "{maintained}"
    );
    assert_eq!(count(&d, lines, "audit"), tapped, "every row still reads");
    let verified = ok(&d, &["verify"]);
    assert!(verified.contains("no problems"), "{verified}");

    // Damage: a live data file goes missing. verify names it and exits non-zero.
    let data = d
        .join("warehouse")
        .join("bronze")
        .join("payments")
        .join("data");
    let victim = walk_files(&data)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a parquet file of bronze.payments");
    std::fs::remove_file(&victim).unwrap();
    let damaged = sugarshack(&d, &["verify"], &[]);
    assert!(
        !damaged.status.success(),
        "verify must fail on a missing file"
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&damaged.stdout),
        String::from_utf8_lossy(&damaged.stderr)
    );
    let file_name = victim.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        said.contains(&file_name),
        "verify names {file_name}:\n{said}"
    );
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
