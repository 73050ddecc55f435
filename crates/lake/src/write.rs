//! Branch-aware writes: append, and copy-on-write replace, to any branch.
//!
//! iceberg-rust 0.10 only fast-appends to `main`. This follows the same recipe as its
//! `transaction/snapshot.rs` — data files, a manifest for them, a manifest list that carries the
//! parent's manifests, a snapshot with a correct summary — but the parent is the head of the
//! branch being written and the new snapshot is set on that branch. Replaced files are `deleted`
//! entries in a rewritten manifest; the files they share a manifest with stay as `existing`.
//!
//! Everything table metadata can hold is honoured or refused: a manifest is rewritten and merged
//! in its own partition spec (tables whose spec evolved, or made by other engines), summaries
//! count each file in its own spec and carry totals as Java does, only format v2 tables are
//! written, a replace that would read rows refuses branches with delete files, and a replace
//! retried after a lost race checks that no newly added file holds rows it would remove.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{
    DataFile, DataFileFormat, Datum, FieldSummary, Literal, ManifestContentType, ManifestFile,
    ManifestListWriter, ManifestStatus, NestedField, Operation, PartitionSpecRef, Snapshot,
    SnapshotSummaryCollector, Struct, StructType, Summary, TableMetadata,
};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{BloomFilterPosition, EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use uuid::Uuid;

use crate::catalog::{ChangeKind, Failpoint, TableChange};
use crate::error::{LakeError, Result};
use crate::manifest_write::{Layout, NewManifest};
use crate::table::Table;

/// A row test for [`Replace::Rows`]: true for the rows to remove.
pub type RowPredicate = Arc<dyn Fn(&RecordBatch) -> Result<BooleanArray> + Send + Sync>;

/// A file test for [`Replace::Files`]: false when a data file (listed in a manifest of the
/// partition spec id given) cannot hold a conflicting row, judged from its metadata alone.
pub type FilePredicate = Arc<dyn Fn(&DataFile, i32) -> bool + Send + Sync>;

/// Which existing rows a replace removes before it adds the new ones.
#[derive(Clone)]
pub enum Replace {
    /// Every row on the branch (a full rebuild).
    All,
    /// Every row in one of these partitions of the table's default partition spec (gold's
    /// rebuilt days): data files of that spec in them are removed whole, without reading them
    /// (manifests whose partition summaries cannot hold them are not even opened); files of an
    /// older spec are read and only their rows in these partitions are removed, as pyiceberg's
    /// dynamic partition overwrite does.
    Partitions(Vec<Struct>),
    /// Every row the predicate is true for; files holding some are rewritten without them.
    /// Refused with [`LakeError::DeleteFilesUnsupported`] on a branch that has position or
    /// equality delete files (written by another engine): the rows read back for the rewrite
    /// would not have those deletes applied. The same holds for [`Replace::Partitions`] when a
    /// file of an older partition spec must be read.
    Rows(RowPredicate),
    /// Exactly these live data files, by path, which the writer has already read and whose
    /// rows it keeps it wrote again itself (a merge does this). Staged on a branch where one of
    /// them is no longer live (another writer removed or rewrote it), the replace fails with
    /// [`LakeError::Conflict`]. Retried after a lost race, a data file added since the snapshot
    /// the writer read conflicts when `conflicts` is true for any of its rows (for a merge: a
    /// row holding one of its keys); files `may_conflict` rules out are not opened. Refused on a branch with delete files, as
    /// [`Replace::Rows`] is (the rows were read without them), unless `paths` is empty.
    Files {
        paths: BTreeSet<String>,
        conflicts: RowPredicate,
        may_conflict: Option<FilePredicate>,
    },
}

impl std::fmt::Debug for Replace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replace::All => write!(f, "All"),
            Replace::Partitions(p) => write!(f, "Partitions({} values)", p.len()),
            Replace::Rows(_) => write!(f, "Rows(<predicate>)"),
            Replace::Files { paths, .. } => write!(f, "Files({} paths)", paths.len()),
        }
    }
}

/// How many kept rows a replace that rewrites files holds before writing them out (see
/// [`Table::stage_files`]).
const KEPT_ROWS_HELD: usize = 1 << 20;

/// Manifests are merged in tiers: a manifest of `n` live entries is in tier `log4(n / 16)`
/// (every manifest of fewer than [`SMALL_MANIFEST_ENTRIES`] entries in tier 0), and when a tier
/// holds this many manifests an append merges them into one. Above tier 0 each entry is
/// rewritten once per tier, never once per merge, and a branch carries at most
/// `MERGE_FAN_IN - 1` manifests per tier.
///
/// Four, not sixteen: every scan plan parses every manifest of its snapshot, and parsing one
/// costs about a millisecond whatever its size (its Avro schema is parsed first). A table
/// appended to once a day carried 12 or 13 manifests after two months at sixteen, 3 to 8 at
/// four (2 to 5 since tier 0 is shared); the merges that buy this read a few small manifests on
/// one append in four.
const MERGE_FAN_IN: u64 = 4;

/// Manifests smaller than this share tier 0: a table of a few dozen files keeps them in at
/// most four manifests, not one per tier of 1, 4 and 16 (up to nine). The price: while an
/// entry is in a manifest this small, each merge of tier 0 (one append in three at most)
/// rewrites it; a merge of tier 0 rewrites at most `MERGE_FAN_IN * (SMALL_MANIFEST_ENTRIES -
/// 1)` entries, a few hundred, whatever the table's size.
const SMALL_MANIFEST_ENTRIES: u64 = 64;

/// A manifest this large is full (Iceberg's `commit.manifest.target-size-bytes` default): it is
/// never merged again.
const MANIFEST_TARGET_BYTES: i64 = 8 * 1024 * 1024;

/// The merge tier of a data manifest, or `None` when it is full. Only manifests of one
/// partition spec are merged together.
fn merge_tier(mf: &ManifestFile) -> Option<u32> {
    if mf.content != ManifestContentType::Data || mf.manifest_length >= MANIFEST_TARGET_BYTES {
        return None;
    }
    let counted = [mf.added_files_count, mf.existing_files_count];
    let live: u64 = if counted.iter().all(Option::is_none) {
        // Counts are optional in a manifest list: estimate from the size (~300 bytes an entry).
        (mf.manifest_length.max(0) as u64) / 300
    } else {
        counted.iter().map(|c| u64::from(c.unwrap_or(0))).sum()
    };
    let small = SMALL_MANIFEST_ENTRIES / MERGE_FAN_IN;
    Some((live / small).max(1).ilog(MERGE_FAN_IN))
}

/// True when a manifest list entry counts no live file in its manifest (no added or existing
/// entry; only deleted ones, if any). Counts are optional in a manifest list: unsure is false.
pub(crate) fn lists_no_live_file(mf: &ManifestFile) -> bool {
    matches!(
        (mf.added_files_count, mf.existing_files_count),
        (Some(0), Some(0))
    )
}

/// False when a data manifest's partition field summaries show that it holds none of
/// `values` (partition tuples of `partition_type`, the manifest's spec). True when unsure.
pub(crate) fn may_hold(mf: &ManifestFile, partition_type: &StructType, values: &[Struct]) -> bool {
    let Some(summaries) = &mf.partitions else {
        return true;
    };
    let fields = partition_type.fields();
    if summaries.len() != fields.len() {
        return true;
    }
    values.iter().any(|v| {
        v.fields().len() != fields.len()
            || v.fields()
                .iter()
                .zip(summaries)
                .zip(fields)
                .all(|((value, summary), field)| field_may_hold(value.as_ref(), summary, field))
    })
}

fn field_may_hold(value: Option<&Literal>, summary: &FieldSummary, field: &NestedField) -> bool {
    let Some(value) = value else {
        return summary.contains_null;
    };
    let (Literal::Primitive(value), Some(ty)) = (value, field.field_type.as_primitive_type())
    else {
        return true;
    };
    let bound = |b: Option<&Vec<u8>>| b.and_then(|b| Datum::try_from_bytes(b, ty.clone()).ok());
    let (Some(lower), Some(upper)) = (
        bound(summary.lower_bound.as_deref()),
        bound(summary.upper_bound.as_deref()),
    ) else {
        // No bounds: either only nulls (then a value cannot be there) or no statistics.
        return summary.lower_bound.is_some()
            || summary.upper_bound.is_some()
            || !summary.contains_null;
    };
    use std::cmp::Ordering::{Greater, Less};
    !matches!(value.partial_cmp(lower.literal()), Some(Less))
        && !matches!(value.partial_cmp(upper.literal()), Some(Greater))
}

/// Each summary total with the metrics that add to and remove from it.
const TOTALS: [(&str, &str, &str); 6] = [
    ("total-data-files", "added-data-files", "deleted-data-files"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

/// The totals of a new snapshot, as Java's `SnapshotProducer.updateTotal` computes them: the
/// parent's total plus what was added minus what was removed. A branch's first snapshot starts
/// from zero; a parent whose summary lacks a total (or holds one that is not a number) leaves
/// it out — never a wrong number.
fn totals(
    prev: Option<&HashMap<String, String>>,
    metrics: &HashMap<String, String>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (total, added, removed) in TOTALS {
        let start = match prev {
            None => Some(0),
            Some(p) => p.get(total).and_then(|v| v.parse::<i64>().ok()),
        };
        let Some(mut t) = start else { continue };
        for (key, sign) in [(added, 1), (removed, -1)] {
            match metrics.get(key).map(|v| v.parse::<i64>()) {
                None => {}
                Some(Ok(n)) if t >= 0 => t += sign * n,
                Some(Ok(_)) => {}
                Some(Err(_)) => t = -1,
            }
        }
        if t >= 0 {
            out.push((total.to_string(), t.to_string()));
        }
    }
    out
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

/// The Iceberg table property that asks for a Parquet bloom filter on a column (`true`), as
/// Spark and Java write it: `write.parquet.bloom-filter-enabled.column.<column>`.
pub const PROP_BLOOM_COLUMN: &str = "write.parquet.bloom-filter-enabled.column.";
/// A bloom filter's false-positive probability, per column (default 0.01).
pub const PROP_BLOOM_FPP_COLUMN: &str = "write.parquet.bloom-filter-fpp.column.";
/// The most rows a Parquet row group holds (pyiceberg's name for it; default: parquet-rs's).
pub const PROP_ROW_GROUP_LIMIT: &str = "write.parquet.row-group-limit";
/// The Parquet codec of new data files, as Iceberg names the property: `snappy` (lake's
/// default), `zstd`, `lz4_raw` or `uncompressed` (lake writes no gzip, brotli or Hadoop-framed
/// `lz4`).
///
/// Why snappy and not Iceberg's zstd: the Parquet reader lake uses (arrow-rs) sets up a zstd
/// compressor and decompressor for every column chunk it opens, which costs more than decoding
/// the chunk when files are small, as a daily run's and a time-travel read's are. Measured on
/// the bench's 1,000-row commits, a count + sum at an earlier snapshot took 29 ms on zstd files
/// and 16 ms on snappy ones (pyiceberg and DuckDB read either). Files are larger; a table that
/// would rather be small sets `zstd`.
///
/// `lz4_raw` (Parquet's LZ4_RAW) decodes faster than snappy and its files were a little smaller
/// on the bench's 100,000-row commits (reading 25 of them whole: 7% faster, one column: 18%),
/// and pyiceberg and DuckDB read it, but readers older than parquet-java 1.13 do not: a table
/// that only new readers read can ask for it.
pub const PROP_COMPRESSION_CODEC: &str = "write.parquet.compression-codec";
/// The zstd level (1–22; default 3), for tables whose codec is `zstd`.
pub const PROP_COMPRESSION_LEVEL: &str = "write.parquet.compression-level";
/// How lake writes an integer column (integers, dates, times, timestamps) that it writes
/// without a dictionary (see `columns_without_dictionary`): `delta` (lake's default), Parquet's
/// DELTA_BINARY_PACKED, or `plain`.
///
/// Why delta: a column of mostly distinct integers (ids, amounts in minor units, event times)
/// varies little from one value to the next, and DELTA_BINARY_PACKED stores those differences
/// in as few bits as each block of 32 needs, so the codec then has a fraction of the bytes to
/// compress and a reader a fraction to decompress. Measured on the bench's 100,000-row commits
/// (an id, an amount and a 97-value group), reading 25 files whole in one thread took 34 ms
/// with plain longs under snappy and 8 ms with delta under snappy, the files 21.2 MB against
/// 0.7 MB; with amounts spread at random below a million, 35 ms against 8 ms (21.6 against
/// 6.6 MB); with random 64-bit values, where no encoding helps, 21 ms against 8 ms. Writing was
/// faster too. parquet-java, pyarrow (pyiceberg), DuckDB and Spark 3.3+ read it (Parquet's
/// format 2.0 encoding, in version-1 data pages); Spark's vectorized reader before 3.3 does
/// not, and a table read by it asks for `plain`.
pub const PROP_INTEGER_ENCODING: &str = "write.parquet.integer-encoding";

/// The codec a table's properties ask for (see [`PROP_COMPRESSION_CODEC`]).
fn compression(
    properties: &HashMap<String, String>,
    bad: &dyn Fn(&str, &str, &str) -> LakeError,
) -> Result<Compression> {
    let level = match properties.get(PROP_COMPRESSION_LEVEL) {
        None => ZstdLevel::default(),
        Some(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .and_then(|n| ZstdLevel::try_new(n).ok())
            .ok_or_else(|| bad(PROP_COMPRESSION_LEVEL, v, "a zstd level (1 to 22)"))?,
    };
    let Some(codec) = properties.get(PROP_COMPRESSION_CODEC) else {
        return Ok(Compression::SNAPPY);
    };
    match codec.trim().to_ascii_lowercase().as_str() {
        "zstd" => Ok(Compression::ZSTD(level)),
        "snappy" => Ok(Compression::SNAPPY),
        "lz4_raw" => Ok(Compression::LZ4_RAW),
        "uncompressed" | "none" => Ok(Compression::UNCOMPRESSED),
        _ => Err(bad(
            PROP_COMPRESSION_CODEC,
            codec,
            "zstd, snappy, lz4_raw or uncompressed",
        )),
    }
}

/// The top-level fixed-width columns (integers, floats, dates, times, timestamps) of `batches`
/// whose values a Parquet dictionary would not make smaller, to be written without one, each
/// with the encoding it is written in: DELTA_BINARY_PACKED for those stored as Parquet
/// integers when `delta` (see [`PROP_INTEGER_ENCODING`]), PLAIN otherwise.
///
/// parquet-rs dictionary-encodes every column until its dictionary outgrows a page (1 MiB), so
/// a column of 100,000 distinct longs (ids, amounts in minor units, event times) was written as
/// an 800 KB dictionary plus 17-bit indexes into it: a quarter larger than the plain values,
/// and slower to read for every engine (more bytes to decompress, then a lookup per value).
/// parquet-java keeps a dictionary only while the dictionary plus its indexes take fewer bytes
/// than the plain values; this is that test, made over the values one file will hold: with
/// `d` distinct values of `w` bytes among `n`, the dictionary pays when
/// `d * w + n * bits(d) / 8 < n * w` (and `d * w` fits parquet-rs's dictionary page limit).
/// Counting stops as soon as the distinct values are too many, so a column of unique values
/// costs a hash per value only until then. Other columns (strings, decimals, booleans, nested)
/// keep parquet-rs's default.
fn columns_without_dictionary(batches: &[RecordBatch], delta: bool) -> Vec<(String, Encoding)> {
    let Some(first) = batches.first() else {
        return Vec::new();
    };
    let schema = first.schema();
    let mut out = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let columns: Vec<&dyn Array> = batches
            .iter()
            .filter_map(|b| b.columns().get(i).map(|c| c.as_ref()))
            .collect();
        if dictionary_pays(&columns) == Some(false) {
            let integer = stored(field.data_type()).is_some_and(|s| s.integer);
            let encoding = if delta && integer {
                Encoding::DELTA_BINARY_PACKED
            } else {
                Encoding::PLAIN
            };
            out.push((field.name().clone(), encoding));
        }
    }
    out
}

/// How parquet-rs stores a fixed-width Arrow type: the bytes a value takes in Arrow and plain
/// in Parquet (8- and 16-bit integers are INT32), and whether as a Parquet integer (INT32 or
/// INT64, what DELTA_BINARY_PACKED encodes). `None` for the types lake leaves to parquet-rs's
/// defaults (strings, decimals, booleans, nested).
struct Stored {
    arrow_width: usize,
    width: usize,
    integer: bool,
}

fn stored(t: &arrow_schema::DataType) -> Option<Stored> {
    use arrow_schema::DataType as T;
    let (arrow_width, width, integer) = match t {
        T::Int8 | T::UInt8 => (1, 4, true),
        T::Int16 | T::UInt16 => (2, 4, true),
        T::Int32 | T::UInt32 | T::Date32 | T::Time32(_) => (4, 4, true),
        T::Float32 => (4, 4, false),
        T::Int64 | T::UInt64 | T::Time64(_) | T::Timestamp(_, _) => (8, 8, true),
        T::Float64 | T::Date64 | T::Duration(_) => (8, 8, false),
        _ => return None,
    };
    Some(Stored {
        arrow_width,
        width,
        integer,
    })
}

/// How one write's data files are written: its table's [`writer_properties`], and whether
/// integer columns written without a dictionary are delta-encoded ([`PROP_INTEGER_ENCODING`]).
pub(crate) struct FileWriting {
    base: WriterProperties,
    delta: bool,
}

impl FileWriting {
    /// The properties of a file of `batches`: the columns [`columns_without_dictionary`]
    /// finds are written without a dictionary, in the encoding it gives them.
    fn for_file(&self, batches: &[RecordBatch]) -> WriterProperties {
        let mut b = self.base.clone().into_builder();
        for (column, encoding) in columns_without_dictionary(batches, self.delta) {
            let path = ColumnPath::from(column.as_str());
            b = b.set_column_dictionary_enabled(path.clone(), false);
            if encoding != Encoding::PLAIN {
                b = b.set_column_encoding(path, encoding);
            }
        }
        b.build()
    }
}

/// Whether a dictionary makes `columns`' values (one column, across batches) smaller in
/// Parquet, by the test [`columns_without_dictionary`] describes; `None` for a type it does
/// not judge or a column of nulls only.
fn dictionary_pays(columns: &[&dyn Array]) -> Option<bool> {
    let first = columns.first()?;
    let Stored {
        arrow_width, width, ..
    } = stored(first.data_type())?;
    if columns.iter().any(|c| c.data_type() != first.data_type()) {
        return None;
    }
    let n: usize = columns.iter().map(|c| c.len() - c.null_count()).sum();
    if n == 0 {
        return None;
    }
    let plain = n * width;
    let limit = parquet::file::properties::DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT;
    // Too many distinct values for a dictionary to pay: entries plus indexes at least as large
    // as the plain values, or more entries than fit parquet-rs's dictionary page.
    let too_many = |d: usize| {
        let bits = (usize::BITS - (d - 1).leading_zeros()).max(1) as usize;
        d * width + (n * bits).div_ceil(8) >= plain || d * width > limit
    };
    let mut seen: HashSet<u64, std::hash::BuildHasherDefault<Mix>> = HashSet::default();
    for column in columns {
        let data = column.to_data();
        let nulls = data.nulls();
        let len = data.len();
        macro_rules! count {
            ($t:ty) => {
                for (i, v) in data.buffer::<$t>(0).iter().take(len).enumerate() {
                    if nulls.is_some_and(|b| b.is_null(i)) {
                        continue;
                    }
                    if seen.insert(u64::from(*v)) && too_many(seen.len()) {
                        return Some(false);
                    }
                }
            };
        }
        match arrow_width {
            1 => count!(u8),
            2 => count!(u16),
            4 => count!(u32),
            _ => count!(u64),
        }
    }
    Some(true)
}

/// A fast hash for counting distinct values (a value's bits through murmur3's finaliser, so
/// values that differ only in high bits, such as whole seconds in microseconds, spread well).
#[derive(Default)]
struct Mix(u64);

impl std::hash::Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let mut x = self.0 ^ v;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        self.0 = x;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// How the data files of a table with `properties` are written: their codec (snappy unless
/// [`PROP_COMPRESSION_CODEC`] says otherwise), the row-group limit, per-column bloom filters
/// and the encoding of integer columns ([`PROP_INTEGER_ENCODING`]) its properties ask for. A
/// filter is sized for the rows one row group holds (at most the row-group limit, at most the
/// rows written), so a small write does not carry a megabyte of filter per column. Filters go
/// at the end of the file, so row groups stay contiguous (byte-range readers find them where
/// they expect). A value that is not a number, or a filter on a column that is not a
/// top-level column of `schema`, is an error that names the property.
pub(crate) fn writer_properties(
    table: &str,
    properties: &HashMap<String, String>,
    schema: &arrow_schema::Schema,
    rows: usize,
) -> Result<FileWriting> {
    let bad = |key: &str, value: &str, want: &str| LakeError::Schema {
        table: table.to_string(),
        detail: format!("table property {key}={value:?} is not {want}"),
    };
    let delta = match properties.get(PROP_INTEGER_ENCODING) {
        None => true,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "delta" => true,
            "plain" => false,
            _ => return Err(bad(PROP_INTEGER_ENCODING, v, "delta or plain")),
        },
    };
    // Statistics per column chunk (what Iceberg's bounds and row-group pruning use), not per
    // page, and no page offset index: no reader of the lake uses page statistics, a page
    // offset index only serves them (it locates the pages a page-statistics filter selects),
    // and iceberg-rust's reader reads and parses whichever of the two a file has, with its
    // footer, on every open.
    let mut b = WriterProperties::builder()
        .set_compression(compression(properties, &bad)?)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_offset_index_disabled(true)
        .set_bloom_filter_position(BloomFilterPosition::End);
    let limit = match properties.get(PROP_ROW_GROUP_LIMIT) {
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(bad(PROP_ROW_GROUP_LIMIT, v, "a positive row count")),
        },
        None => None,
    };
    if let Some(n) = limit {
        b = b.set_max_row_group_row_count(Some(n));
    }
    let per_group = limit.unwrap_or(rows).min(rows).max(1) as u64;
    let mut columns: Vec<(&String, &String)> = properties
        .iter()
        .filter(|(k, _)| k.starts_with(PROP_BLOOM_COLUMN))
        .collect();
    columns.sort();
    for (key, value) in columns {
        let column = &key[PROP_BLOOM_COLUMN.len()..];
        let on = match value.trim().to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(bad(key, value, "true or false")),
        };
        if !on {
            continue;
        }
        if schema.field_with_name(column).is_err() {
            return Err(bad(key, value, "on a top-level column of the table"));
        }
        let path = ColumnPath::from(column);
        let fpp_key = format!("{PROP_BLOOM_FPP_COLUMN}{column}");
        let fpp = match properties.get(&fpp_key) {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(f) if f > 0.0 && f < 1.0 => f,
                _ => return Err(bad(&fpp_key, v, "a probability between 0 and 1")),
            },
            None => 0.01,
        };
        b = b
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), fpp)
            .set_column_bloom_filter_ndv(path, per_group);
    }
    Ok(FileWriting {
        base: b.build(),
        delta,
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
        let rows: usize = conformed.iter().map(|b| b.num_rows()).sum();
        let writing = writer_properties(&name, md.properties(), &arrow, rows)?;
        let ice =
            |e: iceberg::Error| LakeError::iceberg(format!("writing data files of {name}"), e);
        let location = DefaultLocationGenerator::new(md).map_err(ice)?;
        // One name generator for every file of the write (its counter is shared by clones).
        let file_names = DefaultFileNameGenerator::new(
            format!("{}", Uuid::now_v7()),
            None,
            DataFileFormat::Parquet,
        );
        let file_io = self.catalog().file_io().clone();
        // Each file's properties are decided from the rows it will hold (which columns a
        // dictionary pays for, and how the others are encoded), on the task that encodes it.
        let builder = {
            let schema = schema.clone();
            Arc::new(move |batches: &[RecordBatch]| {
                DataFileWriterBuilder::new(RollingFileWriterBuilder::new_with_default_file_size(
                    ParquetWriterBuilder::new(writing.for_file(batches), schema.clone()),
                    file_io.clone(),
                    location.clone(),
                    file_names.clone(),
                ))
            })
        };
        let mut out = Vec::new();
        if spec.is_unpartitioned() {
            // On a task of its own too, so tables written side by side encode on every core.
            let files = crate::read::on_task(format!("writing data files of {name}"), async move {
                let mut w = builder(&conformed).build(None).await?;
                for b in conformed {
                    w.write(b).await?;
                }
                w.close().await
            })
            .await?;
            out.extend(files);
        } else {
            let splitter =
                RecordBatchPartitionSplitter::try_new_with_computed_values(schema.clone(), spec)
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
            // Each partition's file is encoded on a task of its own, as many at once as the
            // read side uses, so a write that spans many partitions (a full build, a replay)
            // encodes on every core; the files come back in partition order.
            let mut written = futures::stream::iter(groups.into_values())
                .map(|(key, parts)| {
                    let builder = builder.clone();
                    crate::read::on_task(format!("writing data files of {name}"), async move {
                        let mut w = builder(&parts).build(Some(key)).await?;
                        for p in parts {
                            w.write(p).await?;
                        }
                        w.close().await
                    })
                })
                .buffered(crate::read::read_parallelism());
            while let Some(files) = written.try_next().await? {
                out.extend(files);
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
    ///
    /// `added` must have been written with this table's default partition spec (as
    /// [`Table::write_data_files`] does). Replaced files are matched in the partition spec of the
    /// manifest that lists them: [`Replace::Partitions`] names partitions of the default spec, so
    /// files of an older spec are read and only their rows in those partitions are removed (the
    /// rest is written back under the default spec), as pyiceberg's dynamic overwrite does.
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
        let default_spec = md.default_partition_spec().clone();
        let default_arity = default_spec.fields().len();
        let default_type = default_spec.partition_type(&schema).ok();
        if let Some(f) = added
            .iter()
            .find(|f| f.partition().fields().len() != default_arity)
        {
            return Err(LakeError::Schema {
                table: name.clone(),
                detail: format!(
                    "data file {} has {} partition values; the default partition spec {} has {} fields (write it with this table's write_data_files)",
                    f.file_path(),
                    f.partition().fields().len(),
                    default_spec.spec_id(),
                    default_arity
                ),
            });
        }
        let commit_uuid = Uuid::now_v7();
        let mut counter = 0u32;
        // A new data manifest of this snapshot in partition spec `spec`, under a name unique to
        // this commit attempt.
        let mut new_manifest = async |spec: &PartitionSpecRef| -> Result<NewManifest> {
            counter += 1;
            let path = crate::storage::join(
                md.location(),
                &format!("metadata/{commit_uuid}-m{counter}.avro"),
            );
            let out = file_io.new_output(path).map_err(ice)?;
            // The spec's manifest layout, kept on the handle (see `crate::manifest_write`).
            let slot = format!(
                "{}\u{0}manifest layout {} {} {}",
                md.location(),
                md.uuid(),
                schema.schema_id(),
                spec.spec_id()
            );
            let layout = self
                .catalog()
                .manifest_layout_cached(&slot, || Layout::new(&schema, spec))
                .await
                .map_err(ice)?;
            Ok(NewManifest::new(
                out,
                snapshot_id,
                &schema,
                spec,
                layout.as_ref(),
            ))
        };

        // 1. The parent's manifests, rewriting those that hold replaced files (each in its own
        //    partition spec).
        let mut manifests: Vec<ManifestFile> = Vec::new();
        // Removed files, with the partition spec of the manifest that listed them.
        let mut deleted: Vec<(DataFile, i32)> = Vec::new();
        // The rows kept from every rewritten file, written together once the manifests are
        // walked: a file per partition, not a file per rewritten file (rewrites by rows would
        // otherwise split a small table into more files on every replace, each read by the
        // next replace). Written out early once they reach `KEPT_ROWS_HELD`, so a replace
        // that rewrites many large files holds no more than that at once.
        let mut kept_rows: Vec<RecordBatch> = Vec::new();
        if let Some(parent_id) = parent {
            let list = self.manifest_list(parent_id).await?;
            // Position or equality delete files on the branch: rows read back for a rewrite
            // would not have them applied, so a replace that reads rows is refused.
            let live_deletes = list
                .entries()
                .iter()
                .any(|mf| mf.content == ManifestContentType::Deletes && !lists_no_live_file(mf));
            for mf in list.entries() {
                // A data manifest that lists no live file (only files an earlier snapshot
                // deleted) is that snapshot's history: the new snapshot does not carry it, as
                // Iceberg's own writers do not. Each whole replace left one behind for good.
                if mf.content == ManifestContentType::Data && lists_no_live_file(mf) {
                    continue;
                }
                let Some(replace) = replace.filter(|_| mf.content == ManifestContentType::Data)
                else {
                    manifests.push(mf.clone());
                    continue;
                };
                if live_deletes && self.reads_rows(replace, mf.partition_spec_id) {
                    return Err(LakeError::DeleteFilesUnsupported {
                        table: name.clone(),
                        detail: format!(
                            "branch {branch} (snapshot {parent_id}) has position or equality delete files; a replace that rewrites rows ({replace:?}) would not apply them, so it is refused (replace whole partitions or the whole table instead)"
                        ),
                    });
                }
                // A manifest of the default spec whose partition summaries cannot hold any of
                // the replaced partitions is carried as it is, unread.
                if let (Replace::Partitions(values), Some(ty)) = (replace, &default_type)
                    && mf.partition_spec_id == default_spec.spec_id()
                    && !may_hold(mf, ty, values)
                {
                    manifests.push(mf.clone());
                    continue;
                }
                // Dropping no named file: every manifest is carried unread.
                if let Replace::Files { paths, .. } = replace
                    && paths.is_empty()
                {
                    manifests.push(mf.clone());
                    continue;
                }
                let spec = self.partition_spec(mf.partition_spec_id)?;
                let manifest = self.catalog().manifest(mf).await.map_err(ice)?;
                let mut keep = Vec::new();
                let mut drop = Vec::new();
                for entry in manifest.entries() {
                    if !entry.is_alive() {
                        continue;
                    }
                    match self
                        .verdict(replace, mf.partition_spec_id, entry.data_file())
                        .await?
                    {
                        Verdict::Keep => keep.push(entry.clone()),
                        Verdict::Drop => drop.push(entry.clone()),
                        Verdict::Rewrite(survivors) => {
                            kept_rows.extend(survivors);
                            drop.push(entry.clone());
                            if kept_rows.iter().map(RecordBatch::num_rows).sum::<usize>()
                                >= KEPT_ROWS_HELD
                            {
                                let rows = std::mem::take(&mut kept_rows);
                                added.extend(self.write_data_files(&rows).await?);
                            }
                        }
                    }
                }
                if drop.is_empty() {
                    manifests.push(mf.clone());
                    continue;
                }
                let mut w = new_manifest(&spec).await?;
                for e in &keep {
                    w.add_existing_file(
                        e.data_file(),
                        e.snapshot_id().unwrap_or(mf.added_snapshot_id),
                        e.sequence_number().unwrap_or(mf.sequence_number),
                        e.file_sequence_number.or(Some(mf.sequence_number)),
                    )
                    .map_err(ice)?;
                }
                for e in &drop {
                    w.add_delete_file(
                        e.data_file(),
                        e.sequence_number().unwrap_or(mf.sequence_number),
                        e.file_sequence_number.or(Some(mf.sequence_number)),
                    )
                    .map_err(ice)?;
                    deleted.push((e.data_file().clone(), mf.partition_spec_id));
                }
                manifests.push(w.write_manifest_file().await.map_err(ice)?);
            }
        }
        // Every file a `Replace::Files` names must still be live on the branch: one another
        // writer removed or rewrote since would otherwise come back as this writer's copy.
        if let Some(Replace::Files { paths, .. }) = replace {
            let dropped: HashSet<&str> = deleted.iter().map(|(f, _)| f.file_path()).collect();
            if let Some(gone) = paths.iter().find(|p| !dropped.contains(p.as_str())) {
                return Err(LakeError::Conflict {
                    table: name.clone(),
                    detail: format!(
                        "data file {gone}, which this write read and rewrote, is no longer live on branch {branch} (snapshot {})",
                        parent.map_or("none".to_string(), |p| p.to_string())
                    ),
                });
            }
        }

        added.extend(self.write_data_files(&kept_rows).await?);

        // 2. Keep the manifest list short: merge a tier of carried data manifests of one
        //    partition spec once it is full (the merged manifest keeps that spec). A spec that
        //    no longer binds to the current schema (its source column was dropped) is left as
        //    it is: a manifest of it cannot be written.
        let mergeable: std::collections::HashSet<i32> = md
            .partition_specs_iter()
            .filter(|s| s.partition_type(&schema).is_ok())
            .map(|s| s.spec_id())
            .collect();
        // Manifests written by this loop: one merged again in the same append (a full tier
        // whose merge fills the next) is named by no manifest list, so its file is deleted.
        let mut merged_here: std::collections::HashSet<String> = std::collections::HashSet::new();
        loop {
            let mut per_tier: BTreeMap<(i32, u32), usize> = BTreeMap::new();
            for mf in &manifests {
                if let Some(t) = merge_tier(mf)
                    && mergeable.contains(&mf.partition_spec_id)
                {
                    *per_tier.entry((mf.partition_spec_id, t)).or_default() += 1;
                }
            }
            let Some(group) = per_tier
                .iter()
                .find(|(_, n)| **n as u64 >= MERGE_FAN_IN)
                .map(|(g, _)| *g)
            else {
                break;
            };
            let (merge, keep): (Vec<_>, Vec<_>) = manifests
                .into_iter()
                .partition(|mf| merge_tier(mf).map(|t| (mf.partition_spec_id, t)) == Some(group));
            let mut w = new_manifest(&self.partition_spec(group.0)?).await?;
            let mut merged_deleted = Vec::new();
            for mf in &merge {
                let manifest = self.catalog().manifest(mf).await.map_err(ice)?;
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
                                e.data_file(),
                                e.snapshot_id().unwrap_or(mf.added_snapshot_id),
                                seq,
                                fseq,
                            )
                            .map_err(ice)?,
                    }
                }
            }
            for (df, seq, fseq) in merged_deleted {
                w.add_delete_file(&df, seq, fseq).map_err(ice)?;
            }
            for mf in &merge {
                if merged_here.remove(&mf.manifest_path) {
                    // Best effort: a file left behind is unreferenced, and orphan removal
                    // frees it.
                    let _ = file_io.delete(&mf.manifest_path).await;
                }
            }
            manifests = keep;
            let merged = w.write_manifest_file().await.map_err(ice)?;
            merged_here.insert(merged.manifest_path.clone());
            manifests.push(merged);
        }

        // 3. The new files' manifest (the default spec: they were written with it).
        if !added.is_empty() {
            let mut w = new_manifest(&default_spec).await?;
            for f in &added {
                w.add_file(f, -1).map_err(ice)?;
            }
            manifests.push(w.write_manifest_file().await.map_err(ice)?);
        }

        // 4. The summary: Iceberg's added/deleted metrics (each file in its own partition spec),
        //    totals carried from the branch's parent.
        let mut collector = SnapshotSummaryCollector::default();
        let default_for_summary = self.summary_spec(&default_spec)?;
        for f in &added {
            collector.add_file(f, schema.clone(), default_for_summary.clone());
        }
        for (f, spec_id) in &deleted {
            let spec = self.summary_spec(&self.partition_spec(*spec_id)?)?;
            if f.partition().fields().len() != spec.fields().len() {
                return Err(self.bad_metadata(format!(
                    "data file {} has {} partition values; its partition spec {spec_id} has {} fields",
                    f.file_path(),
                    f.partition().fields().len(),
                    spec.fields().len()
                )));
            }
            collector.remove_file(f, schema.clone(), spec);
        }
        let operation = match (added.is_empty(), deleted.is_empty()) {
            (_, true) => Operation::Append,
            (true, false) => Operation::Delete,
            (false, false) => Operation::Overwrite,
        };
        // Totals are Iceberg's to compute: a caller's `total-*` properties never stand in.
        let mut props: HashMap<String, String> = properties
            .into_iter()
            .filter(|(k, _)| !k.starts_with("total-"))
            .collect();
        props.insert(SUMMARY_BRANCH.to_string(), branch.to_string());
        let metrics = collector.build();
        let prev = parent
            .and_then(|p| md.snapshot_by_id(p))
            .map(|s| s.summary());
        props.extend(totals(prev.map(|s| &s.additional_properties), &metrics));
        props.extend(metrics);

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

    /// Java's `validateNoConflictingData` for a replace retried on a newer head: no data file
    /// added to `branch` after `base` (the snapshot the replace first read) may hold a row the
    /// replace removes — re-staging would silently delete rows another writer added (or keep
    /// rows this replace should have replaced). [`Replace::All`]: any added file conflicts;
    /// [`Replace::Partitions`]: a file in one of them; [`Replace::Rows`]: a file with a row the
    /// predicate selects; [`Replace::Files`]: a file with a row its `conflicts` predicate
    /// selects (the named files themselves are checked when staging). A branch that no longer
    /// descends from `base` conflicts too.
    pub async fn check_no_conflicting_data(
        &self,
        branch: &str,
        base: Option<i64>,
        replace: &Replace,
    ) -> Result<()> {
        let name = self.name().to_string();
        let moved = |why: String| LakeError::Conflict {
            table: name.clone(),
            detail: format!(
                "branch {branch} {why} since this replace read it at {}",
                base.map_or("no snapshot".to_string(), |b| format!("snapshot {b}"))
            ),
        };
        let mut cur = self
            .head(branch)
            .or_else(|| self.head(iceberg::spec::MAIN_BRANCH));
        while cur != base {
            let Some(id) = cur else {
                return Err(moved("was moved off that snapshot".into()));
            };
            let Some(snap) = self.metadata().snapshot_by_id(id) else {
                return Err(moved(format!(
                    "has an ancestor {id} that is no longer in the metadata"
                )));
            };
            for (file, spec_id) in self.files_added_in(id).await? {
                let conflicts = match replace {
                    Replace::Files { may_conflict, .. } => {
                        may_conflict.as_ref().is_none_or(|f| f(&file, spec_id))
                            && self.selects_rows(replace, spec_id, &file).await?
                    }
                    _ => !matches!(self.verdict(replace, spec_id, &file).await?, Verdict::Keep),
                };
                if conflicts {
                    return Err(LakeError::Conflict {
                        table: name.clone(),
                        detail: format!(
                            "snapshot {id} added data file {} to branch {branch} after this replace read {}, and {}",
                            file.file_path(),
                            base.map_or("an empty branch".to_string(), |b| format!("snapshot {b}")),
                            match replace {
                                Replace::Files { .. } =>
                                    "it holds a row with a key this write changes",
                                _ => "the replace would remove its rows",
                            }
                        ),
                    });
                }
            }
            cur = snap.parent_snapshot_id();
        }
        Ok(())
    }

    /// The table's partition spec `spec_id` (a manifest names it).
    pub(crate) fn partition_spec(&self, spec_id: i32) -> Result<PartitionSpecRef> {
        self.metadata()
            .partition_spec_by_id(spec_id)
            .cloned()
            .ok_or_else(|| {
                self.bad_metadata(format!(
                    "a manifest names partition spec {spec_id}, which the metadata does not have"
                ))
            })
    }

    fn bad_metadata(&self, detail: String) -> LakeError {
        LakeError::BadMetadata {
            table: self.name().to_string(),
            location: self.metadata_location().to_string(),
            detail,
        }
    }

    /// `spec` if it binds to the current schema (the summary collector needs that and would
    /// panic otherwise).
    fn summary_spec(&self, spec: &PartitionSpecRef) -> Result<PartitionSpecRef> {
        spec.partition_type(self.metadata().current_schema())
            .map_err(|e| {
                LakeError::iceberg(
                    format!(
                        "partition spec {} of {} does not bind to the current schema",
                        spec.spec_id(),
                        self.name()
                    ),
                    e,
                )
            })?;
        Ok(spec.clone())
    }

    /// True when `replace` decides about files of partition spec `spec_id` by reading rows.
    fn reads_rows(&self, replace: &Replace, spec_id: i32) -> bool {
        match replace {
            Replace::All => false,
            Replace::Partitions(values) => {
                !values.is_empty() && spec_id != self.metadata().default_partition_spec_id()
            }
            Replace::Rows(_) => true,
            Replace::Files { paths, .. } => !paths.is_empty(),
        }
    }

    /// True when `file` holds a row [`Table::split_rows`] would remove (for
    /// [`Replace::Files`]: a row its `conflicts` predicate selects). Reads the file.
    async fn selects_rows(&self, replace: &Replace, spec_id: i32, file: &DataFile) -> Result<bool> {
        let batches = self
            .read_data_files_in_spec(spec_id, std::slice::from_ref(file))
            .await?;
        for b in &batches {
            if self.split_rows(replace, b)?.0 > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// What `replace` does to one live data file listed in a manifest of partition spec
    /// `spec_id`: decided from the manifest entry when it can be, else by reading its rows.
    async fn verdict(&self, replace: &Replace, spec_id: i32, file: &DataFile) -> Result<Verdict> {
        match replace {
            Replace::All => return Ok(Verdict::Drop),
            Replace::Files { paths, .. } => {
                return Ok(if paths.contains(file.file_path()) {
                    Verdict::Drop
                } else {
                    Verdict::Keep
                });
            }
            Replace::Partitions(values) if values.is_empty() => return Ok(Verdict::Keep),
            Replace::Partitions(values)
                if spec_id == self.metadata().default_partition_spec_id() =>
            {
                return Ok(if values.iter().any(|v| v == file.partition()) {
                    Verdict::Drop
                } else {
                    Verdict::Keep
                });
            }
            // A file of another spec may hold rows of these partitions: read it.
            Replace::Partitions(_) | Replace::Rows(_) => {}
        }
        let batches = self
            .read_data_files_in_spec(spec_id, std::slice::from_ref(file))
            .await?;
        let mut removed = 0usize;
        let mut survivors = Vec::new();
        for b in &batches {
            let (r, kept) = self.split_rows(replace, b)?;
            removed += r;
            survivors.extend(kept.into_iter().filter(|k| k.num_rows() > 0));
        }
        Ok(if removed == 0 {
            Verdict::Keep
        } else if survivors.is_empty() {
            Verdict::Drop
        } else {
            Verdict::Rewrite(survivors)
        })
    }

    /// How many rows of `batch` a replace removes, and the rows it keeps.
    fn split_rows(
        &self,
        replace: &Replace,
        batch: &RecordBatch,
    ) -> Result<(usize, Vec<RecordBatch>)> {
        match replace {
            Replace::All => Ok((batch.num_rows(), Vec::new())),
            Replace::Rows(pred)
            | Replace::Files {
                conflicts: pred, ..
            } => {
                let mask = pred(batch)?;
                if mask.len() != batch.num_rows() {
                    return Err(LakeError::Other(format!(
                        "replace predicate on {} returned {} values for {} rows",
                        self.name(),
                        mask.len(),
                        batch.num_rows()
                    )));
                }
                // Remove the rows the predicate is true for; keep false and null.
                let removed = match mask.nulls() {
                    Some(n) => mask.values() & n.inner(),
                    None => mask.values().clone(),
                };
                let count = removed.count_set_bits();
                let keep_mask = BooleanArray::new(!&removed, None);
                let kept = arrow::compute::filter_record_batch(batch, &keep_mask)
                    .map_err(|e| LakeError::arrow("evaluating a replace predicate", e))?;
                Ok((count, vec![kept]))
            }
            Replace::Partitions(values) => {
                let md = self.metadata();
                let spec = md.default_partition_spec();
                if spec.is_unpartitioned() {
                    return Ok(if values.iter().any(|v| v.fields().is_empty()) {
                        (batch.num_rows(), Vec::new())
                    } else {
                        (0, vec![batch.clone()])
                    });
                }
                let ice = |e: iceberg::Error| {
                    LakeError::iceberg(format!("partitioning rows of {}", self.name()), e)
                };
                let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
                    md.current_schema().clone(),
                    spec.clone(),
                )
                .map_err(ice)?;
                let mut removed = 0;
                let mut kept = Vec::new();
                for (key, part) in splitter.split(batch).map_err(ice)? {
                    if values.iter().any(|v| v == key.data()) {
                        removed += part.num_rows();
                    } else {
                        kept.push(part);
                    }
                }
                Ok((removed, kept))
            }
        }
    }

    /// Read whole data files of this table into Arrow (schema of the table). Each file is read
    /// with the partition spec its partition tuple fits (identity-partition values come from
    /// it); when the table has several specs that could fit, with none (values then come from
    /// the file's own columns). Prefer [`Table::read_data_files_in_spec`] when the spec is known.
    pub async fn read_data_files(&self, files: &[DataFile]) -> Result<Vec<RecordBatch>> {
        let tasks = files
            .iter()
            .map(|f| (f, self.fitting_spec(f)))
            .collect::<Vec<_>>();
        self.read_tasks(tasks).await
    }

    /// Read whole data files listed in manifests of partition spec `spec_id`.
    pub async fn read_data_files_in_spec(
        &self,
        spec_id: i32,
        files: &[DataFile],
    ) -> Result<Vec<RecordBatch>> {
        let spec = self.partition_spec(spec_id)?;
        if let Some(f) = files
            .iter()
            .find(|f| f.partition().fields().len() != spec.fields().len())
        {
            return Err(self.bad_metadata(format!(
                "data file {} has {} partition values; its partition spec {spec_id} has {} fields",
                f.file_path(),
                f.partition().fields().len(),
                spec.fields().len()
            )));
        }
        let tasks = files.iter().map(|f| (f, Some(spec.clone()))).collect();
        self.read_tasks(tasks).await
    }

    /// The one partition spec of the table `file`'s partition tuple fits, if exactly one does.
    fn fitting_spec(&self, file: &DataFile) -> Option<PartitionSpecRef> {
        let md = self.metadata();
        let schema = md.current_schema();
        let values = file.partition().fields();
        let mut fits = md.partition_specs_iter().filter(|spec| {
            let Ok(ty) = spec.partition_type(schema) else {
                return false;
            };
            ty.fields().len() == values.len()
                && ty.fields().iter().zip(values).all(|(field, v)| match v {
                    None => true,
                    Some(iceberg::spec::Literal::Primitive(p)) => field
                        .field_type
                        .as_primitive_type()
                        .is_some_and(|t| t.compatible(p)),
                    Some(_) => false,
                })
        });
        match (fits.next(), fits.next()) {
            (Some(spec), None) => Some(spec.clone()),
            _ => None,
        }
    }

    async fn read_tasks(
        &self,
        files: Vec<(&DataFile, Option<PartitionSpecRef>)>,
    ) -> Result<Vec<RecordBatch>> {
        let md = self.metadata();
        let schema = md.current_schema().clone();
        let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
        let tasks: Vec<iceberg::Result<iceberg::scan::FileScanTask>> = files
            .into_iter()
            .map(|(f, spec)| {
                Ok(iceberg::scan::FileScanTask::builder()
                    .with_file_size_in_bytes(f.file_size_in_bytes())
                    .with_start(0)
                    .with_length(f.file_size_in_bytes())
                    .with_record_count(Some(f.record_count()))
                    .with_data_file_path(f.file_path().to_string())
                    .with_data_file_format(DataFileFormat::Parquet)
                    .with_schema(schema.clone())
                    .with_project_field_ids(field_ids.clone())
                    .with_partition(spec.is_some().then(|| f.partition().clone()))
                    .with_partition_spec(spec)
                    .with_case_sensitive(true)
                    .build())
            })
            .collect();
        let tasks = tasks
            .into_iter()
            .collect::<iceberg::Result<Vec<_>>>()
            .map_err(|e| LakeError::iceberg(format!("reading data files of {}", self.name()), e))?;
        self.read_file_tasks(tasks, format!("reading data files of {}", self.name()))?
            .try_collect()
            .await
    }
}

/// What a replace does to one live data file.
enum Verdict {
    /// No row of it is removed.
    Keep,
    /// Every row of it is removed.
    Drop,
    /// Some rows are removed: these survive, to be written as new files.
    Rewrite(Vec<RecordBatch>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn manifest_with(partitions: Option<Vec<FieldSummary>>) -> ManifestFile {
        ManifestFile {
            manifest_path: "m.avro".into(),
            manifest_length: 1,
            partition_spec_id: 0,
            content: ManifestContentType::Data,
            sequence_number: 1,
            min_sequence_number: 1,
            added_snapshot_id: 1,
            added_files_count: Some(1),
            existing_files_count: Some(0),
            deleted_files_count: Some(0),
            added_rows_count: Some(1),
            existing_rows_count: Some(0),
            deleted_rows_count: Some(0),
            partitions,
            key_metadata: None,
            first_row_id: None,
        }
    }

    fn summary(lower: Option<i64>, upper: Option<i64>, contains_null: bool) -> FieldSummary {
        let bytes = |v: Option<i64>| v.map(|v| Datum::long(v).to_bytes().unwrap());
        FieldSummary {
            contains_null,
            contains_nan: None,
            lower_bound: bytes(lower),
            upper_bound: bytes(upper),
        }
    }

    #[test]
    fn partition_summaries_prune_only_what_cannot_match() {
        use iceberg::spec::{PrimitiveType, Type};
        let ty = StructType::new(vec![Arc::new(NestedField::optional(
            1000,
            "k",
            Type::Primitive(PrimitiveType::Long),
        ))]);
        let v = |x: Option<i64>| Struct::from_iter([x.map(Literal::long)]);
        let in_range = manifest_with(Some(vec![summary(Some(10), Some(20), false)]));
        assert!(may_hold(&in_range, &ty, &[v(Some(10))]));
        assert!(may_hold(&in_range, &ty, &[v(Some(20))]));
        assert!(may_hold(&in_range, &ty, &[v(Some(5)), v(Some(15))]));
        assert!(!may_hold(&in_range, &ty, &[v(Some(9)), v(Some(21))]));
        assert!(!may_hold(&in_range, &ty, &[v(None)]), "no nulls in it");
        assert!(!may_hold(&in_range, &ty, &[]));
        let with_nulls = manifest_with(Some(vec![summary(Some(10), Some(20), true)]));
        assert!(may_hold(&with_nulls, &ty, &[v(None)]));
        // Only nulls: no value can be there.
        let only_nulls = manifest_with(Some(vec![summary(None, None, true)]));
        assert!(!may_hold(&only_nulls, &ty, &[v(Some(1))]));
        // Unsure (no summaries, no bounds, another arity): the manifest is read.
        assert!(may_hold(&manifest_with(None), &ty, &[v(Some(1))]));
        let no_stats = manifest_with(Some(vec![summary(None, None, false)]));
        assert!(may_hold(&no_stats, &ty, &[v(Some(1))]));
        assert!(may_hold(&manifest_with(Some(vec![])), &ty, &[v(Some(1))]));
    }

    #[test]
    fn a_dictionary_is_kept_only_where_it_pays() {
        use arrow_array::{
            Float64Array, Int16Array, Int32Array, Int64Array, StringArray,
            TimestampMicrosecondArray,
        };
        let n = 10_000i64;
        let unique = Int64Array::from_iter_values(0..n);
        let few = Int64Array::from_iter_values((0..n).map(|i| i % 97));
        assert_eq!(dictionary_pays(&[&unique]), Some(false));
        assert_eq!(dictionary_pays(&[&few]), Some(true));
        // Event times in whole seconds (low bits all zero) and unique: plain.
        let seconds = TimestampMicrosecondArray::from_iter_values((0..n).map(|i| i * 1_000_000));
        assert_eq!(dictionary_pays(&[&seconds]), Some(false));
        let days =
            TimestampMicrosecondArray::from_iter_values((0..n).map(|i| i % 7 * 86_400_000_000));
        assert_eq!(dictionary_pays(&[&days]), Some(true));
        // 4- and 2-byte values: 16-bit integers are INT32 in Parquet.
        assert_eq!(
            dictionary_pays(&[&Int32Array::from_iter_values(0..10_000)]),
            Some(false)
        );
        assert_eq!(
            dictionary_pays(&[&Int16Array::from_iter_values(
                (0..10_000).map(|i| (i % 300) as i16)
            )]),
            Some(true)
        );
        assert_eq!(
            dictionary_pays(&[&Float64Array::from_iter_values(
                (0..n).map(|i| i as f64 / 3.0)
            )]),
            Some(false)
        );
        // At the boundary: 8 distinct longs among 16 take 64 + 16 * 3 / 8 = 70 bytes against
        // 128 plain; 16 distinct among 16 take 128 + 8 = 136.
        let twice = Int64Array::from_iter_values((0..16).map(|i| i % 8));
        assert_eq!(dictionary_pays(&[&twice]), Some(true));
        assert_eq!(
            dictionary_pays(&[&Int64Array::from_iter_values(0..16)]),
            Some(false)
        );
        // Counted across the batches of a file: 100 distinct among 100 do not pay, among 200
        // (each twice) they do.
        let hundred = Int64Array::from_iter_values(0..100);
        assert_eq!(dictionary_pays(&[&hundred]), Some(false));
        assert_eq!(dictionary_pays(&[&hundred, &hundred]), Some(true));
        // Nulls are not values; a slice counts its own values only.
        let sparse: Int64Array = (0..n).map(|i| (i % 10 == 0).then_some(i % 3)).collect();
        assert_eq!(dictionary_pays(&[&sparse]), Some(true));
        assert_eq!(
            dictionary_pays(&[&Int64Array::from(vec![None::<i64>; 5])]),
            None
        );
        let slice = few.slice(0, 50);
        assert_eq!(
            dictionary_pays(&[&slice]),
            Some(false),
            "50 distinct in 50 rows"
        );
        // Types it does not judge keep parquet-rs's default.
        let strings = StringArray::from_iter_values((0..n).map(|i| i.to_string()));
        assert_eq!(dictionary_pays(&[&strings]), None);

        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(unique) as arrow_array::ArrayRef),
            ("grp", Arc::new(few) as arrow_array::ArrayRef),
            ("label", Arc::new(strings) as arrow_array::ArrayRef),
            ("at", Arc::new(seconds) as arrow_array::ArrayRef),
        ])
        .unwrap();
        let named = |v: &[(&str, Encoding)]| -> Vec<(String, Encoding)> {
            v.iter().map(|(n, e)| (n.to_string(), *e)).collect()
        };
        assert_eq!(
            columns_without_dictionary(std::slice::from_ref(&batch), true),
            named(&[
                ("id", Encoding::DELTA_BINARY_PACKED),
                ("at", Encoding::DELTA_BINARY_PACKED)
            ])
        );
        assert_eq!(
            columns_without_dictionary(&[batch], false),
            named(&[("id", Encoding::PLAIN), ("at", Encoding::PLAIN)])
        );
        // Floats are not Parquet integers: plain either way.
        let floats = RecordBatch::try_from_iter([(
            "x",
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|i| i as f64 / 3.0),
            )) as arrow_array::ArrayRef,
        )])
        .unwrap();
        assert_eq!(
            columns_without_dictionary(&[floats], true),
            named(&[("x", Encoding::PLAIN)])
        );
        assert!(columns_without_dictionary(&[], true).is_empty());
    }

    /// Every type [`stored`] stores as a Parquet integer is written delta-encoded when no
    /// dictionary pays, and reads back the same values, nulls and extremes included
    /// (differences that overflow wrap, as DELTA_BINARY_PACKED specifies).
    #[test]
    fn delta_encoded_integers_of_every_type_read_back() {
        use arrow_array::{
            ArrayRef, Date32Array, Int8Array, Int16Array, Int32Array, Int64Array,
            Time32MillisecondArray, Time64MicrosecondArray, TimestampMicrosecondArray, UInt8Array,
            UInt16Array, UInt32Array, UInt64Array,
        };
        use parquet::arrow::ArrowWriter;
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let n = 5_000usize;
        // Mostly distinct (`f` of the row), with a null every 13th row and rows 1 and 2 at the
        // type's extremes.
        macro_rules! column {
            ($name:literal, $array:ty, $t:ty, $f:expr) => {{
                let f: fn(usize) -> $t = $f;
                let values = (0..n).map(|i| match i {
                    _ if i % 13 == 5 => None,
                    1 => Some(<$t>::MIN),
                    2 => Some(<$t>::MAX),
                    _ => Some(f(i)),
                });
                ($name, Arc::new(values.collect::<$array>()) as ArrayRef)
            }};
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            column!("i8", Int8Array, i8, |i| (i % 256) as u8 as i8),
            column!("i16", Int16Array, i16, |i| (i * 7) as i16),
            column!("i32", Int32Array, i32, |i| (i as i32).wrapping_mul(7919)),
            column!("i64", Int64Array, i64, |i| i as i64 * -1_000_003),
            column!("u8", UInt8Array, u8, |i| (i % 256) as u8),
            column!("u16", UInt16Array, u16, |i| i as u16),
            column!("u32", UInt32Array, u32, |i| i as u32 * 3),
            column!("u64", UInt64Array, u64, |i| i as u64 * 977),
            column!("date", Date32Array, i32, |i| 20_000 + i as i32),
            column!("time32", Time32MillisecondArray, i32, |i| i as i32 * 1_000),
            column!("time64", Time64MicrosecondArray, i64, |i| i as i64 * 1_000),
            column!("at", TimestampMicrosecondArray, i64, |i| {
                1_785_024_000_000_000 + i as i64 * 1_000_003
            }),
        ];
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let writing = writer_properties("t", &HashMap::new(), &batch.schema(), n).unwrap();
        let props = writing.for_file(std::slice::from_ref(&batch));
        let mut bytes = Vec::new();
        let mut w = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes)).unwrap();
        // u8 has 256 distinct values in 5,000 rows: its dictionary pays, the rest are delta.
        for col in reader.metadata().row_group(0).columns() {
            let name = col.column_path().string();
            let encodings: Vec<Encoding> = col.encodings().collect();
            assert_eq!(
                encodings.contains(&Encoding::DELTA_BINARY_PACKED),
                !matches!(name.as_str(), "i8" | "u8"),
                "{name}: {encodings:?}"
            );
        }
        let back: Vec<RecordBatch> = reader.build().unwrap().map(|b| b.unwrap()).collect();
        let back = arrow::compute::concat_batches(&batch.schema(), &back).unwrap();
        assert_eq!(back, batch);
    }

    #[test]
    fn totals_follow_java_update_total() {
        let metrics = map(&[
            ("added-records", "5"),
            ("deleted-records", "2"),
            ("added-data-files", "1"),
        ]);
        // A branch's first snapshot starts every total at zero.
        let first: HashMap<_, _> = totals(None, &metrics).into_iter().collect();
        assert_eq!(first["total-records"], "3");
        assert_eq!(first["total-data-files"], "1");
        assert_eq!(first["total-equality-deletes"], "0");
        assert_eq!(first.len(), 6);
        // A parent without totals: none is made up.
        assert!(totals(Some(&map(&[("added-records", "9")])), &metrics).is_empty());
        // Only the totals the parent has, and only when they are numbers.
        let prev = map(&[("total-records", "10"), ("total-data-files", "x")]);
        assert_eq!(
            totals(Some(&prev), &metrics),
            vec![("total-records".to_string(), "13".to_string())]
        );
        // A total that would go negative is left out.
        let prev = map(&[("total-records", "1")]);
        let removed = map(&[("deleted-records", "2")]);
        assert!(totals(Some(&prev), &removed).is_empty());
    }
}
