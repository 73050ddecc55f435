//! Row-level MERGE by key, copy-on-write, on any branch.
//!
//! Incoming rows (in the table's schema) are matched to existing rows by the key columns. Only
//! the data files that may hold one of the incoming keys are opened: a file is skipped unread
//! when its partition cannot hold any of them (every source column of its partition spec is a
//! key column, so a matching row would sit in the incoming row's partition) or when, for some
//! key column, no incoming key lies within the file's lower/upper bounds. A file that is read
//! and holds a key the merge updates or deletes is rewritten (its other rows and the updated
//! rows go to new files) and dropped by path ([`Replace::Files`]); every other file stays as it
//! is. One snapshot is committed: `overwrite` (files rewritten and rows added), `append`
//! (only inserts) or `delete` (only deletes); nothing when nothing changes.
//!
//! Semantics, as SQL's `MERGE`: each existing row whose key equals an incoming row's key is
//! matched, and the `when matched` action (update the whole row, delete it, or nothing) is
//! applied when the optional condition holds for (incoming row, existing row); an incoming row
//! that matched no existing row is inserted unless `when not matched` says otherwise. Two
//! existing rows with one key are each matched (an update leaves two copies of the new row).
//! Incoming rows may not repeat a key ([`LakeError::DuplicateMergeKey`]) nor hold a null in a
//! key column ([`LakeError::Schema`]); existing rows with a null key never match.
//!
//! Concurrency: the commit goes through the retry loop of
//! [`Catalog::commit_files`](crate::Catalog::commit_files). A retry after a lost race fails with
//! [`LakeError::Conflict`] when a data file added since the snapshot the merge read holds one
//! of the incoming keys (its row would be lost or duplicated; added files whose key bounds hold
//! none are not opened), or when one of the files the merge rewrote is no longer live.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::make_comparator;
use arrow::compute::SortOptions;
use arrow::row::{RowConverter, SortField};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt64Array};
use iceberg::arrow::{RecordBatchPartitionSplitter, arrow_primitive_to_literal};
use iceberg::spec::{
    DataFile, Literal, MAIN_BRANCH, ManifestContentType, PrimitiveLiteral, PrimitiveType, Struct,
};

use crate::SnapshotCommit;
use crate::catalog::TableChange;
use crate::error::{LakeError, Result};
use crate::table::Table;
use crate::write::{FilePredicate, Replace, RowPredicate, conform, may_hold};

/// A test between an incoming row and the existing row it matched: `(incoming batch, incoming
/// row, existing batch, existing row) -> bool`. Both batches have the table's Arrow schema.
pub type MatchTest = Arc<dyn Fn(&RecordBatch, usize, &RecordBatch, usize) -> bool + Send + Sync>;

/// When a matched row's action applies.
#[derive(Clone)]
pub enum MatchCondition {
    /// The incoming row's value in this column is greater than the existing row's (for
    /// change logs: a higher LSN or version wins). Null is lower than any value: an incoming
    /// null is never greater, and any incoming value is greater than an existing null.
    IncomingGreater(String),
    /// Any test over the two rows.
    Custom(MatchTest),
}

impl MatchCondition {
    /// [`MatchCondition::IncomingGreater`]: the incoming `column` is greater than the existing.
    pub fn incoming_greater(column: &str) -> Self {
        MatchCondition::IncomingGreater(column.to_string())
    }

    /// [`MatchCondition::Custom`] from a closure.
    pub fn custom(
        test: impl Fn(&RecordBatch, usize, &RecordBatch, usize) -> bool + Send + Sync + 'static,
    ) -> Self {
        MatchCondition::Custom(Arc::new(test))
    }
}

impl std::fmt::Debug for MatchCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MatchCondition::IncomingGreater(c) => write!(f, "IncomingGreater({c:?})"),
            MatchCondition::Custom(_) => write!(f, "Custom(<test>)"),
        }
    }
}

/// What happens to an existing row an incoming row matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchedAction {
    /// Replace the whole row by the incoming row.
    Update,
    /// Remove the row.
    Delete,
    /// Leave it (with [`Merge::when_not_matched_insert`]: insert only new keys).
    Nothing,
}

/// How to merge rows into a table: the key columns and what to do with matched and unmatched
/// rows. The default (`Merge::new(keys)`) is an upsert: update matched rows, insert the rest.
///
/// ```
/// use lake::{MatchCondition, Merge};
/// // silver.orders: a change replaces the order only when its LSN is higher.
/// let orders = Merge::new(["order_id"])
///     .when_matched_update_if(MatchCondition::incoming_greater("_lsn"));
/// // silver.payments: insert event ids never seen, never update.
/// let payments = Merge::new(["event_id"]).when_matched_do_nothing();
/// // Delete by key.
/// let forget = Merge::new(["id"]).when_matched_delete().when_not_matched_do_nothing();
/// # let _ = (orders, payments, forget);
/// ```
#[derive(Clone, Debug)]
pub struct Merge {
    keys: Vec<String>,
    matched: MatchedAction,
    condition: Option<MatchCondition>,
    insert: bool,
}

impl Merge {
    /// Merge by these key columns (all must be in the table's schema, of a primitive type).
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Merge {
            keys: keys.into_iter().map(Into::into).collect(),
            matched: MatchedAction::Update,
            condition: None,
            insert: true,
        }
    }

    /// When matched: replace the existing row by the incoming row (the default).
    pub fn when_matched_update(mut self) -> Self {
        self.matched = MatchedAction::Update;
        self.condition = None;
        self
    }

    /// When matched and `condition` holds: replace the row; otherwise leave it.
    pub fn when_matched_update_if(mut self, condition: MatchCondition) -> Self {
        self.matched = MatchedAction::Update;
        self.condition = Some(condition);
        self
    }

    /// When matched: delete the existing row.
    pub fn when_matched_delete(mut self) -> Self {
        self.matched = MatchedAction::Delete;
        self.condition = None;
        self
    }

    /// When matched and `condition` holds: delete the existing row; otherwise leave it.
    pub fn when_matched_delete_if(mut self, condition: MatchCondition) -> Self {
        self.matched = MatchedAction::Delete;
        self.condition = Some(condition);
        self
    }

    /// When matched: leave the existing row as it is.
    pub fn when_matched_do_nothing(mut self) -> Self {
        self.matched = MatchedAction::Nothing;
        self.condition = None;
        self
    }

    /// When not matched: insert the incoming row (the default).
    pub fn when_not_matched_insert(mut self) -> Self {
        self.insert = true;
        self
    }

    /// When not matched: drop the incoming row.
    pub fn when_not_matched_do_nothing(mut self) -> Self {
        self.insert = false;
        self
    }

    /// The key columns.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }
}

/// What a merge did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// The commit, or `None` when nothing changed (no row inserted, updated or deleted).
    pub snapshot: Option<SnapshotCommit>,
    /// Incoming rows that matched no existing row and were inserted.
    pub inserted: usize,
    /// Existing rows replaced by their incoming row.
    pub updated: usize,
    /// Existing rows deleted.
    pub deleted: usize,
    /// Existing rows that matched but were left as they are (condition false, or do nothing).
    pub unchanged_matches: usize,
    /// Incoming rows that matched nothing and were not inserted.
    pub not_inserted: usize,
    /// Data files rewritten (dropped, their other rows written to new files).
    pub files_rewritten: usize,
    /// Data files skipped unread because their partition cannot hold an incoming key (with
    /// the live files of pruned manifests, as the manifest list counts them).
    pub files_pruned_by_partition: usize,
    /// Data manifests not opened: their partition summaries hold no incoming key's partition.
    pub manifests_pruned: usize,
    /// Data files skipped unread because their key bounds hold no incoming key.
    pub files_pruned_by_bounds: usize,
    /// Data files opened and read.
    pub files_read: usize,
}

/// A merge staged on one table, to be committed alone or with other tables' changes in one
/// [`Catalog::commit`](crate::Catalog::commit).
pub struct StagedMerge {
    /// The change, or `None` when the merge changes nothing.
    pub change: Option<TableChange>,
    /// What it does (`snapshot` is `None` until it is committed).
    pub report: MergeReport,
}

/// What a merge writes, before it is staged.
pub(crate) struct MergePlan {
    pub(crate) files: Vec<DataFile>,
    pub(crate) replace: Replace,
    pub(crate) report: MergeReport,
    pub(crate) changes: bool,
}

/// The incoming partition values of one partition spec all of whose source columns are keys.
struct SpecGroups {
    values: Vec<Struct>,
    /// The index in `values` of each incoming row's partition.
    group_of: Vec<usize>,
}

/// The incoming rows, indexed by key.
struct Incoming {
    batch: RecordBatch,
    key_idx: Vec<usize>,
    key_fids: Vec<i32>,
    converter: Arc<RowConverter>,
    by_key: Arc<HashMap<Box<[u8]>, usize>>,
    /// Per key column, each row's value as an Iceberg literal (`None`: not comparable to
    /// bounds, so that column does not prune).
    lits: Vec<Option<Vec<PrimitiveLiteral>>>,
    /// The first key column with literals, and the rows ordered by it.
    sorted: Option<(usize, Vec<usize>)>,
}

fn key_columns(batch: &RecordBatch, key_idx: &[usize]) -> Vec<ArrayRef> {
    key_idx.iter().map(|&i| batch.column(i).clone()).collect()
}

fn same_kind(a: &PrimitiveLiteral, b: &PrimitiveLiteral) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// True when two partition tuples have the same arity and, field by field, literals of the
/// same kind (or a null): then they are equal exactly when they hold the same values.
fn same_shape(a: &Struct, b: &Struct) -> bool {
    a.fields().len() == b.fields().len()
        && a.iter().zip(b.iter()).all(|(x, y)| match (x, y) {
            (Some(Literal::Primitive(x)), Some(Literal::Primitive(y))) => same_kind(x, y),
            (None, _) | (_, None) => true,
            _ => false,
        })
}

/// `lit` is within `[lower, upper]` (a missing or other-typed bound does not exclude).
fn within(
    lit: &PrimitiveLiteral,
    lower: Option<&PrimitiveLiteral>,
    upper: Option<&PrimitiveLiteral>,
) -> bool {
    let below =
        lower.is_some_and(|l| same_kind(l, lit) && lit.partial_cmp(l) == Some(Ordering::Less));
    let above =
        upper.is_some_and(|u| same_kind(u, lit) && lit.partial_cmp(u) == Some(Ordering::Greater));
    !below && !above
}

impl Table {
    /// Stage a merge of `rows` into `branch` (see [`Merge`]); commit the change with
    /// [`Catalog::commit`](crate::Catalog::commit), alone or with other tables'.
    /// [`Catalog::merge`](crate::Catalog::merge) stages and commits in one call and retries a
    /// lost race.
    pub async fn stage_merge(
        &self,
        branch: &str,
        rows: &[RecordBatch],
        merge: &Merge,
        properties: BTreeMap<String, String>,
    ) -> Result<StagedMerge> {
        let plan = self.plan_merge(branch, rows, merge).await?;
        if !plan.changes {
            return Ok(StagedMerge {
                change: None,
                report: plan.report,
            });
        }
        let change = self
            .stage_files(branch, plan.files, Some(&plan.replace), properties)
            .await?;
        Ok(StagedMerge {
            change: Some(change),
            report: plan.report,
        })
    }

    /// Read what the merge must read and write its new data files; nothing is staged.
    pub(crate) async fn plan_merge(
        &self,
        branch: &str,
        rows: &[RecordBatch],
        merge: &Merge,
    ) -> Result<MergePlan> {
        self.check_writable()?;
        let name = self.name().to_string();
        if self.head(branch).is_some() && !self.is_branch(branch) {
            return Err(LakeError::WriteToTag {
                table: name,
                name: branch.to_string(),
            });
        }
        let incoming = Arc::new(self.index_incoming(rows, merge)?);
        let mut report = MergeReport::default();
        let n = incoming.batch.num_rows();
        let conflicts = self.conflict_predicate(&incoming);
        let inc = incoming.clone();
        let may_conflict: FilePredicate = Arc::new(move |f: &DataFile, _| inc.may_hold(f, None));
        if n == 0 {
            return Ok(MergePlan {
                files: Vec::new(),
                replace: Replace::Files {
                    paths: BTreeSet::new(),
                    conflicts,
                    may_conflict: Some(may_conflict),
                },
                report,
                changes: false,
            });
        }
        let condition = self.bind_condition(merge)?;

        // 1. The live files the merge may have to read.
        let base = self.head(branch).or_else(|| self.head(MAIN_BRANCH));
        let mut groups: HashMap<i32, Option<SpecGroups>> = HashMap::new();
        let (live, has_deletes) = self
            .live_data_files(base, &incoming, &mut groups, &mut report)
            .await?;
        let mut to_read = Vec::new();
        for (file, spec_id) in live {
            let g = groups
                .entry(spec_id)
                .or_insert_with(|| self.spec_groups(spec_id, &incoming));
            let group = match g {
                Some(g) => match g.values.iter().position(|v| v == file.partition()) {
                    Some(p) => Some((p, &g.group_of)),
                    // Only a partition tuple of the same shape as the incoming ones (another
                    // engine may have written other literal kinds) is known to differ.
                    None if g.values.iter().all(|v| same_shape(v, file.partition())) => {
                        report.files_pruned_by_partition += 1;
                        continue;
                    }
                    None => None,
                },
                None => None,
            };
            if incoming.may_hold(&file, group) {
                to_read.push((file, spec_id));
            } else {
                report.files_pruned_by_bounds += 1;
            }
        }
        if has_deletes && !to_read.is_empty() {
            return Err(LakeError::DeleteFilesUnsupported {
                table: name,
                detail: format!(
                    "branch {branch} has position or equality delete files; a merge rewrites rows it reads and would not apply them, so it is refused"
                ),
            });
        }

        // 2. Read them, match, and decide per file.
        let mut matched = vec![false; n];
        let mut updates: Vec<u64> = Vec::new();
        let mut out: Vec<RecordBatch> = Vec::new();
        let mut dropped = BTreeSet::new();
        for (file, spec_id) in to_read {
            report.files_read += 1;
            let batches = self
                .read_data_files_in_spec(spec_id, std::slice::from_ref(&file))
                .await?;
            let mut kept_parts = Vec::with_capacity(batches.len());
            let mut removed_any = false;
            for b in &batches {
                let keys = incoming
                    .converter
                    .convert_columns(&key_columns(b, &incoming.key_idx))
                    .map_err(|e| {
                        LakeError::arrow(format!("reading keys of {}", file.file_path()), e)
                    })?;
                let greater = match &condition {
                    Some(Bound::Greater(col)) => Some(
                        make_comparator(
                            incoming.batch.column(*col).as_ref(),
                            b.column(*col).as_ref(),
                            SortOptions::default(),
                        )
                        .map_err(|e| LakeError::arrow("comparing a merge condition column", e))?,
                    ),
                    _ => None,
                };
                let mut keep = Vec::with_capacity(b.num_rows());
                for r in 0..b.num_rows() {
                    let nulls = incoming.key_idx.iter().any(|&c| b.column(c).is_null(r));
                    let hit = if nulls {
                        None
                    } else {
                        incoming.by_key.get(keys.row(r).as_ref()).copied()
                    };
                    let Some(i) = hit else {
                        keep.push(true);
                        continue;
                    };
                    matched[i] = true;
                    let applies = match (&condition, &greater) {
                        (None, _) => true,
                        (Some(Bound::Greater(_)), Some(cmp)) => cmp(i, r) == Ordering::Greater,
                        (Some(Bound::Greater(_)), None) => false,
                        (Some(Bound::Custom(test)), _) => test(&incoming.batch, i, b, r),
                    };
                    match (merge.matched, applies) {
                        (MatchedAction::Update, true) => {
                            report.updated += 1;
                            updates.push(i as u64);
                            keep.push(false);
                        }
                        (MatchedAction::Delete, true) => {
                            report.deleted += 1;
                            keep.push(false);
                        }
                        _ => {
                            report.unchanged_matches += 1;
                            keep.push(true);
                        }
                    }
                }
                if keep.iter().any(|k| !k) {
                    removed_any = true;
                }
                kept_parts.push(keep);
            }
            if removed_any {
                report.files_rewritten += 1;
                dropped.insert(file.file_path().to_string());
                for (b, keep) in batches.iter().zip(kept_parts) {
                    let kept = arrow::compute::filter_record_batch(b, &BooleanArray::from(keep))
                        .map_err(|e| LakeError::arrow("keeping unmatched rows", e))?;
                    if kept.num_rows() > 0 {
                        out.push(kept);
                    }
                }
            }
        }

        // 3. Updated rows and inserts.
        let take = |idx: Vec<u64>| -> Result<RecordBatch> {
            arrow::compute::take_record_batch(&incoming.batch, &UInt64Array::from(idx))
                .map_err(|e| LakeError::arrow("taking incoming rows", e))
        };
        if !updates.is_empty() {
            out.push(take(updates)?);
        }
        let unmatched: Vec<u64> = (0..n).filter(|&i| !matched[i]).map(|i| i as u64).collect();
        if merge.insert {
            report.inserted = unmatched.len();
            if !unmatched.is_empty() {
                out.push(take(unmatched)?);
            }
        } else {
            report.not_inserted = unmatched.len();
        }
        let changes = !dropped.is_empty() || report.inserted > 0;
        let files = if changes {
            self.write_data_files(&out).await?
        } else {
            Vec::new()
        };
        Ok(MergePlan {
            files,
            replace: Replace::Files {
                paths: dropped,
                conflicts,
                may_conflict: Some(may_conflict),
            },
            report,
            changes,
        })
    }

    /// Conform the incoming rows, check their keys and index them.
    fn index_incoming(&self, rows: &[RecordBatch], merge: &Merge) -> Result<Incoming> {
        let name = self.name().to_string();
        let schema_err = |detail: String| LakeError::Schema {
            table: name.clone(),
            detail,
        };
        let arrow = self.arrow_schema()?;
        let ice_schema = self.metadata().current_schema().clone();
        if merge.keys.is_empty() {
            return Err(schema_err("a merge needs at least one key column".into()));
        }
        let mut key_idx = Vec::with_capacity(merge.keys.len());
        let mut key_fids = Vec::with_capacity(merge.keys.len());
        let mut key_types = Vec::with_capacity(merge.keys.len());
        for k in &merge.keys {
            let idx = arrow
                .index_of(k)
                .map_err(|_| schema_err(format!("merge key column {k:?} is not in the table")))?;
            if key_idx.contains(&idx) {
                return Err(schema_err(format!("merge key column {k:?} is named twice")));
            }
            let field = ice_schema
                .field_by_name(k)
                .ok_or_else(|| schema_err(format!("merge key column {k:?} is not in the table")))?;
            let Some(prim) = field.field_type.as_primitive_type() else {
                return Err(schema_err(format!(
                    "merge key column {k:?} is {}, not a primitive type",
                    field.field_type
                )));
            };
            key_idx.push(idx);
            key_fids.push(field.id);
            key_types.push((field.field_type.clone(), prim.clone()));
        }
        let mut conformed = Vec::with_capacity(rows.len());
        for b in rows {
            if b.num_rows() > 0 {
                conformed.push(conform(&name, &arrow, b)?);
            }
        }
        let batch = arrow::compute::concat_batches(&arrow, &conformed)
            .map_err(|e| LakeError::arrow("gathering merge rows", e))?;
        for (&c, k) in key_idx.iter().zip(&merge.keys) {
            let col = batch.column(c);
            if col.null_count() > 0 {
                let row = (0..col.len()).find(|&r| col.is_null(r)).unwrap_or_default();
                return Err(schema_err(format!(
                    "merge key column {k:?} is null in incoming row {row}; a key must have a value"
                )));
            }
        }
        let converter = RowConverter::new(
            key_idx
                .iter()
                .map(|&i| SortField::new(arrow.field(i).data_type().clone()))
                .collect(),
        )
        .map_err(|e| LakeError::arrow("merge keys", e))?;
        let keys = converter
            .convert_columns(&key_columns(&batch, &key_idx))
            .map_err(|e| LakeError::arrow("merge keys", e))?;
        let mut by_key: HashMap<Box<[u8]>, usize> = HashMap::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            if by_key.insert(keys.row(i).as_ref().into(), i).is_some() {
                let key = key_idx
                    .iter()
                    .zip(&merge.keys)
                    .map(|(&c, k)| {
                        let v = arrow::util::display::array_value_to_string(batch.column(c), i)
                            .unwrap_or_else(|_| "?".into());
                        format!("{k}={v}")
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(LakeError::DuplicateMergeKey { table: name, key });
            }
        }
        // Literals for bounds: floating point keys (NaN has no order), UUIDs (engines have
        // ordered them signed and unsigned) and any type the conversion does not handle do not
        // prune.
        let lits: Vec<Option<Vec<PrimitiveLiteral>>> = key_idx
            .iter()
            .zip(&key_types)
            .map(|(&c, (ty, prim))| {
                if matches!(
                    prim,
                    PrimitiveType::Float | PrimitiveType::Double | PrimitiveType::Uuid
                ) {
                    return None;
                }
                let values = arrow_primitive_to_literal(batch.column(c), ty).ok()?;
                values
                    .into_iter()
                    .map(|v| match v {
                        Some(Literal::Primitive(p)) => Some(p),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let sorted = lits.iter().enumerate().find_map(|(c, l)| {
            let l = l.as_ref()?;
            let mut order: Vec<usize> = (0..l.len()).collect();
            order.sort_by(|&a, &b| l[a].partial_cmp(&l[b]).unwrap_or(Ordering::Equal));
            Some((c, order))
        });
        Ok(Incoming {
            batch,
            key_idx,
            key_fids,
            converter: Arc::new(converter),
            by_key: Arc::new(by_key),
            lits,
            sorted,
        })
    }

    /// Rows holding one of the incoming keys: what a concurrent writer must not have added.
    fn conflict_predicate(&self, incoming: &Incoming) -> RowPredicate {
        let converter = incoming.converter.clone();
        let by_key = incoming.by_key.clone();
        let key_idx = incoming.key_idx.clone();
        let table = self.name().to_string();
        Arc::new(move |b: &RecordBatch| {
            if key_idx.iter().any(|&c| c >= b.num_columns()) {
                return Err(LakeError::Schema {
                    table: table.clone(),
                    detail: "a data file read for a merge's conflict check lacks a key column"
                        .into(),
                });
            }
            let keys = converter
                .convert_columns(&key_columns(b, &key_idx))
                .map_err(|e| LakeError::arrow("checking merge keys", e))?;
            Ok((0..b.num_rows())
                .map(|r| Some(by_key.contains_key(keys.row(r).as_ref())))
                .collect())
        })
    }

    fn bind_condition(&self, merge: &Merge) -> Result<Option<Bound>> {
        Ok(match &merge.condition {
            None => None,
            Some(MatchCondition::Custom(t)) => Some(Bound::Custom(t.clone())),
            Some(MatchCondition::IncomingGreater(c)) => {
                let idx = self
                    .arrow_schema()?
                    .index_of(c)
                    .map_err(|_| LakeError::Schema {
                        table: self.name().to_string(),
                        detail: format!("merge condition column {c:?} is not in the table"),
                    })?;
                Some(Bound::Greater(idx))
            }
        })
    }

    /// The live data files at `snapshot` with the partition spec of the manifest listing each,
    /// and whether live delete files are there too.
    /// Data manifests whose partition summaries cannot hold any incoming partition (of a spec
    /// all of whose source columns are keys) are not opened: their live files count as pruned
    /// by partition.
    async fn live_data_files(
        &self,
        snapshot: Option<i64>,
        incoming: &Incoming,
        groups: &mut HashMap<i32, Option<SpecGroups>>,
        report: &mut MergeReport,
    ) -> Result<(Vec<(DataFile, i32)>, bool)> {
        let Some(id) = snapshot else {
            return Ok((Vec::new(), false));
        };
        let name = self.name().to_string();
        let ice = |e: iceberg::Error| LakeError::iceberg(format!("listing files of {name}"), e);
        let list = self.manifest_list(id).await?;
        let mut out = Vec::new();
        let mut deletes = false;
        for mf in list.entries() {
            if mf.content == ManifestContentType::Deletes {
                deletes |= !crate::write::lists_no_live_file(mf);
                continue;
            }
            let spec_id = mf.partition_spec_id;
            if let Some(g) = groups
                .entry(spec_id)
                .or_insert_with(|| self.spec_groups(spec_id, incoming))
                && let Ok(spec) = self.partition_spec(spec_id)
                && let Ok(ty) = spec.partition_type(self.metadata().current_schema())
                && !may_hold(mf, &ty, &g.values)
            {
                report.manifests_pruned += 1;
                report.files_pruned_by_partition += [mf.added_files_count, mf.existing_files_count]
                    .iter()
                    .map(|c| c.unwrap_or(0) as usize)
                    .sum::<usize>();
                continue;
            }
            let m = self.catalog().manifest(mf).await.map_err(ice)?;
            out.extend(
                m.entries()
                    .iter()
                    .filter(|e| e.is_alive())
                    .map(|e| (e.data_file().clone(), mf.partition_spec_id)),
            );
        }
        Ok((out, deletes))
    }

    /// The incoming rows' partitions in spec `spec_id`, when every source column of that spec
    /// is a key column (else a matching row may be in any partition: `None`).
    fn spec_groups(&self, spec_id: i32, incoming: &Incoming) -> Option<SpecGroups> {
        let spec = self.partition_spec(spec_id).ok()?;
        if spec.is_unpartitioned()
            || !spec
                .fields()
                .iter()
                .all(|f| incoming.key_fids.contains(&f.source_id))
        {
            return None;
        }
        let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
            self.metadata().current_schema().clone(),
            spec,
        )
        .ok()?;
        let mut values = Vec::new();
        let mut group_of = vec![usize::MAX; incoming.batch.num_rows()];
        for (key, part) in splitter.split(&incoming.batch).ok()? {
            let g = values.len();
            values.push(key.data().clone());
            let keys = incoming
                .converter
                .convert_columns(&key_columns(&part, &incoming.key_idx))
                .ok()?;
            for r in 0..part.num_rows() {
                let i = *incoming.by_key.get(keys.row(r).as_ref())?;
                group_of[i] = g;
            }
        }
        if group_of.contains(&usize::MAX) {
            return None;
        }
        Some(SpecGroups { values, group_of })
    }
}

/// A condition bound to the table's columns.
enum Bound {
    Greater(usize),
    Custom(MatchTest),
}

impl Incoming {
    /// True when `file` may hold one of the incoming keys, judged from its metadata: key
    /// column bounds and value counts, and (`group`) the incoming rows in its partition.
    fn may_hold(&self, file: &DataFile, group: Option<(usize, &Vec<usize>)>) -> bool {
        let n = self.batch.num_rows();
        let bounds = |c: usize| {
            let fid = self.key_fids[c];
            (
                file.lower_bounds().get(&fid).map(|d| d.literal()),
                file.upper_bounds().get(&fid).map(|d| d.literal()),
            )
        };
        // A key column with only nulls in the file: no incoming key (never null) is there.
        for &fid in &self.key_fids {
            if let (Some(values), Some(nulls)) = (
                file.value_counts().get(&fid),
                file.null_value_counts().get(&fid),
            ) && values == nulls
            {
                return false;
            }
        }
        let candidates: Box<dyn Iterator<Item = usize> + '_> = match &self.sorted {
            Some((c, order)) => {
                let lits = self.lits[*c].as_deref().unwrap_or_default();
                let (lower, upper) = bounds(*c);
                let lower = lower.filter(|l| lits.first().is_some_and(|x| same_kind(x, l)));
                let upper = upper.filter(|u| lits.first().is_some_and(|x| same_kind(x, u)));
                let start = lower.map_or(0, |l| {
                    order.partition_point(|&i| lits[i].partial_cmp(l) == Some(Ordering::Less))
                });
                let end = upper.map_or(order.len(), |u| {
                    order.partition_point(|&i| lits[i].partial_cmp(u) != Some(Ordering::Greater))
                });
                Box::new(order[start..end.max(start)].iter().copied())
            }
            None => Box::new(0..n),
        };
        let others: Vec<(usize, Option<&PrimitiveLiteral>, Option<&PrimitiveLiteral>)> = self
            .lits
            .iter()
            .enumerate()
            .filter(|(c, l)| l.is_some() && self.sorted.as_ref().is_none_or(|(s, _)| s != c))
            .map(|(c, _)| {
                let (l, u) = bounds(c);
                (c, l, u)
            })
            .collect();
        for i in candidates {
            if let Some((g, group_of)) = group
                && group_of[i] != g
            {
                continue;
            }
            if others.iter().all(|(c, l, u)| {
                self.lits[*c]
                    .as_ref()
                    .is_none_or(|lits| within(&lits[i], *l, *u))
            }) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Datum};

    use super::*;

    /// Incoming keys on one Int64 column (field id 1).
    fn incoming(keys: &[i64]) -> Incoming {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(keys.iter().copied()))],
        )
        .unwrap();
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let rows = converter
            .convert_columns(&key_columns(&batch, &[0]))
            .unwrap();
        let by_key = (0..keys.len())
            .map(|i| (Box::<[u8]>::from(rows.row(i).as_ref()), i))
            .collect();
        let lits: Vec<PrimitiveLiteral> = keys.iter().map(|&k| PrimitiveLiteral::Long(k)).collect();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by_key(|&i| keys[i]);
        Incoming {
            batch,
            key_idx: vec![0],
            key_fids: vec![1],
            converter: Arc::new(converter),
            by_key: Arc::new(by_key),
            lits: vec![Some(lits)],
            sorted: Some((0, order)),
        }
    }

    fn file(lower: Option<Datum>, upper: Option<Datum>, values: u64, nulls: u64) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("f.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .record_count(values)
            .file_size_in_bytes(1)
            .lower_bounds(lower.into_iter().map(|d| (1, d)).collect::<HashMap<_, _>>())
            .upper_bounds(upper.into_iter().map(|d| (1, d)).collect::<HashMap<_, _>>())
            .value_counts(HashMap::from([(1, values)]))
            .null_value_counts(HashMap::from([(1, nulls)]))
            .build()
            .unwrap()
    }

    #[test]
    fn bounds_prune_only_files_that_cannot_hold_a_key() {
        let inc = incoming(&[3, 40, 17]);
        let f = |lo: i64, hi: i64| file(Some(Datum::long(lo)), Some(Datum::long(hi)), 10, 0);
        assert!(inc.may_hold(&f(0, 3), None), "lower edge");
        assert!(inc.may_hold(&f(40, 50), None), "upper edge");
        assert!(inc.may_hold(&f(10, 20), None));
        assert!(!inc.may_hold(&f(4, 16), None));
        assert!(!inc.may_hold(&f(41, 99), None));
        assert!(!inc.may_hold(&f(-9, 2), None));
        // Unsure: no bounds, one bound, bounds of another type (a promoted int column).
        assert!(inc.may_hold(&file(None, None, 10, 0), None));
        assert!(inc.may_hold(&file(Some(Datum::long(20)), None, 10, 0), None));
        assert!(!inc.may_hold(&file(Some(Datum::long(41)), None, 10, 0), None));
        assert!(!inc.may_hold(&file(None, Some(Datum::long(2)), 10, 0), None));
        assert!(inc.may_hold(
            &file(Some(Datum::int(50)), Some(Datum::int(60)), 10, 0),
            None
        ));
        // Only nulls in the key column: no key can be there.
        assert!(!inc.may_hold(&file(None, None, 10, 10), None));
        // In a partition: only the incoming rows of that partition count.
        let group_of = vec![0, 1, 0];
        assert!(!inc.may_hold(&f(30, 50), Some((0, &group_of))));
        assert!(inc.may_hold(&f(30, 50), Some((1, &group_of))));
    }

    #[test]
    fn only_partition_tuples_of_the_same_shape_are_told_apart() {
        let t = |v: Vec<Option<Literal>>| Struct::from_iter(v);
        let day = |d: i32| Some(Literal::int(d));
        assert!(same_shape(&t(vec![day(1)]), &t(vec![day(2)])));
        assert!(same_shape(&t(vec![day(1)]), &t(vec![None])));
        assert!(!same_shape(
            &t(vec![day(1)]),
            &t(vec![Some(Literal::long(1))])
        ));
        assert!(!same_shape(&t(vec![day(1)]), &t(vec![day(1), day(2)])));
    }

    #[test]
    fn literals_of_other_kinds_are_never_out_of_bounds() {
        let long = PrimitiveLiteral::Long(5);
        let int = PrimitiveLiteral::Int(9);
        assert!(within(&long, Some(&int), Some(&int)));
        assert!(within(&long, Some(&PrimitiveLiteral::Long(5)), None));
        assert!(!within(&long, Some(&PrimitiveLiteral::Long(6)), None));
        assert!(!within(&long, None, Some(&PrimitiveLiteral::Long(4))));
    }
}
