//! What every layer shares: opening its tables, creating the missing ones in one commit; a
//! layer's run staged and not committed ([`Staged`]), and committing staged changes.

use std::collections::BTreeMap;

use arrow_schema::SchemaRef;
use lake::{Catalog, CatalogVersion, Committed, LakeError, PartitionField, TableChange};

use crate::error::{Result, ShackError};

/// The catalog head with every table of a layer in it, creating the missing ones (with
/// `schema` and `partitioning`) in one commit. When another run created them first, its
/// tables are used. Returns the head and the names this call created.
pub(crate) async fn open_tables(
    catalog: &Catalog,
    tables: &[&str],
    schema: fn(&str) -> Result<SchemaRef>,
    partitioning: fn(&str) -> Vec<PartitionField>,
) -> Result<(CatalogVersion, Vec<String>)> {
    let cat = |e| ShackError::lake("the catalog", e);
    let head = catalog.head().await.map_err(cat)?;
    let missing: Vec<&str> = tables
        .iter()
        .copied()
        .filter(|t| !head.tables.contains_key(*t))
        .collect();
    if missing.is_empty() {
        return Ok((head, Vec::new()));
    }
    let mut changes = Vec::new();
    for name in &missing {
        let schema = schema(name)?;
        changes.push(
            catalog
                .stage_create_table(name, &schema, &partitioning(name))
                .await
                .map_err(|e| ShackError::lake(*name, e))?,
        );
    }
    let created = match catalog
        .commit(
            changes,
            "create-table",
            &format!("create {}", missing.join(", ")),
            BTreeMap::new(),
        )
        .await
    {
        Ok(_) => missing.iter().map(|s| s.to_string()).collect(),
        // Another run created them first: use its tables.
        Err(e) if e.is_conflict() => Vec::new(),
        Err(e) => return Err(cat(e)),
    };
    Ok((catalog.head().await.map_err(cat)?, created))
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
/// naming the table, anything else a lake error about `what`.
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
            LakeError::Conflict { table, detail } => ShackError::Conflict { table, detail },
            e => ShackError::lake(what, e),
        })
}
