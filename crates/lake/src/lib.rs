//! # lake — Iceberg tables in a file catalog
//!
//! `lake` owns the table format of sugarshack: a catalog that is an append-only log of
//! immutable numbered versions on any object store (a local folder by default, memory in tests,
//! any object_store URL by the same code path); standard Iceberg v2 tables (metadata JSON, Avro
//! manifests and manifest lists, Parquet data files with field ids) that any Iceberg reader opens
//! from their metadata location; writes to any branch (append, and copy-on-write replace by
//! predicate, by partition or whole); refs (branches, tags, fast-forward, reset); commits that
//! move many tables in one catalog version (in a local folder, everything a version names is
//! flushed to disk before it, so a power cut cannot leave a version without its files: on Linux
//! one `syncfs` a sync, elsewhere or with `LAKE_FSYNC=files` file by file, and `LAKE_FSYNC=off`
//! turns it off); reads at a ref, a snapshot or a catalog version;
//! incremental reads between snapshots (snapshot ids as watermarks); the data files added and
//! removed between any two snapshots, readable by SQL, so a sum over a table can be carried from
//! one snapshot to another; point lookups by key that read only the row groups whose bloom
//! filter may hold a key; SQL through DataFusion; and maintenance (snapshot expiry, orphan
//! removal).
//!
//! It does not know what the tables mean: no maple syrup, no audits, no publish policy. Those
//! live in `shack`, which builds them from the pieces here.
//!
//! A [`Catalog`] handle keeps the manifest lists, manifests and table metadata files it parses,
//! and the footers of data files it read whole (none of them changes once written), and plans
//! and reads scans from them, so a long-lived handle is the cheap one; a new one can read a
//! table's history ahead ([`Catalog::warm`]) beside work that does not need it. A program that
//! runs with `RUST_BACKTRACE=1` should also set `RUST_LIB_BACKTRACE=0` unless it prints library
//! backtraces: iceberg-rust's reader, through which lake reads what it does not read itself
//! (filtered or deleting reads, other engines' files), builds and discards an error per column
//! of every Parquet file it opens, and each captures a backtrace
//! (the `sugarshack` CLI does this for itself).
//!
//! ```no_run
//! # async fn demo() -> lake::Result<()> {
//! use lake::{At, Catalog, RefOp};
//! let catalog = Catalog::in_memory();
//! # let (schema, batch): (arrow_schema::Schema, arrow_array::RecordBatch) = todo!();
//! catalog.create_table("bronze.events", &schema, &[]).await?;
//! let wrote = catalog.append("bronze.events", "audit", &[batch], Default::default()).await?;
//! let t = catalog.table("bronze.events").await?;
//! assert!(t.scan(&At::Main).await?.is_empty()); // main has not moved
//! catalog.update_refs("bronze.events", &[RefOp::FastForward { branch: "main".into(), to: wrote.snapshot_id }], "publish").await?;
//! # Ok(()) }
//! ```

mod catalog;
mod durable;
mod error;
pub mod faults;
mod iceberg_catalog;
mod log;
mod lookup;
mod maintenance;
mod manifest;
mod manifest_write;
mod merge;
mod metadata_json;
mod plan;
mod read;
mod row_filter;
pub mod s3;
mod sql;
mod storage;
mod table;
mod types;
mod verify;
mod warm;
mod work;
mod write;

use std::collections::{BTreeMap, HashMap};

use arrow_array::RecordBatch;
pub use catalog::{Catalog, Failpoint};
pub use error::{LakeError, Result};
pub use iceberg::spec::{Datum, Literal, PrimitiveLiteral, Struct, Transform};
use iceberg::spec::{TableMetadata, TableMetadataBuilder, UnboundPartitionSpec};
pub use log::{CATALOG_FORMAT, CatalogVersion, TableEntry};
pub use lookup::Lookup;
pub use maintenance::{ExpireOptions, FileKind, OrphanReport, WATERMARK_PREFIX, watermark_key};
pub use merge::{MatchCondition, MatchTest, MatchedAction, Merge, MergeReport, StagedMerge};
pub use read::{AddedBy, FileChanges, Incremental};
pub use sql::{ADDED, REMOVED, SqlContext, register_table};
pub use storage::{Stores, local_dir_location};
pub use table::{At, RefInfo, RefOp, SnapshotInfo, Table};
pub use types::{Committed, TableChange, TableName};
pub use verify::{VerifyProblem, VerifyReport};
pub use warm::{WarmUp, Warmed};
pub use work::{WORK_LEASE_MS, WorkMark};
pub use write::{
    FilePredicate, PROP_BLOOM_COLUMN, PROP_BLOOM_FPP_COLUMN, PROP_COMPRESSION_CODEC,
    PROP_COMPRESSION_LEVEL, PROP_INTEGER_ENCODING, PROP_ROW_GROUP_LIMIT, Replace, RowPredicate,
    SUMMARY_BRANCH,
};

/// Re-exported so users need not pin their own versions.
pub use {arrow, datafusion, iceberg};

/// One partition field of a new table: a source column and a transform (`Identity`, `Day`, …).
#[derive(Clone, Debug)]
pub struct PartitionField {
    pub column: String,
    pub transform: Transform,
}

impl PartitionField {
    /// Partition by the column's value.
    pub fn identity(column: &str) -> Self {
        PartitionField {
            column: column.to_string(),
            transform: Transform::Identity,
        }
    }

    /// Partition a date or timestamp column by day.
    pub fn day(column: &str) -> Self {
        PartitionField {
            column: column.to_string(),
            transform: Transform::Day,
        }
    }
}

/// A commit that added one snapshot to one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotCommit {
    /// The catalog version it created.
    pub version: u64,
    /// The new snapshot.
    pub snapshot_id: i64,
}

const WRITE_RETRIES: u32 = 32;

impl Catalog {
    /// Stage a new table (commit it alone with [`Catalog::commit`], or with others atomically).
    pub async fn stage_create_table(
        &self,
        name: &str,
        schema: &arrow_schema::Schema,
        partition: &[PartitionField],
    ) -> Result<TableChange> {
        self.stage_create_table_with_properties(name, schema, partition, &BTreeMap::new())
            .await
    }

    /// [`Catalog::stage_create_table`], with table properties (the writer honours
    /// [`PROP_COMPRESSION_CODEC`] and [`PROP_COMPRESSION_LEVEL`], [`PROP_INTEGER_ENCODING`],
    /// [`PROP_ROW_GROUP_LIMIT`] and per-column bloom filters, [`PROP_BLOOM_COLUMN`]).
    pub async fn stage_create_table_with_properties(
        &self,
        name: &str,
        schema: &arrow_schema::Schema,
        partition: &[PartitionField],
        properties: &BTreeMap<String, String>,
    ) -> Result<TableChange> {
        let tn = TableName::parse(name)?;
        let ice_schema = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(schema)
            .map_err(|e| LakeError::iceberg(format!("schema of new table {tn}"), e))?;
        let mut spec = UnboundPartitionSpec::builder();
        for p in partition {
            let field = ice_schema
                .field_by_name(&p.column)
                .ok_or_else(|| LakeError::Schema {
                    table: tn.to_string(),
                    detail: format!("partition column {:?} is not in the schema", p.column),
                })?;
            let part_name = match p.transform {
                Transform::Identity => p.column.clone(),
                other => {
                    let t: String = other
                        .to_string()
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect();
                    format!("{}_{}", p.column, t.trim_end_matches('_'))
                }
            };
            spec = spec
                .add_partition_field(field.id, part_name, p.transform)
                .map_err(|e| LakeError::iceberg(format!("partition spec of {tn}"), e))?;
        }
        let creation = iceberg::TableCreation::builder()
            .name(tn.table.clone())
            .location(self.default_table_location(&tn))
            .schema(ice_schema)
            .partition_spec(spec.build())
            .properties(
                std::iter::once((
                    "write.metadata.previous-versions-max".to_string(),
                    "20".to_string(),
                ))
                .chain(properties.clone())
                .collect::<HashMap<_, _>>(),
            )
            .build();
        let md = TableMetadataBuilder::from_table_creation(creation)
            .and_then(|b| b.build())
            .map_err(|e| LakeError::iceberg(format!("creating {tn}"), e))?
            .metadata;
        Ok(TableChange {
            table: tn,
            base: None,
            kind: catalog::ChangeKind::Update(Box::new(md)),
            snapshot_id: None,
            added_files: Vec::new(),
            refs: None,
        })
    }

    /// Stage a new table from metadata built elsewhere (a REST client's create transaction,
    /// for example): committed, it installs `metadata` under `name`, or fails as a conflict if
    /// the table exists by then. Its location must be the caller's to check.
    pub fn stage_new_table(&self, name: &str, metadata: TableMetadata) -> Result<TableChange> {
        let tn = TableName::parse(name)?;
        let snapshot_id = metadata.current_snapshot_id();
        Ok(TableChange {
            table: tn,
            base: None,
            kind: catalog::ChangeKind::Update(Box::new(metadata)),
            snapshot_id,
            added_files: Vec::new(),
            refs: None,
        })
    }

    /// Create an empty table (its namespace is created with it).
    pub async fn create_table(
        &self,
        name: &str,
        schema: &arrow_schema::Schema,
        partition: &[PartitionField],
    ) -> Result<Table> {
        let change = self.stage_create_table(name, schema, partition).await?;
        match self
            .commit(
                vec![change],
                "create-table",
                &format!("create {name}"),
                BTreeMap::new(),
            )
            .await
        {
            Ok(c) => self.table_at_version(name, c.version).await,
            Err(LakeError::Conflict { .. }) => Err(LakeError::TableExists(name.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Load a table, creating it empty when it does not exist yet.
    pub async fn create_table_if_absent(
        &self,
        name: &str,
        schema: &arrow_schema::Schema,
        partition: &[PartitionField],
    ) -> Result<Table> {
        match self.table(name).await {
            Ok(t) => Ok(t),
            Err(LakeError::NoSuchTable { .. }) => {
                match self.create_table(name, schema, partition).await {
                    Ok(t) => Ok(t),
                    Err(LakeError::TableExists(_)) => self.table(name).await,
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Append rows to `branch` of a table and commit. Data files are written once; if another
    /// writer moved the table in between, the snapshot is re-staged on the new head and retried.
    pub async fn append(
        &self,
        name: &str,
        branch: &str,
        batches: &[RecordBatch],
        properties: BTreeMap<String, String>,
    ) -> Result<SnapshotCommit> {
        let table = self.table(name).await?;
        let files = table.write_data_files(batches).await?;
        self.commit_files(table, branch, files, None, properties, "append")
            .await
    }

    /// Replace on `branch`: remove what `replace` names, add `batches`, commit (retrying as
    /// [`Catalog::append`] does).
    pub async fn replace(
        &self,
        name: &str,
        branch: &str,
        replace: &Replace,
        batches: &[RecordBatch],
        properties: BTreeMap<String, String>,
    ) -> Result<SnapshotCommit> {
        let table = self.table(name).await?;
        let files = table.write_data_files(batches).await?;
        self.commit_files(table, branch, files, Some(replace), properties, "overwrite")
            .await
    }

    /// Commit `files`, written with `table` (the handle they were written with), to `branch`,
    /// removing what `replace` names. When another writer moved the table first, the snapshot
    /// is re-staged on the new head and retried; a replace is only retried when no data file
    /// added to the branch since the snapshot it first read holds rows it would remove
    /// ([`Table::check_no_conflicting_data`]), else it fails with [`LakeError::Conflict`].
    pub async fn commit_files(
        &self,
        mut table: Table,
        branch: &str,
        files: Vec<iceberg::spec::DataFile>,
        replace: Option<&Replace>,
        properties: BTreeMap<String, String>,
        operation: &str,
    ) -> Result<SnapshotCommit> {
        let name = table.name().to_string();
        let name = name.as_str();
        // What the first attempt reads: the branch head (main's for a new branch), and the
        // partition spec the files were written with.
        let base = table
            .head(branch)
            .or_else(|| table.head(iceberg::spec::MAIN_BRANCH));
        let spec_id = table.metadata().default_partition_spec_id();
        let mut last_err = None;
        for attempt in 0..WRITE_RETRIES {
            if attempt > 0 {
                table = self.table(name).await?;
                if table.metadata().default_partition_spec_id() != spec_id {
                    return Err(LakeError::Conflict {
                        table: name.to_string(),
                        detail: format!(
                            "its default partition spec changed from {spec_id} to {} while this writer wrote files for it; write them again",
                            table.metadata().default_partition_spec_id()
                        ),
                    });
                }
                if let Some(replace) = replace {
                    table
                        .check_no_conflicting_data(branch, base, replace)
                        .await?;
                }
            }
            let change = table
                .stage_files(branch, files.clone(), replace, properties.clone())
                .await?;
            let snapshot_id = change.snapshot_id.unwrap_or_default();
            match self
                .commit(
                    vec![change],
                    operation,
                    &format!("{operation} {name} branch {branch}"),
                    BTreeMap::new(),
                )
                .await
            {
                Ok(c) => {
                    return Ok(SnapshotCommit {
                        version: c.version,
                        snapshot_id,
                    });
                }
                Err(e) if e.is_conflict() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| LakeError::Other(format!("{operation} of {name} failed"))))
    }

    /// Merge `rows` (in the table's schema) into `branch` by key, copy-on-write (see [`Merge`]
    /// for the options and semantics): only data files that may hold an incoming key are read
    /// (partition and key bounds prune the rest unread), only those holding a key the merge
    /// updates or deletes are rewritten, and one snapshot is committed — `overwrite`, or
    /// `append` when it only inserts, `delete` when it only deletes, none when nothing changes.
    /// Retried as [`Catalog::append`] is when another writer moved the table; fails with
    /// [`LakeError::Conflict`] when that writer added a row with one of the incoming keys or
    /// removed a file this merge rewrote.
    pub async fn merge(
        &self,
        name: &str,
        branch: &str,
        rows: &[RecordBatch],
        merge: &Merge,
        properties: BTreeMap<String, String>,
    ) -> Result<MergeReport> {
        let table = self.table(name).await?;
        self.merge_table(table, branch, rows, merge, properties)
            .await
    }

    /// [`Catalog::merge`] against the table as `table` was read: the merge reads the branch as
    /// of that handle, and its commit is checked against every snapshot added since.
    pub async fn merge_table(
        &self,
        table: Table,
        branch: &str,
        rows: &[RecordBatch],
        merge: &Merge,
        properties: BTreeMap<String, String>,
    ) -> Result<MergeReport> {
        let plan = table.plan_merge(branch, rows, merge).await?;
        let mut report = plan.report;
        if plan.changes {
            report.snapshot = Some(
                self.commit_files(
                    table,
                    branch,
                    plan.files,
                    Some(&plan.replace),
                    properties,
                    "merge",
                )
                .await?,
            );
        }
        Ok(report)
    }

    /// Apply ref changes to one table in one commit.
    pub async fn update_refs(&self, name: &str, ops: &[RefOp], operation: &str) -> Result<u64> {
        let table = self.table(name).await?;
        let change = table.stage_refs(ops)?;
        let c = self
            .commit(
                vec![change],
                operation,
                &format!("{operation} {name}"),
                BTreeMap::new(),
            )
            .await?;
        Ok(c.version)
    }

    /// Expire the snapshots of one table that no ref, retention rule or watermark needs, as of
    /// the wall clock ([`Catalog::expire_snapshots_at`]); returns the expired ids.
    pub async fn expire_snapshots(&self, name: &str, opts: &ExpireOptions) -> Result<Vec<i64>> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        self.expire_snapshots_at(name, opts, now_ms).await
    }

    /// Remove a table from the catalog (its files stay; older versions still read it).
    pub async fn drop_table(&self, name: &str) -> Result<u64> {
        let table = self.table(name).await?;
        let change = TableChange {
            table: table.name().clone(),
            base: Some(table.metadata_location().to_string()),
            kind: catalog::ChangeKind::Drop,
            snapshot_id: None,
            added_files: Vec::new(),
            refs: None,
        };
        Ok(self
            .commit(
                vec![change],
                "drop-table",
                &format!("drop {name}"),
                BTreeMap::new(),
            )
            .await?
            .version)
    }
}
