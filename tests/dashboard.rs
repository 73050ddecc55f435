//! The honest dashboard in a real browser: `sugarshack serve` as a user starts it, over a lake
//! that lived the story's August 16 and 17 (a publish, the blocked morning, the replay), read by
//! Debian's headless chromium through its own command-line flags (no Node, no driver):
//! `--dump-dom` for the rendered page, `--screenshot` for a person to look at, and
//! `--enable-logging=stderr` for the console (every console message is printed as a `CONSOLE`
//! line; these pages run no script, so any such line is a failure).
//!
//! Checked: every page loads without a console message; the as-of shown is the publish log's; a
//! blocked run shows its banner with the blocking audit's reason; the numbers are the ones
//! `sugarshack query --publish N` gives — by running the very command printed beside each
//! number — and never the `audit` branch's; choosing a publish (the URL the picker's GET form
//! submits) changes them to that publish's; the bridge is `sugarshack compare`'s.
//!
//! chromium is required: without it this test fails and says how to install it (`.ci/run` does).
//! Screenshots land in `$CARGO_TARGET_TMPDIR/dashboard-screens/`; their paths are printed.

mod support;

use support::{command, sugarshack};

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The exit status of a blocked run.
const BLOCKED: i32 = 3;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Debian's chromium, or the test fails saying how to get it.
fn chromium() -> PathBuf {
    let candidates = [
        std::env::var_os("SUGARSHACK_CHROMIUM").map(PathBuf::from),
        Some(PathBuf::from("/usr/bin/chromium")),
        Some(PathBuf::from("/usr/bin/chromium-browser")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the dashboard test needs a headless chromium and found none: install it with \
                 `sudo apt-get install -y chromium` (Debian; .ci/run does this), or point \
                 SUGARSHACK_CHROMIUM at a chromium binary"
            )
        })
}

/// One headless chromium run on `url` with `extra` flags: (stdout, the console lines).
fn browse(url: &str, extra: &[String]) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().expect("a profile dir");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium on {url} exited {:?}: {}",
        out.status.code(),
        text(&out.stderr)
    );
    let console = text(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (text(&out.stdout), console)
}

/// The rendered DOM of `url`, asserting the page logged nothing to the console.
fn dom(url: &str) -> String {
    let (dom, console) = browse(url, &["--dump-dom".to_string()]);
    assert!(
        console.is_empty(),
        "{url} logged to the console:\n{}",
        console.join("\n")
    );
    assert!(dom.contains("</html>"), "{url}: no page rendered:\n{dom}");
    // Nothing to fetch, nothing to fail: no script, no external stylesheet, image or frame.
    for needle in [
        "<script",
        " src=",
        "rel=\"stylesheet\"",
        "<iframe",
        "url(http",
    ] {
        assert!(
            !dom.contains(needle),
            "{url} loads a sub-resource ({needle})"
        );
    }
    dom
}

/// A screenshot of `url` at `width`×`height`, written under the test's output folder.
fn screenshot(url: &str, name: &str, width: u32, height: u32) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screens");
    std::fs::create_dir_all(&dir).expect("screens dir");
    let path = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&path);
    let (_, console) = browse(
        url,
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={width},{height}"),
        ],
    );
    assert!(console.is_empty(), "{url}: {}", console.join("\n"));
    let bytes = std::fs::read(&path).expect("the screenshot was written");
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        path.display()
    );
    println!("screenshot: {}", path.display());
    path
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The text between `from` (after it) and `to`.
fn between<'a>(s: &'a str, from: &str, to: &str) -> Option<&'a str> {
    let start = s.find(from)? + from.len();
    let end = s[start..].find(to)?;
    Some(&s[start..start + end])
}

/// The figure inside the element with this id: its value and the command beside it.
fn figure(dom: &str, id: &str) -> (String, String) {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in:\n{dom}"));
    let rest = &dom[at..];
    let value = between(rest, "data-value=\"", "\"").expect("a data-value");
    let cmd = between(rest, "<code class=\"cmd\">", "</code>").expect("a command beside it");
    (value.to_string(), unescape(cmd))
}

/// Run a `sugarshack query --publish N "SQL"` command as printed on a page: the one value it
/// gives (CSV), empty for a null.
fn run_printed(dir: &Path, printed: &str) -> String {
    let rest = printed
        .strip_prefix("sugarshack query --publish ")
        .unwrap_or_else(|| panic!("not a query command: {printed}"));
    let (n, quoted) = rest.split_once(' ').expect("a publish and the SQL");
    let sql = quoted
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("the SQL is not double-quoted: {quoted}"));
    let o = sugarshack(dir, &["query", "--publish", n, sql, "--format", "csv"], &[]);
    assert!(o.status.success(), "{printed}: {}", text(&o.stderr));
    let out = text(&o.stdout);
    let mut lines = out.lines();
    lines.next();
    lines.next().unwrap_or("").trim().to_string()
}

/// `sugarshack query --publish N` (or `--branch B`) of one value.
fn query_value(dir: &Path, at: &[&str], sql: &str) -> String {
    let mut args = vec!["query", sql, "--format", "csv"];
    args.extend_from_slice(at);
    let o = sugarshack(dir, &args, &[]);
    assert!(o.status.success(), "{sql}: {}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .nth(1)
        .unwrap_or("")
        .trim()
        .to_string()
}

/// Every record of `sugarshack history --format json`: (status, publish, as-of).
fn history(dir: &Path) -> Vec<(String, String, String)> {
    let o = sugarshack(dir, &["history", "--format", "json"], &[]);
    assert!(o.status.success(), "history: {}", text(&o.stderr));
    let out = text(&o.stdout);
    let rows: Vec<serde_json::Value> = match serde_json::from_str::<serde_json::Value>(&out) {
        Ok(serde_json::Value::Array(a)) => a,
        _ => out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("a JSON row"))
            .collect(),
    };
    rows.iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("publish"), s("as_of"))
        })
        .collect()
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sugarshack serve` on any free port: the server and the dashboard's base URL, read from
/// what it prints.
fn serve(dir: &Path) -> (Server, String) {
    let mut child = command(dir, &["serve", "--addr", "127.0.0.1:0"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let server = Server(child);
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line)
            .expect("the server says where it listens");
        lines.push(line);
    }
    assert!(
        lines[0].starts_with("serving the Iceberg REST catalog on http://"),
        "{lines:?}"
    );
    let url = lines[1]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no dashboard URL in {lines:?}"))
        .trim_end_matches('/')
        .to_string();
    assert!(
        lines[1].starts_with("the dashboard on http://"),
        "{lines:?}"
    );
    (server, url)
}

const MONTH_CASH: &str = "select sum(net_cad_minor) as net_cad_minor from gold.mart_daily_cash where processor_date >= date '2026-08-01' and processor_date < date '2026-09-01'";

#[test]
fn the_dashboard_shows_only_graded_numbers_in_a_real_browser() {
    chromium(); // fail first, and clearly, when there is no browser
    let lake = tempfile::tempdir().expect("tempdir");
    let dir = lake.path();
    let o = sugarshack(dir, &["sugarbush"], &[]);
    assert!(o.status.success(), "sugarbush: {}", text(&o.stderr));
    let o = sugarshack(dir, &["run", "--through", "2026-08-16"], &[]);
    assert_eq!(o.status.code(), Some(0), "run: {}", text(&o.stderr));
    // The story's August 17 morning, before anyone knew of the new API version: blocked.
    let o = sugarshack(
        dir,
        &["run", "--through", "2026-08-17T12:00"],
        &[("SUGAR_PARSERS", "2025-11-01")],
    );
    assert_eq!(o.status.code(), Some(BLOCKED), "{}", text(&o.stdout));

    let (_server, base) = serve(dir);

    // The console channel works: a script's console.error is a CONSOLE line. (Chromium logs
    // console messages and uncaught exceptions there, not failed sub-resource loads: `dom`
    // checks that the pages load no sub-resource at all.)
    let (_, console) = browse(
        "data:text/html;charset=utf-8,%3Cscript%3Econsole.error(%27probe-4711%27)%3C%2Fscript%3E",
        &["--dump-dom".into()],
    );
    assert!(
        console.iter().any(|l| l.contains("probe-4711")),
        "chromium printed no console line for console.error: {console:?}"
    );
    // A publish the log does not hold: a clear 404 page.
    let missing = dom(&format!("{base}/?publish=99"));
    assert!(missing.contains("there is no publish 99: the only publish is 1"));

    // Blocked: the page shows publish 1, as of the log's as-of, with the banner and its reason.
    let log = history(dir);
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(
        (log[0].0.as_str(), log[0].1.as_str()),
        ("published", "publish-1")
    );
    assert_eq!(log[1].0, "blocked");
    let revenue = dom(&format!("{base}/"));
    let shown = between(&revenue, "data-publish=\"1\">", "<").expect("the as-of, large");
    assert_eq!(shown, log[0].2, "the as-of shown is publish 1's");
    let banner = between(&revenue, "id=\"blocked\"", "</div>").expect("the blocked banner");
    assert!(
        banner.contains(&format!("gold still shows the build as of {}", log[0].2)),
        "{banner}"
    );
    assert!(banner.contains("quarantine rate"), "{banner}");
    assert!(banner.contains("unsupported_api_version"), "{banner}");
    let (cash_1, cmd) = figure(&revenue, "month-cash");
    assert!(cmd.starts_with("sugarshack query --publish 1 "), "{cmd}");
    assert_eq!(
        run_printed(dir, &cmd),
        cash_1,
        "the page's number is its command's"
    );
    assert_eq!(cash_1, query_value(dir, &["--publish", "1"], MONTH_CASH));
    let audit = query_value(dir, &["--branch", "audit"], MONTH_CASH);
    assert_ne!(
        cash_1, audit,
        "audit holds the blocked build: the page must not show it"
    );
    for id in ["month-orders", "queue", "queue-over"] {
        let (v, cmd) = figure(&revenue, id);
        assert_eq!(run_printed(dir, &cmd), v, "#{id}");
    }
    screenshot(&format!("{base}/"), "revenue-blocked", 1280, 2200);

    let audits = dom(&format!("{base}/audits"));
    assert!(audits.contains("The last run: as of 2026-08-17 12:00 UTC"));
    assert_eq!(
        audits.matches("class=\"card audit\"").count(),
        8,
        "the blocked run's four and publish 1's four"
    );
    assert!(audits.contains("data-verdict=\"BLOCK\""));
    assert_eq!(audits.matches("<tr data-seq=").count(), 2);
    screenshot(&format!("{base}/audits"), "audits-blocked", 1280, 1800);

    // The replay publishes August 17: the same server now shows publish 2.
    let o = sugarshack(
        dir,
        &["run", "--through", "2026-08-17T12:00", "--replay"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "replay: {}", text(&o.stderr));
    let log = history(dir);
    assert_eq!(log.len(), 3, "{log:?}");
    let revenue = dom(&format!("{base}/"));
    let shown = between(&revenue, "data-publish=\"2\">", "<").expect("publish 2's as-of");
    assert_eq!(shown, log[2].2);
    assert!(!revenue.contains("id=\"blocked\""), "publish 2 passed");
    let (cash_2, cmd) = figure(&revenue, "month-cash");
    assert!(cmd.starts_with("sugarshack query --publish 2 "), "{cmd}");
    assert_eq!(run_printed(dir, &cmd), cash_2);
    assert_ne!(cash_1, cash_2, "August 17 adds cash");

    // The picker is a GET form: load the URL it submits. Publish 1's numbers come back, with
    // the block that followed it.
    let back = dom(&format!("{base}/?publish=1"));
    assert_eq!(figure(&back, "month-cash").0, cash_1);
    assert!(back.contains("Time travel: these are publish 1"));
    assert!(back.contains("id=\"blocked\""));
    assert!(
        back.contains("href=\"/audits?publish=1\""),
        "the choice is kept on every link"
    );
    for id in ["month-orders", "queue", "queue-over"] {
        let (v, cmd) = figure(&back, id);
        assert!(cmd.starts_with("sugarshack query --publish 1 "), "{cmd}");
        assert_eq!(run_printed(dir, &cmd), v, "#{id} at publish 1");
    }
    screenshot(
        &format!("{base}/?publish=1"),
        "revenue-publish-1",
        1280,
        2200,
    );
    // An as-of date: the publish at or before it (as `query --as-of` reads).
    let by_date = dom(&format!("{base}/?as_of=2026-08-17T11%3A00"));
    assert_eq!(figure(&by_date, "month-cash").0, cash_1);
    let by_day = dom(&format!("{base}/?as_of=2026-08-17"));
    assert_eq!(figure(&by_day, "month-cash").0, cash_2);

    // The bridge is `sugarshack compare`'s, at the publish.
    let bridge = dom(&format!("{base}/bridge"));
    let o = sugarshack(
        dir,
        &[
            "compare",
            "--through",
            "2026-08-17T12:00",
            "--month",
            "2026-08",
        ],
        &[],
    );
    assert!(o.status.success(), "compare: {}", text(&o.stderr));
    let printed = text(&o.stdout);
    for label in ["bucket brigade dashboard", "gold.mart_daily_cash"] {
        let line = printed
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label} line in:\n{printed}"));
        let amount = line
            .split_whitespace()
            .find(|w| w.starts_with("C$"))
            .expect("an amount");
        assert!(
            bridge.contains(amount),
            "the bridge page lacks {label} {amount}"
        );
    }
    let (gold, cmd) = figure(&bridge, "gold-line");
    assert_eq!(gold, cash_2);
    assert_eq!(run_printed(dir, &cmd), gold);
    assert!(bridge.contains("<svg"), "the waterfall");
    screenshot(&format!("{base}/bridge"), "bridge", 1280, 1600);

    let travel = dom(&format!("{base}/time-travel"));
    assert!(travel.contains("Two right answers for 2026-08"));
    let rows = between(&travel, "id=\"two-answers\"", "</table>").expect("the two answers");
    assert!(
        rows.contains(&cmd_money(&cash_1)) && rows.contains(&cmd_money(&cash_2)),
        "{rows}"
    );
    screenshot(&format!("{base}/time-travel"), "time-travel", 1280, 1600);
    // On a phone.
    screenshot(&format!("{base}/"), "revenue-phone", 390, 1400);

    // A rollback is a publish of earlier snapshots: publish 3 shows publish 1's build and
    // numbers, and the audits page says why.
    let reason = "the morning's FX file was wrong";
    let o = sugarshack(dir, &["rollback", "--to", "1", "--reason", reason], &[]);
    assert!(o.status.success(), "rollback: {}", text(&o.stderr));
    let rolled = dom(&format!("{base}/"));
    assert!(
        rolled.contains(&format!("data-publish=\"3\">{}<", log[0].2)),
        "publish 3, as of publish 1's as-of"
    );
    assert_eq!(figure(&rolled, "month-cash").0, cash_1);
    let audits = dom(&format!("{base}/audits"));
    assert!(audits.contains("rolled back"), "the status");
    assert!(
        audits.contains(&format!("to publish 1: {reason}")),
        "the reason"
    );
    assert_eq!(audits.matches("<tr data-seq=").count(), 4);
}

/// Minor units as the page prints them: `147950222` → `C$1,479,502.22`.
fn cmd_money(minor: &str) -> String {
    let v: i64 = minor.parse().expect("minor units");
    let abs = v.unsigned_abs();
    let mut units = (abs / 100).to_string();
    let mut grouped = String::new();
    while units.len() > 3 {
        let tail = units.split_off(units.len() - 3);
        grouped = format!(",{tail}{grouped}");
    }
    format!(
        "{}C${units}{grouped}.{:02}",
        if v < 0 { "-" } else { "" },
        abs % 100
    )
}
