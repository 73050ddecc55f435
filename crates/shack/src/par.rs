//! Work spread over the machine's cores, answers kept in the items' order: pure per-item work
//! on scoped threads ([`map_in_order`]), and a few async jobs (a layer's tables staged, a grade's
//! audits) each on a runtime task of its own ([`on_tasks`]).

use std::future::Future;
use std::sync::OnceLock;

use futures::future::BoxFuture;

use crate::{Result, ShackError};

/// The cores this process may use, asked once (the answer reads cgroup files on Linux).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `items.iter().map(f).collect()`, with the items cut into one contiguous chunk per core, each
/// mapped on a scoped thread, the answers put back in order; work of fewer than
/// `min_per_thread` items per thread stays on the calling thread. For `f` that depends only on
/// its item, the answer is the sequential one. A panic in `f` goes on as it would have on the
/// calling thread.
pub(crate) fn map_in_order<T: Sync, R: Send>(
    items: &[T],
    min_per_thread: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = (items.len() / min_per_thread.max(1)).min(cores()).max(1);
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            match h.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

/// A job for [`on_tasks`]: owns what it works on, so it can run on any of the runtime's threads.
pub(crate) type Job<T> = BoxFuture<'static, Result<T>>;

/// Run `jobs`, at most `at_once` at a time, each on a runtime task of its own, so that jobs
/// joined by one task do not all run on the thread that polls it: the answers in the jobs'
/// order. A job is taken from `jobs` only when a slot is free, so an iterator that builds each
/// job's input as it yields it holds at most `at_once` inputs at once.
///
/// The first error is the answer, but only once every other job has stopped: the rest are
/// aborted (each stops at its next await) and waited for, so no job goes on writing files after
/// its caller saw the failure. A job that panicked panics here too, after the same wait. When
/// the caller stops waiting, every job still running is aborted.
pub(crate) async fn on_tasks<T: Send + 'static>(
    what: &str,
    at_once: usize,
    jobs: impl IntoIterator<Item = Job<T>>,
) -> Result<Vec<T>> {
    /// Why the jobs stopped early: the first failure wins.
    enum Stop {
        Failed(ShackError),
        Panicked(Box<dyn std::any::Any + Send>),
    }
    let mut jobs = jobs.into_iter();
    let mut set = tokio::task::JoinSet::new();
    let mut answers: Vec<Option<T>> = Vec::new();
    let mut stop: Option<Stop> = None;
    loop {
        while stop.is_none() && set.len() < at_once.max(1) {
            let Some(job) = jobs.next() else { break };
            let i = answers.len();
            answers.push(None);
            set.spawn(async move { (i, job.await) });
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        let failure = match done {
            Ok((i, Ok(answer))) => {
                answers[i] = Some(answer);
                continue;
            }
            Ok((_, Err(e))) => Stop::Failed(e),
            Err(e) if e.is_panic() => Stop::Panicked(e.into_panic()),
            // Cancelled: only ours are (after a failure), or the runtime is shutting down.
            Err(e) => Stop::Failed(ShackError::lake(
                what,
                lake::LakeError::Other(format!("a task stopped: {e}")),
            )),
        };
        if stop.is_none() {
            stop = Some(failure);
            set.abort_all();
        }
    }
    match stop {
        Some(Stop::Panicked(panic)) => std::panic::resume_unwind(panic),
        Some(Stop::Failed(e)) => Err(e),
        // Every job spawned was joined with an answer.
        None => Ok(answers.into_iter().flatten().collect()),
    }
}

/// Box a job for [`on_tasks`].
pub(crate) fn job<T, F>(f: F) -> Job<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
{
    Box::pin(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn answers_come_back_in_the_items_order() {
        let items: Vec<u64> = (0..10_007).collect();
        let want: Vec<u64> = items.iter().map(|i| i * i + 1).collect();
        for min in [0, 1, 16, 5_000, 20_000] {
            assert_eq!(map_in_order(&items, min, |i| i * i + 1), want, "min {min}");
        }
        assert!(map_in_order(&[] as &[u64], 1, |i| *i).is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_answer_in_order_and_never_run_more_than_asked_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let jobs = (0..20u64).map(|i| {
            let (running, most) = (running.clone(), most.clone());
            job(async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20 - i)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(i * 10)
            })
        });
        let got = on_tasks("test", 3, jobs).await.unwrap();
        assert_eq!(got, (0..20).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failure_stops_the_others_before_it_is_returned() {
        // Job 0 fails at once; the others would keep "writing" (counting) for a while. When
        // the error comes back no job may still be running, and none may count afterwards.
        let writes = Arc::new(AtomicUsize::new(0));
        let mut jobs: Vec<Job<()>> = vec![job(async {
            Err(ShackError::lake("t", lake::LakeError::Other("boom".into())))
        })];
        for _ in 0..3 {
            let writes = writes.clone();
            jobs.push(job(async move {
                for _ in 0..1_000 {
                    writes.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                Ok(())
            }));
        }
        let err = on_tasks("test", 4, jobs).await.unwrap_err().to_string();
        assert!(err.contains("boom"), "{err}");
        let seen = writes.load(Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(
            writes.load(Ordering::SeqCst),
            seen,
            "a job went on after the error"
        );
        assert!(seen < 3_000, "the others were not stopped: {seen}");
    }

    #[tokio::test]
    async fn jobs_are_taken_only_when_a_slot_is_free() {
        // On a current-thread runtime too (as in most tests here).
        let taken = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let jobs = (0..6).map(|_| {
            // Jobs taken before this one and not done yet: fewer than the two slots.
            let in_flight = taken.fetch_add(1, Ordering::SeqCst) - done.load(Ordering::SeqCst);
            assert!(
                in_flight < 2,
                "{in_flight} jobs in flight when another was taken"
            );
            let done = done.clone();
            job(async move {
                tokio::task::yield_now().await;
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        });
        assert_eq!(on_tasks("test", 2, jobs).await.unwrap().len(), 6);
    }
}
