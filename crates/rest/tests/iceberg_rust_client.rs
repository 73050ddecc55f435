//! iceberg-rust's own REST client (crate `iceberg-catalog-rest`, a client nobody here wrote)
//! against the server: list and load what lake wrote, scan it, and commit a transaction that
//! lake then sees; a transaction staged on metadata that has moved since is refused (409) and
//! changes nothing.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use common::batch;
use futures::TryStreamExt;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableIdent};
use iceberg_catalog_rest::{REST_CATALOG_PROP_URI, RestCatalogBuilder};
use rest::ServeOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iceberg_rust_loads_scans_and_commits_through_the_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lake = lake::Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
        .expect("catalog");
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]);
    lake.create_table("gold.events", &schema, &[])
        .await
        .expect("create");
    let s = lake
        .table("gold.events")
        .await
        .expect("table")
        .arrow_schema()
        .expect("schema");
    let wrote = lake
        .append(
            "gold.events",
            "main",
            &[batch(s, vec![1, 2, 3])],
            Default::default(),
        )
        .await
        .expect("append");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let uri = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(rest::serve_on(
        listener,
        lake.clone(),
        ServeOptions::default(),
    ));

    // iceberg-rust's own local-file storage: the client reads the files as any engine would.
    let client = RestCatalogBuilder::default()
        .with_storage_factory(Arc::new(iceberg::io::LocalFsStorageFactory))
        .load(
            "lake",
            HashMap::from([(REST_CATALOG_PROP_URI.to_string(), uri.clone())]),
        )
        .await
        .expect("the REST client");
    let namespaces = client.list_namespaces(None).await.expect("namespaces");
    assert!(
        namespaces.contains(&NamespaceIdent::new("gold".into())),
        "{namespaces:?}"
    );
    let ident = TableIdent::from_strs(["gold", "events"]).expect("ident");
    assert_eq!(
        client
            .list_tables(&NamespaceIdent::new("gold".into()))
            .await
            .expect("tables"),
        vec![ident.clone()]
    );
    let table = client.load_table(&ident).await.expect("load");
    assert_eq!(
        table.metadata().current_snapshot_id(),
        Some(wrote.snapshot_id),
        "the snapshot lake committed"
    );
    let batches: Vec<RecordBatch> = table
        .scan()
        .build()
        .expect("scan")
        .to_arrow()
        .await
        .expect("stream")
        .try_collect()
        .await
        .expect("rows");
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("id")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .map(|a| a.values().to_vec())
                .unwrap_or_default()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3]);

    // A transaction through the server: lake sees it.
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set("owner".into(), "finance".into())
        .apply(tx)
        .expect("apply");
    let committed = tx.commit(&client).await.expect("commit through REST");
    assert_eq!(
        committed.metadata().properties().get("owner"),
        Some(&"finance".to_string())
    );
    let seen = lake.table("gold.events").await.expect("table");
    assert_eq!(
        seen.metadata().properties().get("owner"),
        Some(&"finance".to_string()),
        "lake reads what the REST client committed"
    );

    // The server refuses a commit whose requirement no longer holds (the table's current
    // snapshot moved under it): 409, nothing changed.
    let s = seen.arrow_schema().expect("schema");
    lake.append(
        "gold.events",
        "main",
        &[batch(s, vec![4])],
        Default::default(),
    )
    .await
    .expect("another append");
    let body = serde_json::json!({
        "requirements": [
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": wrote.snapshot_id}
        ],
        "updates": [
            {"action": "set-properties", "updates": {"owner": "marketing"}}
        ]
    });
    let r = reqwest::Client::new()
        .post(format!("{uri}/v1/namespaces/gold/tables/events"))
        .json(&body)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 409);
    let after = lake.table("gold.events").await.expect("table");
    assert_eq!(
        after.metadata().properties().get("owner"),
        Some(&"finance".to_string())
    );
}
