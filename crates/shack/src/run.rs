//! A run: tap → boil → finish → grade → publish, as of one instant.
//!
//! Every step writes to the `audit` branch; only the publish moves `main`, and only when no
//! audit blocks ([`crate::publish`]). A run that blocks leaves `audit` holding its build: the
//! next run continues from it (the tap never takes a file twice, the boil and the finish read
//! only what is new since their watermarks), and its quarantine-rate audit still counts what
//! arrived since the last *publish*, so a block is not forgotten by running again.
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
use crate::gold::{FinishOptions, FinishReport, finish};
use crate::grade::{self, Grade, LAYERS};
use crate::publish::{self, PublishOutcome};
use crate::silver::{BoilOptions, BoilReport, boil, known_versions};
use crate::tap::{TapOptions, TapReport, tap};
use crate::{Progress, Result};
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
    pub tap: TapReport,
    pub boil: BoilReport,
    pub finish: FinishReport,
    pub grade: Grade,
    pub publish: PublishOutcome,
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
        out.push_str(&self.boil.render());
        out.push_str(&self.finish.render());
        out.push_str(&self.grade.render());
        out.push('\n');
        out.push_str(&self.publish.render());
        out.push('\n');
        out
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
    let tap_options = TapOptions {
        orphan_grace: options.orphan_grace,
        ..TapOptions::default()
    };
    let tap = tap(
        catalog,
        warehouse_root,
        options.through,
        &tap_options,
        progress,
    )
    .await?;
    let boil = boil(
        catalog,
        &BoilOptions {
            branch: AUDIT_BRANCH.to_string(),
            parsers: options.parsers.clone(),
            replay: options.replay,
        },
        progress,
    )
    .await?;
    let finish = finish(
        catalog,
        &FinishOptions {
            replay: options.replay,
            ..FinishOptions::with_settings(options.through, &options.settings)
        },
        progress,
    )
    .await?;
    progress.message("grading");
    let grade = grade::grade(
        catalog,
        &LAYERS,
        options.through,
        &options.settings,
        &audits::standard(),
    )
    .await?;
    progress.message(if grade.blocked() {
        "recording the block"
    } else {
        "publishing"
    });
    let publish = publish::publish(catalog, &grade, now_ms).await?;
    Ok(RunReport {
        tap,
        boil,
        finish,
        grade,
        publish,
    })
}
