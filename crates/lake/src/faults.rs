//! Fault injection: an object store that fails, loses responses, stalls or pauses on purpose.
//!
//! [`FaultyStore`] wraps any [`ObjectStore`] and applies rules chosen by operation ([`Op`]) and a
//! path substring, each for the next N matching calls:
//!
//! - [`Fault::FailBefore`]: the call returns an error and nothing happens (a refused request);
//! - [`Fault::FailAfter`]: the call happens, then an error is returned (a response lost on the
//!   way back: the write landed, the caller cannot know);
//! - [`Fault::Slow`]: the call waits, then happens;
//! - [`Fault::Pause`] / [`Fault::PauseAfter`] / [`Fault::PauseAround`]: the call waits for a
//!   test to release a [`Gate`] before (or after, or both) it happens, so a test can order a
//!   race exactly, with no timing.
//!
//! It also counts calls by operation and path, so a test can check what an operation cost.
//!
//! ```
//! # async fn demo() -> lake::Result<()> {
//! use std::sync::Arc;
//! use lake::faults::{Fault, FaultyStore, Op};
//! let store = FaultyStore::new(Arc::new(object_store::memory::InMemory::new()));
//! let catalog = lake::Catalog::open_store(Arc::new(store.clone()), "memory:///c", "memory:///w");
//! // The next put of a catalog version lands, but its response is lost.
//! store.inject(Op::Put, "/versions/v", Fault::FailAfter, 1);
//! catalog.set_namespace("bronze", Default::default()).await?; // read back: it was ours
//! # Ok(()) }
//! ```

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use tokio::sync::Semaphore;

/// The kind of store call a rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put_opts` (every put, conditional or not), copies (on the destination) and the opening
    /// of a multipart upload.
    Put,
    /// `get_opts` (and `get_ranges`) reading an object.
    Get,
    /// `get_opts` with `head` set: an object's metadata only.
    Head,
    /// Deleting one object (each path of `delete_stream`).
    Delete,
    /// `list`, `list_with_offset`, `list_with_delimiter` (the path is the prefix).
    List,
}

/// What a rule does to a matching call.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Return an error without doing anything.
    FailBefore,
    /// Do the call, then return an error instead of its result (the response was lost).
    FailAfter,
    /// Wait this long, then do the call.
    Slow(Duration),
    /// Wait until the gate is released, then do the call.
    Pause(Gate),
    /// Do the call, then wait until the gate is released before returning its result.
    PauseAfter(Gate),
    /// Wait at the gate before the call and again after it (two releases): a test orders both
    /// when the call lands and when its caller learns of it.
    PauseAround(Gate),
}

/// A gate a paused call waits at: the test awaits [`Gate::reached`] to know a call is held, and
/// [`Gate::release`] lets one held call go on. Clones share the gate.
#[derive(Clone, Debug)]
pub struct Gate {
    reached: Arc<Semaphore>,
    release: Arc<Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            reached: Arc::new(Semaphore::new(0)),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait until a call is held at this gate (one call per `reached`).
    pub async fn reached(&self) {
        if let Ok(p) = self.reached.acquire().await {
            p.forget();
        }
    }

    /// Let one held (or the next) call through.
    pub fn release(&self) {
        self.release.add_permits(1);
    }

    async fn hold(&self) {
        self.reached.add_permits(1);
        if let Ok(p) = self.release.acquire().await {
            p.forget();
        }
    }
}

#[derive(Debug)]
struct Rule {
    op: Op,
    path_contains: String,
    fault: Fault,
    remaining: usize,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    calls: Vec<(Op, String)>,
}

/// An [`ObjectStore`] over another one that injects faults by rule. Clones share the rules and
/// the call counts, so a test keeps one clone and hands another to the catalog.
#[derive(Clone, Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<State>>,
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

impl FaultyStore {
    /// Wrap `inner`; no faults until [`FaultyStore::inject`].
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultyStore {
            inner,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// The next `times` calls of `op` whose path contains `path_contains` get `fault`. Rules
    /// are tried in the order they were added; the first that matches is used up by one call.
    pub fn inject(&self, op: Op, path_contains: &str, fault: Fault, times: usize) -> &Self {
        if let Ok(mut s) = self.state.lock() {
            s.rules.push(Rule {
                op,
                path_contains: path_contains.to_string(),
                fault,
                remaining: times,
            });
        }
        self
    }

    /// Drop every rule (calls already held at a gate stay held until released).
    pub fn clear(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.rules.clear();
        }
    }

    /// How many injections are still to happen, over all rules.
    pub fn pending(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.rules.iter().map(|r| r.remaining).sum())
            .unwrap_or(0)
    }

    /// How many calls of `op` on a path containing `path_contains` the store has seen.
    pub fn calls(&self, op: Op, path_contains: &str) -> usize {
        self.state
            .lock()
            .map(|s| {
                s.calls
                    .iter()
                    .filter(|(o, p)| *o == op && p.contains(path_contains))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Forget the calls counted so far.
    pub fn reset_calls(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.calls.clear();
        }
    }

    /// Count the call and take the fault of the first matching rule, if any.
    fn take(&self, op: Op, path: &str) -> Option<Fault> {
        let mut s = self.state.lock().ok()?;
        s.calls.push((op, path.to_string()));
        let rule = s
            .rules
            .iter_mut()
            .find(|r| r.op == op && r.remaining > 0 && path.contains(&r.path_contains))?;
        rule.remaining -= 1;
        Some(rule.fault.clone())
    }

    async fn run<T>(
        &self,
        op: Op,
        path: &str,
        call: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        apply(self.take(op, path), op, path, call).await
    }
}

fn injected(op: Op, path: &str, when: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: format!("injected failure {when} {op:?} of {path}").into(),
    }
}

async fn apply<T>(
    fault: Option<Fault>,
    op: Op,
    path: &str,
    call: impl Future<Output = Result<T>> + Send,
) -> Result<T> {
    match fault {
        None => call.await,
        Some(Fault::FailBefore) => Err(injected(op, path, "before")),
        Some(Fault::FailAfter) => {
            call.await?;
            Err(injected(op, path, "after"))
        }
        Some(Fault::Slow(d)) => {
            tokio::time::sleep(d).await;
            call.await
        }
        Some(Fault::Pause(g)) => {
            g.hold().await;
            call.await
        }
        Some(Fault::PauseAfter(g)) => {
            let r = call.await;
            g.hold().await;
            r
        }
        Some(Fault::PauseAround(g)) => {
            g.hold().await;
            let r = call.await;
            g.hold().await;
            r
        }
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.run(
            Op::Put,
            location.as_ref(),
            self.inner.put_opts(location, payload, opts),
        )
        .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.run(
            Op::Put,
            location.as_ref(),
            self.inner.put_multipart_opts(location, opts),
        )
        .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        self.run(
            op,
            location.as_ref(),
            self.inner.get_opts(location, options),
        )
        .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.run(
            Op::Get,
            location.as_ref(),
            self.inner.get_ranges(location, ranges),
        )
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .then(move |p| {
                let this = this.clone();
                async move {
                    let p = p?;
                    let path = p.to_string();
                    this.run(Op::Delete, &path, this.inner.delete(&p)).await?;
                    Ok(p)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, owned) = (Arc::clone(&self.inner), prefix.cloned());
        self.faulty_list(prefix, move || inner.list(owned.as_ref()))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, owned, offset) = (Arc::clone(&self.inner), prefix.cloned(), offset.clone());
        self.faulty_list(prefix, move || {
            inner.list_with_offset(owned.as_ref(), &offset)
        })
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let path = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.run(Op::List, &path, self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.run(
            Op::Put,
            to.as_ref(),
            self.inner.copy_opts(from, to, options),
        )
        .await
    }
}

impl FaultyStore {
    /// `list` (made only when the listing starts: a held listing sees what was written while
    /// it waited, as a store listing lazily would) with the fault a rule gives it.
    fn faulty_list(
        &self,
        prefix: Option<&Path>,
        list: impl FnOnce() -> BoxStream<'static, Result<ObjectMeta>> + Send + 'static,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let path = prefix.map(|p| p.to_string()).unwrap_or_default();
        match self.take(Op::List, &path) {
            None => list(),
            Some(Fault::FailBefore) => {
                stream::once(async move { Err(injected(Op::List, &path, "before")) }).boxed()
            }
            Some(Fault::FailAfter) => list()
                .chain(stream::once(async move {
                    Err(injected(Op::List, &path, "after"))
                }))
                .boxed(),
            Some(fault) => {
                let held = async move {
                    // Slow or paused: wait, then list (these faults never fail).
                    let _ = apply(Some(fault), Op::List, &path, async { Ok(()) }).await;
                    list()
                };
                stream::once(held).flatten().boxed()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn store() -> FaultyStore {
        FaultyStore::new(Arc::new(InMemory::new()))
    }

    #[tokio::test]
    async fn fail_before_writes_nothing_fail_after_writes_and_errs() {
        let s = store();
        let (a, b) = (Path::from("x/a"), Path::from("x/b"));
        s.inject(Op::Put, "x/a", Fault::FailBefore, 1);
        s.inject(Op::Put, "x/b", Fault::FailAfter, 1);
        assert!(s.put(&a, Bytes::from("1").into()).await.is_err());
        assert!(s.head(&a).await.is_err(), "fail-before wrote nothing");
        assert!(s.put(&b, Bytes::from("2").into()).await.is_err());
        assert!(s.head(&b).await.is_ok(), "fail-after wrote");
        // Each rule was for one call only.
        assert_eq!(s.pending(), 0);
        s.put(&a, Bytes::from("1").into()).await.unwrap();
        assert_eq!(s.calls(Op::Put, "x/"), 3);
        assert_eq!(s.calls(Op::Head, "x/"), 2);
    }

    #[tokio::test]
    async fn gets_heads_deletes_and_lists_fail_by_rule() {
        let s = store();
        let p = Path::from("d/f");
        s.put(&p, Bytes::from("1").into()).await.unwrap();
        s.inject(Op::Get, "d/", Fault::FailBefore, 1)
            .inject(Op::Head, "d/", Fault::FailBefore, 1)
            .inject(Op::List, "d", Fault::FailBefore, 1)
            .inject(Op::Delete, "d/f", Fault::FailAfter, 1);
        assert!(s.get(&p).await.is_err());
        assert!(s.head(&p).await.is_err());
        let listed: Vec<_> = s.list(Some(&Path::from("d"))).collect().await;
        assert!(listed.iter().all(|r| r.is_err()));
        assert!(s.delete(&p).await.is_err());
        assert!(s.head(&p).await.is_err(), "fail-after deleted");
        assert!(s.inner.head(&p).await.is_err());
    }

    #[tokio::test]
    async fn a_paused_call_waits_for_its_gate() {
        let s = store();
        let gate = Gate::new();
        s.inject(Op::Put, "g", Fault::Pause(gate.clone()), 1);
        let s2 = s.clone();
        let task = tokio::spawn(async move { s2.put(&Path::from("g"), Bytes::new().into()).await });
        gate.reached().await;
        assert!(
            s.inner.head(&Path::from("g")).await.is_err(),
            "held before writing"
        );
        gate.release();
        task.await.unwrap().unwrap();
        assert!(s.head(&Path::from("g")).await.is_ok());
    }
}
