//! The source database as the loader sees it: transactions become visible at commit plus a
//! constant replication lag, and the loader takes everything visible at each of its ticks. Also
//! the ground truth the report compares every model with.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::iter::Peekable;

use crate::generator::{DAY_MS, EventType, Generator, Row, Transaction, TxKind};

/// Row counts by writer, event type, day and sale value: kept for the source and every target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Rows by [`TxKind`] × [`EventType`].
    pub by_kind_type: [[u64; 6]; 3],
    /// Sum of `price_cents` over `sold` rows.
    pub gmv_cents: i64,
    /// Rows by day of `event_ts` (0 = the window's first day).
    pub per_day: BTreeMap<i64, u64>,
    /// From this instant on (by `event_ts`) rows are also counted in `after` (the story's
    /// schedule change); `None`: not split.
    pub split_ms: Option<i64>,
    /// Rows with `event_ts` at or after `split_ms`, by [`TxKind`] × [`EventType`].
    pub after: [[u64; 6]; 3],
    /// Sum of `price_cents` over `sold` rows at or after `split_ms`.
    pub after_gmv_cents: i64,
}

impl Counts {
    /// Count one row; `start_ms` is 00:00 UTC of day 0.
    pub fn add(&mut self, row: &Row, start_ms: i64) {
        self.by_kind_type[row.writer().index()][row.event_type.index()] += 1;
        if row.event_type == EventType::Sold {
            self.gmv_cents += row.price_cents;
        }
        if self.split_ms.is_some_and(|s| row.event_ts_ms >= s) {
            self.after[row.writer().index()][row.event_type.index()] += 1;
            if row.event_type == EventType::Sold {
                self.after_gmv_cents += row.price_cents;
            }
        }
        *self
            .per_day
            .entry(day_of(row.event_ts_ms, start_ms))
            .or_default() += 1;
    }

    /// All rows.
    pub fn rows(&self) -> u64 {
        self.by_kind_type.iter().flatten().sum()
    }

    /// Counts that also split at `split_ms` (`None`: no split).
    pub fn split_at(split_ms: Option<i64>) -> Self {
        Counts {
            split_ms,
            ..Counts::default()
        }
    }

    /// Rows at or after the split, by `kind` (`None`: all).
    pub fn after_kind(&self, kind: Option<TxKind>) -> u64 {
        self.after
            .iter()
            .enumerate()
            .filter(|(i, _)| kind.is_none_or(|k| k.index() == *i))
            .flat_map(|(_, r)| r.iter())
            .sum()
    }

    /// Rows at or after the split of `event_type`.
    pub fn after_event_type(&self, t: EventType) -> u64 {
        self.after.iter().map(|k| k[t.index()]).sum()
    }

    /// Rows written by `kind`.
    pub fn kind(&self, kind: TxKind) -> u64 {
        self.by_kind_type[kind.index()].iter().sum()
    }

    /// Rows of `event_type`.
    pub fn event_type(&self, t: EventType) -> u64 {
        self.by_kind_type.iter().map(|k| k[t.index()]).sum()
    }

    /// Sales, reservations and returns (`sale == true`) or listing events.
    pub fn side(&self, sale: bool) -> u64 {
        EventType::ALL
            .into_iter()
            .filter(|t| t.is_sale_side() == sale)
            .map(|t| self.event_type(t))
            .sum()
    }
}

/// The day index of a timestamp (0 = the window's first day).
pub fn day_of(ts_ms: i64, start_ms: i64) -> i64 {
    (ts_ms - start_ms).div_euclid(DAY_MS)
}

/// A multi-row transaction, as the survival analysis needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxInfo {
    pub kind: TxKind,
    /// Its rows are the events `first_event_id..first_event_id + rows`.
    pub first_event_id: i64,
    pub rows: u32,
    pub duration_ms: i64,
}

/// Everything the source wrote (as loaded), for comparison with the models.
#[derive(Clone, Debug, Default)]
pub struct SourceTruth {
    pub counts: Counts,
    /// Transactions by [`TxKind`].
    pub transactions: [u64; 3],
    /// One-row transactions (all take exactly [`crate::generator::COMMIT_MS`]).
    pub one_row_transactions: u64,
    /// Every transaction of more than one row, by id.
    pub multi_row: BTreeMap<i64, TxInfo>,
    /// The longest transaction and its rows.
    pub longest_ms: i64,
    pub longest_rows: u32,
    /// The pallet placed by hand (the story's 27 August pallet): the transaction, its start and
    /// its commit.
    pub big_pallet: Option<(TxInfo, i64, i64)>,
    /// Every pallet: the transaction and its commit (for the losses per pallet).
    pub pallets: Vec<(TxInfo, i64)>,
}

impl SourceTruth {
    fn record(&mut self, tx: &Transaction, start_ms: i64) {
        self.transactions[tx.kind.index()] += 1;
        for r in &tx.rows {
            self.counts.add(r, start_ms);
        }
        let rows = u32::try_from(tx.rows.len()).unwrap_or(u32::MAX);
        let info = TxInfo {
            kind: tx.kind,
            first_event_id: tx.rows.first().map_or(0, |r| r.event_id),
            rows,
            duration_ms: tx.duration_ms(),
        };
        if rows == 1 {
            self.one_row_transactions += 1;
        } else {
            self.multi_row.insert(tx.tx_id, info);
        }
        if tx.kind == TxKind::Wholesale {
            self.pallets.push((info, tx.commit_ms));
            if tx.placed_by_hand {
                self.big_pallet = Some((info, tx.start_ms, tx.commit_ms));
            }
        }
        if tx.duration_ms() > self.longest_ms {
            self.longest_ms = tx.duration_ms();
            self.longest_rows = rows;
        }
    }
}

struct Pending {
    visible_ms: i64,
    tx: Transaction,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.visible_ms, self.tx.tx_id) == (o.visible_ms, o.tx.tx_id)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.visible_ms, self.tx.tx_id).cmp(&(o.visible_ms, o.tx.tx_id))
    }
}

/// Replays the generator in visibility order: what a loader polling the source finds.
pub struct Visibility {
    generator: Peekable<Generator>,
    pending: BinaryHeap<Reverse<Pending>>,
    lag_ms: i64,
    start_ms: i64,
    truth: SourceTruth,
}

impl Visibility {
    /// Rows become visible `lag_ms` (≥ 0) after their transaction commits.
    pub fn new(generator: Generator, start_ms: i64, lag_ms: i64) -> Self {
        Visibility {
            generator: generator.peekable(),
            pending: BinaryHeap::new(),
            lag_ms: lag_ms.max(0),
            start_ms,
            truth: SourceTruth::default(),
        }
    }

    /// Also count the rows at or after `split_ms` (the schedule change) apart.
    pub fn with_split(mut self, split_ms: Option<i64>) -> Self {
        self.truth.counts.split_ms = split_ms;
        self
    }

    /// Every row that became visible at or before `t` and was not taken yet, in visibility order
    /// (transactions visible at the same instant by id; rows in the order they were written).
    pub fn take_visible(&mut self, t: i64) -> Vec<Row> {
        // A transaction that starts after `t` commits after `t`: nothing later can be visible.
        while let Some(tx) = self.generator.next_if(|tx| tx.start_ms <= t) {
            let visible_ms = tx.commit_ms + self.lag_ms;
            self.pending.push(Reverse(Pending { visible_ms, tx }));
        }
        let mut rows = Vec::new();
        while self.pending.peek().is_some_and(|p| p.0.visible_ms <= t) {
            if let Some(Reverse(p)) = self.pending.pop() {
                self.truth.record(&p.tx, self.start_ms);
                rows.extend_from_slice(&p.tx.rows);
            }
        }
        rows
    }

    /// True when every transaction has become visible and been taken.
    pub fn done(&mut self) -> bool {
        self.pending.is_empty() && self.generator.peek().is_none()
    }

    /// What was taken so far.
    pub fn truth(&self) -> &SourceTruth {
        &self.truth
    }

    /// The truth, when done.
    pub fn into_truth(self) -> SourceTruth {
        self.truth
    }
}
