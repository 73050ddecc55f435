//! Commits under a failing store: the outcome of every commit is known or reported unknown,
//! the head never names a missing file, the log is a hash chain, and expired version numbers
//! are never reused.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{batch, ids, schema};
use futures::TryStreamExt;
use lake::faults::{Fault, FaultyStore, Gate, Op};
use lake::{At, Catalog, LakeError};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

const VERSIONS: &str = "catalog/versions/v";

fn store() -> FaultyStore {
    FaultyStore::new(Arc::new(InMemory::new()))
}

fn open(store: &FaultyStore) -> Catalog {
    Catalog::open_store(
        Arc::new(store.clone()),
        "memory:///catalog",
        "memory:///warehouse",
    )
}

fn version_path(n: u64) -> String {
    format!("{VERSIONS}{n:020}.json")
}

/// Every object path in the store.
async fn objects(store: &FaultyStore) -> Vec<String> {
    let mut out: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    out.sort();
    out
}

/// A fresh handle (no cache) reads every table of the head in full: nothing it names is missing.
async fn assert_head_reads(store: &FaultyStore) -> lake::CatalogVersion {
    let fresh = open(store);
    let head = fresh.head().await.unwrap();
    for t in head.tables.keys() {
        let table = fresh.table(t).await.unwrap();
        table.scan(&At::Main).await.unwrap();
    }
    head
}

async fn setup(store: &FaultyStore) -> Catalog {
    let c = open(store);
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    c.append("bronze.t", "main", &[batch(0..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    c
}

async fn staged(c: &Catalog, rows: std::ops::Range<i64>) -> lake::TableChange {
    c.table("bronze.t")
        .await
        .unwrap()
        .stage_append("main", &[batch(rows, "d")], BTreeMap::new())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_put_refused_before_writing_is_a_typed_error_and_changes_nothing() {
    let s = store();
    let c = setup(&s).await;
    let before = c.head().await.unwrap();

    // The new metadata file cannot be written: a storage error, the head as it was.
    let change = staged(&c, 10..12).await;
    s.inject(Op::Put, ".metadata.json", Fault::FailBefore, 1);
    let err = c
        .commit(vec![change], "append", "m", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::Store { .. }), "{err}");
    assert_eq!(assert_head_reads(&s).await, before);

    // The version put is refused every time it is tried: the commit cannot know whether a
    // put still in flight lands, so it says so, and deletes nothing it wrote.
    let change = staged(&c, 10..12).await;
    let md = change.metadata().unwrap().location().to_string();
    assert!(md.starts_with("memory:///warehouse"));
    s.inject(Op::Put, VERSIONS, Fault::FailBefore, 100);
    let objects_before = objects(&s).await;
    let err = c
        .commit(vec![change], "append", "v", BTreeMap::new())
        .await
        .unwrap_err();
    s.clear();
    assert!(
        matches!(err, LakeError::CommitOutcomeUnknown { version: 3, .. }),
        "{err}"
    );
    let written: Vec<String> = objects(&s)
        .await
        .into_iter()
        .filter(|o| !objects_before.contains(o))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].ends_with(".metadata.json"), "kept: {written:?}");
    assert_eq!(assert_head_reads(&s).await, before);

    // Refused once only: the put is tried again and lands.
    let change = staged(&c, 10..12).await;
    s.inject(Op::Put, VERSIONS, Fault::FailBefore, 1);
    let done = c
        .commit(vec![change], "append", "v", BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(done.version, 3);
    let t = open(&s).table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 10, 11]
    );
}

#[tokio::test]
async fn a_version_put_whose_answer_is_lost_is_read_back_as_ours() {
    let s = store();
    let c = setup(&s).await;
    let change = staged(&c, 10..12).await;
    // The version lands; the answer is lost. The old code deleted its metadata files here,
    // leaving the head naming a file that was gone.
    s.inject(Op::Put, VERSIONS, Fault::FailAfter, 1);
    let done = c
        .commit(vec![change], "append", "lost answer", BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(s.pending(), 0);
    assert_eq!(done.version, 3);
    let head = assert_head_reads(&s).await;
    assert_eq!(head.version, 3);
    assert!(head.commit_id.is_some());
    let t = open(&s).table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 10, 11]
    );

    // Namespace edits settle their doubts the same way.
    s.inject(Op::Put, VERSIONS, Fault::FailAfter, 1);
    assert_eq!(c.set_namespace("silver", BTreeMap::new()).await.unwrap(), 4);
    assert!(
        open(&s)
            .head()
            .await
            .unwrap()
            .namespaces
            .contains_key("silver")
    );
}

#[tokio::test]
async fn a_lost_answer_that_cannot_be_read_back_is_unknown_and_deletes_nothing() {
    let s = store();
    let c = setup(&s).await;
    let change = staged(&c, 10..12).await;
    let objects_before = objects(&s).await;
    s.inject(Op::Put, VERSIONS, Fault::FailAfter, 1);
    s.inject(Op::Get, VERSIONS, Fault::FailBefore, 1);
    let err = c
        .commit(vec![change], "append", "unknown", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LakeError::CommitOutcomeUnknown { version: 3, .. }),
        "{err}"
    );
    // It did land, and every file it names is there.
    let head = assert_head_reads(&s).await;
    assert_eq!(head.version, 3);
    let now = objects(&s).await;
    assert!(objects_before.iter().all(|o| now.contains(o)));
    let t = open(&s).table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 10, 11]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_race_deletes_the_losers_files_and_retries_on_the_new_base() {
    let s = store();
    let c = setup(&s).await;
    let other = open(&s);
    let change = staged(&c, 10..12).await;
    let md = objects(&s).await;
    // Our put of version 3 is held; another writer takes version 3 meanwhile. Ours then finds
    // it taken, reads it back (another id: a lost race) and meets a conflict on the new base.
    let gate = Gate::new();
    s.inject(Op::Put, &version_path(3), Fault::Pause(gate.clone()), 1);
    let writer = c.clone();
    let ours = tokio::spawn(async move {
        writer
            .commit(vec![change], "append", "late", BTreeMap::new())
            .await
    });
    gate.reached().await;
    other
        .append("bronze.t", "main", &[batch(20..21, "d")], BTreeMap::new())
        .await
        .unwrap();
    gate.release();
    let err = ours.await.unwrap().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    // Ours was never in the log: its metadata file is gone again.
    let other_files: Vec<String> = objects(&s)
        .await
        .into_iter()
        .filter(|o| !md.contains(o) && o.ends_with(".metadata.json"))
        .collect();
    assert_eq!(other_files.len(), 1, "only the winner's: {other_files:?}");
    assert_head_reads(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_version_puts_still_give_one_winner_per_version() {
    let s = store();
    let c = open(&s);
    c.create_table("bronze.a", &schema(), &[]).await.unwrap();
    c.create_table("bronze.b", &schema(), &[]).await.unwrap();
    s.inject(
        Op::Put,
        VERSIONS,
        Fault::Slow(Duration::from_millis(20)),
        usize::MAX,
    );
    let mut tasks = Vec::new();
    for w in 0..2i64 {
        let c = open(&s);
        tasks.push(tokio::spawn(async move {
            let mut versions = Vec::new();
            for k in 0..4i64 {
                let table = if k % 2 == 0 { "bronze.a" } else { "bronze.b" };
                let rows = w * 100 + k * 10..w * 100 + k * 10 + 2;
                let done = c
                    .append(table, "main", &[batch(rows, "d")], BTreeMap::new())
                    .await
                    .unwrap();
                versions.push(done.version);
            }
            versions
        }));
    }
    let mut won = Vec::new();
    for t in tasks {
        won.extend(t.await.unwrap());
    }
    s.clear();
    won.sort_unstable();
    assert_eq!(won, (3..=10).collect::<Vec<u64>>(), "each version won once");
    let log = c.log().await.unwrap();
    assert_eq!(
        log.iter().map(|v| v.version).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    let mut rows = ids(&c
        .table("bronze.a")
        .await
        .unwrap()
        .scan(&At::Main)
        .await
        .unwrap());
    rows.extend(ids(&c
        .table("bronze.b")
        .await
        .unwrap()
        .scan(&At::Main)
        .await
        .unwrap()));
    assert_eq!(rows.len(), 16);
}

#[tokio::test]
async fn the_log_is_a_hash_chain_kept_across_expiry() {
    let s = store();
    let c = setup(&s).await;
    for k in 0..3 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    let log = c.log().await.unwrap();
    assert_eq!(log.len(), 5);
    assert_eq!(log[0].previous_sha256, None);
    for v in &log[1..] {
        let prev = c.version_sha256(v.version - 1).await.unwrap();
        assert_eq!(
            v.previous_sha256.as_deref(),
            Some(prev.as_str()),
            "v{}",
            v.version
        );
    }
    // The handle keeps the newest version's hash: the next commit reads no version file.
    let head_hash = c.version_sha256(5).await.unwrap();
    s.reset_calls();
    c.set_namespace("silver", BTreeMap::new()).await.unwrap();
    assert_eq!(s.calls(Op::Get, VERSIONS), 0);
    assert_eq!(c.version(6).await.unwrap().previous_sha256, Some(head_hash));
    // After expiry the next version still records the hash of the one it was written after.
    let before = c.version_sha256(6).await.unwrap();
    c.expire_versions(1).await.unwrap();
    let fresh = open(&s);
    fresh.set_namespace("gold", BTreeMap::new()).await.unwrap();
    assert_eq!(
        fresh.version(7).await.unwrap().previous_sha256,
        Some(before)
    );
    assert!(matches!(
        fresh.version_sha256(5).await,
        Err(LakeError::NoSuchVersion { version: 5, .. })
    ));
}

/// A writer whose version lands after its number was expired, and a handle that cached an old
/// head, never report success behind the real head.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expired_version_numbers_are_never_reused() {
    let s = store();
    let a = open(&s);
    a.create_table("bronze.x", &schema(), &[]).await.unwrap();
    a.create_table("bronze.y", &schema(), &[]).await.unwrap();
    // Two long-lived handles last look at the log at version 2.
    let s1 = open(&s);
    let s2 = open(&s);
    assert_eq!(s1.head().await.unwrap().version, 2);
    assert_eq!(s2.head().await.unwrap().version, 2);

    // S1 stages and puts version 3, held before it reaches the store.
    let gate = Gate::new();
    s.inject(
        Op::Put,
        &version_path(3),
        Fault::PauseAround(gate.clone()),
        1,
    );
    let change = s1
        .table("bronze.x")
        .await
        .unwrap()
        .stage_append("main", &[batch(0..1, "d")], BTreeMap::new())
        .await
        .unwrap();
    let writer = s1.clone();
    let first = tokio::spawn(async move {
        writer
            .commit(vec![change], "append", "s1", BTreeMap::new())
            .await
    });
    gate.reached().await;

    // Meanwhile the log moves to version 5 and everything before it expires.
    for k in 0..3 {
        a.append("bronze.y", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    assert_eq!(a.expire_versions(1).await.unwrap(), vec![1, 2, 3, 4]);

    // S1's put now lands in the expired range; it is held again right after, before S1 learns
    // of it, so its version 3 is in storage while S2 looks for the head.
    gate.release();
    gate.reached().await;
    assert!(s.head(&Path::from(version_path(3))).await.is_ok());

    // S2 must not build on S1's stray version 3: it lands on top of the real head (the old
    // code wrote version 4 after it and reported success, behind version 5).
    let second = s2
        .append("bronze.y", "main", &[batch(10..11, "d")], BTreeMap::new())
        .await;
    match &second {
        Ok(done) => assert_eq!(done.version, 6),
        Err(e) => assert!(e.is_conflict(), "{e}"),
    }

    // S1 finds its version below the floor, takes it back and lands on top too.
    gate.release();
    let first = first.await.unwrap();
    match &first {
        Ok(done) => assert!(done.version > 5, "{}", done.version),
        Err(e) => assert!(e.is_conflict(), "{e}"),
    }
    assert!(s.head(&Path::from(version_path(3))).await.is_err());

    // The kept log is contiguous from the floor to the head, chained, and names every row.
    let fresh = open(&s);
    let log = fresh.log().await.unwrap();
    let numbers: Vec<u64> = log.iter().map(|v| v.version).collect();
    assert_eq!(numbers, vec![5, 6, 7]);
    for w in log.windows(2) {
        let prev = fresh.version_sha256(w[0].version).await.unwrap();
        assert_eq!(w[1].previous_sha256.as_deref(), Some(prev.as_str()));
    }
    let x = fresh.table("bronze.x").await.unwrap();
    assert_eq!(ids(&x.scan(&At::Main).await.unwrap()), vec![0]);
    let y = fresh.table("bronze.y").await.unwrap();
    assert_eq!(ids(&y.scan(&At::Main).await.unwrap()), vec![0, 1, 2, 10]);
    assert!(matches!(
        fresh.version(3).await,
        Err(LakeError::NoSuchVersion { version: 3, .. })
    ));
}

#[tokio::test]
async fn one_table_twice_and_a_missing_data_file_have_their_own_errors() {
    let s = store();
    let c = setup(&s).await;
    let a = staged(&c, 10..11).await;
    let b = staged(&c, 11..12).await;
    let err = c
        .commit(vec![a, b], "append", "twice", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::ChangedTwice { table } if table == "bronze.t"),
        "{err}"
    );

    let before = objects(&s).await;
    let change = staged(&c, 20..21).await;
    let parquet: Vec<String> = objects(&s)
        .await
        .into_iter()
        .filter(|o| !before.contains(o) && o.ends_with(".parquet"))
        .collect();
    assert_eq!(parquet.len(), 1);
    s.delete(&Path::from(parquet[0].as_str())).await.unwrap();
    let err = c
        .commit(vec![change], "append", "missing", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::MissingDataFile { table, file }
            if table == "bronze.t" && file.ends_with(&parquet[0])),
        "{err}"
    );
    assert_eq!(assert_head_reads(&s).await.version, 2);
}

/// `bronze.t` created and appended to: catalog versions 1 to 6, rows 0, 0, 1, 1, 2, 2, 3.
async fn six_versions(s: &FaultyStore) -> Catalog {
    let c = setup(s).await;
    for k in 0..4 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    c
}

/// Overwrite the version hint.
async fn hint(s: &FaultyStore, n: u64) {
    s.put(
        &Path::from("catalog/version-hint.txt"),
        bytes::Bytes::from(n.to_string()).into(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn the_head_is_found_by_probing_and_reading_only_the_last_version() {
    let s = store();
    let c = six_versions(&s).await;
    // A hint that lags far behind (as after writers that crashed before updating it).
    hint(&s, 1).await;
    s.reset_calls();
    let fresh = open(&s);
    assert_eq!(fresh.head().await.unwrap().version, 6);
    assert_eq!(s.calls(Op::Get, VERSIONS), 1, "only the head is read");
    assert_eq!(s.calls(Op::Get, &version_path(6)), 1);
    // A handle that knows the head reads no version to find it again.
    s.reset_calls();
    assert_eq!(fresh.head().await.unwrap().version, 6);
    assert_eq!(s.calls(Op::Get, VERSIONS), 0);
    assert_eq!(s.calls(Op::Head, VERSIONS), 1, "one probe: is there a 7?");

    // Far behind, it finds the head in a few probes, not one per missed version.
    for k in 0..58 {
        c.set_namespace(&format!("n{k}"), BTreeMap::new())
            .await
            .unwrap();
    }
    s.reset_calls();
    assert_eq!(fresh.head().await.unwrap().version, 64);
    let probes = s.calls(Op::Head, VERSIONS);
    assert!(probes <= 14, "{probes} probes");
    assert_eq!(s.calls(Op::Get, VERSIONS), 1);
}

/// S1 appends row 0 to `bronze.x` from a head at version 2, its put of version 3 held by
/// `hold` (before it lands, or after); meanwhile another writer appends `others` (table, row)
/// and expires every version but the newest, which must be `expired`. Then S1 goes on. Tables
/// keep `history_kept` metadata files in their logs.
async fn s1_appends_while_the_log_expires(
    history_kept: &str,
    hold: fn(Gate) -> Fault,
    others: &[(&str, i64)],
    expired: &[u64],
) -> (FaultyStore, lake::Result<lake::SnapshotCommit>) {
    let s = store();
    let a = open(&s);
    let props = BTreeMap::from([(
        "write.metadata.previous-versions-max".to_string(),
        history_kept.to_string(),
    )]);
    for t in ["bronze.x", "bronze.y"] {
        let change = a
            .stage_create_table_with_properties(t, &schema(), &[], &props)
            .await
            .unwrap();
        a.commit(vec![change], "create-table", t, BTreeMap::new())
            .await
            .unwrap();
    }
    let s1 = open(&s);
    assert_eq!(s1.head().await.unwrap().version, 2);
    let gate = Gate::new();
    s.inject(Op::Put, &version_path(3), hold(gate.clone()), 1);
    let writer = s1.clone();
    let first = tokio::spawn(async move {
        writer
            .append("bronze.x", "main", &[batch(0..1, "d")], BTreeMap::new())
            .await
    });
    gate.reached().await;
    for (t, row) in others {
        a.append(t, "main", &[batch(*row..*row + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    assert_eq!(a.expire_versions(1).await.unwrap(), expired);
    gate.release();
    (s, first.await.unwrap())
}

/// What becomes of S1's append when its version 3 lands, is built on by another writer's
/// appends to `bronze.x` (versions 4 and 5), and both are expired before S1 reads the floor: S1
/// cannot tell from the version files whether its version was ever in the log.
async fn append_whose_version_expires_after_it_was_built_on(
    history_kept: &str,
) -> (FaultyStore, lake::Result<lake::SnapshotCommit>) {
    s1_appends_while_the_log_expires(
        history_kept,
        Fault::PauseAfter,
        &[("bronze.x", 1), ("bronze.x", 2), ("bronze.y", 0)],
        &[1, 2, 3, 4, 5],
    )
    .await
}

/// S1's append was in the log and is reported done, not applied a second time on the new head.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_built_on_then_expired_before_its_writer_looked_is_not_applied_twice() {
    let (s, first) = append_whose_version_expires_after_it_was_built_on("20").await;
    let done = first.unwrap();
    assert_eq!(done.version, 3);
    let x = open(&s).table("bronze.x").await.unwrap();
    assert_eq!(ids(&x.scan(&At::Main).await.unwrap()), vec![0, 1, 2]);
    assert_head_reads(&s).await;
}

/// When x's metadata log no longer reaches back to S1's version, nothing can tell: the outcome
/// is reported unknown, nothing is retried, and nothing is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_version_no_table_can_place_is_an_unknown_outcome_never_a_retry() {
    let (s, first) = append_whose_version_expires_after_it_was_built_on("1").await;
    match first {
        Err(LakeError::CommitOutcomeUnknown { version: 3, .. }) => {}
        other => panic!("expected an unknown outcome for version 3, got {other:?}"),
    }
    let x = open(&s).table("bronze.x").await.unwrap();
    assert_eq!(ids(&x.scan(&At::Main).await.unwrap()), vec![0, 1, 2]);
    assert_head_reads(&s).await;
}

/// S1's version lands after its number expired, while another writer had appended to the same
/// table: the table's metadata log shows S1's base followed by the other writer's commit, so S1
/// knows its version was never in the log and its append is retried, once, on the real head.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_put_after_its_number_expired_is_retried_when_the_table_shows_it_never_landed() {
    // S1's put of version 3 is held before it reaches the store, so it lands after expiry.
    let (s, first) = s1_appends_while_the_log_expires(
        "20",
        Fault::Pause,
        &[("bronze.x", 1), ("bronze.y", 0), ("bronze.y", 1)],
        &[1, 2, 3, 4],
    )
    .await;
    let done = first.unwrap();
    assert_eq!(done.version, 6);
    let x = open(&s).table("bronze.x").await.unwrap();
    assert_eq!(ids(&x.scan(&At::Main).await.unwrap()), vec![0, 1]);
    assert_head_reads(&s).await;
}

/// A namespace drop whose version was built on and expired before its writer looked: applied
/// again, the drop finds no namespace, which may be its own doing: an unknown outcome, not
/// "no such namespace".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespace_drop_built_on_then_expired_is_an_unknown_outcome() {
    let s = store();
    let a = open(&s);
    a.set_namespace("z", BTreeMap::new()).await.unwrap();
    a.set_namespace("w", BTreeMap::new()).await.unwrap();
    let s1 = open(&s);
    assert_eq!(s1.head().await.unwrap().version, 2);
    let gate = Gate::new();
    s.inject(
        Op::Put,
        &version_path(3),
        Fault::PauseAfter(gate.clone()),
        1,
    );
    let writer = s1.clone();
    let first = tokio::spawn(async move { writer.drop_namespace("z").await });
    gate.reached().await;
    for ns in ["u", "v"] {
        a.set_namespace(ns, BTreeMap::new()).await.unwrap();
    }
    assert_eq!(a.expire_versions(1).await.unwrap(), vec![1, 2, 3, 4]);
    gate.release();
    match first.await.unwrap() {
        Err(LakeError::CommitOutcomeUnknown { version: 3, .. }) => {}
        other => panic!("expected an unknown outcome for version 3, got {other:?}"),
    }
    let head = open(&s).head().await.unwrap();
    assert!(!head.namespaces.contains_key("z"), "the drop had landed");
}

/// A fresh handle whose hint lies below a hole in the log (a version file deleted outside lake)
/// finds the real head past the hole, not the version before it; one listing pays for that,
/// and only when the head was looked for from the hint.
#[tokio::test]
async fn a_reader_from_a_hint_below_a_hole_in_the_log_finds_the_head_past_it() {
    let s = store();
    let c = six_versions(&s).await;
    assert_eq!(c.head().await.unwrap().version, 6);
    // The hole right after the hint: the first probe finds nothing (a hole further on may be
    // jumped by the galloping probes, this one cannot).
    s.delete(&Path::from(version_path(2))).await.unwrap();
    hint(&s, 1).await;
    s.reset_calls();
    let fresh = open(&s);
    assert_eq!(fresh.head().await.unwrap().version, 6);
    assert_eq!(s.calls(Op::Get, VERSIONS), 1, "only the head is read");
    // With the head known, no listing of the versions.
    s.reset_calls();
    assert_eq!(fresh.head().await.unwrap().version, 6);
    assert_eq!(s.calls(Op::List, VERSIONS), 0);
    // What it reads is the head's: every row.
    let t = fresh.table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        vec![0, 0, 1, 1, 2, 2, 3]
    );
}
