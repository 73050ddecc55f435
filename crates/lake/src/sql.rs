//! SQL over the lake: every table of a catalog version registered in a DataFusion
//! `SessionContext` as `namespace.table`, at `main`, a branch or tag, or a snapshot.
//!
//! A table is scanned by [`LakeTableProvider`]: its filters go to iceberg's scan planning
//! (partition, bounds and row-group pruning, as iceberg-datafusion's provider does), and the
//! planned files are split into as many DataFusion partitions as the session has target
//! partitions, each decoded on its own task. iceberg-datafusion's static provider reads every
//! file on one partition, so a query used one core however many the machine has.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider, Session,
};
use datafusion::common::stats::{Precision, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::{StreamExt, TryStreamExt};
use iceberg::scan::FileScanTask;
use iceberg_datafusion::physical_plan::convert_filters_to_predicate;

use crate::catalog::{Catalog, CatalogVersion};
use crate::error::{LakeError, Result};
use crate::read::FileChanges;
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
    /// Tables left out because their metadata could not be read (a missing or damaged file),
    /// with the error: the other tables still answer; a query naming one of these says why.
    pub unreadable: Vec<(String, String)>,
}

impl SqlContext {
    /// Run a query and collect its rows. Errors name the table or ref a query could not use.
    /// Only queries: DDL (`DROP TABLE`, `CREATE VIEW`), DML (`INSERT`) and statements (`SET`)
    /// are refused, since a session's tables are snapshots the lake's commits alone change
    /// (a `DROP TABLE` here would only have unregistered one, and said "0 rows").
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let plan = self
            .ctx
            .state()
            .create_logical_plan(sql)
            .await
            .map_err(|e| self.explain(e))?;
        datafusion::execution::context::SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false)
            .verify_plan(&plan)
            .map_err(|e| {
                LakeError::Other(format!(
                    "only queries run here (SELECT, WITH, EXPLAIN): {e}; tables change by tap, run, publish and rollback"
                ))
            })?;
        let df = self
            .ctx
            .execute_logical_plan(plan)
            .await
            .map_err(|e| self.explain(e))?;
        df.collect().await.map_err(|e| self.explain(e))
    }

    /// The rows of `table` (named as a query names it), as `SELECT count(*) FROM table` returns
    /// them. When the table is one of lake's and every data file it reads is read whole with
    /// no delete file, that is the sum of the files' record counts in the manifests, which is
    /// also how DataFusion answers the query, here without parsing, optimising and planning
    /// it (the audits count a dozen tables a grade). Otherwise the query runs.
    pub async fn count_rows(&self, table: &str) -> Result<i64> {
        let provider = self.provider(table).await?;
        if let Some(lake) = provider.as_any().downcast_ref::<LakeTableProvider>()
            && let Some(n) = lake.exact_rows().await?
        {
            return Ok(n);
        }
        let rows = self.query(&format!("SELECT count(*) FROM {table}")).await?;
        rows.first()
            .filter(|b| b.num_rows() == 1)
            .and_then(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .map(|a| a.value(0))
            })
            .ok_or_else(|| LakeError::Other(format!("count(*) of {table} returned no count")))
    }

    /// `columns` of every row of `table` (named as a query names it), in the order asked: what
    /// `SELECT columns FROM table` returns. When the table is one of lake's, its files are read
    /// as that query's scan reads them, without parsing, optimising and planning a query (an
    /// audit that combines two small tables in code pays for two scans, not for a join's
    /// planning). Otherwise the query runs. A column the table does not have is an error that
    /// names it.
    pub async fn read_columns(&self, table: &str, columns: &[&str]) -> Result<Vec<RecordBatch>> {
        let provider = self.provider(table).await?;
        if let Some(lake) = provider.as_any().downcast_ref::<LakeTableProvider>() {
            return lake.read_columns(columns).await;
        }
        let list = columns
            .iter()
            .map(|c| format!("\"{}\"", c.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(", ");
        self.query(&format!("SELECT {list} FROM {table}")).await
    }

    /// True when `table` (named as a query names it) is one of lake's and certainly reads no
    /// data file: an empty `main`, or an [`ADDED`] or [`REMOVED`] reach of
    /// [`Catalog::sql_changes`] that no file was added to or removed from. Any query of such a
    /// table alone sees no rows, so a caller can answer it without parsing, optimising and
    /// planning it. Told from what the table was registered with, without planning its files
    /// (a caller asks before the query that plans them anyway); false otherwise, when only a
    /// query can tell (a table of another engine's, a snapshot's files).
    pub async fn reads_no_files(&self, table: &str) -> Result<bool> {
        let provider = self.provider(table).await?;
        let Some(lake) = provider.as_any().downcast_ref::<LakeTableProvider>() else {
            return Ok(false);
        };
        Ok(match (lake.snapshot, &lake.only) {
            (None, _) => true,
            (Some(_), Some(only)) => only.is_empty(),
            (Some(_), None) => false,
        })
    }

    /// The provider of `table` (named as a query names it); the error says why there is none.
    async fn provider(&self, table: &str) -> Result<Arc<dyn TableProvider>> {
        self.ctx
            .table_provider(table)
            .await
            .map_err(|e| self.explain(e))
    }

    fn explain(&self, e: datafusion::error::DataFusionError) -> LakeError {
        let msg = e.to_string();
        let skipped = self.skipped.iter().map(|s| (s, "has nothing to read here"));
        let unreadable = self.unreadable.iter().map(|s| (s, "is not readable here"));
        for ((name, why), what) in skipped.chain(unreadable) {
            let short = name.split('.').nth(1).unwrap_or(name);
            if msg.contains(name.as_str()) || msg.contains(&format!("'{short}'")) {
                return LakeError::Other(format!("{msg} ({name} {what}: {why})"));
            }
        }
        LakeError::DataFusion(Box::new(e))
    }
}

/// The DataFusion catalog of [`Catalog::sql_changes`] that holds the rows of added data files.
pub const ADDED: &str = "added";
/// The DataFusion catalog of [`Catalog::sql_changes`] that holds the rows of removed data files.
pub const REMOVED: &str = "removed";

/// Register `table` at `at` in `ctx` under its `namespace.table` name.
pub async fn register_table(ctx: &SessionContext, table: &Table, at: &At) -> Result<Option<i64>> {
    let snapshot = table.resolve(at)?;
    let provider = LakeTableProvider::new(table, snapshot)?;
    let catalog_name = ctx.state().config_options().catalog.default_catalog.clone();
    register_provider(ctx, &catalog_name, table, provider)?;
    Ok(snapshot)
}

/// Register `provider` in `ctx` as `<catalog_name>.namespace.table` (the DataFusion catalog is
/// created when missing).
fn register_provider(
    ctx: &SessionContext,
    catalog_name: &str,
    table: &Table,
    provider: LakeTableProvider,
) -> Result<()> {
    let name = table.name();
    let catalog = match ctx.catalog(catalog_name) {
        Some(c) => c,
        None => {
            let c: Arc<dyn CatalogProvider> = Arc::new(MemoryCatalogProvider::new());
            ctx.register_catalog(catalog_name, c.clone());
            c
        }
    };
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
    Ok(())
}

/// DataFusion's defaults, with one pass of the logical optimizer instead of three.
///
/// The queries lake answers (the audits' several a run, a user's from the command line) are over
/// tables of thousands to millions of rows, where planning is a large part of a query's time: in
/// a `season`, the logical optimizer was about 5% of all CPU time. One pass applies every rule
/// once (filters and projections still reach the scan); a later pass can only find what one
/// rule's rewrite opened up for a rule before it. Results are the same either way: every rule
/// preserves them.
fn session_config() -> SessionConfig {
    let mut config = SessionConfig::new();
    config.options_mut().optimizer.max_passes = 1;
    config
}

impl Catalog {
    /// A SQL session with every table of the newest catalog version (or of `version`) at `at`.
    /// Tables where `at` does not exist are left out and listed in `skipped`.
    pub async fn sql(&self, version: Option<u64>, at: &At) -> Result<SqlContext> {
        let v: CatalogVersion = match version {
            Some(n) => self.version(n).await?,
            None => self.head().await?,
        };
        let ctx = SessionContext::new_with_config(session_config().with_information_schema(true));
        let mut registered = Vec::new();
        let mut skipped = Vec::new();
        let mut unreadable = Vec::new();
        for name in v.tables.keys() {
            let table = match self.table_in(&v, name).await {
                Ok(t) => t,
                Err(e) => {
                    unreadable.push((name.clone(), format!("its metadata cannot be read: {e}")));
                    continue;
                }
            };
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
            unreadable,
        })
    }
}

impl Catalog {
    /// A SQL session over what changed in `tables` of catalog version `version`, each given as
    /// (name, from, to) snapshot ids: `added.<namespace>.<table>` holds the rows of the data
    /// files live at `to` and not at `from`, `removed.<namespace>.<table>` those live at `from`
    /// and not at `to` ([`Table::file_changes`]), each in its own snapshot's schema. Any
    /// figure that is a sum over rows is, at `to`, its value at `from` plus its value over
    /// `added` minus its value over `removed`. A table with delete files at either snapshot is
    /// [`LakeError::HasDeleteFiles`]. `registered` lists each table with its `to`.
    pub async fn sql_changes(
        &self,
        version: u64,
        tables: &[(&str, i64, i64)],
    ) -> Result<SqlContext> {
        let v = self.version(version).await?;
        let ctx = SessionContext::new_with_config(session_config());
        let mut registered = Vec::with_capacity(tables.len());
        for (name, from, to) in tables {
            let table = self.table_in(&v, name).await?;
            let changes = table.file_changes(*from, *to).await?;
            let FileChanges { added, removed, .. } = changes;
            let added = LakeTableProvider::new(&table, Some(*to))?.only(added);
            let removed = LakeTableProvider::new(&table, Some(*from))?.only(removed);
            register_provider(&ctx, ADDED, &table, added)?;
            register_provider(&ctx, REMOVED, &table, removed)?;
            registered.push((name.to_string(), Some(*to)));
        }
        Ok(SqlContext {
            ctx,
            version: v.version,
            registered,
            skipped: Vec::new(),
            unreadable: Vec::new(),
        })
    }
}

/// A lake table at one snapshot as a DataFusion table (`None`: an empty `main`). Filters are
/// pushed to iceberg's scan planning as a hint (DataFusion still applies them: inexact), and
/// the planned files are read on several partitions at once.
#[derive(Debug, Clone)]
pub struct LakeTableProvider {
    table: Table,
    snapshot: Option<i64>,
    schema: SchemaRef,
    /// When set, only these of the snapshot's data files (by path) are read.
    only: Option<Arc<BTreeSet<String>>>,
}

/// The sum of the tasks' record counts (`None` when one has none), and whether no delete file
/// applies to any of them: together, the rows a scan reading the tasks' files whole yields.
fn record_counts<'a>(tasks: impl IntoIterator<Item = &'a FileScanTask>) -> (Option<u64>, bool) {
    let mut rows = Some(0u64);
    let mut no_deletes = true;
    for t in tasks {
        rows = rows.zip(t.record_count).map(|(n, c)| n.saturating_add(c));
        no_deletes &= t.deletes.is_empty();
    }
    (rows, no_deletes)
}

impl LakeTableProvider {
    /// The rows a whole scan yields, from the manifests' record counts: `None` when a file has
    /// a delete file or no record count.
    async fn exact_rows(&self) -> Result<Option<i64>> {
        let Some(id) = self.snapshot else {
            return Ok(Some(0));
        };
        let tasks = self.tasks(id, None, None).await?;
        let (rows, no_deletes) = record_counts(&tasks);
        Ok(rows
            .filter(|_| no_deletes)
            .and_then(|n| i64::try_from(n).ok()))
    }

    /// `columns` of every row the table's scan reads, in the order asked.
    async fn read_columns(&self, columns: &[&str]) -> Result<Vec<RecordBatch>> {
        let indices = columns
            .iter()
            .map(|c| {
                self.schema.index_of(c).map_err(|_| LakeError::Schema {
                    table: self.table.name().to_string(),
                    detail: format!("no column {c:?} to read"),
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        let projected = Arc::new(
            self.schema
                .project(&indices)
                .map_err(|e| LakeError::arrow(format!("columns of {}", self.table.name()), e))?,
        );
        let Some(id) = self.snapshot else {
            return Ok(Vec::new());
        };
        let names = columns.iter().map(|c| c.to_string()).collect();
        let tasks = self.tasks(id, Some(names), None).await?;
        let ctx = format!("reading {} at snapshot {id}", self.table.name());
        self.table
            .read_file_tasks_as(tasks, projected, ctx)?
            .try_collect()
            .await
    }

    /// The file scan tasks a read of snapshot `id` plans (only the files kept by
    /// [`LakeTableProvider::only`], when set).
    async fn tasks(
        &self,
        id: i64,
        columns: Option<Vec<String>>,
        predicate: Option<iceberg::expr::Predicate>,
    ) -> Result<Vec<FileScanTask>> {
        let mut tasks = self.table.plan_files_at(id, columns, predicate).await?;
        if let Some(only) = &self.only {
            tasks.retain(|t| only.contains(&t.data_file_path));
        }
        Ok(tasks)
    }

    /// The table at `snapshot`, in the schema that snapshot was written with.
    pub fn new(table: &Table, snapshot: Option<i64>) -> Result<Self> {
        let md = table.iceberg().metadata();
        let iceberg_schema = match snapshot.and_then(|id| md.snapshot_by_id(id)) {
            Some(s) => s
                .schema(md)
                .map_err(|e| LakeError::iceberg(format!("the schema of {}", table.name()), e))?,
            None => md.current_schema().clone(),
        };
        let schema = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(&iceberg_schema)
                .map_err(|e| LakeError::iceberg(format!("the schema of {}", table.name()), e))?,
        );
        Ok(Self {
            table: table.clone(),
            snapshot,
            schema,
            only: None,
        })
    }

    /// The same table reading only the data files of its snapshot whose paths are in `paths`.
    pub fn only(mut self, paths: BTreeSet<String>) -> Self {
        self.only = Some(Arc::new(paths));
        self
    }
}

#[async_trait]
impl TableProvider for LakeTableProvider {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let Some(id) = self.snapshot else {
            return Ok(Arc::new(EmptyExec::new(projected)));
        };
        let columns: Vec<String> = projected
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let predicate = convert_filters_to_predicate(filters);
        // Without a predicate the scan yields every row of its files, so the manifests'
        // record counts are its exact row count (when no delete file applies).
        let whole_files = predicate.is_none();
        let mut tasks = self
            .tasks(id, Some(columns), predicate)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let n = state.config().target_partitions().min(tasks.len()).max(1);
        // Largest files first, each to the partition with the fewest bytes so far.
        let mut groups: Vec<(u64, Vec<FileScanTask>)> = vec![(0, Vec::new()); n];
        tasks.sort_by_key(|t| std::cmp::Reverse(t.file_size_in_bytes));
        for t in tasks {
            if let Some(g) = groups.iter_mut().min_by_key(|g| g.0) {
                g.0 += t.file_size_in_bytes.max(1);
                g.1.push(t);
            }
        }
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(projected.clone()),
            Partitioning::UnknownPartitioning(n),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Arc::new(LakeScanExec {
            table: self.table.clone(),
            snapshot: id,
            schema: projected,
            groups: groups.into_iter().map(|g| g.1).collect(),
            whole_files,
            properties,
        }))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
}

/// The planned files of one [`LakeTableProvider`] scan, one group of files per partition.
#[derive(Debug)]
struct LakeScanExec {
    table: Table,
    snapshot: i64,
    schema: SchemaRef,
    groups: Vec<Vec<FileScanTask>>,
    /// Every row of each planned file is read (no predicate was pushed).
    whole_files: bool,
    properties: Arc<PlanProperties>,
}

impl DisplayAs for LakeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "LakeScanExec: {} at snapshot {}, {} files in {} partitions",
            self.table.name(),
            self.snapshot,
            self.groups.iter().map(Vec::len).sum::<usize>(),
            self.groups.len()
        )
    }
}

impl ExecutionPlan for LakeScanExec {
    fn name(&self) -> &str {
        "LakeScanExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    /// The row count from the manifests' record counts: exact when the scan reads its files
    /// whole and no delete file applies (so `count(*)` is answered without reading data, as
    /// Iceberg engines do), an estimate otherwise.
    fn partition_statistics(&self, partition: Option<usize>) -> DFResult<Statistics> {
        let tasks: Vec<&FileScanTask> = match partition {
            None => self.groups.iter().flatten().collect(),
            Some(p) => self.groups.get(p).into_iter().flatten().collect(),
        };
        let mut stats = Statistics::new_unknown(&self.schema);
        let (counts, no_deletes) = record_counts(tasks.iter().copied());
        if let Some(n) = counts.and_then(|n| usize::try_from(n).ok()) {
            let exact = self.whole_files && no_deletes;
            stats.num_rows = if exact {
                Precision::Exact(n)
            } else {
                Precision::Inexact(n)
            };
        }
        Ok(stats)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let tasks = self.groups.get(partition).cloned().unwrap_or_default();
        let ctx = format!(
            "scanning {} at snapshot {} (partition {partition})",
            self.table.name(),
            self.snapshot
        );
        let stream = self
            .table
            .read_file_tasks_as(tasks, self.schema.clone(), ctx)
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .map(|r| r.map_err(|e| DataFusionError::External(Box::new(e))));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}
