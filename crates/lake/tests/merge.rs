//! Row-level MERGE by key: semantics, pruning (files left unread and unrewritten), conflicts
//! with concurrent writers, and pyiceberg reading the merged table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lake::{At, Catalog, LakeError, MatchCondition, Merge, PartitionField, RefOp, Replace};

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("day", DataType::Utf8, false),
        Field::new("amount_minor", DataType::Int64, false),
        Field::new("lsn", DataType::Int64, true),
    ])
}

/// One row per `(id, day, amount, lsn)`.
fn rows(rs: &[(i64, &str, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(schema()),
        vec![
            Arc::new(Int64Array::from_iter_values(rs.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rs.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rs.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rs.iter().map(|r| r.3))),
        ],
    )
    .expect("test batch")
}

/// Ids `range` on `day`, amount = id * 100, lsn 1.
fn range(ids: std::ops::Range<i64>, day: &str) -> RecordBatch {
    let v: Vec<_> = ids.map(|i| (i, day, i * 100, 1)).collect();
    rows(&v)
}

type Row = (i64, String, i64, Option<i64>);

/// Every row, sorted.
fn all(batches: &[RecordBatch]) -> Vec<Row> {
    let mut out = Vec::new();
    for b in batches {
        let col = |n: &str| b.column_by_name(n).expect("column").clone();
        let (id, day, amount, lsn) = (col("id"), col("day"), col("amount_minor"), col("lsn"));
        let id = id.as_any().downcast_ref::<Int64Array>().expect("id");
        let day = day.as_any().downcast_ref::<StringArray>().expect("day");
        let amount = amount
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("amount");
        let lsn = lsn.as_any().downcast_ref::<Int64Array>().expect("lsn");
        for i in 0..b.num_rows() {
            out.push((
                id.value(i),
                day.value(i).to_string(),
                amount.value(i),
                (!lsn.is_null(i)).then(|| lsn.value(i)),
            ));
        }
    }
    out.sort();
    out
}

fn row(id: i64, day: &str, amount: i64, lsn: i64) -> Row {
    (id, day.to_string(), amount, Some(lsn))
}

async fn table_rows(c: &Catalog, name: &str, at: &At) -> Vec<Row> {
    all(&c.table(name).await.unwrap().scan(at).await.unwrap())
}

fn none() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// A table with `files` appends to `main`: ids 0..5, 5..10, … on day d.
async fn table_of(c: &Catalog, name: &str, files: i64, partition: &[PartitionField]) {
    c.create_table(name, &schema(), partition).await.unwrap();
    for f in 0..files {
        c.append(name, "main", &[range(f * 5..f * 5 + 5, "d")], none())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn matched_rows_are_updated_and_new_keys_inserted_in_one_overwrite() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 2, &[]).await;
    let r = c
        .merge(
            "silver.t",
            "main",
            &[rows(&[
                (3, "d", 333, 2),
                (4, "d", 444, 2),
                (100, "d", 1, 2),
            ])],
            &Merge::new(["id"]),
            BTreeMap::from([("k".to_string(), "v".to_string())]),
        )
        .await
        .unwrap();
    assert_eq!(
        (r.updated, r.inserted, r.deleted, r.unchanged_matches),
        (2, 1, 0, 0)
    );
    // Keys 3 and 4 are in the first file only: the second is pruned by its bounds.
    assert_eq!(
        (r.files_read, r.files_rewritten, r.files_pruned_by_bounds),
        (1, 1, 1)
    );
    let mut want: Vec<Row> = (0..10)
        .filter(|i| ![3, 4].contains(i))
        .map(|i| row(i, "d", i * 100, 1))
        .collect();
    want.extend([
        row(3, "d", 333, 2),
        row(4, "d", 444, 2),
        row(100, "d", 1, 2),
    ]);
    want.sort();
    assert_eq!(table_rows(&c, "silver.t", &At::Main).await, want);

    let t = c.table("silver.t").await.unwrap();
    let snap = r.snapshot.expect("committed");
    assert_eq!(t.head("main"), Some(snap.snapshot_id));
    let s = t.snapshot(snap.snapshot_id).unwrap();
    assert_eq!(s.operation, "overwrite");
    assert_eq!(s.summary["k"], "v");
    assert_eq!(s.summary["deleted-data-files"], "1");
    assert_eq!(s.summary["deleted-records"], "5");
    // The first file's 3 other rows, 2 updates and 1 insert, in one new file.
    assert_eq!(s.summary["added-records"], "6");
    assert_eq!(s.summary["added-data-files"], "1");
    assert_eq!(s.summary["total-records"], "11");
    assert_eq!(s.summary["total-data-files"], "2");
}

#[tokio::test]
async fn a_false_condition_leaves_the_existing_row() {
    let c = Catalog::in_memory();
    c.create_table("silver.orders", &schema(), &[])
        .await
        .unwrap();
    c.append(
        "silver.orders",
        "main",
        &[rows(&[(1, "d", 10, 5), (2, "d", 20, 5), (3, "d", 30, 5)])],
        none(),
    )
    .await
    .unwrap();
    // A late lower-LSN change to 1, a newer one to 2, an equal one to 3: only 2 is applied.
    let r = c
        .merge(
            "silver.orders",
            "main",
            &[rows(&[(1, "d", 11, 4), (2, "d", 22, 6), (3, "d", 33, 5)])],
            &Merge::new(["id"]).when_matched_update_if(MatchCondition::incoming_greater("lsn")),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.updated, r.unchanged_matches, r.inserted), (1, 2, 0));
    assert_eq!(
        table_rows(&c, "silver.orders", &At::Main).await,
        vec![row(1, "d", 10, 5), row(2, "d", 22, 6), row(3, "d", 30, 5)]
    );

    // Every match false: nothing to commit, nothing committed.
    let before = c.head().await.unwrap().version;
    let r = c
        .merge(
            "silver.orders",
            "main",
            &[rows(&[(1, "d", 11, 1)])],
            &Merge::new(["id"]).when_matched_update_if(MatchCondition::incoming_greater("lsn")),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(r.snapshot, None);
    assert_eq!(
        (r.unchanged_matches, r.files_read, r.files_rewritten),
        (1, 1, 0)
    );
    assert_eq!(c.head().await.unwrap().version, before);

    // A closure sees both rows: update only when the amount grows.
    let grows = MatchCondition::custom(|inc, i, old, j| {
        let a = |b: &RecordBatch, r: usize| {
            b.column(2)
                .as_any()
                .downcast_ref::<Int64Array>()
                .map(|c| c.value(r))
        };
        a(inc, i) > a(old, j)
    });
    let r = c
        .merge(
            "silver.orders",
            "main",
            &[rows(&[(1, "d", 9, 9), (3, "d", 31, 9)])],
            &Merge::new(["id"]).when_matched_update_if(grows),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.updated, r.unchanged_matches), (1, 1));
    assert_eq!(
        table_rows(&c, "silver.orders", &At::Main).await,
        vec![row(1, "d", 10, 5), row(2, "d", 22, 6), row(3, "d", 31, 9)]
    );
}

#[tokio::test]
async fn delete_by_key_removes_only_matched_rows() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 2, &[]).await;
    let r = c
        .merge(
            "silver.t",
            "main",
            // 7 is in the second file, 50 nowhere: it is not inserted.
            &[rows(&[(7, "d", 0, 0), (50, "d", 0, 0)])],
            &Merge::new(["id"])
                .when_matched_delete()
                .when_not_matched_do_nothing(),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.deleted, r.inserted, r.not_inserted), (1, 0, 1));
    assert_eq!((r.files_rewritten, r.files_pruned_by_bounds), (1, 1));
    let ids: Vec<i64> = table_rows(&c, "silver.t", &At::Main)
        .await
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4, 5, 6, 8, 9]);
    let t = c.table("silver.t").await.unwrap();
    let s = t.snapshot(r.snapshot.unwrap().snapshot_id).unwrap();
    assert_eq!(
        s.operation, "overwrite",
        "4 surviving rows were written again"
    );
    assert_eq!(s.summary["deleted-records"], "5");
    assert_eq!(s.summary["added-records"], "4");

    // Deleting every row of a file drops it and adds nothing: a `delete` snapshot.
    let r = c
        .merge(
            "silver.t",
            "main",
            &[range(0..5, "d")],
            &Merge::new(["id"]).when_matched_delete(),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.deleted, r.inserted, r.files_rewritten), (5, 0, 1));
    let t = c.table("silver.t").await.unwrap();
    let s = t.snapshot(r.snapshot.unwrap().snapshot_id).unwrap();
    assert_eq!(s.operation, "delete");
    assert_eq!(s.summary["total-records"], "4");
    assert!(!s.summary.contains_key("added-data-files"));
}

#[tokio::test]
async fn insert_only_new_keys_appends_and_rewrites_nothing() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.payments", 1, &[]).await;
    let r = c
        .merge(
            "silver.payments",
            "main",
            &[range(3..8, "d2")],
            &Merge::new(["id"]).when_matched_do_nothing(),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.inserted, r.unchanged_matches, r.updated), (3, 2, 0));
    assert_eq!((r.files_read, r.files_rewritten), (1, 0));
    let t = c.table("silver.payments").await.unwrap();
    let s = t.snapshot(r.snapshot.unwrap().snapshot_id).unwrap();
    assert_eq!(s.operation, "append");
    assert_eq!(s.summary["added-records"], "3");
    assert!(!s.summary.contains_key("deleted-data-files"));
    let got = table_rows(&c, "silver.payments", &At::Main).await;
    let days: Vec<(i64, &str)> = got.iter().map(|r| (r.0, r.1.as_str())).collect();
    assert_eq!(
        days,
        vec![
            (0, "d"),
            (1, "d"),
            (2, "d"),
            (3, "d"),
            (4, "d"),
            (5, "d2"),
            (6, "d2"),
            (7, "d2")
        ]
    );

    // Delivered again: nothing new, nothing committed.
    let before = c.head().await.unwrap().version;
    let r = c
        .merge(
            "silver.payments",
            "main",
            &[range(3..8, "d2")],
            &Merge::new(["id"]).when_matched_do_nothing(),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.snapshot, r.inserted, r.unchanged_matches), (None, 0, 5));
    assert_eq!(c.head().await.unwrap().version, before);
}

#[tokio::test]
async fn duplicate_or_null_keys_in_the_input_are_refused() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 1, &[]).await;
    let before = c.head().await.unwrap().version;
    let err = c
        .merge(
            "silver.t",
            "main",
            &[
                rows(&[(7, "d", 1, 1)]),
                rows(&[(8, "d", 1, 1), (7, "x", 2, 2)]),
            ],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap_err();
    match err {
        LakeError::DuplicateMergeKey { table, key } => {
            assert_eq!((table.as_str(), key.as_str()), ("silver.t", "id=7"));
        }
        other => panic!("expected DuplicateMergeKey, got {other}"),
    }
    // Two key columns: the error names both; the same id on other days is no duplicate.
    let err = c
        .merge(
            "silver.t",
            "main",
            &[rows(&[(7, "a", 1, 1), (7, "b", 1, 1), (7, "a", 2, 2)])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::DuplicateMergeKey { key, .. } if key == "id=7, day=a"),
        "{err}"
    );
    // A null key, an unknown key column: typed schema errors.
    let null_lsn = rows(&[(1, "d", 1, 1)]);
    let null_lsn = RecordBatch::try_new(
        null_lsn.schema(),
        vec![
            null_lsn.column(0).clone(),
            null_lsn.column(1).clone(),
            null_lsn.column(2).clone(),
            Arc::new(Int64Array::from(vec![None::<i64>])),
        ],
    )
    .unwrap();
    for (merge, what) in [
        (Merge::new(["lsn"]), "null"),
        (Merge::new(["nope"]), "not in the table"),
        (Merge::new(Vec::<String>::new()), "at least one key"),
    ] {
        let err = c
            .merge(
                "silver.t",
                "main",
                std::slice::from_ref(&null_lsn),
                &merge,
                none(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LakeError::Schema { detail, .. } if detail.contains(what)),
            "{what}: {err}"
        );
    }
    assert_eq!(c.head().await.unwrap().version, before, "nothing committed");
}

#[tokio::test]
async fn untouched_files_are_neither_opened_nor_rewritten() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 4, &[]).await;
    let t = c.table("silver.t").await.unwrap();
    let files = t.data_files(&At::Main).await.unwrap();
    assert_eq!(files.len(), 4);
    // Remove the bytes of every file but the one holding id 12: opening any of them would fail.
    let (keep, gone): (Vec<_>, Vec<_>) = files.iter().partition(|f| {
        f.lower_bounds()
            .values()
            .any(|d| *d.literal() == lake::PrimitiveLiteral::Long(10))
    });
    assert_eq!(keep.len(), 1);
    for f in &gone {
        c.file_io().delete(f.file_path()).await.unwrap();
    }
    let r = c
        .merge(
            "silver.t",
            "main",
            &[rows(&[(12, "d", 1212, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.files_read,
            r.files_rewritten,
            r.files_pruned_by_bounds,
            r.updated
        ),
        (1, 1, 3, 1)
    );
    let t = c.table("silver.t").await.unwrap();
    let now: Vec<String> = t
        .data_files(&At::Main)
        .await
        .unwrap()
        .iter()
        .map(|f| f.file_path().to_string())
        .collect();
    assert_eq!(now.len(), 4);
    for f in &gone {
        assert!(now.contains(&f.file_path().to_string()), "kept as it was");
    }
    assert!(!now.contains(&keep[0].file_path().to_string()), "rewritten");
}

#[tokio::test]
async fn files_are_pruned_by_partition_when_the_key_holds_its_source_column() {
    let c = Catalog::in_memory();
    c.create_table("silver.p", &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    // The same ids on three days: bounds alone cannot tell the files apart.
    for day in ["d1", "d2", "d3"] {
        c.append("silver.p", "main", &[range(0..10, day)], none())
            .await
            .unwrap();
    }
    let r = c
        .merge(
            "silver.p",
            "main",
            &[rows(&[(5, "d2", 55, 2)])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.files_pruned_by_partition,
            r.files_read,
            r.files_rewritten,
            r.updated
        ),
        (2, 1, 1, 1)
    );
    // Each append's manifest holds one day: those of d1 and d3 are not even opened.
    assert_eq!(r.manifests_pruned, 2);
    let got = table_rows(&c, "silver.p", &At::Main).await;
    assert_eq!(got.len(), 30);
    assert!(got.contains(&row(5, "d2", 55, 2)));
    assert!(got.contains(&row(5, "d1", 500, 1)) && got.contains(&row(5, "d3", 500, 1)));

    // Keyed by id alone, a match may be on any day: every file whose bounds hold 5 is read.
    let r = c
        .merge(
            "silver.p",
            "main",
            &[rows(&[(5, "d9", 1, 3)])],
            &Merge::new(["id"]).when_matched_do_nothing(),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.files_pruned_by_partition, r.files_read), (0, 3));
    assert_eq!((r.unchanged_matches, r.inserted), (3, 0));

    // A second key column's bounds prune too: (id 5, day "d0") is below every file's day.
    let r = c
        .merge(
            "silver.q",
            "main",
            &[rows(&[(5, "d0", 1, 3)])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await;
    assert!(matches!(r, Err(LakeError::NoSuchTable { .. })));
    c.create_table("silver.q", &schema(), &[]).await.unwrap();
    for day in ["d1", "d2"] {
        c.append("silver.q", "main", &[range(0..10, day)], none())
            .await
            .unwrap();
    }
    let r = c
        .merge(
            "silver.q",
            "main",
            &[rows(&[(5, "d0", 1, 3), (5, "d2", 1, 3)])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.files_pruned_by_bounds,
            r.files_read,
            r.updated,
            r.inserted
        ),
        (1, 1, 1, 1)
    );
}

#[tokio::test]
async fn a_concurrent_append_of_a_merge_key_makes_the_merge_conflict() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 1, &[]).await;
    // The merge reads the table, then another writer appends key 7 before it commits.
    let read = c.table("silver.t").await.unwrap();
    c.append("silver.t", "main", &[rows(&[(7, "d", 70, 9)])], none())
        .await
        .unwrap();
    let err = c
        .merge_table(
            read.clone(),
            "main",
            &[rows(&[(3, "d", 1, 2), (7, "d", 1, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::Conflict { detail, .. } if detail.contains("holds a row with a key")),
        "{err}"
    );
    // Their row is there, once.
    let got = table_rows(&c, "silver.t", &At::Main).await;
    assert_eq!(got.iter().filter(|r| r.0 == 7).count(), 1);
    assert!(got.contains(&row(3, "d", 300, 1)));

    // An append of other keys does not conflict: the merge is re-staged on the new head.
    c.append("silver.t", "main", &[rows(&[(8, "d", 80, 9)])], none())
        .await
        .unwrap();
    let read = c.table("silver.t").await.unwrap();
    c.append("silver.t", "main", &[rows(&[(9, "d", 90, 9)])], none())
        .await
        .unwrap();
    let r = c
        .merge_table(
            read,
            "main",
            &[rows(&[(3, "d", 1, 2), (20, "d", 1, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.updated, r.inserted), (1, 1));
    let ids: Vec<i64> = table_rows(&c, "silver.t", &At::Main)
        .await
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4, 7, 8, 9, 20]);
}

#[tokio::test]
async fn a_merge_conflicts_when_a_file_it_rewrote_was_removed_meanwhile() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 2, &[]).await;
    let read = c.table("silver.t").await.unwrap();
    // Another writer deletes ids 0..5 — the whole first file — adding no file.
    let below5: lake::RowPredicate = Arc::new(|b: &RecordBatch| {
        let id = b
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("id");
        Ok(id.iter().map(|v| v.map(|v| v < 5)).collect())
    });
    c.replace("silver.t", "main", &Replace::Rows(below5), &[], none())
        .await
        .unwrap();
    // Re-staged, the merge's rewrite of that file would bring back 0, 1, 2 and 4.
    let err = c
        .merge_table(
            read,
            "main",
            &[rows(&[(3, "d", 1, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::Conflict { detail, .. } if detail.contains("no longer live")),
        "{err}"
    );
    let ids: Vec<i64> = table_rows(&c, "silver.t", &At::Main)
        .await
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(ids, vec![5, 6, 7, 8, 9]);
}

#[tokio::test]
async fn a_merge_to_a_branch_leaves_main_and_refuses_tags() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 1, &[]).await;
    let head = c.table("silver.t").await.unwrap().head("main").unwrap();
    c.update_refs(
        "silver.t",
        &[RefOp::CreateTag {
            name: "v1".into(),
            snapshot_id: head,
        }],
        "tag",
    )
    .await
    .unwrap();
    // A new branch starts at main's head.
    let r = c
        .merge(
            "silver.t",
            "audit",
            &[rows(&[(1, "d", 11, 2), (9, "d", 9, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.updated, r.inserted), (1, 1));
    let t = c.table("silver.t").await.unwrap();
    assert_eq!(t.head("main"), Some(head));
    assert_eq!(
        t.snapshot(t.head("audit").unwrap()).unwrap().parent_id,
        Some(head)
    );
    assert_eq!(table_rows(&c, "silver.t", &At::Main).await.len(), 5);
    let audit = table_rows(&c, "silver.t", &At::reference("audit")).await;
    assert_eq!(audit.len(), 6);
    assert!(audit.contains(&row(1, "d", 11, 2)));
    let err = c
        .merge(
            "silver.t",
            "v1",
            &[rows(&[(1, "d", 1, 1)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::WriteToTag { .. }), "{err}");
}

const READER: &str = r#"
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1])
md = t.metadata
def rows(ref):
    tab = t.scan(snapshot_id=md.refs[ref].snapshot_id).to_arrow()
    return sorted(zip(*(tab.column(c).to_pylist() for c in ["id", "day", "amount_minor", "lsn"])))
print(json.dumps({
    "main": rows("main"),
    "audit": rows("audit"),
    "operations": {str(s.snapshot_id): s.summary.operation.value for s in md.snapshots},
}))
"#;

fn python() -> PathBuf {
    match std::env::var("SUGARSHACK_PYTHON") {
        Ok(p) => PathBuf::from(p),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_default())
            .join(".cache/sugarshack/venv/bin/python"),
    }
}

#[tokio::test]
async fn pyiceberg_reads_merged_main_and_branch_with_the_same_rows() {
    let py = python();
    if !py.exists() {
        eprintln!(
            "\n\n!!! SKIPPED pyiceberg_reads_merged_main_and_branch_with_the_same_rows: no python at {} (set SUGARSHACK_PYTHON to a python with pyiceberg; CI provides one) !!!\n\n",
            py.display()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    c.create_table("silver.m", &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    c.append(
        "silver.m",
        "main",
        &[range(0..4, "2026-08-01"), range(4..8, "2026-08-02")],
        none(),
    )
    .await
    .unwrap();
    let head = c.table("silver.m").await.unwrap().head("main").unwrap();
    c.update_refs(
        "silver.m",
        &[RefOp::CreateBranch {
            name: "audit".into(),
            snapshot_id: head,
        }],
        "branch",
    )
    .await
    .unwrap();
    let on_main = c
        .merge(
            "silver.m",
            "main",
            &[rows(&[
                (1, "2026-08-01", 111, 2),
                (20, "2026-08-03", 2000, 2),
            ])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await
        .unwrap();
    let on_audit = c
        .merge(
            "silver.m",
            "audit",
            &[rows(&[
                (5, "2026-08-02", 555, 3),
                (30, "2026-08-01", 3000, 3),
            ])],
            &Merge::new(["id", "day"])
                .when_matched_update_if(MatchCondition::incoming_greater("lsn")),
            none(),
        )
        .await
        .unwrap();
    let deleted = c
        .merge(
            "silver.m",
            "audit",
            &[rows(&[(6, "2026-08-02", 0, 0)])],
            &Merge::new(["id", "day"]).when_matched_delete(),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(on_main.files_pruned_by_partition, 1);
    assert_eq!(deleted.deleted, 1);

    let t = c.table("silver.m").await.unwrap();
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(READER)
        .arg(t.metadata_location())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "pyiceberg failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let as_rows = |v: &serde_json::Value| -> Vec<Row> {
        v.as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r[0].as_i64().unwrap(),
                    r[1].as_str().unwrap().to_string(),
                    r[2].as_i64().unwrap(),
                    r[3].as_i64(),
                )
            })
            .collect()
    };
    let main = table_rows(&c, "silver.m", &At::Main).await;
    let audit = table_rows(&c, "silver.m", &At::reference("audit")).await;
    assert_eq!(as_rows(&got["main"]), main);
    assert_eq!(as_rows(&got["audit"]), audit);
    assert!(
        main.contains(&row(1, "2026-08-01", 111, 2))
            && main.contains(&row(20, "2026-08-03", 2000, 2))
    );
    assert_eq!(main.len(), 9);
    assert!(
        audit.contains(&row(5, "2026-08-02", 555, 3))
            && audit.contains(&row(30, "2026-08-01", 3000, 3))
    );
    assert!(!audit.iter().any(|r| r.0 == 6));
    assert_eq!(audit.len(), 8);
    let ops = &got["operations"];
    for (r, op) in [
        (&on_main, "overwrite"),
        (&on_audit, "overwrite"),
        (&deleted, "overwrite"),
    ] {
        let id = r.snapshot.as_ref().unwrap().snapshot_id.to_string();
        assert_eq!(ops[&id], op, "snapshot {id}");
    }
}

#[tokio::test]
async fn staged_merges_of_two_tables_land_in_one_catalog_commit() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.a", 1, &[]).await;
    table_of(&c, "silver.b", 1, &[]).await;
    let mut changes = Vec::new();
    let mut reports = Vec::new();
    for name in ["silver.a", "silver.b"] {
        let t = c.table(name).await.unwrap();
        let staged = t
            .stage_merge(
                "audit",
                &[rows(&[(2, "d", 22, 2), (9, "d", 9, 2)])],
                &Merge::new(["id"]),
                none(),
            )
            .await
            .unwrap();
        assert_eq!(staged.report.snapshot, None, "not committed yet");
        changes.push(staged.change.expect("a change"));
        reports.push(staged.report);
    }
    // Nothing to do: no change to stage.
    let t = c.table("silver.a").await.unwrap();
    let idle = t
        .stage_merge(
            "audit",
            &[rows(&[(2, "d", 1, 1)])],
            &Merge::new(["id"]).when_matched_do_nothing(),
            none(),
        )
        .await
        .unwrap();
    assert!(idle.change.is_none());
    let before = c.head().await.unwrap().version;
    let committed = c
        .commit(changes, "merge", "silver run", none())
        .await
        .unwrap();
    assert_eq!(committed.version, before + 1);
    for (name, r) in ["silver.a", "silver.b"].into_iter().zip(reports) {
        assert_eq!((r.updated, r.inserted), (1, 1));
        let got = table_rows(&c, name, &At::reference("audit")).await;
        assert!(got.contains(&row(2, "d", 22, 2)) && got.contains(&row(9, "d", 9, 2)));
        assert_eq!(got.len(), 6);
    }
}

/// Write `md` as a metadata file under its location and register it as `name` (how a table
/// another engine made arrives in the catalog).
async fn register(c: &Catalog, name: &str, md: &iceberg::spec::TableMetadata) {
    let loc = format!("{}/metadata/00001-evolved.metadata.json", md.location());
    c.file_io()
        .new_output(&loc)
        .unwrap()
        .write(serde_json::to_vec(md).unwrap().into())
        .await
        .unwrap();
    let tn = lake::TableName::parse(name).unwrap();
    let ident = iceberg::TableIdent::new(
        iceberg::NamespaceIdent::new(tn.namespace.clone()),
        tn.table.clone(),
    );
    iceberg::Catalog::register_table(c, &ident, loc)
        .await
        .unwrap();
}

#[tokio::test]
async fn files_of_an_older_partition_spec_are_merged_in_their_own_spec() {
    let c = Catalog::in_memory();
    // Spec 0 (unpartitioned): one file of ids 0..8 on days d1 and d2.
    c.create_table("silver.first", &schema(), &[])
        .await
        .unwrap();
    c.append(
        "silver.first",
        "main",
        &[range(0..4, "d1"), range(4..8, "d2")],
        none(),
    )
    .await
    .unwrap();
    let t = c.table("silver.first").await.unwrap();
    let day_id = t
        .metadata()
        .current_schema()
        .field_by_name("day")
        .unwrap()
        .id;
    let md = t
        .metadata()
        .clone()
        .into_builder(Some(t.metadata_location().to_string()))
        .add_partition_spec(
            iceberg::spec::UnboundPartitionSpec::builder()
                .add_partition_field(day_id, "day", lake::Transform::Identity)
                .unwrap()
                .build(),
        )
        .unwrap()
        .set_default_partition_spec(-1)
        .unwrap()
        .build()
        .unwrap()
        .metadata;
    register(&c, "silver.evolved", &md).await;
    // Spec 1 (by day): files for d1 and d2.
    c.append(
        "silver.evolved",
        "main",
        &[range(10..12, "d1"), range(12..14, "d2")],
        none(),
    )
    .await
    .unwrap();

    let r = c
        .merge(
            "silver.evolved",
            "main",
            &[rows(&[
                (5, "d2", 55, 2),
                (11, "d1", 111, 2),
                (30, "d3", 3, 2),
            ])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await
        .unwrap();
    // The spec-0 file (ids 0..8, no partition to tell) and the d1 file are read and
    // rewritten; the d2 file of spec 1 holds neither (5, d2) by its bounds.
    assert_eq!((r.updated, r.inserted), (2, 1));
    assert_eq!(
        (
            r.files_read,
            r.files_rewritten,
            r.files_pruned_by_partition,
            r.files_pruned_by_bounds
        ),
        (2, 2, 0, 1)
    );
    let mut want: Vec<Row> = (0..8)
        .filter(|&i| i != 5)
        .map(|i| row(i, if i < 4 { "d1" } else { "d2" }, i * 100, 1))
        .chain([10, 12, 13].map(|i| row(i, if i < 12 { "d1" } else { "d2" }, i * 100, 1)))
        .collect();
    want.extend([
        row(5, "d2", 55, 2),
        row(11, "d1", 111, 2),
        row(30, "d3", 3, 2),
    ]);
    want.sort();
    assert_eq!(table_rows(&c, "silver.evolved", &At::Main).await, want);

    // Now every file is of spec 1: a key in d1 prunes d2's and d3's files by partition.
    let r = c
        .merge(
            "silver.evolved",
            "main",
            &[rows(&[(0, "d1", 1, 3)])],
            &Merge::new(["id", "day"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(r.updated, 1);
    // The files now: the merge's new d1, d2 and d3 files and the untouched d2 file.
    assert_eq!((r.files_pruned_by_partition, r.files_read), (3, 1), "{r:?}");
}

#[tokio::test]
async fn a_merge_that_must_read_rows_refuses_a_branch_with_delete_files() {
    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, ManifestListWriter,
        ManifestWriterBuilder, Operation, Snapshot, Summary,
    };
    let c = Catalog::in_memory();
    table_of(&c, "silver.first", 1, &[]).await;
    let t = c.table("silver.first").await.unwrap();
    let md = t.metadata();
    let head = md.current_snapshot().unwrap();
    let io = c.file_io();
    let new_id = head.snapshot_id() + 1;
    let seq = md.next_sequence_number();
    // Another engine's merge-on-read delete: a position delete file in a delete manifest.
    let del = DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(format!("{}/data/pos-deletes-1.parquet", md.location()))
        .file_format(DataFileFormat::Parquet)
        .partition(lake::Struct::empty())
        .record_count(1)
        .file_size_in_bytes(100)
        .build()
        .unwrap();
    let out = io
        .new_output(format!("{}/metadata/deletes-m0.avro", md.location()))
        .unwrap();
    let mut w = ManifestWriterBuilder::new(
        out,
        Some(new_id),
        md.current_schema().clone(),
        md.default_partition_spec().as_ref().clone(),
    )
    .build_v2_deletes();
    w.add_file(del, -1).unwrap();
    let deletes = w.write_manifest_file().await.unwrap();
    let parent = t.iceberg().manifest_list_reader(head).load().await.unwrap();
    let list_path = format!("{}/metadata/snap-{new_id}-deletes.avro", md.location());
    let mut list = ManifestListWriter::v2(
        io.new_output(&list_path).unwrap().writer().await.unwrap(),
        new_id,
        Some(head.snapshot_id()),
        seq,
    );
    list.add_manifests(parent.entries().iter().cloned().chain([deletes]))
        .unwrap();
    list.close().await.unwrap();
    let snap = Snapshot::builder()
        .with_snapshot_id(new_id)
        .with_parent_snapshot_id(Some(head.snapshot_id()))
        .with_sequence_number(seq)
        .with_timestamp_ms(head.timestamp_ms() + 1)
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation: Operation::Delete,
            additional_properties: Default::default(),
        })
        .with_schema_id(md.current_schema_id())
        .build();
    let md = md
        .clone()
        .into_builder(Some(t.metadata_location().to_string()))
        .set_branch_snapshot(snap, "main")
        .unwrap()
        .build()
        .unwrap()
        .metadata;
    register(&c, "silver.deleted", &md).await;

    // Key 3 may be in the data file: reading it would ignore the position deletes.
    let before = c.head().await.unwrap().version;
    let err = c
        .merge(
            "silver.deleted",
            "main",
            &[rows(&[(3, "d", 1, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::DeleteFilesUnsupported { table, .. } if table == "silver.deleted"),
        "{err}"
    );
    assert_eq!(c.head().await.unwrap().version, before);
    // Key 100 is outside every file's bounds: nothing is read, and it is inserted.
    let r = c
        .merge(
            "silver.deleted",
            "main",
            &[rows(&[(100, "d", 1, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        (r.inserted, r.files_read, r.files_pruned_by_bounds),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn the_conflict_check_does_not_open_added_files_whose_bounds_hold_no_key() {
    let c = Catalog::in_memory();
    table_of(&c, "silver.t", 1, &[]).await;
    let read = c.table("silver.t").await.unwrap();
    let wrote = c
        .append("silver.t", "main", &[range(50..60, "d")], none())
        .await
        .unwrap();
    let t = c.table("silver.t").await.unwrap();
    let (mut added, _) = t
        .data_files(&At::Main)
        .await
        .unwrap()
        .into_iter()
        .partition::<Vec<_>, _>(|f| {
            f.lower_bounds()
                .values()
                .any(|d| *d.literal() == lake::PrimitiveLiteral::Long(50))
        });
    let added = added.pop().expect("the concurrent file");
    // Opening it would now fail: the retried merge must judge it by its bounds alone.
    c.file_io().delete(added.file_path()).await.unwrap();
    let r = c
        .merge_table(
            read,
            "main",
            &[rows(&[(3, "d", 1, 2), (20, "d", 1, 2)])],
            &Merge::new(["id"]),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.updated, r.inserted), (1, 1));
    let t = c.table("silver.t").await.unwrap();
    let head = r.snapshot.unwrap().snapshot_id;
    assert_eq!(
        t.snapshot(head).unwrap().parent_id,
        Some(wrote.snapshot_id),
        "re-staged on the concurrent append"
    );
}

/// A deterministic pseudo-random sequence (no wall clock, no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn random_merges_agree_with_a_model() {
    let c = Catalog::in_memory();
    c.create_table("silver.r", &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    let day = |id: i64| format!("d{}", id % 3);
    let mut model: BTreeMap<(i64, String), (i64, i64)> = BTreeMap::new();
    let mut rng = Lcg(7);
    let mut tried = [0usize; 4];
    for round in 0..40 {
        // Distinct keys, random amounts and LSNs.
        let mut ids: Vec<i64> = (0..1 + rng.next(8)).map(|_| rng.next(40) as i64).collect();
        ids.sort_unstable();
        ids.dedup();
        let incoming: Vec<(i64, String, i64, i64)> = ids
            .iter()
            .map(|&i| (i, day(i), rng.next(1000) as i64, rng.next(10) as i64))
            .collect();
        let mode = rng.next(4) as usize;
        tried[mode] += 1;
        let merge = match mode {
            0 => Merge::new(["id", "day"]),
            1 => Merge::new(["id", "day"])
                .when_matched_update_if(MatchCondition::incoming_greater("lsn")),
            2 => Merge::new(["id", "day"]).when_matched_do_nothing(),
            _ => Merge::new(["id", "day"])
                .when_matched_delete()
                .when_not_matched_do_nothing(),
        };
        let (mut updated, mut inserted, mut deleted, mut unchanged) = (0, 0, 0, 0);
        for (id, d, amount, lsn) in &incoming {
            let key = (*id, d.clone());
            match (model.get(&key).copied(), mode) {
                (None, 3) => {}
                (None, _) => {
                    inserted += 1;
                    model.insert(key, (*amount, *lsn));
                }
                (Some(_), 0) => {
                    updated += 1;
                    model.insert(key, (*amount, *lsn));
                }
                (Some((_, old)), 1) if *lsn > old => {
                    updated += 1;
                    model.insert(key, (*amount, *lsn));
                }
                (Some(_), 3) => {
                    deleted += 1;
                    model.remove(&key);
                }
                (Some(_), _) => unchanged += 1,
            }
        }
        let batch = {
            let v: Vec<(i64, &str, i64, i64)> = incoming
                .iter()
                .map(|(i, d, a, l)| (*i, d.as_str(), *a, *l))
                .collect();
            rows(&v)
        };
        let branch = if round % 2 == 0 { "main" } else { "audit" };
        // Both branches carry the same history: audit follows main before each of its merges.
        if branch == "audit"
            && let Some(head) = c.table("silver.r").await.unwrap().head("main")
        {
            c.update_refs(
                "silver.r",
                &[RefOp::Reset {
                    branch: "audit".into(),
                    to: head,
                }],
                "follow",
            )
            .await
            .unwrap();
        }
        let r = c
            .merge("silver.r", branch, &[batch], &merge, none())
            .await
            .unwrap();
        assert_eq!(
            (r.updated, r.inserted, r.deleted, r.unchanged_matches),
            (updated, inserted, deleted, unchanged),
            "round {round} mode {mode}"
        );
        if branch == "audit"
            && let Some(s) = &r.snapshot
        {
            c.update_refs(
                "silver.r",
                &[RefOp::FastForward {
                    branch: "main".into(),
                    to: s.snapshot_id,
                }],
                "publish",
            )
            .await
            .unwrap();
        }
        let want: Vec<Row> = model
            .iter()
            .map(|((i, d), (a, l))| (*i, d.clone(), *a, Some(*l)))
            .collect();
        assert_eq!(
            table_rows(&c, "silver.r", &At::Main).await,
            want,
            "round {round} mode {mode}"
        );
    }
    assert!(tried.iter().all(|&n| n > 0), "every mode tried: {tried:?}");
}

/// `rows`, with the lsn of the rows at `null_at` null.
fn with_null_lsn(b: RecordBatch, null_at: &[usize]) -> RecordBatch {
    let lsn = b
        .column(3)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("lsn")
        .iter()
        .enumerate()
        .map(|(i, v)| if null_at.contains(&i) { None } else { v })
        .collect::<Int64Array>();
    let mut cols = b.columns().to_vec();
    cols[3] = Arc::new(lsn);
    RecordBatch::try_new(b.schema(), cols).expect("batch")
}

#[tokio::test]
async fn incoming_greater_treats_null_as_lowest() {
    let c = Catalog::in_memory();
    c.create_table("silver.n", &schema(), &[]).await.unwrap();
    // Existing: 1 has no lsn, 2 has lsn 5.
    c.append(
        "silver.n",
        "main",
        &[with_null_lsn(
            rows(&[(1, "d", 10, 0), (2, "d", 20, 5)]),
            &[0],
        )],
        none(),
    )
    .await
    .unwrap();
    // Incoming: 1 with lsn 0 (greater than null), 2 without lsn (never greater).
    let r = c
        .merge(
            "silver.n",
            "main",
            &[with_null_lsn(
                rows(&[(1, "d", 11, 0), (2, "d", 22, 0)]),
                &[1],
            )],
            &Merge::new(["id"]).when_matched_update_if(MatchCondition::incoming_greater("lsn")),
            none(),
        )
        .await
        .unwrap();
    assert_eq!((r.updated, r.unchanged_matches), (1, 1));
    assert_eq!(
        table_rows(&c, "silver.n", &At::Main).await,
        vec![row(1, "d", 11, 0), row(2, "d", 20, 5)]
    );
    // A condition column that is not in the table is a typed error.
    let err = c
        .merge(
            "silver.n",
            "main",
            &[rows(&[(1, "d", 1, 1)])],
            &Merge::new(["id"]).when_matched_update_if(MatchCondition::incoming_greater("nope")),
            none(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::Schema { .. }), "{err}");
}

#[tokio::test]
async fn a_day_partitioned_timestamp_key_prunes_by_partition_and_string_bounds() {
    use arrow_array::TimestampMicrosecondArray;
    use arrow_schema::TimeUnit;
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Utf8, false),
        Field::new("created_at", ts.clone(), false),
        Field::new("lsn", DataType::Int64, false),
    ]));
    const DAY_US: i64 = 86_400_000_000;
    let orders = |rs: &[(&str, i64, i64)]| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(rs.iter().map(|r| r.0))),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(rs.iter().map(|r| r.1))
                        .with_timezone("+00:00"),
                ),
                Arc::new(Int64Array::from_iter_values(rs.iter().map(|r| r.2))),
            ],
        )
        .expect("orders")
    };
    let c = Catalog::in_memory();
    c.create_table(
        "silver.orders",
        &schema,
        &[PartitionField::day("created_at")],
    )
    .await
    .unwrap();
    // Three days, and on day 2 a second file of other order ids.
    for (ids, day) in [
        (["o-100", "o-101"], 1),
        (["o-200", "o-201"], 2),
        (["o-300", "o-301"], 3),
        (["o-900", "o-901"], 2),
    ] {
        let at = day * DAY_US + 3_600_000_000;
        c.append(
            "silver.orders",
            "main",
            &[orders(&[(ids[0], at, 1), (ids[1], at + 1, 1)])],
            none(),
        )
        .await
        .unwrap();
    }
    let r = c
        .merge(
            "silver.orders",
            "main",
            &[orders(&[("o-201", 2 * DAY_US + 3_600_000_001, 7)])],
            &Merge::new(["order_id", "created_at"])
                .when_matched_update_if(MatchCondition::incoming_greater("lsn")),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.files_pruned_by_partition,
            r.files_pruned_by_bounds,
            r.files_read,
            r.files_rewritten,
            r.updated
        ),
        (2, 1, 1, 1, 1),
        "{r:?}"
    );
    let t = c.table("silver.orders").await.unwrap();
    let lsns: Vec<(String, i64)> = t
        .scan(&At::Main)
        .await
        .unwrap()
        .iter()
        .flat_map(|b| {
            let id = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let lsn = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
            (0..b.num_rows())
                .map(|i| (id.value(i).to_string(), lsn.value(i)))
                .collect::<Vec<_>>()
        })
        .filter(|(_, l)| *l != 1)
        .collect();
    assert_eq!(lsns, vec![("o-201".to_string(), 7)]);
}
