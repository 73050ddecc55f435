//! The grader: audits that read what a run wrote to the `audit` branch and say PASS, WARN or
//! BLOCK, each with a one-line reason and its evidence.
//!
//! Grading starts by reading ONE catalog version and recording, for every table of the graded
//! namespaces (bronze, silver, gold), the snapshot its `audit` branch points at in that version.
//! Every audit reads exactly those snapshots ([`GradeContext::sql`], [`GradeContext::table`]),
//! and the publish moves `main` to exactly those snapshots: a write that lands on `audit` while
//! the audits run, or between grading and publish, is neither graded nor published.
//!
//! Audits are registered by the pipeline ([`Audit`], or a plain async fn through [`AuditFn`]).
//! An audit that fails to run is a BLOCK (a grade that could not look is not a pass). The pure
//! threshold logic of the quarantine-rate audit is here ([`quarantine_rate`]); the audits' SQL
//! lives with the tables it reads.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use lake::{At, Catalog, SqlContext, Table};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::bronze::AUDIT_BRANCH;
use crate::config::Settings;
use crate::publish::{self, PublishRecord};
use crate::{Result, ShackError};

/// The namespaces a grade covers and a publish moves, in layer order.
pub const LAYERS: [&str; 3] = ["bronze", "silver", "gold"];

/// Every table of the graded namespaces ([`LAYERS`]) in the newest catalog version, by name,
/// with its namespace.
pub async fn layer_tables(catalog: &Catalog) -> Result<Vec<(String, &'static str, Table)>> {
    let head = catalog
        .head()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    let mut graded = Vec::new();
    for name in head.tables.keys() {
        let Some(ns) = name
            .split_once('.')
            .and_then(|(ns, _)| LAYERS.iter().find(|l| **l == ns))
        else {
            continue;
        };
        graded.push((name.as_str(), *ns));
    }
    let names: Vec<&str> = graded.iter().map(|(name, _)| *name).collect();
    let tables = crate::layer::open_all(catalog, &head, &names).await?;
    Ok(graded
        .into_iter()
        .zip(tables)
        .map(|((name, ns), table)| (name.to_string(), ns, table))
        .collect())
}

/// What an audit says about the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Warn,
    Block,
}

impl Verdict {
    /// `PASS`, `WARN` or `BLOCK`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Block => "BLOCK",
        }
    }

    /// The verdict `PASS`, `WARN` or `BLOCK` names.
    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "PASS" => Some(Verdict::Pass),
            "WARN" => Some(Verdict::Warn),
            "BLOCK" => Some(Verdict::Block),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One audit's finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditResult {
    /// The audit, as printed: `quarantine rate`, `conservation`, …
    pub name: String,
    pub verdict: Verdict,
    /// One line: `payments 20.42% of 284 (mostly unsupported_api_version)`.
    pub reason: String,
    /// What the audit measured, for the publish log and for people who ask why.
    pub evidence: Value,
}

impl AuditResult {
    pub fn new(name: &str, verdict: Verdict, reason: impl Into<String>, evidence: Value) -> Self {
        AuditResult {
            name: name.to_string(),
            verdict,
            // One line, whatever the audit built.
            reason: reason.into().replace(['\n', '\r'], " "),
            evidence,
        }
    }

    /// `  BLOCK  quarantine rate  orders 0.00% of 1,049; …`, as the story prints it.
    pub fn render(&self) -> String {
        format!("  {:<6} {:<16} {}", self.verdict, self.name, self.reason)
    }
}

/// What an audit reads: the catalog version grading started from and the `audit` snapshot of
/// every graded table in it.
#[derive(Clone, Debug)]
pub struct GradeContext {
    /// The catalog version every graded snapshot was read from.
    pub version: u64,
    /// The run's `--through`: what the build is as of.
    pub as_of: DateTime<Utc>,
    /// Each graded table's `audit` head in [`GradeContext::version`] (tables without an `audit`
    /// branch are left out: there is nothing of theirs to grade or publish).
    pub snapshots: BTreeMap<String, i64>,
    /// The last publish recorded when grading started (`None`: nothing published yet). Its
    /// snapshot ids say where "since the last publish" starts.
    pub previous: Option<PublishRecord>,
    /// The number of publish-log records when grading started (published and blocked).
    pub log_records: u64,
    pub settings: Settings,
    /// The SQL session, opened by the first audit that asks and shared by the others.
    pub session: SharedSession,
}

/// One SQL session for every audit of a grade: opening one reads every table's metadata, and
/// each audit asking for its own would read it all again.
#[derive(Clone, Default)]
pub struct SharedSession(Arc<tokio::sync::OnceCell<Arc<SqlContext>>>);

impl std::fmt::Debug for SharedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.0.initialized() {
            "open"
        } else {
            "not opened"
        };
        write!(f, "SharedSession({state})")
    }
}

impl GradeContext {
    /// A SQL session over the graded version with every table at `audit` — exactly the graded
    /// snapshots, whatever `audit` holds now. Tables without `audit` are in `skipped`. Opened
    /// once per grade and shared.
    pub async fn sql(&self, catalog: &Catalog) -> Result<Arc<SqlContext>> {
        self.session
            .0
            .get_or_try_init(|| async {
                catalog
                    .sql(Some(self.version), &At::reference(AUDIT_BRANCH))
                    .await
                    .map(Arc::new)
                    .map_err(|e| ShackError::lake(format!("catalog version {}", self.version), e))
            })
            .await
            .cloned()
    }

    /// A graded table as of the graded version (read it at [`GradeContext::at`]).
    pub async fn table(&self, catalog: &Catalog, name: &str) -> Result<Table> {
        catalog
            .table_at_version(name, self.version)
            .await
            .map_err(|e| ShackError::lake(name, e))
    }

    /// Where to read a graded table: its graded snapshot (`None` for a table not graded).
    pub fn at(&self, name: &str) -> Option<At> {
        self.snapshots.get(name).map(|s| At::Snapshot(*s))
    }

    /// The rows the `audit` branch of `name` added since the last publish, through the graded
    /// snapshot (everything through it when nothing was published yet): an incremental read by
    /// snapshot ids, each part with the snapshot (the batch) that added it. Every snapshot in
    /// between must be an append (bronze's are).
    pub async fn since_last_publish(
        &self,
        catalog: &Catalog,
        name: &str,
    ) -> Result<lake::Incremental> {
        let Some(graded) = self.snapshots.get(name).copied() else {
            return Ok(lake::Incremental {
                after: None,
                through: None,
                parts: Vec::new(),
            });
        };
        let table = self.table(catalog, name).await?;
        table
            .read_incremental(AUDIT_BRANCH, self.previous_snapshot(name), Some(graded))
            .await
            .map_err(|e| ShackError::lake(name, e))
    }

    /// The snapshot of `name` the last publish reached (where "since the last publish" starts).
    pub fn previous_snapshot(&self, name: &str) -> Option<i64> {
        self.previous
            .as_ref()
            .and_then(|p| p.snapshots.get(name).copied())
    }
}

/// An audit the pipeline registers.
pub trait Audit: Send + Sync {
    /// The name printed before its verdict.
    fn name(&self) -> &str;
    /// Read the graded snapshots and judge them.
    fn run<'a>(
        &'a self,
        catalog: &'a Catalog,
        ctx: &'a GradeContext,
    ) -> BoxFuture<'a, Result<AuditResult>>;
}

/// The signature of an audit written as a plain async function.
pub type AuditFnPtr =
    for<'a> fn(&'a Catalog, &'a GradeContext) -> BoxFuture<'a, Result<AuditResult>>;

/// An [`Audit`] made of a name and a function.
pub struct AuditFn {
    pub name: String,
    pub f: AuditFnPtr,
}

impl AuditFn {
    pub fn new(name: &str, f: AuditFnPtr) -> Self {
        AuditFn {
            name: name.to_string(),
            f,
        }
    }
}

impl Audit for AuditFn {
    fn name(&self) -> &str {
        &self.name
    }

    fn run<'a>(
        &'a self,
        catalog: &'a Catalog,
        ctx: &'a GradeContext,
    ) -> BoxFuture<'a, Result<AuditResult>> {
        (self.f)(catalog, ctx)
    }
}

/// A graded run: the snapshots graded and what every audit said.
#[derive(Clone, Debug)]
pub struct Grade {
    pub context: GradeContext,
    pub results: Vec<AuditResult>,
}

impl Grade {
    /// True when any audit says BLOCK: `main` must not move.
    pub fn blocked(&self) -> bool {
        self.results.iter().any(|r| r.verdict == Verdict::Block)
    }

    /// The catalog version grading read.
    pub fn version(&self) -> u64 {
        self.context.version
    }

    /// The graded `audit` snapshot of every table.
    pub fn snapshots(&self) -> &BTreeMap<String, i64> {
        &self.context.snapshots
    }

    /// The run's as-of.
    pub fn as_of(&self) -> DateTime<Utc> {
        self.context.as_of
    }

    /// Every audit's line, as the story prints them.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for r in &self.results {
            out.push_str(&r.render());
            out.push('\n');
        }
        out
    }
}

/// Start grading: read the newest catalog version once and record the `audit` head of every
/// table in `namespaces` and the last publish, then run `audits` against exactly that.
pub async fn grade(
    catalog: &Catalog,
    namespaces: &[&str],
    as_of: DateTime<Utc>,
    settings: &Settings,
    audits: &[Arc<dyn Audit>],
) -> Result<Grade> {
    let context = Arc::new(begin(catalog, namespaces, as_of, settings).await?);
    // The audits only read, and each reads the same snapshots: they run at once, each on a
    // task of its own (one plans its SQL while another does, or waits on its files), and their
    // results keep the order they were given in. An audit that fails BLOCKs.
    let jobs = audits.iter().map(|audit| {
        let (audit, context, catalog) = (audit.clone(), context.clone(), catalog.clone());
        crate::par::job(async move {
            Ok(match audit.run(&catalog, &context).await {
                Ok(r) => r,
                Err(e) => AuditResult::new(
                    audit.name(),
                    Verdict::Block,
                    format!("could not run: {e}"),
                    json!({ "error": e.to_string() }),
                ),
            })
        })
    });
    let results = crate::par::on_tasks("the audits", audits.len(), jobs).await?;
    let context = Arc::try_unwrap(context).unwrap_or_else(|shared| (*shared).clone());
    Ok(Grade { context, results })
}

/// What grading starts from (see [`grade`]): one catalog version, the `audit` head of every
/// table of `namespaces` in it, and the publish log as it stood in it.
pub async fn begin(
    catalog: &Catalog,
    namespaces: &[&str],
    as_of: DateTime<Utc>,
    settings: &Settings,
) -> Result<GradeContext> {
    let head = catalog
        .head()
        .await
        .map_err(|e| ShackError::lake("the catalog", e))?;
    let mut snapshots = BTreeMap::new();
    for name in head.tables.keys() {
        let in_scope = name
            .split_once('.')
            .is_some_and(|(ns, _)| namespaces.contains(&ns));
        if !in_scope {
            continue;
        }
        let table = catalog
            .table_in(&head, name)
            .await
            .map_err(|e| ShackError::lake(name, e))?;
        if let Some(id) = table.head(AUDIT_BRANCH) {
            snapshots.insert(name.clone(), id);
        }
    }
    let log = publish::log_tail_in(catalog, &head).await?;
    let previous = log.last_published;
    Ok(GradeContext {
        version: head.version,
        as_of,
        snapshots,
        previous,
        log_records: log.records,
        settings: settings.clone(),
        session: SharedSession::default(),
    })
}

/// What one source took in since the last publish, for the quarantine-rate audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SourceIntake {
    /// `orders`, `payments`, …
    pub source: String,
    /// Rows that arrived since the last publish (CSV header lines are not counted).
    pub rows: u64,
    /// Of those, how many went to quarantine, by reason.
    pub quarantined: BTreeMap<String, u64>,
}

impl SourceIntake {
    pub fn quarantined_total(&self) -> u64 {
        self.quarantined.values().sum()
    }

    /// The reason most of its quarantined rows share (ties: the first by name).
    pub fn dominant_reason(&self) -> Option<&str> {
        let mut best: Option<(&str, u64)> = None;
        for (reason, n) in &self.quarantined {
            if *n > 0 && best.is_none_or(|(_, b)| *n > b) {
                best = Some((reason, *n));
            }
        }
        best.map(|(r, _)| r)
    }

    /// Percent of its rows that went to quarantine (0 when none arrived).
    pub fn percent(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.quarantined_total() as f64 * 100.0 / self.rows as f64
        }
    }
}

/// The quarantine-rate audit's judgement, given what each source took in since the last
/// publish: BLOCK when a source's quarantined share exceeds
/// [`Settings::quarantine_max_percent`] with at least [`Settings::quarantine_min_count`]
/// quarantined rows; WARN when the share exceeds it on fewer rows (one truncated line in 39 is
/// worth a look, not a stop); PASS otherwise. The reason reads as the story's:
/// `orders 0.00% of 1,049; payments 20.42% of 284 (mostly unsupported_api_version)`.
pub fn quarantine_rate(sources: &[SourceIntake], settings: &Settings) -> AuditResult {
    let mut verdict = Verdict::Pass;
    let mut parts = Vec::with_capacity(sources.len());
    let mut evidence = Vec::with_capacity(sources.len());
    for s in sources {
        let bad = s.quarantined_total();
        let pct = s.percent();
        let over = pct > settings.quarantine_max_percent;
        let this = match (over, bad >= settings.quarantine_min_count) {
            (true, true) => Verdict::Block,
            (true, false) => Verdict::Warn,
            (false, _) => Verdict::Pass,
        };
        verdict = verdict.max(this);
        let mut part = format!("{} {pct:.2}% of {}", s.source, crate::thousands(s.rows));
        if let Some(reason) = s.dominant_reason() {
            part.push_str(&format!(" (mostly {reason})"));
        }
        parts.push(part);
        evidence.push(json!({
            "source": s.source,
            "rows": s.rows,
            "quarantined": bad,
            "percent": pct,
            "by_reason": s.quarantined,
            "verdict": this,
        }));
    }
    let reason = if parts.is_empty() {
        "no rows arrived since the last publish".to_string()
    } else {
        parts.join("; ")
    };
    AuditResult::new(
        "quarantine rate",
        verdict,
        reason,
        json!({
            "max_percent": settings.quarantine_max_percent,
            "min_count": settings.quarantine_min_count,
            "sources": evidence,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intake(source: &str, rows: u64, bad: &[(&str, u64)]) -> SourceIntake {
        SourceIntake {
            source: source.to_string(),
            rows,
            quarantined: bad.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn one_bad_line_in_39_does_not_block() {
        let r = quarantine_rate(
            &[intake("payments", 39, &[("truncated_line", 1)])],
            &Settings::default(),
        );
        assert_ne!(r.verdict, Verdict::Block, "{r:?}");
        assert_eq!(r.verdict, Verdict::Warn);
        assert_eq!(r.reason, "payments 2.56% of 39 (mostly truncated_line)");
    }

    #[test]
    fn a_fifth_of_284_blocks_and_names_the_dominant_reason() {
        let r = quarantine_rate(
            &[
                intake("orders", 1_049, &[]),
                intake(
                    "payments",
                    284,
                    &[("unsupported_api_version", 56), ("truncated_line", 2)],
                ),
            ],
            &Settings::default(),
        );
        assert_eq!(r.verdict, Verdict::Block);
        assert_eq!(r.name, "quarantine rate");
        assert_eq!(
            r.reason,
            "orders 0.00% of 1,049; payments 20.42% of 284 (mostly unsupported_api_version)"
        );
        assert_eq!(r.evidence["sources"][1]["quarantined"], 58);
        assert_eq!(
            r.render(),
            "  BLOCK  quarantine rate  orders 0.00% of 1,049; payments 20.42% of 284 (mostly unsupported_api_version)"
        );
    }

    #[test]
    fn thresholds_are_settings_and_the_boundary_is_exclusive() {
        let s = Settings::default();
        // Exactly 2% of 500 (10 rows) is not over 2%.
        assert_eq!(
            quarantine_rate(&[intake("orders", 500, &[("x", 10)])], &s).verdict,
            Verdict::Pass
        );
        assert_eq!(
            quarantine_rate(&[intake("orders", 500, &[("x", 11)])], &s).verdict,
            Verdict::Block
        );
        // Over 2% with fewer than the minimum count warns.
        assert_eq!(
            quarantine_rate(&[intake("orders", 100, &[("x", 4)])], &s).verdict,
            Verdict::Warn
        );
        let loose = Settings {
            quarantine_max_percent: 25.0,
            ..Settings::default()
        };
        assert_eq!(
            quarantine_rate(&[intake("payments", 284, &[("v", 58)])], &loose).verdict,
            Verdict::Pass
        );
        let strict = Settings {
            quarantine_min_count: 1,
            ..Settings::default()
        };
        assert_eq!(
            quarantine_rate(&[intake("payments", 39, &[("t", 1)])], &strict).verdict,
            Verdict::Block
        );
    }

    #[test]
    fn nothing_arrived_passes() {
        let r = quarantine_rate(&[intake("orders", 0, &[])], &Settings::default());
        assert_eq!(r.verdict, Verdict::Pass);
        assert_eq!(r.reason, "orders 0.00% of 0");
        assert_eq!(
            quarantine_rate(&[], &Settings::default()).verdict,
            Verdict::Pass
        );
    }

    #[test]
    fn reasons_stay_on_one_line() {
        let r = AuditResult::new("x", Verdict::Warn, "a\nb", Value::Null);
        assert_eq!(r.reason, "a b");
        assert_eq!(Verdict::parse("BLOCK"), Some(Verdict::Block));
        assert_eq!(Verdict::parse("block"), None);
    }
}
