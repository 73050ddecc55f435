//! Generates a season and prints its report as JSON, with the time it took on stderr.
//!
//! ```text
//! cargo run -p sugarbush --release --example season -- /tmp/wh [--scale N] [--seed S] [--force]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use sugarbush::{GenerateOptions, Progress, SeasonConfig, generate};

struct Stderr;

impl Progress for Stderr {
    fn set_total(&self, n: u64) {
        eprintln!("simulating {n} hours");
    }
    fn inc(&self, _n: u64) {}
    fn message(&self, m: &str) {
        if m.contains("-01 ") || m.contains("-15 ") {
            eprintln!("  {m}");
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut root = None;
    let mut cfg = SeasonConfig::default();
    let mut opts = GenerateOptions::default();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--scale" => cfg.scale = args.next().ok_or("--scale N")?.parse()?,
            "--seed" => cfg.seed = args.next().ok_or("--seed S")?.parse()?,
            "--force" => opts.force = true,
            _ => root = Some(PathBuf::from(a)),
        }
    }
    let root = root.ok_or("usage: season WAREHOUSE [--scale N] [--seed S] [--force]")?;
    let started = Instant::now();
    let report = generate(&root, &cfg, &opts, &Stderr)?;
    let secs = started.elapsed().as_secs_f64();
    println!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!(
        "{} lines in {secs:.2} s ({:.0} lines/s)",
        report.lines,
        report.lines as f64 / secs
    );
    Ok(())
}
