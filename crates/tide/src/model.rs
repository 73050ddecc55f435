//! The incremental model `fct_listing_event`, three ways, as pure state machines.
//!
//! Every run of a model at one cadence reads the rows that became visible in bronze since its
//! previous run — the rows the bronze snapshots after the model's stored snapshot id added —
//! and hands them to each variant:
//!
//! * [`Watermark::MaxEventTs`] (a): keep the rows with `event_ts > max(event_ts)` of the
//!   target. The mark only rises, so a row visible at an earlier run with `event_ts` above
//!   today's mark was above that run's mark too and was taken then: looking only at the newly
//!   visible rows selects exactly what scanning the whole source with the same filter and
//!   merging on `event_id` would (proven against that brute force in the tests below).
//! * [`Watermark::MaxEventTsLookback`] (a + look-back): the same filter minus a look-back. The
//!   filter re-selects rows it already took, so the variant keeps a buffer of the visible rows
//!   that can still pass it (those above `mark − look-back`; the mark only rises, so a row that
//!   falls below never passes again) and counts every selected row as written.
//! * [`Watermark::SnapshotId`] (b): keep everything newly visible. Its watermark is the bronze
//!   snapshot id it consumed through, held by the [`Model`].

use std::collections::BTreeMap;

use crate::generator::Row;
use crate::source::Counts;

/// How a variant decides which rows are new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Watermark {
    /// `where event_ts > (select max(event_ts) from this)`.
    MaxEventTs,
    /// `where event_ts > (select max(event_ts) from this) - lookback`, merged on `event_id`.
    MaxEventTsLookback { lookback_ms: i64 },
    /// The last bronze snapshot id consumed; read the snapshots after it.
    SnapshotId,
}

impl Watermark {
    /// A short name: `a`, `a_lb30m`, `b`.
    pub fn name(&self) -> String {
        match self {
            Watermark::MaxEventTs => "a".into(),
            Watermark::MaxEventTsLookback { lookback_ms } => {
                format!("a_lb{}", crate::args::format_duration_ms(*lookback_ms))
            }
            Watermark::SnapshotId => "b".into(),
        }
    }

    /// What the model's filter says.
    pub fn describe(&self) -> String {
        match self {
            Watermark::MaxEventTs => "event_ts > max(event_ts)".into(),
            Watermark::MaxEventTsLookback { lookback_ms } => format!(
                "event_ts > max(event_ts) - {}",
                crate::args::format_duration_ms(*lookback_ms)
            ),
            Watermark::SnapshotId => "bronze snapshot id".into(),
        }
    }
}

/// A growable set of dense event ids.
#[derive(Clone, Debug, Default)]
pub struct IdSet {
    words: Vec<u64>,
    len: u64,
}

impl IdSet {
    /// Insert; true when it was not there yet.
    pub fn insert(&mut self, id: i64) -> bool {
        let Ok(id) = usize::try_from(id) else {
            return false;
        };
        let (w, b) = (id / 64, id % 64);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let had = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        if !had {
            self.len += 1;
        }
        !had
    }

    /// Membership.
    pub fn contains(&self, id: i64) -> bool {
        usize::try_from(id)
            .ok()
            .and_then(|id| self.words.get(id / 64).map(|w| w & (1 << (id % 64)) != 0))
            .unwrap_or(false)
    }

    /// How many ids.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One variant's target table, as counts and membership.
#[derive(Clone, Debug)]
pub struct Target {
    pub watermark: Watermark,
    members: IdSet,
    max_event_ts: Option<i64>,
    /// What the target holds.
    pub counts: Counts,
    /// Rows the filter selected over all runs (a merge writes each of them).
    pub row_writes: u64,
    /// Rows selected that the target already held and the variant did not expect to see again
    /// (for (a) and (b) this must stay zero).
    pub unexpected_repeats: u64,
    /// For look-backs: how many times each row was written, by event id.
    writes: Vec<u8>,
    /// For look-backs: visible rows still above `mark − look-back`.
    buffer: Vec<Row>,
    /// Rows kept since the target was last committed.
    pending: Vec<Row>,
    start_ms: i64,
}

impl Target {
    /// An empty target; `start_ms` is 00:00 UTC of day 0 (for per-day counts).
    pub fn new(watermark: Watermark, start_ms: i64) -> Self {
        Self::split(watermark, start_ms, None)
    }

    /// An empty target that also counts the rows at or after `split_ms` apart.
    pub fn split(watermark: Watermark, start_ms: i64, split_ms: Option<i64>) -> Self {
        Target {
            watermark,
            members: IdSet::default(),
            max_event_ts: None,
            counts: Counts::split_at(split_ms),
            row_writes: 0,
            unexpected_repeats: 0,
            writes: Vec::new(),
            buffer: Vec::new(),
            pending: Vec::new(),
            start_ms,
        }
    }

    /// How many of the events `first..first + n` the target holds.
    pub fn count_range(&self, first: i64, n: u32) -> u32 {
        (first..first + i64::from(n))
            .filter(|id| self.members.contains(*id))
            .count() as u32
    }

    /// The event ids the target holds.
    pub fn members(&self) -> &IdSet {
        &self.members
    }

    /// Does the target hold this event?
    pub fn contains(&self, event_id: i64) -> bool {
        self.members.contains(event_id)
    }

    /// Rows held.
    pub fn len(&self) -> u64 {
        self.members.len()
    }

    /// True when the target holds nothing.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The rows kept since the last call: what the next commit of the target writes.
    pub fn take_pending(&mut self) -> Vec<Row> {
        std::mem::take(&mut self.pending)
    }

    /// `max(event_ts)` over the target.
    pub fn max_event_ts(&self) -> Option<i64> {
        self.max_event_ts
    }

    /// For look-backs: kept rows by how many times they were written.
    pub fn write_multiplicity(&self) -> BTreeMap<u8, u64> {
        let mut out = BTreeMap::new();
        for (id, w) in self.writes.iter().enumerate() {
            if *w > 0 && self.members.contains(id as i64) {
                *out.entry(*w).or_default() += 1;
            }
        }
        out
    }

    fn keep(&mut self, row: &Row) -> bool {
        if !self.members.insert(row.event_id) {
            return false;
        }
        self.counts.add(row, self.start_ms);
        self.pending.push(*row);
        true
    }

    /// One model run over the rows that became visible since the previous run.
    pub fn run(&mut self, newly_visible: &[Row]) {
        let mark = self.max_event_ts;
        let mut new_max = mark;
        match self.watermark {
            Watermark::MaxEventTs | Watermark::SnapshotId => {
                for row in newly_visible {
                    let pass = match (self.watermark, mark) {
                        (Watermark::MaxEventTs, Some(m)) => row.event_ts_ms > m,
                        _ => true,
                    };
                    if !pass {
                        continue;
                    }
                    self.row_writes += 1;
                    if self.keep(row) {
                        new_max = new_max.max(Some(row.event_ts_ms));
                    } else {
                        self.unexpected_repeats += 1;
                    }
                }
            }
            Watermark::MaxEventTsLookback { lookback_ms } => {
                self.buffer.extend_from_slice(newly_visible);
                let floor = mark.map(|m| m - lookback_ms);
                let buffer = std::mem::take(&mut self.buffer);
                for row in &buffer {
                    if floor.is_some_and(|f| row.event_ts_ms <= f) {
                        continue;
                    }
                    self.row_writes += 1;
                    let Ok(i) = usize::try_from(row.event_id) else {
                        continue;
                    };
                    if i >= self.writes.len() {
                        self.writes.resize(i + 1, 0);
                    }
                    self.writes[i] = self.writes[i].saturating_add(1);
                    if self.keep(row) {
                        new_max = new_max.max(Some(row.event_ts_ms));
                    }
                }
                self.buffer = buffer;
                // The mark only rises: rows at or below the next floor never pass again.
                if let Some(f) = new_max.map(|m| m - lookback_ms) {
                    self.buffer.retain(|r| r.event_ts_ms > f);
                }
            }
        }
        self.max_event_ts = new_max;
    }
}

/// The model at one cadence (or on the story's schedule): its variants side by side over the
/// same reads.
#[derive(Clone, Debug)]
pub struct Model {
    /// The interval (from the schedule change on, for the story's model).
    pub cadence_ms: i64,
    /// The story's model: every `before_ms` until `switch_ms`, then every `cadence_ms`.
    pub schedule: Option<Schedule>,
    /// The bronze snapshot id consumed through: variant (b)'s watermark, and the point each run
    /// reads after.
    pub consumed: Option<i64>,
    pub targets: Vec<Target>,
    pub runs: u64,
    /// When the next run is due (ms since the epoch).
    pub next_run_ms: i64,
    /// When the last run happened.
    pub last_run_ms: Option<i64>,
    /// Every run's instant (the replays of the story's bets run at the same instants).
    pub run_log: Vec<i64>,
}

/// A schedule that changes once: every `before_ms` until `switch_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub switch_ms: i64,
    pub before_ms: i64,
}

/// Which model a [`Model`] is, its schedule and its targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub cadence_ms: i64,
    pub schedule: Option<Schedule>,
    pub lookbacks_ms: Vec<i64>,
    /// 00:00 UTC of day 0.
    pub start_ms: i64,
    /// Runs at `start_ms + offset_ms + k × interval`.
    pub offset_ms: i64,
    /// Counts also split here (the schedule change).
    pub split_ms: Option<i64>,
}

impl Model {
    /// A model running every `cadence_ms` from `start_ms` (first run one cadence in), with (a),
    /// one (a + look-back) per look-back, and (b).
    pub fn new(cadence_ms: i64, lookbacks_ms: &[i64], start_ms: i64) -> Self {
        Self::from_spec(&ModelSpec {
            cadence_ms,
            schedule: None,
            lookbacks_ms: lookbacks_ms.to_vec(),
            start_ms,
            offset_ms: 0,
            split_ms: None,
        })
    }

    /// The model a spec describes.
    pub fn from_spec(spec: &ModelSpec) -> Self {
        let start_ms = spec.start_ms;
        let mut targets = vec![Target::split(
            Watermark::MaxEventTs,
            start_ms,
            spec.split_ms,
        )];
        for lb in &spec.lookbacks_ms {
            targets.push(Target::split(
                Watermark::MaxEventTsLookback { lookback_ms: *lb },
                start_ms,
                spec.split_ms,
            ));
        }
        targets.push(Target::split(
            Watermark::SnapshotId,
            start_ms,
            spec.split_ms,
        ));
        let mut m = Model {
            cadence_ms: spec.cadence_ms,
            schedule: spec.schedule,
            consumed: None,
            targets,
            runs: 0,
            next_run_ms: 0,
            last_run_ms: None,
            run_log: Vec::new(),
        };
        let first = start_ms + spec.offset_ms;
        m.next_run_ms = first + m.cadence_at(first);
        m
    }

    /// The interval after a run at `t`.
    pub fn cadence_at(&self, t: i64) -> i64 {
        match self.schedule {
            Some(s) if t < s.switch_ms => s.before_ms,
            _ => self.cadence_ms,
        }
    }

    /// `15m`, or `1h→15m` for the story's model.
    pub fn label(&self) -> String {
        match self.schedule {
            Some(s) => format!(
                "{}→{}",
                crate::args::format_duration_ms(s.before_ms),
                crate::args::format_duration_ms(self.cadence_ms)
            ),
            None => crate::args::format_duration_ms(self.cadence_ms),
        }
    }

    /// One run at `now_ms` over the rows bronze added after `self.consumed` through `through`.
    pub fn run(&mut self, now_ms: i64, through: Option<i64>, newly_visible: &[Row]) {
        for t in &mut self.targets {
            t.run(newly_visible);
        }
        if through.is_some() {
            self.consumed = through;
        }
        self.runs += 1;
        self.run_log.push(now_ms);
        self.last_run_ms = Some(now_ms);
        self.next_run_ms = now_ms + self.cadence_at(now_ms);
    }

    /// The target of one variant.
    pub fn target(&self, w: Watermark) -> Option<&Target> {
        self.targets.iter().find(|t| t.watermark == w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::{Generator, GeneratorConfig, TxKind};
    use crate::source::Visibility;

    /// The model as dbt runs it: scan every visible row, filter on the mark, merge on the key.
    struct BruteForce {
        lookback_ms: i64,
        members: IdSet,
        max: Option<i64>,
        writes: u64,
    }

    impl BruteForce {
        fn run(&mut self, visible: &[Row]) {
            let floor = self.max.map(|m| m - self.lookback_ms);
            let selected: Vec<&Row> = visible
                .iter()
                .filter(|r| floor.is_none_or(|f| r.event_ts_ms > f))
                .collect();
            self.writes += selected.len() as u64;
            for r in selected {
                if self.members.insert(r.event_id) {
                    self.max = self.max.max(Some(r.event_ts_ms));
                }
            }
        }
    }

    fn window() -> (GeneratorConfig, i64) {
        let cfg = GeneratorConfig {
            start_ms: 1_780_444_800_000,
            first_weekday: 2, // Wednesday: Thursday brings a pallet
            days: 2,
            seed: 11,
            big_pallet: None,
        };
        (cfg.clone(), cfg.start_ms)
    }

    /// Drive both over the same visibility stream and compare after every run.
    fn compare(cadence_ms: i64, lookback_ms: i64) -> (u64, u64) {
        let (cfg, start) = window();
        let mut vis = Visibility::new(Generator::new(cfg), start, 60_000);
        let w = if lookback_ms == 0 {
            Watermark::MaxEventTs
        } else {
            Watermark::MaxEventTsLookback { lookback_ms }
        };
        let mut fast = Target::new(w, start);
        let mut brute = BruteForce {
            lookback_ms,
            members: IdSet::default(),
            max: None,
            writes: 0,
        };
        let mut all_visible: Vec<Row> = Vec::new();
        let mut t = start;
        let mut taken = 0;
        while !vis.done() {
            t += cadence_ms;
            let new = vis.take_visible(t);
            all_visible.extend_from_slice(&new);
            fast.run(&new);
            brute.run(&all_visible);
            assert_eq!(fast.len(), brute.members.len(), "run at {t}");
            assert_eq!(fast.max_event_ts(), brute.max, "run at {t}");
            assert_eq!(fast.row_writes, brute.writes, "run at {t}");
            taken += new.len() as u64;
        }
        for r in &all_visible {
            assert_eq!(
                fast.contains(r.event_id),
                brute.members.contains(r.event_id)
            );
        }
        assert_eq!(fast.unexpected_repeats, 0);
        (taken, fast.len())
    }

    #[test]
    fn reading_only_new_rows_equals_scanning_everything() {
        let (source, kept) = compare(15 * 60_000, 0);
        assert!(kept < source, "the pallet loses rows: {kept} of {source}");
    }

    #[test]
    fn lookback_buffer_equals_scanning_everything() {
        // A look-back shorter than the early-season pallet (about half an hour), so that it
        // still loses rows and the buffer is exercised on both sides of the floor.
        let (source, kept) = compare(15 * 60_000, 10 * 60_000);
        assert!(kept < source, "the pallet loses rows: {kept} of {source}");
    }

    #[test]
    fn snapshot_watermark_keeps_everything_once() {
        let (cfg, start) = window();
        let mut vis = Visibility::new(Generator::new(cfg), start, 60_000);
        let mut m = Model::new(5 * 60_000, &[], start);
        let mut t = start;
        while !vis.done() {
            t += 5 * 60_000;
            let rows = vis.take_visible(t);
            m.run(t, Some(t), &rows);
        }
        let b = m
            .target(Watermark::SnapshotId)
            .map(|t| (t.len(), t.unexpected_repeats));
        assert_eq!(b, Some((vis.truth().counts.rows(), 0)));
    }

    #[test]
    fn one_row_transactions_are_never_below_the_mark() {
        // Structural: a one-row transaction's row is stamped COMMIT_MS before its commit, and
        // every row of every earlier-committed transaction was stamped at least that long
        // before its own (earlier) commit.
        let (cfg, start) = window();
        for cadence in [60_000, 5 * 60_000, 7 * 60_000] {
            let mut vis = Visibility::new(Generator::new(cfg.clone()), start, 60_000);
            let mut a = Target::new(Watermark::MaxEventTs, start);
            let mut t = start;
            while !vis.done() {
                t += cadence;
                a.run(&vis.take_visible(t));
            }
            let truth = vis.truth();
            assert_eq!(
                a.counts.kind(TxKind::Shopper),
                truth.counts.kind(TxKind::Shopper)
            );
        }
    }

    #[test]
    fn id_set() {
        let mut s = IdSet::default();
        assert!(s.insert(0));
        assert!(s.insert(129));
        assert!(!s.insert(129));
        assert!(!s.insert(-1));
        assert!(s.contains(129) && !s.contains(128) && !s.contains(10_000));
        assert_eq!(s.len(), 2);
    }
}
