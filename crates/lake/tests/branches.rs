//! Branches, refs, replace and incremental reads on one table.

mod common;

use std::collections::BTreeMap;

use common::{batch, head_manifest_list, ids, schema};
use lake::{At, Catalog, LakeError, PartitionField, RefOp, Replace};

fn props(k: &str, v: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(k.to_string(), v.to_string())])
}

#[tokio::test]
async fn append_to_audit_leaves_main_unchanged_until_fast_forward() {
    let c = Catalog::in_memory();
    c.create_table("bronze.events", &schema(), &[])
        .await
        .unwrap();
    let s1 = c
        .append(
            "bronze.events",
            "audit",
            &[batch(0..10, "2026-08-01")],
            props("k", "v"),
        )
        .await
        .unwrap();
    let t = c.table("bronze.events").await.unwrap();
    assert_eq!(t.head("audit"), Some(s1.snapshot_id));
    assert_eq!(t.head("main"), None, "main must not move on an audit write");
    assert!(ids(&t.scan(&At::Main).await.unwrap()).is_empty());
    assert_eq!(
        ids(&t.scan(&At::reference("audit")).await.unwrap()),
        (0..10).collect::<Vec<_>>()
    );

    // The snapshot carries a correct summary and the caller's properties.
    let s = t.snapshot(s1.snapshot_id).unwrap();
    assert_eq!(s.operation, "append");
    assert_eq!(s.summary["k"], "v");
    assert_eq!(s.summary["added-records"], "10");
    assert_eq!(s.summary["total-records"], "10");
    assert_eq!(s.summary["added-data-files"], "1");
    assert_eq!(s.parent_id, None);

    c.update_refs(
        "bronze.events",
        &[RefOp::FastForward {
            branch: "main".into(),
            to: s1.snapshot_id,
        }],
        "publish",
    )
    .await
    .unwrap();
    let t = c.table("bronze.events").await.unwrap();
    assert_eq!(t.head("main"), Some(s1.snapshot_id));
    assert_eq!(ids(&t.scan(&At::Main).await.unwrap()).len(), 10);

    // Audit moves on; main stays at the published snapshot.
    let s2 = c
        .append(
            "bronze.events",
            "audit",
            &[batch(10..15, "2026-08-02")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    let t = c.table("bronze.events").await.unwrap();
    assert_eq!(
        t.snapshot(s2.snapshot_id).unwrap().parent_id,
        Some(s1.snapshot_id)
    );
    assert_eq!(
        t.snapshot(s2.snapshot_id).unwrap().summary["total-records"],
        "15"
    );
    assert_eq!(ids(&t.scan(&At::Main).await.unwrap()).len(), 10);
    assert_eq!(
        ids(&t.scan(&At::reference("audit")).await.unwrap()).len(),
        15
    );
}

#[tokio::test]
async fn fast_forward_is_refused_unless_it_is_one() {
    let c = Catalog::in_memory();
    c.create_table("silver.t", &schema(), &[]).await.unwrap();
    let a = c
        .append("silver.t", "main", &[batch(0..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    c.update_refs(
        "silver.t",
        &[RefOp::CreateBranch {
            name: "side".into(),
            snapshot_id: a.snapshot_id,
        }],
        "branch",
    )
    .await
    .unwrap();
    let b = c
        .append("silver.t", "main", &[batch(3..6, "d")], BTreeMap::new())
        .await
        .unwrap();
    let side = c
        .append("silver.t", "side", &[batch(100..101, "d")], BTreeMap::new())
        .await
        .unwrap();

    // main's head (b) is not an ancestor of side's head: refused, and nothing changes.
    let before = c.head().await.unwrap().version;
    let err = c
        .update_refs(
            "silver.t",
            &[RefOp::FastForward {
                branch: "main".into(),
                to: side.snapshot_id,
            }],
            "publish",
        )
        .await
        .unwrap_err();
    match &err {
        LakeError::NotFastForward {
            table,
            branch,
            from,
            to,
        } => {
            assert_eq!(table, "silver.t");
            assert_eq!(branch, "main");
            assert_eq!(*from, b.snapshot_id);
            assert_eq!(*to, side.snapshot_id);
        }
        other => panic!("expected NotFastForward, got {other}"),
    }
    assert!(err.to_string().contains("not an ancestor"));
    assert_eq!(c.head().await.unwrap().version, before);

    // Reset moves a branch anywhere (rollback); a tag keeps the abandoned head reachable.
    c.update_refs(
        "silver.t",
        &[
            RefOp::CreateTag {
                name: "abandoned".into(),
                snapshot_id: b.snapshot_id,
            },
            RefOp::Reset {
                branch: "main".into(),
                to: a.snapshot_id,
            },
        ],
        "rollback",
    )
    .await
    .unwrap();
    let t = c.table("silver.t").await.unwrap();
    assert_eq!(t.head("main"), Some(a.snapshot_id));
    assert_eq!(t.head("abandoned"), Some(b.snapshot_id));
    assert!(!t.is_branch("abandoned"));
    assert_eq!(
        ids(&t.scan(&At::reference("abandoned")).await.unwrap()),
        (0..6).collect::<Vec<_>>()
    );
    let names: Vec<_> = t.refs().into_iter().map(|r| (r.name, r.kind)).collect();
    assert_eq!(names[0], ("main".to_string(), "branch"));
    assert!(names.contains(&("abandoned".to_string(), "tag")));

    // Tags take no writes; removing refs works; unknown refs are named.
    let err = c
        .append(
            "silver.t",
            "abandoned",
            &[batch(7..8, "d")],
            BTreeMap::new(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tag"), "{err}");
    c.update_refs(
        "silver.t",
        &[RefOp::Remove {
            name: "side".into(),
        }],
        "refs",
    )
    .await
    .unwrap();
    let t = c.table("silver.t").await.unwrap();
    assert_eq!(t.head("side"), None);
    let err = t.scan(&At::reference("side")).await.unwrap_err();
    assert!(matches!(err, LakeError::NoSuchRef { .. }), "{err}");
    assert!(err.to_string().contains("side"));
    let err = t.scan(&At::Snapshot(42)).await.unwrap_err();
    assert!(
        matches!(
            err,
            LakeError::NoSuchSnapshot {
                snapshot_id: 42,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn incremental_read_returns_exactly_the_rows_added_between_two_snapshots() {
    let c = Catalog::in_memory();
    c.create_table("bronze.e", &schema(), &[]).await.unwrap();
    let mut snaps = Vec::new();
    for k in 0..5i64 {
        let s = c
            .append(
                "bronze.e",
                "audit",
                &[batch(k * 10..k * 10 + 10, "d")],
                BTreeMap::new(),
            )
            .await
            .unwrap();
        snaps.push(s.snapshot_id);
    }
    let t = c.table("bronze.e").await.unwrap();
    // (s1, s3]: rows of the 2nd and 3rd appends... indices 2 and 3.
    let inc = t
        .read_incremental("audit", Some(snaps[1]), Some(snaps[3]))
        .await
        .unwrap();
    assert_eq!(ids(inc.batches()), (20..40).collect::<Vec<_>>());
    assert_eq!(inc.through, Some(snaps[3]));
    assert_eq!(
        inc.parts
            .iter()
            .map(|p| p.snapshot.snapshot_id)
            .collect::<Vec<_>>(),
        vec![snaps[2], snaps[3]]
    );
    // From the beginning to the head.
    let all = t.read_incremental("audit", None, None).await.unwrap();
    assert_eq!(ids(all.batches()), (0..50).collect::<Vec<_>>());
    // Nothing new after the head.
    let none = t
        .read_incremental("audit", Some(snaps[4]), None)
        .await
        .unwrap();
    assert_eq!(none.num_rows(), 0);
    assert_eq!(none.through, Some(snaps[4]));
    // A watermark that is not on the branch is an error, not an empty read.
    let err = t
        .read_incremental("audit", Some(12345), None)
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::NotAncestor { .. }), "{err}");
}

#[tokio::test]
async fn replace_by_partition_rows_and_whole_table() {
    let c = Catalog::in_memory();
    c.create_table("gold.daily", &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    c.append(
        "gold.daily",
        "audit",
        &[batch(0..5, "2026-08-01"), batch(5..10, "2026-08-02")],
        BTreeMap::new(),
    )
    .await
    .unwrap();
    c.append(
        "gold.daily",
        "audit",
        &[batch(10..12, "2026-08-03")],
        BTreeMap::new(),
    )
    .await
    .unwrap();

    // Rebuild day 2 only.
    let day2 = lake::Struct::from_iter([Some(lake::Literal::string("2026-08-02"))]);
    let r = c
        .replace(
            "gold.daily",
            "audit",
            &Replace::Partitions(vec![day2]),
            &[batch(50..52, "2026-08-02")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    let t = c.table("gold.daily").await.unwrap();
    let s = t.snapshot(r.snapshot_id).unwrap();
    assert_eq!(s.operation, "overwrite");
    assert_eq!(s.summary["deleted-records"], "5");
    assert_eq!(s.summary["added-records"], "2");
    assert_eq!(s.summary["total-records"], "9");
    let expect: Vec<i64> = (0..5).chain(10..12).chain(50..52).collect();
    assert_eq!(ids(&t.scan(&At::reference("audit")).await.unwrap()), expect);

    // Delete rows by predicate (copy-on-write): ids divisible by 2 among day 1.
    let pred: lake::RowPredicate = std::sync::Arc::new(|b: &arrow_array::RecordBatch| {
        let id = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        Ok(id.iter().map(|v| v.map(|v| v < 5 && v % 2 == 0)).collect())
    });
    let r = c
        .replace(
            "gold.daily",
            "audit",
            &Replace::Rows(pred),
            &[],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    let t = c.table("gold.daily").await.unwrap();
    // The day-1 file was rewritten: it is an overwrite that deleted 5 rows and added 2 back.
    let s = t.snapshot(r.snapshot_id).unwrap();
    assert_eq!(s.summary["total-records"], "6");
    let expect: Vec<i64> = vec![1, 3, 10, 11, 50, 51];
    assert_eq!(ids(&t.scan(&At::reference("audit")).await.unwrap()), expect);

    // Whole table.
    let r = c
        .replace(
            "gold.daily",
            "audit",
            &Replace::All,
            &[batch(7..8, "2026-08-09")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    let t = c.table("gold.daily").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::reference("audit")).await.unwrap()),
        vec![7]
    );
    assert_eq!(
        t.snapshot(r.snapshot_id).unwrap().summary["total-records"],
        "1"
    );
    // Incremental reads refuse to pretend an overwrite was an append.
    let err = t.read_incremental("audit", None, None).await.unwrap_err();
    assert!(matches!(err, LakeError::NotAppendOnly { .. }), "{err}");
    // main was never touched.
    assert_eq!(t.head("main"), None);

    // SQL over a partitioned table, with a filter on the partition column.
    let sql = c.sql(None, &At::reference("audit")).await.unwrap();
    let rows = sql
        .query("select day, count(*) as n from gold.daily where day = '2026-08-09' group by day")
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&rows)
        .unwrap()
        .to_string();
    assert!(
        text.contains("2026-08-09") && text.contains("| 1 "),
        "{text}"
    );
}

/// A replace by rows that rewrites several files writes the rows it keeps from all of them
/// together (a file per partition), so a small table replaced by rows again and again does not
/// split into more files each time.
#[tokio::test]
async fn a_replace_by_rows_writes_what_it_keeps_together() {
    let c = Catalog::in_memory();
    c.create_table("gold.mart", &schema(), &[]).await.unwrap();
    for i in 0..4 {
        c.append(
            "gold.mart",
            "main",
            &[batch(i * 10..i * 10 + 10, "2026-08-01")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    }
    // Remove the first row of every file.
    let pred: lake::RowPredicate = std::sync::Arc::new(|b: &arrow_array::RecordBatch| {
        let id = b
            .column_by_name("id")
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::Int64Array>())
            .ok_or_else(|| LakeError::Other("no id".into()))?;
        Ok(id.iter().map(|v| v.map(|v| v % 10 == 0)).collect())
    });
    let r = c
        .replace(
            "gold.mart",
            "main",
            &Replace::Rows(pred),
            &[batch(100..102, "2026-08-02")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    let t = c.table("gold.mart").await.unwrap();
    let s = t.snapshot(r.snapshot_id).unwrap();
    assert_eq!(s.summary["deleted-data-files"], "4");
    assert_eq!(s.summary["deleted-records"], "40");
    // The 36 kept rows in one file, the two new rows in another.
    assert_eq!(s.summary["added-data-files"], "2");
    assert_eq!(s.summary["added-records"], "38");
    assert_eq!(t.data_files(&At::Main).await.unwrap().len(), 2);
    let expect: Vec<i64> = (0..40).filter(|i| i % 10 != 0).chain(100..102).collect();
    assert_eq!(ids(&t.scan(&At::Main).await.unwrap()), expect);
}

/// SQL reads a many-file table on several partitions at once (as many as the session's
/// target partitions, at most one a file), pushes its filters to iceberg's planning, and gives
/// the same answers as a scan; an empty `main` is an empty table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_reads_many_files_on_several_partitions() {
    let c = Catalog::in_memory();
    c.create_table("gold.cash", &schema(), &[]).await.unwrap();
    for f in 0..6 {
        c.append(
            "gold.cash",
            "audit",
            &[batch(f * 100..(f + 1) * 100, "2026-08-01")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    }
    let sql = c.sql(None, &At::reference("audit")).await.unwrap();
    let text = |rows: Vec<arrow_array::RecordBatch>| {
        arrow::util::pretty::pretty_format_batches(&rows)
            .unwrap()
            .to_string()
    };
    let all = text(
        sql.query(
            "select count(*) as n, sum(amount_minor) as s, count(distinct id) as d from gold.cash",
        )
        .await
        .unwrap(),
    );
    // 600 rows, ids 0..600, amount id * 100: sum 100 * (599 * 600 / 2).
    assert!(all.contains("| 600 | 17970000 | 600 |"), "{all}");
    let filtered = text(
        sql.query("select count(*) as n, min(id) as lo from gold.cash where id >= 250")
            .await
            .unwrap(),
    );
    assert!(filtered.contains("| 350 | 250 |"), "{filtered}");
    let plan = text(
        sql.query("explain select sum(amount_minor) from gold.cash where id >= 250")
            .await
            .unwrap(),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The filter prunes by the files' id bounds: files 0 and 1 (ids below 200) are not read.
    assert!(
        plan.contains(&format!(
            "LakeScanExec: gold.cash at snapshot {}, 4 files in {} partitions",
            c.table("gold.cash").await.unwrap().head("audit").unwrap(),
            cores.min(4)
        )),
        "{plan}"
    );
    // A count of every row is the manifests' record counts: no file is read for it.
    let counted = text(
        sql.query("explain select count(*) from gold.cash")
            .await
            .unwrap(),
    );
    assert!(!counted.contains("LakeScanExec"), "{counted}");
    let main = c.sql(None, &At::Main).await.unwrap();
    let empty = text(
        main.query("select count(*) as n from gold.cash")
            .await
            .unwrap(),
    );
    assert!(empty.contains("| 0 "), "{empty}");
}

#[tokio::test]
async fn time_travel_by_catalog_version_and_sql() {
    let c = Catalog::in_memory();
    c.create_table("gold.cash", &schema(), &[]).await.unwrap();
    let a = c
        .append(
            "gold.cash",
            "main",
            &[batch(0..4, "2026-08-01")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    c.append(
        "gold.cash",
        "main",
        &[batch(4..6, "2026-08-02")],
        BTreeMap::new(),
    )
    .await
    .unwrap();
    let old = c.table_at_version("gold.cash", a.version).await.unwrap();
    assert_eq!(ids(&old.scan(&At::Main).await.unwrap()), vec![0, 1, 2, 3]);

    let sql = c.sql(None, &At::Main).await.unwrap();
    let rows = sql
        .query("select day, sum(amount_minor) as total from gold.cash where id >= 1 group by day order by day")
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&rows)
        .unwrap()
        .to_string();
    assert!(
        text.contains("2026-08-01") && text.contains("600"),
        "{text}"
    );
    assert!(
        text.contains("2026-08-02") && text.contains("900"),
        "{text}"
    );
    let sql_old = c.sql(Some(a.version), &At::Main).await.unwrap();
    let rows = sql_old
        .query("select count(*) as n from gold.cash")
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&rows)
        .unwrap()
        .to_string();
    assert!(text.contains("| 4 "), "{text}");
    // Only queries run: DDL, DML and statements are refused, and the table stays.
    for statement in [
        "drop table gold.cash",
        "create view v as select 1",
        "insert into gold.cash select * from gold.cash",
        "set datafusion.execution.batch_size = 1",
    ] {
        let err = sql_old.query(statement).await.unwrap_err();
        assert!(
            err.to_string().starts_with("only queries run here"),
            "{statement}: {err}"
        );
    }
    assert_eq!(
        sql_old.count_rows("gold.cash").await.unwrap(),
        4,
        "still registered"
    );
    // Columns read without a query: what the query returns, in the order asked.
    let read = sql_old
        .read_columns("gold.cash", &["amount_minor", "id"])
        .await
        .unwrap();
    let queried = sql_old
        .query("select amount_minor, id from gold.cash")
        .await
        .unwrap();
    let sorted = |batches: &[arrow::array::RecordBatch]| {
        let mut lines: Vec<String> = arrow::util::pretty::pretty_format_batches(batches)
            .unwrap()
            .to_string()
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(sorted(&read), sorted(&queried));
    assert!(
        read.iter()
            .all(|b| b.schema().field(0).name() == "amount_minor")
    );
    assert_eq!(read.iter().map(|b| b.num_rows()).sum::<usize>(), 4);
    let missing = sql_old
        .read_columns("gold.cash", &["id", "nope"])
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("\"nope\""), "{missing}");
    // A table that is not lake's is read by the query.
    let listed = sql_old
        .read_columns("information_schema.tables", &["table_name"])
        .await
        .unwrap();
    assert!(
        sorted(&listed).iter().any(|l| l.contains("cash")),
        "{listed:?}"
    );
    // An empty main reads no rows.
    let empty_main = Catalog::in_memory();
    empty_main
        .create_table("gold.cash", &schema(), &[])
        .await
        .unwrap();
    let none = empty_main
        .sql(None, &At::Main)
        .await
        .unwrap()
        .read_columns("gold.cash", &["id"])
        .await
        .unwrap();
    assert_eq!(none.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    // A branch that a table does not have: the error names it.
    let sql_audit = c.sql(None, &At::reference("audit")).await.unwrap();
    assert_eq!(sql_audit.skipped.len(), 1);
    let err = sql_audit
        .query("select * from gold.cash")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("audit"), "{err}");
}

#[tokio::test]
async fn expire_keeps_what_refs_and_watermarks_need() {
    let c = Catalog::in_memory();
    c.create_table("bronze.x", &schema(), &[]).await.unwrap();
    let mut s = Vec::new();
    for k in 0..10i64 {
        s.push(
            c.append("bronze.x", "main", &[batch(k..k + 1, "d")], BTreeMap::new())
                .await
                .unwrap()
                .snapshot_id,
        );
    }
    let expired = c
        .expire_snapshots(
            "bronze.x",
            &lake::ExpireOptions {
                older_than_ms: i64::MAX,
                retain_last: 3,
                protect: vec![s[5]],
            },
        )
        .await
        .unwrap();
    assert_eq!(expired.len(), 5, "snapshots 0..5 expire, 5..10 stay");
    let t = c.table("bronze.x").await.unwrap();
    assert!(t.snapshot(s[4]).is_err());
    // The watermark still works for an incremental read.
    let inc = t.read_incremental("main", Some(s[5]), None).await.unwrap();
    assert_eq!(ids(inc.batches()), vec![6, 7, 8, 9]);
    // A read from the start cannot walk past the expired snapshots: an error that says so
    // (the caller reads in full), never the rows of the kept snapshots passed off as all.
    let err = t.read_incremental("main", None, None).await.unwrap_err();
    assert!(
        matches!(err, lake::LakeError::HistoryExpired { snapshot_id, .. } if snapshot_id == s[4]),
        "{err}"
    );
    // And the full table still reads every row.
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        (0..10).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn many_appends_keep_the_manifest_list_short() {
    let c = Catalog::in_memory();
    c.create_table("bronze.many", &schema(), &[]).await.unwrap();
    let mut snaps = Vec::new();
    for k in 0..300i64 {
        snaps.push(
            c.append(
                "bronze.many",
                "main",
                &[batch(k..k + 1, "d")],
                BTreeMap::new(),
            )
            .await
            .unwrap()
            .snapshot_id,
        );
    }
    let t = c.table("bronze.many").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        (0..300).collect::<Vec<_>>()
    );
    // Incremental reads still see each append's own rows after merges.
    let inc = t
        .read_incremental("main", Some(snaps[99]), Some(snaps[102]))
        .await
        .unwrap();
    assert_eq!(ids(inc.batches()), vec![100, 101, 102]);
    let list = head_manifest_list(&t).await;
    // Merged in tiers of four, manifests of under 64 entries sharing the first: 300 files =
    // one manifest of 256 and one of 43, and the new one (at most three carried per tier; above
    // the first an entry is rewritten once per tier, never on every merge). Without a shared
    // first tier it was nine manifests: 256, 16, 16, 4, 4, 1, 1, 1, 1.
    let mut sizes: Vec<u32> = list
        .entries()
        .iter()
        .map(|m| m.added_files_count.unwrap_or(0) + m.existing_files_count.unwrap_or(0))
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(sizes, vec![256, 43, 1]);
}

#[tokio::test]
async fn a_table_replaced_whole_carries_no_manifest_of_deleted_files_only() {
    let c = Catalog::in_memory();
    c.create_table("silver.latest", &schema(), &[])
        .await
        .unwrap();
    let mut snaps = Vec::new();
    for k in 0..6i64 {
        snaps.push(
            c.replace(
                "silver.latest",
                "main",
                &Replace::All,
                &[batch(10 * k..10 * k + 3, "d")],
                BTreeMap::new(),
            )
            .await
            .unwrap()
            .snapshot_id,
        );
    }
    let t = c.table("silver.latest").await.unwrap();
    let head = t.iceberg().metadata().current_snapshot().unwrap().clone();
    let list = head_manifest_list(&t).await;
    // This replace's own record of what it deleted, and its new file: nothing of the five
    // replaces before (each left a manifest of deleted files only, carried for good before).
    let counts: Vec<(i64, u32, u32)> = list
        .entries()
        .iter()
        .map(|m| {
            (
                m.added_snapshot_id,
                m.added_files_count.unwrap_or(0) + m.existing_files_count.unwrap_or(0),
                m.deleted_files_count.unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.iter().all(|(id, ..)| *id == head.snapshot_id()));
    assert_eq!(counts.iter().map(|c| c.1).sum::<u32>(), 1);
    assert_eq!(counts.iter().map(|c| c.2).sum::<u32>(), 1);
    // Every snapshot still reads as it was written, and the changes between two are whole.
    for (k, id) in snaps.iter().enumerate() {
        let k = k as i64;
        assert_eq!(
            ids(&t.scan(&At::Snapshot(*id)).await.unwrap()),
            (10 * k..10 * k + 3).collect::<Vec<_>>()
        );
    }
    let changes = t.file_changes(snaps[1], snaps[5]).await.unwrap();
    assert_eq!((changes.added.len(), changes.removed.len()), (1, 1));
}

#[tokio::test]
async fn file_changes_carry_any_sum_from_one_snapshot_to_another() {
    let c = Catalog::in_memory();
    c.create_table("gold.daily", &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    let append = |ids: std::ops::Range<i64>, day: &'static str| {
        let c = c.clone();
        async move {
            c.append("gold.daily", "audit", &[batch(ids, day)], BTreeMap::new())
                .await
                .unwrap()
                .snapshot_id
        }
    };
    append(0..5, "2026-08-01").await;
    let a = append(5..10, "2026-08-02").await;
    append(10..12, "2026-08-03").await;
    let day2 = lake::Struct::from_iter([Some(lake::Literal::string("2026-08-02"))]);
    let b = c
        .replace(
            "gold.daily",
            "audit",
            &Replace::Partitions(vec![day2]),
            &[batch(50..53, "2026-08-02")],
            BTreeMap::new(),
        )
        .await
        .unwrap()
        .snapshot_id;
    let whole = c
        .replace(
            "gold.daily",
            "audit",
            &Replace::All,
            &[batch(70..72, "2026-08-01"), batch(80..81, "2026-08-04")],
            BTreeMap::new(),
        )
        .await
        .unwrap()
        .snapshot_id;

    let t = c.table("gold.daily").await.unwrap();
    // Day 2's first file went and its replacement and day 3's file came.
    let ab = t.file_changes(a, b).await.unwrap();
    assert_eq!((ab.added.len(), ab.removed.len()), (2, 1), "{ab:?}");
    let ba = t.file_changes(b, a).await.unwrap();
    assert_eq!(
        (ba.added, ba.removed),
        (ab.removed.clone(), ab.added.clone())
    );
    assert!(t.file_changes(b, b).await.unwrap().added.is_empty());

    let version = c.head().await.unwrap().version;
    // (count, sum) of the table at one snapshot, or of the added or removed rows.
    let figures = |rows: Vec<arrow_array::RecordBatch>| -> (i64, i64) {
        let b = &rows[0];
        let int = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .map(|a| {
                    if arrow_array::Array::is_null(a, 0) {
                        0
                    } else {
                        a.value(0)
                    }
                })
                .unwrap()
        };
        (int(0), int(1))
    };
    let sum_sql = |from: &str| format!("select count(*), sum(amount_minor) from {from}");
    for (from, to) in [(a, b), (b, a), (a, whole), (whole, a), (b, whole), (b, b)] {
        let at = |id: i64| {
            let c = c.clone();
            async move {
                let sql = c.sql(Some(version), &At::Snapshot(id)).await.unwrap();
                figures(sql.query(&sum_sql("gold.daily")).await.unwrap())
            }
        };
        let changes = c
            .sql_changes(version, &[("gold.daily", from, to)])
            .await
            .unwrap();
        let added = figures(
            changes
                .query(&sum_sql(&format!("{}.gold.daily", lake::ADDED)))
                .await
                .unwrap(),
        );
        let removed = figures(
            changes
                .query(&sum_sql(&format!("{}.gold.daily", lake::REMOVED)))
                .await
                .unwrap(),
        );
        // A bare count of the added or removed rows is the files' record counts, unplanned.
        for (catalog, figures) in [(lake::ADDED, added), (lake::REMOVED, removed)] {
            let name = format!("{catalog}.gold.daily");
            assert_eq!(
                changes.count_rows(&name).await.unwrap(),
                figures.0,
                "{name}"
            );
            // A reach no file was added to or removed from says so without a query; one
            // that holds files never does (these files all hold rows).
            assert_eq!(
                changes.reads_no_files(&name).await.unwrap(),
                figures.0 == 0,
                "{name}: {from} -> {to}"
            );
        }
        let (before, after) = (at(from).await, at(to).await);
        let whole = c.sql(Some(version), &At::Snapshot(to)).await.unwrap();
        assert_eq!(whole.count_rows("gold.daily").await.unwrap(), after.0);
        // A table that is not lake's is counted by running the query.
        let listed = whole
            .query("select count(*), 0 from information_schema.tables")
            .await
            .unwrap();
        assert_eq!(
            whole.count_rows("information_schema.tables").await.unwrap(),
            figures(listed).0
        );
        let missing = whole.count_rows("gold.nothing").await.unwrap_err();
        assert!(missing.to_string().contains("nothing"), "{missing}");
        assert!(!whole.reads_no_files("gold.daily").await.unwrap());
        // A table that is not lake's may hold rows only a query can count.
        assert!(
            !whole
                .reads_no_files("information_schema.tables")
                .await
                .unwrap()
        );
        let missing = whole.reads_no_files("gold.nothing").await.unwrap_err();
        assert!(missing.to_string().contains("nothing"), "{missing}");
        assert_eq!(
            (
                before.0 + added.0 - removed.0,
                before.1 + added.1 - removed.1
            ),
            after,
            "{from} -> {to}: {before:?} + {added:?} - {removed:?}"
        );
    }
}

/// `RefOp::Empty` takes a table back to before its first snapshot on a branch: `main` reads
/// empty, another branch is gone, a tag keeps what they held, and `main` moves forward again.
#[tokio::test]
async fn a_branch_emptied_reads_as_before_its_first_snapshot_and_moves_on_again() {
    let c = Catalog::in_memory();
    c.create_table("silver.s", &schema(), &[]).await.unwrap();
    let s1 = c
        .append("silver.s", "audit", &[batch(0..3, "d")], BTreeMap::new())
        .await
        .unwrap();
    let ff = |to| RefOp::FastForward {
        branch: "main".into(),
        to,
    };
    c.update_refs("silver.s", &[ff(s1.snapshot_id)], "publish")
        .await
        .unwrap();
    c.update_refs(
        "silver.s",
        &[
            RefOp::CreateTag {
                name: "kept".into(),
                snapshot_id: s1.snapshot_id,
            },
            RefOp::Empty {
                branch: "main".into(),
            },
            RefOp::Empty {
                branch: "audit".into(),
            },
            RefOp::Empty {
                branch: "never-made".into(),
            },
        ],
        "rollback",
    )
    .await
    .unwrap();
    let t = c.table("silver.s").await.unwrap();
    assert_eq!(t.head("main"), None);
    assert_eq!(t.head("audit"), None);
    assert!(ids(&t.scan(&At::Main).await.unwrap()).is_empty());
    assert_eq!(
        ids(&t.scan(&At::reference("kept")).await.unwrap()),
        vec![0, 1, 2]
    );
    // SQL sees the emptied `main` as a table with no file to read; the tag still has one.
    let sql = c.sql(None, &At::Main).await.unwrap();
    assert!(sql.reads_no_files("silver.s").await.unwrap());
    let sql = c.sql(None, &At::reference("kept")).await.unwrap();
    assert!(!sql.reads_no_files("silver.s").await.unwrap());
    // A tag is not a branch to empty.
    assert!(matches!(
        c.update_refs(
            "silver.s",
            &[RefOp::Empty {
                branch: "kept".into()
            }],
            "x"
        )
        .await,
        Err(LakeError::NoSuchRef { .. })
    ));
    // The next write starts the branch again; main moves forward to it.
    let s2 = c
        .append("silver.s", "audit", &[batch(5..6, "d")], BTreeMap::new())
        .await
        .unwrap();
    c.update_refs("silver.s", &[ff(s2.snapshot_id)], "publish")
        .await
        .unwrap();
    let t = c.table("silver.s").await.unwrap();
    assert_eq!(ids(&t.scan(&At::Main).await.unwrap()), vec![5]);
}
