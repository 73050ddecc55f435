//! The branch-aware writer honours what Iceberg table metadata can hold: typed ref errors,
//! format versions, concurrent replaces, evolved partition specs, summaries without totals,
//! ref retention, delete files and manifest pruning.

mod common;

use std::collections::BTreeMap;

use common::{batch, ids, schema};
use iceberg::spec::{
    FormatVersion, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{NamespaceIdent, TableIdent};
use lake::{At, Catalog, LakeError, Literal, PartitionField, RefOp, Replace, Struct, TableName};

fn no_props() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// Write `md` as a metadata file under its location and register it as `name` (how a table
/// another engine made arrives in the catalog).
async fn register(c: &Catalog, name: &str, md: &TableMetadata, file: &str) {
    let loc = format!("{}/metadata/{file}.metadata.json", md.location());
    c.file_io()
        .new_output(&loc)
        .unwrap()
        .write(serde_json::to_vec(md).unwrap().into())
        .await
        .unwrap();
    let tn = TableName::parse(name).unwrap();
    let ident = TableIdent::new(NamespaceIdent::new(tn.namespace.clone()), tn.table.clone());
    iceberg::Catalog::register_table(c, &ident, loc)
        .await
        .unwrap();
}

/// A new table's metadata built by iceberg-rust itself, at any format version.
fn built_metadata(c: &Catalog, name: &str, version: FormatVersion) -> TableMetadata {
    let ice = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&schema()).unwrap();
    TableMetadataBuilder::new(
        ice,
        UnboundPartitionSpec::builder().build(),
        SortOrder::unsorted_order(),
        c.default_table_location(&TableName::parse(name).unwrap()),
        version,
        Default::default(),
    )
    .unwrap()
    .build()
    .unwrap()
    .metadata
}

#[tokio::test]
async fn tags_and_main_have_their_own_errors() {
    let c = Catalog::in_memory();
    c.create_table("silver.t", &schema(), &[]).await.unwrap();
    let a = c
        .append("silver.t", "main", &[batch(0..3, "d")], no_props())
        .await
        .unwrap();
    c.update_refs(
        "silver.t",
        &[RefOp::CreateTag {
            name: "v1".into(),
            snapshot_id: a.snapshot_id,
        }],
        "tag",
    )
    .await
    .unwrap();

    let err = c
        .append("silver.t", "v1", &[batch(3..4, "d")], no_props())
        .await
        .unwrap_err();
    match &err {
        LakeError::WriteToTag { table, name } => {
            assert_eq!(table, "silver.t");
            assert_eq!(name, "v1");
        }
        other => panic!("expected WriteToTag, got {other:?}"),
    }
    let err = c
        .replace(
            "silver.t",
            "v1",
            &lake::Replace::All,
            &[batch(3..4, "d")],
            no_props(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LakeError::WriteToTag { .. }), "{err:?}");

    let err = c
        .update_refs(
            "silver.t",
            &[RefOp::Remove {
                name: "main".into(),
            }],
            "refs",
        )
        .await
        .unwrap_err();
    match &err {
        LakeError::CannotRemoveMain { table } => assert_eq!(table, "silver.t"),
        other => panic!("expected CannotRemoveMain, got {other:?}"),
    }
    // Nothing moved.
    let t = c.table("silver.t").await.unwrap();
    assert_eq!(t.head("main"), Some(a.snapshot_id));
    assert_eq!(
        ids(&t.scan(&At::reference("v1")).await.unwrap()),
        vec![0, 1, 2]
    );
}

#[tokio::test]
async fn only_v2_tables_take_writes_and_ref_changes_but_all_read() {
    let c = Catalog::in_memory();
    // A v2 table to borrow a snapshot id from is not needed: ref ops are refused before lookup.
    for (name, version) in [
        ("silver.old", FormatVersion::V1),
        ("silver.new", FormatVersion::V3),
    ] {
        let md = built_metadata(&c, name, version);
        register(&c, name, &md, "00000-built").await;
        let expect = version as u8;
        let refused = |e: LakeError| match e {
            LakeError::UnsupportedTableFormat { table, found, .. } => {
                assert_eq!(table, name);
                assert_eq!(found, expect);
            }
            other => panic!("{name}: expected UnsupportedTableFormat, got {other:?}"),
        };
        let before = c.head().await.unwrap().version;
        refused(
            c.append(name, "main", &[batch(0..3, "d")], no_props())
                .await
                .unwrap_err(),
        );
        refused(
            c.replace(
                name,
                "main",
                &lake::Replace::All,
                &[batch(0..3, "d")],
                no_props(),
            )
            .await
            .unwrap_err(),
        );
        let t = c.table(name).await.unwrap();
        refused(t.write_data_files(&[batch(0..3, "d")]).await.unwrap_err());
        refused(
            t.stage_append("audit", &[batch(0..3, "d")], no_props())
                .await
                .unwrap_err(),
        );
        refused(
            c.update_refs(name, &[RefOp::Remove { name: "x".into() }], "refs")
                .await
                .unwrap_err(),
        );
        refused(
            c.update_refs(
                name,
                &[RefOp::Reset {
                    branch: "main".into(),
                    to: 1,
                }],
                "refs",
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            c.head().await.unwrap().version,
            before,
            "{name}: nothing committed"
        );
        // Reads stay allowed.
        assert!(t.scan(&At::Main).await.unwrap().is_empty());
        assert!(t.data_files(&At::Main).await.unwrap().is_empty());
        assert!(t.snapshots().is_empty());
    }
    let sql = c.sql(None, &At::Main).await.unwrap();
    let rows = sql.query("select count(*) from silver.old").await.unwrap();
    assert_eq!(rows[0].num_rows(), 1);
}

fn day(d: &str) -> Struct {
    Struct::from_iter([Some(Literal::string(d))])
}

fn id_at_least(min: i64) -> lake::RowPredicate {
    std::sync::Arc::new(move |b: &arrow_array::RecordBatch| {
        let id = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        Ok(id.iter().map(|v| v.map(|v| v >= min)).collect())
    })
}

#[tokio::test]
async fn a_retried_replace_refuses_data_another_writer_added_where_it_replaces() {
    let c = Catalog::in_memory();
    let t = "gold.daily";
    c.create_table(t, &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    c.append(
        t,
        "main",
        &[batch(0..5, "2026-08-01"), batch(5..10, "2026-08-02")],
        no_props(),
    )
    .await
    .unwrap();

    // For each kind of replace: handle A reads the table and writes its files; B appends a row
    // the replace would remove and commits first; A's retry must not silently delete it.
    let conflicting = [
        (Replace::Partitions(vec![day("2026-08-02")]), 20i64),
        (Replace::Rows(id_at_least(20)), 21),
        (Replace::All, 22),
    ];
    for (replace, b_id) in conflicting {
        let a = c.table(t).await.unwrap();
        let files = a
            .write_data_files(&[batch(50..52, "2026-08-02")])
            .await
            .unwrap();
        let b = c
            .append(
                t,
                "main",
                &[batch(b_id..b_id + 1, "2026-08-02")],
                no_props(),
            )
            .await
            .unwrap();
        let now = c.table(t).await.unwrap();
        let b_file = now
            .files_added_by(&now.snapshot(b.snapshot_id).unwrap())
            .await
            .unwrap()[0]
            .file_path()
            .to_string();
        let err = c
            .commit_files(a, "main", files, Some(&replace), no_props(), "overwrite")
            .await
            .unwrap_err();
        match &err {
            LakeError::Conflict { table, detail } => {
                assert_eq!(table, t);
                assert!(detail.contains(&b_file), "{replace:?}: {detail}");
            }
            other => panic!("{replace:?}: expected Conflict, got {other:?}"),
        }
        let now = c.table(t).await.unwrap();
        assert_eq!(now.head("main"), Some(b.snapshot_id), "{replace:?}");
    }
    let mut expect: Vec<i64> = (0..10).chain(20..23).collect();
    let now = c.table(t).await.unwrap();
    assert_eq!(ids(&now.scan(&At::Main).await.unwrap()), expect);

    // An append into another partition does not conflict with a replace of day 2: A retries
    // on the new head, its rows replace day 2 and B's rows stay.
    let a = c.table(t).await.unwrap();
    let files = a
        .write_data_files(&[batch(60..62, "2026-08-02")])
        .await
        .unwrap();
    c.append(t, "main", &[batch(30..31, "2026-08-03")], no_props())
        .await
        .unwrap();
    let done = c
        .commit_files(
            a,
            "main",
            files,
            Some(&Replace::Partitions(vec![day("2026-08-02")])),
            no_props(),
            "overwrite",
        )
        .await
        .unwrap();
    let now = c.table(t).await.unwrap();
    assert_eq!(now.head("main"), Some(done.snapshot_id));
    expect = (0..5).chain([30, 60, 61]).collect();
    assert_eq!(ids(&now.scan(&At::Main).await.unwrap()), expect);

    // Nor does a row the predicate does not select.
    let a = c.table(t).await.unwrap();
    c.append(t, "main", &[batch(3..4, "2026-08-04")], no_props())
        .await
        .unwrap();
    c.commit_files(
        a,
        "main",
        Vec::new(),
        Some(&Replace::Rows(id_at_least(60))),
        no_props(),
        "delete",
    )
    .await
    .unwrap();
    let now = c.table(t).await.unwrap();
    assert_eq!(
        ids(&now.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 3, 3, 4, 30]
    );
}

/// (id, day) of every row, sorted.
fn rows<'a>(batches: impl IntoIterator<Item = &'a arrow_array::RecordBatch>) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for b in batches {
        let id = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        let day = arrow::compute::cast(
            b.column_by_name("day").unwrap(),
            &arrow_schema::DataType::Utf8,
        )
        .unwrap();
        let day = day
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        for i in 0..b.num_rows() {
            out.push((id.value(i), day.value(i).to_string()));
        }
    }
    out.sort();
    out
}

fn expect_rows(spec: &[(std::ops::Range<i64>, &str)]) -> Vec<(i64, String)> {
    let mut out: Vec<(i64, String)> = spec
        .iter()
        .flat_map(|(r, d)| r.clone().map(move |i| (i, d.to_string())))
        .collect();
    out.sort();
    out
}

/// A table created unpartitioned (spec 0) with rows, then partitioned by day (spec 1) by
/// iceberg-rust's metadata builder and registered, as another engine would leave it.
async fn evolved_table(c: &Catalog) -> &'static str {
    c.create_table("gold.first", &schema(), &[]).await.unwrap();
    c.append(
        "gold.first",
        "main",
        &[batch(0..4, "d1"), batch(4..8, "d2")],
        no_props(),
    )
    .await
    .unwrap();
    let t = c.table("gold.first").await.unwrap();
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
            UnboundPartitionSpec::builder()
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
    assert_eq!(md.default_partition_spec_id(), 1);
    register(c, "gold.evolved", &md, "00001-evolved").await;
    "gold.evolved"
}

#[tokio::test]
async fn writes_and_reads_use_each_manifests_own_partition_spec() {
    let c = Catalog::in_memory();
    let t = evolved_table(&c).await;
    let s1 = c
        .append(
            t,
            "main",
            &[batch(10..12, "d1"), batch(12..14, "d2")],
            no_props(),
        )
        .await
        .unwrap();
    let table = c.table(t).await.unwrap();
    let all = expect_rows(&[(0..4, "d1"), (4..8, "d2"), (10..12, "d1"), (12..14, "d2")]);
    assert_eq!(rows(&table.scan(&At::Main).await.unwrap()), all);
    // Incremental reads and whole-file reads label every file by its own spec.
    let inc = table.read_incremental("main", None, None).await.unwrap();
    assert_eq!(rows(inc.batches()), all);
    let files = table.data_files(&At::Main).await.unwrap();
    assert_eq!(files.len(), 3);
    assert_eq!(rows(&table.read_data_files(&files).await.unwrap()), all);
    assert_eq!(
        table.snapshot(s1.snapshot_id).unwrap().summary["changed-partition-count"],
        "2"
    );

    // Replace day d2 (a partition of the default spec): as pyiceberg's dynamic overwrite, every
    // d2 row goes, also those in the unpartitioned file of spec 0, whose other rows stay.
    let r = c
        .replace(
            t,
            "main",
            &Replace::Partitions(vec![day("d2")]),
            &[batch(20..21, "d2")],
            no_props(),
        )
        .await
        .unwrap();
    let table = c.table(t).await.unwrap();
    assert_eq!(
        rows(&table.scan(&At::Main).await.unwrap()),
        expect_rows(&[(0..4, "d1"), (10..12, "d1"), (20..21, "d2")])
    );
    let s = table.snapshot(r.snapshot_id).unwrap();
    assert_eq!(s.summary["deleted-records"], "10");
    assert_eq!(s.summary["added-records"], "5");
    assert_eq!(s.summary["total-records"], "7");
    assert_eq!(s.summary["deleted-data-files"], "2");

    // Replace by rows, across what is left.
    let r = c
        .replace(t, "main", &Replace::Rows(id_at_least(11)), &[], no_props())
        .await
        .unwrap();
    let table = c.table(t).await.unwrap();
    let left = expect_rows(&[(0..4, "d1"), (10..11, "d1")]);
    assert_eq!(rows(&table.scan(&At::Main).await.unwrap()), left);
    assert_eq!(
        table.snapshot(r.snapshot_id).unwrap().summary["total-records"],
        "5"
    );
    let files = table.data_files(&At::Main).await.unwrap();
    assert_eq!(rows(&table.read_data_files(&files).await.unwrap()), left);
    let sql = c.sql(None, &At::Main).await.unwrap();
    let out = sql
        .query("select id, day from gold.evolved where day = 'd1'")
        .await
        .unwrap();
    assert_eq!(rows(&out), left);

    // A spec-0 table whose old file holds no rows of the replaced partition keeps it as is.
    let c = Catalog::in_memory();
    let t = evolved_table(&c).await;
    let before = c
        .table(t)
        .await
        .unwrap()
        .data_files(&At::Main)
        .await
        .unwrap();
    c.replace(
        t,
        "main",
        &Replace::Partitions(vec![day("d9")]),
        &[batch(30..31, "d9")],
        no_props(),
    )
    .await
    .unwrap();
    let table = c.table(t).await.unwrap();
    let after = table.data_files(&At::Main).await.unwrap();
    assert!(after.iter().any(|f| f.file_path() == before[0].file_path()));
    assert_eq!(
        rows(&table.scan(&At::Main).await.unwrap()),
        expect_rows(&[(0..4, "d1"), (4..8, "d2"), (30..31, "d9")])
    );
}

#[tokio::test]
async fn totals_are_left_out_when_the_parent_summary_has_none() {
    let c = Catalog::in_memory();
    c.create_table("bronze.first", &schema(), &[])
        .await
        .unwrap();
    c.append("bronze.first", "main", &[batch(0..3, "d")], no_props())
        .await
        .unwrap();
    let t = c.table("bronze.first").await.unwrap();
    let md = t.metadata();
    let head = md.current_snapshot().unwrap();
    // Another engine's snapshot on main whose summary carries no totals.
    let bare = iceberg::spec::Snapshot::builder()
        .with_snapshot_id(head.snapshot_id() + 1)
        .with_parent_snapshot_id(Some(head.snapshot_id()))
        .with_sequence_number(md.next_sequence_number())
        .with_timestamp_ms(head.timestamp_ms() + 1)
        .with_manifest_list(head.manifest_list().to_string())
        .with_summary(iceberg::spec::Summary {
            operation: iceberg::spec::Operation::Append,
            additional_properties: Default::default(),
        })
        .with_schema_id(md.current_schema_id())
        .build();
    let md = md
        .clone()
        .into_builder(Some(t.metadata_location().to_string()))
        .set_branch_snapshot(bare, "main")
        .unwrap()
        .build()
        .unwrap()
        .metadata;
    register(&c, "bronze.bare", &md, "00001-bare").await;

    let mut caller = no_props();
    caller.insert("total-records".into(), "999".into());
    for k in 0..2 {
        let s = c
            .append(
                "bronze.bare",
                "main",
                &[batch(10 + k..11 + k, "d")],
                caller.clone(),
            )
            .await
            .unwrap();
        let t = c.table("bronze.bare").await.unwrap();
        let summary = t.snapshot(s.snapshot_id).unwrap().summary;
        assert_eq!(summary["added-records"], "1");
        assert_eq!(summary["added-data-files"], "1");
        let made_up: Vec<_> = summary.keys().filter(|k| k.starts_with("total-")).collect();
        assert!(made_up.is_empty(), "append {k}: {made_up:?}");
    }
    let t = c.table("bronze.bare").await.unwrap();
    assert_eq!(
        ids(&t.scan(&At::Main).await.unwrap()),
        vec![0, 1, 2, 10, 11]
    );
}

/// A ref's retention settings as the metadata holds them (`None`: the ref is absent).
fn retention(t: &lake::Table, name: &str) -> Option<serde_json::Value> {
    let v = serde_json::to_value(t.metadata()).unwrap();
    let mut r = v["refs"].get(name)?.clone();
    let o = r.as_object_mut().unwrap();
    o.remove("snapshot-id");
    Some(r)
}

#[tokio::test]
async fn moving_a_branch_keeps_its_retention_settings() {
    use iceberg::spec::{SnapshotReference, SnapshotRetention};
    let c = Catalog::in_memory();
    c.create_table("bronze.first", &schema(), &[])
        .await
        .unwrap();
    let a = c
        .append("bronze.first", "main", &[batch(0..1, "d")], no_props())
        .await
        .unwrap();
    let t = c.table("bronze.first").await.unwrap();
    // Another engine set retention on main and on audit.
    let kept = SnapshotRetention::branch(Some(7), Some(86_400_000), Some(604_800_000));
    let md = t
        .metadata()
        .clone()
        .into_builder(Some(t.metadata_location().to_string()))
        .set_ref("main", SnapshotReference::new(a.snapshot_id, kept.clone()))
        .unwrap()
        .set_ref("audit", SnapshotReference::new(a.snapshot_id, kept.clone()))
        .unwrap()
        .build()
        .unwrap()
        .metadata;
    register(&c, "bronze.kept", &md, "00001-kept").await;
    let name = "bronze.kept";
    let want = {
        let t = c.table(name).await.unwrap();
        let r = retention(&t, "audit").unwrap();
        assert_eq!(r["min-snapshots-to-keep"], 7);
        assert_eq!(r, retention(&t, "main").unwrap());
        r
    };

    // An append keeps it (iceberg-rust's set_branch_snapshot does), a fast-forward and a reset
    // keep it too.
    let s2 = c
        .append(name, "audit", &[batch(1..2, "d")], no_props())
        .await
        .unwrap();
    assert_eq!(
        retention(&c.table(name).await.unwrap(), "audit").unwrap(),
        want
    );
    c.update_refs(
        name,
        &[RefOp::FastForward {
            branch: "main".into(),
            to: s2.snapshot_id,
        }],
        "publish",
    )
    .await
    .unwrap();
    let t = c.table(name).await.unwrap();
    assert_eq!(t.head("main"), Some(s2.snapshot_id));
    assert_eq!(retention(&t, "main").unwrap(), want);
    c.update_refs(
        name,
        &[
            RefOp::Reset {
                branch: "audit".into(),
                to: a.snapshot_id,
            },
            RefOp::CreateBranch {
                name: "side".into(),
                snapshot_id: a.snapshot_id,
            },
            RefOp::FastForward {
                branch: "side".into(),
                to: s2.snapshot_id,
            },
        ],
        "rollback",
    )
    .await
    .unwrap();
    let t = c.table(name).await.unwrap();
    assert_eq!(t.head("audit"), Some(a.snapshot_id));
    assert_eq!(retention(&t, "audit").unwrap(), want);
    assert_eq!(
        retention(&t, "side").unwrap(),
        serde_json::json!({"type": "branch"}),
        "a new branch gets the default retention"
    );
}

#[tokio::test]
async fn a_replace_by_rows_refuses_a_branch_with_delete_files() {
    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, ManifestListWriter,
        ManifestWriterBuilder, Operation, Snapshot, Summary,
    };
    let c = Catalog::in_memory();
    c.create_table("silver.first", &schema(), &[])
        .await
        .unwrap();
    c.append("silver.first", "main", &[batch(0..5, "d")], no_props())
        .await
        .unwrap();
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
        .partition(Struct::empty())
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
    register(&c, "silver.deleted", &md, "00001-deletes").await;

    let before = c.head().await.unwrap().version;
    let err = c
        .replace(
            "silver.deleted",
            "main",
            &Replace::Rows(id_at_least(3)),
            &[],
            no_props(),
        )
        .await
        .unwrap_err();
    match &err {
        LakeError::DeleteFilesUnsupported { table, detail } => {
            assert_eq!(table, "silver.deleted");
            assert!(detail.contains("delete files"), "{detail}");
        }
        other => panic!("expected DeleteFilesUnsupported, got {other:?}"),
    }
    assert_eq!(c.head().await.unwrap().version, before);
    assert_eq!(
        c.table("silver.deleted").await.unwrap().head("main"),
        Some(new_id)
    );
}

#[tokio::test]
async fn a_replace_by_partition_does_not_open_manifests_that_cannot_hold_them() {
    let c = Catalog::in_memory();
    let t = "gold.days";
    c.create_table(t, &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    for (k, d) in ["2026-08-01", "2026-08-02", "2026-08-03"]
        .iter()
        .enumerate()
    {
        let k = k as i64 * 10;
        c.append(t, "main", &[batch(k..k + 2, d)], no_props())
            .await
            .unwrap();
    }
    let table = c.table(t).await.unwrap();
    let head = table.metadata().current_snapshot().unwrap();
    let list = table
        .iceberg()
        .manifest_list_reader(head)
        .load()
        .await
        .unwrap();
    assert_eq!(list.entries().len(), 3);
    // Take away the manifests of days 1 and 3: a writer that opened them would fail.
    let mut unread = Vec::new();
    for mf in list.entries() {
        let m = mf.load_manifest(c.file_io()).await.unwrap();
        let p = m.entries()[0].data_file().partition().clone();
        if p != day("2026-08-02") {
            c.file_io().delete(&mf.manifest_path).await.unwrap();
            unread.push(mf.manifest_path.clone());
        }
    }
    let r = c
        .replace(
            t,
            "main",
            &Replace::Partitions(vec![day("2026-08-02")]),
            &[batch(50..51, "2026-08-02")],
            no_props(),
        )
        .await
        .unwrap();
    let table = c.table(t).await.unwrap();
    let snap = table.metadata().snapshot_by_id(r.snapshot_id).unwrap();
    let list = table
        .iceberg()
        .manifest_list_reader(snap)
        .load()
        .await
        .unwrap();
    let paths: Vec<_> = list
        .entries()
        .iter()
        .map(|m| m.manifest_path.clone())
        .collect();
    for p in &unread {
        assert!(paths.contains(p), "{p} is carried as it is");
    }
    let s = table.snapshot(r.snapshot_id).unwrap();
    assert_eq!(s.summary["deleted-records"], "2");
    assert_eq!(s.summary["total-records"], "5");
}
