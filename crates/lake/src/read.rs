//! Reads: a table at `main`, a branch, a tag or a snapshot, and incremental reads between
//! snapshots of one branch — the rows its ancestry added, which is what makes snapshot ids
//! watermarks.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use arrow::buffer::BooleanBuffer;
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{ArrowError, SchemaRef};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFile, ManifestContentType, ManifestFile, ManifestStatus, Operation};

use crate::error::{LakeError, Result};
use crate::row_filter::RowFilter;
use crate::table::{At, SnapshotInfo, Table};

/// The rows one snapshot added, as read by [`Table::read_incremental`].
#[derive(Clone, Debug)]
pub struct AddedBy {
    /// The snapshot that made these rows visible.
    pub snapshot: SnapshotInfo,
    /// Its rows.
    pub batches: Vec<RecordBatch>,
}

/// The data files that differ between two snapshots of one table, as
/// [`Table::file_changes`] finds them. Neither snapshot has delete files, so each one's rows are
/// exactly its live data files' rows: the rows at `to` are the rows at `from`, less those of
/// `removed`, plus those of `added`, whatever operations lie between the two (appends,
/// overwrites, partition replacements, compactions) and whether or not one descends from the
/// other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileChanges {
    pub from: i64,
    pub to: i64,
    /// Paths of the data files live at `to` and not at `from`.
    pub added: BTreeSet<String>,
    /// Paths of the data files live at `from` and not at `to`.
    pub removed: BTreeSet<String>,
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

    /// Stream `columns` (in that order) of the rows of the table at `at`: a whole read that
    /// neither decodes nor holds the columns it does not need.
    pub async fn scan_columns_stream(
        &self,
        at: &At,
        columns: &[&str],
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        Ok(self.columns_stream(at, columns, None).await?.0)
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
        let (batches, files) = self.columns_stream(at, columns, Some(filter)).await?;
        Ok((batches.try_collect().await?, files))
    }

    /// `columns` of the rows of the table at `at` (those `filter` may hold, when there is one),
    /// and how many data files the stream reads.
    async fn columns_stream(
        &self,
        at: &At,
        columns: &[&str],
        filter: Option<iceberg::expr::Predicate>,
    ) -> Result<(BoxStream<'static, Result<RecordBatch>>, usize)> {
        let Some(id) = self.resolve(at)? else {
            return Ok((Box::pin(futures::stream::empty()), 0));
        };
        let schema = self.projected_schema(columns)?;
        let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        let tasks = self.plan_files_at(id, Some(names), filter).await?;
        let files = tasks.len();
        let ctx = format!("reading {} at {at}", self.name());
        Ok((self.read_file_tasks_as(tasks, schema, ctx)?, files))
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
    ///
    /// A file read whole, with no filter and no delete file, whose columns carry the field ids
    /// and exactly the Arrow types asked, is read by parquet's reader directly with its footer
    /// kept on the catalog handle ([`read_plain`]): the next read of it, in this run or a later
    /// one on the same handle, neither reads nor parses the footer again. Any other file goes
    /// through iceberg's reader (field-id resolution for evolved schemas, type promotion,
    /// filters, deletes).
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
        self.read_file_tasks_keyed(tasks, schema, ctx, None)
    }

    /// [`Table::read_file_tasks_as`], where a file read by [`read_plain`] decodes the columns
    /// other than `keys`' column only for the rows whose key is one of `keys` (parquet decodes
    /// the key column first and skips the other rows). A file read otherwise, or one whose key
    /// column is not a plain string column, hands back every row it holds: `keys` narrows what
    /// is decoded, never what the caller must check.
    pub(crate) fn read_file_tasks_keyed(
        &self,
        tasks: Vec<FileScanTask>,
        schema: SchemaRef,
        ctx: String,
        keys: Option<Arc<KeySet>>,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        // iceberg's reader, built when the first file that is not plain needs it (building one
        // reads the machine's core count from cgroup files: most reads never need it).
        let iceberg = self.iceberg().clone();
        // A lookup reads the few row groups of each file that may hold a key: small reads, so
        // more of them are in flight (their waits on the store overlap) than a scan's, whose
        // files are decoded whole and held until their turn.
        let in_flight = if keys.is_some() {
            lookup_parallelism()
        } else {
            read_parallelism()
        };
        let reader = std::sync::Arc::new(std::sync::OnceLock::new());
        let read_ctx = ctx.clone();
        let catalog = self.catalog().clone();
        let wanted = schema.clone();
        let files = futures::stream::iter(tasks)
            .map(move |task| {
                let reader = reader.clone();
                let iceberg = iceberg.clone();
                let catalog = catalog.clone();
                let wanted = wanted.clone();
                let ctx = read_ctx.clone();
                let keys = keys.clone();
                on_task(ctx, async move {
                    if plain(&task)
                        && let Some(batches) =
                            read_plain(&catalog, &task, &wanted, keys.as_ref()).await?
                    {
                        return Ok(batches);
                    }
                    let reader: &iceberg::arrow::ArrowReader = reader.get_or_init(|| {
                        iceberg
                            .reader_builder()
                            .with_batch_size(READ_BATCH_ROWS)
                            .with_data_file_concurrency_limit(1)
                            .build()
                    });
                    let stream = reader
                        .clone()
                        .read(Box::pin(futures::stream::iter([Ok(task)])))?
                        .stream();
                    stream.try_collect::<Vec<RecordBatch>>().await
                })
            })
            .buffered(in_flight);
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
        self.live_files(at, DataFile::clone).await
    }

    /// The paths of the table's live data files at `at`: [`Table::data_files`] without copying
    /// each file's entry (its column statistics most of all) out of the manifests the catalog
    /// handle keeps.
    pub async fn data_file_paths(&self, at: &At) -> Result<Vec<String>> {
        self.live_files(at, |f| f.file_path().to_string()).await
    }

    /// `each` of the live data files at `at`, in manifest order.
    async fn live_files<T>(&self, at: &At, each: impl Fn(&DataFile) -> T) -> Result<Vec<T>> {
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
                    .map(|e| each(e.data_file())),
            );
        }
        Ok(out)
    }

    /// The data files live at snapshot `to` and not at `from` (added) and live at `from` and not
    /// at `to` (removed), compared by path. Reads the two snapshots' manifests (kept on the
    /// catalog handle), no data file. A snapshot with delete files is
    /// [`LakeError::HasDeleteFiles`]: its rows are not its data files' rows.
    pub async fn file_changes(&self, from: i64, to: i64) -> Result<FileChanges> {
        let (at_from, at_to) =
            futures::try_join!(self.live_data_paths(from), self.live_data_paths(to))?;
        Ok(FileChanges {
            from,
            to,
            added: at_to.difference(&at_from).cloned().collect(),
            removed: at_from.difference(&at_to).cloned().collect(),
        })
    }

    /// The paths of snapshot `id`'s live data files ([`Table::data_files`]);
    /// [`LakeError::HasDeleteFiles`] when it has delete files.
    async fn live_data_paths(&self, id: i64) -> Result<BTreeSet<String>> {
        let list = self.manifest_list(id).await?;
        if list
            .entries()
            .iter()
            .any(|mf| mf.content != ManifestContentType::Data)
        {
            return Err(LakeError::HasDeleteFiles {
                table: self.name().to_string(),
                snapshot_id: id,
            });
        }
        Ok(self
            .data_file_paths(&At::Snapshot(id))
            .await?
            .into_iter()
            .collect())
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
        // Walk back from `through` only as far as `after`: an incremental read since the last
        // watermark costs the snapshots since then, not the branch's whole history.
        let mut out = Vec::new();
        let mut found = after.is_none();
        for s in self.ancestors(through)? {
            if Some(s.snapshot_id()) == after {
                found = true;
                break;
            }
            out.push(crate::table::info(s));
        }
        if !found {
            return Err(LakeError::NotAncestor {
                table: name,
                after: after.unwrap_or_default(),
                through,
            });
        }
        // From the start: the walk must reach the branch's first snapshot. One whose parent was
        // expired ends the walk early, and the rows the expired snapshots added would be left
        // out of a read that claims to hold everything since the start.
        if after.is_none()
            && let Some(parent) = out
                .last()
                .and_then(|s| s.parent_id)
                .filter(|p| self.metadata().snapshot_by_id(*p).is_none())
        {
            return Err(LakeError::HistoryExpired {
                table: name,
                snapshot_id: parent,
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

/// Rows per batch a read hands back, at most (a row group's rows when it holds fewer). The
/// Parquet reader's default is 1,024: many small batches, each paying the per-batch costs of
/// the reader and of whoever consumes it. A file is decoded whole and held before its batches
/// are handed on, so larger batches do not raise what a read holds; they cut the per-batch
/// work (buffers allocated and zero-filled, arrays and batches built and checked). Measured
/// on 25 files of 100,000 rows read whole in a release build, medians of five runs taking
/// turns: 12.5 ms in batches of 8,192, 11.3 ms of 32,768, 10.9 ms of 65,536; a `season`
/// showed no change beyond noise, nor its peak memory.
const READ_BATCH_ROWS: usize = 65_536;

/// Run `work` on a task of its own (on another core when one is free) and wait for it: its error
/// is named by `ctx`, and a task that panicked or was cancelled is an error too.
pub(crate) async fn on_task<T: Send + 'static>(
    ctx: String,
    work: impl std::future::Future<Output = iceberg::Result<T>> + Send + 'static,
) -> Result<T> {
    spawned(&ctx, work)
        .await?
        .map_err(|e| LakeError::iceberg(ctx, e))
}

/// Run `work` on a task of its own and wait for its answer; a task that panicked or was
/// cancelled is an error named by `ctx`. A caller that stops waiting (a sibling of a
/// `try_join_all` failed) aborts the task at its next await, so a failed step does not leave
/// work writing files behind it.
pub(crate) async fn spawned<T: Send + 'static>(
    ctx: &str,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T> {
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(work));
    (&mut task.0)
        .await
        .map_err(|e| LakeError::Other(format!("{ctx}: its task failed: {e}")))
}

/// How many files a lookup has in flight (reading footers and filters, then the row groups
/// that may hold a key), per core: small reads whose waits on the store should overlap. Set
/// `LAKE_READ_PARALLELISM` and a lookup has that many in flight, as every other read.
const KEYED_READS_PER_CORE: usize = 4;

/// How many files a lookup has in flight: [`read_parallelism`] times
/// [`KEYED_READS_PER_CORE`], or `LAKE_READ_PARALLELISM` when set.
pub(crate) fn lookup_parallelism() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        if std::env::var_os("LAKE_READ_PARALLELISM").is_some() {
            read_parallelism()
        } else {
            read_parallelism() * KEYED_READS_PER_CORE
        }
    })
}

/// How many data files a read decodes, and a partitioned write encodes, at once: one per core,
/// or `LAKE_READ_PARALLELISM` when set to a number (1 reads and writes one file at a time, as on
/// one core: for measuring and for hosts where lake must not take every core). Decided once per process: the core count is read
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

/// Whether `task` reads a Parquet file with no delete file to apply to its rows. Its filter, if
/// any, is [`RowFilter`]'s to evaluate or hand on; its byte range, if it is a part of the file
/// (as a lookup plans), picks row groups as iceberg's reader picks them ([`row_groups_in`]).
fn plain(task: &FileScanTask) -> bool {
    task.data_file_format == iceberg::spec::DataFileFormat::Parquet && task.deletes.is_empty()
}

/// The row groups a task for bytes `[start, start + length)` of a file reads, when it is a
/// part of the file: those whose midpoint lies in the range, counting row groups in order from
/// the 4-byte magic, each its compressed size (as iceberg's reader and parquet-mr assign them,
/// so tasks tiling a file read each row group once). `None` when that is every row group, or
/// the task is for the whole file (`start` and `length` both 0).
fn row_groups_in(
    md: &parquet::file::metadata::ParquetMetaData,
    start: u64,
    length: u64,
) -> Option<Vec<usize>> {
    if start == 0 && length == 0 {
        return None;
    }
    let end = start.saturating_add(length);
    let mut offset = 4u64;
    let mut selected = Vec::new();
    for (i, rg) in md.row_groups().iter().enumerate() {
        let size = rg.compressed_size().max(0) as u64;
        let mid = offset + size / 2;
        if start <= mid && mid < end {
            selected.push(i);
        }
        offset += size;
    }
    (selected.len() < md.num_row_groups()).then_some(selected)
}

/// Read a [`plain`] task's file with parquet's reader, its footer from the catalog handle when
/// it holds it (and kept there when not), projecting `wanted`'s columns by field id in its
/// order, and only the rows the task's filter holds for. `None` when the file does not hold
/// every wanted column by field id with exactly the wanted Arrow type (another engine's file,
/// an evolved schema), or the filter is not one [`RowFilter`] evaluates: iceberg's reader
/// resolves those.
async fn read_plain(
    catalog: &crate::catalog::Catalog,
    task: &FileScanTask,
    wanted: &SchemaRef,
    keys: Option<&Arc<KeySet>>,
) -> iceberg::Result<Option<Vec<RecordBatch>>> {
    let path = &task.data_file_path;
    let (file, footer) = catalog
        .open_data_file(path, task.file_size_in_bytes)
        .await?;
    let Some((roots, order)) = columns_by_field_id(footer.schema(), wanted) else {
        return Ok(None);
    };
    let filter = match &task.predicate {
        None => None,
        Some(p) => match RowFilter::compile(p, footer.schema()) {
            Some(f) => Some(f),
            None => return Ok(None),
        },
    };
    let mask = parquet::arrow::ProjectionMask::roots(footer.parquet_schema(), roots);
    let mut builder =
        parquet::arrow::ParquetRecordBatchStreamBuilder::new_with_metadata(file, footer.clone())
            .with_projection(mask)
            .with_batch_size(READ_BATCH_ROWS);
    if let Some(groups) = row_groups_in(footer.metadata(), task.start, task.length) {
        if groups.is_empty() {
            return Ok(Some(Vec::new()));
        }
        builder = builder.with_row_groups(groups);
    }
    let mut predicates: Vec<Box<dyn parquet::arrow::arrow_reader::ArrowPredicate>> = Vec::new();
    if let Some(keys) = keys
        && let Some(root) = keys.root_in(footer.schema())
    {
        let mask = parquet::arrow::ProjectionMask::roots(footer.parquet_schema(), [root]);
        let keys = keys.clone();
        predicates.push(Box::new(
            parquet::arrow::arrow_reader::ArrowPredicateFn::new(mask, move |batch| {
                keys.keep(&batch)
            }),
        ));
    }
    if let Some(filter) = filter {
        let mask =
            parquet::arrow::ProjectionMask::roots(footer.parquet_schema(), filter.roots().to_vec());
        predicates.push(Box::new(
            parquet::arrow::arrow_reader::ArrowPredicateFn::new(mask, move |batch| {
                filter.keep(&batch)
            }),
        ));
    }
    if !predicates.is_empty() {
        builder = builder.with_row_filter(parquet::arrow::arrow_reader::RowFilter::new(predicates));
    }
    let stream = builder
        .build()
        .map_err(|e| parquet_error(path, "reading", e))?;
    let read: Vec<RecordBatch> = stream
        .try_collect()
        .await
        .map_err(|e| parquet_error(path, "reading", e))?;
    let mut out = Vec::with_capacity(read.len());
    for b in read.into_iter().filter(|b| b.num_rows() > 0) {
        let columns = order.iter().map(|i| b.column(*i).clone()).collect();
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
        out.push(
            RecordBatch::try_new_with_options(wanted.clone(), columns, &options).map_err(|e| {
                iceberg::Error::new(iceberg::ErrorKind::DataInvalid, format!("reading {path}"))
                    .with_source(e)
            })?,
        );
    }
    #[cfg(test)]
    PLAIN_FILES.set(PLAIN_FILES.get() + 1);
    Ok(Some(out))
}

/// The keys a lookup asks for, by the field id of their string column: what a read decodes of
/// the other columns (see [`Table::read_file_tasks_keyed`]).
///
/// Every row of every row group a lookup reads has its key looked up here, so the set hashes
/// with foldhash (hashbrown's default hasher) rather than std's SipHash, several times the
/// work for a short id. Its seed comes from the process's address
/// layout: unpredictable enough for keys taken from data, though not, as SipHash is, made to
/// resist keys crafted to collide.
pub(crate) struct KeySet {
    field_id: i32,
    keys: HashSet<String, foldhash::fast::RandomState>,
}

impl KeySet {
    pub(crate) fn new<'a>(field_id: i32, keys: impl IntoIterator<Item = &'a str>) -> KeySet {
        let keys = keys.into_iter();
        let mut set = HashSet::with_capacity_and_hasher(keys.size_hint().0, Default::default());
        set.extend(keys.map(str::to_string));
        KeySet {
            field_id,
            keys: set,
        }
    }

    /// The file's top-level column with the key's field id, when it is a string column.
    fn root_in(&self, file: &arrow_schema::Schema) -> Option<usize> {
        let id = self.field_id.to_string();
        file.fields().iter().position(|f| {
            f.metadata().get(parquet::arrow::PARQUET_FIELD_ID_META_KEY) == Some(&id)
                && *f.data_type() == arrow_schema::DataType::Utf8
        })
    }

    /// Which rows of `batch` (the key column first) hold one of the keys; a null key is none.
    pub(crate) fn keep(
        &self,
        batch: &RecordBatch,
    ) -> std::result::Result<BooleanArray, ArrowError> {
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| ArrowError::CastError("a lookup key column is not Utf8".into()))?;
        let keep = BooleanBuffer::collect_bool(ids.len(), |i| {
            ids.is_valid(i) && self.keys.contains(ids.value(i))
        });
        Ok(BooleanArray::new(keep, None))
    }
}

/// A Parquet error reading the data file at `path`, saying what was being read.
pub(crate) fn parquet_error(
    path: &str,
    what: &str,
    e: parquet::errors::ParquetError,
) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::DataInvalid, format!("{what} of {path}")).with_source(e)
}

/// Where each of `wanted`'s fields is among `file`'s top-level columns, matched by Parquet
/// field id with exactly the same Arrow type: the root columns to read (ascending, as parquet
/// hands them back) and, for each wanted field in order, its position among them. `None` when
/// a wanted field has no field id, the file no column with it, or the types differ.
fn columns_by_field_id(
    file: &arrow_schema::Schema,
    wanted: &arrow_schema::Schema,
) -> Option<(Vec<usize>, Vec<usize>)> {
    use parquet::arrow::PARQUET_FIELD_ID_META_KEY as ID;
    if wanted.fields().is_empty() {
        return None;
    }
    // Each field's id looked up once (a hashed lookup in its metadata), not once per pair.
    let ids: Vec<Option<&String>> = file.fields().iter().map(|f| f.metadata().get(ID)).collect();
    let mut at = Vec::with_capacity(wanted.fields().len());
    for field in wanted.fields() {
        let id = field.metadata().get(ID)?;
        let i = ids.iter().position(|f| *f == Some(id))?;
        if file.field(i).data_type() != field.data_type() {
            return None;
        }
        at.push(i);
    }
    let mut roots = at.clone();
    roots.sort_unstable();
    roots.dedup();
    let order = at
        .iter()
        .map(|i| roots.iter().position(|r| r == i))
        .collect::<Option<Vec<usize>>>()?;
    Some((roots, order))
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

#[cfg(test)]
thread_local! {
    /// Files [`read_plain`] read on this thread (a `#[tokio::test]` runs its spawned reads on
    /// its own thread), for tests that check which reader a file went through.
    static PLAIN_FILES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        Array, BooleanArray, Date32Array, Int32Array, Int64Array, StringArray,
        TimestampMicrosecondArray,
    };
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

    use super::*;
    use crate::{Catalog, PartitionField};

    fn with_id(name: &str, ty: DataType, id: i32) -> Field {
        Field::new(name, ty, true).with_metadata(
            [(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]
                .into_iter()
                .collect(),
        )
    }

    #[test]
    fn columns_are_matched_by_field_id_and_exact_type() {
        let file = Schema::new(vec![
            with_id("a", DataType::Int64, 1),
            with_id("b", DataType::Utf8, 2),
            with_id("c", DataType::Date32, 3),
        ]);
        // Asked out of file order and renamed: matched by id, handed back in the order asked.
        let wanted = Schema::new(vec![
            with_id("day", DataType::Date32, 3),
            with_id("a", DataType::Int64, 1),
        ]);
        assert_eq!(
            columns_by_field_id(&file, &wanted),
            Some((vec![0, 2], vec![1, 0]))
        );
        // A column the file lacks (added after it was written), a promoted type, a field
        // without an id, nothing asked: iceberg's reader resolves those.
        for wanted in [
            vec![with_id("d", DataType::Int64, 4)],
            vec![with_id("a", DataType::Int32, 1)],
            vec![Field::new("a", DataType::Int64, true)],
            vec![],
        ] {
            assert_eq!(columns_by_field_id(&file, &Schema::new(wanted)), None);
        }
        // A file written without field ids matches nothing.
        let bare = Schema::new(vec![Field::new("a", DataType::Int64, true)]);
        let wanted = Schema::new(vec![with_id("a", DataType::Int64, 1)]);
        assert_eq!(columns_by_field_id(&bare, &wanted), None);
    }

    fn rows(from: i64, n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("note", DataType::Utf8, true),
            Field::new("day", DataType::Date32, false),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                true,
            ),
            Field::new("small", DataType::Int32, true),
            Field::new("flag", DataType::Boolean, true),
        ]));
        let ids = from..from + n;
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(StringArray::from_iter(
                    ids.clone().map(|i| (i % 3 != 0).then(|| format!("n{i}"))),
                )),
                Arc::new(Date32Array::from_iter_values(
                    ids.clone().map(|i| 20_000 + (i % 4) as i32),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter(
                        ids.clone()
                            .map(|i| (i % 5 != 0).then_some(1_700_000_000_000_000 + i)),
                    )
                    .with_timezone("+00:00"),
                ),
                Arc::new(Int32Array::from_iter(
                    ids.clone().map(|i| (i % 7 != 0).then_some(i as i32)),
                )),
                Arc::new(BooleanArray::from_iter(
                    ids.map(|i| (i % 2 == 0).then_some(i % 4 == 0)),
                )),
            ],
        )
        .expect("test batch")
    }

    /// Rows sorted by id, as (id, note, day, at, small, flag) debug strings.
    fn sorted(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = Vec::new();
        for b in batches {
            for i in 0..b.num_rows() {
                let cells: Vec<String> = b
                    .columns()
                    .iter()
                    .map(|c| {
                        if c.is_null(i) {
                            "null".to_string()
                        } else {
                            arrow::util::display::array_value_to_string(c, i).expect("display")
                        }
                    })
                    .collect();
                out.push(cells.join("|"));
            }
        }
        out.sort_by_key(|r| r.split('|').next().and_then(|id| id.parse::<i64>().ok()));
        out
    }

    /// A table partitioned by `day` with three appends of `n` rows each to `audit`.
    async fn three_appends(name: &str, n: i64) -> (Catalog, Table, Vec<RecordBatch>) {
        let c = Catalog::in_memory();
        let written: Vec<RecordBatch> = (0..3).map(|f| rows(f * n, n)).collect();
        c.create_table(
            name,
            &written[0].schema(),
            &[PartitionField::identity("day")],
        )
        .await
        .expect("create");
        for b in &written {
            c.append(name, "audit", std::slice::from_ref(b), Default::default())
                .await
                .expect("append");
        }
        let t = c.table(name).await.expect("load");
        (c, t, written)
    }

    /// What iceberg-rust's own reader reads for `tasks`.
    async fn by_iceberg(t: &Table, tasks: Vec<FileScanTask>) -> Vec<RecordBatch> {
        t.iceberg()
            .reader_builder()
            .build()
            .read(Box::pin(futures::stream::iter(tasks.into_iter().map(Ok))))
            .expect("iceberg's reader")
            .stream()
            .try_collect()
            .await
            .expect("iceberg's rows")
    }

    #[tokio::test]
    async fn footers_of_one_schema_decode_its_arrow_schema_once() {
        use parquet::arrow::ParquetRecordBatchStreamBuilder;
        use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
        let (c, t, _) = three_appends("t.footers", 40).await;
        let files = t.data_files(&At::reference("audit")).await.expect("files");
        assert_eq!(files.len(), 12, "three appends over four days");
        assert_eq!(c.inner.arrow_schemas.decoded(), 0, "no footer read yet");
        let read = |footer: ArrowReaderMetadata, file| async move {
            let rows: Vec<RecordBatch> =
                ParquetRecordBatchStreamBuilder::new_with_metadata(file, footer)
                    .build()
                    .expect("reader")
                    .try_collect()
                    .await
                    .expect("rows");
            rows
        };
        let mut shared = None;
        for f in &files {
            let (file, footer) = c
                .open_data_file(f.file_path(), f.file_size_in_bytes())
                .await
                .expect("footer");
            // The same file's footer decoded from scratch, Arrow schema and all.
            let mut plain = iceberg::arrow::ArrowFileReader::new(
                iceberg::io::FileMetadata {
                    size: f.file_size_in_bytes(),
                },
                c.inner
                    .file_io
                    .new_input(f.file_path())
                    .expect("input")
                    .reader()
                    .await
                    .expect("reader"),
            );
            let decoded = ArrowReaderMetadata::load_async(&mut plain, ArrowReaderOptions::new())
                .await
                .expect("decoded");
            assert_eq!(footer.schema(), decoded.schema(), "{}", f.file_path());
            assert_eq!(footer.parquet_schema(), decoded.parquet_schema());
            // Not decoded again: the first file's schema, the same allocation.
            let first = shared.get_or_insert_with(|| footer.schema().clone());
            assert!(Arc::ptr_eq(first, footer.schema()), "{}", f.file_path());
            let rows = read(footer, file).await;
            assert_eq!(sorted(&rows), sorted(&read(decoded, plain).await));
            assert!(rows.iter().map(RecordBatch::num_rows).sum::<usize>() > 0);
        }
        assert_eq!(
            c.inner.arrow_schemas.decoded(),
            1,
            "twelve files written under one schema, one Arrow schema decoded"
        );

        // A table of other columns: its files decode a schema of their own.
        let narrow = rows(0, 30).project(&[0, 4]).expect("project");
        c.create_table("t.narrow", &narrow.schema(), &[])
            .await
            .expect("create");
        c.append(
            "t.narrow",
            "audit",
            std::slice::from_ref(&narrow),
            Default::default(),
        )
        .await
        .expect("append");
        let n = c.table("t.narrow").await.expect("load");
        let f = n.data_files(&At::reference("audit")).await.expect("files");
        let (_, footer) = c
            .open_data_file(f[0].file_path(), f[0].file_size_in_bytes())
            .await
            .expect("footer");
        assert_eq!(footer.schema().fields().len(), 2);
        assert_eq!(c.inner.arrow_schemas.decoded(), 2);
    }

    #[tokio::test]
    async fn a_plain_scan_reads_by_field_id_and_keeps_each_footer() {
        let (c, t, written) = three_appends("t.kinds", 50).await;
        let at = At::reference("audit");
        let files = t.data_files(&at).await.expect("files").len();
        assert_eq!(files, 12, "three appends over four days");
        // The paths alone, as the files list them, at the head and at the first append.
        let first = At::Snapshot(
            t.ancestry(t.head("audit").expect("head"))
                .expect("ancestry")
                .last()
                .expect("a snapshot")
                .snapshot_id,
        );
        for at in [&at, &first] {
            let paths: Vec<String> = t
                .data_files(at)
                .await
                .expect("files")
                .iter()
                .map(|f| f.file_path().to_string())
                .collect();
            assert_eq!(t.data_file_paths(at).await.expect("paths"), paths);
        }

        let before = PLAIN_FILES.get();
        let read = t.scan(&at).await.expect("scan");
        assert_eq!(
            PLAIN_FILES.get() - before,
            files,
            "every file went through the plain read"
        );
        assert_eq!(read[0].schema(), t.arrow_schema().expect("schema"));
        assert_eq!(
            sorted(&read),
            sorted(&written),
            "the rows written, every value"
        );

        // Again on the same handle: every footer comes from memory, the rows are the same.
        let (parsed, hits) = c.parsed_file_counts();
        let again = t.scan(&at).await.expect("scan again");
        let (parsed_again, hits_again) = c.parsed_file_counts();
        assert_eq!(parsed_again, parsed, "no footer parsed a second time");
        assert!(hits_again >= hits + files as u64);
        assert_eq!(sorted(&again), sorted(&written));

        // Some columns, out of table order: the same values, in the order asked.
        let before = PLAIN_FILES.get();
        let some: Vec<RecordBatch> = t
            .scan_columns_stream(&at, &["flag", "id"])
            .await
            .expect("read")
            .try_collect()
            .await
            .expect("rows");
        assert_eq!(
            some[0].schema(),
            t.projected_schema(&["flag", "id"]).expect("projection")
        );
        assert_eq!(PLAIN_FILES.get() - before, files);
        let mut pairs: Vec<(i64, Option<bool>)> = some
            .iter()
            .flat_map(|b| {
                let flag = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .expect("flag");
                let id = b
                    .column(1)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("id");
                (0..b.num_rows())
                    .map(|i| (id.value(i), (!flag.is_null(i)).then(|| flag.value(i))))
                    .collect::<Vec<_>>()
            })
            .collect();
        pairs.sort_unstable();
        let want: Vec<(i64, Option<bool>)> = (0..150)
            .map(|i| (i, (i % 2 == 0).then_some(i % 4 == 0)))
            .collect();
        assert_eq!(pairs, want);
    }

    /// A filtered scan's rows, read by lake's own filter, are exactly those iceberg's reader
    /// keeps for the same tasks: nulls, ranges, sets and both connectives included. A filter
    /// lake does not evaluate goes to iceberg's reader, with the same answer.
    #[tokio::test]
    async fn a_filtered_scan_keeps_the_rows_iceberg_keeps() {
        use iceberg::expr::{Predicate, Reference};
        use iceberg::spec::Datum;

        let (_c, t, _) = three_appends("t.filtered", 70).await;
        let id = t
            .resolve(&At::reference("audit"))
            .expect("resolve")
            .expect("a snapshot");
        let at = |us: i64| Datum::timestamptz_micros(1_700_000_000_000_000 + us);
        let r = Reference::new;
        let cases: Vec<(&str, Predicate, bool)> = vec![
            (
                "two timestamp ranges",
                r("at")
                    .greater_than_or_equal_to(at(10))
                    .and(r("at").less_than_or_equal_to(at(40)))
                    .or(r("at")
                        .greater_than(at(150))
                        .and(r("at").less_than(at(190)))),
                true,
            ),
            (
                "dates in a set",
                r("day").is_in([Datum::date(20_000), Datum::date(20_002)]),
                true,
            ),
            (
                "a string, equal and not",
                r("note").equal_to(Datum::string("n5")).or(r("note")
                    .not_equal_to(Datum::string("n8"))
                    .and(r("id").less_than(Datum::long(20)))),
                true,
            ),
            (
                "ints with nulls, not in",
                r("small")
                    .less_than(Datum::int(120))
                    .and(r("small").is_not_in([Datum::int(1), Datum::int(2), Datum::int(8)])),
                true,
            ),
            (
                "a flag and a bound",
                r("flag")
                    .equal_to(Datum::bool(true))
                    .and(r("id").greater_than_or_equal_to(Datum::long(30))),
                true,
            ),
            (
                "null tests",
                r("note").is_null().or(r("at").is_not_null()),
                true,
            ),
            (
                "a prefix goes to iceberg's reader",
                r("note").starts_with(Datum::string("n1")),
                false,
            ),
        ];
        let columns = ["id", "note", "day", "at", "small", "flag"];
        for (what, filter, ours) in cases {
            let before = PLAIN_FILES.get();
            let (read, files) = t
                .scan_where(&At::Snapshot(id), &columns, filter.clone())
                .await
                .expect("filtered scan");
            let by_lake = PLAIN_FILES.get() - before;
            assert_eq!(by_lake, if ours { files } else { 0 }, "{what}: reader");
            let names = columns.iter().map(|c| c.to_string()).collect();
            let tasks = t
                .plan_files_at(id, Some(names), Some(filter))
                .await
                .expect("plan");
            let reference = by_iceberg(&t, tasks).await;
            let want = sorted(&reference);
            assert!(
                !want.is_empty() && want.len() < 210,
                "{what}: a real filter"
            );
            assert_eq!(sorted(&read), want, "{what}: rows");
        }
    }

    /// Tasks for parts of a file, as a lookup plans them, read each row group once through
    /// lake's reader, with the rows iceberg's reader gives for the same parts, filter included.
    #[tokio::test]
    async fn parts_of_a_file_read_their_row_groups_once() {
        use iceberg::expr::Reference;
        use iceberg::spec::Datum;

        let c = Catalog::in_memory();
        let written = rows(0, 400);
        let props = std::collections::BTreeMap::from([(
            crate::PROP_ROW_GROUP_LIMIT.to_string(),
            "50".to_string(),
        )]);
        let change = c
            .stage_create_table_with_properties("t.parts", &written.schema(), &[], &props)
            .await
            .expect("create");
        c.commit(vec![change], "create-table", "create", Default::default())
            .await
            .expect("commit");
        c.append(
            "t.parts",
            "audit",
            std::slice::from_ref(&written),
            Default::default(),
        )
        .await
        .expect("append");
        let t = c.table("t.parts").await.expect("load");
        let id = t
            .resolve(&At::reference("audit"))
            .expect("resolve")
            .expect("a snapshot");
        let filter = Reference::new("small").greater_than(Datum::int(100));
        for filter in [None, Some(filter)] {
            let tasks = t.plan_files_at(id, None, filter).await.expect("plan");
            assert_eq!(tasks.len(), 1);
            let (_, footer) = c
                .open_data_file(&tasks[0].data_file_path, tasks[0].file_size_in_bytes)
                .await
                .expect("footer");
            let sizes: Vec<u64> = footer
                .metadata()
                .row_groups()
                .iter()
                .map(|rg| rg.compressed_size() as u64)
                .collect();
            assert_eq!(sizes.len(), 8, "400 rows, 50 a row group");
            // Three parts tiling the file: row groups 0-1, 2-6 and 7, cut at their edges, then
            // the same file cut through the middle of row groups.
            let edges = |at: &[u64]| -> Vec<FileScanTask> {
                at.windows(2)
                    .map(|w| {
                        let mut p = tasks[0].clone();
                        p.start = w[0];
                        p.length = w[1] - w[0];
                        p
                    })
                    .collect()
            };
            let offset = |n: usize| 4 + sizes[..n].iter().sum::<u64>();
            let end = tasks[0].file_size_in_bytes;
            for parts in [
                edges(&[0, offset(2), offset(7), end]),
                edges(&[0, offset(3) + sizes[3] / 3, offset(5) + 1, end]),
            ] {
                let before = PLAIN_FILES.get();
                let ours: Vec<RecordBatch> = t
                    .read_file_tasks(parts.clone(), "reading parts".into())
                    .expect("read")
                    .try_collect()
                    .await
                    .expect("rows");
                assert_eq!(PLAIN_FILES.get() - before, parts.len(), "lake's reader");
                let theirs = by_iceberg(&t, parts).await;
                let ours = sorted(&ours);
                assert_eq!(ours, sorted(&theirs));
                let ids: std::collections::BTreeSet<&str> =
                    ours.iter().filter_map(|r| r.split('|').next()).collect();
                assert_eq!(ids.len(), ours.len(), "no row read twice");
            }
        }
    }
}
