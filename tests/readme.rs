//! The README's story, run as a new user runs it: every `$ cargo run -- …` line of the story
//! told step by step (from its `export SUGARSHACK_CATALOG=…` to the rollback) runs through the
//! program in an empty folder, with the exit status the README shows, and every output line the
//! README shows appears in what the program printed (`...` stands for lines left out, `…` for
//! the rest of a line that differs from run to run). The season-long commands (`season`,
//! `compare`, `two-answers`) are run by tests/run.rs; here the figures the README shows for
//! them are weighed against the season's truth.

mod support;

use std::path::Path;
use std::process::Command;

/// One `$` line of the README and the output shown under it.
struct Step {
    env: Vec<(String, String)>,
    args: Vec<String>,
    shown: Vec<String>,
    /// `$ echo $?` after it: the exit status shown.
    status: Option<i32>,
}

/// Split a command line as a shell would, for the quoting the README uses ("…" and '…').
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, ' ') => {
                if started {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            (None, c) => {
                cur.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(cur);
    }
    out
}

fn steps(readme: &str) -> Vec<Step> {
    let start = readme
        .find("export SUGARSHACK_CATALOG=")
        .expect("the README's story exports its lake");
    let end = readme[start..]
        .find("**Weigh the barrels**")
        .map(|i| start + i)
        .expect("the story's season section");
    let mut out: Vec<Step> = Vec::new();
    // The export line is inside the story's first code block.
    let mut in_block = true;
    // Output lines belong to the last `$` line of the same block.
    let mut current = false;
    for line in readme[start..end].lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            current = false;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            if cmd == "echo $?" {
                // The next shown line is the status.
                if let Some(last) = out.last_mut() {
                    last.status = Some(-1);
                }
                continue;
            }
            let mut w = words(cmd);
            let mut env = Vec::new();
            while let Some((k, v)) = w.first().and_then(|f| f.split_once('=')) {
                env.push((k.to_string(), v.to_string()));
                w.remove(0);
            }
            assert_eq!(
                w.get(..2),
                Some(&["cargo".to_string(), "run".to_string()][..]),
                "a README command that is not `cargo run`: {cmd}"
            );
            assert_eq!(w.get(2).map(String::as_str), Some("--"), "{cmd}");
            out.push(Step {
                env,
                args: w[3..].to_vec(),
                shown: Vec::new(),
                status: None,
            });
            current = true;
        } else if let Some(last) = out.last_mut().filter(|_| current) {
            if last.status == Some(-1) {
                last.status = Some(line.trim().parse().expect("an exit status"));
            } else {
                last.shown.push(line.to_string());
            }
        }
    }
    out
}

#[test]
fn the_readme_story_runs_as_shown() {
    let readme =
        std::fs::read_to_string(support::package_dir().join("../README.md")).expect("README.md");
    let steps = steps(&readme);
    assert!(steps.len() >= 9, "{} steps", steps.len());
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir: &Path = tmp.path();
    for step in &steps {
        let mut cmd = Command::new(support::program());
        cmd.current_dir(dir)
            .args(&step.args)
            .env("SUGARSHACK_CATALOG", "story/catalog")
            .env("SUGARSHACK_WAREHOUSE", "story/warehouse")
            .env_remove("SUGAR_PARSERS")
            .env_remove("SUGARSHACK_LANDING");
        for (k, v) in &step.env {
            cmd.env(k, v);
        }
        let o = cmd.output().expect("run sugarshack");
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        let want = step.status.unwrap_or(0);
        assert_eq!(
            o.status.code(),
            Some(want),
            "`{}` exits {want} as the README says:\n{out}{err}",
            step.args.join(" ")
        );
        let printed: Vec<&str> = out.lines().chain(err.lines()).collect();
        for line in &step.shown {
            let line = line.trim_end();
            if line.is_empty() || line.trim() == "..." {
                continue;
            }
            let found = match line.split_once('…') {
                Some((head, _)) => printed.iter().any(|p| p.starts_with(head.trim_end())),
                None => printed.iter().any(|p| p.trim_end() == line),
            };
            assert!(
                found,
                "`{}`: the README shows\n{line}\nbut the program printed\n{out}{err}",
                step.args.join(" ")
            );
        }
    }
    the_barrels_weigh_what_the_truth_says(&readme, &dir.join("story/warehouse"));
}

/// `C$2,621,092.29` or `7,919.76` → cents.
fn cents(s: &str) -> Option<i64> {
    let digits: String = s
        .trim_start_matches("C$")
        .chars()
        .filter(|c| *c != ',')
        .collect();
    let (whole, frac) = digits.split_once('.')?;
    if frac.len() != 2 {
        return None;
    }
    Some(whole.parse::<i64>().ok()? * 100 + frac.parse::<i64>().ok()?)
}

/// The code block under the `$ cargo run -- <command>` line.
fn block_after<'a>(readme: &'a str, command: &str) -> Vec<&'a str> {
    let start = readme
        .find(&format!("$ cargo run -- {command}"))
        .unwrap_or_else(|| panic!("the README shows `{command}`"));
    readme[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect()
}

/// The season-long commands are run by tests/run.rs on the same season; here the figures the
/// README shows for them are weighed against the generator's own account of the season
/// (`truth/bridge.csv`, `truth/two_answers.csv`), so the README cannot drift from the data.
fn the_barrels_weigh_what_the_truth_says(readme: &str, warehouse: &Path) {
    let truth = sugarbush::load_truth(warehouse).expect("truth/");
    let tuesday = chrono::DateTime::parse_from_rfc3339("2026-09-08T12:00:00Z")
        .expect("instant")
        .with_timezone(&chrono::Utc);
    let b = truth.bridge_at("2026-08", tuesday).expect("truth's bridge");

    let compare = block_after(readme, "compare --through 2026-09-08T12:00");
    let figure = |label: &str| -> i64 {
        let line = compare
            .iter()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("the README's bridge has a line {label:?}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        // `label  -  7,919.76  C$…` or `label  C$…`.
        match words.iter().position(|w| *w == "-" || *w == "+") {
            Some(i) => {
                let v = cents(words[i + 1]).expect("an amount");
                if words[i] == "-" { -v } else { v }
            }
            None => words
                .iter()
                .find_map(|w| w.starts_with("C$").then(|| cents(w)).flatten())
                .expect("an amount"),
        }
    };
    assert_eq!(figure("bucket brigade dashboard"), b.naive_minor);
    assert_eq!(figure("re-sent files counted twice"), -b.resent_minor);
    assert_eq!(figure("webhook retries counted twice"), -b.retries_minor);
    assert_eq!(figure("v2 amounts read as null"), b.v2_null_minor);
    assert_eq!(figure("refunds never subtracted"), -b.refunds_minor);
    assert_eq!(figure("USD added as if it were CAD"), b.usd_minor);
    assert_eq!(figure("gold.mart_daily_cash"), b.end_minor);

    let shown: Vec<(i64, i64)> = block_after(readme, "two-answers --month 2026-08")
        .iter()
        .filter(|l| l.starts_with("2026-"))
        .map(|l| {
            let money: Vec<i64> = l.split_whitespace().filter_map(cents).collect();
            (money[0], money[1])
        })
        .collect();
    let want: Vec<(i64, i64)> = truth
        .answers_for("2026-08")
        .iter()
        .map(|a| (a.cash_minor, a.orders_minor))
        .collect();
    assert_eq!(shown, want, "the README's two answers are truth's");
}
