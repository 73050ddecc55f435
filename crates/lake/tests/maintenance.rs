//! Maintenance never deletes live data: orphan removal keeps everything any kept catalog version
//! reaches, whatever the warehouse path is spelt like, whichever name wrote it, and never
//! touches what the catalog does not own.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{batch, head_manifest_list, ids, schema};
use iceberg::spec::StatisticsFile;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{NamespaceIdent, TableIdent};
use lake::{At, Catalog};

/// Every file under `dir`.
fn walk(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p);
            }
        }
    }
    out
}

/// A time well after every file these tests write.
fn later() -> i64 {
    chrono::Utc::now().timestamp_millis() + 60_000
}

fn ident(ns: &str, t: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(ns.into()), t.into())
}

async fn rows(c: &Catalog, name: &str) -> Vec<i64> {
    let t = c.table(name).await.unwrap();
    ids(&t.scan(&At::Main).await.unwrap())
}

#[tokio::test]
async fn a_warehouse_path_with_a_space_and_an_accent_keeps_every_live_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("My Lake").join("Café");
    let wh = root.join("warehouse");
    let c = Catalog::open_local(root.join("catalog"), &wh).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..3i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    let before = walk(&wh);
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(walk(&wh), before);
    assert_eq!(rows(&c, "bronze.t").await, vec![0, 1, 2]);

    // A real orphan in the same folder is still found and removed.
    let stray = wh
        .join("bronze")
        .join("t")
        .join("data")
        .join("stray.parquet");
    std::fs::write(&stray, b"debris").unwrap();
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 1, "{report:?}");
    assert!(!stray.exists());
    assert_eq!(walk(&wh), before);
    assert!(c.verify().await.unwrap().is_clean());
}

#[tokio::test]
async fn a_renamed_table_keeps_what_it_wrote_under_its_new_name() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    c.create_table("bronze.a", &schema(), &[]).await.unwrap();
    c.append("bronze.a", "main", &[batch(0..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    iceberg::Catalog::rename_table(&c, &ident("bronze", "a"), &ident("bronze", "b"))
        .await
        .unwrap();
    // Written under the new name, in the old name's location.
    c.append("bronze.b", "main", &[batch(2..4, "d")], BTreeMap::new())
        .await
        .unwrap();
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(rows(&c, "bronze.b").await, vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn two_names_on_one_location_keep_each_others_files() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    let a = c.create_table("bronze.a", &schema(), &[]).await.unwrap();
    iceberg::Catalog::register_table(
        &c,
        &ident("silver", "copy"),
        a.metadata_location().to_string(),
    )
    .await
    .unwrap();
    c.append("silver.copy", "main", &[batch(0..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    c.append("bronze.a", "main", &[batch(5..6, "d")], BTreeMap::new())
        .await
        .unwrap();
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(rows(&c, "silver.copy").await, vec![0, 1]);
    assert_eq!(rows(&c, "bronze.a").await, vec![5]);
}

#[tokio::test]
async fn statistics_files_are_reachable() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    let s = c
        .append("bronze.t", "main", &[batch(0..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    let t = c.table("bronze.t").await.unwrap();
    let stats_path = format!("{}/metadata/stats-{}.puffin", t.location(), s.snapshot_id);
    let stats_file = dir
        .path()
        .join("warehouse/bronze/t/metadata")
        .join(format!("stats-{}.puffin", s.snapshot_id));
    std::fs::write(&stats_file, b"PFA1 not really puffin").unwrap();
    let tx = Transaction::new(t.iceberg());
    let tx = tx
        .update_statistics()
        .set_statistics(StatisticsFile {
            snapshot_id: s.snapshot_id,
            statistics_path: stats_path,
            file_size_in_bytes: 22,
            file_footer_size_in_bytes: 4,
            key_metadata: None,
            blob_metadata: Vec::new(),
        })
        .apply(tx)
        .unwrap();
    tx.commit(&c).await.unwrap();
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert!(stats_file.exists());
    let verified = c.verify().await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
    assert_eq!(verified.checked.get("statistics"), Some(&1));
}

#[tokio::test]
async fn a_table_registered_from_outside_the_warehouse_is_never_swept() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    // Another lake's table, registered here by its metadata.
    let other = dir.path().join("elsewhere");
    let o = Catalog::open_local(other.join("catalog"), other.join("warehouse")).unwrap();
    o.create_table("ext.t", &schema(), &[]).await.unwrap();
    o.append("ext.t", "main", &[batch(0..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    let ext = o.table("ext.t").await.unwrap();
    iceberg::Catalog::register_table(&c, &ident("ext", "t"), ext.metadata_location().into())
        .await
        .unwrap();
    // The other lake's own history and a file of theirs this catalog knows nothing about.
    let theirs = other.join("warehouse/ext/t/data/theirs.parquet");
    std::fs::write(&theirs, b"not ours to judge").unwrap();
    let before = walk(&other);
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(report.not_swept, vec![ext.location().to_string()]);
    assert_eq!(walk(&other), before);
    // Nor written through this catalog: its files would land where the other lake sweeps.
    let e = c
        .append("ext.t", "main", &[batch(2..3, "d")], BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(e, lake::LakeError::OutsideWarehouse { .. }),
        "{e:?}"
    );
    assert_eq!(walk(&other), before);
}

/// Copy every file under `from` to the same place under `to` (what `cp -r` does).
fn copy_dir(from: &Path, to: &Path) {
    for f in walk(from) {
        let dest = to.join(f.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dest).unwrap();
    }
}

/// A lake folder copied (`cp -r`) still names the original's folders: Iceberg metadata records
/// absolute paths. Written through the copy, new files would land in the original's folders,
/// where the original's orphan removal deletes them and the copy loses its tables. Every write
/// to a table outside the warehouse is refused before anything is written; reads work.
#[tokio::test]
async fn a_copied_lake_reads_the_original_but_never_writes_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let open =
        |root: &Path| Catalog::open_local(root.join("catalog"), root.join("warehouse")).unwrap();
    let c = open(&a);
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..2i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    copy_dir(&a, &b);
    let (originals, copied) = (walk(&a), walk(&b));
    let copy = open(&b);
    assert_eq!(rows(&copy, "bronze.t").await, vec![0, 1]);

    let outside = |e: lake::LakeError| {
        let said = e.to_string();
        assert!(
            matches!(&e, lake::LakeError::OutsideWarehouse { table, .. } if table == "bronze.t"),
            "{e:?}"
        );
        assert!(said.contains("read-only in this lake"), "{said}");
        assert!(said.contains(&format!("{}", a.display())), "{said}");
    };
    outside(
        copy.append("bronze.t", "main", &[batch(2..3, "d")], BTreeMap::new())
            .await
            .unwrap_err(),
    );
    let t = copy.table("bronze.t").await.unwrap();
    let head = t.head("main").unwrap();
    outside(
        t.stage_refs(&[lake::RefOp::CreateTag {
            name: "x".into(),
            snapshot_id: head,
        }])
        .unwrap_err(),
    );
    let opts = lake::ExpireOptions {
        older_than_ms: i64::MAX,
        retain_last: 1,
        protect: Vec::new(),
    };
    outside(copy.expire_snapshots("bronze.t", &opts).await.unwrap_err());
    assert_eq!(walk(&a), originals, "nothing written into the original");
    assert_eq!(walk(&b), copied, "nor into the copy");

    // The original goes on, and its orphan removal finds nothing of the copy's to delete.
    c.append("bronze.t", "main", &[batch(2..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(rows(&copy, "bronze.t").await, vec![0, 1]);
    // Verify says where the copy's tables live: nothing wrong, but read from elsewhere.
    let verified = copy.verify().await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
    assert_eq!(verified.read_only.len(), 1, "{verified:?}");
    assert_eq!(verified.read_only[0].0, "bronze.t");
    assert!(
        verified.read_only[0]
            .1
            .contains("/a/warehouse/bronze/t/metadata/")
    );
    assert!(c.verify().await.unwrap().read_only.is_empty());
}

#[tokio::test]
async fn the_seasons_raw_files_and_the_catalog_are_never_swept() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    // The catalog inside the warehouse, as a careless setup might put it.
    let c = Catalog::open_local(wh.join("catalog"), &wh).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    // A table whose location is the warehouse root itself.
    let ice_schema = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&schema()).unwrap();
    let creation = iceberg::TableCreation::builder()
        .name("wide".into())
        .location(c.warehouse_url().to_string())
        .schema(ice_schema)
        .build();
    iceberg::Catalog::create_table(&c, &NamespaceIdent::new("bronze".into()), creation)
        .await
        .unwrap();
    c.append("bronze.wide", "main", &[batch(0..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    c.append("bronze.t", "main", &[batch(2..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    for f in ["landing/payments/2026-08-20.csv", "truth/season.json"] {
        let p = wh.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"raw").unwrap();
    }
    let before = walk(&wh);
    let report = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(walk(&wh), before);
    assert_eq!(rows(&c, "bronze.wide").await, vec![0, 1]);
    assert_eq!(rows(&c, "bronze.t").await, vec![2]);
}

#[tokio::test]
async fn the_grace_period_runs_from_when_a_file_became_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    let c = Catalog::open_local(dir.path().join("catalog"), &wh).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..4i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    // Every file is an hour old by the clock these passes are given.
    let hour = 3_600_000;
    let now = chrono::Utc::now().timestamp_millis() + 2 * hour;
    let opts = lake::ExpireOptions {
        older_than_ms: i64::MAX,
        retain_last: 1,
        protect: Vec::new(),
    };
    assert_eq!(
        c.expire_snapshots("bronze.t", &opts).await.unwrap().len(),
        3
    );
    c.expire_versions(1).await.unwrap();
    let before = walk(&wh);

    // The expired snapshots' files were reachable until a moment ago: a reader that loaded an
    // older version may still be reading them. They wait in the ledger.
    let first = c.remove_orphans(now, hour).await.unwrap();
    assert_eq!(first.total(), 0, "{first:?}");
    assert!(first.waiting >= 3, "{first:?}");
    assert_eq!(first.too_young, first.waiting);
    assert_eq!(walk(&wh), before);
    let ledger = dir.path().join("catalog/maintenance/unreachable.json");
    assert!(ledger.exists());

    // Not yet an hour since they were first seen unreachable.
    let again = c.remove_orphans(now + hour - 1, hour).await.unwrap();
    assert_eq!(again.total(), 0, "{again:?}");
    assert_eq!(again.waiting, first.waiting);

    // An hour on, they go; the table still reads every row.
    let swept = c.remove_orphans(now + hour, hour).await.unwrap();
    assert_eq!(swept.total(), first.waiting, "{swept:?}");
    assert_eq!(swept.waiting, 0);
    assert_eq!(rows(&c, "bronze.t").await, vec![0, 1, 2, 3]);
    assert!(c.verify().await.unwrap().is_clean());
}

#[tokio::test]
async fn no_grace_deletes_unreachable_files_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    let c = Catalog::open_local(dir.path().join("catalog"), &wh).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..3i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    let opts = lake::ExpireOptions {
        older_than_ms: i64::MAX,
        retain_last: 1,
        protect: Vec::new(),
    };
    c.expire_snapshots("bronze.t", &opts).await.unwrap();
    c.expire_versions(1).await.unwrap();
    let swept = c.remove_orphans(later(), 0).await.unwrap();
    assert!(swept.total() >= 2, "{swept:?}");
    assert_eq!(swept.waiting, 0);
    assert_eq!(rows(&c, "bronze.t").await, vec![0, 1, 2]);
}

/// A lake with one table and three appends, in `dir`.
async fn small_lake(dir: &Path) -> Catalog {
    let c = Catalog::open_local(dir.join("catalog"), dir.join("warehouse")).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..3i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    c
}

fn local_path(location: &str) -> PathBuf {
    url::Url::parse(location).unwrap().to_file_path().unwrap()
}

#[tokio::test]
async fn a_clean_lake_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    let c = small_lake(dir.path()).await;
    let report = c.verify().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.versions, vec![1, 2, 3, 4]);
    assert_eq!(report.checked["catalog-version"], 4);
    assert_eq!(report.checked["data-file"], 3);
    assert_eq!(report.checked["manifest-list"], 3);
    assert!(report.checked["manifest"] >= 3, "{report:?}");
    assert!(report.checked["metadata"] >= 4, "{report:?}");
    assert!(
        serde_json::to_string(&report)
            .unwrap()
            .contains("catalog-version")
    );
}

#[tokio::test]
async fn verify_names_a_deleted_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = small_lake(dir.path()).await;
    let t = c.table("bronze.t").await.unwrap();
    let snap = t.snapshot(t.head("main").unwrap()).unwrap();
    let files = t.files_added_by(&snap).await.unwrap();
    let gone = files[0].file_path().to_string();
    std::fs::remove_file(local_path(&gone)).unwrap();
    let report = c.verify().await.unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    let p = &report.problems[0];
    assert_eq!(
        (p.kind.as_str(), p.location.as_str()),
        ("data-file", gone.as_str())
    );
    assert_eq!(p.table.as_deref(), Some("bronze.t"));
    assert!(p.detail.contains("does not exist"), "{p:?}");
}

#[tokio::test]
async fn verify_names_a_truncated_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let c = small_lake(dir.path()).await;
    let t = c.table("bronze.t").await.unwrap();
    let list = head_manifest_list(&t).await;
    let manifest = list.entries()[0].manifest_path.clone();
    let path = local_path(&manifest);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let report = c.verify().await.unwrap();
    assert!(!report.is_clean());
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.kind == "manifest" && p.location == manifest),
        "{report:?}"
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.detail.contains(&format!("{len}"))),
        "the recorded length is named: {report:?}"
    );
}

#[tokio::test]
async fn verify_names_an_edited_catalog_version() {
    let dir = tempfile::tempdir().unwrap();
    let c = small_lake(dir.path()).await;
    let v2 = dir.path().join(format!("catalog/versions/v{:020}.json", 2));
    let text = std::fs::read_to_string(&v2).unwrap();
    let edited = text.replacen("branch main", "branch main (edited)", 1);
    assert_ne!(text, edited);
    std::fs::write(&v2, edited).unwrap();
    // Still a valid version: only the chain shows the edit.
    assert!(c.version(2).await.is_ok());
    let report = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
        .unwrap()
        .verify()
        .await
        .unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    let p = &report.problems[0];
    assert_eq!((p.kind.as_str(), p.version), ("catalog-version", Some(2)));
    assert!(p.location.ends_with(&format!("v{:020}.json", 2)), "{p:?}");
    assert!(report.versions_unchained.is_empty(), "{report:?}");
}

#[tokio::test]
async fn verify_names_a_version_missing_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    small_lake(dir.path()).await;
    let v2 = dir.path().join(format!("catalog/versions/v{:020}.json", 2));
    std::fs::remove_file(&v2).unwrap();
    let report = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
        .unwrap()
        .verify()
        .await
        .unwrap();
    let gaps: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.detail.contains("the log has a gap"))
        .collect();
    assert_eq!(gaps.len(), 1, "{report:?}");
    assert_eq!(gaps[0].version, Some(2));
    assert!(
        gaps[0]
            .detail
            .starts_with("version 2 is missing between the floor (0) and version 3"),
        "{:?}",
        gaps[0]
    );
}

#[tokio::test]
async fn versions_before_the_chain_are_unchained_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let c = small_lake(dir.path()).await;
    // As written by a build before the hash chain: the newest version records no hash.
    let v4 = dir.path().join(format!("catalog/versions/v{:020}.json", 4));
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&v4).unwrap()).unwrap();
    assert!(
        json.as_object_mut()
            .unwrap()
            .remove("previous_sha256")
            .is_some()
    );
    std::fs::write(&v4, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    let fresh = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"));
    let report = fresh.unwrap().verify().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.versions_unchained, vec![4]);
    assert_eq!(report.versions_chained, 2);

    // Expired versions are not checked; the oldest kept one has nothing to chain to.
    assert_eq!(c.expire_versions(2).await.unwrap(), vec![1, 2]);
    let report = c.verify().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.versions, vec![3, 4]);
    assert_eq!(report.versions_chained, 0);
}

#[tokio::test]
async fn a_sweep_that_cannot_read_what_a_version_names_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = small_lake(dir.path()).await;
    let t = c.table("bronze.t").await.unwrap();
    let head = t.snapshot(t.head("main").unwrap()).unwrap();
    std::fs::remove_file(local_path(&head.manifest_list)).unwrap();
    let stray = dir.path().join("warehouse/bronze/t/data/stray.parquet");
    std::fs::write(&stray, b"debris").unwrap();
    let err = c.remove_orphans(later(), 0).await.unwrap_err();
    assert!(
        matches!(err, lake::LakeError::UnreadableReach { count: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&head.manifest_list), "{err}");
    assert!(stray.exists(), "nothing is deleted");
    let report = c.verify().await.unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert_eq!(report.problems[0].kind, "manifest-list");
}

/// A lake over an in-memory store that can hold a call at a gate.
fn faulty_lake() -> (lake::faults::FaultyStore, Catalog) {
    let store =
        lake::faults::FaultyStore::new(std::sync::Arc::new(object_store::memory::InMemory::new()));
    let c = Catalog::open_store(
        std::sync::Arc::new(store.clone()),
        "memory:///catalog",
        "memory:///warehouse",
    );
    (store, c)
}

#[tokio::test]
async fn a_sweep_keeps_what_a_writer_committed_while_it_listed() {
    use lake::faults::{Fault, Gate, Op};
    let (store, c) = faulty_lake();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    c.append("bronze.t", "main", &[batch(0..1, "d")], BTreeMap::new())
        .await
        .unwrap();
    // The sweep has read the log and is listing the table's folder when another writer
    // appends: the file it commits is in the listing and was in no version the sweep read.
    let gate = Gate::new();
    store.inject(
        Op::List,
        "warehouse/bronze/t",
        Fault::Pause(gate.clone()),
        1,
    );
    let sweeper = c.clone();
    let sweep = tokio::spawn(async move { sweeper.remove_orphans(later(), 0).await });
    gate.reached().await;
    c.append("bronze.t", "main", &[batch(1..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    gate.release();
    let report = sweep.await.unwrap().unwrap();
    assert_eq!(report.total(), 0, "{report:?}");
    assert_eq!(rows(&c, "bronze.t").await, vec![0, 1]);
    assert!(c.verify().await.unwrap().is_clean());
}

#[tokio::test]
async fn a_sweep_keeps_the_files_of_work_still_running_and_removes_those_of_work_given_up() {
    let (_store, c) = faulty_lake();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    c.append("bronze.t", "main", &[batch(0..1, "d")], BTreeMap::new())
        .await
        .unwrap();
    // A run has begun and written its files; another writer sweeps with no grace.
    let running = c.begin_work("run-a").await.unwrap();
    let table = c.table("bronze.t").await.unwrap();
    let staged = table
        .stage_append("main", &[batch(1..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let swept = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(swept.total(), 0, "{swept:?}");
    assert!(swept.at_work >= 1, "{swept:?}");
    c.commit(vec![staged], "append", "the run", BTreeMap::new())
        .await
        .unwrap();
    c.end_work(running.name()).await.unwrap();
    drop(running);
    assert_eq!(rows(&c, "bronze.t").await, vec![0, 1, 2]);

    // A run that fails gives its mark up and leaves its marker (the next run sweeps): what it
    // wrote is debris, removed at once.
    let failed = c.begin_work("run-b").await.unwrap();
    let table = c.table("bronze.t").await.unwrap();
    let debris = table
        .stage_append("main", &[batch(5..6, "d")], BTreeMap::new())
        .await
        .unwrap();
    drop(failed);
    assert_eq!(c.unfinished_work().await.unwrap(), ["run-b"]);
    let swept = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(swept.at_work, 0, "{swept:?}");
    assert!(swept.total() >= 1, "{swept:?}");
    let err = c
        .commit(vec![debris], "append", "too late", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, lake::LakeError::MissingDataFile { .. }),
        "{err}"
    );
    assert_eq!(rows(&c, "bronze.t").await, vec![0, 1, 2]);
    assert!(c.verify().await.unwrap().is_clean());
}

/// A work that sweeps before it writes passes its own mark: debris stamped at or after its
/// marker's time (on a store whose clock is coarse, debris written just before it) is not kept
/// as the sweeper's own, while a plain sweep must keep it.
#[tokio::test]
async fn a_sweep_by_marked_work_does_not_keep_files_for_its_own_mark() {
    let (_store, c) = faulty_lake();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    let failed = c.begin_work("run-a").await.unwrap();
    drop(failed);
    let sweeper = c.begin_work("run-b").await.unwrap();
    // Debris of the failed run, stamped no earlier than the sweeper's marker.
    let table = c.table("bronze.t").await.unwrap();
    let _debris = table
        .stage_append("main", &[batch(0..2, "d")], BTreeMap::new())
        .await
        .unwrap();
    let plain = c.remove_orphans(later(), 0).await.unwrap();
    assert_eq!(plain.total(), 0, "{plain:?}");
    assert!(plain.at_work >= 1, "{plain:?}");
    let mine = c.remove_orphans_as(&sweeper, later(), 0).await.unwrap();
    assert_eq!(mine.at_work, 0, "{mine:?}");
    assert_eq!(mine.total(), plain.at_work, "{mine:?}");
    // Another work held in this process still protects what is written after its marker.
    let other = c.begin_work("run-c").await.unwrap();
    let _theirs = table
        .stage_append("main", &[batch(2..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let swept = c.remove_orphans_as(&sweeper, later(), 0).await.unwrap();
    assert_eq!(swept.total(), 0, "{swept:?}");
    assert!(swept.at_work >= 1, "{swept:?}");
    drop(other);
    assert!(c.verify().await.unwrap().is_clean());
}

#[tokio::test]
async fn work_begun_elsewhere_protects_its_files_for_the_lease() {
    use object_store::ObjectStoreExt;
    let (store, c) = faulty_lake();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    // A marker written by a run on another machine, which this one cannot ask about.
    let owner = br#"{"machine":"elsewhere/0000","pid":4242,"pid_start":17}"#;
    store
        .put(
            &object_store::path::Path::from("catalog/work/run-elsewhere"),
            owner.to_vec().into(),
        )
        .await
        .unwrap();
    let table = c.table("bronze.t").await.unwrap();
    let staged = table
        .stage_append("main", &[batch(1..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let swept = c.remove_orphans(now, 0).await.unwrap();
    assert_eq!(swept.total(), 0, "{swept:?}");
    assert!(swept.at_work >= 1, "{swept:?}");
    // Past the lease, it is taken for a crash: its files go.
    let swept = c
        .remove_orphans(now + lake::WORK_LEASE_MS + 1_000, 0)
        .await
        .unwrap();
    assert_eq!(swept.at_work, 0, "{swept:?}");
    assert!(swept.total() >= 1, "{swept:?}");
    assert!(
        c.commit(vec![staged], "append", "lost", BTreeMap::new())
            .await
            .is_err()
    );
}
