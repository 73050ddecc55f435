//! What every layer shares: opening its tables, creating the missing ones in one commit.

use std::collections::BTreeMap;

use arrow_schema::SchemaRef;
use lake::{Catalog, CatalogVersion, PartitionField};

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
