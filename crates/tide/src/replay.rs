//! The story's bets, replayed over the same rows: after the run, the rows bronze delivered (in
//! load order, [`Stream`]) are replayed at the story model's own run instants through the
//! strategies the story weighs — `max(event_ts)` with and without a look-back, merged on the
//! key or appended, and dbt's microbatch (batches by event hour or day, rebuilding the last
//! `lookback + 1` of them every run). Nothing is regenerated and nothing is written to the lake:
//! each strategy is a few counters per row, and each is checked against the model the lake
//! materialized where they overlap.

use std::collections::BTreeMap;

use crate::experiment::{Seen, Stream};
use crate::generator::{DAY_MS, TxKind};

const HOUR_MS: i64 = 3_600_000;

/// Rows by phase (before, after the schedule change) and writer.
pub(crate) type ByPhase = [[u64; 3]; 2];

fn phase(ts: i64, split_ms: i64) -> usize {
    usize::from(ts >= split_ms)
}

/// Calls `f(now, rows)` for every run with the rows that became visible since the previous run.
fn for_each_run(stream: &Stream, runs: &[i64], mut f: impl FnMut(i64, &[Seen])) {
    let mut load = 0;
    let mut from = 0;
    for &now in runs {
        let mut to = from;
        while load < stream.loads.len() && stream.loads[load].0 <= now {
            to = stream.loads[load].1;
            load += 1;
        }
        f(now, &stream.rows[from..to]);
        from = to;
    }
}

/// A `max(event_ts)` model (with a look-back when `lookback_ms > 0`), merged on the key or
/// appended: what it kept and what it wrote.
#[derive(Clone, Debug)]
pub(crate) struct TsOutcome {
    pub append: bool,
    /// How many times each event was written (0: never, lost).
    pub writes: Vec<u8>,
    pub lost: ByPhase,
    /// Rows written, by the phase of the row.
    pub written: [u64; 2],
    /// The instant of the run that first saw `watch` and the mark it filtered with.
    pub watched: Option<(i64, Option<i64>)>,
}

impl TsOutcome {
    /// Does the model hold the event?
    pub fn kept(&self, id: i64) -> bool {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.writes.get(i))
            .is_some_and(|w| *w > 0)
    }

    /// Kept rows of one phase by how many times they were written.
    pub fn multiplicity(&self, stream: &Stream, split_ms: i64, ph: usize) -> BTreeMap<u8, u64> {
        let mut out = BTreeMap::new();
        for r in &stream.rows {
            let w = self.writes.get(r.event_id as usize).copied().unwrap_or(0);
            if w > 0 && phase(r.event_ts_ms, split_ms) == ph {
                *out.entry(w).or_default() += 1;
            }
        }
        out
    }
}

/// Replay `where event_ts > max(event_ts) − lookback`. Merge keeps one copy per event and takes
/// the mark over those; append keeps every selected copy and takes the mark over all of them.
pub(crate) fn timestamp_model(
    stream: &Stream,
    runs: &[i64],
    split_ms: i64,
    lookback_ms: i64,
    append: bool,
    watch: Option<i64>,
) -> TsOutcome {
    let n = stream.rows.iter().map(|r| r.event_id as usize + 1).max();
    let mut out = TsOutcome {
        append,
        writes: vec![0; n.unwrap_or(0)],
        lost: [[0; 3]; 2],
        written: [0; 2],
        watched: None,
    };
    let mut mark: Option<i64> = None;
    // Visible rows that can still pass the filter (above `mark − lookback`).
    let mut buffer: Vec<Seen> = Vec::new();
    for_each_run(stream, runs, |now, new| {
        if let Some(w) = watch
            && out.watched.is_none()
            && new.iter().any(|r| i64::from(r.event_id) == w)
        {
            out.watched = Some((now, mark));
        }
        let floor = mark.map(|m| m - lookback_ms);
        let mut new_mark = mark;
        let passes = |r: &Seen| floor.is_none_or(|f| r.event_ts_ms > f);
        for r in new.iter().filter(|r| !passes(r)) {
            // Never selected now, never again: the mark only rises.
            out.lost[phase(r.event_ts_ms, split_ms)][r.kind.index()] += 1;
        }
        if lookback_ms > 0 {
            buffer.extend(new.iter().filter(|r| passes(r)));
        } else {
            buffer.clear();
            buffer.extend(new.iter().filter(|r| passes(r)));
        }
        for r in &buffer {
            let w = &mut out.writes[r.event_id as usize];
            // Merge: a row already held does not move the mark again (it is the same row).
            if append || *w == 0 {
                new_mark = new_mark.max(Some(r.event_ts_ms));
            }
            *w = w.saturating_add(1);
            out.written[phase(r.event_ts_ms, split_ms)] += 1;
        }
        mark = new_mark;
        if let Some(f) = mark.map(|m| m - lookback_ms) {
            buffer.retain(|r| r.event_ts_ms > f);
        }
    });
    out
}

/// A dbt microbatch model: batches of `batch_ms` by event time; every run rebuilds the batch
/// holding `now` and the `lookback` before it from every row visible then (the first run builds
/// everything). A row is lost when its batch has left the window before the row became visible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MicrobatchOutcome {
    pub batch_ms: i64,
    pub lookback: u32,
    pub lost: ByPhase,
    /// Row-writes, by the phase of the batch written.
    pub written: [u64; 2],
    /// Runs in each phase.
    pub runs: [u64; 2],
}

pub(crate) fn microbatch(
    stream: &Stream,
    runs: &[i64],
    split_ms: i64,
    batch_ms: i64,
    lookback: u32,
) -> MicrobatchOutcome {
    let mut out = MicrobatchOutcome {
        batch_ms,
        lookback,
        lost: [[0; 3]; 2],
        written: [0; 2],
        runs: [0; 2],
    };
    let mut batches: BTreeMap<i64, u64> = BTreeMap::new();
    let mut first = true;
    for_each_run(stream, runs, |now, new| {
        let window_start = if first {
            i64::MIN
        } else {
            now.div_euclid(batch_ms) * batch_ms - i64::from(lookback) * batch_ms
        };
        first = false;
        for r in new {
            let b = r.event_ts_ms.div_euclid(batch_ms) * batch_ms;
            if b < window_start {
                out.lost[phase(r.event_ts_ms, split_ms)][r.kind.index()] += 1;
            } else {
                *batches.entry(b).or_default() += 1;
            }
        }
        batches.retain(|b, _| *b >= window_start);
        for (b, n) in &batches {
            out.written[phase(*b, split_ms)] += n;
        }
        out.runs[phase(now, split_ms)] += 1;
    });
    out
}

/// The microbatch settings replayed: by event hour with look-back 0 to 8, by event day with 0
/// and 1 (dbt's default look-back is 1).
pub(crate) fn microbatch_settings() -> Vec<(i64, u32)> {
    (0..=8)
        .map(|l| (HOUR_MS, l))
        .chain((0..=1).map(|l| (DAY_MS, l)))
        .collect()
}

/// Lost rows of one phase (`None`: both), of one writer (`None`: all).
pub(crate) fn lost_of(lost: &ByPhase, ph: Option<usize>, kind: Option<TxKind>) -> u64 {
    lost.iter()
        .enumerate()
        .filter(|(p, _)| ph.is_none_or(|x| x == *p))
        .flat_map(|(_, k)| k.iter().enumerate())
        .filter(|(k, _)| kind.is_none_or(|x| x.index() == *k))
        .map(|(_, n)| n)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(ts: i64, id: u32) -> Seen {
        Seen {
            event_ts_ms: ts,
            event_id: id,
            kind: TxKind::ProSeller,
        }
    }

    /// Two runs: a short row, then a long transaction whose first rows are below the mark.
    fn stream() -> Stream {
        Stream {
            rows: vec![seen(100, 0), seen(50, 1), seen(150, 2), seen(200, 3)],
            loads: vec![(110, 1), (210, 4)],
        }
    }

    #[test]
    fn a_timestamp_mark_drops_what_lands_below_it() {
        let s = stream();
        let a = timestamp_model(&s, &[120, 220], i64::MAX, 0, false, Some(1));
        assert_eq!(lost_of(&a.lost, None, None), 1);
        assert!(!a.kept(1) && a.kept(2) && a.kept(3));
        assert_eq!(a.watched, Some((220, Some(100))));
        // A look-back of 60 takes it, and writes row 0 a second time (100 > 100 − 60).
        let lb = timestamp_model(&s, &[120, 220], i64::MAX, 60, false, None);
        assert_eq!(lost_of(&lb.lost, None, None), 0);
        assert_eq!(lb.written, [5, 0]);
        assert_eq!(lb.writes, vec![2, 1, 1, 1]);
        let append = timestamp_model(&s, &[120, 220], i64::MAX, 60, true, None);
        assert_eq!(append.writes, lb.writes);
    }

    #[test]
    fn a_microbatch_rebuilds_its_window() {
        let s = stream();
        // Batches of 100: the second run (at 220) rebuilds batches 100 and 200 with lookback 1.
        let m = microbatch(&s, &[120, 220], i64::MAX, 100, 1);
        assert_eq!(
            lost_of(&m.lost, None, None),
            1,
            "row 1 (batch 0) arrived too late"
        );
        assert_eq!(m.written, [1 + 3, 0]);
        let m0 = microbatch(&s, &[120, 220], i64::MAX, 100, 2);
        assert_eq!(lost_of(&m0.lost, None, None), 0);
    }
}
