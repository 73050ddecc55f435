//! `sugarshack`: the command line. Thin by design — it parses arguments, calls the library
//! crates (`lake`, `sugarbush`, `shack`, `tide`) and prints what they return: tables that line up
//! for people, JSON on request for machines. Errors are one line that names the problem.
//!
//! It owns no lake logic. The whole program is [`main`], a library function, so that the binary
//! (`src/main.rs`) and the end-to-end tests' copy of it (`tests/bin/`) are one code.

/// `println!` that returns an error instead of panicking when stdout is closed (`| head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        crate::progress::quiet();
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}

/// `print!` that returns an error instead of panicking when stdout is closed.
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        crate::progress::quiet();
        write!(std::io::stdout(), $($arg)*)?
    }};
}

mod output;
mod progress;

/// The program's allocator, in every binary that links this library (the `sugarshack` binary,
/// the end-to-end tests' copy of it, and the benchmark). A run allocates and frees a great many
/// small, short-lived values (Avro and JSON values, Arrow buffers, data-file records): with
/// glibc's allocator, `malloc` and `free` were over a quarter of a season's CPU. mimalloc is
/// built without transparent huge pages (its `no_thp` feature, in the workspace's Cargo.toml):
/// with them, where the system's THP setting is `madvise`, a scale-1 season peaked at 500-637
/// MiB instead of about 300 and a scale-10 build spent more of its time in the kernel.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lake::{At, Catalog};

use crate::output::{Format, Report};

#[derive(Parser, Debug)]
#[command(
    name = "sugarshack",
    bin_name = "sugarshack",
    version,
    about = "A local-first Iceberg lakehouse: tap, boil, grade, publish"
)]
struct Cli {
    /// The catalog root, where the log of catalog versions lands: a folder (relative to the
    /// working directory), or `s3://bucket/prefix` (endpoint and credentials from the AWS
    /// environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ALLOW_HTTP). Any other `scheme://` is refused, never taken as a folder.
    #[arg(
        long,
        global = true,
        env = "SUGARSHACK_CATALOG",
        default_value = "catalog"
    )]
    catalog: PathBuf,
    /// The warehouse root (landing/, truth/ and one folder per table): a folder, or
    /// `s3://bucket/prefix` for the tables (as for --catalog); `sugarbush` and `tap` need the
    /// landing zone in a local folder.
    #[arg(
        long,
        global = true,
        env = "SUGARSHACK_WAREHOUSE",
        default_value = "warehouse"
    )]
    warehouse: PathBuf,
    /// The local folder that holds the season's `landing/` and `truth/` (what `sugarbush` writes
    /// and `tap` reads). Default: the warehouse folder; needed when --warehouse is a URL.
    #[arg(long, global = true, env = "SUGARSHACK_LANDING")]
    landing: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write the Saltbox Market season's sources into warehouse/landing (and its truth into
    /// warehouse/truth): the same bytes on every run.
    ///
    /// Example: `sugarshack sugarbush` (then `ls warehouse/landing`)`.
    Sugarbush {
        /// Another season (the default seed gives the story's season).
        #[arg(long)]
        seed: Option<u64>,
        /// Multiply orders per hour (for benchmarks); fault rates stay the same.
        #[arg(long, default_value_t = 1)]
        scale: u32,
        /// Replace an existing, non-empty landing zone.
        #[arg(long)]
        force: bool,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Tap every landing file that had arrived by --through into bronze, on the audit branch.
    ///
    /// Example: `sugarshack tap --through 2026-08-16`.
    Tap {
        /// An instant (`2026-08-17T12:00`, UTC unless it says otherwise) or a day
        /// (`2026-08-16` = its last second).
        #[arg(long, value_parser = parse_through)]
        through: chrono::DateTime<chrono::Utc>,
        /// Remove unnamed files (a crashed run's debris) only once older than this: `0s`, `90s`,
        /// `15m`, `1h`. The default, zero, clears a crash's debris at the next tap. Runs, taps,
        /// boils and finishes mark their work in the catalog, and a sweep keeps every file
        /// written since one that is still going began (on this machine, while its process
        /// lives; elsewhere, for an hour), so they do not sweep each other's files. Other
        /// writers of a shared lake (programs on the lake library) mark nothing: give a grace
        /// longer than they take (say `1h`): at zero, one of them may find its files gone (the
        /// lake checks that a commit's data files exist just before it commits).
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        orphan_grace: std::time::Duration,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Boil bronze into silver on the audit branch: parse payments by API version, quarantine
    /// what cannot be used (with a reason), deduplicate deliveries, fold order changes by LSN.
    /// Incremental by bronze snapshot id: only what bronze added since the last boil is read.
    /// `SUGAR_PARSERS=2025-11-01` (a comma list) enables only those payment API versions.
    ///
    /// Example: `SUGAR_PARSERS=2025-11-01 sugarshack boil`.
    Boil {
        /// Rebuild every silver table from all of bronze (new snapshots; history stays).
        #[arg(long)]
        replay: bool,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// The main job: play the Saltbox Market season on this lake, one morning at a time —
    /// generate the season if the landing zone is empty, then `run` at noon UTC of every day,
    /// the story's August 17 morning first with only the old payments API parser (blocked) and
    /// then replayed with the new one (published). Resumes after the last publish; on a
    /// finished lake it says so and changes nothing. Exit status as for `run`, of its last run;
    /// 1 when every morning left was skipped (bronze already holds a file that arrived after
    /// them: tapped ahead, or kept across a rollback), so nothing ran.
    ///
    /// Example: `sugarshack season --through 2026-08-20`.
    Season {
        /// Stop after this morning (default: the season's last, 2026-10-31 12:00).
        #[arg(long, value_parser = parse_through)]
        through: Option<chrono::DateTime<chrono::Utc>>,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// The whole pipeline as of --through: tap → boil → finish → grade → publish. Every step
    /// writes to the audit branch; the four audits (quarantine rate, conservation, fx coverage,
    /// reconciliation) grade it; only when none blocks does `main` move, on every table in one
    /// catalog commit. Thresholds and the business time zone come from
    /// `<warehouse>/sugarshack.json` when it exists. `SUGAR_PARSERS` as for `boil`.
    ///
    /// Exit status: 0 published; 3 blocked by an audit (nothing published, the block recorded,
    /// the run kept on audit for the next run); 1 any error (nothing published); 2 bad arguments.
    ///
    /// Example: `SUGAR_PARSERS=2025-11-01 sugarshack run --through 2026-08-17T12:00; echo $?`.
    Run {
        /// An instant (`2026-08-17T12:00`, UTC unless it says otherwise) or a day
        /// (`2026-08-16` = its last second).
        #[arg(long, value_parser = parse_through)]
        through: chrono::DateTime<chrono::Utc>,
        /// Rebuild silver and gold from all of bronze (new snapshots on audit; history stays),
        /// after a parser was added or fixed.
        #[arg(long)]
        replay: bool,
        /// As for `tap`.
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        orphan_grace: std::time::Duration,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// The watermark experiment ("The Mark the Tide Left") on the lake's own snapshots: a
    /// timestamp watermark drops rows of long transactions; a snapshot-id watermark drops none.
    Tide(tide::TideArgs),
    /// Run SQL over every table of the catalog (`bronze.payments`, …), at `main` by default.
    ///
    /// Example: `sugarshack query "select processor_date, currency, net_cad_minor from gold.mart_daily_cash order by 1" --as-of 2026-08-17`.
    Query {
        /// The SQL (DataFusion dialect); `-` reads it from stdin.
        #[arg(required_unless_present = "file")]
        sql: Option<String>,
        /// Read the SQL from this file.
        #[arg(long, conflicts_with = "sql")]
        file: Option<PathBuf>,
        /// At most this many rows (0: all). Default: 200 as a table, all as JSON or CSV.
        #[arg(long)]
        limit: Option<usize>,
        /// Read every table as the last publish at or before this instant left it (all tables
        /// from the same publish): `2026-08-17T12:00`, or a day (its last second).
        #[arg(long, value_parser = parse_through, conflicts_with_all = ["branch", "snapshot", "publish"])]
        as_of: Option<chrono::DateTime<chrono::Utc>>,
        /// Read every table at publish N (its tag `publish-N`).
        #[arg(long, conflicts_with_all = ["branch", "snapshot"])]
        publish: Option<u64>,
        /// Read this branch or tag instead of `main`.
        #[arg(long, conflicts_with = "snapshot")]
        branch: Option<String>,
        /// Read the table holding this snapshot id at that snapshot.
        #[arg(long)]
        snapshot: Option<i64>,
        /// Read as of this catalog version instead of the newest.
        #[arg(long)]
        version: Option<u64>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Roll every table back to an earlier publish, in one commit: `main` of every table and
    /// `audit` of every silver and gold table; abandoned heads are tagged, bronze keeps every
    /// tapped row, the rollback is recorded in the publish log. The next `run` rebuilds from
    /// there. Example: `sugarshack rollback --to 3 --reason "bad FX file"`.
    Rollback {
        /// A publish number (`3`), or an instant: the last publish at or before it.
        #[arg(long)]
        to: String,
        /// Why (recorded in the publish log).
        #[arg(long, value_parser = parse_reason)]
        reason: String,
    },
    /// Serve the lake over the Iceberg REST catalog protocol (v1), so pyiceberg, DuckDB, Spark
    /// or iceberg-rust attach to the same tables: `sugarshack serve`, then point a client at
    /// `http://127.0.0.1:8181`. The same server shows the dashboard at `/` (Revenue, Audits, the
    /// bridge, Time travel): only published numbers, read at `main` and the publish tags, never
    /// `audit`; the bridge reads the landing files (the warehouse folder, or --landing). With a
    /// token, the dashboard asks for it as the password (any user name). Loopback only unless a
    /// token is set; stops on Ctrl-C.
    ///
    /// Example: `sugarshack serve --read-only`, then open http://127.0.0.1:8181/ in a browser.
    Serve {
        /// Where to listen (port 0: any free port; the address is printed).
        #[arg(long, default_value = "127.0.0.1:8181")]
        addr: std::net::SocketAddr,
        /// Require `Authorization: Bearer <token>` on every request (needed for a non-loopback
        /// address); the dashboard's pages also take it as an HTTP Basic password (a browser
        /// asks for it; any user name).
        #[arg(long, env = "SUGARSHACK_REST_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Refuse every request that would change the catalog.
        #[arg(long)]
        read_only: bool,
    },
    /// Weigh the barrels: the old "bucket brigade" dashboard's month, computed the naive way
    /// from the landing files, then one line per error with its amount and running total,
    /// ending at gold.mart_daily_cash of the last publish at or before --through; then the
    /// awaiting-shipment queue both ways. Example: `sugarshack compare --through 2026-09-08T12:00`.
    Compare {
        #[arg(long, value_parser = parse_through)]
        through: chrono::DateTime<chrono::Utc>,
        /// The month (`2026-08`; default: the month before --through).
        #[arg(long, value_parser = parse_month)]
        month: Option<(i32, u32)>,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Two right answers: a month's cash by processor date (what finance reconciles) and its
    /// orders by order date (what product uses), each read by time travel as of several
    /// published dates — cash settles, orders fall as refunds trickle in.
    /// Example: `sugarshack two-answers --month 2026-08`.
    TwoAnswers {
        /// The month (default 2026-08).
        #[arg(long, default_value = "2026-08", value_parser = parse_month)]
        month: (i32, u32),
        /// As-ofs to read (repeatable; default: the 8th, 15th, 22nd and 30th of the next month
        /// and the 15th of the one after, at noon UTC).
        #[arg(long = "as-of", value_parser = parse_through)]
        as_of: Vec<chrono::DateTime<chrono::Utc>>,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// What a publish would change: `main..audit` by default (any two refs: `publish-3..main`).
    /// Per table, snapshots ahead and rows added and removed; for the gold marts, every value
    /// that changed, by key (old -> new).
    ///
    /// Example: `sugarshack diff main..audit --limit 10`.
    Diff {
        /// `FROM..TO`, two branch or tag names.
        #[arg(default_value = "main..audit")]
        range: String,
        /// Changed values printed (all of them with --format json).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Where the lake stands: tapped through when, what is on `audit` and not yet published,
    /// the last publish and the last blocked run.
    ///
    /// Example: `sugarshack status`.
    Status {
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Every table with its rows at `main` and at `audit`, its refs and its metadata location
    /// (what pyiceberg's `StaticTable.from_metadata` or DuckDB's `iceberg_scan` open).
    ///
    /// Example: `sugarshack tables --format json`.
    Tables {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// One table: its schema (with Iceberg field ids), partitioning, refs, snapshots and
    /// metadata location.
    ///
    /// Example: `sugarshack describe gold.mart_order_revenue`.
    Describe {
        /// `namespace.table`.
        table: String,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Publishes and blocked runs, oldest first: as-of, each audit's verdict, the catalog
    /// version, when it was recorded.
    ///
    /// Example: `sugarshack history --format json`.
    History {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// A table's snapshots (ancestry, newest first), like Iceberg's `snapshots` metadata table.
    ///
    /// Example: `sugarshack snapshots gold.mart_daily_cash`.
    Snapshots {
        /// `namespace.table`.
        table: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Tag every bronze, silver and gold table's head of a branch (default `main`) with one name,
    /// in one commit: a named checkpoint that time travel (`query --branch NAME`) and expiry
    /// respect. Example: `sugarshack tag before-the-fix --from audit`.
    Tag {
        /// The tag (not `main`, `audit`, nor a `publish-`/`rollback-` name the lake gives).
        name: String,
        /// The branch whose heads are tagged.
        #[arg(long, default_value = "main")]
        from: String,
    },
    /// Every table's branches and tags, like Iceberg's `refs` metadata table.
    ///
    /// Example: `sugarshack branches`.
    Branches {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Expire snapshots no branch or tag needs, then remove files no catalog version names.
    ///
    /// Example: `sugarshack maintain --keep-versions 50`.
    Maintain {
        /// Also delete catalog versions older than the newest N, so that orphan removal frees
        /// what expired snapshots held; `query --version` to a deleted version then fails.
        /// Default: keep every version.
        #[arg(long, value_name = "N")]
        keep_versions: Option<u64>,
        /// Keep every snapshot younger than this many hours.
        #[arg(long, default_value_t = 168)]
        expire_older_than_hours: u32,
        /// On every branch keep at least this many newest snapshots.
        #[arg(long, default_value_t = 10)]
        retain_last: usize,
        /// Remove an unreachable file only once a sweep has seen it unreachable for this many
        /// minutes (and it was written at least that long ago), so no writer in flight and no
        /// reader of a just-expired version loses a file. The first sweep marks; a later one
        /// deletes. 0 deletes at once (only for a lake with no other writer or reader).
        #[arg(long, default_value_t = 60)]
        orphan_grace_minutes: u32,
    },
    /// Free what nothing needs any more, across the lake: snapshots older than --older-than that
    /// no branch, tag (every publish is tagged) or watermark names; catalog versions older than
    /// it (the newest always stays); then files no kept version reaches. Prints what it freed.
    /// Example: `sugarshack expire --older-than 7d`.
    Expire {
        /// `0s`, `90m`, `12h`, `7d`.
        #[arg(long, value_parser = parse_duration)]
        older_than: std::time::Duration,
        /// As for `maintain`: an unreachable file goes once sweeps have seen it so for this long.
        #[arg(long, default_value_t = 60)]
        orphan_grace_minutes: u32,
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// Check the whole lake, like `git fsck`: every kept catalog version parses and chains to
    /// the one before it; every file they reach exists with its recorded size. Exits non-zero
    /// when anything is wrong, naming each problem.
    ///
    /// Example: `sugarshack verify`.
    Verify {
        #[arg(long, value_enum, default_value_t = Report::Table)]
        format: Report,
    },
    /// The catalog's log of versions, newest last.
    ///
    /// Example: `sugarshack log`.
    Log {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

/// Bytes of every file under a local folder, the season's `landing/` and `truth/` left out.
fn disk_bytes(dir: &std::path::Path) -> u64 {
    fn walk(p: &std::path::Path, top: bool) -> u64 {
        let Ok(entries) = std::fs::read_dir(p) else {
            return 0;
        };
        let mut n = 0;
        for e in entries.flatten() {
            let name = e.file_name();
            if top && (name == "landing" || name == "truth") {
                continue;
            }
            match e.metadata() {
                Ok(m) if m.is_dir() => n += walk(&e.path(), false),
                Ok(m) => n += m.len(),
                Err(_) => {}
            }
        }
        n
    }
    walk(dir, true)
}

/// The error of a time travel to before the first publish.
fn nothing_published_by(t: chrono::DateTime<chrono::Utc>) -> anyhow::Error {
    anyhow::anyhow!(
        "nothing was published at or before {} (`sugarshack history` lists the publishes)",
        t.format("%Y-%m-%d %H:%M UTC")
    )
}

/// `SUGAR_PARSERS`: a comma list of payment API versions to enable (unset or empty: all).
fn parsers_from_env() -> Option<Vec<String>> {
    std::env::var("SUGAR_PARSERS")
        .ok()
        .filter(|list| !list.trim().is_empty())
        .map(|list| shack::silver::parse_version_list(&list))
}

/// The exit status of a run an audit blocked (documented in `sugarshack run --help`).
pub const EXIT_BLOCKED: u8 = 3;

/// A run an audit blocked: not an error (its report said why), but not a success either.
#[derive(Debug)]
struct Blocked;

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("blocked by an audit: nothing published")
    }
}

impl std::error::Error for Blocked {}

/// `SUGARSHACK_FAILPOINT=after-data-files|after-metadata-files` makes the next commit fail there
/// (crash drills: the lake must be left readable and the next run must clean up).
fn failpoint_from_env() -> anyhow::Result<Option<lake::Failpoint>> {
    match std::env::var("SUGARSHACK_FAILPOINT") {
        Ok(v) if !v.is_empty() => lake::Failpoint::parse(&v).map(Some).ok_or_else(|| {
            anyhow::anyhow!(
                "SUGARSHACK_FAILPOINT={v:?}: expected after-data-files or after-metadata-files"
            )
        }),
        _ => Ok(None),
    }
}

fn parse_through(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    shack::publish::parse_as_of(s).ok_or_else(|| {
        format!("{s:?} is not a day (2026-08-16) or an instant (2026-08-17T12:00, RFC 3339)")
    })
}

/// `2026-08`: a year (1 to 9999) and a month.
fn parse_month(s: &str) -> Result<(i32, u32), String> {
    s.split_once('-')
        .and_then(|(y, mo)| Some((y.parse::<i32>().ok()?, mo.parse::<u32>().ok()?)))
        .filter(|(y, mo)| (1..=9999).contains(y) && (1..=12).contains(mo))
        .ok_or_else(|| format!("{s:?} is not a month like 2026-08"))
}

/// A rollback's reason: recorded in the publish log, so it must say something.
fn parse_reason(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("it must say why (it is recorded in the publish log)".to_string());
    }
    Ok(s.to_string())
}

/// `0s`, `90s`, `15m`, `1h`, `7d`: a whole number and its unit. A bare number is refused
/// (`7` could mean seven of anything) except `0`, which is zero in every unit.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 0s, 90s, 15m, 1h, 7d"))?;
    let per = match unit {
        "" if n == 0 => 1,
        "" => return Err(format!("{s:?} needs a unit: {n}s, {n}m, {n}h or {n}d")),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?}: unit must be s, m, h or d")),
    };
    let secs = n
        .checked_mul(per)
        .ok_or_else(|| format!("{s:?} is longer than this program can count"))?;
    Ok(std::time::Duration::from_secs(secs))
}

/// `Some(url)` for an `s3://`/`s3a://`/`file://` root, `None` for a path.
fn url_of(root: &std::path::Path) -> anyhow::Result<Option<String>> {
    let Some((scheme, _)) = root.to_str().and_then(|s| s.split_once("://")) else {
        return Ok(None);
    };
    let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    match scheme {
        "s3" | "s3a" | "file" => Ok(Some(root.display().to_string())),
        _ if is_scheme => anyhow::bail!(
            "{}: this build reaches s3:// URLs (and local folders) only, not {scheme}://",
            root.display()
        ),
        _ => Ok(None),
    }
}

/// Open the lake: local folders as before, or `s3://` URLs (either root, or both). A root that
/// looks like any other `scheme://…` is refused rather than taken as a local folder.
///
/// One handle a process: a second call (the check that an `s3://` catalog holds a lake, then
/// the command) gets the first handle, which already found the head, rather than a new one
/// that looks it up again. The handle lives until the process exits: a handle that read a
/// season holds many thousands of small parsed manifest entries, and freeing them one by one
/// took about 0.17 s at the end of a `season` through September on this machine; the
/// operating system takes the memory back at once.
fn open(cli: &Cli) -> anyhow::Result<Catalog> {
    static OPENED: std::sync::Mutex<Option<Catalog>> = std::sync::Mutex::new(None);
    let mut opened = OPENED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = opened.as_ref() {
        return Ok(c.clone());
    }
    let c = open_handle(cli)?;
    *opened = Some(c.clone());
    Ok(c)
}

fn open_handle(cli: &Cli) -> anyhow::Result<Catalog> {
    let context = || {
        format!(
            "opening the lake at {} and {}",
            cli.catalog.display(),
            cli.warehouse.display()
        )
    };
    let (catalog, warehouse) = (url_of(&cli.catalog)?, url_of(&cli.warehouse)?);
    // Only the commands that build a lake may start one; the others need one to be there, and
    // say so instead of leaving empty folders behind. `tap` and `run` start one from a landing
    // zone, so without one they too stop before making any folder.
    let taps = matches!(cli.command, Command::Tap { .. } | Command::Run { .. });
    let builds = taps || matches!(cli.command, Command::Season { .. } | Command::Serve { .. });
    if catalog.is_none() && !cli.catalog.exists() {
        if !builds {
            anyhow::bail!(
                "no lake here: {} does not exist (`sugarshack season` builds one; --catalog points at another)",
                cli.catalog.display()
            );
        }
        if taps {
            let landing = sugarbush::landing_dir(&landing_root(cli)?);
            if !landing.is_dir() {
                anyhow::bail!(
                    "no landing zone to tap: {} does not exist or is not a folder; nothing was created (`sugarshack sugarbush` writes the season's, `sugarshack season` writes it and plays it)",
                    landing.display()
                );
            }
        }
    }
    if catalog.is_none() && warehouse.is_none() {
        return Catalog::open_local(&cli.catalog, &cli.warehouse).with_context(context);
    }
    let local = |dir: &std::path::Path| -> anyhow::Result<String> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(lake::local_dir_location(dir)?)
    };
    let catalog = match catalog {
        Some(url) => url,
        None => local(&cli.catalog)?,
    };
    let warehouse = match warehouse {
        Some(url) => url,
        None => local(&cli.warehouse)?,
    };
    Catalog::open_url(&catalog, &warehouse).with_context(context)
}

/// The local folder holding `landing/` and `truth/`: --landing, else the warehouse folder.
fn landing_root(cli: &Cli) -> anyhow::Result<PathBuf> {
    match (&cli.landing, url_of(&cli.warehouse)?) {
        (Some(dir), _) => {
            if url_of(dir)?.is_some() {
                anyhow::bail!(
                    "--landing {} must be a local folder (the landing zone is files on this machine)",
                    dir.display()
                );
            }
            Ok(dir.clone())
        }
        (None, None) => Ok(cli.warehouse.clone()),
        (None, Some(url)) => anyhow::bail!(
            "--warehouse is {url}: give --landing DIR, the local folder that holds the season's landing/ (and truth/)"
        ),
    }
}

/// The settings file: `sugarshack.json` in the warehouse folder, or in the --landing folder
/// when the warehouse is a URL (absent: the defaults).
fn settings(cli: &Cli) -> anyhow::Result<shack::Settings> {
    let dir = match (url_of(&cli.warehouse)?, &cli.landing) {
        (None, _) => cli.warehouse.clone(),
        (Some(_), Some(landing)) => landing.clone(),
        (Some(_), None) => return Ok(shack::Settings::default()),
    };
    Ok(shack::Settings::load(&shack::Settings::default_path(&dir))?)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // A catalog URL that holds no version is most likely a mistyped prefix: a command that
    // reads a lake says so, as it does for a local folder that does not exist, instead of
    // reading an empty lake.
    let reads_a_lake = !matches!(
        cli.command,
        Command::Tide(_)
            | Command::Sugarbush { .. }
            | Command::Tap { .. }
            | Command::Run { .. }
            | Command::Season { .. }
            | Command::Serve { .. }
    );
    if reads_a_lake && url_of(&cli.catalog)?.is_some() && open(&cli)?.head().await?.version == 0 {
        anyhow::bail!(
            "no lake here: {} holds no catalog version (is the bucket and prefix right? `sugarshack season` or `run` builds one there)",
            cli.catalog.display()
        );
    }
    // Commands with a bar of their own (or a server's first line) show no spinner.
    if !matches!(
        cli.command,
        Command::Tide(_)
            | Command::Tap { .. }
            | Command::Boil { .. }
            | Command::Run { .. }
            | Command::Season { .. }
            | Command::Sugarbush { .. }
            | Command::Serve { .. }
    ) {
        progress::working();
    }
    match &cli.command {
        Command::Tide(args) => {
            let report = tide::run(args, true).await?;
            say_raw!("{}", tide::render(&report, args.format)?);
            // Wall clock goes to stderr: stdout is the same on every run.
            let t = &report.timings;
            eprintln!(
                "tide: simulated in {:.1} s (loader commits {:.1} s, expiry {:.1} s, model reads {:.1} s, target commits {:.1} s, tidying {:.1} s), reconciled in {:.1} s, the story's SQL and the bets in {:.1} s",
                t.simulate.as_secs_f64(),
                t.loader_commits.as_secs_f64(),
                t.expiry.as_secs_f64(),
                t.model_reads.as_secs_f64(),
                t.target_commits.as_secs_f64(),
                t.tidy.as_secs_f64(),
                t.reconcile.as_secs_f64(),
                t.story.as_secs_f64()
            );
        }
        Command::Tap {
            through,
            orphan_grace,
            format,
        } => {
            let lake = open(&cli)?;
            if let Some(point) = failpoint_from_env()? {
                lake.set_failpoint(Some(point));
            }
            let options = shack::TapOptions {
                orphan_grace: *orphan_grace,
                ..shack::TapOptions::default()
            };
            let bar = progress::Bar::new("tap");
            let landing = landing_root(&cli)?;
            let report = shack::tap_alone(&lake, &landing, *through, &options, &bar).await;
            bar.finish();
            let report = report?;
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                say_raw!("{}", report.render());
            }
        }
        Command::Season { through, format } => {
            let landing = landing_root(&cli)?;
            let options = shack::SeasonOptions {
                through: *through,
                settings: settings(&cli)?,
                orphan_grace: std::time::Duration::ZERO,
            };
            // Before the lake is opened (and so created).
            options.check()?;
            let lake = open(&cli)?;
            let bar = progress::Bar::new("season");
            let table = *format != Report::Json;
            let mut each = |r: &shack::SeasonRun| {
                if table {
                    bar.println(&r.render());
                }
            };
            let report = shack::play_season(&lake, &landing, &options, &bar, &mut each).await;
            bar.finish();
            let report = report?;
            if table {
                say_raw!("{}", report.render_summary());
            } else {
                say!("{}", serde_json::to_string_pretty(&report)?);
            }
            if let Some(arrived) = report.stuck_behind() {
                let main = match report.last_as_of {
                    Some(t) => format!(
                        "`main` stays as published as of {}",
                        t.format("%Y-%m-%d %H:%M UTC")
                    ),
                    None => "nothing is published".to_string(),
                };
                anyhow::bail!(
                    "no morning was run: every one left is before a landing file bronze already holds; {main} (`sugarshack run --through {}` publishes what bronze holds)",
                    arrived.format("%Y-%m-%dT%H:%M:%SZ")
                );
            }
            if !report.ended_published() {
                return Err(Blocked.into());
            }
        }
        Command::Run {
            through,
            replay,
            orphan_grace,
            format,
        } => {
            let landing = landing_root(&cli)?;
            let lake = open(&cli)?;
            let settings = settings(&cli)?;
            let mut options = shack::RunOptions {
                replay: *replay,
                orphan_grace: *orphan_grace,
                settings,
                ..shack::RunOptions::new(*through)
            };
            if let Some(parsers) = parsers_from_env() {
                options.parsers = parsers;
            }
            let bar = progress::Bar::new("run");
            let now_ms = chrono::Utc::now().timestamp_millis();
            let report = shack::run(&lake, &landing, &options, now_ms, &bar).await;
            bar.finish();
            let report = match report {
                Err(e @ shack::ShackError::NothingNew { .. }) => {
                    say!("{e}");
                    return Ok(());
                }
                r => r?,
            };
            // Wall clock goes to stderr: stdout is the same on every run.
            eprintln!("run: {}", report.render_timings());
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&report.to_json())?);
            } else {
                say_raw!("{}", report.render());
            }
            if !report.published() {
                return Err(Blocked.into());
            }
        }
        Command::Boil { replay, format } => {
            let lake = open(&cli)?;
            let mut options = shack::BoilOptions {
                replay: *replay,
                ..shack::BoilOptions::default()
            };
            if let Some(parsers) = parsers_from_env() {
                options.parsers = parsers;
            }
            let bar = progress::Bar::new("boil");
            let report = shack::boil(&lake, &options, &bar).await;
            bar.finish();
            let report = report?;
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                say_raw!("{}", report.render());
            }
        }
        Command::Sugarbush {
            seed,
            scale,
            force,
            format,
        } => {
            let landing = landing_root(&cli)?;
            let cfg = sugarbush::SeasonConfig {
                seed: seed.unwrap_or(sugarbush::DEFAULT_SEED),
                scale: *scale,
            };
            let bar = progress::Bar::new("sugarbush");
            let started = std::time::Instant::now();
            let report = sugarbush::generate(
                &landing,
                &cfg,
                &sugarbush::GenerateOptions { force: *force },
                &bar,
            )?;
            bar.finish();
            let secs = started.elapsed().as_secs_f64();
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&report)?);
                return Ok(());
            }
            say!(
                "season seed {} scale {} -> {}",
                report.seed,
                report.scale,
                sugarbush::landing_dir(&landing).display()
            );
            let mut rows = Vec::new();
            for s in &report.sources {
                rows.push(serde_json::json!({"source": s.source.as_str(), "files": s.files, "lines": s.lines, "bytes": s.bytes}));
            }
            rows.push(serde_json::json!({"source": "all", "files": report.files, "lines": report.lines, "bytes": report.bytes}));
            output::print_json_rows(&rows, Format::Table, &["source", "files", "lines", "bytes"])?;
            let f = &report.faults;
            say!(
                "faults: {} re-sent files, {} duplicate deliveries, {} truncated lines, {} late CDC events, {} v2 events, {} test orders, {} republished rate",
                f.resent_files,
                f.duplicate_deliveries,
                f.truncated_lines,
                f.late_cdc_events,
                f.v2_events,
                f.test_orders_created,
                f.republished_rates
            );
            say!(
                "{:.1} s, {:.0} lines/s; ground truth in {}",
                secs,
                report.lines as f64 / secs.max(1e-9),
                sugarbush::truth_dir(&landing).display()
            );
        }
        Command::Query {
            sql,
            file,
            limit,
            as_of,
            publish,
            branch,
            snapshot,
            version,
            format,
        } => {
            let lake = open(&cli)?;
            let published = match (as_of, publish) {
                (Some(t), _) => Some(
                    shack::publish_at_or_before(&lake, *t)
                        .await?
                        .ok_or_else(|| nothing_published_by(*t))?,
                ),
                (None, Some(n)) => Some(
                    shack::publishes(&lake)
                        .await?
                        .into_iter()
                        .find(|r| r.publish_number == Some(*n))
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "there is no publish {n} (`sugarshack history` lists them)"
                            )
                        })?,
                ),
                (None, None) => None,
            };
            let at = match (&published, branch, snapshot) {
                (Some(p), _, _) => At::reference(&p.tag().unwrap_or_default()),
                (None, Some(b), _) => At::reference(b),
                (None, None, Some(s)) => At::Snapshot(*s),
                (None, None, None) => At::Main,
            };
            if let Some(p) = &published {
                progress::note(&format!(
                    "reading publish {} (as of {})",
                    p.publish_number.unwrap_or_default(),
                    p.as_of.format("%Y-%m-%d %H:%M UTC")
                ));
            }
            let mut ctx = lake.sql(*version, &at).await?;
            if let Some(n) = published.as_ref().and_then(|p| p.publish_number) {
                name_unpublished(&mut ctx.skipped, n);
            }
            for (name, why) in &ctx.unreadable {
                progress::note(&format!("{name} is left out: {why}"));
            }
            if let (At::Snapshot(s), true) = (&at, ctx.registered.is_empty()) {
                anyhow::bail!("no table has snapshot {s}");
            }
            let text = match (sql.as_deref(), file) {
                (_, Some(path)) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading the SQL from {}", path.display()))?,
                (Some("-"), None) => std::io::read_to_string(std::io::stdin())
                    .context("reading the SQL from stdin")?,
                (Some(q), None) => q.to_string(),
                (None, None) => anyhow::bail!("give the SQL, `-` for stdin, or --file"),
            };
            let batches = ctx.query(&text).await?;
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            let limit = match (limit, format) {
                (Some(0), _) => usize::MAX,
                (Some(n), _) => *n,
                (None, Format::Table) => 200,
                (None, _) => usize::MAX,
            };
            let mut shown = Vec::new();
            let mut left = limit;
            for b in &batches {
                if left == 0 {
                    break;
                }
                let take = b.num_rows().min(left);
                shown.push(b.slice(0, take));
                left -= take;
            }
            output::print_batches(&shown, *format)?;
            if *format == Format::Table {
                if rows > limit {
                    say!("({rows} rows, the first {limit} shown: --limit 0 shows all)");
                } else {
                    say!("({rows} row{})", if rows == 1 { "" } else { "s" });
                }
            }
            if matches!(at, At::Main) {
                let empty: Vec<&str> = ctx
                    .registered
                    .iter()
                    .filter(|(name, snapshot)| snapshot.is_none() && text.contains(name.as_str()))
                    .map(|(name, _)| name.as_str())
                    .collect();
                if !empty.is_empty() {
                    eprintln!(
                        "note: {} has nothing at main (nothing of it published yet, or emptied by a rollback to before it was first written): try --branch audit",
                        empty.join(", ")
                    );
                }
            }
        }
        Command::Rollback { to, reason } => {
            let lake = open(&cli)?;
            let number = match to.parse::<u64>() {
                Ok(n) => n,
                Err(_) => {
                    let t = parse_through(to).map_err(|e| {
                        anyhow::anyhow!(
                            "--to {to:?} is neither a publish number nor an instant: {e}"
                        )
                    })?;
                    shack::publish_at_or_before(&lake, t)
                        .await?
                        .and_then(|r| r.publish_number)
                        .ok_or_else(|| nothing_published_by(t))?
                }
            };
            let now_ms = chrono::Utc::now().timestamp_millis();
            let outcome = shack::rollback(&lake, number, reason, now_ms).await?;
            say_raw!("{}", outcome.render());
        }
        Command::Serve {
            addr,
            token,
            read_only,
        } => {
            let lake = open(&cli)?;
            let options = rest::ServeOptions {
                addr: *addr,
                token: token.clone(),
                read_only: *read_only,
                ..rest::ServeOptions::default()
            };
            rest::check_options(*addr, &options)?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let bound = listener.local_addr()?;
            // The first line names the REST address first: clients and tests read it from there.
            // Both lines go out in one write, and a server keeps serving when nobody reads its
            // output any more (`serve | head -1`, or a script that read the address and left).
            {
                use std::io::Write as _;
                let _ = write!(
                    std::io::stdout(),
                    "serving the Iceberg REST catalog on http://{bound} (catalog {}, warehouse {}{}); Ctrl-C stops\n\
                     the dashboard on http://{bound}/ (published numbers only: main and the publish tags)\n",
                    lake.catalog_url(),
                    lake.warehouse_url(),
                    if *read_only { ", read-only" } else { "" }
                );
                let _ = std::io::stdout().flush();
            }
            let pages = dashboard::router(
                lake.clone(),
                dashboard::Options {
                    landing: landing_root(&cli).ok(),
                    token: token.clone(),
                },
            );
            let app = rest::router(lake, options.clone()).merge(pages);
            rest::serve_router_on(listener, app, &options).await?;
        }
        Command::TwoAnswers {
            month,
            as_of,
            format,
        } => {
            let (y, mo) = *month;
            let as_ofs = if as_of.is_empty() {
                shack::compare::default_as_ofs(y, mo)
            } else {
                as_of.clone()
            };
            let lake = open(&cli)?;
            let rows = shack::compare::two_answers(&lake, (y, mo), &as_ofs).await?;
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                say_raw!(
                    "{}",
                    shack::compare::render_answers(&format!("{y}-{mo:02}"), &rows)
                );
            }
        }
        Command::Compare {
            through,
            month,
            format,
        } => {
            let month = *month;
            let lake = open(&cli)?;
            let landing = landing_root(&cli)?;
            let c = shack::compare::compare(&lake, &landing, *through, month).await?;
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                say_raw!("{}", c.render());
            }
        }
        Command::Diff {
            range,
            limit,
            format,
        } => {
            let Some((from, to)) = range
                .split_once("..")
                .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            else {
                anyhow::bail!("{range:?} is not a range: write FROM..TO, for example main..audit");
            };
            let lake = open(&cli)?;
            let d = shack::diff::diff(&lake, from, to).await?;
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                say_raw!("{}", d.render(*limit));
            }
        }
        Command::Status { format } => {
            let lake = open(&cli)?;
            let head = lake.head().await?;
            let log = shack::publishes(&lake).await?;
            let mut tapped_through = None;
            if head.tables.contains_key(shack::bronze::LANDING_FILES) {
                let t = lake.table_in(&head, shack::bronze::LANDING_FILES).await?;
                if let Some(id) = t.head(shack::bronze::AUDIT_BRANCH) {
                    tapped_through = t
                        .snapshot(id)?
                        .summary
                        .get(shack::bronze::props::THROUGH)
                        .cloned();
                }
            }
            let waiting: Vec<String> =
                shack::diff::diff(&lake, "main", shack::bronze::AUDIT_BRANCH)
                    .await?
                    .tables
                    .into_iter()
                    .filter(|t| t.from != t.to && t.to.is_some())
                    .map(|t| t.table)
                    .collect();
            let last_publish = log.iter().rev().find(|r| r.is_published());
            let last_block = log.iter().rev().find(|r| !r.is_published());
            let describe = |r: &shack::PublishRecord| {
                let blocks: Vec<&str> = r
                    .audits
                    .iter()
                    .filter(|a| a.verdict == shack::Verdict::Block)
                    .map(|a| a.name.as_str())
                    .collect();
                serde_json::json!({
                    "seq": r.seq,
                    "publish": r.publish_number,
                    "status": r.status(),
                    "as_of": r.as_of.format("%Y-%m-%d %H:%M UTC").to_string(),
                    "blocked_by": blocks,
                    "recorded_at": output::ms_to_utc(r.recorded_at_ms),
                })
            };
            let status = serde_json::json!({
                "catalog_version": head.version,
                "tapped_through": tapped_through,
                "waiting_on_audit": waiting,
                "last_publish": last_publish.map(describe),
                "last_blocked": last_block.map(describe),
            });
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&status)?);
                return Ok(());
            }
            if tapped_through.is_none() && log.is_empty() {
                say!(
                    "nothing tapped or published yet: `sugarshack season`, or `sugarshack run --through T`"
                );
                return Ok(());
            }
            say!(
                "tapped     through {}",
                tapped_through.as_deref().unwrap_or("(nothing tapped)")
            );
            if waiting.is_empty() {
                say!("audit      nothing waiting: every table's audit is published");
            } else {
                say!(
                    "audit      {} table(s) ahead of main, not published: {} (`sugarshack diff` shows what would change)",
                    waiting.len(),
                    waiting.join(", ")
                );
            }
            match last_publish {
                Some(r) => say!(
                    "published  publish {} as of {} ({})",
                    r.publish_number.unwrap_or_default(),
                    r.as_of.format("%Y-%m-%d %H:%M UTC"),
                    r.status()
                ),
                None => say!("published  nothing yet"),
            }
            if let Some(r) = last_block {
                let blocks: Vec<String> = r
                    .audits
                    .iter()
                    .filter(|a| a.verdict == shack::Verdict::Block)
                    .map(|a| format!("{}: {}", a.name, a.reason))
                    .collect();
                say!(
                    "blocked    last as of {}: {}",
                    r.as_of.format("%Y-%m-%d %H:%M UTC"),
                    blocks.join("; ")
                );
            }
        }
        Command::Tables { format } => {
            let lake = open(&cli)?;
            let head = lake.head().await?;
            let mut rows = Vec::new();
            for name in head.tables.keys() {
                let t = lake.table_in(&head, name).await?;
                let records = |r: &str| -> anyhow::Result<serde_json::Value> {
                    Ok(match t.head(r) {
                        Some(id) => t
                            .snapshot(id)?
                            .summary
                            .get("total-records")
                            .and_then(|v| v.parse::<u64>().ok())
                            .map(serde_json::Value::from)
                            .unwrap_or(serde_json::Value::Null),
                        None => serde_json::Value::Null,
                    })
                };
                rows.push(serde_json::json!({
                    "table": name,
                    "rows_main": records("main")?,
                    "rows_audit": records(shack::bronze::AUDIT_BRANCH)?,
                    "refs": t.refs().len(),
                    "metadata_location": t.metadata_location(),
                }));
            }
            output::print_json_rows(
                &rows,
                *format,
                &[
                    "table",
                    "rows_main",
                    "rows_audit",
                    "refs",
                    "metadata_location",
                ],
            )?;
        }
        Command::Describe { table, format } => {
            let lake = open(&cli)?;
            let t = lake.table(table).await?;
            let md = t.metadata();
            let schema = md.current_schema();
            let fields: Vec<serde_json::Value> = schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "id": f.id,
                        "name": f.name,
                        "type": f.field_type.to_string(),
                        "required": f.required,
                    })
                })
                .collect();
            let partitioning: Vec<serde_json::Value> = md
                .default_partition_spec()
                .fields()
                .iter()
                .map(|p| {
                    let source = schema
                        .field_by_id(p.source_id)
                        .map(|f| f.name.clone())
                        .unwrap_or_default();
                    serde_json::json!({ "name": p.name, "transform": p.transform.to_string(), "source": source })
                })
                .collect();
            let refs: Vec<serde_json::Value> = t
                .refs()
                .iter()
                .map(|r| serde_json::json!({ "name": r.name, "type": r.kind, "snapshot_id": r.snapshot_id }))
                .collect();
            let about = serde_json::json!({
                "table": table,
                "format_version": md.format_version() as u8,
                "location": t.location(),
                "metadata_location": t.metadata_location(),
                "snapshots": t.snapshots().len(),
                "schema": fields,
                "partitioning": partitioning,
                "refs": refs,
            });
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&about)?);
                return Ok(());
            }
            say!(
                "{table}  (Iceberg v{}, {} snapshots)",
                md.format_version() as u8,
                t.snapshots().len()
            );
            say!("location           {}", t.location());
            say!("metadata location  {}", t.metadata_location());
            say!("schema:");
            output::print_json_rows(&fields, Format::Table, &["id", "name", "type", "required"])?;
            if partitioning.is_empty() {
                say!("partitioning: none");
            } else {
                say!("partitioning:");
                output::print_json_rows(
                    &partitioning,
                    Format::Table,
                    &["name", "transform", "source"],
                )?;
            }
            say!("refs:");
            output::print_json_rows(&refs, Format::Table, &["name", "type", "snapshot_id"])?;
        }
        Command::History { format } => {
            let lake = open(&cli)?;
            let log = shack::publishes(&lake).await?;
            if log.is_empty() && *format == Format::Table {
                say!(
                    "nothing published or blocked yet: `sugarshack run --through T` grades and publishes"
                );
                return Ok(());
            }
            // Rows: every graded table's `total-records` at its graded snapshot (`-` once a
            // snapshot has expired). Took: the run's start to its decision, as the run recorded.
            let tables: std::collections::BTreeMap<String, lake::Table> =
                shack::grade::layer_tables(&lake)
                    .await?
                    .into_iter()
                    .map(|(name, _, t)| (name, t))
                    .collect();
            let mut rows = Vec::with_capacity(log.len());
            for r in &log {
                let info = shack::publish::publish_version_info(&lake, r).await?;
                let version = info.as_ref().map(|v| v.version);
                let took_ms: Option<i64> = info
                    .as_ref()
                    .and_then(|v| v.properties.get(shack::publish::PROP_TOOK_MS))
                    .and_then(|ms| ms.parse().ok());
                let total: Option<u64> = r
                    .snapshots
                    .iter()
                    .map(|(name, id)| {
                        let t = tables.get(name)?;
                        t.snapshot(*id)
                            .ok()?
                            .summary
                            .get("total-records")?
                            .parse::<u64>()
                            .ok()
                    })
                    .sum();
                let audits: Vec<String> = if r.is_rollback() {
                    r.audits.iter().map(|a| a.reason.clone()).collect()
                } else {
                    r.audits
                        .iter()
                        .map(|a| format!("{} {}", a.name, a.verdict))
                        .collect()
                };
                rows.push(serde_json::json!({
                    "seq": r.seq,
                    "publish": r.publish_number.map(|n| format!("publish-{n}")).unwrap_or_else(|| "-".into()),
                    "status": r.status(),
                    "as_of": r.as_of.format("%Y-%m-%d %H:%M UTC").to_string(),
                    "audits": if *format == Format::Json { serde_json::to_value(&r.audits)? } else { audits.join(", ").into() },
                    "tables": r.snapshots.len(),
                    "rows": match (total, *format) {
                        (Some(n), Format::Table) => shack::thousands(n).into(),
                        (Some(n), _) => n.into(),
                        (None, Format::Table) => "-".into(),
                        (None, _) => serde_json::Value::Null,
                    },
                    "took": match (took_ms, *format) {
                        (Some(ms), Format::Table) => format!("{:.1} s", ms as f64 / 1000.0).into(),
                        (Some(ms), _) => (ms as f64 / 1000.0).into(),
                        (None, Format::Table) => "-".into(),
                        (None, _) => serde_json::Value::Null,
                    },
                    "catalog_version": version,
                    "recorded_at": output::ms_to_utc(r.recorded_at_ms),
                }));
            }
            output::print_json_rows(
                &rows,
                *format,
                &[
                    "seq",
                    "publish",
                    "status",
                    "as_of",
                    "audits",
                    "tables",
                    "rows",
                    "took",
                    "catalog_version",
                    "recorded_at",
                ],
            )?;
        }
        Command::Snapshots { table, format } => {
            let lake = open(&cli)?;
            let t = lake.table(table).await?;
            let mut rows = Vec::new();
            let mut heads: Vec<i64> = t.refs().iter().map(|r| r.snapshot_id).collect();
            heads.sort_unstable();
            heads.dedup();
            let mut seen = std::collections::HashSet::new();
            let mut all = Vec::new();
            for h in heads {
                for s in t.ancestry(h)? {
                    if seen.insert(s.snapshot_id) {
                        all.push(s);
                    }
                }
            }
            for s in t.snapshots() {
                if seen.insert(s.snapshot_id) {
                    all.push(s);
                }
            }
            all.sort_by_key(|s| std::cmp::Reverse(s.sequence_number));
            for s in all {
                let refs: Vec<String> = t
                    .refs()
                    .into_iter()
                    .filter(|r| r.snapshot_id == s.snapshot_id)
                    .map(|r| r.name)
                    .collect();
                rows.push(serde_json::json!({
                    "sequence": s.sequence_number,
                    "snapshot_id": s.snapshot_id,
                    "parent_id": s.parent_id,
                    "committed_at": output::ms_to_utc(s.timestamp_ms),
                    "operation": s.operation,
                    "added_records": s.summary.get("added-records").cloned().unwrap_or_default(),
                    "total_records": s.summary.get("total-records").cloned().unwrap_or_default(),
                    "refs": refs.join(","),
                    "summary": s.summary,
                }));
            }
            output::print_json_rows(
                &rows,
                *format,
                &[
                    "sequence",
                    "snapshot_id",
                    "parent_id",
                    "committed_at",
                    "operation",
                    "added_records",
                    "total_records",
                    "refs",
                ],
            )?;
        }
        Command::Tag { name, from } => {
            let reserved = name == "main"
                || name == shack::bronze::AUDIT_BRANCH
                || name.starts_with("publish-")
                || name.starts_with("rollback-");
            if name.trim().is_empty() {
                anyhow::bail!("a tag needs a name: {name:?} is empty");
            }
            if name.trim() != name {
                anyhow::bail!("{name:?} starts or ends with white space: a ref name cannot");
            }
            if reserved {
                anyhow::bail!(
                    "{name:?} is reserved: main, audit, publish-<n> and rollback-<n>-… are the lake's own"
                );
            }
            if let Some(problem) = tag_name_problem(name) {
                anyhow::bail!("{name:?} cannot name a tag: {problem}");
            }
            let lake = open(&cli)?;
            let mut changes = Vec::new();
            for (table_name, _, table) in shack::grade::layer_tables(&lake).await? {
                if table.refs().iter().any(|r| &r.name == name) {
                    anyhow::bail!("{table_name} already has a ref named {name:?}");
                }
                if let Some(head) = table.head(from) {
                    changes.push(table.stage_refs(&[lake::RefOp::CreateTag {
                        name: name.clone(),
                        snapshot_id: head,
                    }])?);
                }
            }
            if changes.is_empty() {
                anyhow::bail!("no table has a branch named {from:?}: nothing to tag");
            }
            let n = changes.len();
            let committed = lake
                .commit(
                    changes,
                    "tag",
                    &format!("tag {name} at the {from} head of {n} tables"),
                    std::collections::BTreeMap::new(),
                )
                .await?;
            say!(
                "tagged   {name} at the {from} head of {n} tables (catalog version {})",
                committed.version
            );
        }
        Command::Branches { format } => {
            let lake = open(&cli)?;
            let mut rows = Vec::new();
            for name in lake.list_tables().await? {
                let t = lake.table(&name.to_string()).await?;
                for r in t.refs() {
                    let s = t.snapshot(r.snapshot_id)?;
                    rows.push(serde_json::json!({
                        "table": name.to_string(),
                        "ref": r.name,
                        "type": r.kind,
                        "snapshot_id": r.snapshot_id,
                        "sequence": s.sequence_number,
                        "committed_at": output::ms_to_utc(s.timestamp_ms),
                        "total_records": s.summary.get("total-records").cloned().unwrap_or_default(),
                    }));
                }
            }
            output::print_json_rows(
                &rows,
                *format,
                &[
                    "table",
                    "ref",
                    "type",
                    "snapshot_id",
                    "sequence",
                    "committed_at",
                    "total_records",
                ],
            )?;
        }
        Command::Maintain {
            keep_versions,
            expire_older_than_hours,
            retain_last,
            orphan_grace_minutes,
        } => {
            let lake = open(&cli)?;
            let now = chrono::Utc::now().timestamp_millis();
            let opts = lake::ExpireOptions {
                // u32 hours and minutes: at most about 1.5e16 ms, far inside i64.
                older_than_ms: now - i64::from(*expire_older_than_hours) * 3_600_000,
                retain_last: *retain_last,
                protect: Vec::new(),
            };
            for name in lake.list_tables().await? {
                let expired = lake.expire_snapshots(&name.to_string(), &opts).await?;
                say!(
                    "expired  {:<28} {:>6} snapshots",
                    name.to_string(),
                    expired.len()
                );
            }
            if let Some(keep) = keep_versions {
                let removed = lake.expire_versions(*keep).await?;
                match (removed.first(), removed.last()) {
                    (Some(a), Some(b)) => say!(
                        "expired  catalog versions {a}..={b} ({} versions)",
                        removed.len()
                    ),
                    _ => say!("expired  no catalog version (keeping the newest {keep})"),
                }
            }
            let report = lake
                .remove_orphans(now, i64::from(*orphan_grace_minutes) * 60_000)
                .await?;
            for (table, files) in &report.removed {
                say!("removed  {table:<28} {:>6} orphan files", files.len());
            }
            for location in &report.not_swept {
                say!("kept     {location} (not a table location this warehouse owns: never swept)");
            }
            say!(
                "removed {} orphan files; {} unreachable files wait out the {}-minute grace (counted from when a sweep first saw them unreachable) or a writer still at work ({} of them)",
                report.total(),
                report.waiting,
                orphan_grace_minutes,
                report.at_work
            );
        }
        Command::Expire {
            older_than,
            orphan_grace_minutes,
            format,
        } => {
            let lake = open(&cli)?;
            let local = url_of(&cli.warehouse)?.is_none();
            let before = if local { disk_bytes(&cli.warehouse) } else { 0 };
            let now = chrono::Utc::now().timestamp_millis();
            let cutoff = i64::try_from(older_than.as_millis())
                .ok()
                .and_then(|ms| now.checked_sub(ms))
                .unwrap_or(i64::MIN);
            let opts = lake::ExpireOptions {
                older_than_ms: cutoff,
                retain_last: 1,
                protect: Vec::new(),
            };
            let mut snapshots = 0usize;
            for name in lake.list_tables().await? {
                snapshots += lake.expire_snapshots(&name.to_string(), &opts).await?.len();
            }
            let log = lake.log().await?;
            let keep = log
                .iter()
                .filter(|v| v.committed_at_ms >= cutoff)
                .count()
                .max(1) as u64;
            let versions = lake.expire_versions(keep).await?.len();
            let report = lake
                .remove_orphans(now, i64::from(*orphan_grace_minutes) * 60_000)
                .await?;
            let after = if local { disk_bytes(&cli.warehouse) } else { 0 };
            let freed = serde_json::json!({
                "snapshots_expired": snapshots,
                "catalog_versions_expired": versions,
                "files_removed": report.total(),
                "files_waiting": report.waiting,
                "warehouse_bytes_before": local.then_some(before),
                "warehouse_bytes_after": local.then_some(after),
            });
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&freed)?);
            } else {
                say!(
                    "expired  {snapshots} snapshots, {versions} catalog versions; removed {} files ({} wait out the {orphan_grace_minutes}-minute grace)",
                    report.total(),
                    report.waiting
                );
                if local {
                    say!(
                        "freed    {} bytes: the warehouse holds {} bytes, from {}",
                        shack::thousands(before.saturating_sub(after)),
                        shack::thousands(after),
                        shack::thousands(before)
                    );
                }
            }
        }
        Command::Verify { format } => {
            let lake = open(&cli)?;
            let report = lake.verify().await?;
            if *format == Report::Json {
                say!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                let versions = match (report.versions.first(), report.versions.last()) {
                    (Some(a), Some(b)) => {
                        format!("{} catalog versions ({a}..={b})", report.versions.len())
                    }
                    _ => "no catalog versions".to_string(),
                };
                say!(
                    "checked  {versions}: {} chained to the one before, {} without a recorded hash",
                    report.versions_chained,
                    report.versions_unchained.len()
                );
                for (kind, n) in &report.checked {
                    say!("checked  {n:>8}  {kind}");
                }
                for p in &report.problems {
                    let whose = match (&p.table, p.version) {
                        (Some(t), Some(v)) => format!(" ({t}, catalog version {v})"),
                        (Some(t), None) => format!(" ({t})"),
                        (None, Some(v)) => format!(" (catalog version {v})"),
                        (None, None) => String::new(),
                    };
                    say!(
                        "PROBLEM  {:<14} {}{whose}: {}",
                        p.kind,
                        p.location,
                        p.detail
                    );
                }
                for (table, metadata) in &report.read_only {
                    say!(
                        "note     {table} is read-only here: its metadata {metadata} lies outside this warehouse (a copied lake, or a table registered from another); reads depend on that folder"
                    );
                }
                if report.is_clean() {
                    say!("no problems");
                } else {
                    say!("{} problems", report.problems.len());
                }
            }
            if !report.is_clean() {
                anyhow::bail!(
                    "verify found {} problems in the lake at {}",
                    report.problems.len(),
                    report.catalog
                );
            }
        }
        Command::Log { format } => {
            let lake = open(&cli)?;
            let mut rows = Vec::new();
            for v in lake.log().await? {
                rows.push(serde_json::json!({
                    "version": v.version,
                    "committed_at": output::ms_to_utc(v.committed_at_ms),
                    "operation": v.operation,
                    "tables": v.changed.join(","),
                    "message": v.message,
                    "properties": v.properties,
                }));
            }
            output::print_json_rows(
                &rows,
                *format,
                &["version", "committed_at", "operation", "tables", "message"],
            )?;
        }
    }
    Ok(())
}

/// True when an error is stdout closing under us (`| head`): an io error, or one a JSON or CSV
/// writer wrapped (they keep only the message).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
            || c.to_string().contains("Broken pipe (os error 32)")
    })
}

/// iceberg-rust builds errors it then discards (`ok_or(Error::new(..))` for every column of
/// every Parquet file it reads), and each captures a backtrace when `RUST_BACKTRACE` is set: with
/// `RUST_BACKTRACE=1`, a late-season daily run spent a seventh of its time capturing them. The
/// CLI never prints a library's backtrace, so they are off unless `RUST_LIB_BACKTRACE` asks for
/// them; a panic still prints its own under `RUST_BACKTRACE`.
fn library_backtraces_off_unless_asked() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: the first thing `main` does, before the runtime or any other thread starts,
        // so nothing reads the environment meanwhile.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
}

/// The `sugarshack` program: parse the process's arguments, run the command, report errors on
/// stderr as one line. The exit code is what a scheduler acts on.
pub fn main() -> ExitCode {
    library_backtraces_off_unless_asked();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = rt.block_on(run(cli));
    progress::quiet();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<Blocked>().is_some() => ExitCode::from(EXIT_BLOCKED),
        Err(e) if is_broken_pipe(&e) => {
            // The reader went away (`| head`): nothing more to say.
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut msg = e.to_string().replace("'datafusion.", "'");
            // Lake errors already say what they wrap; others get their causes appended.
            let own = e.downcast_ref::<lake::LakeError>().is_some();
            for cause in e.chain().skip(1).filter(|_| !own) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            eprintln!("error: {}", msg.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// Tables a publish's tag is missing from were not part of it: every table a publish moved
/// carries its tag, so a table without one was first written after that publish (or emptied by
/// a rollback to before it). Said so, rather than "no branch or tag named publish-N".
fn name_unpublished(skipped: &mut [(String, String)], publish: u64) {
    for (_, why) in skipped.iter_mut() {
        *why = format!("it was first written after publish {publish}");
    }
}

/// The longest tag name `tag` accepts.
const MAX_TAG_NAME: usize = 128;

/// What keeps `name` from naming a tag every command can address, if anything (in the spirit
/// of git's `check-ref-format`): letters, digits, `-`, `_`, `.` and `/` only (no white space or
/// control characters, which would break the listings); not `..` (`diff FROM..TO` would read it
/// as a range) nor `//`; not starting with `-` (it would read as an option), `.` or `/`, nor
/// ending with `.` or `/`.
fn tag_name_problem(name: &str) -> Option<String> {
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
    {
        return Some(format!(
            "it holds {c:?}; a tag name is letters, digits, '-', '_', '.' and '/'"
        ));
    }
    if name.chars().count() > MAX_TAG_NAME {
        return Some(format!("it is longer than {MAX_TAG_NAME} characters"));
    }
    if name.contains("..") {
        return Some("it holds \"..\", which `diff FROM..TO` reads as a range".into());
    }
    if name.contains("//") {
        return Some("it holds \"//\"".into());
    }
    if let Some(c) = name.chars().next().filter(|c| matches!(c, '-' | '.' | '/')) {
        return Some(format!("it starts with {c:?}"));
    }
    if let Some(c) = name.chars().last().filter(|c| matches!(c, '.' | '/')) {
        return Some(format!("it ends with {c:?}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_name_is_one_every_command_can_address() {
        for ok in [
            "before-the-fix",
            "q3_close",
            "v1.2",
            "team/finance",
            "ünï",
            "2026-08-17",
        ] {
            assert_eq!(tag_name_problem(ok), None, "{ok}");
        }
        for (bad, says) in [
            ("x..y", "range"),
            ("../../etc", "range"),
            ("a b", "' '"),
            ("line\nbreak", "'\\n'"),
            ("tab\t", "'\\t'"),
            ("a:b", "':'"),
            ("a~1", "'~'"),
            ("-rf", "starts with '-'"),
            (".hidden", "starts with '.'"),
            ("/abs", "starts with '/'"),
            ("dir/", "ends with '/'"),
            ("end.", "ends with '.'"),
            ("a//b", "\"//\""),
        ] {
            let problem = tag_name_problem(bad).unwrap_or_default();
            assert!(problem.contains(says), "{bad}: {problem}");
        }
        assert!(tag_name_problem(&"t".repeat(MAX_TAG_NAME)).is_none());
        assert!(tag_name_problem(&"t".repeat(MAX_TAG_NAME + 1)).is_some());
    }

    #[test]
    fn a_table_missing_from_a_publish_was_first_written_after_it() {
        let mut skipped = vec![(
            "silver.settlements".to_string(),
            "table silver.settlements has no branch or tag named \"publish-1\"".to_string(),
        )];
        name_unpublished(&mut skipped, 1);
        assert_eq!(skipped[0].1, "it was first written after publish 1");
    }

    #[test]
    fn a_duration_needs_its_unit_and_fits() {
        assert_eq!(parse_duration("0"), Ok(std::time::Duration::ZERO));
        assert_eq!(
            parse_duration("7d"),
            Ok(std::time::Duration::from_secs(7 * 86_400))
        );
        assert_eq!(
            parse_duration("7"),
            Err("\"7\" needs a unit: 7s, 7m, 7h or 7d".to_string())
        );
        assert!(parse_duration("7w").is_err());
        assert!(parse_duration("").is_err());
        // Past u64 seconds: refused, not an overflow.
        assert_eq!(
            parse_duration("18446744073709551615d"),
            Err("\"18446744073709551615d\" is longer than this program can count".to_string())
        );
    }

    /// Hours and minutes past any sensible figure, or below zero, are refused by the parser
    /// (exit 2), never multiplied into an overflow.
    #[test]
    fn maintenance_figures_are_bounded_before_any_arithmetic() {
        for args in [
            &["sugarshack", "maintain", "--expire-older-than-hours", "-1"][..],
            &[
                "sugarshack",
                "maintain",
                "--expire-older-than-hours",
                "9223372036854775807",
            ],
            &[
                "sugarshack",
                "expire",
                "--older-than",
                "1d",
                "--orphan-grace-minutes",
                "9223372036854775807",
            ],
            &["sugarshack", "expire", "--older-than", "7"],
            &[
                "sugarshack",
                "compare",
                "--through",
                "2026-09-01",
                "--month",
                "2026-13",
            ],
            &["sugarshack", "two-answers", "--month", "Aug"],
            &["sugarshack", "rollback", "--to", "1", "--reason", "  "],
        ] {
            let e = Cli::try_parse_from(args).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
        let far = Cli::try_parse_from([
            "sugarshack",
            "maintain",
            "--expire-older-than-hours",
            "4294967295",
            "--orphan-grace-minutes",
            "4294967295",
        ]);
        assert!(far.is_ok(), "the largest figures parse, and fit in i64 ms");
    }
}
