//! The lakehouse benchmarks (issue 13): how fast the lake does what it exists for, as ratios
//! measured in one run on this machine.
//!
//!     cargo bench -p sugarshack-e2e --bench lakehouse [-- --part 1|2|all] [--quick]
//!         [--scales 1,10,100] [--repeats N] [--json PATH] [--dir DIR]
//!
//! Part 1, the write-audit-publish primitives, the same work on both sides: K commits of N-row
//! Arrow batches appended to an `audit` branch, `main` fast-forwarded to `audit`, 15 tables
//! fast-forwarded at once (lake: one catalog commit; pyiceberg: one table at a time), the
//! metadata bytes a commit costs; then reads of lake's table at 20 earlier snapshots and a
//! filtered aggregate at `main`, by lake, by pyiceberg and by DuckDB's iceberg extension (both
//! given the metadata location). The Python side is `peers.py` beside this file, run in a
//! virtualenv the bench creates when it is missing. Counts and sums are compared at the end.
//!
//! Part 2, the season: generate, one full build, and one incremental daily run at the end of
//! the season per scale; and the season day by day (`shack::play_season`). Each measured piece
//! runs in a child process (this program again, with a hidden sub-command) that reports its
//! wall time and its peak memory (VmHWM). Late-season against early-season daily runs are also
//! measured as a scheduler meets them: a fresh process each, on lakes built through the morning
//! before, early and late taking turns, each week twice on lakes built anew.
//!
//! Every figure is printed with min / median / max over its samples and, where a peer did the
//! same work in the same run, the peer's figures and the ratio (peer ÷ lake: above 1 means the
//! lake is faster or smaller). The same goes to JSON (`--json`, default
//! `<target>/bench/lakehouse.json`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
// The program's allocator comes with its library, as it does for the `sugarshack` binary.
use sugarshack as _;

#[path = "../support/mod.rs"]
mod support;

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use lake::{At, Catalog, RefOp};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Flags

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    One,
    Two,
    All,
}

#[derive(Debug)]
struct Args {
    part: Part,
    quick: bool,
    /// Part 1's workloads, `(K commits, N rows)`; default the issue's.
    sizes: Option<Vec<(usize, usize)>>,
    scales: Vec<u32>,
    repeats: Option<usize>,
    json: Option<PathBuf>,
    dir: Option<PathBuf>,
    /// Part 1 without the peers (for profiling the lake's side alone).
    lake_only: bool,
    /// The peers' Python, used as it is (never installed into): the tests' Python when the
    /// bench runs as a test.
    python: Option<PathBuf>,
}

const USAGE: &str = "usage: lakehouse [--part 1|2|all] [--quick] [--scales 1,10,100] [--repeats N] [--json PATH] [--dir DIR] [--python PATH]
  --part      which part to run: 1 (WAP primitives against pyiceberg and DuckDB), 2 (the season), all (default)
  --quick     tiny sizes, to check the bench itself works (figures mean little)
  --sizes     part 1's workloads as KxN commits x rows (default 200x1000,50x100000)
  --scales    season scales for part 2 (default 1,10)
  --repeats   samples per figure where a figure is repeated whole (default: 3 at scale 1, fewer above)
  --json      where to write the figures as JSON (default <target>/bench/lakehouse.json)
  --dir       a new or empty folder for the bench's lakes and landing zones, kept afterwards
              (default: a temporary folder, removed at the end)
  --python    the peers' Python, used as it is (default: $SUGARSHACK_VENV or ~/.cache/sugarshack/venv,
              set up when it cannot import them)";

fn parse_args(raw: &[String]) -> Result<Args> {
    let mut a = Args {
        part: Part::All,
        quick: false,
        sizes: None,
        scales: vec![1, 10],
        repeats: None,
        json: None,
        dir: None,
        lake_only: false,
        python: None,
    };
    let mut it = raw.iter();
    let value = |it: &mut std::slice::Iter<String>, flag: &str| -> Result<String> {
        it.next()
            .cloned()
            .ok_or_else(|| anyhow!("{flag} needs a value\n{USAGE}"))
    };
    while let Some(f) = it.next() {
        match f.as_str() {
            // cargo bench passes --bench to a harness=false bench; cargo test passes nothing.
            "--bench" => {}
            "--quick" => a.quick = true,
            "--lake-only" => a.lake_only = true,
            "--sizes" => {
                let v = value(&mut it, "--sizes")?;
                let mut sizes = Vec::new();
                for w in v.split(',').filter(|s| !s.is_empty()) {
                    let parsed = w.split_once('x').and_then(|(k, n)| {
                        Some((
                            k.trim().parse::<usize>().ok()?,
                            n.trim().parse::<usize>().ok()?,
                        ))
                    });
                    match parsed {
                        Some((k, n)) if k >= 2 && n >= 1 => sizes.push((k, n)),
                        _ => bail!(
                            "--sizes takes KxN workloads (K >= 2 commits of N >= 1 rows) separated by commas, not {w:?}"
                        ),
                    }
                }
                if sizes.is_empty() {
                    bail!("--sizes needs at least one KxN workload");
                }
                a.sizes = Some(sizes);
            }
            "--part" => {
                a.part = match value(&mut it, "--part")?.as_str() {
                    "1" => Part::One,
                    "2" => Part::Two,
                    "all" => Part::All,
                    other => bail!("--part takes 1, 2 or all, not {other:?}\n{USAGE}"),
                }
            }
            "--scales" => {
                let v = value(&mut it, "--scales")?;
                let mut scales = Vec::new();
                for s in v.split(',').filter(|s| !s.is_empty()) {
                    let n: u32 = s.trim().parse().map_err(|_| {
                        anyhow!("--scales takes numbers separated by commas, not {v:?}")
                    })?;
                    if n == 0 || n > sugarbush::MAX_SCALE {
                        bail!("a scale is 1 to {}, not {n}", sugarbush::MAX_SCALE);
                    }
                    scales.push(n);
                }
                if scales.is_empty() {
                    bail!("--scales needs at least one scale");
                }
                a.scales = scales;
            }
            "--repeats" => {
                let v = value(&mut it, "--repeats")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| anyhow!("--repeats takes a number, not {v:?}"))?;
                if n == 0 {
                    bail!("--repeats must be at least 1");
                }
                a.repeats = Some(n);
            }
            "--json" => a.json = Some(PathBuf::from(value(&mut it, "--json")?)),
            "--dir" => a.dir = Some(PathBuf::from(value(&mut it, "--dir")?)),
            "--python" => a.python = Some(PathBuf::from(value(&mut it, "--python")?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other:?}\n{USAGE}"),
        }
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------------
// Figures

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Ms,
    S,
    Bytes,
    MiB,
    RowsPerS,
    Ratio,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::S => "s",
            Unit::Bytes => "bytes",
            Unit::MiB => "MiB",
            Unit::RowsPerS => "rows/s",
            Unit::Ratio => "x",
        }
    }

    fn fmt(self, v: f64) -> String {
        match self {
            Unit::Ms if v < 10.0 => format!("{v:.2}"),
            Unit::Ms => format!("{v:.1}"),
            Unit::S if v < 10.0 => format!("{v:.2}"),
            Unit::S => format!("{v:.1}"),
            Unit::Bytes => thousands(v.round() as u64),
            Unit::MiB => format!("{v:.0}"),
            Unit::RowsPerS => thousands(v.round() as u64),
            Unit::Ratio => format!("{v:.2}"),
        }
    }
}

use sugarbush::thousands;

#[derive(Clone, Debug)]
struct Stats {
    n: usize,
    min: f64,
    median: f64,
    max: f64,
}

impl Stats {
    fn of(samples: &[f64]) -> Option<Stats> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stats {
            n,
            min: v[0],
            median,
            max: v[n - 1],
        })
    }

    fn render(&self, unit: Unit) -> String {
        if self.n == 1 {
            unit.fmt(self.median)
        } else {
            format!(
                "{} / {} / {}",
                unit.fmt(self.min),
                unit.fmt(self.median),
                unit.fmt(self.max)
            )
        }
    }

    fn to_json(&self) -> Value {
        json!({"n": self.n, "min": self.min, "median": self.median, "max": self.max})
    }
}

/// Which way a figure is better, for the ratio and the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Better {
    Lower,
    Higher,
}

#[derive(Clone, Debug)]
struct Target {
    /// What it says, for people: `>= 10x`, `< 10 s`.
    text: String,
    met: bool,
}

#[derive(Clone, Debug)]
struct Row {
    section: String,
    figure: String,
    unit: Unit,
    better: Better,
    lake: Option<Stats>,
    peer: Option<(String, Stats)>,
    target: Option<Target>,
    note: String,
}

impl Row {
    fn new(section: &str, figure: &str, unit: Unit, samples: &[f64]) -> Row {
        Row {
            section: section.to_string(),
            figure: figure.to_string(),
            unit,
            better: if unit == Unit::RowsPerS {
                Better::Higher
            } else {
                Better::Lower
            },
            lake: Stats::of(samples),
            peer: None,
            target: None,
            note: String::new(),
        }
    }

    fn peer(mut self, name: &str, samples: &[f64]) -> Row {
        self.peer = Stats::of(samples).map(|s| (name.to_string(), s));
        self
    }

    fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    /// peer ÷ lake for lower-is-better figures (above 1: the lake is ahead), lake ÷ peer else.
    fn ratio(&self) -> Option<f64> {
        let (lake, (_, peer)) = (self.lake.as_ref()?, self.peer.as_ref()?);
        let r = match self.better {
            Better::Lower => peer.median / lake.median,
            Better::Higher => lake.median / peer.median,
        };
        r.is_finite().then_some(r)
    }

    /// A target on the ratio: at least `at_least` times the peer.
    fn target_ratio(mut self, at_least: f64) -> Row {
        let met = self.ratio().is_some_and(|r| r >= at_least);
        self.target = Some(Target {
            text: format!(">= {at_least}x"),
            met,
        });
        self
    }

    /// A target on the lake's median: below `limit` (in the row's unit).
    fn target_below(mut self, limit: f64) -> Row {
        let met = self.lake.as_ref().is_some_and(|s| s.median < limit);
        self.target = Some(Target {
            text: format!("< {} {}", self.unit.fmt(limit), self.unit.name()),
            met,
        });
        self
    }

    fn to_json(&self) -> Value {
        json!({
            "section": self.section,
            "figure": self.figure,
            "unit": self.unit.name(),
            "lake": self.lake.as_ref().map(Stats::to_json),
            "peer": self.peer.as_ref().map(|(n, s)| json!({"name": n, "stats": s.to_json()})),
            "ratio": self.ratio(),
            "target": self.target.as_ref().map(|t| json!({"text": t.text, "met": t.met})),
            "note": self.note,
        })
    }
}

fn print_table(machine: &str, rows: &[Row]) {
    println!();
    println!("machine: {machine}");
    println!(
        "lake and peer columns: min / median / max over n samples; ratio = peer median / lake median (above 1: lake ahead)"
    );
    let header = [
        "figure",
        "unit",
        "n",
        "lake",
        "peer",
        "peer figures",
        "ratio",
        "target",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.figure.clone(),
                r.unit.name().to_string(),
                r.lake.as_ref().map(|s| s.n.to_string()).unwrap_or_default(),
                r.lake
                    .as_ref()
                    .map(|s| s.render(r.unit))
                    .unwrap_or_else(|| "-".into()),
                r.peer.as_ref().map(|(n, _)| n.clone()).unwrap_or_default(),
                r.peer
                    .as_ref()
                    .map(|(_, s)| s.render(r.unit))
                    .unwrap_or_default(),
                r.ratio().map(|x| format!("{x:.1}x")).unwrap_or_default(),
                r.target
                    .as_ref()
                    .map(|t| format!("{} {}", t.text, if t.met { "met" } else { "MISSED" }))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let mut w = header.map(|h| h.len());
    for c in &cells {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.chars().count());
        }
    }
    let line = |c: &[String; 8]| {
        let mut s = String::new();
        for (i, cell) in c.iter().enumerate() {
            let pad = w[i] - cell.chars().count();
            // Numbers right-aligned, words left-aligned.
            if matches!(i, 2 | 3 | 5 | 6) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        s.trim_end().to_string()
    };
    let mut section = "";
    for (r, c) in rows.iter().zip(&cells) {
        if r.section != section {
            section = &r.section;
            println!();
            println!("== {section}");
            println!("{}", line(&header.map(String::from)));
        }
        println!("{}", line(c));
        if !r.note.is_empty() {
            println!("     ({})", r.note);
        }
    }
    println!();
}

fn machine() -> (String, Value) {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mem_gib = mem_kib as f64 / 1024.0 / 1024.0;
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_default();
    // What `git` prints in the checkout (`None`: no git, or it failed).
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    // The commit is asked when the bench runs: a work tree with changes to tracked files may
    // have built something else, and the line says so.
    let changed = !commit.is_empty()
        && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.is_empty());
    // A binary run directly (not through `cargo bench`, which builds it first) may be older
    // than the checkout's HEAD: then the line cannot say which commit it measures.
    let committed_s = git(&["log", "-1", "--format=%ct"]).and_then(|o| o.parse::<u64>().ok());
    let built_s = std::env::current_exe()
        .and_then(std::fs::metadata)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let stale = matches!((committed_s, built_s), (Some(c), Some(b)) if b < c);
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    let lib_backtrace = std::env::var("RUST_LIB_BACKTRACE").unwrap_or_default();
    let text = format!(
        "{cores} cores, {model}, {mem_gib:.1} GiB memory; load {load} at start; {profile} build{}; RUST_LIB_BACKTRACE={lib_backtrace}",
        if commit.is_empty() {
            String::new()
        } else {
            format!(
                " of {commit}{}",
                match (changed, stale) {
                    (_, true) => " (the binary predates that commit: built from an earlier tree)",
                    (true, false) => " with uncommitted changes",
                    (false, false) => "",
                }
            )
        }
    );
    let v = json!({
        "cores": cores,
        "cpu": model,
        "memory_gib": mem_gib,
        "load_at_start": load,
        "profile": profile,
        "commit": commit,
        "binary_predates_commit": stale,
        "rust_lib_backtrace": lib_backtrace,
    });
    (text, v)
}

// ---------------------------------------------------------------------------------------------
// Part 1: the WAP primitives

const TABLE: &str = "bench.t";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("grp", DataType::Int64, false),
        Field::new("amount", DataType::Int64, false),
    ]))
}

/// Rows `start..start + n`: id, id % 97, id * 7919 % 100003 (peers.py makes the same).
fn rows(start: i64, n: usize) -> Result<RecordBatch> {
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let grp: Vec<i64> = ids.iter().map(|i| i % 97).collect();
    let amount: Vec<i64> = ids.iter().map(|i| i * 7919 % 100_003).collect();
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(Int64Array::from(grp)),
            Arc::new(Int64Array::from(amount)),
        ],
    )?)
}

/// The seed row every table starts with on `main` (pyiceberg cannot branch an empty table).
fn seed() -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![-1])),
            Arc::new(Int64Array::from(vec![0])),
            Arc::new(Int64Array::from(vec![0])),
        ],
    )?)
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

fn ms(v: &[f64]) -> Vec<f64> {
    v.iter().map(|s| s * 1000.0).collect()
}

/// Bytes of the files directly in `dir` (0 when it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn local_path(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap_or(location))
}

/// A new table with the seed row on `main` and an `audit` branch at it.
async fn new_table(lake: &Catalog, name: &str) -> Result<()> {
    lake.create_table(name, &schema(), &[]).await?;
    let s = lake
        .append(name, "main", &[seed()?], BTreeMap::new())
        .await?;
    lake.update_refs(
        name,
        &[RefOp::CreateBranch {
            name: "audit".into(),
            snapshot_id: s.snapshot_id,
        }],
        "branch",
    )
    .await?;
    Ok(())
}

struct LakeWrite {
    append_s: Vec<f64>,
    ff_s: Vec<f64>,
    ff_tables_s: Vec<f64>,
    metadata_bytes: u64,
    metadata_json_bytes: u64,
    main_count: i64,
    main_sum: i64,
}

/// The writes, with lake: as `peers.py write` does them with pyiceberg.
async fn lake_write(
    lake: &Catalog,
    root: &Path,
    k: usize,
    n: usize,
    ff: usize,
    tables: usize,
) -> Result<LakeWrite> {
    new_table(lake, TABLE).await?;
    let batches: Vec<RecordBatch> = (0..k + ff)
        .map(|i| rows((i * n) as i64, n))
        .collect::<Result<_>>()?;
    let mut append_s = Vec::with_capacity(k);
    for b in &batches[..k] {
        let t0 = Instant::now();
        lake.append(TABLE, "audit", std::slice::from_ref(b), BTreeMap::new())
            .await?;
        append_s.push(secs(t0));
    }
    // Table metadata (metadata JSON, manifest lists, manifests) plus the catalog's versions:
    // what pyiceberg's side counts as its metadata folder plus its SQLite file.
    let t = lake.table(TABLE).await?;
    let metadata_bytes = dir_bytes(&local_path(t.location()).join("metadata"))
        + dir_bytes(&root.join("catalog/versions"));
    let metadata_json_bytes = std::fs::metadata(local_path(t.metadata_location()))?.len();
    let mut ff_s = Vec::with_capacity(ff);
    for b in &batches[k..] {
        let wrote = lake
            .append(TABLE, "audit", std::slice::from_ref(b), BTreeMap::new())
            .await?;
        let t0 = Instant::now();
        lake.update_refs(
            TABLE,
            &[RefOp::FastForward {
                branch: "main".into(),
                to: wrote.snapshot_id,
            }],
            "publish",
        )
        .await?;
        ff_s.push(secs(t0));
    }
    let (main_count, main_sum) = count_sum(&lake.table(TABLE).await?.scan(&At::Main).await?)?;

    let names: Vec<String> = (0..tables).map(|j| format!("bench.t{j:02}")).collect();
    for name in &names {
        new_table(lake, name).await?;
    }
    let mut ff_tables_s = Vec::with_capacity(ff);
    for r in 0..ff {
        for (j, name) in names.iter().enumerate() {
            lake.append(
                name,
                "audit",
                &[rows(((r * tables + j) * 10) as i64, 10)?],
                BTreeMap::new(),
            )
            .await?;
        }
        // A publish: read the head once, every table's audit head, one catalog commit.
        let t0 = Instant::now();
        let head = lake.head().await?;
        let mut changes = Vec::with_capacity(tables);
        for name in &names {
            let t = lake.table_in(&head, name).await?;
            let to = t
                .head("audit")
                .ok_or_else(|| anyhow!("{name} has no audit branch"))?;
            changes.push(t.stage_refs(&[RefOp::FastForward {
                branch: "main".into(),
                to,
            }])?);
        }
        lake.commit(changes, "publish", "publish 15 tables", BTreeMap::new())
            .await?;
        ff_tables_s.push(secs(t0));
    }
    Ok(LakeWrite {
        append_s,
        ff_s,
        ff_tables_s,
        metadata_bytes,
        metadata_json_bytes,
        main_count,
        main_sum,
    })
}

fn count_sum(batches: &[RecordBatch]) -> Result<(i64, i64)> {
    let mut n = 0i64;
    let mut sum = 0i64;
    for b in batches {
        n += b.num_rows() as i64;
        let col = b
            .column_by_name("amount")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| anyhow!("no Int64 amount column"))?;
        sum += arrow::compute::sum(col).unwrap_or(0);
    }
    Ok((n, sum))
}

/// The first row of a `count(*), sum(..)` query.
fn first_two(batches: &[RecordBatch]) -> Result<(i64, i64)> {
    let b = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or_else(|| anyhow!("the query returned no row"))?;
    let int = |i: usize| -> Result<i64> {
        let c = b
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| anyhow!("column {i} is not Int64"))?;
        Ok(if c.is_null(0) { 0 } else { c.value(0) })
    };
    Ok((int(0)?, int(1)?))
}

async fn lake_sql(table: &lake::Table, at: &At, sql: &str) -> Result<(i64, i64)> {
    let ctx = lake::datafusion::prelude::SessionContext::new();
    lake::register_table(&ctx, table, at).await?;
    let batches = ctx.sql(sql).await?.collect().await?;
    first_two(&batches)
}

struct LakeReads {
    scan_s: Vec<f64>,
    sql_s: Vec<f64>,
    checks: Vec<(i64, i64)>,
    filtered_s: Vec<f64>,
    filtered: (i64, i64),
}

async fn lake_reads(
    lake: &Catalog,
    snapshots: &[i64],
    filter_min: i64,
    repeats: usize,
) -> Result<LakeReads> {
    let t = lake.table(TABLE).await?;
    let mut scan_s = Vec::new();
    let mut sql_s = Vec::new();
    let mut checks = Vec::new();
    let count_sql = "SELECT count(*), sum(amount) FROM bench.t";
    for &s in snapshots {
        let t0 = Instant::now();
        let got = count_sum(&t.scan(&At::Snapshot(s)).await?)?;
        scan_s.push(secs(t0));
        let t0 = Instant::now();
        let by_sql = lake_sql(&t, &At::Snapshot(s), count_sql).await?;
        sql_s.push(secs(t0));
        if by_sql != got {
            bail!("lake's scan and SQL disagree at snapshot {s}: {got:?} vs {by_sql:?}");
        }
        checks.push(got);
    }
    let filtered_sql =
        format!("SELECT count(*), sum(amount) FROM bench.t WHERE id >= {filter_min}");
    let mut filtered_s = Vec::new();
    let mut filtered = (0, 0);
    for _ in 0..repeats {
        let t0 = Instant::now();
        filtered = lake_sql(&t, &At::Main, &filtered_sql).await?;
        filtered_s.push(secs(t0));
    }
    Ok(LakeReads {
        scan_s,
        sql_s,
        checks,
        filtered_s,
        filtered,
    })
}

fn f64s(v: &Value, key: &str) -> Result<Vec<f64>> {
    v.get(key)
        .and_then(|a| a.as_array())
        .ok_or_else(|| anyhow!("peers.py gave no {key}"))?
        .iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| anyhow!("{key} holds a non-number"))
        })
        .collect()
}

fn pairs(v: &Value) -> Result<Vec<(i64, i64)>> {
    v.as_array()
        .ok_or_else(|| anyhow!("not a list of pairs"))?
        .iter()
        .map(|p| {
            let n = p.get(0).and_then(Value::as_i64);
            let s = p.get(1).and_then(Value::as_i64);
            n.zip(s)
                .ok_or_else(|| anyhow!("not a [count, sum] pair: {p}"))
        })
        .collect()
}

fn pair(v: &Value) -> Result<(i64, i64)> {
    pairs(&json!([v]))?.pop().ok_or_else(|| anyhow!("no pair"))
}

/// The Python the peers run in: `given` (`--python`) as it is, never installed into; else the
/// virtualenv `$SUGARSHACK_VENV` or `~/.cache/sugarshack/venv`, created and given pinned
/// packages when its Python cannot import them.
fn peer_python(given: Option<&Path>) -> Result<PathBuf> {
    let probe = "import pyiceberg, pyarrow, sqlalchemy, pyiceberg.catalog.sql, duckdb, duckdb_extension_iceberg, duckdb_extension_avro";
    let ok = |p: &Path| {
        Command::new(p)
            .args(["-c", probe])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if let Some(python) = given {
        if ok(python) {
            return Ok(python.to_path_buf());
        }
        bail!(
            "{} cannot import the peers' modules ({probe}): install the README's test set-up \
             into it",
            python.display()
        );
    }
    let venv = match std::env::var_os("SUGARSHACK_VENV") {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?)
            .join(".cache/sugarshack/venv"),
    };
    let python = venv.join("bin/python");
    if ok(&python) {
        return Ok(python);
    }
    eprintln!(
        "installing pyiceberg, DuckDB and its iceberg extension into {}",
        venv.display()
    );
    if !python.exists() {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .context("python3 -m venv")?;
        if !st.success() {
            bail!("python3 -m venv {} failed", venv.display());
        }
    }
    let st = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "pyiceberg[pyarrow,sql-sqlite]==0.12.0",
            "sqlalchemy==2.1.9",
            "duckdb==1.5.5",
            "duckdb-extension-iceberg==1.5.5",
            "duckdb-extension-avro==1.5.5",
        ])
        .status()
        .context("pip install")?;
    if !st.success() || !ok(&python) {
        bail!(
            "could not set up the peers' virtualenv at {} (set SUGARSHACK_VENV to another)",
            venv.display()
        );
    }
    Ok(python)
}

/// Run `peers.py`; with no Python (`--lake-only`), the figures of a peer that did nothing.
fn peers(python: Option<&Path>, args: &[String]) -> Result<Value> {
    let Some(python) = python else {
        let nothing = json!({"time_travel_s": [], "time_travel_column_s": [], "filtered_s": [],
            "checks": []});
        return Ok(json!({"append_s": [], "ff_s": [], "ff_tables_s": [],
            "pyiceberg": nothing, "duckdb": nothing}));
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers.py");
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "peers.py {} failed: {}",
            args.first().map(String::as_str).unwrap_or(""),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("peers.py printed no JSON")
}

struct Workload {
    k: usize,
    n: usize,
}

struct Checks {
    failed: Vec<String>,
    passed: usize,
}

impl Checks {
    fn same(&mut self, what: &str, lake: (i64, i64), peer: (i64, i64)) {
        if lake == peer {
            self.passed += 1;
        } else {
            self.failed
                .push(format!("{what}: lake {lake:?}, peer {peer:?} (count, sum)"));
        }
    }
}

async fn part1(
    args: &Args,
    work: &Path,
    rows_out: &mut Vec<Row>,
    checks: &mut Checks,
) -> Result<()> {
    let python = if args.lake_only {
        None
    } else {
        Some(peer_python(args.python.as_deref())?)
    };
    let python = python.as_deref();
    let (mut workloads, ff, repeats) = if args.quick {
        (
            vec![Workload { k: 20, n: 1_000 }, Workload { k: 5, n: 10_000 }],
            3,
            args.repeats.unwrap_or(2),
        )
    } else {
        (
            vec![
                Workload { k: 200, n: 1_000 },
                Workload { k: 50, n: 100_000 },
            ],
            10,
            args.repeats.unwrap_or(10),
        )
    };
    if let Some(sizes) = &args.sizes {
        workloads = sizes.iter().map(|&(k, n)| Workload { k, n }).collect();
    }
    const TABLES: usize = 15;
    // pyiceberg's single-table fast-forward of the first workload: the 15-table target.
    let mut py_ff_one: Vec<f64> = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        let section = format!("part 1: {} commits x {} rows", w.k, thousands(w.n as u64));
        let tables = if wi == 0 { TABLES } else { 0 };
        eprintln!("{section}: lake writes");
        let root = work.join(format!("p1-{}x{}", w.k, w.n));
        let lake = Catalog::open_local(root.join("catalog"), root.join("warehouse"))?;
        let lw = lake_write(&lake, &root, w.k, w.n, ff, tables).await?;
        eprintln!("{section}: pyiceberg writes");
        let pw = peers(
            python,
            &[
                "write".into(),
                "--dir".into(),
                root.join("pyiceberg").display().to_string(),
                "--k".into(),
                w.k.to_string(),
                "--n".into(),
                w.n.to_string(),
                "--ff".into(),
                ff.to_string(),
                "--tables".into(),
                tables.to_string(),
            ],
        )?;
        // The targets: a small commit at least 10x pyiceberg's, a bulk one 2x.
        rows_out.push(
            Row::new(
                &section,
                "append to audit (one commit)",
                Unit::Ms,
                &ms(&lw.append_s),
            )
            .peer("pyiceberg", &ms(&f64s(&pw, "append_s")?))
            .target_ratio(if w.n <= 10_000 { 10.0 } else { 2.0 }),
        );
        let py_ff = ms(&f64s(&pw, "ff_s")?);
        if wi == 0 {
            py_ff_one = py_ff.clone();
        }
        rows_out.push(
            Row::new(
                &section,
                "fast-forward main to audit",
                Unit::Ms,
                &ms(&lw.ff_s),
            )
            .peer("pyiceberg", &py_ff),
        );
        if tables > 0 {
            rows_out.push(
                Row::new(
                    &section,
                    "fast-forward 15 tables (lake: one commit)",
                    Unit::Ms,
                    &ms(&lw.ff_tables_s),
                )
                .peer("pyiceberg, 15 one by one", &ms(&f64s(&pw, "ff_tables_s")?)),
            );
            rows_out.push(
                Row::new(
                    &section,
                    "  the same, against pyiceberg moving ONE table",
                    Unit::Ms,
                    &ms(&lw.ff_tables_s),
                )
                .peer("pyiceberg, 1 table", &py_ff_one)
                .target_ratio(1.0),
            );
        }
        let md_per = |bytes: u64| bytes as f64 / (w.k as f64 + 3.0);
        rows_out.push(
            Row::new(
                &section,
                "metadata bytes per commit",
                Unit::Bytes,
                &[md_per(lw.metadata_bytes)],
            )
            .peer(
                "pyiceberg",
                &[md_per(pw["metadata_bytes"].as_u64().unwrap_or(0))],
            )
            .note(format!(
                "every metadata file after {} commits (+3 set-up commits) / commits: table metadata/ folder + catalog versions (lake) or the SQLite catalog (pyiceberg)",
                w.k
            )),
        );
        rows_out.push(
            Row::new(
                &section,
                "metadata JSON after K commits",
                Unit::Bytes,
                &[lw.metadata_json_bytes as f64],
            )
            .peer(
                "pyiceberg",
                &[pw["metadata_json_bytes"].as_u64().unwrap_or(0) as f64],
            ),
        );
        if python.is_some() {
            checks.same(
                &format!("{section}: main after the writes, lake's table vs pyiceberg's"),
                (lw.main_count, lw.main_sum),
                (
                    pw["main_count"].as_i64().unwrap_or(-1),
                    pw["main_sum"].as_i64().unwrap_or(-1),
                ),
            );
        }

        // Reads of lake's table at 20 earlier snapshots of `audit`, and at main.
        eprintln!("{section}: reads");
        let t = lake.table(TABLE).await?;
        let head = t
            .head("audit")
            .ok_or_else(|| anyhow!("{TABLE} has no audit branch"))?;
        let mut chain: Vec<i64> = t.ancestry(head)?.iter().map(|s| s.snapshot_id).collect();
        chain.reverse();
        let picks = 20.min(chain.len());
        let snapshots: Vec<i64> = (0..picks)
            .map(|i| chain[1 + i * (chain.len() - 2) / (picks - 1).max(1)])
            .collect();
        let total_rows = ((w.k + ff) * w.n) as i64;
        let filter_min = total_rows - total_rows / 10;
        let lr = lake_reads(&lake, &snapshots, filter_min, repeats).await?;
        let pr = peers(
            python,
            &[
                "read".into(),
                "--metadata".into(),
                t.metadata_location().to_string(),
                "--snapshots".into(),
                snapshots
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                "--filter-min".into(),
                filter_min.to_string(),
                "--repeats".into(),
                repeats.to_string(),
            ],
        )?;
        let (py, duck) = (&pr["pyiceberg"], &pr["duckdb"]);
        rows_out.push(
            Row::new(
                &section,
                "time-travel read, all columns",
                Unit::Ms,
                &ms(&lr.scan_s),
            )
            .peer("pyiceberg", &ms(&f64s(py, "time_travel_s")?))
            .target_ratio(5.0)
            .note(format!(
                "{picks} snapshots of audit, every row and column read, then count + sum(amount): lake Table::scan, pyiceberg scan().to_arrow()"
            )),
        );
        rows_out.push(
            Row::new(
                &section,
                "time-travel count + sum(amount)",
                Unit::Ms,
                &ms(&lr.sql_s),
            )
            .peer("pyiceberg", &ms(&f64s(py, "time_travel_column_s")?))
            .target_ratio(5.0)
            .note("the amount column alone: lake SQL (register_table at the snapshot + DataFusion), pyiceberg scan(selected_fields=(amount,))"),
        );
        rows_out.push(
            Row::new(
                &section,
                "time-travel count + sum(amount), vs DuckDB",
                Unit::Ms,
                &ms(&lr.sql_s),
            )
            .peer("DuckDB iceberg_scan", &ms(&f64s(duck, "time_travel_s")?))
            .note("DuckDB: SELECT count(*), sum(amount) FROM iceberg_scan(metadata, snapshot_from_id => id)"),
        );
        rows_out.push(
            Row::new(
                &section,
                "filtered aggregate at main (SQL)",
                Unit::Ms,
                &ms(&lr.filtered_s),
            )
            .peer("DuckDB iceberg_scan", &ms(&f64s(duck, "filtered_s")?))
            .note(format!("count, sum(amount) where id >= {filter_min}")),
        );
        rows_out.push(
            Row::new(
                &section,
                "filtered aggregate at main (vs pyiceberg)",
                Unit::Ms,
                &ms(&lr.filtered_s),
            )
            .peer("pyiceberg row_filter", &ms(&f64s(py, "filtered_s")?)),
        );
        let peers_read = if python.is_some() {
            vec![("pyiceberg", py), ("DuckDB", duck)]
        } else {
            Vec::new()
        };
        for (who, v) in peers_read {
            let theirs = pairs(&v["checks"])?;
            // pyiceberg reads every snapshot twice (all columns, then amount alone).
            let ours = if who == "pyiceberg" {
                [lr.checks.clone(), lr.checks.clone()].concat()
            } else {
                lr.checks.clone()
            };
            let listed: Vec<i64> = snapshots.iter().chain(snapshots.iter()).copied().collect();
            if theirs.len() != ours.len() {
                checks.failed.push(format!(
                    "{section}: {who} read {} snapshots, lake {}",
                    theirs.len(),
                    ours.len()
                ));
            }
            for ((s, ours), theirs) in listed.iter().zip(&ours).zip(&theirs) {
                checks.same(
                    &format!("{section}: snapshot {s} read by {who}"),
                    *ours,
                    *theirs,
                );
            }
            checks.same(
                &format!("{section}: filtered aggregate by {who}"),
                lr.filtered,
                pair(&v["filtered"])?,
            );
        }
        // The last snapshot read is audit's head, which main was fast-forwarded to.
        if let Some(last) = lr.checks.last() {
            checks.same(
                &format!("{section}: lake's newest snapshot read vs main"),
                *last,
                (lw.main_count, lw.main_sum),
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Part 2: the season, each piece in a child process

/// VmHWM of this process, in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn noon(i: usize) -> Result<chrono::DateTime<chrono::Utc>> {
    let noons = sugarbush::season_noons_ms();
    let ms = *noons
        .get(i)
        .ok_or_else(|| anyhow!("the season has no morning {i}"))?;
    chrono::DateTime::from_timestamp_millis(ms).ok_or_else(|| anyhow!("{ms} is not an instant"))
}

/// What a child does (the hidden `__child` sub-command takes it as JSON).
async fn child(spec: &Value) -> Result<Value> {
    let path = |k: &str| -> Result<PathBuf> {
        spec[k]
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| anyhow!("child spec lacks {k}"))
    };
    let task = spec["task"].as_str().unwrap_or_default();
    let t0 = Instant::now();
    let mut out = match task {
        "generate" => {
            let scale = spec["scale"].as_u64().unwrap_or(1) as u32;
            let r = sugarbush::generate(
                &path("root")?,
                &sugarbush::SeasonConfig {
                    seed: sugarbush::DEFAULT_SEED,
                    scale,
                },
                &sugarbush::GenerateOptions { force: true },
                &sugarbush::NoProgress,
            )?;
            json!({"lines": r.lines, "bytes": r.bytes, "files": r.files})
        }
        "run" => {
            let lake = Catalog::open_local(path("catalog")?, path("tables")?)?;
            let through = noon(spec["morning"].as_u64().unwrap_or(0) as usize)?;
            let options = shack::RunOptions {
                replay: spec["replay"].as_bool().unwrap_or(false),
                ..shack::RunOptions::new(through)
            };
            let now_ms = chrono::Utc::now().timestamp_millis();
            let r = shack::run(&lake, &path("root")?, &options, now_ms, &shack::NoProgress).await?;
            // As the `sugarshack` program does: the handle is freed by the process's exit.
            std::mem::forget(lake);
            let step = |name: &str| {
                r.timings
                    .iter()
                    .find(|(s, _)| *s == name)
                    .map(|(_, d)| d.as_secs_f64())
                    .unwrap_or(0.0)
            };
            json!({
                "published": r.published(),
                "through": through.format("%Y-%m-%d %H:%M UTC").to_string(),
                "bronze_rows": r.tap.rows(),
                "silver_rows": r.boil.tables.iter().map(|t| t.rows).sum::<u64>(),
                "gold_rows": r.finish.tables.iter().map(|t| t.rows).sum::<u64>(),
                "tap_s": step("tap"),
                "boil_s": step("boil"),
                "finish_s": step("finish"),
                "grade_s": step("grade"),
                "publish_s": step("publish"),
            })
        }
        "season" => {
            let lake = Catalog::open_local(path("catalog")?, path("tables")?)?;
            let through = match spec["through_morning"].as_u64() {
                Some(i) => Some(noon(i as usize)?),
                None => None,
            };
            let options = shack::SeasonOptions {
                through,
                ..Default::default()
            };
            let mut runs = Vec::new();
            let report = shack::play_season(
                &lake,
                &path("root")?,
                &options,
                &shack::NoProgress,
                &mut |r| {
                    let mut run = json!({
                        "through": r.through.format("%Y-%m-%d %H:%M UTC").to_string(),
                        "replay": r.replay,
                        "published": r.published,
                        "seconds": r.seconds,
                        "bronze_rows": r.new_rows,
                    });
                    for (step, s) in &r.steps {
                        run[format!("{step}_s")] = json!(s);
                    }
                    runs.push(run)
                },
            )
            .await?;
            std::mem::forget(lake);
            json!({"runs": runs, "rows": report.rows, "publishes": report.publishes(), "blocks": report.blocks()})
        }
        other => bail!("unknown child task {other:?}"),
    };
    out["seconds"] = json!(secs(t0));
    out["peak_kib"] = json!(peak_kib());
    Ok(out)
}

fn run_child(spec: Value) -> Result<Value> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .arg("__child")
        .arg(spec.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        use std::os::unix::process::ExitStatusExt;
        let why = if out.status.signal() == Some(9) {
            " — killed, most likely by the kernel for want of memory: a full build holds its \
             whole season, about 2 GiB per scale of 10"
        } else {
            ""
        };
        bail!("child {} failed ({}){why}", spec["task"], out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow!("child {} printed no JSON", spec["task"]))?;
    Ok(serde_json::from_str(last)?)
}

/// `dir`, which must not exist yet (a bench run deletes no lake until it is done measuring: see
/// the full build in part 2), so a `--dir` used before must be emptied first.
fn fresh_dir(dir: PathBuf) -> Result<PathBuf> {
    if dir.exists() {
        bail!(
            "{} already exists: give the bench an empty --dir (it deletes no lake while it measures)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The bench as the one test `cargo test` and `cargo nextest` find in this target: in quick
/// mode, with the tests' Python, so that a change that breaks the bench, or makes lake, pyiceberg
/// and DuckDB disagree on a count or a sum, fails the test suite rather than the next benchmark
/// run. It asserts nothing about speed: quick figures mean nothing, and it prints none as a
/// verdict. Speaks enough of libtest's command line for both runners: `--list` (with
/// `--format terse`, `--ignored`), a name filter (`--exact`, `--skip`), and its summary line.
fn as_test(raw: &[String]) -> std::process::ExitCode {
    const NAME: &str = "the_bench_runs_and_its_peers_agree";
    let (mut list, mut exact, mut ignored) = (false, false, false);
    let (mut filters, mut skips): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => list = true,
            "--exact" => exact = true,
            "--ignored" => ignored = true,
            "--skip" => skips.extend(it.next().map(String::as_str)),
            "--format" | "--test-threads" | "--color" | "--logfile" | "-Z" | "--shuffle-seed" => {
                it.next();
            }
            f if f.starts_with('-') => {}
            f => filters.push(f),
        }
    }
    let matches = |f: &str| if exact { f == NAME } else { NAME.contains(f) };
    let selected = !ignored
        && (filters.is_empty() || filters.iter().any(|f| matches(f)))
        && !skips.iter().any(|f| matches(f));
    if list {
        if selected {
            println!("{NAME}: test");
        }
        return std::process::ExitCode::SUCCESS;
    }
    if !selected {
        println!(
            "\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.00s\n"
        );
        return std::process::ExitCode::SUCCESS;
    }
    println!("\nrunning 1 test");
    let started = Instant::now();
    let outcome = match support::checkout_problem() {
        Some(problem) => Err(anyhow!(problem)),
        None => {
            let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lakehouse-quick.json");
            bench(&[
                "--quick".into(),
                "--json".into(),
                json.display().to_string(),
                "--python".into(),
                support::python().display().to_string(),
            ])
        }
    };
    let took = started.elapsed().as_secs_f64();
    match outcome {
        Ok(true) => {
            println!(
                "test {NAME} ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in {took:.2}s\n"
            );
            std::process::ExitCode::SUCCESS
        }
        failed => {
            match failed {
                Err(e) => println!("the bench failed: {}", report(&e)),
                _ => println!("the bench ran, but lake and its peers disagreed (above)"),
            }
            println!(
                "test {NAME} ... FAILED\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in {took:.2}s\n"
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes, each cause said once: this workspace's errors already say their
/// source's message, so a cause whose words the text holds is not said again.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if out.is_empty() {
            out = said;
        } else if !out.contains(&said) {
            out = format!("{out}: {said}");
        }
    }
    out
}

/// `tap 0.31 s, boil 0.42 s, …`: the medians of each step of runs (where the time goes).
fn steps(runs: &[Value]) -> String {
    ["tap", "boil", "finish", "grade", "publish"]
        .iter()
        .map(|step| {
            let key = format!("{step}_s");
            let v: Vec<f64> = runs.iter().map(|r| num(r, &key)).collect();
            let m = Stats::of(&v).map_or(f64::NAN, |s| s.median);
            format!("{step} {m:.2} s")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn mib(v: &Value) -> f64 {
    num(v, "peak_kib") / 1024.0
}

/// The largest scale the season is played day by day at (see `part2`).
const SEASON_SCALE_MAX: u32 = 10;

fn part2(
    args: &Args,
    work: &Path,
    rows_out: &mut Vec<Row>,
    extra: &mut Value,
    notes: &mut Vec<String>,
) -> Result<()> {
    let last_morning = sugarbush::season_noons_ms().len() - 1;
    // --quick: the first ten mornings only (the dev profile is slow).
    let end = if args.quick { 9 } else { last_morning };
    let scales = if args.quick {
        vec![1]
    } else {
        args.scales.clone()
    };
    let repeats = |scale: u32| {
        args.repeats.unwrap_or(match scale {
            1 => 3,
            2..=10 => 2,
            _ => 1,
        })
    };
    // The season day by day (93 runs, then the early and late weeks) is played at the smallest
    // scale asked for, and not above SEASON_SCALE_MAX: at scale 100 it would hold a second
    // lake as large as the full build's for an hour.
    let season_at = scales
        .iter()
        .copied()
        .min()
        .filter(|s| *s <= SEASON_SCALE_MAX);
    if season_at.is_none() {
        notes.push(format!(
            "the season day by day not played: it is played at the smallest scale listed, up to {SEASON_SCALE_MAX} (add 1 to --scales)"
        ));
    }
    // Each scale's full build (scale, median seconds, median peak MiB), for the extrapolation.
    let mut build_points: Vec<(f64, f64, f64)> = Vec::new();
    for &scale in &scales {
        let section = format!("part 2: scale {scale}");
        let base = work.join(format!("scale-{scale}"));
        let root = base.join("w");
        let r = repeats(scale);
        eprintln!("{section}: generate");
        let mut gens = Vec::new();
        for _ in 0..r {
            gens.push(run_child(
                json!({"task": "generate", "root": root, "scale": scale}),
            )?);
        }
        let lines = gens[0]["lines"].as_u64().unwrap_or(0);
        rows_out.push(
            Row::new(
                &section,
                "generate the season",
                Unit::S,
                &gens.iter().map(|g| num(g, "seconds")).collect::<Vec<_>>(),
            )
            .note(format!(
                "{} landing lines, {} MiB",
                thousands(lines),
                gens[0]["bytes"].as_u64().unwrap_or(0) / (1 << 20)
            )),
        );
        rows_out.push(Row::new(
            &section,
            "generate: peak memory",
            Unit::MiB,
            &gens.iter().map(mib).collect::<Vec<_>>(),
        ));

        // The full build: a fresh lake, one run through the morning before the last; then the
        // last morning's incremental run on it (on each built lake in turn).
        // Every lake gets a folder of its own and none is deleted until part 2 is done: on an
        // ext4 without a journal (this machine's), creating files within minutes of deleting
        // many makes the kernel scan past each recently freed inode, which added about 6 s of
        // system time to a season measured right after its previous lake was removed.
        eprintln!("{section}: full build");
        let lake_in = |name: &str| base.join(name);
        let run_spec = |dir: &Path, morning: usize, replay: bool| {
            json!({"task": "run", "root": root, "catalog": dir.join("catalog"),
                   "tables": dir.join("tables"), "morning": morning, "replay": replay})
        };
        let mut builds = Vec::new();
        for i in 0..r {
            let dir = fresh_dir(lake_in(&format!("lake-build-{i}")))?;
            builds.push(run_child(run_spec(&dir, end - 1, false))?);
        }
        // Each repeat, on a lake the builds made (not a copy: a copied lake names the
        // original's folders and is read-only): the last morning's run, then a replay of
        // silver and gold from all of bronze (RunOptions::replay) as of that morning.
        let mut dailies = Vec::new();
        let mut replays = Vec::new();
        for i in 0..r {
            let dir = lake_in(&format!("lake-build-{i}"));
            dailies.push(run_child(run_spec(&dir, end, false))?);
            replays.push(run_child(run_spec(&dir, end, true))?);
        }
        let build_through = builds[0]["through"].as_str().unwrap_or("").to_string();
        let col = |v: &[Value], f: &dyn Fn(&Value) -> f64| v.iter().map(f).collect::<Vec<_>>();
        let mut build = Row::new(
            &section,
            "full build (fresh lake, one run)",
            Unit::S,
            &col(&builds, &|b| num(b, "seconds")),
        )
        .note(format!(
            "through {build_through}, published: {}; {}",
            builds[0]["published"],
            steps(&builds)
        ));
        if scale == 1 {
            build = build.target_below(3.0);
        }
        rows_out.push(build);
        rows_out.push(Row::new(
            &section,
            "full build: peak memory",
            Unit::MiB,
            &col(&builds, &mib),
        ));
        for (layer, rows_key, step) in [
            ("bronze", "bronze_rows", "tap_s"),
            ("silver", "silver_rows", "boil_s"),
            ("gold", "gold_rows", "finish_s"),
        ] {
            rows_out.push(
                Row::new(
                    &section,
                    &format!("full build: {layer} rows per second"),
                    Unit::RowsPerS,
                    &col(&builds, &|b| num(b, rows_key) / num(b, step)),
                )
                .note(format!(
                    "{} rows in the {} step",
                    thousands(builds[0][rows_key].as_u64().unwrap_or(0)),
                    &step[..step.len() - 2]
                )),
            );
        }
        rows_out.push(
            Row::new(
                &section,
                "daily run at the end of the season",
                Unit::S,
                &col(&dailies, &|b| num(b, "seconds")),
            )
            .note(format!(
                "incremental, through {}, {} new bronze rows; {}",
                dailies[0]["through"].as_str().unwrap_or(""),
                thousands(dailies[0]["bronze_rows"].as_u64().unwrap_or(0)),
                steps(&dailies)
            )),
        );
        rows_out.push(Row::new(
            &section,
            "daily run at the end: peak memory",
            Unit::MiB,
            &col(&dailies, &mib),
        ));
        rows_out.push(
            Row::new(
                &section,
                "replay: silver and gold from all of bronze",
                Unit::S,
                &col(&replays, &|b| num(b, "seconds")),
            )
            .note(format!(
                "RunOptions::replay as of the last morning: {} silver rows, {} gold rows rebuilt",
                thousands(replays[0]["silver_rows"].as_u64().unwrap_or(0)),
                thousands(replays[0]["gold_rows"].as_u64().unwrap_or(0))
            )),
        );
        rows_out.push(Row::new(
            &section,
            "replay: peak memory",
            Unit::MiB,
            &col(&replays, &mib),
        ));
        let med = |v: &[Value], f: &dyn Fn(&Value) -> f64| {
            Stats::of(&col(v, f)).map_or(f64::NAN, |s| s.median)
        };
        build_points.push((
            f64::from(scale),
            med(&builds, &|b| num(b, "seconds")),
            med(&builds, &mib),
        ));
        // What scale 100 would take when it was not run: a line through the two largest scales
        // that were (a build has a fixed part, so scaling one point in proportion overstates
        // it: 381 MiB at scale 1 said 37 GiB, 13.0 GiB was measured), or, with one scale, in
        // proportion, which says so.
        if !args.quick && scale == *scales.iter().max().unwrap_or(&scale) && scale < 100 {
            let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|m| {
                    m.lines()
                        .find(|l| l.starts_with("MemTotal:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|v| v.parse().ok())
                })
                .unwrap_or(f64::NAN);
            let mut points = build_points.clone();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points.dedup_by(|a, b| a.0 == b.0);
            let (how, secs, peak) = match points.as_slice() {
                [.., a, b] => {
                    let at_100 = |ya: f64, yb: f64| yb + (yb - ya) / (b.0 - a.0) * (100.0 - b.0);
                    (
                        format!("on a line through scales {} and {}", a.0, b.0),
                        at_100(a.1, b.1),
                        at_100(a.2, b.2),
                    )
                }
                [b] => (
                    format!(
                        "from scale {} in proportion (an overstatement: a build has a fixed part)",
                        b.0
                    ),
                    b.1 * 100.0 / b.0,
                    b.2 * 100.0 / b.0,
                ),
                [] => (String::new(), f64::NAN, f64::NAN),
            };
            let k = 100.0 / f64::from(scale);
            let landing = gens[0]["bytes"].as_f64().unwrap_or(f64::NAN) * k / f64::from(1u32 << 30);
            let note = format!(
                "scale 100 not run: extrapolated {how}, its full build would take ~{secs:.0} s and peak at ~{:.1} GiB (this machine has {:.1} GiB), on a {landing:.1} GiB landing zone",
                peak / 1024.0,
                mem_kib / 1024.0 / 1024.0
            );
            extra["scale_100_extrapolated"] = json!({"from_scale": scale, "how": how, "build_s": secs, "build_peak_mib": peak, "landing_gib": landing});
            notes.push(note);
        }
        extra[format!("scale_{scale}")] =
            json!({"generate": gens, "build": builds, "daily": dailies, "replay": replays});

        if Some(scale) != season_at {
            continue;
        }
        eprintln!("{section}: the season day by day");
        let season_runs = if args.quick { 1 } else { r.min(2) };
        let mut seasons = Vec::new();
        for i in 0..season_runs {
            let dir = fresh_dir(lake_in(&format!("lake-season-{i}")))?;
            seasons.push(run_child(json!({"task": "season", "root": root,
                "catalog": dir.join("catalog"), "tables": dir.join("tables"),
                "through_morning": if args.quick { Some(end) } else { None }}))?);
        }
        rows_out.push(
            Row::new(
                &section,
                "season day by day (play_season)",
                Unit::S,
                &col(&seasons, &|s| num(s, "seconds")),
            )
            .target_below(10.0)
            .note(format!(
                "{} runs, {} published; the story's Python/DuckDB/dbt build: about two minutes",
                seasons[0]["runs"].as_array().map_or(0, Vec::len),
                seasons[0]["publishes"]
            )),
        );
        rows_out.push(Row::new(
            &section,
            "season day by day: peak memory",
            Unit::MiB,
            &col(&seasons, &mib),
        ));
        let all_runs: Vec<&Value> = seasons
            .iter()
            .flat_map(|s| s["runs"].as_array().into_iter().flatten())
            .collect();
        let daily: Vec<f64> = all_runs.iter().map(|r| num(r, "seconds")).collect();
        rows_out.push(Row::new(
            &section,
            "  one daily run in the season",
            Unit::S,
            &daily,
        ));
        // The same runs week by week, next to the day's new data: what a run costs should
        // follow the lines that arrived, not the history the lake has grown. October's days
        // bring few lines (the season's orders end with September), so its runs show what a
        // run pays for three months of history with little to do.
        let mut weeks: BTreeMap<i64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        let first_day = noon(0)?.date_naive();
        for r in &all_runs {
            let day = r["through"]
                .as_str()
                .and_then(|t| t.get(..10))
                .and_then(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
            if let Some(day) = day
                && !r["replay"].as_bool().unwrap_or(false)
            {
                let w = weeks.entry((day - first_day).num_days() / 7).or_default();
                w.0.push(num(r, "seconds"));
                w.1.push(num(r, "bronze_rows"));
            }
        }
        for (week, (secs, rows)) in &weeks {
            let start = first_day + chrono::Duration::days(week * 7);
            let median_rows = Stats::of(rows).map_or(0.0, |s| s.median);
            rows_out.push(
                Row::new(
                    &section,
                    &format!("    week of {}", start.format("%b %-d")),
                    Unit::S,
                    secs,
                )
                .note(format!(
                    "median {} new bronze rows a run",
                    thousands(median_rows.round() as u64)
                )),
            );
        }
        // Early: the first week of August (after the first morning, which starts the lake);
        // late: the last week of September (orders still arrive every day).
        // (first day, day after the last, the days in words)
        let (early_days, late_days) = if args.quick {
            (
                ("2026-08-02", "2026-08-05", "Aug 2-4"),
                ("2026-08-06", "2026-08-09", "Aug 6-8"),
            )
        } else {
            (
                ("2026-08-02", "2026-08-09", "Aug 2-8"),
                ("2026-09-24", "2026-10-01", "Sep 24-30"),
            )
        };
        let in_window = |r: &Value, (from, to, _): (&str, &str, &str)| {
            let t = r["through"].as_str().unwrap_or("");
            !r["replay"].as_bool().unwrap_or(false) && t >= from && t < to
        };
        let window = |days: (&str, &str, &str)| -> Vec<Value> {
            all_runs
                .iter()
                .filter(|r| in_window(r, days))
                .map(|r| (*r).clone())
                .collect()
        };
        let (early_runs, late_runs) = (window(early_days), window(late_days));

        // The same days as a scheduler meets them: each run a fresh process on a lake built
        // (day by day) through the morning before, early and late runs taking turns so both
        // find the machine in the same state. In the season's one process the late runs come
        // after a minute of sustained load on both cores, and this machine is slower then.
        eprintln!("{section}: early and late daily runs, taking turns");
        let mornings: Vec<String> = (0..=end)
            .map(|i| noon(i).map(|t| t.format("%Y-%m-%d").to_string()))
            .collect::<Result<_>>()?;
        let first_morning = |day: &str| -> Result<usize> {
            (1..mornings.len())
                .find(|&i| mornings[i].as_str() >= day)
                .ok_or_else(|| anyhow!("no morning after the first on or after {day}"))
        };
        let (e0, l0) = (first_morning(early_days.0)?, first_morning(late_days.0)?);
        // Each week is run twice, each time on lakes built anew (a run changes its lake, so a
        // day is run again on a new one): one run a day put a spread of about ±0.15 on the
        // ratio of the medians between bench runs on one machine; twice the runs narrow it.
        let (turns, rounds) = if args.quick { (3, 1) } else { (7, 2) };
        let run_on = |name: &str, morning: usize| {
            let dir = lake_in(name);
            json!({"task": "run", "root": root, "catalog": dir.join("catalog"),
                   "tables": dir.join("tables"), "morning": morning, "replay": false})
        };
        let (mut fresh_early, mut fresh_late) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let (early_lake, late_lake) =
                (format!("lake-early-{round}"), format!("lake-late-{round}"));
            for (name, through) in [(&early_lake, e0 - 1), (&late_lake, l0 - 1)] {
                let dir = fresh_dir(lake_in(name))?;
                run_child(json!({"task": "season", "root": root,
                    "catalog": dir.join("catalog"), "tables": dir.join("tables"),
                    "through_morning": through}))?;
            }
            for i in 0..turns {
                fresh_early.push(run_child(run_on(&early_lake, e0 + i))?);
                fresh_late.push(run_child(run_on(&late_lake, l0 + i))?);
            }
        }
        let ratio_row = |label: &str, early_runs: &[Value], late_runs: &[Value]| {
            let early = col(early_runs, &|r| num(r, "seconds"));
            let late = col(late_runs, &|r| num(r, "seconds"));
            let (e, l) = (Stats::of(&early)?, Stats::of(&late)?);
            let ratio = l.median / e.median;
            // Where a late run's time goes, step by step, against an early one's.
            let row = Row::new(&section, label, Unit::Ratio, &[ratio]).note(format!(
                "early: {}; late: {}",
                steps(early_runs),
                steps(late_runs)
            ));
            Some((row, ratio))
        };
        let runs_row = |figure: &str, runs: &[Value], note: String| {
            Row::new(
                &section,
                figure,
                Unit::S,
                &col(runs, &|r| num(r, "seconds")),
            )
            .note(note)
        };
        let fresh = |days: (&str, &str, &str)| {
            let times = match rounds {
                1 => String::new(),
                2 => " twice, each time on a lake built anew".to_string(),
                n => format!(" {n} times, each time on a lake built anew"),
            };
            format!("{}{times}, a fresh process each, taking turns", days.2)
        };
        rows_out.push(runs_row(
            "  early-season daily run",
            &fresh_early,
            fresh(early_days),
        ));
        rows_out.push(runs_row(
            "  late-season daily run",
            &fresh_late,
            fresh(late_days),
        ));
        if let Some((mut row, ratio)) = ratio_row(
            "  late / early daily run (medians)",
            &fresh_early,
            &fresh_late,
        ) {
            row.target = Some(Target {
                text: "<= 1.5x".into(),
                met: ratio <= 1.5,
            });
            rows_out.push(row);
        }
        let (e, l) = (early_days.2.to_string(), late_days.2.to_string());
        rows_out.push(runs_row(
            "  early-season run, in the season",
            &early_runs,
            e,
        ));
        rows_out.push(runs_row("  late-season run, in the season", &late_runs, l));
        if let Some((row, _)) = ratio_row(
            "  late / early in the season's process",
            &early_runs,
            &late_runs,
        ) {
            rows_out.push(row);
        }
        extra["late_early"] = json!({"early": fresh_early, "late": fresh_late});
        let season_s = Stats::of(&col(&seasons, &|s| num(s, "seconds")))
            .map(|s| s.median)
            .unwrap_or(f64::NAN);
        if let Some(rows) = seasons[0]["rows"].as_object() {
            for (layer, n) in rows {
                let n = n.as_f64().unwrap_or(0.0);
                rows_out.push(
                    Row::new(
                        &section,
                        &format!("season: {layer} rows at main per second"),
                        Unit::RowsPerS,
                        &[n / season_s],
                    )
                    .note(format!("{} rows at main at the end", thousands(n as u64))),
                );
            }
        }
        // The story's "well under a minute" covers generating and building.
        if let (Some(g), Some(b)) = (
            Stats::of(&col(&gens, &|g| num(g, "seconds"))),
            Stats::of(&col(&builds, &|b| num(b, "seconds"))),
        ) {
            rows_out.push(
                Row::new(
                    &section,
                    "generate + full build (medians)",
                    Unit::S,
                    &[g.median + b.median],
                )
                .note("the story's Python/DuckDB/dbt build: well under a minute"),
            );
        }
        extra["season"] = json!(seasons);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    // <target>/<profile>/deps/lakehouse-<hash>
    std::env::current_exe()
        .ok()
        .and_then(|e| e.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn main() -> std::process::ExitCode {
    // As the CLI does: iceberg-rust builds errors it then discards while reading every file,
    // each capturing a backtrace when RUST_BACKTRACE is set. The machine line says which.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: first thing in main, before any other thread exists.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some("__child") {
        let result = serde_json::from_str::<Value>(raw.get(1).map(String::as_str).unwrap_or(""))
            .map_err(anyhow::Error::from)
            .and_then(|spec| runtime()?.block_on(child(&spec)));
        return match result {
            Ok(v) => {
                println!("{v}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("child failed: {}", report(&e));
                std::process::ExitCode::FAILURE
            }
        };
    }
    // `cargo bench` passes --bench. `cargo test` and `cargo nextest` run this target too
    // (`test = true`), without it: then it is one test, the bench in quick mode.
    if !raw.iter().any(|a| a == "--bench") {
        return as_test(&raw);
    }
    match bench(&raw) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lakehouse bench: {}", report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn bench(raw: &[String]) -> Result<bool> {
    let args = parse_args(raw)?;
    let (mut machine_text, mut machine_json) = machine();
    let marker = target_dir().join("bench/last-folder-deleted");
    let since_deletion = previous_deletion(&marker);
    if let Some(s) = since_deletion {
        machine_text.push_str(&format!(
            "; a bench run deleted its working folder {s} s before this one started (on ext4, \
             files created within minutes of many deletions cost more: leave six minutes \
             between runs)"
        ));
    }
    machine_json["previous_folder_deleted_s_before"] = json!(since_deletion);
    let mut tmp = None;
    let work = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("lakehouse-bench")
                .tempdir()?;
            let path = t.path().to_path_buf();
            tmp = Some(t);
            path
        }
    };
    eprintln!("machine: {machine_text}");
    eprintln!("working in {}", work.display());
    let mut rows = Vec::new();
    let mut checks = Checks {
        failed: Vec::new(),
        passed: 0,
    };
    let mut extra = json!({});
    let mut notes: Vec<String> = Vec::new();
    let started = Instant::now();
    if matches!(args.part, Part::One | Part::All) {
        runtime()?.block_on(part1(&args, &work, &mut rows, &mut checks))?;
    }
    if matches!(args.part, Part::Two | Part::All) {
        part2(&args, &work, &mut rows, &mut extra, &mut notes)?;
    }
    print_table(&machine_text, &rows);
    for n in &notes {
        println!("note: {n}");
    }
    if checks.failed.is_empty() {
        if checks.passed > 0 {
            println!(
                "checks: {} counts and sums compared, all the same on both sides",
                checks.passed
            );
        }
    } else {
        println!("checks: {} DIFFER:", checks.failed.len());
        for f in &checks.failed {
            println!("  {f}");
        }
    }
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| target_dir().join("bench/lakehouse.json"));
    if let Some(parent) = json_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let doc = json!({
        "machine": machine_json,
        "quick": args.quick,
        "part": format!("{:?}", args.part),
        "scales": args.scales,
        "seconds": secs(started),
        "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
        "checks": {"passed": checks.passed, "failed": checks.failed},
        "notes": notes,
        "raw": extra,
    });
    std::fs::write(&json_path, serde_json::to_vec_pretty(&doc)?)?;
    println!("figures as JSON: {}", json_path.display());
    if let Some(t) = tmp {
        t.close()?;
        // When, so that a run started soon after can say so (see `previous_deletion`).
        if let Some(parent) = marker.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&marker, unix_now().to_string())?;
    }
    Ok(checks.failed.is_empty())
}

/// Seconds since the Unix epoch, by the wall clock (only to compare two runs' times).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How many seconds ago a bench run deleted its working folder, when under six minutes (what
/// `marker` recorded). A run's lakes are thousands of files; on ext4 the kernel avoids reusing
/// a deleted file's inode for a while and each file created meanwhile scans past them, so a
/// run started straight after another pays on every file it writes (the README's "runs back to
/// back"). The machine line says so rather than leave such a run's figures unexplained.
fn previous_deletion(marker: &Path) -> Option<u64> {
    let then: u64 = std::fs::read_to_string(marker).ok()?.trim().parse().ok()?;
    let ago = unix_now().checked_sub(then)?;
    (ago < 360).then_some(ago)
}
