//! Branch-aware writes: append, and copy-on-write replace, to any branch.
//!
//! iceberg-rust 0.10 only fast-appends to `main`. This follows the same recipe as its
//! `transaction/snapshot.rs` — data files, a manifest for them, a manifest list that carries the
//! parent's manifests, a snapshot with a correct summary — but the parent is the head of the
//! branch being written and the new snapshot is set on that branch. Replaced files are `deleted`
//! entries in a rewritten manifest; the files they share a manifest with stay as `existing`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{
    DataFile, DataFileFormat, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestStatus, ManifestWriterBuilder, Operation, Snapshot, SnapshotSummaryCollector, Struct,
    Summary, TableMetadata,
};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use uuid::Uuid;

use crate::catalog::{ChangeKind, Failpoint, TableChange};
use crate::error::{LakeError, Result};
use crate::table::Table;

/// A row test for [`Replace::Rows`]: true for the rows to remove.
pub type RowPredicate = Arc<dyn Fn(&RecordBatch) -> Result<BooleanArray> + Send + Sync>;

/// Which existing rows a replace removes before it adds the new ones.
#[derive(Clone)]
pub enum Replace {
    /// Every row on the branch (a full rebuild).
    All,
    /// Every data file in one of these partitions (gold's rebuilt days).
    Partitions(Vec<Struct>),
    /// Every row the predicate is true for; files holding some are rewritten without them.
    Rows(RowPredicate),
}

impl std::fmt::Debug for Replace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replace::All => write!(f, "All"),
            Replace::Partitions(p) => write!(f, "Partitions({} values)", p.len()),
            Replace::Rows(_) => write!(f, "Rows(<predicate>)"),
        }
    }
}

/// Manifests are merged in tiers: a manifest of `n` live entries is in tier `log16(n)`, and
/// when a tier holds this many manifests an append merges them into one of the next tier. Each
/// entry is rewritten once per tier (about four times for 26,000 appends), never once per
/// merge, and a branch carries at most `MERGE_FAN_IN - 1` manifests per tier.
const MERGE_FAN_IN: u64 = 16;

/// A manifest this large is full (Iceberg's `commit.manifest.target-size-bytes` default): it is
/// never merged again.
const MANIFEST_TARGET_BYTES: i64 = 8 * 1024 * 1024;

/// The merge tier of a data manifest, or `None` when it is full or of another partition spec.
fn merge_tier(mf: &ManifestFile, spec_id: i32) -> Option<u32> {
    if mf.content != ManifestContentType::Data
        || mf.partition_spec_id != spec_id
        || mf.manifest_length >= MANIFEST_TARGET_BYTES
    {
        return None;
    }
    let counted = [mf.added_files_count, mf.existing_files_count];
    let live: u64 = if counted.iter().all(Option::is_none) {
        // Counts are optional in a manifest list: estimate from the size (~300 bytes an entry).
        (mf.manifest_length.max(0) as u64) / 300
    } else {
        counted.iter().map(|c| u64::from(c.unwrap_or(0))).sum()
    };
    Some(live.max(1).ilog(MERGE_FAN_IN))
}

/// Snapshot summary keys the lake adds besides Iceberg's own.
pub const SUMMARY_BRANCH: &str = "sugarshack.branch";

fn random_snapshot_id(md: &TableMetadata) -> i64 {
    loop {
        let (a, b) = Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) & (i64::MAX as u64)) as i64;
        if id != 0 && md.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Check a batch against the table's Arrow schema and re-label it with the table's field ids.
pub(crate) fn conform(table: &str, schema: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let got = batch.schema();
    if got.fields().len() != schema.fields().len() {
        return Err(LakeError::Schema {
            table: table.to_string(),
            detail: format!(
                "expected {} columns ({}), got {} ({})",
                schema.fields().len(),
                names(schema),
                got.fields().len(),
                names(&got)
            ),
        });
    }
    for (want, have) in schema.fields().iter().zip(got.fields().iter()) {
        if want.name() != have.name() || want.data_type() != have.data_type() {
            return Err(LakeError::Schema {
                table: table.to_string(),
                detail: format!(
                    "column {:?} {} does not match the table's {:?} {}",
                    have.name(),
                    have.data_type(),
                    want.name(),
                    want.data_type()
                ),
            });
        }
    }
    RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| LakeError::Schema {
        table: table.to_string(),
        detail: e.to_string(),
    })
}

fn names(s: &SchemaRef) -> String {
    s.fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Table {
    /// Write rows as new Parquet data files under the table (split by partition). Nothing is
    /// committed: until a snapshot names them, no reader sees these files.
    pub async fn write_data_files(&self, batches: &[RecordBatch]) -> Result<Vec<DataFile>> {
        self.check_writable()?;
        let name = self.name().to_string();
        let md = self.metadata();
        let schema = md.current_schema().clone();
        let arrow = self.arrow_schema()?;
        let spec = md.default_partition_spec().clone();
        let mut conformed = Vec::with_capacity(batches.len());
        for b in batches {
            if b.num_rows() > 0 {
                conformed.push(conform(&name, &arrow, b)?);
            }
        }
        if conformed.is_empty() {
            return Ok(Vec::new());
        }
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let ice =
            |e: iceberg::Error| LakeError::iceberg(format!("writing data files of {name}"), e);
        let location = DefaultLocationGenerator::new(md).map_err(ice)?;
        let file_names = DefaultFileNameGenerator::new(
            format!("{}", Uuid::now_v7()),
            None,
            DataFileFormat::Parquet,
        );
        let rolling = RollingFileWriterBuilder::new_with_default_file_size(
            ParquetWriterBuilder::new(props, schema.clone()),
            self.catalog().file_io().clone(),
            location,
            file_names,
        );
        let builder = DataFileWriterBuilder::new(rolling);
        let mut out = Vec::new();
        if spec.is_unpartitioned() {
            let mut w = builder.build(None).await.map_err(ice)?;
            for b in conformed {
                w.write(b).await.map_err(ice)?;
            }
            out.extend(w.close().await.map_err(ice)?);
        } else {
            let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec)
                .map_err(ice)?;
            let mut groups: BTreeMap<String, (iceberg::spec::PartitionKey, Vec<RecordBatch>)> =
                BTreeMap::new();
            for b in &conformed {
                for (key, part) in splitter.split(b).map_err(ice)? {
                    groups
                        .entry(key.to_path())
                        .or_insert_with(|| (key.clone(), Vec::new()))
                        .1
                        .push(part);
                }
            }
            for (_, (key, parts)) in groups {
                let mut w = builder.build(Some(key)).await.map_err(ice)?;
                for p in parts {
                    w.write(p).await.map_err(ice)?;
                }
                out.extend(w.close().await.map_err(ice)?);
            }
        }
        Ok(out)
    }

    /// Stage an append of `batches` to `branch` (created at `main`'s head if it does not exist).
    pub async fn stage_append(
        &self,
        branch: &str,
        batches: &[RecordBatch],
        properties: BTreeMap<String, String>,
    ) -> Result<TableChange> {
        let files = self.write_data_files(batches).await?;
        self.stage_files(branch, files, None, properties).await
    }

    /// Stage a copy-on-write replace on `branch`: remove what `replace` names, add `batches`.
    pub async fn stage_replace(
        &self,
        branch: &str,
        replace: &Replace,
        batches: &[RecordBatch],
        properties: BTreeMap<String, String>,
    ) -> Result<TableChange> {
        let files = self.write_data_files(batches).await?;
        self.stage_files(branch, files, Some(replace), properties)
            .await
    }

    /// Stage a snapshot on `branch` that adds already-written `added` files and, with a
    /// `replace`, removes what it names. A writer that lost a commit race reloads the table and
    /// calls this again with the same files: they are written once.
    pub async fn stage_files(
        &self,
        branch: &str,
        mut added: Vec<DataFile>,
        replace: Option<&Replace>,
        properties: BTreeMap<String, String>,
    ) -> Result<TableChange> {
        let name = self.name().to_string();
        let ice = |e: iceberg::Error| {
            LakeError::iceberg(format!("committing to {name} branch {branch}"), e)
        };
        self.check_writable()?;
        if self.head(branch).is_some() && !self.is_branch(branch) {
            return Err(LakeError::WriteToTag {
                table: name.clone(),
                name: branch.to_string(),
            });
        }
        let md = self.metadata();
        let file_io = self.catalog().file_io().clone();
        let parent = self
            .head(branch)
            .or_else(|| self.head(iceberg::spec::MAIN_BRANCH));
        let snapshot_id = random_snapshot_id(md);
        let sequence_number = md.next_sequence_number();
        let schema = md.current_schema().clone();
        let spec = md.default_partition_spec().clone();
        let commit_uuid = Uuid::now_v7();
        let mut counter = 0u32;
        // A new data manifest of this snapshot, under a name unique to this commit attempt.
        let mut new_manifest = || -> Result<iceberg::spec::ManifestWriter> {
            counter += 1;
            let path = crate::storage::join(
                md.location(),
                &format!("metadata/{commit_uuid}-m{counter}.avro"),
            );
            let out = file_io.new_output(path).map_err(ice)?;
            Ok(ManifestWriterBuilder::new(
                out,
                Some(snapshot_id),
                schema.clone(),
                spec.as_ref().clone(),
            )
            .build_v2_data())
        };

        // 1. The parent's manifests, rewriting those that hold replaced files.
        let mut manifests: Vec<ManifestFile> = Vec::new();
        let mut deleted: Vec<DataFile> = Vec::new();
        if let Some(parent_id) = parent {
            let parent_snap =
                md.snapshot_by_id(parent_id)
                    .ok_or_else(|| LakeError::NoSuchSnapshot {
                        table: name.clone(),
                        snapshot_id: parent_id,
                    })?;
            let list = self
                .iceberg()
                .manifest_list_reader(parent_snap)
                .load()
                .await
                .map_err(ice)?;
            for mf in list.entries() {
                let Some(replace) = replace.filter(|_| mf.content == ManifestContentType::Data)
                else {
                    manifests.push(mf.clone());
                    continue;
                };
                let manifest = mf.load_manifest(&file_io).await.map_err(ice)?;
                let mut keep = Vec::new();
                let mut drop = Vec::new();
                for entry in manifest.entries() {
                    if !entry.is_alive() {
                        continue;
                    }
                    let remove = match replace {
                        Replace::All => true,
                        Replace::Partitions(values) => {
                            values.iter().any(|v| v == entry.data_file().partition())
                        }
                        Replace::Rows(pred) => {
                            let batches =
                                self.read_data_files(&[entry.data_file().clone()]).await?;
                            let mut hit = false;
                            let mut survivors = Vec::new();
                            for b in batches {
                                let mask = pred(&b)?;
                                if mask.true_count() > 0 {
                                    hit = true;
                                }
                                // Keep the rows the predicate does not remove: false or null.
                                let removed = match mask.nulls() {
                                    Some(n) => mask.values() & n.inner(),
                                    None => mask.values().clone(),
                                };
                                let keep_mask = BooleanArray::new(!&removed, None);
                                let kept = arrow::compute::filter_record_batch(&b, &keep_mask)
                                    .map_err(|e| {
                                        LakeError::arrow("evaluating a replace predicate", e)
                                    })?;
                                survivors.push(kept);
                            }
                            if hit {
                                added.extend(self.write_data_files(&survivors).await?);
                            }
                            hit
                        }
                    };
                    if remove {
                        drop.push(entry.clone());
                    } else {
                        keep.push(entry.clone());
                    }
                }
                if drop.is_empty() {
                    manifests.push(mf.clone());
                    continue;
                }
                let mut w = new_manifest()?;
                for e in &keep {
                    w.add_existing_file(
                        e.data_file().clone(),
                        e.snapshot_id().unwrap_or(mf.added_snapshot_id),
                        e.sequence_number().unwrap_or(mf.sequence_number),
                        e.file_sequence_number.or(Some(mf.sequence_number)),
                    )
                    .map_err(ice)?;
                }
                for e in &drop {
                    w.add_delete_file(
                        e.data_file().clone(),
                        e.sequence_number().unwrap_or(mf.sequence_number),
                        e.file_sequence_number.or(Some(mf.sequence_number)),
                    )
                    .map_err(ice)?;
                    deleted.push(e.data_file().clone());
                }
                manifests.push(w.write_manifest_file().await.map_err(ice)?);
            }
        }

        // 2. Keep the manifest list short: merge a tier of carried data manifests once it is full.
        loop {
            let mut per_tier: BTreeMap<u32, usize> = BTreeMap::new();
            for mf in &manifests {
                if let Some(t) = merge_tier(mf, spec.spec_id()) {
                    *per_tier.entry(t).or_default() += 1;
                }
            }
            let Some(tier) = per_tier
                .iter()
                .find(|(_, n)| **n as u64 >= MERGE_FAN_IN)
                .map(|(t, _)| *t)
            else {
                break;
            };
            let (merge, keep): (Vec<_>, Vec<_>) = manifests
                .into_iter()
                .partition(|mf| merge_tier(mf, spec.spec_id()) == Some(tier));
            let mut w = new_manifest()?;
            let mut merged_deleted = Vec::new();
            for mf in &merge {
                let manifest = mf.load_manifest(&file_io).await.map_err(ice)?;
                for e in manifest.entries() {
                    let seq = e.sequence_number().unwrap_or(mf.sequence_number);
                    let fseq = e.file_sequence_number.or(Some(mf.sequence_number));
                    match e.status() {
                        // This snapshot's own deletes stay recorded; older ones are history.
                        ManifestStatus::Deleted if mf.added_snapshot_id == snapshot_id => {
                            merged_deleted.push((e.data_file().clone(), seq, fseq));
                        }
                        ManifestStatus::Deleted => {}
                        _ => w
                            .add_existing_file(
                                e.data_file().clone(),
                                e.snapshot_id().unwrap_or(mf.added_snapshot_id),
                                seq,
                                fseq,
                            )
                            .map_err(ice)?,
                    }
                }
            }
            for (df, seq, fseq) in merged_deleted {
                w.add_delete_file(df, seq, fseq).map_err(ice)?;
            }
            manifests = keep;
            manifests.push(w.write_manifest_file().await.map_err(ice)?);
        }

        // 3. The new files' manifest.
        if !added.is_empty() {
            let mut w = new_manifest()?;
            for f in &added {
                w.add_file(f.clone(), -1).map_err(ice)?;
            }
            manifests.push(w.write_manifest_file().await.map_err(ice)?);
        }

        // 4. The summary: Iceberg's added/deleted metrics, totals carried from the branch's parent.
        let mut collector = SnapshotSummaryCollector::default();
        for f in &added {
            collector.add_file(f, schema.clone(), spec.clone());
        }
        for f in &deleted {
            collector.remove_file(f, schema.clone(), spec.clone());
        }
        let operation = match (added.is_empty(), deleted.is_empty()) {
            (_, true) => Operation::Append,
            (true, false) => Operation::Delete,
            (false, false) => Operation::Overwrite,
        };
        let mut props: HashMap<String, String> = properties.into_iter().collect();
        props.insert(SUMMARY_BRANCH.to_string(), branch.to_string());
        props.extend(collector.build());
        let prev: HashMap<String, String> = parent
            .and_then(|p| md.snapshot_by_id(p))
            .map(|s| s.summary().additional_properties.clone())
            .unwrap_or_default();
        let num = |m: &HashMap<String, String>, k: &str| {
            m.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0)
        };
        let added_records: i64 = added.iter().map(|f| f.record_count() as i64).sum();
        let deleted_records: i64 = deleted.iter().map(|f| f.record_count() as i64).sum();
        let added_size: i64 = added.iter().map(|f| f.file_size_in_bytes() as i64).sum();
        let deleted_size: i64 = deleted.iter().map(|f| f.file_size_in_bytes() as i64).sum();
        let totals = [
            (
                "total-records",
                num(&prev, "total-records") + added_records - deleted_records,
            ),
            (
                "total-data-files",
                num(&prev, "total-data-files") + added.len() as i64 - deleted.len() as i64,
            ),
            (
                "total-files-size",
                num(&prev, "total-files-size") + added_size - deleted_size,
            ),
            ("total-delete-files", num(&prev, "total-delete-files")),
            (
                "total-position-deletes",
                num(&prev, "total-position-deletes"),
            ),
            (
                "total-equality-deletes",
                num(&prev, "total-equality-deletes"),
            ),
        ];
        for (k, v) in totals {
            props.insert(k.to_string(), v.to_string());
        }

        self.catalog().check_failpoint(Failpoint::AfterDataFiles)?;

        // 5. The manifest list and the snapshot, set on the branch.
        let list_path = crate::storage::join(
            md.location(),
            &format!("metadata/snap-{snapshot_id}-0-{commit_uuid}.avro"),
        );
        let writer = file_io
            .new_output(&list_path)
            .map_err(ice)?
            .writer()
            .await
            .map_err(ice)?;
        let mut list = ManifestListWriter::v2(writer, snapshot_id, parent, sequence_number);
        list.add_manifests(manifests.into_iter()).map_err(ice)?;
        list.close().await.map_err(ice)?;

        let timestamp_ms = chrono::Utc::now()
            .timestamp_millis()
            .max(md.last_updated_ms() + 1);
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(sequence_number)
            .with_timestamp_ms(timestamp_ms)
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation,
                additional_properties: props,
            })
            .with_schema_id(md.current_schema_id())
            .build();
        let built = md
            .clone()
            .into_builder(Some(self.metadata_location().to_string()))
            .set_branch_snapshot(snapshot, branch)
            .map_err(ice)?
            .build()
            .map_err(ice)?;
        Ok(TableChange {
            table: self.name().clone(),
            base: Some(self.metadata_location().to_string()),
            kind: ChangeKind::Update(Box::new(built.metadata)),
            snapshot_id: Some(snapshot_id),
            added_files: added.iter().map(|f| f.file_path().to_string()).collect(),
            refs: Some(Arc::new({
                let mut refs = self.ref_entries().clone();
                refs.insert(branch.to_string(), (true, snapshot_id));
                refs
            })),
        })
    }

    /// Read whole data files of this table into Arrow (schema of the table).
    pub async fn read_data_files(&self, files: &[DataFile]) -> Result<Vec<RecordBatch>> {
        let md = self.metadata();
        let schema = md.current_schema().clone();
        let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
        let spec = md.default_partition_spec().clone();
        let tasks: Vec<iceberg::Result<iceberg::scan::FileScanTask>> = files
            .iter()
            .map(|f| {
                Ok(iceberg::scan::FileScanTask::builder()
                    .with_file_size_in_bytes(f.file_size_in_bytes())
                    .with_start(0)
                    .with_length(f.file_size_in_bytes())
                    .with_record_count(Some(f.record_count()))
                    .with_data_file_path(f.file_path().to_string())
                    .with_data_file_format(DataFileFormat::Parquet)
                    .with_schema(schema.clone())
                    .with_project_field_ids(field_ids.clone())
                    .with_partition(Some(f.partition().clone()))
                    .with_partition_spec(Some(spec.clone()))
                    .with_case_sensitive(true)
                    .build())
            })
            .collect();
        let name = self.name().to_string();
        let stream = self
            .iceberg()
            .reader_builder()
            .build()
            .read(Box::pin(futures::stream::iter(tasks)))
            .map_err(|e| LakeError::iceberg(format!("reading data files of {name}"), e))?
            .stream();
        let batches: Vec<RecordBatch> = stream
            .try_collect()
            .await
            .map_err(|e| LakeError::iceberg(format!("reading data files of {name}"), e))?;
        let arrow = self.arrow_schema()?;
        batches
            .into_iter()
            .map(|b| crate::read::normalize(&arrow, b))
            .collect()
    }
}
