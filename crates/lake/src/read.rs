//! Reads: a table at `main`, a branch, a tag or a snapshot, and incremental reads between
//! snapshots of one branch — the rows its ancestry added, which is what makes snapshot ids
//! watermarks.

use std::collections::{BTreeMap, HashSet};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFile, ManifestContentType, ManifestFile, ManifestStatus, Operation};

use crate::error::{LakeError, Result};
use crate::table::{At, SnapshotInfo, Table};

/// The rows one snapshot added, as read by [`Table::read_incremental`].
#[derive(Clone, Debug)]
pub struct AddedBy {
    /// The snapshot that made these rows visible.
    pub snapshot: SnapshotInfo,
    /// Its rows.
    pub batches: Vec<RecordBatch>,
}

/// What an incremental read returned.
#[derive(Clone, Debug)]
pub struct Incremental {
    /// Exclusive lower bound (the watermark the reader held).
    pub after: Option<i64>,
    /// Inclusive upper bound (the new watermark); `None` when the branch has no snapshot.
    pub through: Option<i64>,
    /// Per snapshot in (after, through], oldest first.
    pub parts: Vec<AddedBy>,
}

impl Incremental {
    /// All rows, oldest snapshot first.
    pub fn batches(&self) -> impl Iterator<Item = &RecordBatch> {
        self.parts.iter().flat_map(|p| p.batches.iter())
    }

    /// How many rows.
    pub fn num_rows(&self) -> usize {
        self.batches().map(|b| b.num_rows()).sum()
    }
}

impl Table {
    /// Stream the rows of the table at `at`. `main` on a table never published is empty.
    pub async fn scan_stream(&self, at: &At) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let Some(id) = self.resolve(at)? else {
            return Ok(Box::pin(futures::stream::empty()));
        };
        let tasks = self.plan_files_at(id, None, None).await?;
        self.read_file_tasks(tasks, format!("scanning {} at {at}", self.name()))
    }

    /// `columns` of the rows of the table at `at` that `filter` may hold, with how many data
    /// files were read. The filter goes to iceberg's scan planning, so data files whose
    /// partition or column bounds cannot hold a match are never opened; within the files
    /// read, row groups and rows are filtered by it too. Columns come in the order asked.
    pub async fn scan_where(
        &self,
        at: &At,
        columns: &[&str],
        filter: iceberg::expr::Predicate,
    ) -> Result<(Vec<RecordBatch>, usize)> {
        let Some(id) = self.resolve(at)? else {
            return Ok((Vec::new(), 0));
        };
        let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        let tasks = self.plan_files_at(id, Some(names), Some(filter)).await?;
        let files = tasks.len();
        let schema = self.projected_schema(columns)?;
        let ctx = format!("reading {} at {at}", self.name());
        let batches = self
            .read_file_tasks_as(tasks, schema, ctx)?
            .try_collect()
            .await?;
        Ok((batches, files))
    }

    /// The table's Arrow schema with only `columns`, in that order.
    pub(crate) fn projected_schema(&self, columns: &[&str]) -> Result<SchemaRef> {
        let schema = self.arrow_schema()?;
        let indices = columns
            .iter()
            .map(|c| {
                schema.index_of(c).map_err(|_| LakeError::Schema {
                    table: self.name().to_string(),
                    detail: format!("no column {c:?} to read"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        schema
            .project(&indices)
            .map(std::sync::Arc::new)
            .map_err(|e| LakeError::arrow(format!("projecting {}", self.name()), e))
    }

    /// Read planned file scan tasks, several files at once on their own tokio tasks, in the
    /// order given, each batch in the table's Arrow types. iceberg's reader decodes every file
    /// on the task that polls its stream (one core however many files it has open); here each
    /// file is decoded on a task of its own, at most [`read_parallelism`] at a time, so a scan
    /// uses every core. A file is read whole before its batches are handed on, so at most that
    /// many files are held in memory at once.
    pub(crate) fn read_file_tasks(
        &self,
        tasks: Vec<FileScanTask>,
        ctx: String,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        self.read_file_tasks_as(tasks, self.arrow_schema()?, ctx)
    }

    /// [`Table::read_file_tasks`] for tasks that project `schema`'s columns, in its order.
    pub(crate) fn read_file_tasks_as(
        &self,
        tasks: Vec<FileScanTask>,
        schema: SchemaRef,
        ctx: String,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let reader = self
            .iceberg()
            .reader_builder()
            .with_batch_size(READ_BATCH_ROWS)
            .with_data_file_concurrency_limit(1)
            .build();
        let read_ctx = ctx.clone();
        let files = futures::stream::iter(tasks)
            .map(move |task| {
                let reader = reader.clone();
                let ctx = read_ctx.clone();
                async move {
                    let handle = tokio::spawn(async move {
                        let stream = reader
                            .read(Box::pin(futures::stream::iter([Ok(task)])))?
                            .stream();
                        stream.try_collect::<Vec<RecordBatch>>().await
                    });
                    match handle.await {
                        Ok(Ok(batches)) => Ok(batches),
                        Ok(Err(e)) => Err(LakeError::iceberg(ctx, e)),
                        Err(e) => Err(LakeError::Other(format!(
                            "{ctx}: a reading task failed: {e}"
                        ))),
                    }
                }
            })
            .buffered(read_parallelism());
        Ok(Box::pin(
            files
                .map_ok(move |batches| {
                    let schema = schema.clone();
                    futures::stream::iter(batches.into_iter().map(move |b| normalize(&schema, b)))
                })
                .try_flatten(),
        ))
    }

    /// Read the rows of the table at `at` into memory.
    pub async fn scan(&self, at: &At) -> Result<Vec<RecordBatch>> {
        self.scan_stream(at).await?.try_collect().await
    }

    /// The live data files of the table at `at`.
    pub async fn data_files(&self, at: &At) -> Result<Vec<DataFile>> {
        let name = self.name().to_string();
        let Some(id) = self.resolve(at)? else {
            return Ok(Vec::new());
        };
        let ice = |e: iceberg::Error| LakeError::iceberg(format!("listing files of {name}"), e);
        let list = self.manifest_list(id).await?;
        let mut out = Vec::new();
        let wanted: Vec<&ManifestFile> = list
            .entries()
            .iter()
            .filter(|mf| mf.content == ManifestContentType::Data)
            .collect();
        for m in self.catalog().manifests(&wanted).await.map_err(ice)? {
            out.extend(
                m.entries()
                    .iter()
                    .filter(|e| e.is_alive())
                    .map(|e| e.data_file().clone()),
            );
        }
        Ok(out)
    }

    /// The snapshots of `branch` after `after` (exclusive) through `through` (inclusive;
    /// default: the branch head), oldest first.
    pub fn snapshots_between(
        &self,
        branch: &str,
        after: Option<i64>,
        through: Option<i64>,
    ) -> Result<Vec<SnapshotInfo>> {
        let name = self.name().to_string();
        let through = match through {
            Some(t) => Some(t),
            None => self.head(branch),
        };
        let Some(through) = through else {
            if self.ref_entries().contains_key(branch) || branch == iceberg::spec::MAIN_BRANCH {
                return Ok(Vec::new());
            }
            return Err(LakeError::NoSuchRef {
                table: name,
                kind: "branch",
                name: branch.to_string(),
            });
        };
        if let Some(head) = self.head(branch)
            && !self.is_ancestor(through, head)
        {
            return Err(LakeError::NotAncestor {
                table: name,
                after: through,
                through: head,
            });
        }
        let chain = self.ancestry(through)?;
        let mut out = Vec::new();
        let mut found = after.is_none();
        for s in chain {
            if Some(s.snapshot_id) == after {
                found = true;
                break;
            }
            out.push(s);
        }
        if !found {
            return Err(LakeError::NotAncestor {
                table: name,
                after: after.unwrap_or_default(),
                through,
            });
        }
        out.reverse();
        Ok(out)
    }

    /// The rows `branch`'s ancestry added after snapshot `after` (exclusive) through `through`
    /// (inclusive; default: the branch head). Every snapshot in between must be an append.
    pub async fn read_incremental(
        &self,
        branch: &str,
        after: Option<i64>,
        through: Option<i64>,
    ) -> Result<Incremental> {
        let name = self.name().to_string();
        let snaps = self.snapshots_between(branch, after, through)?;
        let through = snaps.last().map(|s| s.snapshot_id).or(after);
        let mut parts = Vec::with_capacity(snaps.len());
        for s in snaps {
            check_append(&name, &s)?;
            // Each file is read in the partition spec of the manifest that added it.
            let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
            for (f, spec_id) in self.files_added_in(s.snapshot_id).await? {
                by_spec.entry(spec_id).or_default().push(f);
            }
            let mut batches = Vec::new();
            for (spec_id, files) in by_spec {
                batches.extend(self.read_data_files_in_spec(spec_id, &files).await?);
            }
            parts.push(AddedBy {
                snapshot: s,
                batches,
            });
        }
        Ok(Incremental {
            after,
            through,
            parts,
        })
    }

    /// The data files one append snapshot added.
    pub async fn files_added_by(&self, s: &SnapshotInfo) -> Result<Vec<DataFile>> {
        check_append(&self.name().to_string(), s)?;
        Ok(self
            .files_added_in(s.snapshot_id)
            .await?
            .into_iter()
            .map(|(f, _)| f)
            .collect())
    }

    /// The data files snapshot `snapshot_id` added (of any operation), each with the partition
    /// spec of the manifest that lists it.
    pub(crate) async fn files_added_in(&self, snapshot_id: i64) -> Result<Vec<(DataFile, i32)>> {
        let name = self.name().to_string();
        let ice = |e: iceberg::Error| {
            LakeError::iceberg(format!("reading snapshot {snapshot_id} of {name}"), e)
        };
        let list = self.manifest_list(snapshot_id).await?;
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let wanted: Vec<&ManifestFile> = list
            .entries()
            .iter()
            .filter(|mf| {
                mf.content == ManifestContentType::Data
                    && mf.added_snapshot_id == snapshot_id
                    && mf.added_files_count != Some(0)
            })
            .collect();
        let parsed = self.catalog().manifests(&wanted).await.map_err(ice)?;
        for (mf, m) in wanted.iter().zip(parsed) {
            for e in m.entries() {
                if e.status() == ManifestStatus::Added
                    && e.snapshot_id() == Some(snapshot_id)
                    && seen.insert(e.data_file().file_path().to_string())
                {
                    out.push((e.data_file().clone(), mf.partition_spec_id));
                }
            }
        }
        Ok(out)
    }
}

/// Rows per batch a read hands back (the Parquet reader's default is 1,024: many small batches,
/// each paying the per-batch costs of the reader and of whoever consumes it).
const READ_BATCH_ROWS: usize = 8192;

/// How many data files a read decodes at once: one per core, or `LAKE_READ_PARALLELISM` when
/// set to a number (1 reads one file at a time, as on one core: for measuring and for hosts
/// where a read must not take every core). Decided once per process: the core count is read
/// from the cgroup files, too slow to do for every read.
pub(crate) fn read_parallelism() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        if let Some(n) = std::env::var("LAKE_READ_PARALLELISM")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n >= 1)
        {
            return n;
        }
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2)
    })
}

/// Incremental reads only cross appends.
fn check_append(table: &str, s: &SnapshotInfo) -> Result<()> {
    if s.operation != Operation::Append.as_str() {
        return Err(LakeError::NotAppendOnly {
            table: table.to_string(),
            snapshot_id: s.snapshot_id,
            operation: s.operation.clone(),
        });
    }
    Ok(())
}

/// Give a batch the table's Arrow types: iceberg-rust hands identity-partition columns back
/// run-end encoded (a constant per file); readers of the lake get the declared type.
pub(crate) fn normalize(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let mut cols = Vec::with_capacity(batch.num_columns());
    for (field, col) in schema.fields().iter().zip(batch.columns()) {
        if col.data_type() == field.data_type() {
            cols.push(col.clone());
        } else {
            cols.push(
                arrow::compute::cast(col, field.data_type())
                    .map_err(|e| LakeError::arrow(format!("reading column {}", field.name()), e))?,
            );
        }
    }
    RecordBatch::try_new(schema.clone(), cols).map_err(|e| LakeError::arrow("reading a batch", e))
}
