//! The file catalog through the `iceberg::Catalog` trait: iceberg-rust's own transactions and
//! iceberg-datafusion's catalog provider work on it unchanged.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::{batch, schema};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog as _, NamespaceIdent, TableIdent};
use lake::{At, Catalog};

#[tokio::test]
async fn iceberg_tooling_uses_the_file_catalog() {
    let c = Catalog::in_memory();
    let ns = NamespaceIdent::new("silver".into());
    c.create_namespace(&ns, HashMap::from([("owner".into(), "data".into())]))
        .await
        .unwrap();
    assert!(c.namespace_exists(&ns).await.unwrap());
    assert_eq!(
        c.get_namespace(&ns).await.unwrap().properties()["owner"],
        "data"
    );
    let err = c.create_namespace(&ns, HashMap::new()).await.unwrap_err();
    assert_eq!(err.kind(), iceberg::ErrorKind::NamespaceAlreadyExists);

    let ice_schema = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&schema()).unwrap();
    let creation = iceberg::TableCreation::builder()
        .name("orders".into())
        .schema(ice_schema.clone())
        .build();
    let t = iceberg::Catalog::create_table(&c, &ns, creation)
        .await
        .unwrap();
    assert_eq!(c.head().await.unwrap().operation, "create-table");
    // A second create of the same name is refused the way iceberg-rust's callers expect.
    let again = iceberg::TableCreation::builder()
        .name("orders".into())
        .schema(ice_schema)
        .build();
    let err = iceberg::Catalog::create_table(&c, &ns, again)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), iceberg::ErrorKind::TableAlreadyExists, "{err}");
    let ident = TableIdent::new(ns.clone(), "orders".into());
    assert!(c.table_exists(&ident).await.unwrap());
    assert_eq!(
        iceberg::Catalog::list_tables(&c, &ns).await.unwrap(),
        vec![ident.clone()]
    );

    // iceberg-rust's own transaction commits through update_table.
    let tx = Transaction::new(&t);
    let tx = tx
        .update_table_properties()
        .set("comment".into(), "folded by lsn".into())
        .apply(tx)
        .unwrap();
    let t = tx.commit(&c).await.unwrap();
    assert_eq!(t.metadata().properties()["comment"], "folded by lsn");
    assert_eq!(c.head().await.unwrap().operation, "update-table");

    // Our writes and iceberg-datafusion's catalog provider see the same table.
    lake::Catalog::append(
        &c,
        "silver.orders",
        "main",
        &[batch(0..3, "d")],
        BTreeMap::new(),
    )
    .await
    .unwrap();
    let provider = iceberg_datafusion::IcebergCatalogProvider::try_new(Arc::new(c.clone()))
        .await
        .unwrap();
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_catalog("lake", Arc::new(provider));
    let rows = ctx
        .sql("select count(*) from lake.silver.orders")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&rows)
        .unwrap()
        .to_string();
    assert!(text.contains("| 3 "), "{text}");

    // Rename keeps the data; drop removes the name; older versions still read it.
    let renamed = TableIdent::new(ns.clone(), "orders_v2".into());
    c.rename_table(&ident, &renamed).await.unwrap();
    assert!(!c.table_exists(&ident).await.unwrap());
    let t = c.table("silver.orders_v2").await.unwrap();
    assert_eq!(
        t.scan(&At::Main)
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        3
    );
    let before_drop = c.head().await.unwrap().version;
    iceberg::Catalog::drop_table(&c, &renamed).await.unwrap();
    assert!(!c.table_exists(&renamed).await.unwrap());
    assert!(
        c.table_at_version("silver.orders_v2", before_drop)
            .await
            .is_ok()
    );
    let err = c.load_table(&renamed).await.unwrap_err();
    assert_eq!(err.kind(), iceberg::ErrorKind::TableNotFound);
    iceberg::Catalog::drop_namespace(&c, &ns).await.unwrap();
    assert!(!c.namespace_exists(&ns).await.unwrap());
}
