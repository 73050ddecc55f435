//! Pure per-item work spread over the machine's cores, answers kept in the items' order.

use std::sync::OnceLock;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_back_in_the_items_order() {
        let items: Vec<u64> = (0..10_007).collect();
        let want: Vec<u64> = items.iter().map(|i| i * i + 1).collect();
        for min in [0, 1, 16, 5_000, 20_000] {
            assert_eq!(map_in_order(&items, min, |i| i * i + 1), want, "min {min}");
        }
        assert!(map_in_order(&[] as &[u64], 1, |i| *i).is_empty());
    }
}
