//! # tide — the watermark experiment of "The Mark the Tide Left"
//!
//! `tide` owns the second story's experiment, reproduced on the lake's own Iceberg tables: a
//! deterministic generator of a shop's listing events written in transactions of realistic
//! length ([`generator`]); the source's visibility (commit plus a constant replication lag) and
//! a loader that commits what became visible into a bronze table on a short regular cadence,
//! one snapshot per commit ([`source`], [`experiment`]); an incremental model run at several
//! cadences in three variants side by side over the same snapshots — (a) watermark
//! `max(event_ts)` of the target, (a + look-back), and (b) watermark = the last bronze snapshot
//! id consumed ([`model`]) — at five cadences, and on the schedule the story ran (hourly, then
//! every fifteen minutes from 1 August); the story told whole ([`story`]): the 27 August pallet
//! of its Figure 1, the schedule change before and after, what the loss does to the business
//! (sales, listings never recorded, the catalogue and its value, counted by SQL over the lake),
//! and the costs of the bets — look-backs, append vs merge, dbt-style microbatch — replayed over
//! the same rows at the same runs (`replay`); and the report: rows lost by writer and by sales
//! vs listings, survival against the closed form `interval ÷ (2 × duration)`, the daily
//! reconciliation run as SQL over the lake, and every figure next to the story's ([`report`]).
//!
//! It does not own the table format (that is `lake`: snapshots, incremental reads, expiry, SQL)
//! nor the command line (`sugarshack tide` in the `cli` crate parses [`TideArgs`], calls
//! [`run`] and prints [`render`]'s output).
//!
//! Same arguments, same numbers, to the digit: the generator is integer arithmetic over its own
//! SplitMix64 streams, nothing reads the wall clock, and every output is ordered.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tide::TideError> {
//! let args = tide::TideArgs { days: 3, ..Default::default() };
//! let report = tide::run(&args, false).await?;
//! assert!(report.checks.snapshot_watermark_loses_nothing);
//! print!("{}", tide::render(&report, args.format)?);
//! # Ok(()) }
//! ```

pub mod args;
pub mod experiment;
pub mod generator;
mod lakeio;
pub mod model;
mod replay;
pub mod report;
pub mod rng;
pub mod source;
pub mod story;

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lake::Catalog;

pub use args::{DEFAULT_SEED, Instant, Span, TideArgs, TideFormat, parse_duration};
use experiment::{MemoryBronze, Plan};
use generator::GeneratorConfig;
pub use lakeio::{BRONZE, SUMMARY_LOADED_AT_MS, SUMMARY_SOURCE_SNAPSHOT};
pub use report::{TideReport, Timings, closed_form, render_table};

/// What went wrong, in terms a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum TideError {
    /// Options that do not make a run.
    #[error("{0}")]
    Args(String),
    /// The lake refused or failed.
    #[error(transparent)]
    Lake(#[from] lake::LakeError),
    /// The lake folder already holds this experiment's tables.
    #[error("the lake already has table {0}; give --lake-dir an empty folder")]
    LakeNotEmpty(String),
    /// The lake folder holds tables that are not this experiment's: the tide's tidy (one
    /// catalog version kept, unreachable files removed at once) would erase their history.
    #[error(
        "the lake at {lake} holds tables that are not the tide's ({}): the tide keeps only its newest catalog version and removes unreachable files at once, which would erase their history; give --lake-dir a folder of its own",
        tables.join(", ")
    )]
    ForeignTables { lake: String, tables: Vec<String> },
    /// Bronze returned something the loader never wrote, or out of order.
    #[error("bronze: {0}")]
    Bronze(String),
    /// A model target or the reconciliation disagrees with what the model did.
    #[error("model target: {0}")]
    Target(String),
    /// An Arrow conversion failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The SQL reconciliation and the simulation's own counts disagree.
    #[error(
        "reconciliation of {target} on {day}: SQL says {sql:?} (source, model), the simulation counted {counted:?}"
    )]
    Mismatch {
        target: String,
        day: String,
        sql: Option<(u64, u64)>,
        counted: Option<(u64, u64)>,
    },
    /// The temporary lake folder could not be made.
    #[error("lake folder {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The report could not be serialised.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Where the experiment's lake lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LakeAt {
    /// A temporary folder, removed when the run ends (the default).
    Temporary,
    /// This folder (catalog/ and warehouse/ inside), kept for `sugarshack query` afterwards.
    Dir(PathBuf),
    /// In memory: for tests and short windows (the whole history stays in RAM).
    Memory,
}

/// Expire bronze snapshots every this many loader commits.
const EXPIRE_EVERY: u64 = 32;
/// Commit the model targets once a simulated day (see [`experiment::Sink`]).
const FLUSH_EVERY_MS: i64 = generator::DAY_MS;

fn plan(args: &TideArgs) -> Result<(Plan, Vec<String>), TideError> {
    let s = args.settle()?;
    Ok((
        Plan {
            generator: GeneratorConfig {
                start_ms: s.start_ms,
                first_weekday: s.first_weekday,
                days: args.days,
                seed: args.seed,
                big_pallet: s.big_pallet,
            },
            lag_ms: s.lag_ms,
            loader_every_ms: s.loader_every_ms,
            cadences_ms: s.cadences_ms,
            lookbacks_ms: s.lookbacks_ms,
            offset_ms: s.offset_ms,
            switch_ms: s.switch_ms,
            before_ms: s.before_ms,
            after_ms: s.after_ms,
            expire_every: EXPIRE_EVERY,
            flush_every_ms: FLUSH_EVERY_MS,
        },
        s.notes,
    ))
}

fn bar(show: bool, len: u64, template: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

/// Run the experiment on the lake named by `args.lake_dir` (default: a temporary folder).
/// `progress` shows bars on stderr (drawn only when stderr is a terminal).
pub async fn run(args: &TideArgs, progress: bool) -> Result<TideReport, TideError> {
    let at = match &args.lake_dir {
        Some(d) => LakeAt::Dir(d.clone()),
        None => LakeAt::Temporary,
    };
    run_on(args, at, progress).await
}

/// Run the experiment on a lake at `at`.
pub async fn run_on(args: &TideArgs, at: LakeAt, progress: bool) -> Result<TideReport, TideError> {
    let (plan, notes) = plan(args)?;
    // The temporary folder lives as long as `_guard`: to the end of the run.
    let (catalog, _guard) = match &at {
        LakeAt::Memory => (Catalog::in_memory(), None),
        LakeAt::Dir(d) => {
            let c = Catalog::open_local(d.join("catalog"), d.join("warehouse"))?;
            lakeio::refuse_foreign_tables(&c, &d.display().to_string()).await?;
            (c, None)
        }
        LakeAt::Temporary => {
            let dir = tempfile::Builder::new()
                .prefix("sugarshack-tide-")
                .tempdir()
                .map_err(|source| TideError::Io {
                    path: std::env::temp_dir().display().to_string(),
                    source,
                })?;
            let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))?;
            (c, Some(dir))
        }
    };
    let mut bronze = lakeio::LakeBronze::create(catalog.clone()).await?;
    let mut sink = lakeio::LakeSink::create(catalog.clone(), &plan).await?;
    sink.tidy = !args.keep_history;

    let sim_bar = bar(
        progress,
        0,
        "tide {bar:30} {percent:>3}% simulated, {msg} [{elapsed_precise}, eta {eta}]",
    );
    let t0 = std::time::Instant::now();
    let outcome = experiment::simulate(&plan, &mut bronze, &mut sink, &sim_bar).await?;
    // Leave the lake as tidy as a lake between runs (the tidy also ran once a simulated week).
    sink.tidy().await?;
    sim_bar.finish_and_clear();
    let simulate = t0.elapsed();
    let tables = sink.tables();
    let t0 = std::time::Instant::now();

    let sql_bar = bar(
        progress,
        1,
        "tide {spinner} reconciling every target with bronze in SQL [{elapsed_precise}]",
    );
    sql_bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let (sql, by_target) = lakeio::reconcile(&catalog, &tables, plan.generator.start_ms).await?;
    sql_bar.finish_and_clear();
    let reconcile = t0.elapsed();

    // The SQL over the lake must agree with the simulation's own counts, day by day.
    let mut sql_days = Vec::new();
    for t in &tables {
        let model = &outcome.models[t.model];
        let target = &model.targets[t.target];
        let counted = report::rust_days(&outcome.truth, target);
        let got = by_target.get(&t.name).cloned().unwrap_or_default();
        if got != counted {
            let day = counted
                .keys()
                .chain(got.keys())
                .find(|d| got.get(d) != counted.get(d))
                .copied()
                .unwrap_or(0);
            return Err(TideError::Mismatch {
                target: t.name.clone(),
                day: report::day_label(plan.generator.start_ms, day),
                sql: got.get(&day).copied(),
                counted: counted.get(&day).copied(),
            });
        }
        sql_days.push(((t.model, t.target), got));
    }
    let days_of = |m: usize, t: usize| {
        sql_days
            .iter()
            .find(|(k, _)| *k == (m, t))
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    };
    let example = tables
        .iter()
        .find(|t| t.name.ends_with("_15m_a"))
        .or(tables.first())
        .map(|t| t.name.clone())
        .unwrap_or_default();
    let lake = report::LakeReport {
        bronze_table: BRONZE.to_string(),
        loader_commits: bronze.stats.commits,
        snapshots_expired: bronze.stats.expired,
        max_snapshots_retained: bronze.stats.max_retained,
        incremental_reads: bronze.stats.reads,
        snapshots_read: bronze.stats.snapshots_read,
        target_tables: tables.iter().map(|t| t.name.clone()).collect(),
        target_commits: sink.commits,
        tidied: sink.tidy,
        catalog_versions_expired: sink.versions_expired,
        files_removed: sink.files_removed,
        reconciliation_sql: sql,
    };
    let mut notes = notes;
    notes.push(format!(
        "the model targets are tables committed once a simulated day ({} catalog commits, each moving every target at once); each snapshot's summary carries the model's state — for (b) the bronze snapshot id it consumed through ({SUMMARY_SOURCE_SNAPSHOT}), read back after every commit and continued from; between commits the newest watermark is held in memory and bronze's expiry protects it",
        sink.commits
    ));
    notes.push(format!(
        "the daily reconciliation ran as one SQL statement over {BRONZE} and the {} target tables; per target it is the story's query, e.g.\n{}",
        tables.len(),
        lakeio::story_sql(&example)
    ));
    // The story's business figures, from the lake's own tables.
    let t0 = std::time::Instant::now();
    let story_sql = match outcome
        .models
        .iter()
        .find(|m| m.schedule.is_some())
        .zip(plan.split_ms())
    {
        Some((m, split)) => {
            let name = lakeio::target_name(m, model::Watermark::MaxEventTs);
            let got =
                lakeio::story_business(&catalog, &name, split, &[split, plan.end_ms()]).await?;
            story::check_sql(&outcome, m, &got, &name)?;
            Some(got)
        }
        None => None,
    };
    let mut report = report::build(
        &plan,
        &notes,
        &outcome,
        Some(lake),
        &days_of,
        story_sql.as_ref(),
    );
    report.timings = report::Timings {
        simulate,
        loader_commits: bronze.stats.t_commit,
        expiry: bronze.stats.t_expire,
        model_reads: bronze.stats.t_read,
        target_commits: sink.t_flush,
        tidy: sink.t_tidy,
        reconcile,
        story: t0.elapsed(),
    };
    Ok(report)
}

/// The same experiment with bronze as a list in memory and no lake: the reference the lake run
/// is checked against (the reconciliation comes from the simulation's own counts).
pub async fn run_reference(args: &TideArgs) -> Result<TideReport, TideError> {
    let (plan, notes) = plan(args)?;
    let mut bronze = MemoryBronze::default();
    let outcome = experiment::simulate(
        &plan,
        &mut bronze,
        &mut experiment::MemorySink,
        &ProgressBar::hidden(),
    )
    .await?;
    let days_of =
        |m: usize, t: usize| report::rust_days(&outcome.truth, &outcome.models[m].targets[t]);
    Ok(report::build(&plan, &notes, &outcome, None, &days_of, None))
}

/// The report in the format asked for: tables for people, or pretty JSON.
pub fn render(report: &TideReport, format: TideFormat) -> Result<String, TideError> {
    match format {
        TideFormat::Table => Ok(render_table(report)),
        TideFormat::Json => Ok(serde_json::to_string_pretty(report)? + "\n"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn small() -> TideArgs {
        TideArgs {
            days: 1,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_lake_dir_holding_other_tables_is_refused_and_left_alone() -> Result<(), TideError> {
        let dir = tempfile::tempdir().map_err(|source| TideError::Io {
            path: "tempdir".into(),
            source,
        })?;
        let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))?;
        c.create_table("bronze.payments", &lakeio::schema(), &[])
            .await?;
        c.set_namespace("bronze", BTreeMap::new()).await?;
        let before = c.log().await?.len();
        let err = run_on(&small(), LakeAt::Dir(dir.path().to_path_buf()), false)
            .await
            .err();
        match &err {
            Some(TideError::ForeignTables { tables, .. }) => {
                assert_eq!(tables, &vec!["bronze.payments".to_string()]);
            }
            other => panic!("expected ForeignTables, got {other:?}"),
        }
        assert_eq!(c.log().await?.len(), before);
        assert!(
            c.list_tables()
                .await?
                .iter()
                .all(|t| t.namespace == "bronze")
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_lake_of_the_tides_own_tables_is_not_foreign() -> Result<(), TideError> {
        let c = Catalog::in_memory();
        c.create_table(BRONZE, &lakeio::schema(), &[]).await?;
        c.create_table("tide.fct_listing_event_15m_b", &lakeio::schema(), &[])
            .await?;
        lakeio::refuse_foreign_tables(&c, "memory").await?;
        c.create_table("gold.cash", &lakeio::schema(), &[]).await?;
        c.drop_table("gold.cash").await?;
        // Dropped, but older versions still hold it: their time travel would go too.
        assert!(matches!(
            lakeio::refuse_foreign_tables(&c, "memory").await,
            Err(TideError::ForeignTables { .. })
        ));
        Ok(())
    }
}
