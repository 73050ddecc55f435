//! Manifests parsed without reading the same header twice.
//!
//! A manifest is an Avro file whose header carries two large JSON documents: the Avro schema
//! of its entries and the table schema it was written under (plus the partition spec). Every
//! manifest a table writes between two schema changes carries the same header, and
//! iceberg-rust parses it afresh for each file, twice for the Avro schema (once to read the
//! file, once to resolve it against its own reader schema). On a table with a season of
//! history that header work was two thirds of the time spent parsing manifests.
//!
//! [`Headers`] keeps the parsed Avro schemas (compiled into [`Node`]s) and manifest metadata of
//! one catalog handle, keyed by their bytes, and [`parse`] decodes the entries against them
//! directly: strings and bytes borrowed from the block, fields found by name, no generic Avro
//! value built and taken apart for each entry. Anything this
//! decoder does not know — a codec other than null or deflate, a v1 manifest, a partition
//! value of an unusual type, an entry of an unexpected shape, bytes that do not decode — is
//! handed whole to iceberg-rust's own parser, so the answer (or the error) is always the one
//! iceberg-rust gives; the tests below hold the two to the same result.
//!
//! Manifest lists go the same way ([`parse_list`]): iceberg-rust reads each through apache-avro's
//! generic reader (its schema parsed from the header, every entry built as a generic value and
//! then deserialised), about half a million instructions a list however few entries it has,
//! and a run reads dozens of lists. Here a format-v2 list is decoded against its compiled
//! schema like a manifest; anything else goes to iceberg-rust.

use std::borrow::{Borrow, Cow};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use apache_avro::{Codec, DeflateSettings, Schema as AvroSchema};
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, FieldSummary, FormatVersion, Literal,
    Manifest, ManifestContentType, ManifestEntry, ManifestFile, ManifestList, ManifestMetadata,
    ManifestStatus, PrimitiveLiteral, PrimitiveType, Schema, Struct, StructType, Type,
};
use serde_bytes::ByteBuf;

/// Values a [`Memo`] keeps before it is emptied and starts again (manifest headers and the
/// Arrow schemas of data-file footers: a lake holds a few dozen tables and each changes its
/// schema rarely).
const KEEP: usize = 256;

/// The metadata keys [`ManifestMetadata::parse`] reads, in a fixed order.
const META_KEYS: [&str; 6] = [
    "schema",
    "schema-id",
    "partition-spec",
    "partition-spec-id",
    "format-version",
    "content",
];

/// The metadata of a manifest header and the partition type it implies.
struct Meta {
    metadata: ManifestMetadata,
    partition_type: StructType,
}

/// Parsed manifest headers, keyed by their bytes (files never change once written, and a
/// header's bytes determine what it parses to).
#[derive(Default)]
pub(crate) struct Headers {
    /// Each Avro schema compiled for [`read`]; `None` when it holds a type this decoder does
    /// not read (its manifests go to iceberg-rust).
    schemas: Memo<Vec<u8>, Option<Node>>,
    metas: Memo<MetaKey, Meta>,
}

/// The values of [`META_KEYS`] in a header, those it has.
type MetaKey = Vec<Option<Vec<u8>>>;

impl Headers {
    fn schema(&self, bytes: &[u8]) -> Result<Arc<Option<Node>>, Decline> {
        if let Some(s) = self.schemas.get(bytes) {
            return Ok(s);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| Decline)?;
        let schema = AvroSchema::parse_str(text).map_err(|_| Decline)?;
        Ok(self
            .schemas
            .keep(bytes.to_vec(), Node::compile(&schema).ok()))
    }

    fn meta(&self, header: &[(&str, &[u8])]) -> Result<Arc<Meta>, Decline> {
        let key: MetaKey = META_KEYS
            .iter()
            .map(|k| lookup(header, k).map(<[u8]>::to_vec))
            .collect();
        if let Some(m) = self.metas.get(&key) {
            return Ok(m);
        }
        let fields: HashMap<String, Vec<u8>> = META_KEYS
            .iter()
            .zip(&key)
            .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
            .collect();
        let metadata = ManifestMetadata::parse(&fields).map_err(|_| Decline)?;
        let partition_type = metadata
            .partition_spec
            .partition_type(&metadata.schema)
            .map_err(|_| Decline)?;
        let meta = Meta {
            metadata,
            partition_type,
        };
        Ok(self.metas.keep(key, meta))
    }
}

/// Parsed values by key, at most [`KEEP`] of them: a full map is emptied and starts again.
pub(crate) struct Memo<K, V>(Mutex<HashMap<K, Arc<V>>>);

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K: Hash + Eq, V> Memo<K, V> {
    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
    {
        self.lock().get(key).cloned()
    }

    pub(crate) fn keep(&self, key: K, value: V) -> Arc<V> {
        let value = Arc::new(value);
        let mut map = self.lock();
        if map.len() >= KEEP {
            map.clear();
        }
        map.insert(key, value.clone());
        value
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Arc<V>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

fn lookup<'a>(header: &[(&str, &'a [u8])], key: &str) -> Option<&'a [u8]> {
    header.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// This decoder does not handle the file; iceberg-rust's parser will.
#[derive(Debug)]
struct Decline;

/// The manifest in `bytes`, which `mf` names, its entries' snapshot ids and sequence numbers
/// inherited from `mf` as iceberg-rust's `ManifestFile::load_manifest` does. `mf` must not be
/// encrypted (the caller loads those through iceberg-rust).
pub(crate) fn parse(
    bytes: &[u8],
    mf: &ManifestFile,
    headers: &Headers,
) -> iceberg::Result<Manifest> {
    let (metadata, mut entries) = match decode(bytes, headers) {
        Ok(parts) => parts,
        Err(Decline) => {
            let (entries, metadata) = Manifest::parse_avro(bytes)?.into_parts();
            let entries = entries.into_iter().map(Arc::unwrap_or_clone).collect();
            (metadata, entries)
        }
    };
    for entry in &mut entries {
        inherit(entry, mf);
    }
    Ok(Manifest::new(metadata, entries))
}

/// The entries of the manifest list in `bytes`, of a table of format `version`, as
/// iceberg-rust's `ManifestList::parse_with_version` gives them. A format-v2 list is decoded
/// here (iceberg-rust's generic Avro reader took about half a million instructions a list,
/// however few its entries: a run reads dozens); any other, and any this decoder declines, is
/// handed whole to iceberg-rust, so the answer (or the error) is always the one it gives.
pub(crate) fn parse_list(
    bytes: &[u8],
    version: FormatVersion,
    headers: &Headers,
) -> iceberg::Result<Vec<ManifestFile>> {
    if version == FormatVersion::V2
        && let Ok(entries) = decode_list(bytes, headers)
    {
        return Ok(entries);
    }
    Ok(ManifestList::parse_with_version(bytes, version)?
        .consume_entries()
        .into_iter()
        .collect())
}

fn decode_list(bytes: &[u8], headers: &Headers) -> Result<Vec<ManifestFile>, Decline> {
    Container::open(bytes, headers)?.records(list_entry)
}

/// A manifest list's entry as iceberg-rust's format-v2 serde struct reads it: fields by name
/// (a count under its v1 name too), `content` and the sequence numbers 0 when the writer left
/// them out. A field it would reject (null where a value is required, both names of a count,
/// a negative count) is declined, for iceberg-rust to report.
fn list_entry(mut rec: Record) -> Result<ManifestFile, Decline> {
    let content = ManifestContentType::try_from(rec.int_or("content", 0)?).map_err(|_| Decline)?;
    Ok(ManifestFile {
        manifest_path: string(rec.required("manifest_path")?)?,
        manifest_length: long(rec.required("manifest_length")?)?,
        partition_spec_id: rec.int("partition_spec_id")?.ok_or(Decline)?,
        content,
        sequence_number: rec.long_or("sequence_number", 0)?,
        min_sequence_number: rec.long_or("min_sequence_number", 0)?,
        added_snapshot_id: long(rec.required("added_snapshot_id")?)?,
        added_files_count: Some(files(
            &mut rec,
            "added_files_count",
            "added_data_files_count",
        )?),
        existing_files_count: Some(files(
            &mut rec,
            "existing_files_count",
            "existing_data_files_count",
        )?),
        deleted_files_count: Some(files(
            &mut rec,
            "deleted_files_count",
            "deleted_data_files_count",
        )?),
        added_rows_count: Some(count(rec.required("added_rows_count")?)?),
        existing_rows_count: Some(count(rec.required("existing_rows_count")?)?),
        deleted_rows_count: Some(count(rec.required("deleted_rows_count")?)?),
        partitions: rec
            .take("partitions")
            .map(|v| array(Some(v))?.into_iter().map(summary).collect())
            .transpose()?,
        key_metadata: rec.take("key_metadata").map(bytes).transpose()?,
        first_row_id: None,
    })
}

/// A list entry's file count `name`, or the same count under its v1 name `v1` (both at once
/// is declined, as iceberg-rust's serde rejects a duplicate field).
fn files(rec: &mut Record, name: &str, v1: &str) -> Result<u32, Decline> {
    let name = match (rec.has(name), rec.has(v1)) {
        (true, false) => name,
        (false, true) => v1,
        _ => return Err(Decline),
    };
    u32::try_from(rec.int(name)?.ok_or(Decline)?).map_err(|_| Decline)
}

/// A partition field's summary in a manifest list.
fn summary(value: V) -> Result<FieldSummary, Decline> {
    let mut rec = Record::of(value)?;
    let contains_null = match rec.required("contains_null")? {
        V::Bool(b) => b,
        _ => return Err(Decline),
    };
    let contains_nan = match rec.take("contains_nan") {
        None => None,
        Some(V::Bool(b)) => Some(b),
        Some(_) => return Err(Decline),
    };
    let mut bound = |name| rec.take(name).map(bytes).transpose();
    Ok(FieldSummary {
        contains_null,
        contains_nan,
        lower_bound: bound("lower_bound")?.map(ByteBuf::from),
        upper_bound: bound("upper_bound")?.map(ByteBuf::from),
    })
}

/// True when this decoder reads `bytes` itself (does not hand it to iceberg-rust).
#[cfg(test)]
pub(crate) fn decodes_here(bytes: &[u8], headers: &Headers) -> bool {
    decode(bytes, headers).is_ok()
}

/// What the manifest list says of an entry whose manifest leaves it out (as iceberg-rust's
/// `ManifestEntry::inherit_data`, which is not public).
fn inherit(entry: &mut ManifestEntry, mf: &ManifestFile) {
    if entry.snapshot_id.is_none() {
        entry.snapshot_id = Some(mf.added_snapshot_id);
    }
    let inherits = entry.status == ManifestStatus::Added || mf.sequence_number == 0;
    if entry.sequence_number.is_none() && inherits {
        entry.sequence_number = Some(mf.sequence_number);
    }
    if entry.file_sequence_number.is_none() && inherits {
        entry.file_sequence_number = Some(mf.sequence_number);
    }
}

/// The Avro object container's magic bytes.
const MAGIC: &[u8] = b"Obj\x01";

fn decode(
    bytes: &[u8],
    headers: &Headers,
) -> Result<(ManifestMetadata, Vec<ManifestEntry>), Decline> {
    let container = Container::open(bytes, headers)?;
    let meta = headers.meta(&container.header)?;
    if meta.metadata.format_version == FormatVersion::V1 {
        return Err(Decline);
    }
    let spec_id = meta.metadata.partition_spec.spec_id();
    let entries = container.records(|rec| entry(rec, &meta, spec_id))?;
    Ok((meta.metadata.clone(), entries))
}

/// An Avro object container file: its header's metadata, its schema (compiled once per
/// [`Headers`]), and the blocks of records after them.
struct Container<'a> {
    header: Vec<(&'a str, &'a [u8])>,
    node: Arc<Option<Node>>,
    codec: Codec,
    sync: &'a [u8],
    blocks: &'a [u8],
}

impl<'a> Container<'a> {
    /// The container in `bytes`, declined when its codec is other than null or deflate.
    fn open(bytes: &'a [u8], headers: &Headers) -> Result<Self, Decline> {
        let mut buf = bytes.strip_prefix(MAGIC).ok_or(Decline)?;
        let header = read_header(&mut buf)?;
        let sync = take(&mut buf, 16)?;
        let codec = match lookup(&header, "avro.codec") {
            None | Some(b"null") => Codec::Null,
            Some(b"deflate") => Codec::Deflate(DeflateSettings::default()),
            Some(_) => return Err(Decline),
        };
        let node = headers.schema(lookup(&header, "avro.schema").ok_or(Decline)?)?;
        Ok(Container {
            header,
            node,
            codec,
            sync,
            blocks: buf,
        })
    }

    /// What `each` makes of each record, in order. A schema other than a record's, or a block
    /// that does not decode whole, is declined.
    fn records<T>(
        &self,
        mut each: impl FnMut(Record<'_, '_>) -> Result<T, Decline>,
    ) -> Result<Vec<T>, Decline> {
        let Some(Node::Record(fields)) = self.node.as_ref() else {
            return Err(Decline);
        };
        let mut out = Vec::new();
        let mut buf = self.blocks;
        while !buf.is_empty() {
            let count = usize::try_from(read_long(&mut buf)?).map_err(|_| Decline)?;
            let size = usize::try_from(read_long(&mut buf)?).map_err(|_| Decline)?;
            let raw = take(&mut buf, size)?;
            if take(&mut buf, 16)? != self.sync {
                return Err(Decline);
            }
            let block = match self.codec {
                Codec::Null => Cow::Borrowed(raw),
                codec => {
                    let mut block = raw.to_vec();
                    codec.decompress(&mut block).map_err(|_| Decline)?;
                    Cow::Owned(block)
                }
            };
            // Every record takes at least a byte: a count beyond the block's bytes is damage
            // (and reserving it could overflow or exhaust memory), for iceberg-rust to report.
            if count > block.len() {
                return Err(Decline);
            }
            let mut data = &block[..];
            out.reserve(count);
            for _ in 0..count {
                out.push(each(read_record(fields, &mut data)?)?);
            }
            if !data.is_empty() {
                return Err(Decline);
            }
        }
        Ok(out)
    }
}

/// The metadata map of `file`, an Avro container holding a header and nothing else (its sync
/// marker the last 16 bytes); `None` when it is not one.
pub(crate) fn container_header(file: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut buf = file.strip_prefix(MAGIC)?;
    let header = read_header(&mut buf).ok()?;
    (buf.len() == 16).then(|| {
        header
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    })
}

/// The container header's metadata map: blocks of (key, value) pairs, a negative count
/// followed by the block's size in bytes, a zero count ending it.
fn read_header<'a>(buf: &mut &'a [u8]) -> Result<Vec<(&'a str, &'a [u8])>, Decline> {
    let mut pairs = Vec::new();
    loop {
        let count = read_long(buf)?;
        if count == 0 {
            return Ok(pairs);
        }
        if count < 0 {
            read_long(buf)?;
        }
        for _ in 0..count.unsigned_abs() {
            let key = std::str::from_utf8(read_bytes(buf)?).map_err(|_| Decline)?;
            pairs.push((key, read_bytes(buf)?));
        }
    }
}

/// An Avro long: a zig-zag encoded variable-length integer.
fn read_long(buf: &mut &[u8]) -> Result<i64, Decline> {
    let mut n: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first().ok_or(Decline)?;
        *buf = rest;
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(((n >> 1) as i64) ^ -((n & 1) as i64));
        }
    }
    Err(Decline)
}

fn read_bytes<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], Decline> {
    let len = usize::try_from(read_long(buf)?).map_err(|_| Decline)?;
    take(buf, len)
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], Decline> {
    if buf.len() < len {
        return Err(Decline);
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

/// An Avro schema compiled for decoding: how each value's bytes are laid out, and which
/// values this decoder reads. Logical types keep their kind where a partition value tells
/// them apart, as apache-avro's `Value` does.
#[derive(Debug)]
enum Node {
    Null,
    Boolean,
    Int,
    Date,
    Long,
    /// A time of day in microseconds.
    TimeMicros,
    /// A timestamp in microseconds (with or without a zone).
    TimestampMicros,
    Bytes,
    String,
    /// An int this decoder skips (an enum's index, a time in milliseconds).
    OtherInt,
    /// A long this decoder skips (timestamps in milli- or nanoseconds).
    OtherLong,
    Float,
    Double,
    Fixed(usize),
    Union(Vec<Node>),
    Array(Box<Node>),
    /// An array of records of exactly a `key` and a `value` (how Iceberg writes a map whose
    /// keys are not strings: counts and bounds by field id), read as pairs.
    Pairs {
        key: Box<Node>,
        value: Box<Node>,
        key_first: bool,
    },
    Map(Box<Node>),
    Record(Vec<(String, Node)>),
}

impl Node {
    /// The node for `schema`; a type whose bytes this decoder does not lay out (a decimal, a
    /// uuid, a duration, a named reference) declines the whole schema.
    fn compile(schema: &AvroSchema) -> Result<Node, Decline> {
        use AvroSchema as S;
        Ok(match schema {
            S::Null => Node::Null,
            S::Boolean => Node::Boolean,
            S::Int => Node::Int,
            S::Date => Node::Date,
            S::Long => Node::Long,
            S::TimeMicros => Node::TimeMicros,
            S::TimestampMicros | S::LocalTimestampMicros => Node::TimestampMicros,
            S::Bytes => Node::Bytes,
            S::String => Node::String,
            S::Enum(_) | S::TimeMillis => Node::OtherInt,
            S::TimestampMillis
            | S::TimestampNanos
            | S::LocalTimestampMillis
            | S::LocalTimestampNanos => Node::OtherLong,
            S::Float => Node::Float,
            S::Double => Node::Double,
            S::Fixed(f) => Node::Fixed(f.size),
            S::Union(u) => Node::Union(
                u.variants()
                    .iter()
                    .map(Node::compile)
                    .collect::<Result<_, _>>()?,
            ),
            S::Array(a) => match a.items.as_ref() {
                S::Record(r)
                    if r.fields.len() == 2
                        && r.fields.iter().any(|f| f.name == "key")
                        && r.fields.iter().any(|f| f.name == "value") =>
                {
                    let key_first = r.fields[0].name == "key";
                    let (k, v) = if key_first { (0, 1) } else { (1, 0) };
                    Node::Pairs {
                        key: Box::new(Node::compile(&r.fields[k].schema)?),
                        value: Box::new(Node::compile(&r.fields[v].schema)?),
                        key_first,
                    }
                }
                items => Node::Array(Box::new(Node::compile(items)?)),
            },
            S::Map(m) => Node::Map(Box::new(Node::compile(&m.types)?)),
            S::Record(r) => Node::Record(
                r.fields
                    .iter()
                    .map(|f| Ok((f.name.clone(), Node::compile(&f.schema)?)))
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(Decline),
        })
    }
}

/// A value [`read`] decoded: scalars borrowed from the block, a record's values in the order
/// of its schema's fields, which it carries (so a record read through a union knows its
/// fields).
#[derive(Debug)]
enum V<'n, 'a> {
    Null,
    Bool(bool),
    Int(i32),
    Date(i32),
    Long(i64),
    TimeMicros(i64),
    TimestampMicros(i64),
    Bytes(&'a [u8]),
    Str(&'a str),
    /// A value of a type no field this decoder reads has (skipped, not kept).
    Other,
    Array(Vec<V<'n, 'a>>),
    /// The keys and values of a [`Node::Pairs`].
    Pairs(Vec<(V<'n, 'a>, V<'n, 'a>)>),
    Record(Record<'n, 'a>),
}

/// The value `node` lays out at the front of `buf`.
fn read<'n, 'a>(node: &'n Node, buf: &mut &'a [u8]) -> Result<V<'n, 'a>, Decline> {
    Ok(match node {
        Node::Null => V::Null,
        Node::Boolean => match take(buf, 1)? {
            [0] => V::Bool(false),
            [1] => V::Bool(true),
            _ => return Err(Decline),
        },
        Node::Int => V::Int(read_int(buf)?),
        Node::Date => V::Date(read_int(buf)?),
        Node::Long => V::Long(read_long(buf)?),
        Node::TimeMicros => V::TimeMicros(read_long(buf)?),
        Node::TimestampMicros => V::TimestampMicros(read_long(buf)?),
        Node::Bytes => V::Bytes(read_bytes(buf)?),
        Node::String => V::Str(std::str::from_utf8(read_bytes(buf)?).map_err(|_| Decline)?),
        Node::OtherInt => {
            read_int(buf)?;
            V::Other
        }
        Node::OtherLong => {
            read_long(buf)?;
            V::Other
        }
        Node::Float => {
            take(buf, 4)?;
            V::Other
        }
        Node::Double => {
            take(buf, 8)?;
            V::Other
        }
        Node::Fixed(n) => {
            take(buf, *n)?;
            V::Other
        }
        Node::Union(variants) => {
            let i = usize::try_from(read_long(buf)?).map_err(|_| Decline)?;
            read(variants.get(i).ok_or(Decline)?, buf)?
        }
        Node::Array(item) => {
            let mut items = Vec::new();
            blocks(buf, |buf| {
                items.push(read(item, buf)?);
                Ok(())
            })?;
            V::Array(items)
        }
        Node::Pairs {
            key,
            value,
            key_first,
        } => {
            let mut pairs = Vec::new();
            blocks(buf, |buf| {
                pairs.push(if *key_first {
                    let k = read(key, buf)?;
                    (k, read(value, buf)?)
                } else {
                    let v = read(value, buf)?;
                    (read(key, buf)?, v)
                });
                Ok(())
            })?;
            V::Pairs(pairs)
        }
        Node::Map(value) => {
            blocks(buf, |buf| {
                read_bytes(buf)?;
                read(value, buf).map(drop)
            })?;
            V::Other
        }
        Node::Record(fields) => V::Record(read_record(fields, buf)?),
    })
}

fn read_record<'n, 'a>(
    fields: &'n [(String, Node)],
    buf: &mut &'a [u8],
) -> Result<Record<'n, 'a>, Decline> {
    let values = fields
        .iter()
        .map(|(_, node)| read(node, buf))
        .collect::<Result<_, _>>()?;
    Ok(Record { fields, values })
}

/// An array's or map's items: blocks of a count (negative: followed by the block's size in
/// bytes) and that many items, a zero count ending them. A count larger than the bytes left
/// is declined: every item of a manifest takes at least a byte.
fn blocks<'a>(
    buf: &mut &'a [u8],
    mut item: impl FnMut(&mut &'a [u8]) -> Result<(), Decline>,
) -> Result<(), Decline> {
    loop {
        let count = read_long(buf)?;
        if count == 0 {
            return Ok(());
        }
        if count < 0 {
            read_long(buf)?;
        }
        if count.unsigned_abs() > buf.len() as u64 {
            return Err(Decline);
        }
        for _ in 0..count.unsigned_abs() {
            item(buf)?;
        }
    }
}

/// An Avro int: a long that fits 32 bits.
fn read_int(buf: &mut &[u8]) -> Result<i32, Decline> {
    i32::try_from(read_long(buf)?).map_err(|_| Decline)
}

/// A decoded record's fields, by name (a writer may order them as it likes or leave optional
/// ones out).
#[derive(Debug)]
struct Record<'n, 'a> {
    fields: &'n [(String, Node)],
    values: Vec<V<'n, 'a>>,
}

impl<'n, 'a> Record<'n, 'a> {
    /// The record `value` is.
    fn of(value: V<'n, 'a>) -> Result<Self, Decline> {
        match value {
            V::Record(record) => Ok(record),
            _ => Err(Decline),
        }
    }

    /// The field's value, `None` when the writer left it out or wrote null.
    fn take(&mut self, name: &str) -> Option<V<'n, 'a>> {
        let i = self.fields.iter().position(|(n, _)| n == name)?;
        match std::mem::replace(&mut self.values[i], V::Null) {
            V::Null => None,
            value => Some(value),
        }
    }

    /// Whether the writer's schema has the field (its value may still be null).
    fn has(&self, name: &str) -> bool {
        self.fields.iter().any(|(n, _)| n == name)
    }

    /// The field's long, `default` when the writer's schema leaves the field out; a null is
    /// declined.
    fn long_or(&mut self, name: &str, default: i64) -> Result<i64, Decline> {
        if !self.has(name) {
            return Ok(default);
        }
        self.long(name)?.ok_or(Decline)
    }

    /// [`Record::long_or`] for an int.
    fn int_or(&mut self, name: &str, default: i32) -> Result<i32, Decline> {
        if !self.has(name) {
            return Ok(default);
        }
        self.int(name)?.ok_or(Decline)
    }

    fn required(&mut self, name: &str) -> Result<V<'n, 'a>, Decline> {
        self.take(name).ok_or(Decline)
    }

    fn long(&mut self, name: &str) -> Result<Option<i64>, Decline> {
        self.take(name).map(long).transpose()
    }

    fn int(&mut self, name: &str) -> Result<Option<i32>, Decline> {
        match self.take(name) {
            None => Ok(None),
            Some(V::Int(i)) => Ok(Some(i)),
            Some(_) => Err(Decline),
        }
    }

    /// The keys and values of a [`Node::Pairs`] field, none when it is left out or null.
    fn pairs(&mut self, name: &str) -> Result<Vec<(V<'n, 'a>, V<'n, 'a>)>, Decline> {
        match self.take(name) {
            None => Ok(Vec::new()),
            Some(V::Pairs(pairs)) => Ok(pairs),
            Some(_) => Err(Decline),
        }
    }
}

fn long(value: V) -> Result<i64, Decline> {
    match value {
        V::Long(l) => Ok(l),
        V::Int(i) => Ok(i64::from(i)),
        _ => Err(Decline),
    }
}

fn string(value: V) -> Result<String, Decline> {
    match value {
        V::Str(s) => Ok(s.to_string()),
        _ => Err(Decline),
    }
}

fn bytes(value: V) -> Result<Vec<u8>, Decline> {
    match value {
        V::Bytes(b) => Ok(b.to_vec()),
        _ => Err(Decline),
    }
}

fn array<'n, 'a>(value: Option<V<'n, 'a>>) -> Result<Vec<V<'n, 'a>>, Decline> {
    match value {
        None => Ok(Vec::new()),
        Some(V::Array(items)) => Ok(items),
        Some(_) => Err(Decline),
    }
}

fn entry(mut rec: Record, meta: &Meta, spec_id: i32) -> Result<ManifestEntry, Decline> {
    let status = match rec.required("status")? {
        V::Int(s) => ManifestStatus::try_from(s).map_err(|_| Decline)?,
        _ => return Err(Decline),
    };
    let snapshot_id = rec.long("snapshot_id")?;
    let sequence_number = rec.long("sequence_number")?;
    let file_sequence_number = rec.long("file_sequence_number")?;
    let mut file = Record::of(rec.required("data_file")?)?;
    let schema = &meta.metadata.schema;

    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::try_from(file.int("content")?.unwrap_or(0)).map_err(|_| Decline)?)
        .file_path(string(file.required("file_path")?)?)
        .file_format(
            string(file.required("file_format")?)?
                .parse::<DataFileFormat>()
                .map_err(|_| Decline)?,
        )
        .partition(partition(
            file.required("partition")?,
            &meta.partition_type,
        )?)
        .record_count(count(file.required("record_count")?)?)
        .file_size_in_bytes(count(file.required("file_size_in_bytes")?)?)
        .column_sizes(counts(file.pairs("column_sizes")?)?)
        .value_counts(counts(file.pairs("value_counts")?)?)
        .null_value_counts(counts(file.pairs("null_value_counts")?)?)
        .nan_value_counts(counts(file.pairs("nan_value_counts")?)?)
        .lower_bounds(bounds(file.pairs("lower_bounds")?, schema)?)
        .upper_bounds(bounds(file.pairs("upper_bounds")?, schema)?)
        .key_metadata(file.take("key_metadata").map(bytes).transpose()?)
        .split_offsets(
            file.take("split_offsets")
                .map(|v| array(Some(v))?.into_iter().map(long).collect())
                .transpose()?,
        )
        .equality_ids(
            file.take("equality_ids")
                .map(|v| {
                    array(Some(v))?
                        .into_iter()
                        .map(|i| match i {
                            V::Int(i) => Ok(i),
                            _ => Err(Decline),
                        })
                        .collect()
                })
                .transpose()?,
        )
        .first_row_id(file.long("first_row_id")?)
        .partition_spec_id(spec_id)
        .referenced_data_file(file.take("referenced_data_file").map(string).transpose()?)
        .content_offset(file.long("content_offset")?)
        .content_size_in_bytes(file.long("content_size_in_bytes")?);
    if let Some(id) = file.int("sort_order_id")? {
        builder.sort_order_id(id);
    }
    Ok(ManifestEntry {
        status,
        snapshot_id,
        sequence_number,
        file_sequence_number,
        data_file: builder.build().map_err(|_| Decline)?,
    })
}

/// A count or size, which iceberg-rust holds unsigned.
fn count(value: V) -> Result<u64, Decline> {
    u64::try_from(long(value)?).map_err(|_| Decline)
}

/// A map of field id to count; negative counts are left out, as iceberg-rust does.
fn counts(pairs: Vec<(V, V)>) -> Result<HashMap<i32, u64>, Decline> {
    let mut map = HashMap::with_capacity(pairs.len());
    for (key, value) in pairs {
        let V::Int(key) = key else {
            return Err(Decline);
        };
        let value = long(value)?;
        if let Ok(value) = u64::try_from(value) {
            map.insert(key, value);
        }
    }
    Ok(map)
}

/// A map of field id to bound, typed by the field's type in the manifest's schema; bounds of
/// fields the schema no longer has are left out, as iceberg-rust does.
fn bounds(pairs: Vec<(V, V)>, schema: &Schema) -> Result<HashMap<i32, Datum>, Decline> {
    let mut map = HashMap::with_capacity(pairs.len());
    for (key, value) in pairs {
        let (V::Int(key), V::Bytes(value)) = (key, value) else {
            return Err(Decline);
        };
        let field = schema
            .field_by_id(key)
            .or_else(|| iceberg::metadata_columns::get_metadata_field(key).ok());
        if let Some(field) = field {
            let ty = field.field_type.as_primitive_type().ok_or(Decline)?;
            map.insert(
                key,
                Datum::try_from_bytes(value, ty.clone()).map_err(|_| Decline)?,
            );
        }
    }
    Ok(map)
}

/// The partition tuple, a value per field of the partition type, found by name.
fn partition(value: V, ty: &StructType) -> Result<Struct, Decline> {
    let mut rec = Record::of(value)?;
    let values = ty
        .fields()
        .iter()
        .map(|field| {
            let Type::Primitive(p) = field.field_type.as_ref() else {
                return Err(Decline);
            };
            // Every field is written, null or not: one missing means a name this decoder
            // does not match (a writer that renames fields for Avro, say).
            if !rec.fields.iter().any(|(n, _)| *n == field.name) {
                return Err(Decline);
            }
            rec.take(&field.name).map(|v| literal(v, p)).transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Struct::from_iter(values))
}

/// A partition value as iceberg-rust reads it, for the types a partition commonly has.
fn literal(value: V, ty: &PrimitiveType) -> Result<Literal, Decline> {
    use PrimitiveType as P;
    let p = match (ty, value) {
        (P::Boolean, V::Bool(b)) => PrimitiveLiteral::Boolean(b),
        (P::Int | P::Date, V::Int(i) | V::Date(i)) => PrimitiveLiteral::Int(i),
        (P::Long, V::Int(i)) => PrimitiveLiteral::Long(i64::from(i)),
        (P::Long, V::Long(l)) => PrimitiveLiteral::Long(l),
        (P::Time, V::Long(l) | V::TimeMicros(l)) => PrimitiveLiteral::Long(l),
        (P::Timestamp | P::Timestamptz, V::Long(l) | V::TimestampMicros(l)) => {
            PrimitiveLiteral::Long(l)
        }
        (P::String, V::Str(s)) => PrimitiveLiteral::String(s.to_string()),
        _ => return Err(Decline),
    };
    Ok(Literal::Primitive(p))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::{
        Date32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    };
    use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};

    use super::*;
    use crate::{Catalog, PartitionField, Replace};
    use apache_avro::types::Value;

    fn arrow_schema() -> Arc<ArrowSchema> {
        Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("region", DataType::Utf8, true),
            Field::new("day", DataType::Date32, false),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                false,
            ),
        ]))
    }

    /// `n` rows from `from`, over three regions (one of them null) and four days.
    fn batch(from: i64, n: i64) -> RecordBatch {
        let ids = from..from + n;
        RecordBatch::try_new(
            arrow_schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(StringArray::from_iter(ids.clone().map(|i| match i % 3 {
                    0 => Some("east"),
                    1 => Some("west"),
                    _ => None,
                }))),
                Arc::new(Date32Array::from_iter_values(
                    ids.clone().map(|i| 20_600 + (i % 4) as i32),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        ids.map(|i| 1_780_000_000_000_000 + i * 3_600_000_000),
                    )
                    .with_timezone("+00:00"),
                ),
            ],
        )
        .expect("batch")
    }

    /// A catalog holding an unpartitioned table and one partitioned by a string, a date and a
    /// day of a timestamp, each with appends, a partition replace and a full rebuild behind it.
    async fn lake() -> Catalog {
        let store: Arc<dyn object_store::ObjectStore> =
            Arc::new(object_store::memory::InMemory::new());
        let c = Catalog::open_store(store, "memory:///c", "memory:///w");
        let partitioned = [
            PartitionField::identity("region"),
            PartitionField::identity("day"),
            PartitionField::day("at"),
        ];
        for (name, spec) in [("t.flat", &[][..]), ("t.parted", &partitioned[..])] {
            c.create_table(name, &arrow_schema(), spec)
                .await
                .expect("create");
            for k in 0..3 {
                c.append(name, "audit", &[batch(k * 10, 10)], BTreeMap::new())
                    .await
                    .expect("append");
            }
            // The flat table is rebuilt; the partitioned one loses the rows with id < 5 (files
            // rewritten, others kept as existing entries).
            let replace = if spec.is_empty() {
                Replace::All
            } else {
                Replace::Rows(Arc::new(|b: &RecordBatch| {
                    let ids = b
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .ok_or_else(|| crate::LakeError::Other("ids are not Int64".into()))?;
                    Ok(ids.iter().map(|id| id.map(|id| id < 5)).collect())
                }))
            };
            c.replace(name, "audit", &replace, &[batch(100, 7)], BTreeMap::new())
                .await
                .expect("replace");
            c.append(name, "audit", &[batch(200, 5)], BTreeMap::new())
                .await
                .expect("append");
        }
        c
    }

    /// Every manifest of every snapshot of the table: its entry in the list and its bytes.
    async fn manifests(c: &Catalog, name: &str) -> Vec<(ManifestFile, bytes::Bytes)> {
        let t = c.table(name).await.expect("load");
        let mut out = Vec::new();
        for snapshot in t.iceberg().metadata().snapshots() {
            let list = t
                .manifest_list(snapshot.snapshot_id())
                .await
                .expect("manifest list");
            for mf in list.entries() {
                let bytes = c
                    .inner
                    .file_io
                    .new_input(&mf.manifest_path)
                    .expect("input")
                    .read()
                    .await
                    .expect("read");
                out.push((mf.clone(), bytes));
            }
        }
        out
    }

    #[tokio::test]
    async fn every_manifest_parses_to_what_iceberg_rust_reads() {
        let c = lake().await;
        let headers = Headers::default();
        for name in ["t.flat", "t.parted"] {
            let all = manifests(&c, name).await;
            assert!(all.len() >= 5, "{name}: {} manifests", all.len());
            let mut partitioned = false;
            for (mf, bytes) in &all {
                assert!(decode(bytes, &headers).is_ok(), "{name}: decoded here");
                let ours = parse(bytes, mf, &headers).expect("parse");
                let theirs = mf.load_manifest(&c.inner.file_io).await.expect("load");
                assert_eq!(ours, theirs, "{name}: {}", mf.manifest_path);
                assert!(!ours.entries().is_empty());
                partitioned |= ours
                    .entries()
                    .iter()
                    .any(|e| e.data_file().partition().fields().len() == 3);
                // Bounds and counts came through, not just paths.
                assert!(ours.entries().iter().all(|e| {
                    !e.data_file().lower_bounds().is_empty()
                        && !e.data_file().value_counts().is_empty()
                }));
            }
            assert_eq!(partitioned, name == "t.parted");
        }
        // One table schema, so one Avro schema per partition type and one parsed metadata
        // per table: the headers are parsed once, not once a file.
        assert_eq!(headers.schemas.len(), 2);
        assert_eq!(headers.metas.len(), 2);
    }

    /// The manifest `bytes` written again with `codec`, in blocks of a few entries.
    fn rewrite(bytes: &[u8], codec: Codec) -> Vec<u8> {
        let reader = apache_avro::Reader::new(bytes).expect("reader");
        let schema = reader.writer_schema().clone();
        let meta = reader.user_metadata().clone();
        let values: Vec<Value> = reader.map(|v| v.expect("value")).collect();
        assert!(values.len() > 1, "a manifest with several entries");
        let mut writer = apache_avro::Writer::builder()
            .schema(&schema)
            .writer(Vec::new())
            .codec(codec)
            .block_size(64)
            .build();
        for (k, v) in meta {
            writer.add_user_metadata(k, v).expect("metadata");
        }
        for v in values {
            writer.append(v).expect("append");
            writer.flush().expect("a block per entry");
        }
        writer.into_inner().expect("written")
    }

    #[tokio::test]
    async fn a_deflated_manifest_parses_here_and_other_codecs_go_to_iceberg_rust() {
        let c = lake().await;
        let headers = Headers::default();
        let all = manifests(&c, "t.parted").await;
        let (mf, bytes) = all.iter().max_by_key(|(_, b)| b.len()).expect("a manifest");
        let theirs = mf.load_manifest(&c.inner.file_io).await.expect("load");
        assert!(theirs.entries().len() > 1);

        let deflated = rewrite(bytes, Codec::Deflate(DeflateSettings::default()));
        assert!(decode(&deflated, &headers).is_ok(), "deflate is read here");
        assert_eq!(parse(&deflated, mf, &headers).expect("parse"), theirs);

        let snappy = rewrite(bytes, Codec::Snappy);
        assert!(decode(&snappy, &headers).is_err(), "snappy is handed on");
        assert_eq!(parse(&snappy, mf, &headers).expect("parse"), theirs);
    }

    #[tokio::test]
    async fn damaged_bytes_are_iceberg_rusts_error_not_a_panic() {
        let c = lake().await;
        let headers = Headers::default();
        let (mf, bytes) = manifests(&c, "t.parted").await.remove(0);
        for cut in [0, 3, 40, bytes.len() / 2, bytes.len() - 1] {
            assert!(parse(&bytes[..cut], &mf, &headers).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.to_vec();
        let last = flipped.len() - 20;
        flipped[last] ^= 0xff;
        let ours = parse(&flipped, &mf, &headers);
        let theirs = Manifest::parse_avro(&flipped);
        assert_eq!(ours.is_ok(), theirs.is_ok());
    }

    #[tokio::test]
    async fn a_block_count_beyond_the_file_is_declined_not_a_panic() {
        let c = lake().await;
        let headers = Headers::default();
        let (mf, bytes) = manifests(&c, "t.parted").await.remove(0);
        // Where the first block's count starts: after the magic, the header and the sync marker.
        let mut buf = bytes.strip_prefix(MAGIC).expect("magic");
        read_header(&mut buf).expect("header");
        take(&mut buf, 16).expect("sync");
        let at = bytes.len() - buf.len();
        read_long(&mut buf).expect("count");
        let end = bytes.len() - buf.len();
        for claimed in [1u64 << 60, 1 << 40, 1 << 20] {
            // The count as Avro writes a long: zig-zag, then seven bits a byte.
            let mut varint = Vec::new();
            let mut v = claimed << 1;
            while v >= 0x80 {
                varint.push((v as u8) | 0x80);
                v >>= 7;
            }
            varint.push(v as u8);
            let mut damaged = bytes[..at].to_vec();
            damaged.extend_from_slice(&varint);
            damaged.extend_from_slice(&bytes[end..]);
            assert!(decode(&damaged, &headers).is_err(), "{claimed} declined");
            assert!(
                parse(&damaged, &mf, &headers).is_err(),
                "{claimed}: an error"
            );
        }
    }

    /// The bytes of every snapshot's manifest list of the table.
    async fn lists(c: &Catalog, name: &str) -> Vec<bytes::Bytes> {
        let t = c.table(name).await.expect("load");
        let mut out = Vec::new();
        for snapshot in t.iceberg().metadata().snapshots() {
            let input = c.inner.file_io.new_input(snapshot.manifest_list());
            out.push(input.expect("input").read().await.expect("read"));
        }
        out
    }

    fn theirs(bytes: &[u8]) -> iceberg::Result<Vec<ManifestFile>> {
        ManifestList::parse_with_version(bytes, FormatVersion::V2)
            .map(|l| l.consume_entries().into_iter().collect())
    }

    #[tokio::test]
    async fn every_manifest_list_parses_to_what_iceberg_rust_reads() {
        let c = lake().await;
        let headers = Headers::default();
        for name in ["t.flat", "t.parted"] {
            let all = lists(&c, name).await;
            assert!(all.len() >= 5, "{name}: {} lists", all.len());
            let mut summarised = false;
            for bytes in &all {
                assert!(decode_list(bytes, &headers).is_ok(), "{name}: decoded here");
                let ours = parse_list(bytes, FormatVersion::V2, &headers).expect("parse");
                assert_eq!(ours, theirs(bytes).expect("iceberg-rust"), "{name}");
                assert!(!ours.is_empty());
                // Partition summaries, bounds included, came through.
                summarised |= ours.iter().any(|mf| {
                    mf.partitions
                        .as_ref()
                        .is_some_and(|p| p.len() == 3 && p.iter().all(|s| s.lower_bound.is_some()))
                });
            }
            assert_eq!(summarised, name == "t.parted");
        }
        // Every list of both tables has one Avro schema: compiled once, not once a file.
        assert_eq!(headers.schemas.len(), 1);
        // Another format version goes to iceberg-rust whole (a v1 reader schema here).
        let bytes = lists(&c, "t.parted").await.remove(0);
        let v1 = ManifestList::parse_with_version(&bytes, FormatVersion::V1)
            .map(|l| l.consume_entries().into_iter().collect::<Vec<_>>());
        let ours = parse_list(&bytes, FormatVersion::V1, &headers);
        assert_eq!(ours.ok(), v1.ok());
    }

    /// The manifest list `bytes` written again with the file counts under their v1 names.
    fn with_v1_count_names(bytes: &[u8]) -> Vec<u8> {
        let mut buf = bytes.strip_prefix(MAGIC).expect("magic");
        let header = read_header(&mut buf).expect("header");
        let mut text = std::str::from_utf8(lookup(&header, "avro.schema").expect("schema"))
            .expect("utf-8")
            .to_string();
        let renames = ["added", "existing", "deleted"]
            .map(|k| (format!("{k}_files_count"), format!("{k}_data_files_count")));
        for (from, to) in &renames {
            assert!(
                text.contains(&format!("\"{from}\"")),
                "{from} in the schema"
            );
            text = text.replace(&format!("\"{from}\""), &format!("\"{to}\""));
        }
        let schema = AvroSchema::parse_str(&text).expect("renamed schema");
        let reader = apache_avro::Reader::new(bytes).expect("reader");
        let meta = reader.user_metadata().clone();
        let mut writer = apache_avro::Writer::new(&schema, Vec::new());
        for (k, v) in meta {
            writer.add_user_metadata(k, v).expect("metadata");
        }
        for value in reader {
            let Value::Record(fields) = value.expect("value") else {
                panic!("a list entry is a record");
            };
            let fields = fields
                .into_iter()
                .map(
                    |(name, v)| match renames.iter().find(|(from, _)| *from == name) {
                        Some((_, to)) => (to.clone(), v),
                        None => (name, v),
                    },
                )
                .collect();
            writer.append(Value::Record(fields)).expect("append");
        }
        writer.into_inner().expect("written")
    }

    #[tokio::test]
    async fn rewritten_and_damaged_manifest_lists_read_as_iceberg_rust_reads_them() {
        let c = lake().await;
        let headers = Headers::default();
        let all = lists(&c, "t.parted").await;
        let bytes = all.iter().max_by_key(|b| b.len()).expect("a list");
        let want = theirs(bytes).expect("iceberg-rust");
        assert!(want.len() > 1, "a list of several manifests");

        let deflated = rewrite(bytes, Codec::Deflate(DeflateSettings::default()));
        assert!(
            decode_list(&deflated, &headers).is_ok(),
            "deflate is read here"
        );
        assert_eq!(
            parse_list(&deflated, FormatVersion::V2, &headers).expect("parse"),
            want
        );
        let snappy = rewrite(bytes, Codec::Snappy);
        assert!(
            decode_list(&snappy, &headers).is_err(),
            "snappy is handed on"
        );
        assert_eq!(
            parse_list(&snappy, FormatVersion::V2, &headers).expect("parse"),
            want
        );

        // Counts under the names format v1 gave them read the same, here and there.
        let renamed = with_v1_count_names(bytes);
        assert!(
            decode_list(&renamed, &headers).is_ok(),
            "v1 count names are read here"
        );
        assert_eq!(theirs(&renamed).expect("iceberg-rust"), want);
        assert_eq!(
            parse_list(&renamed, FormatVersion::V2, &headers).expect("parse"),
            want
        );

        for cut in [0, 3, 40, bytes.len() / 2, bytes.len() - 1] {
            let ours = parse_list(&bytes[..cut], FormatVersion::V2, &headers);
            assert!(ours.is_err(), "cut at {cut}");
        }
        for at in [bytes.len() - 20, bytes.len() - 60, bytes.len() / 2] {
            let mut flipped = bytes.to_vec();
            flipped[at] ^= 0xff;
            let ours = parse_list(&flipped, FormatVersion::V2, &headers);
            assert_eq!(ours.ok(), theirs(&flipped).ok(), "a byte flipped at {at}");
        }
    }

    #[test]
    fn a_schema_with_a_type_not_laid_out_here_is_declined_and_counts_are_bounded() {
        let decimal = AvroSchema::parse_str(
            r#"{"type": "record", "name": "r", "fields": [
                {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}
            ]}"#,
        )
        .expect("schema");
        assert!(
            Node::compile(&decimal).is_err(),
            "a decimal goes to iceberg-rust"
        );
        let longs = AvroSchema::parse_str(r#"{"type": "array", "items": "long"}"#).expect("schema");
        let node = Node::compile(&longs).expect("an array of longs");
        // Three items of 1, 2, 3, then the end.
        let mut ok: &[u8] = &[0x06, 0x02, 0x04, 0x06, 0x00];
        let V::Array(items) = read(&node, &mut ok).expect("read") else {
            panic!("an array");
        };
        assert_eq!(items.len(), 3);
        assert!(ok.is_empty());
        // Counts by field id, written value first: read as (key, value) pairs all the same.
        let kv = AvroSchema::parse_str(
            r#"{"type": "array", "items": {"type": "record", "name": "k1_v2", "fields": [
                {"name": "value", "type": "long"}, {"name": "key", "type": "int"}
            ]}}"#,
        )
        .expect("schema");
        let node = Node::compile(&kv).expect("pairs");
        // One item: value 100, key 7.
        let mut one: &[u8] = &[0x02, 0xc8, 0x01, 0x0e, 0x00];
        let V::Pairs(pairs) = read(&node, &mut one).expect("read") else {
            panic!("pairs");
        };
        assert_eq!(counts(pairs).expect("counts"), HashMap::from([(7, 100u64)]));
        // A block that claims 2^40 items in four bytes declines at once.
        let mut huge: &[u8] = &[0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x02, 0x02];
        assert!(read(&node, &mut huge).is_err());
    }

    #[test]
    fn avro_longs_are_zig_zag_varints() {
        let cases: [(&[u8], i64); 6] = [
            (&[0x00], 0),
            (&[0x01], -1),
            (&[0x02], 1),
            (&[0x7f], -64),
            (&[0x80, 0x01], 64),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                i64::MIN,
            ),
        ];
        for (bytes, want) in cases {
            let mut buf = bytes;
            assert_eq!(read_long(&mut buf).expect("a long"), want);
            assert!(buf.is_empty());
        }
        let mut unterminated: &[u8] = &[0x80; 11];
        assert!(read_long(&mut unterminated).is_err());
        let mut empty: &[u8] = &[];
        assert!(read_long(&mut empty).is_err());
    }
}
