//! Data manifests written by lake: each entry encoded straight into the Avro block as it is
//! added, under the header iceberg-rust's own writer writes.
//!
//! iceberg-rust's `ManifestWriter` keeps every entry, then turns each into a generic Avro value,
//! resolves that value against the manifest's schema and validates it before encoding it: on a
//! late-season daily run (scale 1, a fresh process) that was about a quarter of a run's
//! growth over an early one's, since a commit that removes a file rewrites the whole manifest
//! that listed it, and merges rewrite tiers of them. Here the header (the Avro schema, the
//! table schema and the partition spec) comes from iceberg-rust's writer, run on an empty
//! manifest in memory once per table schema and partition spec and kept on the catalog handle,
//! so every reader sees the header it always saw; the entries are encoded by the layout of
//! Iceberg's v2 manifest schema, checked against that header's Avro schema before it is
//! trusted. A header whose layout is not the expected
//! one, or a partition value of a type this encoder does not write (decimal, UUID, fixed), sends
//! the manifest to iceberg-rust's writer instead: the file is the same either way, read by the
//! same readers (the tests hold the two to the same entries and the same manifest list entry).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use iceberg::io::{FileIO, OutputFile};
use iceberg::spec::{
    DataContentType, DataFile, Datum, FieldSummary, ManifestContentType, ManifestFile,
    ManifestStatus, ManifestWriter, ManifestWriterBuilder, PartitionSpec, PrimitiveLiteral,
    PrimitiveType, SchemaRef, Type,
};
use iceberg::{Error, ErrorKind, Result};

/// The fields of a v2 manifest entry, in the order of its Avro schema.
const ENTRY_FIELDS: [&str; 5] = [
    "status",
    "snapshot_id",
    "sequence_number",
    "file_sequence_number",
    "data_file",
];

/// The fields of a v2 manifest's `data_file` record, in the order of its Avro schema.
const DATA_FILE_FIELDS: [&str; 20] = [
    "content",
    "file_path",
    "file_format",
    "partition",
    "record_count",
    "file_size_in_bytes",
    "column_sizes",
    "value_counts",
    "null_value_counts",
    "nan_value_counts",
    "lower_bounds",
    "upper_bounds",
    "key_metadata",
    "split_offsets",
    "equality_ids",
    "sort_order_id",
    "first_row_id",
    "referenced_data_file",
    "content_offset",
    "content_size_in_bytes",
];

/// How a partition value is encoded (its union's second branch).
#[derive(Clone, Copy, Debug)]
enum Part {
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
}

/// What writing the manifests of one partition spec needs: the container header iceberg-rust
/// writes for them (ending in its sync marker) and each partition field's type and encoding.
pub(crate) struct Layout {
    header: Vec<u8>,
    parts: Vec<(Part, PrimitiveType)>,
}

impl Layout {
    /// The layout of a v2 data manifest of `spec` under `schema`; `None` when this encoder
    /// does not write it (see the module's docs).
    pub(crate) async fn new(schema: &SchemaRef, spec: &PartitionSpec) -> Result<Option<Layout>> {
        let Some(parts) = spec
            .partition_type(schema)?
            .fields()
            .iter()
            .map(|f| part(&f.field_type))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let io = FileIO::new_with_memory();
        let path = "memory:///lake/manifest-header.avro";
        let writer =
            ManifestWriterBuilder::new(io.new_output(path)?, Some(0), schema.clone(), spec.clone())
                .build_v2_data();
        writer.write_manifest_file().await?;
        let header = io.new_input(path)?.read().await?.to_vec();
        if !header_fits(&header, parts.len()) {
            return Ok(None);
        }
        Ok(Some(Layout { header, parts }))
    }

    /// About what it takes in memory, for the catalog handle's budget.
    pub(crate) fn bytes(&self) -> u64 {
        (self.header.len() + 64 * self.parts.len() + 256) as u64
    }
}

fn part(ty: &Type) -> Option<(Part, PrimitiveType)> {
    let Type::Primitive(p) = ty else {
        return None;
    };
    let part = match p {
        PrimitiveType::Boolean => Part::Boolean,
        PrimitiveType::Int | PrimitiveType::Date => Part::Int,
        PrimitiveType::Long
        | PrimitiveType::Time
        | PrimitiveType::Timestamp
        | PrimitiveType::Timestamptz
        | PrimitiveType::TimestampNs
        | PrimitiveType::TimestamptzNs => Part::Long,
        PrimitiveType::Float => Part::Float,
        PrimitiveType::Double => Part::Double,
        PrimitiveType::String | PrimitiveType::Binary => Part::Bytes,
        PrimitiveType::Decimal { .. } | PrimitiveType::Uuid | PrimitiveType::Fixed(_) => {
            return None;
        }
    };
    Some((part, p.clone()))
}

/// True when `header` is an Avro container header with no codec whose schema is the v2
/// manifest entry laid out as this encoder writes it: the fields in order, every optional one
/// a union with null first, `partitions` partition fields each a union with null first.
fn header_fits(header: &[u8], partitions: usize) -> bool {
    let Some(meta) = crate::manifest::container_header(header) else {
        return false;
    };
    let get = |k: &str| {
        meta.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    if !matches!(get("avro.codec").as_deref(), None | Some(b"null")) {
        return false;
    }
    let Some(schema) =
        get("avro.schema").and_then(|s| serde_json::from_slice::<serde_json::Value>(&s).ok())
    else {
        return false;
    };
    let names = |record: &serde_json::Value| -> Option<Vec<(String, serde_json::Value)>> {
        record["fields"]
            .as_array()?
            .iter()
            .map(|f| Some((f["name"].as_str()?.to_string(), f["type"].clone())))
            .collect()
    };
    let null_first = |ty: &serde_json::Value| {
        ty.as_array()
            .is_some_and(|u| u.len() == 2 && u[0] == serde_json::json!("null"))
    };
    let Some(entry) = names(&schema) else {
        return false;
    };
    if entry.iter().map(|(n, _)| n.as_str()).ne(ENTRY_FIELDS) {
        return false;
    }
    if !(null_first(&entry[1].1) && null_first(&entry[2].1) && null_first(&entry[3].1)) {
        return false;
    }
    let Some(data_file) = names(&entry[4].1) else {
        return false;
    };
    if data_file
        .iter()
        .map(|(n, _)| n.as_str())
        .ne(DATA_FILE_FIELDS)
    {
        return false;
    }
    // content .. file_size_in_bytes are required; every field after them is optional.
    if !data_file[6..].iter().all(|(_, ty)| null_first(ty)) {
        return false;
    }
    let Some(partition) = names(&data_file[3].1) else {
        return false;
    };
    partition.len() == partitions && partition.iter().all(|(_, ty)| null_first(ty))
}

/// A data manifest being written: by lake's encoder when the spec's [`Layout`] allows it,
/// otherwise by iceberg-rust's writer. Entries are added as `ManifestWriter`'s are, and
/// [`NewManifest::write_manifest_file`] answers the same manifest list entry.
pub(crate) enum NewManifest {
    Ours(Box<Encoder>),
    Theirs(Box<ManifestWriter>),
}

impl NewManifest {
    pub(crate) fn new(
        out: OutputFile,
        snapshot_id: i64,
        schema: &SchemaRef,
        spec: &PartitionSpec,
        layout: Option<&Arc<Layout>>,
    ) -> NewManifest {
        match layout {
            Some(layout) => NewManifest::Ours(Box::new(Encoder {
                out,
                spec_id: spec.spec_id(),
                snapshot_id,
                layout: layout.clone(),
                block: Vec::new(),
                entries: 0,
                added: (0, 0),
                existing: (0, 0),
                deleted: (0, 0),
                min_seq: None,
                stats: layout
                    .parts
                    .iter()
                    .map(|(_, ty)| Stats::new(ty.clone()))
                    .collect(),
            })),
            None => NewManifest::Theirs(Box::new(
                ManifestWriterBuilder::new(out, Some(snapshot_id), schema.clone(), spec.clone())
                    .build_v2_data(),
            )),
        }
    }

    /// A new file of this snapshot (its data sequence number assigned at commit when
    /// `sequence_number` is negative).
    pub(crate) fn add_file(&mut self, file: &DataFile, sequence_number: i64) -> Result<()> {
        match self {
            NewManifest::Ours(e) => e.add(
                ManifestStatus::Added,
                None,
                (sequence_number >= 0).then_some(sequence_number),
                None,
                file,
            ),
            NewManifest::Theirs(w) => w.add_file(file.clone(), sequence_number),
        }
    }

    /// A file carried from an earlier snapshot, with the ids and numbers it was committed with.
    pub(crate) fn add_existing_file(
        &mut self,
        file: &DataFile,
        snapshot_id: i64,
        sequence_number: i64,
        file_sequence_number: Option<i64>,
    ) -> Result<()> {
        match self {
            NewManifest::Ours(e) => e.add(
                ManifestStatus::Existing,
                Some(snapshot_id),
                Some(sequence_number),
                file_sequence_number,
                file,
            ),
            NewManifest::Theirs(w) => w.add_existing_file(
                file.clone(),
                snapshot_id,
                sequence_number,
                file_sequence_number,
            ),
        }
    }

    /// A file this snapshot removes, with the numbers it was committed with.
    pub(crate) fn add_delete_file(
        &mut self,
        file: &DataFile,
        sequence_number: i64,
        file_sequence_number: Option<i64>,
    ) -> Result<()> {
        match self {
            NewManifest::Ours(e) => e.add(
                ManifestStatus::Deleted,
                None,
                Some(sequence_number),
                file_sequence_number,
                file,
            ),
            NewManifest::Theirs(w) => {
                w.add_delete_file(file.clone(), sequence_number, file_sequence_number)
            }
        }
    }

    /// Write the file; its entry for the manifest list.
    pub(crate) async fn write_manifest_file(self) -> Result<ManifestFile> {
        match self {
            NewManifest::Ours(e) => e.finish().await,
            NewManifest::Theirs(w) => w.write_manifest_file().await,
        }
    }
}

/// Lake's encoder of one data manifest (see the module's docs).
pub(crate) struct Encoder {
    out: OutputFile,
    spec_id: i32,
    snapshot_id: i64,
    layout: Arc<Layout>,
    /// The entries encoded so far: the file's one data block.
    block: Vec<u8>,
    entries: i64,
    /// Files and rows of each status.
    added: (u32, u64),
    existing: (u32, u64),
    deleted: (u32, u64),
    /// The lowest data sequence number of a live entry.
    min_seq: Option<i64>,
    stats: Vec<Stats>,
}

impl Encoder {
    /// One entry; `snapshot_id` `None`: this manifest's snapshot.
    fn add(
        &mut self,
        status: ManifestStatus,
        snapshot_id: Option<i64>,
        sequence_number: Option<i64>,
        file_sequence_number: Option<i64>,
        file: &DataFile,
    ) -> Result<()> {
        if file.content_type() != DataContentType::Data {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "data file {} is {:?}, not data: it cannot be listed in a data manifest",
                    file.file_path(),
                    file.content_type()
                ),
            ));
        }
        if status != ManifestStatus::Added
            && (sequence_number.is_none() || file_sequence_number.is_none())
        {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "Manifest entry with status Existing or Deleted should have sequence number",
            ));
        }
        let values = file.partition();
        if values.fields().len() != self.layout.parts.len() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "data file {} has {} partition values; its partition spec {} has {} fields",
                    file.file_path(),
                    values.fields().len(),
                    self.spec_id,
                    self.layout.parts.len()
                ),
            ));
        }
        let rows = file.record_count();
        let counted = match status {
            ManifestStatus::Added => &mut self.added,
            ManifestStatus::Existing => &mut self.existing,
            ManifestStatus::Deleted => &mut self.deleted,
        };
        counted.0 += 1;
        counted.1 += rows;
        if status != ManifestStatus::Deleted
            && let Some(seq) = sequence_number
        {
            self.min_seq = Some(self.min_seq.map_or(seq, |m| m.min(seq)));
        }

        let b = &mut self.block;
        long(b, status as i64);
        opt_long(b, snapshot_id.or(Some(self.snapshot_id)));
        opt_long(b, sequence_number);
        opt_long(b, file_sequence_number);
        long(b, file.content_type() as i64);
        bytes(b, file.file_path().as_bytes());
        bytes(
            b,
            file.file_format()
                .to_string()
                .to_ascii_uppercase()
                .as_bytes(),
        );
        for ((value, (part, _)), stats) in values
            .iter()
            .zip(&self.layout.parts)
            .zip(self.stats.iter_mut())
        {
            let literal = match value {
                None => None,
                Some(v) => Some(v.as_primitive_literal().ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!(
                            "data file {} has a partition value that is not primitive",
                            file.file_path()
                        ),
                    )
                })?),
            };
            match &literal {
                None => long(b, 0),
                Some(l) => {
                    long(b, 1);
                    partition_value(b, *part, l, file.file_path())?;
                }
            }
            stats.update(literal)?;
        }
        long(b, i64::try_from(rows).unwrap_or(i64::MAX));
        long(
            b,
            i64::try_from(file.file_size_in_bytes()).unwrap_or(i64::MAX),
        );
        for counts in [
            file.column_sizes(),
            file.value_counts(),
            file.null_value_counts(),
            file.nan_value_counts(),
        ] {
            long(b, 1);
            pairs(b, counts, |b, v| {
                long(b, i64::try_from(*v).unwrap_or(i64::MAX));
                Ok(())
            })?;
        }
        for bounds in [file.lower_bounds(), file.upper_bounds()] {
            long(b, 1);
            pairs(b, bounds, |b, d| {
                bytes(b, &d.to_bytes()?);
                Ok(())
            })?;
        }
        match file.key_metadata() {
            None => long(b, 0),
            Some(k) => {
                long(b, 1);
                bytes(b, k);
            }
        }
        match file.split_offsets() {
            None => long(b, 0),
            Some(offsets) => {
                long(b, 1);
                array(b, offsets.iter().copied());
            }
        }
        match file.equality_ids() {
            None => long(b, 0),
            Some(ids) => {
                long(b, 1);
                array(b, ids.into_iter().map(i64::from));
            }
        }
        opt_long(b, file.sort_order_id().map(i64::from));
        opt_long(b, file.first_row_id());
        match file.referenced_data_file() {
            None => long(b, 0),
            Some(p) => {
                long(b, 1);
                bytes(b, p.as_bytes());
            }
        }
        opt_long(b, file.content_offset());
        opt_long(b, file.content_size_in_bytes());
        self.entries += 1;
        Ok(())
    }

    async fn finish(self) -> Result<ManifestFile> {
        let header = &self.layout.header;
        let sync = &header[header.len() - 16..];
        let mut file = Vec::with_capacity(header.len() + self.block.len() + 36);
        file.extend_from_slice(header);
        if self.entries > 0 {
            long(&mut file, self.entries);
            long(&mut file, self.block.len() as i64);
            file.extend_from_slice(&self.block);
            file.extend_from_slice(sync);
        }
        let length = file.len() as i64;
        let path = self.out.location().to_string();
        self.out.write(Bytes::from(file)).await?;
        Ok(ManifestFile {
            manifest_path: path,
            manifest_length: length,
            partition_spec_id: self.spec_id,
            content: ManifestContentType::Data,
            // Assigned by the manifest list writer, as for iceberg-rust's writer.
            sequence_number: iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER,
            min_sequence_number: self
                .min_seq
                .unwrap_or(iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER),
            added_snapshot_id: self.snapshot_id,
            added_files_count: Some(self.added.0),
            existing_files_count: Some(self.existing.0),
            deleted_files_count: Some(self.deleted.0),
            added_rows_count: Some(self.added.1),
            existing_rows_count: Some(self.existing.1),
            deleted_rows_count: Some(self.deleted.1),
            partitions: Some(
                self.stats
                    .into_iter()
                    .map(Stats::finish)
                    .collect::<Result<_>>()?,
            ),
            key_metadata: None,
            first_row_id: None,
        })
    }
}

/// A partition field's summary over every entry of the manifest (deleted ones too, as
/// iceberg-rust's and Java's writers count them).
struct Stats {
    ty: PrimitiveType,
    contains_null: bool,
    contains_nan: bool,
    lower: Option<Datum>,
    upper: Option<Datum>,
}

impl Stats {
    fn new(ty: PrimitiveType) -> Stats {
        Stats {
            ty,
            contains_null: false,
            contains_nan: false,
            lower: None,
            upper: None,
        }
    }

    fn update(&mut self, value: Option<PrimitiveLiteral>) -> Result<()> {
        let Some(value) = value else {
            self.contains_null = true;
            return Ok(());
        };
        let Some(value) = datum(&self.ty, value) else {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "a partition value is not of its field's type",
            ));
        };
        if value.is_nan() {
            self.contains_nan = true;
            return Ok(());
        }
        if self.lower.as_ref().is_none_or(|l| value < *l) {
            self.lower = Some(value.clone());
        }
        if self.upper.as_ref().is_none_or(|u| value > *u) {
            self.upper = Some(value);
        }
        Ok(())
    }

    fn finish(self) -> Result<FieldSummary> {
        Ok(FieldSummary {
            contains_null: self.contains_null,
            contains_nan: Some(self.contains_nan),
            lower_bound: self.lower.map(|d| d.to_bytes()).transpose()?,
            upper_bound: self.upper.map(|d| d.to_bytes()).transpose()?,
        })
    }
}

/// `v` as a value of type `ty` (`None` when it is not one).
fn datum(ty: &PrimitiveType, v: PrimitiveLiteral) -> Option<Datum> {
    use PrimitiveLiteral as L;
    use PrimitiveType as P;
    Some(match (ty, v) {
        (P::Boolean, L::Boolean(b)) => Datum::bool(b),
        (P::Int, L::Int(i)) => Datum::int(i),
        (P::Date, L::Int(i)) => Datum::date(i),
        (P::Long, L::Long(l)) => Datum::long(l),
        (P::Time, L::Long(l)) => Datum::time_micros(l).ok()?,
        (P::Timestamp, L::Long(l)) => Datum::timestamp_micros(l),
        (P::Timestamptz, L::Long(l)) => Datum::timestamptz_micros(l),
        (P::TimestampNs, L::Long(l)) => Datum::timestamp_nanos(l),
        (P::TimestamptzNs, L::Long(l)) => Datum::timestamptz_nanos(l),
        (P::Float, L::Float(f)) => Datum::float(f.0),
        (P::Double, L::Double(d)) => Datum::double(d.0),
        (P::String, L::String(s)) => Datum::string(s),
        (P::Binary, L::Binary(b)) => Datum::binary(b),
        _ => return None,
    })
}

/// An Avro long (or int): zig-zag, then 7 bits a byte, low bits first.
fn long(b: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        b.push((n as u8) | 0x80);
        n >>= 7;
    }
    b.push(n as u8);
}

fn opt_long(b: &mut Vec<u8>, v: Option<i64>) {
    match v {
        None => long(b, 0),
        Some(v) => {
            long(b, 1);
            long(b, v);
        }
    }
}

fn bytes(b: &mut Vec<u8>, v: &[u8]) {
    long(b, v.len() as i64);
    b.extend_from_slice(v);
}

/// An Avro array of longs (or ints): one block, then the empty block that ends it.
fn array(b: &mut Vec<u8>, items: impl ExactSizeIterator<Item = i64>) {
    if items.len() > 0 {
        long(b, items.len() as i64);
        for v in items {
            long(b, v);
        }
    }
    long(b, 0);
}

/// An Iceberg map with int keys, as Avro writes it: an array of key/value records.
fn pairs<V>(
    b: &mut Vec<u8>,
    map: &HashMap<i32, V>,
    mut value: impl FnMut(&mut Vec<u8>, &V) -> Result<()>,
) -> Result<()> {
    if !map.is_empty() {
        long(b, map.len() as i64);
        for (k, v) in map {
            long(b, i64::from(*k));
            value(b, v)?;
        }
    }
    long(b, 0);
    Ok(())
}

fn partition_value(b: &mut Vec<u8>, part: Part, v: &PrimitiveLiteral, path: &str) -> Result<()> {
    match (part, v) {
        (Part::Boolean, PrimitiveLiteral::Boolean(x)) => b.push(u8::from(*x)),
        (Part::Int, PrimitiveLiteral::Int(x)) => long(b, i64::from(*x)),
        (Part::Long, PrimitiveLiteral::Long(x)) => long(b, *x),
        (Part::Float, PrimitiveLiteral::Float(x)) => b.extend_from_slice(&x.0.to_le_bytes()),
        (Part::Double, PrimitiveLiteral::Double(x)) => b.extend_from_slice(&x.0.to_le_bytes()),
        (Part::Bytes, PrimitiveLiteral::String(s)) => bytes(b, s.as_bytes()),
        (Part::Bytes, PrimitiveLiteral::Binary(x)) => bytes(b, x),
        _ => {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("data file {path} has a partition value {v:?} not of its field's type"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, Literal, Manifest, NestedField, Schema, Struct, Transform,
        UnboundPartitionField,
    };

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "region", Type::Primitive(PrimitiveType::String))
                        .into(),
                    NestedField::required(3, "at", Type::Primitive(PrimitiveType::Timestamptz))
                        .into(),
                    NestedField::optional(4, "ok", Type::Primitive(PrimitiveType::Boolean)).into(),
                ])
                .build()
                .expect("schema"),
        )
    }

    fn spec(schema: &SchemaRef) -> PartitionSpec {
        let field = |source: i32, id: i32, name: &str, t: Transform| UnboundPartitionField {
            source_id: source,
            field_id: Some(id),
            name: name.to_string(),
            transform: t,
        };
        PartitionSpec::builder(schema.clone())
            .with_spec_id(3)
            .add_unbound_fields([
                field(2, 1000, "region", Transform::Identity),
                field(3, 1001, "at_day", Transform::Day),
                field(4, 1002, "ok", Transform::Identity),
                field(1, 1003, "id_bucket", Transform::Bucket(4)),
            ])
            .expect("fields")
            .build()
            .expect("spec")
    }

    fn file(n: i64, region: Option<&str>, day: Option<i32>) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("file:///w/t/data/{n}.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::from_iter([
                region.map(Literal::string),
                day.map(Literal::date),
                Some(Literal::bool(n % 2 == 0)),
                Some(Literal::int((n % 4) as i32)),
            ]))
            .partition_spec_id(3)
            .record_count(100 + n as u64)
            .file_size_in_bytes(4_000 + n as u64)
            .column_sizes(HashMap::from([(1, 800), (2, 1_200)]))
            .value_counts(HashMap::from([(1, 100), (2, 100)]))
            .null_value_counts(HashMap::from([(2, n as u64)]))
            .lower_bounds(HashMap::from([
                (1, Datum::long(n)),
                (2, Datum::string("a")),
            ]))
            .upper_bounds(HashMap::from([
                (1, Datum::long(n + 99)),
                (2, Datum::string("zz")),
            ]))
            .split_offsets(Some(vec![4, 2_000 + n]))
            .key_metadata((n == 2).then(|| vec![7u8, 8, 9]))
            .sort_order_id(0)
            .build()
            .expect("data file")
    }

    /// One manifest written with `layout` (lake's encoder) or without (iceberg-rust's writer):
    /// an added, two existing (one partition value null) and a deleted entry.
    async fn write(io: &FileIO, path: &str, layout: Option<&Arc<Layout>>) -> ManifestFile {
        let schema = schema();
        let spec = spec(&schema);
        let mut m = NewManifest::new(
            io.new_output(path).expect("out"),
            42,
            &schema,
            &spec,
            layout,
        );
        assert_eq!(matches!(m, NewManifest::Ours(_)), layout.is_some());
        m.add_file(&file(1, Some("east"), Some(20_300)), -1)
            .expect("add");
        m.add_existing_file(&file(2, None, Some(20_290)), 7, 3, Some(3))
            .expect("existing");
        m.add_existing_file(&file(3, Some("west"), None), 8, 5, Some(4))
            .expect("existing");
        m.add_delete_file(&file(4, Some("north"), Some(20_310)), 2, Some(2))
            .expect("delete");
        m.write_manifest_file().await.expect("write")
    }

    #[tokio::test]
    async fn a_manifest_encoded_here_is_the_one_iceberg_rust_writes() {
        let schema = schema();
        let layout = Layout::new(&schema, &spec(&schema))
            .await
            .expect("layout")
            .map(Arc::new);
        assert!(
            layout.is_some(),
            "string, date, boolean and int partitions are written here"
        );
        let io = FileIO::new_with_memory();
        let ours = write(&io, "memory:///m/ours.avro", layout.as_ref()).await;
        let theirs = write(&io, "memory:///m/theirs.avro", None).await;
        // The same manifest list entry: counts, rows, sequence numbers, partition summaries.
        assert_eq!(ours.added_files_count, Some(1));
        assert_eq!(ours.existing_files_count, Some(2));
        assert_eq!(ours.deleted_files_count, Some(1));
        assert_eq!(ours.min_sequence_number, 3);
        let same_path = ManifestFile {
            manifest_path: theirs.manifest_path.clone(),
            manifest_length: theirs.manifest_length,
            ..ours.clone()
        };
        assert_eq!(same_path, theirs);
        // The same entries, read back by iceberg-rust's parser.
        let read = |p: &'static str| {
            let io = io.clone();
            async move {
                let bytes = io.new_input(p).expect("in").read().await.expect("read");
                Manifest::parse_avro(&bytes).expect("parse")
            }
        };
        let (a, b) = (
            read("memory:///m/ours.avro").await,
            read("memory:///m/theirs.avro").await,
        );
        assert_eq!(a.metadata(), b.metadata());
        assert_eq!(a.entries(), b.entries());
        assert_eq!(a.entries().len(), 4);
        assert_eq!(
            a.entries()[3].data_file().key_metadata(),
            None,
            "the deleted entry's file had none"
        );
        assert_eq!(
            a.entries()[1].data_file().key_metadata(),
            Some(&[7u8, 8, 9][..])
        );
    }

    #[tokio::test]
    async fn an_empty_manifest_is_a_header_alone_and_a_decimal_partition_goes_to_iceberg_rust() {
        let schema = schema();
        let spec = spec(&schema);
        let layout = Layout::new(&schema, &spec)
            .await
            .expect("layout")
            .map(Arc::new);
        let io = FileIO::new_with_memory();
        let out = io.new_output("memory:///m/empty.avro").expect("out");
        let empty = NewManifest::new(out, 1, &schema, &spec, layout.as_ref())
            .write_manifest_file()
            .await
            .expect("write");
        let bytes = io
            .new_input("memory:///m/empty.avro")
            .expect("in")
            .read()
            .await
            .expect("read");
        assert!(
            Manifest::parse_avro(&bytes)
                .expect("parse")
                .entries()
                .is_empty()
        );
        assert_eq!(empty.added_files_count, Some(0));

        let decimal = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(
                        1,
                        "price",
                        Type::Primitive(PrimitiveType::Decimal {
                            precision: 10,
                            scale: 2,
                        }),
                    )
                    .into(),
                ])
                .build()
                .expect("schema"),
        );
        let by_price = PartitionSpec::builder(decimal.clone())
            .add_partition_field("price", "price", Transform::Identity)
            .expect("field")
            .build()
            .expect("spec");
        assert!(
            Layout::new(&decimal, &by_price)
                .await
                .expect("layout")
                .is_none()
        );
    }

    /// Two files in a manifest of identity partitions on timestamptz, timestamp, time and (when
    /// `double`) double columns, written here and by iceberg-rust: both read back by
    /// iceberg-rust and by lake's decoder (which hands a double partition to iceberg-rust) to
    /// the same entries, with the same partition summaries.
    async fn round_trip(double: bool) {
        let prim = |id: i32, name: &str, p: PrimitiveType| -> iceberg::spec::NestedFieldRef {
            NestedField::optional(id, name, Type::Primitive(p)).into()
        };
        let mut fields = vec![
            prim(1, "at", PrimitiveType::Timestamptz),
            prim(2, "local", PrimitiveType::Timestamp),
            prim(3, "clock", PrimitiveType::Time),
        ];
        if double {
            fields.push(prim(4, "weight", PrimitiveType::Double));
        }
        let names: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
        let schema: SchemaRef = Arc::new(
            Schema::builder()
                .with_fields(fields)
                .build()
                .expect("schema"),
        );
        let mut spec = PartitionSpec::builder(schema.clone()).with_spec_id(1);
        for name in &names {
            spec = spec
                .add_partition_field(name, name, Transform::Identity)
                .expect("field");
        }
        let spec = spec.build().expect("spec");
        let layout = Layout::new(&schema, &spec)
            .await
            .expect("layout")
            .map(Arc::new);
        assert!(layout.is_some());
        let io = FileIO::new_with_memory();
        let mut read = Vec::new();
        for (path, layout) in [
            ("memory:///m/t-ours.avro", layout.as_ref()),
            ("memory:///m/t-theirs.avro", None),
        ] {
            let mut m =
                NewManifest::new(io.new_output(path).expect("out"), 9, &schema, &spec, layout);
            for (n, at) in [(1i64, 1_790_000_000_000_000i64), (2, -86_400_000_001)] {
                let mut values = vec![
                    Some(Literal::timestamptz(at)),
                    (n == 1).then(|| Literal::timestamp(at + 1)),
                    Some(Literal::time(43_200_000_000 + n)),
                ];
                if double {
                    values.push(Some(Literal::double(-0.5 * n as f64)));
                }
                let f = DataFileBuilder::default()
                    .content(DataContentType::Data)
                    .file_path(format!("file:///w/t/data/t{n}.parquet"))
                    .file_format(DataFileFormat::Parquet)
                    .partition(Struct::from_iter(values))
                    .partition_spec_id(1)
                    .record_count(n as u64)
                    .file_size_in_bytes(10)
                    .build()
                    .expect("data file");
                m.add_existing_file(&f, 4, 2, Some(2)).expect("existing");
            }
            let mf = m.write_manifest_file().await.expect("write");
            let bytes = io.new_input(path).expect("in").read().await.expect("read");
            let theirs = mf.load_manifest(&io).await.expect("iceberg-rust reads it");
            let headers = crate::manifest::Headers::default();
            assert_eq!(
                crate::manifest::decodes_here(&bytes, &headers),
                !double,
                "{path}: lake's decoder reads it unless a partition is a double"
            );
            let here = crate::manifest::parse(&bytes, &mf, &headers).expect("lake reads it");
            assert_eq!(here, theirs, "{path}");
            read.push((mf, theirs));
        }
        assert_eq!(read[0].1.entries(), read[1].1.entries());
        assert_eq!(read[0].1.entries().len(), 2);
        assert_eq!(read[0].0.partitions, read[1].0.partitions);
    }

    #[tokio::test]
    async fn time_and_timestamp_partitions_round_trip_through_both_decoders() {
        round_trip(false).await;
        round_trip(true).await;
    }

    #[test]
    fn a_header_not_laid_out_as_expected_is_not_trusted() {
        assert!(!header_fits(b"Obj\x01\x00", 0), "no sync marker");
        assert!(!header_fits(b"not avro at all", 0));
    }
}
