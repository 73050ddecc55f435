//! The experiment's clock: the loader commits what became visible on its cadence, and each
//! model runs on its own, reading bronze after the snapshot it consumed last.
//!
//! Bronze is anything that takes loader commits and answers "the rows added after snapshot S"
//! (`Bronze`): the lake's Iceberg table in a real run, a list in memory for the reference run
//! the tests compare it with.

use std::collections::VecDeque;

use indicatif::ProgressBar;

use crate::TideError;
use crate::generator::{Generator, GeneratorConfig, Row, TxKind};
use crate::model::{Model, ModelSpec, Schedule};
use crate::source::{SourceTruth, Visibility};

/// Where the loader commits and the models read.
pub(crate) trait Bronze {
    /// Commit the rows that became visible by `loaded_at_ms` as one snapshot.
    async fn commit(&mut self, loaded_at_ms: i64, rows: &[Row]) -> Result<(), TideError>;

    /// The rows added after snapshot `after` (exclusive; `None`: from the beginning) through
    /// the head, in snapshot order, and the head (`None`: nothing committed yet).
    async fn read_after(
        &mut self,
        after: Option<i64>,
        now_ms: i64,
    ) -> Result<(Option<i64>, Vec<Row>), TideError>;

    /// Let go of snapshots before the oldest of `protect` (the models' watermarks).
    async fn expire(&mut self, protect: &[i64]) -> Result<(), TideError>;
}

/// Where the models' targets are committed.
pub(crate) trait Sink {
    /// Commit what every target kept since the last flush, with each model's watermark as of
    /// `now_ms`; may hand back the watermark as the sink stored it (the model continues from it).
    async fn flush(&mut self, models: &mut [Model], now_ms: i64) -> Result<(), TideError>;
}

/// Targets as counts only (the reference run): flushing forgets the rows.
#[derive(Debug, Default)]
pub(crate) struct MemorySink;

impl Sink for MemorySink {
    async fn flush(&mut self, models: &mut [Model], _now_ms: i64) -> Result<(), TideError> {
        for t in models.iter_mut().flat_map(|m| m.targets.iter_mut()) {
            t.take_pending();
        }
        Ok(())
    }
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub generator: GeneratorConfig,
    pub lag_ms: i64,
    pub loader_every_ms: i64,
    pub cadences_ms: Vec<i64>,
    pub lookbacks_ms: Vec<i64>,
    /// The loader and the models tick at `start + offset_ms + k × interval`.
    pub offset_ms: i64,
    /// The story's model: every `before_ms` until `switch_ms`, then every `after_ms`.
    pub switch_ms: i64,
    pub before_ms: i64,
    pub after_ms: i64,
    /// Expire bronze snapshots every this many loader commits.
    pub expire_every: u64,
    /// Commit the targets every this long (simulated time).
    pub flush_every_ms: i64,
}

impl Plan {
    /// The end of the window (no transaction starts at or after it).
    pub fn end_ms(&self) -> i64 {
        self.generator.start_ms + i64::from(self.generator.days) * crate::generator::DAY_MS
    }

    /// The schedule change, when it falls inside the window.
    pub fn split_ms(&self) -> Option<i64> {
        Some(self.switch_ms).filter(|s| (self.generator.start_ms + 1..self.end_ms()).contains(s))
    }

    /// The models: one per cadence (shortest first), then the story's model on its schedule.
    pub fn model_specs(&self) -> Vec<ModelSpec> {
        let base = |cadence_ms: i64, schedule: Option<Schedule>| ModelSpec {
            cadence_ms,
            schedule,
            lookbacks_ms: self.lookbacks_ms.clone(),
            start_ms: self.generator.start_ms,
            offset_ms: self.offset_ms,
            split_ms: self.split_ms(),
        };
        let mut out: Vec<ModelSpec> = self.cadences_ms.iter().map(|c| base(*c, None)).collect();
        let schedule = Schedule {
            switch_ms: self.switch_ms,
            before_ms: self.before_ms,
        };
        // The story's model on the lake: (a) and (b); its look-backs are replayed ([`crate::replay`]).
        out.push(ModelSpec {
            lookbacks_ms: Vec::new(),
            ..base(self.after_ms, Some(schedule))
        });
        out
    }
}

/// One row as the replays need it (what bronze delivered, in load order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub event_ts_ms: i64,
    pub event_id: u32,
    pub kind: TxKind,
}

/// Every loader commit, in order: when, and the rows (compact) it made visible. The replays of
/// the story's schedule (look-backs, microbatch, append) run over this, the same rows.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stream {
    pub rows: Vec<Seen>,
    /// (loaded at, end index into `rows`).
    pub loads: Vec<(i64, usize)>,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub truth: SourceTruth,
    /// The cadence models (shortest first), then the story's model.
    pub models: Vec<Model>,
    pub stream: Stream,
}

/// Run the clock until every transaction is loaded and every model has read it.
pub(crate) async fn simulate<B: Bronze, S: Sink>(
    plan: &Plan,
    bronze: &mut B,
    sink: &mut S,
    bar: &ProgressBar,
) -> Result<Outcome, TideError> {
    let start = plan.generator.start_ms;
    let window_end = start + i64::from(plan.generator.days) * crate::generator::DAY_MS;
    let mut visibility =
        Visibility::new(Generator::new(plan.generator.clone()), start, plan.lag_ms)
            .with_split(plan.split_ms());
    let mut models: Vec<Model> = plan.model_specs().iter().map(Model::from_spec).collect();
    let mut stream = Stream::default();
    let mut next_load = start + plan.offset_ms + plan.loader_every_ms;
    let mut loader_commits = 0u64;
    let mut last_commit_ms = start;
    let mut next_flush = start + plan.flush_every_ms;
    bar.set_length(((window_end - start) / 60_000) as u64);
    loop {
        let next_run = models
            .iter()
            .map(|m| m.next_run_ms)
            .min()
            .unwrap_or(i64::MAX);
        let now = next_load.min(next_run);
        if now == next_load {
            let rows = visibility.take_visible(now);
            if !rows.is_empty() {
                bronze.commit(now, &rows).await?;
                stream.rows.extend(rows.iter().map(|r| Seen {
                    event_ts_ms: r.event_ts_ms,
                    event_id: u32::try_from(r.event_id).unwrap_or(u32::MAX),
                    kind: r.writer(),
                }));
                stream.loads.push((now, stream.rows.len()));
                loader_commits += 1;
                last_commit_ms = now;
                let protect: Option<Vec<i64>> = models.iter().map(|m| m.consumed).collect();
                if let Some(protect) =
                    protect.filter(|_| loader_commits.is_multiple_of(plan.expire_every))
                {
                    bronze.expire(&protect).await?;
                }
            }
            next_load += plan.loader_every_ms;
        }
        for m in models.iter_mut().filter(|m| m.next_run_ms == now) {
            let (through, rows) = bronze.read_after(m.consumed, now).await?;
            m.run(now, through, &rows);
        }
        let finished = now >= window_end
            && visibility.done()
            && models
                .iter()
                .all(|m| m.last_run_ms.is_some_and(|t| t >= last_commit_ms));
        if finished || now >= next_flush {
            sink.flush(&mut models, now).await?;
            while next_flush <= now {
                next_flush += plan.flush_every_ms;
            }
        }
        if finished {
            break;
        }
        let done = ((now.min(window_end) - start) / 60_000) as u64;
        if done > bar.position() {
            bar.set_position(done);
            let day = (now - start) / crate::generator::DAY_MS + 1;
            bar.set_message(format!("day {day}, {loader_commits} loader commits"));
        }
    }
    Ok(Outcome {
        truth: visibility.into_truth(),
        models,
        stream,
    })
}

/// Bronze as a list in memory: the reference the lake run is checked against.
#[derive(Debug, Default)]
pub(crate) struct MemoryBronze {
    commits: VecDeque<(i64, Vec<Row>)>,
    next_id: i64,
}

impl Bronze for MemoryBronze {
    async fn commit(&mut self, _loaded_at_ms: i64, rows: &[Row]) -> Result<(), TideError> {
        self.next_id += 1;
        self.commits.push_back((self.next_id, rows.to_vec()));
        Ok(())
    }

    async fn read_after(
        &mut self,
        after: Option<i64>,
        _now_ms: i64,
    ) -> Result<(Option<i64>, Vec<Row>), TideError> {
        let from = match after {
            None => 0,
            Some(a) => match self.commits.iter().position(|(id, _)| *id == a) {
                Some(p) => p + 1,
                None => {
                    return Err(TideError::Bronze(format!(
                        "snapshot {a} was expired while a model still needed it"
                    )));
                }
            },
        };
        let rows = self
            .commits
            .iter()
            .skip(from)
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        Ok((self.commits.back().map(|(id, _)| *id).or(after), rows))
    }

    async fn expire(&mut self, protect: &[i64]) -> Result<(), TideError> {
        let Some(oldest) = protect.iter().min() else {
            return Ok(());
        };
        while self.commits.front().is_some_and(|(id, _)| id < oldest) {
            self.commits.pop_front();
        }
        Ok(())
    }
}
