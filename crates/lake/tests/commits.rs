//! The catalog's guarantees: one winner per version, atomic multi-table commits, typed errors.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{batch, ids, schema};
use lake::{At, Catalog, ExpireOptions, Failpoint, LakeError, RefOp};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_one_winner_per_version_no_gaps_no_lost_update() {
    let dir = tempfile::tempdir().unwrap();
    let (cat, wh) = (dir.path().join("catalog"), dir.path().join("warehouse"));
    let c = Catalog::open_local(&cat, &wh).unwrap();
    c.create_table("bronze.hot", &schema(), &[]).await.unwrap();
    c.create_table("bronze.cold", &schema(), &[]).await.unwrap();

    const WRITERS: i64 = 8;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        // Each writer has its own catalog handle, as separate processes would.
        let c = Catalog::open_local(&cat, &wh).unwrap();
        tasks.push(tokio::spawn(async move {
            let table = if w % 4 == 3 {
                "bronze.cold"
            } else {
                "bronze.hot"
            };
            let mut conflicts = 0u32;
            let t = c.table(table).await.unwrap();
            let files = t
                .write_data_files(&[batch(w * 100..w * 100 + 10, "d")])
                .await
                .unwrap();
            loop {
                let t = c.table(table).await.unwrap();
                let change = t
                    .stage_files("main", files.clone(), None, BTreeMap::new())
                    .await
                    .unwrap();
                match c
                    .commit(
                        vec![change],
                        "append",
                        &format!("writer {w}"),
                        BTreeMap::new(),
                    )
                    .await
                {
                    Ok(done) => return (done.version, conflicts),
                    Err(e) if e.is_conflict() => conflicts += 1,
                    Err(e) => panic!("writer {w}: {e}"),
                }
            }
        }));
    }
    let mut versions = BTreeSet::new();
    let mut total_conflicts = 0;
    for t in tasks {
        let (v, conflicts) = t.await.unwrap();
        assert!(versions.insert(v), "version {v} was won twice");
        total_conflicts += conflicts;
    }
    // The log has no gaps: versions 1 (create) .. 2 + WRITERS, each written once.
    let log = c.log().await.unwrap();
    let numbers: Vec<u64> = log.iter().map(|v| v.version).collect();
    assert_eq!(numbers, (1..=2 + WRITERS as u64).collect::<Vec<_>>());
    for v in &log[2..] {
        assert_eq!(v.operation, "append");
        assert_eq!(v.changed.len(), 1);
    }
    // No lost update: every writer's rows are on main, and every snapshot is in main's ancestry.
    let hot = c.table("bronze.hot").await.unwrap();
    let cold = c.table("bronze.cold").await.unwrap();
    let mut got = ids(&hot.scan(&At::Main).await.unwrap());
    got.extend(ids(&cold.scan(&At::Main).await.unwrap()));
    got.sort_unstable();
    let want: Vec<i64> = (0..WRITERS).flat_map(|w| w * 100..w * 100 + 10).collect();
    assert_eq!(got, want);
    assert_eq!(hot.ancestry(hot.head("main").unwrap()).unwrap().len(), 6);
    // With eight writers racing on one table some lost and retried on the new base.
    println!("conflicts retried: {total_conflicts}");
}

#[tokio::test]
async fn a_failure_before_the_catalog_commit_leaves_the_previous_state_and_only_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    for t in ["bronze.a", "bronze.b"] {
        c.create_table(t, &schema(), &[]).await.unwrap();
        c.append(t, "main", &[batch(0..3, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    let before = c.head().await.unwrap();
    let files_before = walk(&dir.path().join("warehouse"));

    // Both tables' new data files, manifests and metadata files get written; then the crash.
    c.set_failpoint(Some(Failpoint::AfterMetadataFiles));
    let a = c
        .table("bronze.a")
        .await
        .unwrap()
        .stage_append("main", &[batch(10..20, "d")], BTreeMap::new())
        .await
        .unwrap();
    let b = c
        .table("bronze.b")
        .await
        .unwrap()
        .stage_append("main", &[batch(10..20, "d")], BTreeMap::new())
        .await
        .unwrap();
    let err = c
        .commit(vec![a, b], "append", "two tables", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LakeError::Injected("after-metadata-files")),
        "{err}"
    );
    c.set_failpoint(None);

    let debris: Vec<_> = walk(&dir.path().join("warehouse"))
        .difference(&files_before)
        .cloned()
        .collect();
    assert!(
        debris.iter().any(|f| f.ends_with(".parquet")),
        "data files were written: {debris:?}"
    );
    assert!(
        debris.iter().any(|f| f.ends_with(".metadata.json")),
        "metadata files were written"
    );

    // The previous state is intact and readable, from a fresh handle too.
    let fresh =
        Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    assert_eq!(fresh.head().await.unwrap(), before);
    for t in ["bronze.a", "bronze.b"] {
        let table = fresh.table(t).await.unwrap();
        assert_eq!(ids(&table.scan(&At::Main).await.unwrap()), vec![0, 1, 2]);
    }

    // A failure after the data files only (no metadata) is debris too.
    c.set_failpoint(Some(Failpoint::AfterDataFiles));
    let err = c
        .append("bronze.a", "main", &[batch(30..31, "d")], BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LakeError::Injected("after-data-files")),
        "{err}"
    );
    c.set_failpoint(None);

    // Orphan removal clears exactly the debris; a grace period protects young files.
    let now = chrono::Utc::now().timestamp_millis();
    let young = c.remove_orphans(now, 3_600_000).await.unwrap();
    assert_eq!(young.total(), 0);
    assert!(young.too_young > 0);
    let report = c.remove_orphans(now + 10_000, 0).await.unwrap();
    assert!(report.total() >= debris.len(), "{report:?}");
    assert_eq!(walk(&dir.path().join("warehouse")), files_before);
    for t in ["bronze.a", "bronze.b"] {
        let table = c.table(t).await.unwrap();
        assert_eq!(ids(&table.scan(&At::Main).await.unwrap()), vec![0, 1, 2]);
    }
}

#[tokio::test]
async fn one_commit_moves_every_table() {
    let c = Catalog::in_memory();
    let mut ops = Vec::new();
    for t in ["bronze.p", "silver.p", "gold.p"] {
        c.create_table(t, &schema(), &[]).await.unwrap();
        let s = c
            .append(t, "audit", &[batch(0..2, "d")], BTreeMap::new())
            .await
            .unwrap();
        ops.push((t, s.snapshot_id));
    }
    let mut changes = Vec::new();
    for (t, s) in &ops {
        let table = c.table(t).await.unwrap();
        changes.push(
            table
                .stage_refs(&[RefOp::FastForward {
                    branch: "main".into(),
                    to: *s,
                }])
                .unwrap(),
        );
    }
    let props = BTreeMap::from([("as-of".to_string(), "2026-08-16T23:59:59Z".to_string())]);
    let done = c
        .commit(changes, "publish", "publish all", props.clone())
        .await
        .unwrap();
    let v = c.version(done.version).await.unwrap();
    assert_eq!(v.operation, "publish");
    assert_eq!(v.properties, props);
    assert_eq!(v.changed.len(), 3);
    for (t, s) in &ops {
        assert_eq!(c.table(t).await.unwrap().head("main"), Some(*s));
        // The version before the publish still shows main unpublished.
        assert_eq!(
            c.table_at_version(t, done.version - 1)
                .await
                .unwrap()
                .head("main"),
            None
        );
    }
}

#[tokio::test]
async fn bad_input_is_a_typed_error_that_names_the_thing() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    let err = c.table("bronze.nope").await.unwrap_err();
    assert!(
        matches!(err, LakeError::NoSuchTable { .. }) && err.to_string().contains("bronze.nope")
    );
    let err = c.table("nodot").await.unwrap_err();
    assert!(matches!(err, LakeError::InvalidName { .. }), "{err}");
    let err = c.version(7).await.unwrap_err();
    assert!(
        matches!(
            err,
            LakeError::NoSuchVersion {
                version: 7,
                latest: 0
            }
        ),
        "{err}"
    );

    let t = c.create_table("bronze.ok", &schema(), &[]).await.unwrap();
    let err = c
        .create_table("bronze.ok", &schema(), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::TableExists(_)), "{err}");
    let err = c
        .update_refs(
            "bronze.ok",
            &[RefOp::FastForward {
                branch: "main".into(),
                to: 99,
            }],
            "publish",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LakeError::NoSuchSnapshot {
                snapshot_id: 99,
                ..
            }
        ),
        "{err}"
    );

    // Rows of the wrong shape.
    let wrong = arrow_array::RecordBatch::try_from_iter([(
        "id",
        std::sync::Arc::new(arrow_array::Int64Array::from(vec![1])) as arrow_array::ArrayRef,
    )])
    .unwrap();
    let err = c
        .append("bronze.ok", "main", &[wrong], BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LakeError::Schema { .. }) && err.to_string().contains("bronze.ok"),
        "{err}"
    );

    c.create_table("bronze.fine", &schema(), &[]).await.unwrap();
    c.append(
        "bronze.fine",
        "main",
        &[batch(0..3, "2026-08-01")],
        BTreeMap::new(),
    )
    .await
    .unwrap();
    // A truncated metadata file: a typed error naming the file and the table, for a handle
    // that opens it (a handle that parsed it before keeps what it parsed: metadata files are
    // never rewritten, and `verify` is what checks the files themselves).
    let md_path = t
        .metadata_location()
        .strip_prefix("file://")
        .unwrap()
        .to_string();
    let text = std::fs::read(&md_path).unwrap();
    std::fs::write(&md_path, &text[..text.len() / 2]).unwrap();
    let fresh =
        Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    let err = fresh.table("bronze.ok").await.unwrap_err();
    assert!(matches!(err, LakeError::BadMetadata { .. }), "{err}");
    assert!(
        err.to_string().contains("bronze.ok") && err.to_string().contains(".metadata.json"),
        "{err}"
    );
    // SQL over the lake still reads every other table; a query naming the damaged one says why.
    let sql = fresh.sql(None, &At::Main).await.unwrap();
    assert_eq!(sql.unreadable.len(), 1, "{:?}", sql.unreadable);
    assert_eq!(sql.count_rows("bronze.fine").await.unwrap(), 3);
    let err = sql.query("select * from bronze.ok").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("(bronze.ok is not readable here: its metadata cannot be read: "),
        "{err}"
    );
    std::fs::write(&md_path, &text).unwrap();

    // A catalog version from a newer format, and a malformed one.
    let next = c.head().await.unwrap().version + 1;
    let v2 = dir
        .path()
        .join("catalog/versions")
        .join(format!("v{next:020}.json"));
    std::fs::write(&v2, format!(r#"{{"format": 99, "version": {next}}}"#)).unwrap();
    let err = c.head().await.unwrap_err();
    assert!(
        matches!(err, LakeError::UnsupportedFormat { found: 99, .. }),
        "{err}"
    );
    std::fs::write(&v2, b"{\"format\": 1, \"vers").unwrap();
    let err = c.head().await.unwrap_err();
    assert!(
        matches!(err, LakeError::BadCatalogVersion { .. })
            && err.to_string().contains(&format!("v{next:020}.json")),
        "{err}"
    );
}

fn walk(dir: &std::path::Path) -> BTreeSet<String> {
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
                out.insert(p.display().to_string());
            }
        }
    }
    out
}

#[tokio::test]
async fn a_handle_sees_other_writers_and_continues_from_its_own_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (cat, wh) = (dir.path().join("catalog"), dir.path().join("warehouse"));
    let a = Catalog::open_local(&cat, &wh).unwrap();
    let b = Catalog::open_local(&cat, &wh).unwrap();
    a.create_table("bronze.t", &schema(), &[]).await.unwrap();

    // A commits and continues from its commit without reading it back.
    let t = a.table("bronze.t").await.unwrap();
    let change = t
        .stage_append("main", &[batch(0..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let done = a
        .commit(vec![change], "append", "a", BTreeMap::new())
        .await
        .unwrap();
    let after = a.table_after(&done, "bronze.t").unwrap().unwrap();
    let read_back = b.table_at_version("bronze.t", done.version).await.unwrap();
    assert_eq!(after.metadata_location(), read_back.metadata_location());
    assert_eq!(after.head("main"), read_back.head("main"));
    assert_eq!(after.catalog_version(), done.version);
    assert!(a.table_after(&done, "bronze.other").unwrap().is_none());

    // Ref changes too: the table after the commit has the refs a reader finds.
    let head = after.head("main").unwrap();
    let change = after
        .stage_refs(&[
            RefOp::CreateTag {
                name: "first".into(),
                snapshot_id: head,
            },
            RefOp::CreateBranch {
                name: "audit".into(),
                snapshot_id: head,
            },
        ])
        .unwrap();
    let tagged = a
        .commit(vec![change], "refs", "tag", BTreeMap::new())
        .await
        .unwrap();
    let after = a.table_after(&tagged, "bronze.t").unwrap().unwrap();
    let read_back = b
        .table_at_version("bronze.t", tagged.version)
        .await
        .unwrap();
    assert_eq!(after.refs(), read_back.refs());
    assert_eq!(after.refs().len(), 3);

    // B (another handle, as another process) commits on top; A's next look at the head sees it,
    // and a stage from A's stale table is refused as a conflict rather than losing B's rows.
    b.append("bronze.t", "main", &[batch(3..5, "d")], BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(a.head().await.unwrap().version, tagged.version + 1);
    let stale = after
        .stage_append("main", &[batch(5..6, "d")], BTreeMap::new())
        .await
        .unwrap();
    let err = a
        .commit(vec![stale], "append", "a again", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let now = a.table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&now.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        a.version(done.version).await.unwrap(),
        b.version(done.version).await.unwrap()
    );
}

#[tokio::test]
async fn expiring_catalog_versions_lets_orphan_removal_free_what_expired_snapshots_held() {
    let dir = tempfile::tempdir().unwrap();
    let (cat, wh) = (dir.path().join("catalog"), dir.path().join("warehouse"));
    let c = Catalog::open_local(&cat, &wh).unwrap();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..10i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    // Another handle, as a long-lived process, last looks at the log here (version 11).
    let stale = Catalog::open_local(&cat, &wh).unwrap();
    assert_eq!(stale.head().await.unwrap().version, 11);
    for k in 10..20i64 {
        c.append("bronze.t", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
            .await
            .unwrap();
    }
    let opts = ExpireOptions {
        older_than_ms: i64::MAX,
        retain_last: 1,
        protect: Vec::new(),
    };
    let expired = c.expire_snapshots("bronze.t", &opts).await.unwrap();
    assert_eq!(expired.len(), 19);
    let now = chrono::Utc::now().timestamp_millis() + 10_000;

    // Every old version still names its metadata: expiry alone frees nothing.
    let before = walk(&wh);
    assert_eq!(c.remove_orphans(now, 0).await.unwrap().total(), 0);
    assert_eq!(walk(&wh), before);

    // Keep the newest version; the rest go, oldest first.
    let head = c.head().await.unwrap().version; // 22: create, 20 appends, expire
    let removed = c.expire_versions(1).await.unwrap();
    assert_eq!(removed, (1..head).collect::<Vec<_>>());
    let log: Vec<u64> = c.log().await.unwrap().iter().map(|v| v.version).collect();
    assert_eq!(log, vec![head]);
    assert!(matches!(
        c.version(11).await,
        Err(LakeError::NoSuchVersion { version: 11, .. })
    ));

    // Now orphan removal frees the files of the expired snapshots (at least their manifest
    // lists), while the head still reads every row.
    let report = c.remove_orphans(now, 0).await.unwrap();
    assert!(report.total() >= 19, "{report:?}");
    assert!(walk(&wh).len() < before.len());
    let t = c.table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        (0..20).collect::<Vec<_>>()
    );

    // The stale handle remembers version 11, which is gone: it finds the head by listing
    // rather than taking 11 for the head, and its commit lands after the head — never in the
    // expired gap where version 12 used to be.
    assert_eq!(stale.head().await.unwrap().version, head);
    let done = stale
        .append("bronze.t", "main", &[batch(20..21, "d")], BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(done.version, head + 1);
    assert_eq!(c.head().await.unwrap().version, head + 1);
    // The newest version is never removed, whatever is asked.
    let removed = c.expire_versions(0).await.unwrap();
    assert_eq!(removed, vec![head]);
    assert_eq!(c.log().await.unwrap().len(), 1);
}

/// Metadata built elsewhere (a REST commit's updates applied with iceberg's builders) commits
/// through the same compare-and-swap as every other change: it lands on the metadata it was
/// built from, and a writer that moved the table first makes it a typed conflict.
#[tokio::test]
async fn metadata_built_by_the_caller_commits_by_compare_and_swap() {
    let lake = Catalog::in_memory();
    lake.create_table("t.x", &schema(), &[]).await.unwrap();
    let t = lake.table("t.x").await.unwrap();
    let with_property = |t: &lake::Table| {
        t.metadata()
            .clone()
            .into_builder(Some(t.metadata_location().to_string()))
            .set_properties(std::collections::HashMap::from([(
                "owner".to_string(),
                "sugarshack".to_string(),
            )]))
            .unwrap()
            .build()
            .unwrap()
            .metadata
    };
    let change = t.stage_metadata(with_property(&t)).unwrap();
    lake.commit(vec![change], "update-table", "set owner", BTreeMap::new())
        .await
        .unwrap();
    let after = lake.table("t.x").await.unwrap();
    assert_eq!(
        after
            .metadata()
            .properties()
            .get("owner")
            .map(String::as_str),
        Some("sugarshack")
    );

    // Built from a handle another writer has since moved past: a conflict, nothing lands.
    let stale = lake.table("t.x").await.unwrap();
    lake.append("t.x", "main", &[batch(0..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let change = stale.stage_metadata(with_property(&stale)).unwrap();
    let err = lake
        .commit(vec![change], "update-table", "late", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::Conflict { .. }), "{err}");
    assert_eq!(
        ids(&lake
            .table("t.x")
            .await
            .unwrap()
            .scan(&At::Main)
            .await
            .unwrap()),
        vec![0, 1, 2]
    );

    // Metadata of another table is refused.
    let other = lake.create_table("t.y", &schema(), &[]).await.unwrap();
    assert!(after.stage_metadata(other.metadata().clone()).is_err());
}

/// A version deleted from the middle of the log (by hand, or a damaged store). A fresh writer
/// whose hint points below the hole finds the real head past it (one listing) and commits on
/// top; so does a long-lived handle whose own newest version lies just below the hole, told by
/// the hint that versions lie beyond. Without that word (a hint that did not get written), such
/// a handle takes its version for the head and writes into the hole: it is refused (`LogGap`)
/// and its version taken back, instead of reported committed behind the real head, where no
/// reader would ever see it.
#[tokio::test]
async fn a_commit_into_a_hole_in_the_log_is_refused_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let open =
        || Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    let c = open();
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    for k in 0..3 {
        c.append(
            "bronze.t",
            "main",
            &[batch(k..k + 1, "2026-08-01")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    }
    assert_eq!(c.head().await.unwrap().version, 4);
    let version = |n: u64| {
        dir.path()
            .join("catalog/versions")
            .join(format!("v{n:020}.json"))
    };
    let hint = dir.path().join("catalog/version-hint.txt");
    let row = |k: i64| [batch(k..k + 1, "2026-08-01")];
    std::fs::remove_file(version(2)).unwrap();
    std::fs::write(&hint, "1").unwrap();
    let fresh = open();
    let done = fresh
        .append("bronze.t", "main", &row(9), BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(done.version, 5, "on the real head, past the hole");

    // `c` last saw version 4; another writer adds 6 on 5, and 5 is then deleted. `c` reads and
    // writes at the real head, past the hole.
    fresh
        .append("bronze.t", "main", &row(10), BTreeMap::new())
        .await
        .unwrap();
    std::fs::remove_file(version(5)).unwrap();
    assert_eq!(c.head().await.unwrap().version, 6);
    let t = c.table("bronze.t").await.unwrap();
    assert_eq!(ids(&t.scan(&At::Main).await.unwrap()), vec![0, 1, 2, 9, 10]);
    let done = c
        .append("bronze.t", "main", &row(11), BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(done.version, 7, "on the real head, past the hole");

    // The same, but the hint was not updated past the hole: `c` last saw 7, another writer
    // adds 8 and 9, 8 is deleted and the hint says 7.
    for k in [12, 13] {
        fresh
            .append("bronze.t", "main", &row(k), BTreeMap::new())
            .await
            .unwrap();
    }
    std::fs::remove_file(version(8)).unwrap();
    std::fs::write(&hint, "7").unwrap();
    let err = c
        .append("bronze.t", "main", &row(14), BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LakeError::LogGap {
                version: 8,
                next: 9
            }
        ),
        "{err}"
    );
    assert!(
        !version(8).exists(),
        "the write into the hole was taken back"
    );
    // The real head still reads, without the refused row.
    let t = open().table("bronze.t").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 9, 10, 11, 12, 13]
    );
}
