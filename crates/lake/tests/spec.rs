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
use lake::{At, Catalog, LakeError, RefOp, TableName};

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
