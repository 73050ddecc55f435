//! A run: tap → boil → finish → grade → publish, as of one instant.
//!
//! Every step writes to the `audit` branch; only the publish moves `main`, and only when no
//! audit blocks ([`crate::publish`]). A run that blocks leaves `audit` holding its build: the
//! next run continues from it (the tap never takes a file twice, the boil and the finish read
//! only what is new since their watermarks), and its quarantine-rate audit still counts what
//! arrived since the last *publish*, so a block is not forgotten by running again.
//!
//! ## Interrupted runs
//! A run marks itself begun in the catalog ([`lake::Catalog::begin_work`], `run-<uuid>`) and
//! takes the mark back when it has published or recorded its block. A run that finds marks of
//! earlier runs knows one was killed or failed between its commits — the only way data files no
//! catalog version names are left behind — and has the tap sweep orphans first; otherwise it
//! skips the sweep, whose cost grows with the lake's history (every kept version's metadata and
//! manifests are read). The marks found are taken back once a sweep left nothing waiting out
//! its grace period. `sugarshack tap` alone ([`tap_alone`]) marks itself the same way
//! (`tap-<uuid>`) and sweeps on the same condition; a boil or a finish alone marks itself
//! (`boil-<uuid>`, `finish-<uuid>`) and does not sweep. `maintain` sweeps whatever is left.
//! While a mark's work runs, a sweep anywhere keeps the files it writes (see `lake`'s
//! [`lake::Catalog::remove_orphans`]).
//!
//! The boil and the finish are staged, then committed in ONE catalog version: silver and the
//! gold built from it land together, gold's watermarks naming the silver snapshots of the same
//! commit.
//!
//! ## Reading ahead
//! A new process knows nothing of the lake: the first step that reads a table parses its
//! metadata, its manifests and, for a lookup by id, the footer and bloom filters of each of its
//! data files, which grow with its history. The tap needs none of silver's or gold's, so while
//! it runs a thread reads theirs ahead into the catalog handle's caches
//! ([`lake::Catalog::warm_in_background`]: the tables the boil looks rows up in first, then the
//! rest of silver, then gold) at the lowest CPU priority, on what time the tap leaves a core
//! idle, and the boil and the finish find it there. It changes no answer: a step that finds
//! something not yet read reads it itself, and an error is reported by the step that meets
//! it, never by the read-ahead. A replay rebuilds silver and gold whole and reads nothing
//! ahead.
//!
//! A step that fails stops the run before anything later: a failed error-severity check in the
//! boil stops it before grading, an error anywhere stops it before the publish. Nothing of a
//! failed step is committed, and what earlier steps committed is on `audit` only, where the next
//! run continues from it.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::audits;
use crate::bronze::AUDIT_BRANCH;
use crate::config::Settings;
use crate::gold::{FinishOptions, FinishReport, stage_finish};
use crate::grade::{self, Grade, LAYERS};
use crate::publish::{self, PublishOutcome};
use crate::silver::{BoilOptions, BoilReport, known_versions, stage_boil};
use crate::tap::{TapOptions, TapReport, tap_as};
use crate::{Progress, Result, ShackError};

/// The prefix of a run's work mark in the catalog.
const RUN_MARK: &str = "run-";
/// The work mark of a tap on its own.
const TAP_MARK: &str = "tap-";
/// The work mark of a boil on its own.
pub(crate) const BOIL_MARK: &str = "boil-";
/// The work mark of a finish on its own.
pub(crate) const FINISH_MARK: &str = "finish-";
/// Every work mark this crate makes: an unfinished one means debris to sweep.
const MARKS: [&str; 4] = [RUN_MARK, TAP_MARK, BOIL_MARK, FINISH_MARK];
use lake::Catalog;

/// How a run runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// What the build is as of: the tap takes what had arrived by then, the audits judge as of
    /// then, the publish records it.
    pub through: DateTime<Utc>,
    /// Rebuild silver and gold from all of bronze (new snapshots on `audit`; history stays).
    pub replay: bool,
    /// The payment API versions whose parsers are enabled (default: all of them).
    pub parsers: Vec<String>,
    /// The audits' thresholds and the business time zone.
    pub settings: Settings,
    /// The tap's grace for unnamed files (see [`TapOptions::orphan_grace`]).
    pub orphan_grace: Duration,
}

impl RunOptions {
    /// A run as of `through` with every parser and the default settings.
    pub fn new(through: DateTime<Utc>) -> Self {
        RunOptions {
            through,
            replay: false,
            parsers: known_versions(),
            settings: Settings::default(),
            orphan_grace: TapOptions::default().orphan_grace,
        }
    }
}

/// What a run did, step by step.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Marks of earlier runs that began and never finished (the tap swept orphans first).
    pub interrupted: Vec<String>,
    pub tap: TapReport,
    pub boil: BoilReport,
    pub finish: FinishReport,
    pub grade: Grade,
    pub publish: PublishOutcome,
    /// Wall-clock time of each step, in order: tap, boil, finish, grade, publish (for people
    /// and benchmarks; nothing decides by it).
    pub timings: Vec<(&'static str, std::time::Duration)>,
}

impl RunReport {
    /// True when the run moved `main`.
    pub fn published(&self) -> bool {
        self.publish.published()
    }

    /// The story's shape: what was tapped, boiled and finished, each audit's line, then the
    /// decision.
    pub fn render(&self) -> String {
        let mut out = self.tap.render();
        if !self.interrupted.is_empty() {
            out.push_str(&format!(
                "  found    {} interrupted run(s): orphans swept before tapping\n",
                self.interrupted.len()
            ));
        }
        out.push_str(&self.boil.render());
        out.push_str(&self.finish.render());
        out.push_str(&self.grade.render());
        out.push('\n');
        out.push_str(&self.publish.render());
        out.push('\n');
        out
    }

    /// `tap 0.31 s, boil 0.42 s, …`: where the run's time went.
    pub fn render_timings(&self) -> String {
        self.timings
            .iter()
            .map(|(step, d)| format!("{step} {:.2} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A summary for machines: each step's report, every audit and the decision.
    pub fn to_json(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Audit<'a> {
            name: &'a str,
            verdict: &'a str,
            reason: &'a str,
            evidence: &'a serde_json::Value,
        }
        let audits: Vec<Audit> = self
            .grade
            .results
            .iter()
            .map(|r| Audit {
                name: &r.name,
                verdict: r.verdict.as_str(),
                reason: &r.reason,
                evidence: &r.evidence,
            })
            .collect();
        serde_json::json!({
            "as_of": self.grade.as_of(),
            "interrupted_runs": self.interrupted,
            "tap": self.tap,
            "boil": self.boil,
            "finish": self.finish,
            "graded_version": self.grade.version(),
            "graded_snapshots": self.grade.snapshots(),
            "audits": audits,
            "published": self.published(),
            "publish_number": self.publish.record.publish_number,
            "decision": self.publish.render(),
            "catalog_version": self.publish.version,
        })
    }
}

/// Run the pipeline once: see the module docs. `warehouse_root` holds the landing zone;
/// `now_ms` is the wall clock the publish log records (passed in, like every time here).
pub async fn run(
    catalog: &Catalog,
    warehouse_root: &Path,
    options: &RunOptions,
    now_ms: i64,
    progress: &(dyn Progress + Sync),
) -> Result<RunReport> {
    let run_started = std::time::Instant::now();
    // Bad arguments are refused before anything is read or written.
    crate::silver::enabled_parsers(&options.parsers)?;
    // Silver's and gold's history read ahead while the tap runs (see "Reading ahead"): not
    // waited for, and dropped when the run returns, which stops it if it is still at work.
    let _read_ahead =
        (!options.replay).then(|| catalog.warm_in_background(&read_ahead_tables(), AUDIT_BRANCH));
    // A publish says "gold as of T": the as-of of the lake's publishes never goes back.
    let last = publish::last_published(catalog).await?;
    if let Some(last) = &last
        && last.as_of > options.through
    {
        return Err(ShackError::AsOfGoesBack {
            through: options.through,
            published: last.as_of,
            number: last.publish_number.unwrap_or_default(),
        });
    }
    let work = Work::begin(catalog, RUN_MARK).await?;
    let tap_options = TapOptions {
        orphan_grace: options.orphan_grace,
        sweep_orphans: !work.interrupted.is_empty(),
        refuse_later_arrivals: true,
        ..TapOptions::default()
    };
    let mut timings = Vec::with_capacity(5);
    let mut clock = std::time::Instant::now();
    let mut lap = |step: &'static str| {
        let now = std::time::Instant::now();
        timings.push((step, now - clock));
        clock = now;
    };
    let tap = tap_as(
        catalog,
        warehouse_root,
        options.through,
        &tap_options,
        progress,
        Some(&work.mark),
    )
    .await;
    let tap = match tap {
        Err(e @ ShackError::BronzeAhead { .. }) => {
            // Refused before anything was written: this run leaves no work behind to sweep.
            catalog
                .end_work(work.mark.name())
                .await
                .map_err(|e| ShackError::lake("the catalog", e))?;
            return Err(e);
        }
        other => other?,
    };
    lap("tap");
    // Nothing landed since the last publish, at its very as-of, and nothing waits on `audit`:
    // publishing again would only repeat the same rows under a new number.
    if !options.replay
        && tap.nothing_new()
        && let Some(last) = &last
        && last.as_of == options.through
        && nothing_pending(catalog).await?
    {
        work.finish(catalog, tap.orphans_kept).await?;
        return Err(ShackError::NothingNew {
            number: last.publish_number.unwrap_or_default(),
            as_of: last.as_of,
        });
    }
    // Silver and gold are staged, then committed together: no catalog version ever shows
    // silver moved on `audit` and gold not.
    let staged_boil = stage_boil(
        catalog,
        &BoilOptions {
            branch: AUDIT_BRANCH.to_string(),
            parsers: options.parsers.clone(),
            replay: options.replay,
        },
        progress,
    )
    .await?;
    lap("boil");
    let staged_finish = stage_finish(
        catalog,
        &FinishOptions {
            replay: options.replay,
            ..FinishOptions::with_settings(options.through, &options.settings)
        },
        &staged_boil.changes,
        progress,
    )
    .await?;
    let mut boil = staged_boil.report;
    let mut finish = staged_finish.report;
    let message = if staged_boil.changes.is_empty() {
        staged_finish.message
    } else {
        format!("{}; {}", staged_boil.message, staged_finish.message)
    };
    let mut properties = staged_boil.properties;
    properties.extend(staged_finish.properties);
    let mut changes = staged_boil.changes;
    changes.extend(staged_finish.changes);
    progress.message("committing silver and gold");
    let committed = crate::layer::commit(
        catalog,
        changes,
        "boil+finish",
        &message,
        properties,
        "the run's silver and gold commit",
    )
    .await?;
    if !boil.tables.is_empty() {
        boil.catalog_version = Some(committed.version);
    }
    finish.catalog_version = Some(committed.version);
    lap("finish");
    progress.message("grading");
    let grade = grade::grade(
        catalog,
        &LAYERS,
        options.through,
        &options.settings,
        &audits::standard(),
    )
    .await?;
    lap("grade");
    progress.message(if grade.blocked() {
        "recording the block"
    } else {
        "publishing"
    });
    let took_ms = i64::try_from(run_started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let publish = publish::publish_run(catalog, &grade, now_ms, Some(took_ms)).await?;
    lap("publish");
    work.finish(catalog, tap.orphans_kept).await?;
    Ok(RunReport {
        interrupted: work.interrupted,
        tap,
        boil,
        finish,
        grade,
        publish,
        timings,
    })
}

/// The tables a run reads ahead while its tap runs, in the order the boil and the finish first
/// need them: the two the boil looks rows up in by id, the rest of silver, then gold
/// (`gold.fct_payments`, looked up by order id, first).
fn read_ahead_tables() -> Vec<&'static str> {
    use crate::silver::tables::{ORDERS, PAYMENTS, TABLES};
    let first = [ORDERS, PAYMENTS];
    first
        .into_iter()
        .chain(TABLES.into_iter().filter(|t| !first.contains(t)))
        .chain(crate::gold::TABLES)
        .collect()
}

/// True when every layer table's `audit` head is its `main` head: nothing built and unpublished.
async fn nothing_pending(catalog: &Catalog) -> Result<bool> {
    for (_, _, table) in grade::layer_tables(catalog).await? {
        if table.head(AUDIT_BRANCH) != table.head("main") {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A run's or a tap's work mark in the catalog, and the marks of earlier runs and taps that
/// began and never finished (their orphans are why this one sweeps).
struct Work {
    mark: lake::WorkMark,
    interrupted: Vec<String>,
}

impl Work {
    /// Find the unfinished marks, then mark this work (`prefix` + a UUID) begun.
    async fn begin(catalog: &Catalog, prefix: &str) -> Result<Work> {
        let lake_err = |e| ShackError::lake("the catalog", e);
        let interrupted = catalog
            .unfinished_work()
            .await
            .map_err(lake_err)?
            .into_iter()
            .filter(|m| MARKS.iter().any(|p| m.starts_with(p)))
            .collect();
        let mark = begin_mark(catalog, prefix).await?;
        Ok(Work { mark, interrupted })
    }

    /// Take this work's mark back, and the earlier ones too once the sweep left no orphan
    /// waiting out its grace period.
    async fn finish(&self, catalog: &Catalog, orphans_kept: usize) -> Result<()> {
        let lake_err = |e| ShackError::lake("the catalog", e);
        catalog.end_work(self.mark.name()).await.map_err(lake_err)?;
        if orphans_kept == 0 {
            for m in &self.interrupted {
                catalog.end_work(m).await.map_err(lake_err)?;
            }
        }
        Ok(())
    }
}

/// Do `work` marked begun in the catalog (`prefix` + a UUID), and take the mark back when it
/// succeeds. No sweep: a work that fails leaves its mark, and the next run or tap sweeps what it
/// wrote; while it works, a sweep elsewhere keeps its files.
pub(crate) async fn marked<T>(
    catalog: &Catalog,
    prefix: &str,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let mark = begin_mark(catalog, prefix).await?;
    let out = work.await?;
    catalog
        .end_work(mark.name())
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    Ok(out)
}

/// Mark work begun in the catalog: `prefix` + a UUID.
async fn begin_mark(catalog: &Catalog, prefix: &str) -> Result<lake::WorkMark> {
    let name = format!("{prefix}{}", uuid::Uuid::now_v7());
    catalog
        .begin_work(&name)
        .await
        .map_err(|e| ShackError::lake("the catalog", e))
}

/// `sugarshack tap` on its own: the tap, marked begun and finished in the catalog like a run,
/// sweeping orphans first only when an earlier run or tap never finished (and
/// `options.sweep_orphans` allows it). A tap that fails leaves its mark, so the next run or tap
/// sweeps what it left behind.
pub async fn tap_alone(
    catalog: &Catalog,
    warehouse_root: &Path,
    through: DateTime<Utc>,
    options: &TapOptions,
    progress: &(dyn Progress + Sync),
) -> Result<TapReport> {
    let work = Work::begin(catalog, TAP_MARK).await?;
    let options = TapOptions {
        sweep_orphans: options.sweep_orphans && !work.interrupted.is_empty(),
        ..options.clone()
    };
    let report = tap_as(
        catalog,
        warehouse_root,
        through,
        &options,
        progress,
        Some(&work.mark),
    )
    .await?;
    work.finish(catalog, report.orphans_kept).await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every silver and gold table is read ahead once, the ones the boil looks rows up in by
    /// id first, and nothing of bronze (the tap is writing it).
    #[test]
    fn a_run_reads_ahead_every_silver_and_gold_table_once_lookups_first() {
        let names = read_ahead_tables();
        assert_eq!(
            &names[..2],
            &[
                crate::silver::tables::ORDERS,
                crate::silver::tables::PAYMENTS
            ]
        );
        let mut want: Vec<&str> = crate::silver::tables::TABLES
            .into_iter()
            .chain(crate::gold::TABLES)
            .collect();
        let mut got = names.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        assert!(names.iter().all(|n| !n.starts_with("bronze.")));
    }
}
