//! The report: every figure of the experiment, as JSON (serde) and as tables for people.

use std::collections::BTreeMap;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table};
use serde::Serialize;

use crate::args::format_duration_ms;
use crate::experiment::{Outcome, Plan};
use crate::generator::{COMMIT_MS, DAY_MS, EventType, TxKind};
use crate::model::{Target, Watermark};
use crate::source::{Counts, SourceTruth};

/// Buckets with fewer transactions than this are listed but left out of the largest deviation
/// (one pallet's survival is one uniform draw: too noisy to compare with an average).
pub const MIN_BUCKET_TRANSACTIONS: u64 = 10;

/// Everything `sugarshack tide` found.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TideReport {
    pub config: ConfigReport,
    pub source: SourceReport,
    /// The lake side: bronze commits, expiry, the target tables and the reconciliation SQL
    /// (absent for the in-memory reference run).
    pub lake: Option<LakeReport>,
    pub cadences: Vec<CadenceReport>,
    /// The story's model on its schedule, the pallet, the business, the bets.
    pub story: Option<crate::story::StoryReport>,
    pub checks: Checks,
    pub notes: Vec<String>,
    /// Where the time went (wall clock: left out of the JSON and the tables, which must be the
    /// same on every run).
    #[serde(skip)]
    pub timings: Timings,
}

/// Wall-clock time of each phase of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// The whole simulation (generator, loader commits, model reads).
    pub simulate: std::time::Duration,
    /// Of which: loader commits to bronze, snapshot expiry, model reads.
    pub loader_commits: std::time::Duration,
    pub expiry: std::time::Duration,
    pub model_reads: std::time::Duration,
    /// Of which: committing the model targets.
    pub target_commits: std::time::Duration,
    /// Of which: the weekly tidy (expiry of target snapshots and catalog versions, orphans).
    pub tidy: std::time::Duration,
    /// The reconciliation SQL.
    pub reconcile: std::time::Duration,
    /// The story's business SQL over the lake, and the report (with the replays of the bets).
    pub story: std::time::Duration,
}

/// The run's settings.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ConfigReport {
    pub start: String,
    pub days: u32,
    pub seed: u64,
    pub lag: String,
    pub loader_every: String,
    pub cadences: Vec<String>,
    pub lookbacks: Vec<String>,
    /// The story's model: `1h→15m`, changing at `change_on`.
    pub story_schedule: String,
    pub change_on: String,
    /// The loader and the runs tick at this offset from midnight.
    pub offset: String,
}

/// One writer's share of the source.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WriterReport {
    pub kind: String,
    pub transactions: u64,
    pub rows: u64,
}

/// What the shop wrote.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SourceReport {
    pub rows: u64,
    pub transactions: u64,
    pub one_row_transactions: u64,
    pub writers: Vec<WriterReport>,
    pub rows_by_event_type: BTreeMap<String, u64>,
    pub sale_side_rows: u64,
    pub listing_rows: u64,
    pub gmv_cents: i64,
    pub longest_transaction_s: i64,
    pub longest_transaction_rows: u32,
}

/// The lake side of a real run.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LakeReport {
    pub bronze_table: String,
    /// Loader commits: one bronze snapshot each.
    pub loader_commits: u64,
    pub snapshots_expired: u64,
    /// The most snapshots bronze's metadata held at once (expiry keeps it bounded).
    pub max_snapshots_retained: u64,
    /// Incremental reads by the models, and the snapshots they read.
    pub incremental_reads: u64,
    pub snapshots_read: u64,
    /// One table per model variant.
    pub target_tables: Vec<String>,
    /// Catalog commits of the targets (each moves every target that kept rows).
    pub target_commits: u64,
    /// False with `--keep-history`: the lake was never tidied.
    pub tidied: bool,
    /// The weekly tidy: catalog versions dropped, and files no kept version reached removed.
    pub catalog_versions_expired: u64,
    pub files_removed: u64,
    /// The reconciliation, as run over the lake.
    pub reconciliation_sql: String,
}

/// Rows one variant lost of one group.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Loss {
    pub group: String,
    pub source_rows: u64,
    pub lost: u64,
    pub lost_pct: f64,
}

/// A day of the reconciliation.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DayCount {
    pub day: String,
    pub source_rows: u64,
    pub model_rows: u64,
    pub missing: u64,
}

/// Source count minus model count per day: expected zero.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Reconciliation {
    pub days: u64,
    pub days_with_missing: u64,
    pub total_missing: u64,
    pub median_missing: u64,
    pub worst_day: Option<DayCount>,
    pub by_day: Vec<DayCount>,
}

/// One variant at one cadence.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VariantReport {
    /// `a`, `a_lb30m`, `b`.
    pub variant: String,
    pub watermark: String,
    pub rows: u64,
    pub lost: u64,
    pub lost_pct: f64,
    pub lost_by_writer: Vec<Loss>,
    /// Sales, reservations and returns vs listing events.
    pub lost_by_side: Vec<Loss>,
    pub lost_by_event_type: Vec<Loss>,
    pub gmv_cents: i64,
    /// Rows the filter selected over all runs (each one written by the merge).
    pub rows_written: u64,
    pub written_per_row_kept: f64,
    /// Look-backs: rows kept by how many times they were written.
    pub write_multiplicity: BTreeMap<u8, u64>,
    pub reconciliation: Reconciliation,
}

/// Survival of one bucket of transaction lengths under (a).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SurvivalBucket {
    pub from_s: i64,
    pub to_s: i64,
    pub transactions: u64,
    pub rows: u64,
    pub rows_kept: u64,
    /// Mean over the bucket's transactions of the share of rows kept.
    pub measured_pct: f64,
    /// Mean over the same transactions of the closed form.
    pub closed_form_pct: f64,
    pub deviation_pp: f64,
    /// The standard error of `measured_pct` the closed form predicts (sampling noise: where the
    /// mark happened to land in each transaction).
    pub standard_error_pp: f64,
    /// Every transaction in the bucket is longer than the cadence.
    pub longer_than_cadence: bool,
}

/// Measured survival against `interval ÷ (2 × duration)` (and `1 − duration ÷ (2 × interval)`
/// for transactions shorter than the interval).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Survival {
    pub buckets: Vec<SurvivalBucket>,
    /// All transactions longer than the cadence, together.
    pub longer_transactions: u64,
    pub longer_measured_pct: f64,
    pub longer_closed_form_pct: f64,
    pub longer_deviation_pp: f64,
    pub longer_standard_error_pp: f64,
    /// The largest |deviation| over buckets longer than the cadence with at least
    /// [`MIN_BUCKET_TRANSACTIONS`] transactions.
    pub max_deviation_pp: f64,
    pub max_deviation_bucket: Option<String>,
}

/// One cadence: every variant over the same snapshots.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CadenceReport {
    pub cadence: String,
    pub cadence_s: i64,
    pub runs: u64,
    pub source_rows: u64,
    pub variants: Vec<VariantReport>,
    pub survival: Survival,
}

/// What must hold, checked on this run.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Checks {
    /// (b) lost no row at any cadence.
    pub snapshot_watermark_loses_nothing: bool,
    /// (a) lost no row of a one-row transaction, and no sale, at any cadence.
    pub one_row_transactions_lose_nothing: bool,
    /// (a)'s loss grows strictly as the cadence shortens.
    pub loss_grows_as_cadence_shortens: bool,
    /// No variant ever wrote a row twice that it should not have seen again.
    pub no_unexpected_repeats: bool,
    /// Every cadence consumed the same source rows.
    pub every_cadence_saw_every_row: bool,
    /// The story's model lost no sale, reservation or return, and its GMV equals the source's.
    pub story_loses_no_sale: bool,
    /// The replay of the story's model over the recorded rows lost exactly what the model did.
    pub replay_matches_the_model: bool,
    /// Merge and append kept exactly the same events.
    pub merge_and_append_lose_the_same_rows: bool,
    /// A look-back of the longest transaction plus one interval lost nothing.
    pub lossless_lookback_loses_nothing: bool,
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round3(100.0 * part as f64 / whole as f64)
    }
}

fn round3(x: f64) -> f64 {
    (x * 1_000.0).round() / 1_000.0
}

/// The closed form: expected share of a transaction's rows that survive a max(event_ts)
/// watermark refreshed every `interval_ms`, for a transaction of `duration_ms`.
pub fn closed_form(duration_ms: i64, interval_ms: i64) -> f64 {
    let (d, i) = (duration_ms as f64, interval_ms as f64);
    if d <= 0.0 || i <= 0.0 {
        1.0
    } else if d >= i {
        i / (2.0 * d)
    } else {
        1.0 - d / (2.0 * i)
    }
}

/// The variance of one transaction's survival under the same model (the mark lands uniformly
/// within one interval): `(interval ÷ duration)² ÷ 12` when longer than the interval, `r/3 − r²/4`
/// with `r = duration ÷ interval` when shorter. For the standard error of a bucket's mean.
pub fn closed_form_variance(duration_ms: i64, interval_ms: i64) -> f64 {
    let (d, i) = (duration_ms as f64, interval_ms as f64);
    if d <= 0.0 || i <= 0.0 {
        0.0
    } else if d >= i {
        (i / d).powi(2) / 12.0
    } else {
        let r = d / i;
        r / 3.0 - r * r / 4.0
    }
}

pub(crate) fn day_label(start_ms: i64, day: i64) -> String {
    chrono::DateTime::from_timestamp_millis(start_ms + day * DAY_MS)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| format!("day {day}"))
}

fn losses(source: &Counts, kept: &Counts) -> (Vec<Loss>, Vec<Loss>, Vec<Loss>) {
    let loss = |group: &str, s: u64, k: u64| Loss {
        group: group.to_string(),
        source_rows: s,
        lost: s.saturating_sub(k),
        lost_pct: pct(s.saturating_sub(k), s),
    };
    let writers = TxKind::ALL
        .iter()
        .map(|k| loss(k.as_str(), source.kind(*k), kept.kind(*k)))
        .collect();
    let sides = vec![
        loss("sales", source.side(true), kept.side(true)),
        loss("listings", source.side(false), kept.side(false)),
    ];
    let types = EventType::ALL
        .iter()
        .map(|t| loss(t.as_str(), source.event_type(*t), kept.event_type(*t)))
        .collect();
    (writers, sides, types)
}

/// Build one reconciliation from per-day counts (source, model).
pub(crate) fn reconciliation(start_ms: i64, days: &BTreeMap<i64, (u64, u64)>) -> Reconciliation {
    let by_day: Vec<DayCount> = days
        .iter()
        .map(|(d, (s, m))| DayCount {
            day: day_label(start_ms, *d),
            source_rows: *s,
            model_rows: *m,
            missing: s.saturating_sub(*m),
        })
        .collect();
    let mut missing: Vec<u64> = by_day.iter().map(|d| d.missing).collect();
    missing.sort_unstable();
    let median_missing = missing
        .get(missing.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0);
    let worst_day = by_day
        .iter()
        .filter(|d| d.missing > 0)
        .max_by(|a, b| a.missing.cmp(&b.missing).then(b.day.cmp(&a.day)))
        .cloned();
    Reconciliation {
        days: by_day.len() as u64,
        days_with_missing: by_day.iter().filter(|d| d.missing > 0).count() as u64,
        total_missing: by_day.iter().map(|d| d.missing).sum(),
        median_missing,
        worst_day,
        by_day,
    }
}

/// The per-day counts the simulation itself kept, for one target.
pub(crate) fn rust_days(truth: &SourceTruth, target: &Target) -> BTreeMap<i64, (u64, u64)> {
    truth
        .counts
        .per_day
        .iter()
        .map(|(d, s)| (*d, (*s, target.counts.per_day.get(d).copied().unwrap_or(0))))
        .collect()
}

fn survival(truth: &SourceTruth, target: &Target, interval_ms: i64) -> Survival {
    struct Acc {
        txs: u64,
        rows: u64,
        kept: u64,
        measured: f64,
        expected: f64,
        variance: f64,
        all_longer: bool,
    }
    let bucket_of = |d_ms: i64| -> u32 { (d_ms / 1_000).max(1).ilog2() };
    let mut acc: BTreeMap<u32, Acc> = BTreeMap::new();
    let mut longer = (0u64, 0.0f64, 0.0f64, 0.0f64);
    let mut add = |d_ms: i64, n_txs: u64, rows: u64, kept: u64, measured_sum: f64| {
        let cf = closed_form(d_ms, interval_ms);
        let var = closed_form_variance(d_ms, interval_ms) * n_txs as f64;
        let a = acc.entry(bucket_of(d_ms)).or_insert(Acc {
            txs: 0,
            rows: 0,
            kept: 0,
            measured: 0.0,
            expected: 0.0,
            variance: 0.0,
            all_longer: true,
        });
        a.txs += n_txs;
        a.rows += rows;
        a.kept += kept;
        a.measured += measured_sum;
        a.expected += cf * n_txs as f64;
        a.variance += var;
        a.all_longer &= d_ms > interval_ms;
        if d_ms > interval_ms {
            longer.0 += n_txs;
            longer.1 += measured_sum;
            longer.2 += cf * n_txs as f64;
            longer.3 += var;
        }
    };
    // One-row transactions all take COMMIT_MS: one entry for all of them.
    let one_row_kept = target.counts.kind(TxKind::Shopper);
    add(
        COMMIT_MS,
        truth.one_row_transactions,
        truth.one_row_transactions,
        one_row_kept,
        one_row_kept as f64,
    );
    for info in truth.multi_row.values() {
        let kept = u64::from(target.count_range(info.first_event_id, info.rows));
        add(
            info.duration_ms,
            1,
            u64::from(info.rows),
            kept,
            kept as f64 / f64::from(info.rows),
        );
    }
    let mut max_dev: Option<(f64, String)> = None;
    let buckets: Vec<SurvivalBucket> = acc
        .into_iter()
        .map(|(k, a)| {
            let (from_s, to_s) = (1i64 << k, 1i64 << (k + 1));
            let measured = 100.0 * a.measured / a.txs.max(1) as f64;
            let expected = 100.0 * a.expected / a.txs.max(1) as f64;
            let dev = measured - expected;
            let se = 100.0 * a.variance.sqrt() / a.txs.max(1) as f64;
            let longer_than_cadence = a.all_longer;
            if longer_than_cadence
                && a.txs >= MIN_BUCKET_TRANSACTIONS
                && max_dev.as_ref().is_none_or(|(m, _)| dev.abs() > m.abs())
            {
                max_dev = Some((
                    dev,
                    format!(
                        "{}–{}",
                        format_duration_ms(from_s * 1_000),
                        format_duration_ms(to_s * 1_000)
                    ),
                ));
            }
            SurvivalBucket {
                from_s,
                to_s,
                transactions: a.txs,
                rows: a.rows,
                rows_kept: a.kept,
                measured_pct: round3(measured),
                closed_form_pct: round3(expected),
                deviation_pp: round3(dev),
                standard_error_pp: round3(se),
                longer_than_cadence,
            }
        })
        .collect();
    let n = longer.0.max(1) as f64;
    Survival {
        buckets,
        longer_transactions: longer.0,
        longer_measured_pct: round3(100.0 * longer.1 / n),
        longer_closed_form_pct: round3(100.0 * longer.2 / n),
        longer_deviation_pp: round3(100.0 * (longer.1 - longer.2) / n),
        longer_standard_error_pp: round3(100.0 * longer.3.sqrt() / n),
        max_deviation_pp: round3(max_dev.as_ref().map_or(0.0, |(d, _)| *d)),
        max_deviation_bucket: max_dev.map(|(_, b)| b),
    }
}

/// Per-day counts for one target, from SQL over the lake or from the simulation.
pub(crate) type DaysOf<'a> = &'a dyn Fn(usize, usize) -> BTreeMap<i64, (u64, u64)>;

/// Assemble the report; `days_of(model, target)` gives each target's reconciliation counts.
pub(crate) fn build(
    plan: &Plan,
    settled_notes: &[String],
    outcome: &Outcome,
    lake: Option<LakeReport>,
    days_of: DaysOf<'_>,
    story_sql: Option<&crate::story::StorySql>,
) -> TideReport {
    let truth = &outcome.truth;
    let start = plan.generator.start_ms;
    let source = SourceReport {
        rows: truth.counts.rows(),
        transactions: truth.transactions.iter().sum(),
        one_row_transactions: truth.one_row_transactions,
        writers: TxKind::ALL
            .iter()
            .map(|k| WriterReport {
                kind: k.as_str().into(),
                transactions: truth.transactions[k.index()],
                rows: truth.counts.kind(*k),
            })
            .collect(),
        rows_by_event_type: EventType::ALL
            .iter()
            .map(|t| (t.as_str().to_string(), truth.counts.event_type(*t)))
            .collect(),
        sale_side_rows: truth.counts.side(true),
        listing_rows: truth.counts.side(false),
        gmv_cents: truth.counts.gmv_cents,
        longest_transaction_s: truth.longest_ms / 1_000,
        longest_transaction_rows: truth.longest_rows,
    };
    let mut cadences = Vec::new();
    for (mi, m) in outcome
        .models
        .iter()
        .enumerate()
        .filter(|(_, m)| m.schedule.is_none())
    {
        let variants = m
            .targets
            .iter()
            .enumerate()
            .map(|(ti, t)| {
                let (lost_by_writer, lost_by_side, lost_by_event_type) =
                    losses(&truth.counts, &t.counts);
                let lost = source.rows.saturating_sub(t.len());
                VariantReport {
                    variant: t.watermark.name(),
                    watermark: t.watermark.describe(),
                    rows: t.len(),
                    lost,
                    lost_pct: pct(lost, source.rows),
                    lost_by_writer,
                    lost_by_side,
                    lost_by_event_type,
                    gmv_cents: t.counts.gmv_cents,
                    rows_written: t.row_writes,
                    written_per_row_kept: if t.is_empty() {
                        0.0
                    } else {
                        round3(t.row_writes as f64 / t.len() as f64)
                    },
                    write_multiplicity: t.write_multiplicity(),
                    reconciliation: reconciliation(start, &days_of(mi, ti)),
                }
            })
            .collect();
        let survival = match m.target(Watermark::MaxEventTs) {
            Some(a) => survival(truth, a, m.cadence_ms),
            None => survival(
                truth,
                &Target::new(Watermark::MaxEventTs, start),
                m.cadence_ms,
            ),
        };
        cadences.push(CadenceReport {
            cadence: format_duration_ms(m.cadence_ms),
            cadence_s: m.cadence_ms / 1_000,
            runs: m.runs,
            source_rows: source.rows,
            variants,
            survival,
        });
    }
    let a_losses: Vec<u64> = outcome
        .models
        .iter()
        .filter(|m| m.schedule.is_none())
        .filter_map(|m| m.target(Watermark::MaxEventTs))
        .map(|t| source.rows.saturating_sub(t.len()))
        .collect();
    let checks = Checks {
        snapshot_watermark_loses_nothing: outcome
            .models
            .iter()
            .filter_map(|m| m.target(Watermark::SnapshotId))
            .all(|t| t.len() == source.rows),
        one_row_transactions_lose_nothing: outcome
            .models
            .iter()
            .filter_map(|m| m.target(Watermark::MaxEventTs))
            .all(|t| {
                t.counts.kind(TxKind::Shopper) == truth.counts.kind(TxKind::Shopper)
                    && t.counts.side(true) == truth.counts.side(true)
            }),
        // Models are sorted by cadence, shortest first: losses must strictly fall.
        loss_grows_as_cadence_shortens: a_losses.windows(2).all(|w| w[0] > w[1]),
        no_unexpected_repeats: outcome
            .models
            .iter()
            .flat_map(|m| m.targets.iter())
            .all(|t| t.unexpected_repeats == 0),
        every_cadence_saw_every_row: outcome
            .models
            .iter()
            .filter_map(|m| m.target(Watermark::SnapshotId))
            .all(|t| t.counts == truth.counts),
        story_loses_no_sale: true,
        replay_matches_the_model: true,
        merge_and_append_lose_the_same_rows: true,
        lossless_lookback_loses_nothing: true,
    };
    let story = outcome
        .models
        .iter()
        .position(|m| m.schedule.is_some())
        .and_then(|mi| {
            let m = &outcome.models[mi];
            let ti = m
                .targets
                .iter()
                .position(|t| t.watermark == Watermark::MaxEventTs)?;
            let name = crate::lakeio::target_name(m, Watermark::MaxEventTs);
            crate::story::build(plan, outcome, &days_of(mi, ti), &name, story_sql)
        });
    let checks = Checks {
        story_loses_no_sale: story.as_ref().is_none_or(|s| {
            s.business.sales_lost == 0
                && s.business.gmv_source_cents == s.business.gmv_model_cents
                && s.lost_by_writer.first().is_some_and(|l| l.lost == 0)
        }),
        replay_matches_the_model: story
            .as_ref()
            .is_none_or(|s| s.bets.replay_matches_the_model),
        merge_and_append_lose_the_same_rows: story
            .as_ref()
            .is_none_or(|s| s.bets.merge_and_append_lose_the_same_rows),
        lossless_lookback_loses_nothing: story
            .as_ref()
            .is_none_or(|s| s.bets.lossless_lookback_lost == 0),
        ..checks
    };
    let mut notes: Vec<String> = settled_notes.to_vec();
    if story.is_some() {
        notes.push(format!(
            "the story's model runs every {} until the change and every {} from it, at {} past the hour like the loader (the story's runs at :04, :19, :34, :49); it is materialized on the lake as tide.fct_listing_event_story_a and _b; its look-backs are replayed",
            format_duration_ms(plan.before_ms),
            format_duration_ms(plan.after_ms),
            format_duration_ms(plan.offset_ms)
        ));
        notes.push(
            "the bets are replayed after the run over the rows bronze delivered, in load order, at the story model's own run instants (nothing regenerated, nothing written): append keeps every selected copy, merge one per event_id; microbatch rebuilds, every run, the batches from (the batch holding the run) − lookback on, from every row visible then, and its first run builds everything; \"after the change\" counts the rows stamped from the change on, and the writes of those rows"
                .to_string(),
        );
        if let Some(note) = story.as_ref().and_then(crate::story::misses_note) {
            notes.push(note);
        }
        notes.push(
            "the catalogue: a listing is live in the shop at an instant when it was created before it and neither sold nor delisted before it; missing = live in the shop and not live in the model (its creation was never recorded); its listed value is its last price (creation or price change) before the instant; the story's own count nets out the model's extras (delists never recorded)"
                .to_string(),
        );
    }
    notes.push(
        "(a) reads only the rows that became visible since its previous run (the snapshots after its last one), \
         filtered by event_ts > max(event_ts); this selects exactly what a full scan with the same filter, merged \
         on event_id, would (unit-tested against that brute force)"
            .to_string(),
    );
    TideReport {
        config: ConfigReport {
            start: day_label(start, 0),
            days: plan.generator.days,
            seed: plan.generator.seed,
            lag: format_duration_ms(plan.lag_ms),
            loader_every: format_duration_ms(plan.loader_every_ms),
            cadences: plan
                .cadences_ms
                .iter()
                .map(|c| format_duration_ms(*c))
                .collect(),
            lookbacks: plan
                .lookbacks_ms
                .iter()
                .map(|c| format_duration_ms(*c))
                .collect(),
            story_schedule: format!(
                "{}→{}",
                format_duration_ms(plan.before_ms),
                format_duration_ms(plan.after_ms)
            ),
            change_on: story
                .as_ref()
                .map(|s| s.change_at.clone())
                .unwrap_or_default(),
            offset: format_duration_ms(plan.offset_ms),
        },
        source,
        lake,
        cadences,
        story,
        checks,
        notes,
        timings: Timings::default(),
    }
}

// ---- Tables for people.

pub(crate) fn n(x: u64) -> String {
    let s = x.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let c = cents.unsigned_abs();
    format!("{sign}€{}.{:02}", n(c / 100), c % 100)
}

pub(crate) fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(Cell::new).collect::<Vec<_>>());
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

pub(crate) fn lost_cell(l: &Loss) -> String {
    format!("{} ({:.2}%)", n(l.lost), l.lost_pct)
}

/// The report as aligned tables for people.
pub fn render_table(r: &TideReport) -> String {
    let mut out = String::new();
    let c = &r.config;
    out.push_str(&format!(
        "The mark the tide left — {} days from {}, seed {}: {} rows in {} transactions.\n",
        c.days,
        c.start,
        c.seed,
        n(r.source.rows),
        n(r.source.transactions)
    ));
    let w: Vec<String> = r
        .source
        .writers
        .iter()
        .map(|w| {
            format!(
                "{} {} rows in {} transactions",
                w.kind,
                n(w.rows),
                n(w.transactions)
            )
        })
        .collect();
    out.push_str(&format!("Writers: {}.\n", w.join("; ")));
    out.push_str(&format!(
        "Longest transaction {} ({} rows). Replication lag {}. Loader commits every {}",
        format_duration_ms(r.source.longest_transaction_s * 1_000),
        n(u64::from(r.source.longest_transaction_rows)),
        c.lag,
        c.loader_every
    ));
    if let Some(l) = &r.lake {
        out.push_str(&format!(
            ": {} bronze snapshots in {}, {} expired along the way (never more than {} held at once); the models made {} incremental reads over {} snapshots.\n",
            n(l.loader_commits),
            l.bronze_table,
            n(l.snapshots_expired),
            n(l.max_snapshots_retained),
            n(l.incremental_reads),
            n(l.snapshots_read),
        ));
        if l.tidied {
            out.push_str(&format!(
                "Once a simulated week and at the end the lake was tidied: {} catalog versions dropped, {} files no kept version reached removed.\n",
                n(l.catalog_versions_expired),
                n(l.files_removed)
            ));
        } else {
            out.push_str("The lake kept its whole history (--keep-history): every catalog version and metadata file.\n");
        }
    } else {
        out.push_str(" (in-memory reference run, no lake).\n");
    }

    if let Some(s) = &r.story {
        crate::story::render_pallet(s, &mut out);
    }
    render_survival(r, &mut out);
    if let Some(s) = &r.story {
        crate::story::render_writers(s, &mut out);
    }
    render_who(r, &mut out);
    render_cadences(r, &mut out);
    if let Some(s) = &r.story {
        crate::story::render_schedule(s, &mut out);
        crate::story::render_business(s, &mut out);
        crate::story::render_reconciliation(s, &mut out);
    }
    render_reconciliation(r, &mut out);
    if let Some(s) = &r.story {
        crate::story::render_bets(s, &mut out);
        crate::story::render_against(s, &mut out);
    }

    let ck = &r.checks;
    out.push_str("\nChecks\n");
    for (ok, what) in [
        (
            ck.snapshot_watermark_loses_nothing,
            "(b) snapshot-id watermark lost no row at any cadence",
        ),
        (
            ck.one_row_transactions_lose_nothing,
            "(a) lost no one-row transaction and no sale at any cadence",
        ),
        (
            ck.loss_grows_as_cadence_shortens,
            "(a)'s loss grows as the cadence shortens",
        ),
        (
            ck.every_cadence_saw_every_row,
            "every cadence consumed the same source rows",
        ),
        (
            ck.no_unexpected_repeats,
            "no variant re-read a row it had consumed",
        ),
        (
            ck.story_loses_no_sale,
            "the story's model lost no sale, reservation or return and no one-row event; its GMV is the source's to the cent",
        ),
        (
            ck.replay_matches_the_model,
            "the replay of the story's schedule over the same rows lost exactly what the lake's model lost",
        ),
        (
            ck.merge_and_append_lose_the_same_rows,
            "merge and append lost exactly the same rows (with and without look-back)",
        ),
        (
            ck.lossless_lookback_loses_nothing,
            "a look-back of the longest transaction plus one interval lost nothing",
        ),
    ] {
        out.push_str(&format!(
            "  [{}] {what}\n",
            if ok { "ok" } else { "FAILED" }
        ));
    }
    if !r.notes.is_empty() {
        out.push_str("\nNotes\n");
        for note in &r.notes {
            out.push_str(&format!("  - {}\n", note.replace('\n', "\n      ")));
        }
    }
    out
}

fn render_cadences(r: &TideReport, out: &mut String) {
    let c = &r.config;
    out.push_str("\nRows lost per cadence — same source rows every time\n");
    let lb: Vec<String> = c
        .lookbacks
        .iter()
        .map(|l| format!("(a) −{l} lost"))
        .collect();
    let mut header: Vec<&str> = vec![
        "cadence",
        "runs",
        "source rows",
        "(a) max(event_ts) lost",
        "(a) loss ×",
    ];
    for l in &lb {
        header.push(l);
        header.push("written / kept");
    }
    header.push("(b) snapshot id lost");
    let mut t = new_table(&header);
    let slowest = r
        .cadences
        .last()
        .and_then(|c| c.variants.first())
        .map(|v| v.lost)
        .unwrap_or(0);
    for cr in &r.cadences {
        let mut row = vec![cr.cadence.clone(), n(cr.runs), n(cr.source_rows)];
        for v in &cr.variants {
            if v.variant == "a" {
                row.push(format!("{} ({:.2}%)", n(v.lost), v.lost_pct));
                row.push(if slowest > 0 {
                    format!("×{:.2}", v.lost as f64 / slowest as f64)
                } else {
                    "–".into()
                });
            } else if v.variant == "b" {
                row.push(format!("{} ({:.2}%)", n(v.lost), v.lost_pct));
            } else {
                row.push(format!("{} ({:.2}%)", n(v.lost), v.lost_pct));
                row.push(format!("{:.2}", v.written_per_row_kept));
            }
        }
        t.add_row(row);
    }
    out.push_str(&format!("{t}\n"));

    let lookbacks: Vec<String> = r
        .cadences
        .iter()
        .flat_map(|cr| cr.variants.iter().map(move |v| (cr, v)))
        .filter(|(_, v)| v.variant.starts_with("a_lb"))
        .filter_map(|(cr, v)| {
            let kept: u64 = v.write_multiplicity.values().sum();
            let (times, rows) = v.write_multiplicity.iter().max_by_key(|(k, n)| (**n, **k))?;
            Some(format!(
                "  {} {}: {} row writes for {} rows kept ({:.2} each); {:.2}% of kept rows written exactly {} times\n",
                cr.cadence,
                v.watermark,
                n(v.rows_written),
                n(v.rows),
                v.written_per_row_kept,
                100.0 * *rows as f64 / kept.max(1) as f64,
                times
            ))
        })
        .collect();
    if !lookbacks.is_empty() {
        out.push_str(
            "Look-backs re-select what they already took (a merge rewrites it each time):\n",
        );
        for l in lookbacks {
            out.push_str(&l);
        }
    }
}

fn render_who(r: &TideReport, out: &mut String) {
    out.push_str("\nWho loses under (a) max(event_ts)\n");
    let mut t = new_table(&[
        "cadence",
        "shoppers (1-row)",
        "pro sellers",
        "wholesale",
        "sales",
        "listings",
        "new listings lost",
        "GMV source",
        "GMV model",
    ]);
    for cr in &r.cadences {
        if let Some(v) = cr.variants.iter().find(|v| v.variant == "a") {
            let mut row = vec![cr.cadence.clone()];
            row.extend(v.lost_by_writer.iter().map(lost_cell));
            row.extend(v.lost_by_side.iter().map(lost_cell));
            row.extend(
                v.lost_by_event_type
                    .iter()
                    .filter(|l| l.group == EventType::ListingCreated.as_str())
                    .map(lost_cell),
            );
            row.push(money(r.source.gmv_cents));
            row.push(money(v.gmv_cents));
            t.add_row(row);
        }
    }
    out.push_str(&format!("{t}\n"));
}

fn render_survival(r: &TideReport, out: &mut String) {
    out.push_str("\nSurvival under (a) by transaction length: measured vs interval ÷ (2 × duration) (1 − duration ÷ (2 × interval) when shorter)\n");
    let mut header = vec!["duration".to_string(), "transactions".to_string()];
    for cr in &r.cadences {
        header.push(format!("{} measured", cr.cadence));
        header.push(format!("{} closed form", cr.cadence));
    }
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let mut t = new_table(&hdr);
    let mut keys: Vec<(i64, i64, u64)> = Vec::new();
    if let Some(first) = r.cadences.first() {
        keys = first
            .survival
            .buckets
            .iter()
            .map(|b| (b.from_s, b.to_s, b.transactions))
            .collect();
    }
    for (from, to, txs) in keys {
        let mut row = vec![
            format!(
                "{}–{}",
                format_duration_ms(from * 1_000),
                format_duration_ms(to * 1_000)
            ),
            n(txs),
        ];
        for cr in &r.cadences {
            match cr.survival.buckets.iter().find(|b| b.from_s == from) {
                Some(b) => {
                    let mark = if b.longer_than_cadence { "*" } else { "" };
                    row.push(format!("{:.2}%{mark}", b.measured_pct));
                    row.push(format!("{:.2}%", b.closed_form_pct));
                }
                None => {
                    row.push("–".into());
                    row.push("–".into());
                }
            }
        }
        t.add_row(row);
    }
    out.push_str(&format!("{t}\n"));
    out.push_str(&format!(
        "* every transaction in the bucket is longer than the cadence. Largest deviation there (buckets of ≥ {MIN_BUCKET_TRANSACTIONS} transactions):\n"
    ));
    for cr in &r.cadences {
        let s = &cr.survival;
        out.push_str(&format!(
            "  {:>5}: {:+.2} pp ({}); all {} longer transactions: {:.2}% measured vs {:.2}% closed form ({:+.2} pp, standard error {:.2} pp)\n",
            cr.cadence,
            s.max_deviation_pp,
            s.max_deviation_bucket.as_deref().unwrap_or("no bucket"),
            n(s.longer_transactions),
            s.longer_measured_pct,
            s.longer_closed_form_pct,
            s.longer_deviation_pp,
            s.longer_standard_error_pp
        ));
    }
}

fn render_reconciliation(r: &TideReport, out: &mut String) {
    out.push_str("\nDaily reconciliation: source count − model count per day (expected 0)\n");
    let mut t = new_table(&[
        "target",
        "days",
        "days short",
        "rows missing",
        "median / day",
        "worst day",
        "written / kept",
    ]);
    for cr in &r.cadences {
        for v in &cr.variants {
            let rc = &v.reconciliation;
            t.add_row(vec![
                format!("{} {}", cr.cadence, v.variant),
                n(rc.days),
                n(rc.days_with_missing),
                n(rc.total_missing),
                n(rc.median_missing),
                rc.worst_day
                    .as_ref()
                    .map(|d| format!("{}: {} of {}", d.day, n(d.missing), n(d.source_rows)))
                    .unwrap_or_else(|| "–".into()),
                format!("{:.2}", v.written_per_row_kept),
            ]);
        }
    }
    out.push_str(&format!("{t}\n"));
    if let Some(l) = &r.lake {
        out.push_str(&format!(
            "Counted by SQL over {} and the {} target tables (the statement is in the JSON; per target it is the story's query, below).\n",
            l.bronze_table,
            l.target_tables.len(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_form_meets_itself_at_the_interval() {
        assert!((closed_form(900_000, 900_000) - 0.5).abs() < 1e-12);
        assert!((closed_form(12_600_000, 900_000) - 900.0 / 25_200.0).abs() < 1e-12);
        assert!((closed_form(2_000, 900_000) - (1.0 - 2.0 / 1_800.0)).abs() < 1e-12);
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(n(4_340_393), "4,340,393");
        assert_eq!(n(12), "12");
        assert_eq!(money(233_047_143), "€2,330,471.43");
    }

    #[test]
    fn reconciliation_summary() {
        let days = BTreeMap::from([(0, (10, 10)), (1, (10, 7)), (2, (10, 9))]);
        let r = reconciliation(1_780_444_800_000, &days);
        assert_eq!(
            (
                r.days,
                r.days_with_missing,
                r.total_missing,
                r.median_missing
            ),
            (3, 2, 4, 1)
        );
        assert_eq!(r.worst_day.map(|d| d.day), Some("2026-06-04".to_string()));
    }
}
