//! Work markers: a writer that runs several commits in a row (a pipeline run) says so in the
//! catalog before it starts and takes it back when it finishes, so the next writer knows whether
//! the last one was interrupted (a crash or an error between its commits leaves data files no
//! catalog version names) and only then pays for an orphan sweep.
//!
//! A marker is one small object `<catalog>/work/<name>`; the catalog folder is never swept.
//!
//! ## Who may still be at work
//! A marker also says who began the work: the machine (its host name and boot id, read on
//! Linux), the process id and the process's start time. The orphan sweep
//! ([`Catalog::remove_orphans`]) keeps every unnamed file written since the earliest marker
//! whose writer may still be at work: such a file may be that writer's, written and not yet
//! committed, and removing it would leave its commit naming a file that is gone. A marker's
//! writer is at work when
//! - this process began it and still holds its [`WorkMark`] (a work that failed drops it and is
//!   over, though its marker stays for the next writer to find). The marker carries a token drawn
//!   for that one mark, and the process keeps the tokens it holds: two catalogs in one process
//!   whose folders are spelled alike (in-memory stores) or one work name begun twice do not
//!   answer for each other;
//! - it was begun on this machine by another process that is still running (the same process id
//!   with the same start time, read from `/proc`);
//! - it cannot be told (another machine, a system without `/proc`, a marker without an owner):
//!   for [`WORK_LEASE_MS`] after the marker was written.
//!
//! A writer that sweeps before it writes anything of its own passes its mark to
//! [`Catalog::remove_orphans_as`], which does not count it: a store's clock is coarse (4 ms on
//! ext4 here), so debris written just before the marker can carry the marker's very time and
//! would otherwise be kept as the sweeper's own.
//!
//! Two containers that share a host name and a kernel but not their process ids would misjudge
//! each other's markers; give such writers distinct host names.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::error::{LakeError, Result};
use crate::storage;

/// How long a marker whose writer cannot be checked counts as at work (one hour, in ms).
pub const WORK_LEASE_MS: i64 = 3_600_000;

/// The tokens of the marks this process began and still holds.
static HELD: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

fn held() -> std::sync::MutexGuard<'static, BTreeSet<u64>> {
    // A panic while the set was locked cannot leave it half-changed (one insert or remove).
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Work this process has begun ([`Catalog::begin_work`]). While it is held the orphan sweep
/// treats the work as running; dropping it (the work finished, or failed and gave up) ends that
/// in this process. Taking the marker back out of the catalog is [`Catalog::end_work`].
#[derive(Debug)]
#[must_use = "the work counts as running only while its mark is held"]
pub struct WorkMark {
    name: String,
    token: u64,
}

/// A new mark's token: a random start drawn once per process (std's hasher keys are random per
/// process) plus a count, so no two marks of this process share one and another process's
/// tokens are unlikely to meet ours.
fn new_token() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static START: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u8));
    start.wrapping_add(COUNT.fetch_add(1, Ordering::Relaxed))
}

impl WorkMark {
    /// The marker's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for WorkMark {
    fn drop(&mut self) {
        held().remove(&self.token);
    }
}

/// Who began a work: what a marker holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Owner {
    /// Host name and boot id (`None` where they cannot be read).
    machine: Option<String>,
    pid: u32,
    /// The process's start time in clock ticks since boot (`None` where it cannot be read).
    pid_start: Option<u64>,
    /// The mark's token (markers written before tokens have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mark: Option<u64>,
}

fn me() -> &'static Owner {
    static ME: OnceLock<Owner> = OnceLock::new();
    ME.get_or_init(|| {
        let pid = std::process::id();
        Owner {
            machine: machine(),
            pid,
            pid_start: process_start(pid),
            mark: None,
        }
    })
}

fn machine() -> Option<String> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let host = read("/proc/sys/kernel/hostname")?;
    let boot = read("/proc/sys/kernel/random/boot_id")?;
    (!host.is_empty() && !boot.is_empty()).then(|| format!("{host}/{boot}"))
}

/// A process's start time (field 22 of `/proc/<pid>/stat`), `None` when it is not running or
/// cannot be read.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Is process `pid` (started at `start`) running on this machine? `None`: cannot tell.
fn running(pid: u32, start: Option<u64>) -> Option<bool> {
    if !std::path::Path::new("/proc/self/stat").exists() {
        return None;
    }
    match (process_start(pid), start) {
        (None, _) => Some(false),
        (Some(now), Some(then)) => Some(now == then),
        (Some(_), None) => Some(true),
    }
}

/// May the writer of a marker still be at work? (See the module docs.) `held`: does this
/// process hold the mark with this token?
fn at_work(
    owner: Option<&Owner>,
    written_ms: i64,
    now_ms: i64,
    me: &Owner,
    held: impl Fn(u64) -> bool,
    running: impl Fn(u32, Option<u64>) -> Option<bool>,
) -> bool {
    if owner.and_then(|o| o.mark).is_some_and(held) {
        return true;
    }
    let leased = now_ms - written_ms < WORK_LEASE_MS;
    match owner {
        Some(o) if o.machine.is_some() && o.machine == me.machine => {
            if o.pid == me.pid && o.pid_start == me.pid_start {
                false
            } else {
                running(o.pid, o.pid_start).unwrap_or(leased)
            }
        }
        _ => leased,
    }
}

impl Catalog {
    fn work_dir(&self) -> String {
        storage::join(self.catalog_url(), "work")
    }

    /// Mark work `name` as begun (`name`: letters, digits, `-`, `_` and `.`). The marker says
    /// who began it; the returned [`WorkMark`] says, while this process holds it, that the work
    /// is still running.
    pub async fn begin_work(&self, name: &str) -> Result<WorkMark> {
        check_name(name)?;
        let location = storage::join(&self.work_dir(), name);
        let token = new_token();
        let owner = Owner {
            mark: Some(token),
            ..me().clone()
        };
        let owner = serde_json::to_vec(&owner)
            .map_err(|e| LakeError::Other(format!("writing work marker {name}: {e}")))?;
        // Held before the marker exists, so a sweep in this process never sees it unheld.
        held().insert(token);
        let mark = WorkMark {
            name: name.to_string(),
            token,
        };
        storage::put(self.stores(), &location, Bytes::from(owner)).await?;
        Ok(mark)
    }

    /// Take back the marker of work `name` (finished); a marker that is gone is not an error.
    pub async fn end_work(&self, name: &str) -> Result<()> {
        check_name(name)?;
        storage::delete(self.stores(), &storage::join(&self.work_dir(), name)).await
    }

    /// The names of every work begun and not ended: interrupted, or still running.
    pub async fn unfinished_work(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .markers()
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every marker: its name and when it was written.
    async fn markers(&self) -> Result<Vec<(String, chrono::DateTime<chrono::Utc>)>> {
        // A marker's name is the last segment of its location (names hold no '/'; comparing
        // whole locations would trip over how a store spells a folder with a space).
        Ok(storage::list(self.stores(), &self.work_dir())
            .await?
            .into_iter()
            .filter_map(|l| {
                let name = l.location.rsplit('/').next()?.to_string();
                check_name(&name).is_ok().then_some((name, l.last_modified))
            })
            .collect())
    }

    /// When the earliest marker whose writer may still be at work was written (ms since the
    /// epoch, the store's clock), `None` when no writer may be. `mine` (the caller's own work,
    /// which has written nothing yet) is not counted.
    pub(crate) async fn at_work_since(
        &self,
        now_ms: i64,
        mine: Option<&WorkMark>,
    ) -> Result<Option<i64>> {
        let dir = self.work_dir();
        let mut since: Option<i64> = None;
        for (name, written) in self.markers().await? {
            if mine.is_some_and(|m| m.name == name) {
                continue;
            }
            let location = storage::join(&dir, &name);
            let written_ms = written.timestamp_millis();
            // Gone since the listing: that work has ended.
            let Some(bytes) = storage::read_optional(self.stores(), &location).await? else {
                continue;
            };
            let owner = serde_json::from_slice::<Owner>(&bytes).ok();
            let is_held = |token: u64| held().contains(&token);
            if at_work(owner.as_ref(), written_ms, now_ms, me(), is_held, running) {
                since = Some(since.map_or(written_ms, |s| s.min(written_ms)));
            }
        }
        Ok(since)
    }
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(LakeError::Other(format!(
            "{name:?} is not a work marker name (letters, digits, '-', '_' and '.', not starting with '.')"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn markers_begin_list_and_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c =
            Catalog::open_local(dir.path().join("cat alog"), dir.path().join("wh")).expect("open");
        assert!(c.unfinished_work().await.expect("list").is_empty());
        let _one = c.begin_work("run-1").await.expect("begin");
        let _two = c.begin_work("run-2").await.expect("begin");
        assert_eq!(c.unfinished_work().await.expect("list"), ["run-1", "run-2"]);
        c.end_work("run-1").await.expect("end");
        c.end_work("run-1").await.expect("ending twice is fine");
        assert_eq!(c.unfinished_work().await.expect("list"), ["run-2"]);
        assert!(c.begin_work("../x").await.is_err());
        assert!(c.begin_work("").await.is_err());
        // Markers are not catalog versions.
        assert_eq!(c.log().await.expect("log").len(), 0);
    }

    #[tokio::test]
    async fn work_held_by_this_process_is_at_work_until_its_mark_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Catalog::open_local(dir.path().join("c"), dir.path().join("wh")).expect("open");
        let now = chrono::Utc::now().timestamp_millis() + 1_000;
        assert_eq!(c.at_work_since(now, None).await.expect("none"), None);
        let mark = c.begin_work("run-1").await.expect("begin");
        let since = c.at_work_since(now, None).await.expect("held");
        assert!(since.is_some_and(|t| t <= now), "{since:?}");
        drop(mark);
        // Its marker stays (the work never ended), but on this machine this process is known
        // to be past it. Elsewhere (no /proc) it counts as at work for the lease.
        assert_eq!(c.unfinished_work().await.expect("list"), ["run-1"]);
        let after = c.at_work_since(now, None).await.expect("dropped");
        if me().machine.is_some() {
            assert_eq!(after, None);
        } else {
            assert_eq!(after, since);
        }
    }

    #[test]
    fn who_is_at_work() {
        let me = Owner {
            machine: Some("here/boot".into()),
            pid: 10,
            pid_start: Some(100),
            mark: None,
        };
        let other = |machine: Option<&str>, pid, pid_start, mark| Owner {
            machine: machine.map(str::to_string),
            pid,
            pid_start,
            mark,
        };
        let now = 10 * WORK_LEASE_MS;
        let fresh = now - 1_000;
        let old = now - WORK_LEASE_MS - 1;
        let alive = |pid: u32, _: Option<u64>| Some(pid == 11);
        let unknown = |_: u32, _: Option<u64>| None;
        let held = |token: u64| token == 7;
        // Held by this process: at work, however old its marker.
        let mine = other(Some("here/boot"), 10, Some(100), Some(7));
        assert!(at_work(Some(&mine), old, now, &me, held, alive));
        // This process's own marker, not held (dropped, or from before tokens): stopped.
        for token in [Some(8), None] {
            let dropped = other(Some("here/boot"), 10, Some(100), token);
            assert!(!at_work(Some(&dropped), fresh, now, &me, held, alive));
        }
        // Another process here: as it runs or not; when that cannot be told, by the lease.
        let eleven = other(Some("here/boot"), 11, Some(5), Some(8));
        let twelve = other(Some("here/boot"), 12, Some(5), Some(8));
        assert!(at_work(Some(&eleven), old, now, &me, held, alive));
        assert!(!at_work(Some(&twelve), fresh, now, &me, held, alive));
        assert!(at_work(Some(&twelve), fresh, now, &me, held, unknown));
        assert!(!at_work(Some(&twelve), old, now, &me, held, unknown));
        // Our pid from an earlier boot or an earlier process: not us.
        let earlier = other(Some("here/boot"), 10, Some(7), None);
        assert!(!at_work(Some(&earlier), fresh, now, &me, held, alive));
        // Another machine, no machine, no owner: the lease.
        for o in [
            other(Some("there/boot"), 11, None, None),
            other(None, 10, Some(100), None),
        ] {
            assert!(at_work(Some(&o), fresh, now, &me, held, alive));
            assert!(!at_work(Some(&o), old, now, &me, held, alive));
        }
        assert!(at_work(None, fresh, now, &me, held, alive));
        assert!(!at_work(None, old, now, &me, held, alive));
    }

    /// Two catalogs in one process whose folders are spelled alike (in-memory stores, as tests
    /// run them side by side on threads), and one name begun twice: each mark answers for itself.
    #[tokio::test]
    async fn a_held_mark_answers_only_for_its_own_marker() {
        let open = || {
            Catalog::open_store(
                std::sync::Arc::new(object_store::memory::InMemory::new()),
                "memory:///catalog",
                "memory:///warehouse",
            )
        };
        let (one, two) = (open(), open());
        let now = chrono::Utc::now().timestamp_millis() + 1_000;
        let held_in_one = one.begin_work("run-a").await.expect("begin");
        drop(two.begin_work("run-a").await.expect("begin"));
        assert!(one.at_work_since(now, None).await.expect("one").is_some());
        if me().machine.is_some() {
            assert_eq!(two.at_work_since(now, None).await.expect("two"), None);
        }
        // The same name begun again: dropping the first mark leaves the second held.
        let again = one.begin_work("run-a").await.expect("again");
        drop(held_in_one);
        assert!(one.at_work_since(now, None).await.expect("one").is_some());
        drop(again);
        if me().machine.is_some() {
            assert_eq!(one.at_work_since(now, None).await.expect("one"), None);
        }
    }

    #[test]
    fn this_process_runs_and_a_finished_child_does_not() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            assert_eq!(running(std::process::id(), None), None);
            return;
        }
        let me = me();
        assert!(me.pid_start.is_some());
        assert_eq!(running(me.pid, me.pid_start), Some(true));
        // The same pid with another start time is another process.
        assert_eq!(running(me.pid, me.pid_start.map(|s| s + 1)), Some(false));
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        assert_eq!(running(pid, None), Some(false));
    }
}
