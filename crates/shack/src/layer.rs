//! What every layer shares: opening its tables, creating the missing ones in one commit; a
//! layer's run staged and not committed ([`Staged`]), and committing staged changes.

use std::collections::BTreeMap;

use arrow_schema::SchemaRef;
use lake::{Catalog, CatalogVersion, Committed, LakeError, PartitionField, Table, TableChange};

use crate::error::{Result, ShackError};

/// The catalog head with every table of a layer in it, creating the missing ones (with
/// `schema`, `partitioning` and `properties`) and setting `properties` on existing tables that
/// lack them (a lake made before a property was chosen), all in one commit. When another run
/// did it first, its tables are used. Returns the head and the names this call created.
pub(crate) async fn open_tables(
    catalog: &Catalog,
    tables: &[&str],
    schema: fn(&str) -> Result<SchemaRef>,
    partitioning: fn(&str) -> Vec<PartitionField>,
    properties: fn(&str) -> BTreeMap<String, String>,
) -> Result<(CatalogVersion, Vec<String>)> {
    let cat = |e| ShackError::lake("the catalog", e);
    let head = catalog.head().await.map_err(cat)?;
    let mut changes = Vec::new();
    let mut missing = Vec::new();
    let mut updated = Vec::new();
    for name in tables {
        let wanted = properties(name);
        if !head.tables.contains_key(*name) {
            let schema = schema(name)?;
            changes.push(
                catalog
                    .stage_create_table_with_properties(name, &schema, &partitioning(name), &wanted)
                    .await
                    .map_err(|e| ShackError::lake(*name, e))?,
            );
            missing.push(*name);
        } else if !wanted.is_empty() {
            let table = catalog
                .table_in(&head, name)
                .await
                .map_err(|e| ShackError::lake(*name, e))?;
            if let Some(change) = table
                .stage_set_properties(&wanted)
                .map_err(|e| ShackError::lake(*name, e))?
            {
                changes.push(change);
                updated.push(*name);
            }
        }
    }
    if changes.is_empty() {
        return Ok((head, Vec::new()));
    }
    let (operation, message) = if missing.is_empty() {
        (
            "set-properties",
            format!("set the write properties of {}", updated.join(", ")),
        )
    } else {
        ("create-table", format!("create {}", missing.join(", ")))
    };
    let created = match catalog
        .commit(changes, operation, &message, BTreeMap::new())
        .await
    {
        Ok(_) => missing.iter().map(|s| s.to_string()).collect(),
        // Another run created or updated them first: use its tables.
        Err(e) if e.is_conflict() => Vec::new(),
        Err(e) => return Err(cat(e)),
    };
    Ok((catalog.head().await.map_err(cat)?, created))
}

/// `names` in catalog version `head`, in that order, their metadata read at once (a new
/// process parses each table's metadata file on first open).
pub(crate) async fn open_all(
    catalog: &Catalog,
    head: &CatalogVersion,
    names: &[&str],
) -> Result<Vec<Table>> {
    futures::future::try_join_all(names.iter().map(|name| async move {
        catalog
            .table_in(head, name)
            .await
            .map_err(|e| ShackError::lake(*name, e))
    }))
    .await
}

/// A layer's run staged and not committed: its report (no catalog version yet), its table
/// changes (none when there was nothing to do), and the message and properties a commit of
/// them alone carries. [`crate::run`] commits a boil's and a finish's together.
pub struct Staged<R> {
    pub report: R,
    pub changes: Vec<TableChange>,
    pub message: String,
    pub properties: BTreeMap<String, String>,
}

/// Commit staged changes as one catalog version; a lost race is [`ShackError::Conflict`]
/// naming the table and the step (`operation`, `boil+finish` read as `boil and finish`),
/// anything else a lake error about `what`.
pub(crate) async fn commit(
    catalog: &Catalog,
    changes: Vec<TableChange>,
    operation: &str,
    message: &str,
    properties: BTreeMap<String, String>,
    what: &str,
) -> Result<Committed> {
    catalog
        .commit(changes, operation, message, properties)
        .await
        .map_err(|e| match e {
            LakeError::Conflict { table, detail } => ShackError::Conflict {
                step: operation.replace('+', " and "),
                table,
                detail,
            },
            e => ShackError::lake(what, e),
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    #[tokio::test]
    async fn a_lost_race_names_the_step_that_lost_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Catalog::open_local(dir.path().join("c"), dir.path().join("w")).expect("open");
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let rows = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1]))])
            .expect("batch");
        c.create_table("silver.t", &schema, &[])
            .await
            .expect("create");
        let t = c.table("silver.t").await.expect("table");
        let staged = t
            .stage_append("audit", std::slice::from_ref(&rows), BTreeMap::new())
            .await
            .expect("stage");
        c.append("silver.t", "audit", &[rows], BTreeMap::new())
            .await
            .expect("the other writer");
        let err = commit(&c, vec![staged], "boil+finish", "m", BTreeMap::new(), "x")
            .await
            .expect_err("a lost race");
        let msg = err.to_string();
        assert!(
            msg.contains("committed to silver.t while this boil and finish ran"),
            "{msg}"
        );
    }
}
