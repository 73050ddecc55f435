//! SQL over the lake: every table of a catalog version registered in a DataFusion
//! `SessionContext` as `namespace.table`, at `main`, a branch or tag, or a snapshot.

use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider};
use datafusion::prelude::{SessionConfig, SessionContext};
use iceberg_datafusion::IcebergStaticTableProvider;

use crate::catalog::{Catalog, CatalogVersion};
use crate::error::{LakeError, Result};
use crate::table::{At, Table};

/// A DataFusion session over the lake, and what could not be registered.
pub struct SqlContext {
    /// The session: run any DataFusion SQL on it.
    pub ctx: SessionContext,
    /// The catalog version the tables were read at.
    pub version: u64,
    /// Registered tables with the snapshot each reads (`None`: empty `main`).
    pub registered: Vec<(String, Option<i64>)>,
    /// Tables left out, with why (for example: no such branch).
    pub skipped: Vec<(String, String)>,
}

impl SqlContext {
    /// Run a query and collect its rows. Errors name the table or ref a query could not use.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let df = self.ctx.sql(sql).await.map_err(|e| self.explain(e))?;
        df.collect().await.map_err(|e| self.explain(e))
    }

    fn explain(&self, e: datafusion::error::DataFusionError) -> LakeError {
        let msg = e.to_string();
        for (name, why) in &self.skipped {
            let short = name.split('.').nth(1).unwrap_or(name);
            if msg.contains(name.as_str()) || msg.contains(&format!("'{short}'")) {
                return LakeError::Other(format!("{msg} ({name} is not readable here: {why})"));
            }
        }
        LakeError::DataFusion(Box::new(e))
    }
}

/// Register `table` at `at` in `ctx` under its `namespace.table` name.
pub async fn register_table(ctx: &SessionContext, table: &Table, at: &At) -> Result<Option<i64>> {
    let name = table.name();
    let snapshot = table.resolve(at)?;
    let provider = match snapshot {
        Some(id) => {
            IcebergStaticTableProvider::try_new_from_table_snapshot(table.iceberg().clone(), id)
                .await
        }
        None => IcebergStaticTableProvider::try_new_from_table(table.iceberg().clone()).await,
    }
    .map_err(|e| LakeError::iceberg(format!("registering {name}"), e))?;
    let catalog_name = ctx.state().config_options().catalog.default_catalog.clone();
    let catalog = ctx
        .catalog(&catalog_name)
        .ok_or_else(|| LakeError::Other(format!("no DataFusion catalog {catalog_name}")))?;
    let schema = match catalog.schema(&name.namespace) {
        Some(s) => s,
        None => {
            let s: Arc<dyn SchemaProvider> = Arc::new(MemorySchemaProvider::new());
            catalog.register_schema(&name.namespace, s.clone())?;
            s
        }
    };
    schema.deregister_table(&name.table)?;
    schema.register_table(name.table.clone(), Arc::new(provider))?;
    Ok(snapshot)
}

impl Catalog {
    /// A SQL session with every table of the newest catalog version (or of `version`) at `at`.
    /// Tables where `at` does not exist are left out and listed in `skipped`.
    pub async fn sql(&self, version: Option<u64>, at: &At) -> Result<SqlContext> {
        let v: CatalogVersion = match version {
            Some(n) => self.version(n).await?,
            None => self.head().await?,
        };
        let config = SessionConfig::new().with_information_schema(true);
        let ctx = SessionContext::new_with_config(config);
        let mut registered = Vec::new();
        let mut skipped = Vec::new();
        for name in v.tables.keys() {
            let table = self.table_in(&v, name).await?;
            match register_table(&ctx, &table, at).await {
                Ok(s) => registered.push((name.clone(), s)),
                Err(e @ (LakeError::NoSuchRef { .. } | LakeError::NoSuchSnapshot { .. })) => {
                    skipped.push((name.clone(), e.to_string()))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(SqlContext {
            ctx,
            version: v.version,
            registered,
            skipped,
        })
    }
}
