//! The season, one morning at a time: the main job on a lake of its own.
//!
//! [`play_season`] generates the Saltbox Market season into the landing zone when there is none,
//! then runs the pipeline ([`crate::run`]) at noon UTC of every day of the season — 9 a.m. in
//! Halifax, the morning — as the shop would have: the story's August 17 morning first with only
//! the payments API version the shop knew (the quarantine-rate audit blocks it), then, that same
//! morning, replayed from bronze with the new version's parser enabled (it publishes). Mornings before that knew only the old
//! version; mornings after know both.
//!
//! It resumes where the lake is: mornings at or before the last publish's as-of are not run
//! again, so playing a finished season says so and changes nothing. Mornings before a landing
//! file bronze already holds arrived (kept across a rollback) are skipped, and said so: a
//! publish as of one of them would show rows before they arrived.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use lake::Catalog;
use serde::Serialize;

use crate::config::Settings;
use crate::grade::{Verdict, layer_tables};
use crate::publish::{self, PublishRecord};
use crate::run::{RunOptions, RunReport, run};
use crate::silver::known_versions;
use crate::{Progress, Result, ShackError};

/// How a season is played.
#[derive(Clone, Debug)]
pub struct SeasonOptions {
    /// The last morning to run (default: the season's last).
    pub through: Option<DateTime<Utc>>,
    pub settings: Settings,
    /// As for [`RunOptions::orphan_grace`].
    pub orphan_grace: Duration,
}

impl Default for SeasonOptions {
    fn default() -> Self {
        SeasonOptions {
            through: None,
            settings: Settings::default(),
            orphan_grace: crate::TapOptions::default().orphan_grace,
        }
    }
}

/// One run of the season.
#[derive(Clone, Debug, Serialize)]
pub struct SeasonRun {
    pub through: DateTime<Utc>,
    /// The payment API versions enabled.
    pub parsers: Vec<String>,
    pub replay: bool,
    pub published: bool,
    /// `BLOCK quarantine rate: …` and `WARN …` lines.
    pub findings: Vec<String>,
    pub seconds: f64,
    /// Landing lines the run's tap added to bronze, all sources (0 on a day nothing arrived):
    /// the day's new data, which a run's cost should follow rather than the lake's history.
    pub new_rows: u64,
    /// Where the run's time went: seconds per step (`tap`, `boil`, `finish`, `grade`,
    /// `publish`), in the order they ran.
    pub steps: Vec<(String, f64)>,
}

impl SeasonRun {
    fn of(report: &RunReport, options: &RunOptions, seconds: f64) -> SeasonRun {
        SeasonRun {
            through: options.through,
            parsers: options.parsers.clone(),
            replay: options.replay,
            published: report.published(),
            findings: report
                .grade
                .results
                .iter()
                .filter(|r| r.verdict != Verdict::Pass)
                .map(|r| format!("{} {}: {}", r.verdict, r.name, r.reason))
                .collect(),
            seconds,
            new_rows: report.tap.rows(),
            steps: report
                .timings
                .iter()
                .map(|(step, d)| ((*step).to_string(), d.as_secs_f64()))
                .collect(),
        }
    }

    /// `2026-08-17 12:00  blocked    BLOCK quarantine rate: …`
    pub fn render(&self) -> String {
        let what = match (self.published, self.replay) {
            (true, true) => "published after a replay",
            (true, false) => "published",
            (false, _) => "blocked",
        };
        let mut line = format!("{}  {what}", self.through.format("%Y-%m-%d %H:%M"));
        if let Some(first) = self
            .findings
            .iter()
            .find(|f| f.starts_with("BLOCK"))
            .or(self.findings.first())
        {
            line.push_str(&format!("  ({first})"));
        }
        line
    }
}

/// What a season did.
#[derive(Clone, Debug, Serialize)]
pub struct SeasonReport {
    /// True when the landing zone was empty and the season was generated first.
    pub generated: bool,
    /// The last publish before this season was played (`None`: a new lake).
    pub resumed_after: Option<DateTime<Utc>>,
    pub runs: Vec<SeasonRun>,
    /// Rows at `main` per layer at the end.
    pub rows: BTreeMap<String, u64>,
    /// The last publish at the end.
    pub last_publish: Option<u64>,
    pub last_as_of: Option<DateTime<Utc>>,
    /// Mornings not run because bronze on `audit` already held a landing file that arrived
    /// after them (tapped before a rollback, or by a `tap` ahead): a publish as of one of them
    /// would show that file's rows before they arrived. The season goes on from the first
    /// morning at or after the file's arrival.
    pub skipped: Option<Skipped>,
    pub seconds: f64,
}

/// The mornings a season did not run, and why (see [`SeasonReport::skipped`]).
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub mornings: u32,
    /// The landing file bronze already held, and when it arrived.
    pub file: String,
    pub arrived: DateTime<Utc>,
}

impl SeasonReport {
    pub fn publishes(&self) -> usize {
        self.runs.iter().filter(|r| r.published).count()
    }

    pub fn blocks(&self) -> usize {
        self.runs.iter().filter(|r| !r.published).count()
    }

    /// True when the season's last run published (or nothing was left to run and the lake has
    /// a publish).
    pub fn ended_published(&self) -> bool {
        match self.runs.last() {
            Some(r) => r.published,
            None => self.last_publish.is_some(),
        }
    }

    /// When every morning left was skipped (bronze already holds a file that arrived after the
    /// last of them), the arrival a `run --through` must reach to publish it: nothing ran, and
    /// `main` stays behind what bronze holds.
    pub fn stuck_behind(&self) -> Option<DateTime<Utc>> {
        match (&self.skipped, self.runs.is_empty()) {
            (Some(k), true) => Some(k.arrived),
            _ => None,
        }
    }

    /// The closing summary.
    pub fn render_summary(&self) -> String {
        let mut out = String::new();
        if let Some(k) = &self.skipped {
            out.push_str(&format!(
                "skipped {} morning(s) before {}: bronze on `audit` already holds {}, which arrived then (tapped before a rollback, or ahead); a publish as of an earlier morning would show its rows before they arrived\n",
                k.mornings,
                k.arrived.format("%Y-%m-%d %H:%M UTC"),
                k.file
            ));
        }
        // Nothing ran: the caller reports it as an error naming the `run --through` to use.
        if self.stuck_behind().is_some() {
            return out;
        }
        if self.runs.is_empty() {
            out.push_str(&format!(
                "the season is already played: publish {} as of {}; nothing to do\n",
                self.last_publish.unwrap_or_default(),
                self.last_as_of
                    .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
                    .unwrap_or_default()
            ));
            return out;
        }
        out.push_str(&format!(
            "season: {} runs, {} published, {} blocked, in {:.0} s{}\n",
            self.runs.len(),
            self.publishes(),
            self.blocks(),
            self.seconds,
            match self.resumed_after {
                Some(t) => format!(
                    " (resumed after the publish as of {})",
                    t.format("%Y-%m-%d %H:%M UTC")
                ),
                None => String::new(),
            }
        ));
        for (layer, rows) in &self.rows {
            out.push_str(&format!(
                "  {layer:<7} {:>12} rows at main\n",
                crate::thousands(*rows)
            ));
        }
        if let (Some(n), Some(t)) = (self.last_publish, self.last_as_of) {
            out.push_str(&format!(
                "gold is published as of {} (publish {n})\n",
                t.format("%Y-%m-%d %H:%M UTC")
            ));
        }
        out
    }
}

/// Forwards a run's messages under the day it belongs to; the season's own bar counts days.
struct DayProgress<'a> {
    outer: &'a (dyn Progress + Sync),
    day: String,
}

impl Progress for DayProgress<'_> {
    fn set_total(&self, _n: u64) {}
    fn inc(&self, _n: u64) {}
    fn message(&self, m: &str) {
        self.outer.message(&format!("{}: {m}", self.day));
    }
}

fn instant(ms: i64) -> Result<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| ShackError::BadTable {
            table: "the season's calendar".into(),
            detail: format!("{ms} ms is not an instant"),
        })
}

/// Play the season on the lake (see the module docs). `each` is called with every run as it
/// ends (to print it); `progress` counts mornings.
impl SeasonOptions {
    /// Refuse what cannot be played before anything is generated or written: a `through`
    /// before the season's first morning.
    pub fn check(&self) -> Result<()> {
        if let (Some(through), Some(first)) = (self.through, sugarbush::season_noons_ms().first()) {
            let first = instant(*first)?;
            if through < first {
                return Err(ShackError::BeforeTheSeason { through, first });
            }
        }
        Ok(())
    }
}

pub async fn play_season(
    catalog: &Catalog,
    warehouse_root: &Path,
    options: &SeasonOptions,
    progress: &(dyn Progress + Sync),
    each: &mut (dyn FnMut(&SeasonRun) + Send),
) -> Result<SeasonReport> {
    let started = Instant::now();
    options.check()?;
    let landing = sugarbush::landing_dir(warehouse_root);
    let empty = match std::fs::read_dir(&landing) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => {
            return Err(ShackError::BadTable {
                table: landing.display().to_string(),
                detail: format!("cannot read the landing zone: {e}"),
            });
        }
    };
    if empty {
        progress.message("generating the season");
        sugarbush::generate(
            warehouse_root,
            &sugarbush::SeasonConfig::default(),
            &sugarbush::GenerateOptions::default(),
            &sugarbush::NoProgress,
        )
        .map_err(|e| ShackError::BadTable {
            table: landing.display().to_string(),
            detail: format!("generating the season: {e}"),
        })?;
    }

    let last: Option<PublishRecord> = publish::last_published(catalog).await?;
    let resumed_after = last.as_ref().map(|r| r.as_of);
    let change = instant(sugarbush::API_CHANGE_MS)?;
    let mut noons = Vec::new();
    for ms in sugarbush::season_noons_ms() {
        let t = instant(ms)?;
        if resumed_after.is_some_and(|a| t <= a) || options.through.is_some_and(|end| t > end) {
            continue;
        }
        noons.push(t);
    }
    progress.set_total(noons.len() as u64);
    let old_only = vec![sugarbush::API_V1.to_string()];
    let mut runs = Vec::with_capacity(noons.len() + 1);
    let mut skipped: Option<Skipped> = None;
    for through in noons {
        if let Some(k) = skipped.as_mut().filter(|k| through < k.arrived) {
            k.mornings += 1;
            progress.inc(1);
            continue;
        }
        let day = through.format("%Y-%m-%d").to_string();
        let inner = DayProgress {
            outer: progress,
            day: day.clone(),
        };
        // The shop knew only the old API version until the morning it changed.
        let knew_new = through.date_naive() > change.date_naive();
        let mut run_options = RunOptions {
            parsers: if knew_new {
                known_versions()
            } else {
                old_only.clone()
            },
            settings: options.settings.clone(),
            orphan_grace: options.orphan_grace,
            ..RunOptions::new(through)
        };
        let now_ms = Utc::now().timestamp_millis();
        let t0 = Instant::now();
        let report = match run(catalog, warehouse_root, &run_options, now_ms, &inner).await {
            Ok(r) => r,
            // Refused before anything was written: go on from the morning that covers it.
            Err(ShackError::BronzeAhead { arrived, file, .. }) if skipped.is_none() => {
                progress.message(&format!(
                    "bronze already holds {file}, which arrived at {}: the season goes on from the first morning after it",
                    arrived.format("%Y-%m-%d %H:%M UTC")
                ));
                skipped = Some(Skipped {
                    mornings: 1,
                    file,
                    arrived,
                });
                progress.inc(1);
                continue;
            }
            Err(e) => return Err(e),
        };
        let r = SeasonRun::of(&report, &run_options, t0.elapsed().as_secs_f64());
        each(&r);
        runs.push(r);
        if through.date_naive() == change.date_naive() {
            // The fix, that same morning: a parser entry for the new version, then a replay
            // from bronze (whether or not the old parser's run was blocked: what it quarantined
            // as unsupported must be parsed).
            run_options.parsers = known_versions();
            run_options.replay = true;
            let t0 = Instant::now();
            let now_ms = Utc::now().timestamp_millis();
            let report = run(catalog, warehouse_root, &run_options, now_ms, &inner).await?;
            let r = SeasonRun::of(&report, &run_options, t0.elapsed().as_secs_f64());
            each(&r);
            runs.push(r);
        }
        progress.inc(1);
    }

    let mut rows: BTreeMap<String, u64> = BTreeMap::new();
    for (name, ns, table) in layer_tables(catalog).await? {
        let n = match table.head("main") {
            Some(id) => table
                .snapshot(id)
                .map_err(|e| ShackError::lake(&name, e))?
                .summary
                .get("total-records")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0),
            None => 0,
        };
        *rows.entry(ns.to_string()).or_default() += n;
    }
    let last = publish::last_published(catalog).await?;
    Ok(SeasonReport {
        generated: empty,
        resumed_after,
        runs,
        rows,
        last_publish: last.as_ref().and_then(|r| r.publish_number),
        last_as_of: last.map(|r| r.as_of),
        skipped,
        seconds: started.elapsed().as_secs_f64(),
    })
}
