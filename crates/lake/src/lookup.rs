//! Point lookups by key: the rows of a table whose string key is one of a set, reading only
//! the Parquet row groups whose bloom filter may hold one of the keys.
//!
//! A scan filter on a random key prunes nothing by partition or by column bounds (every file's
//! bounds span the key space), so a lookup of a few thousand ids would otherwise read the key
//! column of every row the table holds. A table written with a bloom filter on the key
//! ([`crate::PROP_BLOOM_COLUMN`]) and small row groups ([`crate::PROP_ROW_GROUP_LIMIT`]) is
//! looked up in the row groups that may hold an asked key: a row group whose filter answers no
//! is never read, and in one that is, only the key column is decoded whole (the other columns
//! asked, only for the rows whose key was asked). What is read grows with the keys asked and how many files they are spread
//! over, not with the table's history. Files written without a filter on the key (by another
//! engine, or before the property was set) are read whole, as a scan would: the answer is the
//! same, only its cost differs, and [`Lookup`] says how many files that was.
//!
//! What a lookup reads of a file's footer and filters is kept by the [`crate::Catalog`] handle
//! (data files never change once written), so the next lookup of the same table, in this run
//! or the next on the same handle, opens only the row groups it reads. A file's filters are
//! read together, in one read, where its writer put them together (lake's does, at the end of
//! the file); each asked key is hashed
//! once, and the bits it sets worked out once, then checked against every row group's filter.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use iceberg::expr::Predicate;
use iceberg::scan::FileScanTask;
use iceberg::spec::{PrimitiveType, Type};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::bloom_filter::Sbbf;

use crate::catalog::Catalog;
use crate::error::{LakeError, Result};
use crate::read::{KeySet, lookup_parallelism, parquet_error};
use crate::table::{At, Table};

/// What [`Table::lookup`] read, and what it found.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    /// The rows whose key is one of the keys asked, with the columns asked (the key first).
    pub batches: Vec<RecordBatch>,
    /// Data files the scan planned (after the filter's partition and bounds pruning).
    pub files_planned: usize,
    /// Of those, files any of whose row groups were read.
    pub files_read: usize,
    /// Files without a bloom filter on the key: read whole.
    pub files_unfiltered: usize,
    /// Row groups in the planned files, and how many of them were read.
    pub row_groups_held: usize,
    pub row_groups_read: usize,
    /// Rows in the row groups read: their key column is decoded whole, the other columns asked
    /// only where the key is one of the keys asked (in a file lake reads itself; a file another
    /// reader needs, with delete files or an evolved schema, decodes every column of them).
    pub rows_read: u64,
}

impl Lookup {
    /// How many rows were found.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// One planned file, cut down to the row groups that may hold a key.
struct Pruned {
    tasks: Vec<FileScanTask>,
    held: usize,
    read: usize,
    rows: u64,
    unfiltered: bool,
}

impl Table {
    /// The rows of the table at `at` whose string column `key` is one of `keys`, with `key`
    /// and `columns`, among the files `filter` may match (partition and bounds pruning first,
    /// then each file's per-row-group bloom filter on `key`). Rows are found exactly: a bloom
    /// filter's false positive costs a row group read, never a wrong row, and a file with no
    /// filter is read whole.
    pub async fn lookup(
        &self,
        at: &At,
        key: &str,
        keys: &HashSet<&str>,
        columns: &[&str],
        filter: Option<Predicate>,
    ) -> Result<Lookup> {
        let name = self.name().to_string();
        let ctx = || format!("looking up {name} by {key} at {at}");
        let schema = self.metadata().current_schema().clone();
        let field = schema
            .field_by_name(key)
            .ok_or_else(|| LakeError::Schema {
                table: name.clone(),
                detail: format!("no column {key:?} to look up by"),
            })?
            .clone();
        if !matches!(*field.field_type, Type::Primitive(PrimitiveType::String)) {
            return Err(LakeError::Schema {
                table: name.clone(),
                detail: format!("lookup key {key:?} is {}, not a string", field.field_type),
            });
        }
        let mut selected: Vec<&str> = vec![key];
        selected.extend(columns.iter().copied().filter(|c| *c != key));
        let mut out = Lookup::default();
        let Some(id) = self.resolve(at)? else {
            return Ok(out);
        };
        if keys.is_empty() {
            return Ok(out);
        }
        let names = selected.iter().map(|c| c.to_string()).collect();
        let tasks = self.plan_files_at(id, Some(names), filter).await?;
        out.files_planned = tasks.len();

        let probes: Arc<Vec<KeyProbe>> =
            Arc::new(keys.iter().map(|k| KeyProbe::new(key_hash(k))).collect());
        let field_id = field.id;
        let key_name = key.to_string();
        // Each file's footer and filters are read and decoded on a task of its own, several
        // more files in flight than there are cores: a footer costs two or three reads (a wait
        // on the store) and then a decode (CPU), so the waits overlap and the decodes take
        // both cores.
        let in_flight = lookup_parallelism();
        let pruned: Vec<Pruned> = futures::stream::iter(tasks)
            .map(|task| {
                let (probes, key_name) = (probes.clone(), key_name.clone());
                let catalog = self.catalog().clone();
                let ctx = ctx();
                async move {
                    crate::read::spawned(&ctx, async move {
                        prune(&catalog, task, field_id, &key_name, &probes).await
                    })
                    .await?
                    .map_err(|e| LakeError::iceberg(ctx, e))
                }
            })
            .buffered(in_flight)
            .try_collect()
            .await?;
        let mut wanted = Vec::new();
        for p in pruned {
            out.row_groups_held += p.held;
            out.row_groups_read += p.read;
            out.rows_read += p.rows;
            out.files_unfiltered += usize::from(p.unfiltered);
            out.files_read += usize::from(!p.tasks.is_empty());
            wanted.extend(p.tasks);
        }

        let projected = self.projected_schema(&selected)?;
        let asked = Arc::new(KeySet::new(field_id, keys.iter().copied()));
        let batches: Vec<RecordBatch> = self
            .read_file_tasks_keyed(wanted, projected, ctx(), Some(asked.clone()))?
            .try_collect()
            .await?;
        for b in batches {
            // A file lake read itself hands back only the asked keys' rows; one iceberg's
            // reader read (delete files, an evolved schema) hands back every row: the same test
            // keeps the asked ones.
            let keep = asked.keep(&b).map_err(|e| LakeError::arrow(ctx(), e))?;
            let kept = if keep.true_count() == b.num_rows() {
                b
            } else {
                arrow::compute::filter_record_batch(&b, &keep)
                    .map_err(|e| LakeError::arrow(ctx(), e))?
            };
            if kept.num_rows() > 0 {
                out.batches.push(kept);
            }
        }
        Ok(out)
    }
}

/// What a lookup needs of one data file: each row group's compressed size and its bloom
/// filter on the key column. Read from the footer and the filters once per catalog handle
/// (a data file never changes once written): a run looks a table up several times, and a
/// season runs many times on one handle.
pub(crate) struct KeyIndex {
    /// Compressed size of each row group, in file order.
    sizes: Vec<u64>,
    /// Rows of each row group, in file order.
    rows: Vec<u64>,
    /// Each row group's bloom filter on the key (`None`: that row group has none); `None`
    /// when the file has no such column.
    blooms: Option<Vec<Option<KeyFilter>>>,
}

/// A Parquet split block bloom filter, checked by a key's [`KeyProbe`]: a lookup hashes each
/// key and works out its probe once, not once per row group of every file (parquet's `Sbbf`
/// takes only the value, and hashes it on every check).
struct KeyFilter {
    blocks: Vec<[u32; 8]>,
}

/// The salt of the Parquet bloom filter spec's split block filter.
const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// A key's hash as Parquet bloom filters hash a byte array: xxHash64, seed 0.
fn key_hash(key: &str) -> u64 {
    twox_hash::XxHash64::oneshot(0, key.as_bytes())
}

/// What checking a key's hash against any filter needs, worked out once per key: the hash's
/// upper half (which picks the block, by the filter's size) and the bit each of a block's
/// eight words must have (which depends on the hash alone).
struct KeyProbe {
    upper: u64,
    bits: [u32; 8],
}

impl KeyProbe {
    fn new(hash: u64) -> KeyProbe {
        let x = hash as u32;
        let mut bits = [0u32; 8];
        for (bit, salt) in bits.iter_mut().zip(SALT) {
            *bit = 1u32 << (x.wrapping_mul(salt) >> 27);
        }
        KeyProbe {
            upper: hash >> 32,
            bits,
        }
    }
}

impl KeyFilter {
    fn new(sbbf: &Sbbf) -> KeyFilter {
        let mut bytes = Vec::with_capacity(sbbf.num_blocks() * 32);
        // Writing to a Vec cannot fail.
        let _ = sbbf.write_bitset(&mut bytes);
        let blocks = bytes
            .chunks_exact(32)
            .map(|b| {
                let mut block = [0u32; 8];
                for (w, c) in block.iter_mut().zip(b.chunks_exact(4)) {
                    *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
                block
            })
            .collect();
        KeyFilter { blocks }
    }

    /// False only when no value with the probe's hash was inserted (the spec's check). The
    /// eight words are checked together, without a branch per word.
    #[cfg(test)]
    fn may_hold(&self, probe: &KeyProbe) -> bool {
        self.may_hold_any(std::slice::from_ref(probe))
    }

    /// Whether the filter may hold any of `probes`: each checked in turn until the first
    /// "maybe". The loop a lookup spends its checks in (every asked key against every row
    /// group of every file it plans), kept to a multiply, a shift and one block's eight words a
    /// probe.
    fn may_hold_any(&self, probes: &[KeyProbe]) -> bool {
        let n = self.blocks.len() as u64;
        probes.iter().any(|p| {
            let i = (p.upper.saturating_mul(n) >> 32) as usize;
            self.blocks.get(i).is_none_or(|block| holds(block, &p.bits))
        })
    }
}

/// Whether `block` has every bit of `bits` set (the spec's check of a block), the eight words
/// checked together without a branch per word.
#[inline]
fn holds(block: &[u32; 8], bits: &[u32; 8]) -> bool {
    let mut missing = 0u32;
    for k in 0..8 {
        missing |= bits[k] & !block[k];
    }
    missing == 0
}

impl KeyIndex {
    /// A file with no row groups (for tests of the cache that keeps these).
    #[cfg(test)]
    pub(crate) fn empty() -> KeyIndex {
        KeyIndex {
            sizes: Vec::new(),
            rows: Vec::new(),
            blooms: None,
        }
    }

    /// About what it takes in memory, for the catalog handle's budget.
    pub(crate) fn bytes(&self) -> u64 {
        let blooms: usize = self
            .blooms
            .iter()
            .flatten()
            .flatten()
            .map(|b| b.blocks.len() * 32)
            .sum();
        (64 + 16 * self.sizes.len() + blooms) as u64
    }

    /// The footer of `task`'s file (kept on the handle, shared with scans) and the bloom filter
    /// of every row group on the column with field id `field_id` (by name `key` in a file
    /// written without field ids).
    async fn read(
        catalog: &Catalog,
        task: &FileScanTask,
        field_id: i32,
        key: &str,
    ) -> iceberg::Result<KeyIndex> {
        let path = &task.data_file_path;
        let (mut file, footer) = catalog
            .open_data_file(path, task.file_size_in_bytes)
            .await?;
        let md = footer.metadata().clone();
        let sizes = md
            .row_groups()
            .iter()
            .map(|rg| rg.compressed_size().max(0) as u64)
            .collect();
        let rows = md
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows().max(0) as u64)
            .collect();
        let column = md
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| {
                let info = c.self_type().get_basic_info();
                c.path().parts().len() == 1
                    && if info.has_id() {
                        info.id() == field_id
                    } else {
                        c.path().parts()[0] == key
                    }
            });
        let Some(column) = column else {
            return Ok(KeyIndex {
                sizes,
                rows,
                blooms: None,
            });
        };
        // Where each row group's filter is: (offset, length), `None` for a row group without
        // one. A writer that records every filter's length (parquet-rs does) lets all of a
        // file's filters come in one read of the span that holds them (lake's writer puts them
        // together, after the row groups); otherwise each is read on its own, its header first.
        let spans: Vec<Option<(u64, Option<u64>)>> = md
            .row_groups()
            .iter()
            .map(|rg| {
                let c = rg.column(column);
                let offset = u64::try_from(c.bloom_filter_offset()?).ok()?;
                let length = c.bloom_filter_length().and_then(|l| u64::try_from(l).ok());
                Some((offset, length))
            })
            .collect();
        let together = filters_span(&spans, task.file_size_in_bytes);
        let mut blooms = Vec::with_capacity(md.num_row_groups());
        if let Some(range) = together {
            let bytes = file
                .get_bytes(range.clone())
                .await
                .map_err(|e| parquet_error(path, "reading the bloom filters", e))?;
            for span in &spans {
                let Some((offset, Some(length))) = span else {
                    blooms.push(None);
                    continue;
                };
                let at = (offset - range.start) as usize;
                let one = bytes.get(at..at + *length as usize).ok_or_else(|| {
                    parquet_error(
                        path,
                        "reading a bloom filter",
                        parquet::errors::ParquetError::General(format!(
                            "filter at {offset} (+{length}) outside the read span {range:?}"
                        )),
                    )
                })?;
                let sbbf = Sbbf::from_bytes(one)
                    .map_err(|e| parquet_error(path, "reading a bloom filter", e))?;
                blooms.push(Some(KeyFilter::new(&sbbf)));
            }
        } else {
            let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(file, footer);
            for rg in 0..md.num_row_groups() {
                blooms.push(
                    builder
                        .get_row_group_column_bloom_filter(rg, column)
                        .await
                        .map_err(|e| parquet_error(path, "reading a bloom filter", e))?
                        .as_ref()
                        .map(KeyFilter::new),
                );
            }
        }
        Ok(KeyIndex {
            sizes,
            rows,
            blooms: Some(blooms),
        })
    }
}

/// The one byte range to read for all of a file's bloom filters on a column, from each row
/// group's (offset, length) (`None`: no filter): `None` when a filter's length is not recorded
/// (its header must be read to learn it), a filter lies past the file's end, or the filters are
/// not together (row groups between them: a writer that puts each after its row group), so
/// that one read would take in the data as well.
fn filters_span(
    spans: &[Option<(u64, Option<u64>)>],
    file_size: u64,
) -> Option<std::ops::Range<u64>> {
    let known: Vec<(u64, u64)> = spans
        .iter()
        .flatten()
        .map(|(o, l)| l.map(|l| (*o, l)))
        .collect::<Option<_>>()?;
    let start = known.iter().map(|(o, _)| *o).min()?;
    let end = known
        .iter()
        .map(|(o, l)| o.checked_add(*l))
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()?;
    let held: u64 = known.iter().map(|(_, l)| *l).sum();
    (end <= file_size && end - start <= held.saturating_mul(2)).then_some(start..end)
}

/// The parts of `task`'s file that may hold a key: one task per run of consecutive row groups
/// whose bloom filter on the key answers "maybe". A row group is named by a byte range around
/// its midpoint, counted the way iceberg's reader counts it (row groups in order from the
/// 4-byte magic, each its compressed size), so the reader picks exactly that row group. A
/// file with delete files, or a row group without a filter, is read as planned.
async fn prune(
    catalog: &Catalog,
    task: FileScanTask,
    field_id: i32,
    key: &str,
    probes: &[KeyProbe],
) -> iceberg::Result<Pruned> {
    let ix = key_index(catalog, &task, field_id, key).await?;
    Ok(cut(task, &ix, probes))
}

/// The key index of `task`'s file on the column with field id `field_id` (named `key`), as the
/// catalog handle keeps it (beside the file's footer, under its path), read and kept if it is
/// not kept yet. What a lookup, and a warm-up ahead of one, reads of a file before any row.
pub(crate) async fn key_index(
    catalog: &Catalog,
    task: &FileScanTask,
    field_id: i32,
    key: &str,
) -> iceberg::Result<Arc<KeyIndex>> {
    let slot = format!("{}\u{0}key index {field_id} {key}", task.data_file_path);
    catalog
        .key_index_cached(&slot, || KeyIndex::read(catalog, task, field_id, key))
        .await
}

/// Which row groups may hold a key: those without a filter, and those whose filter answers
/// "maybe" for some probe. Each filter is checked against the probes until its first "maybe":
/// a row group that may hold a key is settled by the first key that hits it, and one that holds
/// none (most of a lookup's row groups, in a table of many days) costs one check per key. A
/// filter is a few KiB and stays in the cache while the probes (40 bytes each) stream past it.
fn row_groups_to_read(blooms: &[Option<KeyFilter>], probes: &[KeyProbe]) -> Vec<bool> {
    blooms
        .iter()
        .map(|b| b.as_ref().is_none_or(|f| f.may_hold_any(probes)))
        .collect()
}

/// [`prune`]'s decision, from the file's key index.
fn cut(task: FileScanTask, ix: &KeyIndex, probes: &[KeyProbe]) -> Pruned {
    let held = ix.sizes.len();
    let all_rows: u64 = ix.rows.iter().sum();
    let whole = |task: FileScanTask, unfiltered: bool| Pruned {
        tasks: vec![task],
        held,
        read: held,
        rows: all_rows,
        unfiltered,
    };
    let split = task.start != 0 || (task.length != 0 && task.length != task.file_size_in_bytes);
    if !task.deletes.is_empty() || split {
        return whole(task, false);
    }
    let Some(blooms) = &ix.blooms else {
        return whole(task, true);
    };
    let unfiltered = blooms.iter().any(|b| b.is_none());
    let keep = row_groups_to_read(blooms, probes);
    let read = keep.iter().filter(|k| **k).count();
    let rows = keep
        .iter()
        .zip(&ix.rows)
        .filter(|(k, _)| **k)
        .map(|(_, r)| *r)
        .sum();
    if read == held {
        return whole(task, unfiltered);
    }
    let mut tasks = Vec::new();
    let mut offset = 4u64;
    let mut run: Option<(u64, u64)> = None;
    for (may_hold, size) in keep.iter().zip(&ix.sizes) {
        if *may_hold {
            run = Some(match run {
                Some((start, len)) => (start, len + size),
                None => (offset, *size),
            });
        } else if let Some((start, length)) = run.take() {
            tasks.push(part(&task, start, length));
        }
        offset += size;
    }
    if let Some((start, length)) = run {
        tasks.push(part(&task, start, length));
    }
    Pruned {
        tasks,
        held,
        read,
        rows,
        unfiltered,
    }
}

fn part(task: &FileScanTask, start: u64, length: u64) -> FileScanTask {
    let mut t = task.clone();
    t.start = start;
    t.length = length.max(1);
    t.record_count = None;
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_filters_are_read_in_one_span_only_when_they_lie_together() {
        // Written at the end, one after another (lake's writer); a row group without one.
        let end = [Some((1_000, Some(40))), None, Some((1_040, Some(72)))];
        assert_eq!(filters_span(&end, 1_200), Some(1_000..1_112));
        // Each after its row group: one read would take in the row groups between.
        let interleaved = [Some((1_000, Some(40))), Some((9_000, Some(40)))];
        assert_eq!(filters_span(&interleaved, 10_000), None);
        // A length not recorded, a filter past the file's end, an overflow, no filter at all.
        assert_eq!(filters_span(&[Some((1_000, None))], 2_000), None);
        assert_eq!(filters_span(&[Some((1_000, Some(40)))], 1_020), None);
        assert_eq!(filters_span(&[Some((u64::MAX, Some(40)))], u64::MAX), None);
        assert_eq!(filters_span(&[None, None], 2_000), None);
    }

    #[test]
    fn the_hashed_check_answers_as_parquets_bloom_filter_does() {
        let mut sbbf = Sbbf::new_with_ndv_fpp(500, 0.05).expect("a filter");
        let inserted: Vec<String> = (0..500).map(|i| format!("order-{i:06}")).collect();
        for k in &inserted {
            sbbf.insert(k.as_str());
        }
        let ours = KeyFilter::new(&sbbf);
        for k in &inserted {
            assert!(
                ours.may_hold(&KeyProbe::new(key_hash(k))),
                "{k} was inserted"
            );
        }
        let (mut agree, mut maybe) = (0, 0);
        for i in 0..20_000 {
            let k = format!("other-{i}");
            let theirs = sbbf.check(k.as_str());
            assert_eq!(ours.may_hold(&KeyProbe::new(key_hash(&k))), theirs, "{k}");
            agree += 1;
            maybe += usize::from(theirs);
        }
        // Checked many at a time, the filter answers as it does one key at a time.
        let probes: Vec<KeyProbe> = (0..2_000)
            .map(|i| KeyProbe::new(key_hash(&format!("other-{i}"))))
            .chain(std::iter::once(KeyProbe::new(key_hash(&inserted[3]))))
            .collect();
        for chunk in probes.chunks(7) {
            assert_eq!(
                ours.may_hold_any(chunk),
                chunk.iter().any(|p| ours.may_hold(p))
            );
        }
        assert!(ours.may_hold_any(&probes), "an inserted key is among them");
        assert!(!ours.may_hold_any(&[]), "no key asked, none held");
        // Most absent keys are ruled out (false positives near the filter's rate, not all).
        assert!(
            maybe < agree / 5,
            "{maybe} of {agree} absent keys said maybe"
        );
    }

    #[test]
    fn a_row_group_is_read_when_its_filter_may_hold_any_key_or_it_has_none() {
        // Four row groups: keys a-*, b-*, c-* in the first three, the fourth without a filter.
        let filter = |prefix: &str| {
            let mut sbbf = Sbbf::new_with_ndv_fpp(100, 0.01).expect("a filter");
            for i in 0..100 {
                sbbf.insert(format!("{prefix}-{i}").as_str());
            }
            Some(KeyFilter::new(&sbbf))
        };
        let blooms = vec![filter("a"), filter("b"), filter("c"), None];
        let probes = |keys: &[&str]| -> Vec<KeyProbe> {
            keys.iter().map(|k| KeyProbe::new(key_hash(k))).collect()
        };
        for (keys, want) in [
            (&["b-7"][..], [false, true, false, true]),
            (&["c-1", "a-99"][..], [true, false, true, true]),
            (&["c-1", "a-99", "zzz"][..], [true, false, true, true]),
            (&["a-1", "b-1", "c-1"][..], [true, true, true, true]),
            // A key in no filter (and no false positive), and no key at all: only the row
            // group without a filter.
            (&["zzz"][..], [false, false, false, true]),
            (&[][..], [false, false, false, true]),
        ] {
            assert_eq!(row_groups_to_read(&blooms, &probes(keys)), want, "{keys:?}");
        }
    }
}
