//! Scan planning from manifests parsed once per catalog handle.
//!
//! Manifest lists and manifests are immutable: a path names the same bytes forever. iceberg-rust
//! keeps a cache of parsed manifests per `iceberg::table::Table`, and a lake `Table` is built
//! fresh from every metadata version it loads, so each load started with an empty cache and
//! every scan plan parsed every manifest again (about a millisecond each, mostly the Avro schema
//! in its header, however few entries it holds). Here a [`Catalog`] handle keeps the parsed
//! files, shared by every table and version it loads, within a byte budget (table metadata
//! files too, never rewritten either, and what lookups read of each data file's footer and bloom
//! filters: see [`crate::lookup`]). The metadata a commit writes is kept as written, so the next
//! step of a run (or the next run of a season) that loads the table does not parse it back. And
//! [`Table::plan_files_at`] plans a scan from them itself, parsing the manifests it has not seen
//! yet at once, each on a task of its own.
//!
//! The planner keeps a data file unless its column bounds prove that the filter holds no row of
//! it (a filter it cannot judge keeps the file); the filter still goes to the reader with each
//! file, which drops the rows that fail it. A snapshot with delete files is planned by
//! iceberg-rust's own scan, which applies them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use iceberg::expr::{Bind, BoundPredicate, PredicateOperator};
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataContentType, DataFile, Datum, Manifest, ManifestContentType, ManifestFile, NameMapping,
    PrimitiveType, TableMetadata,
};

use crate::catalog::Catalog;
use crate::error::{LakeError, Result};
use crate::table::Table;
use crate::types::RefMap;

/// How many bytes of manifest lists, manifests and table metadata files (their size on
/// storage) a catalog handle keeps parsed, data files' key indexes and footers counted by their
/// size in memory. Parsed, files take a few times their size in memory.
const CACHE_BUDGET_BYTES: u64 = 32 << 20;

/// A manifest list's weight when its size is not at hand: about what one entry takes.
const LIST_ENTRY_BYTES: u64 = 256;

/// The table property iceberg-rust reads a name mapping from.
const NAME_MAPPING_PROPERTY: &str = "schema.name-mapping.default";

/// A snapshot's manifest list: the manifests it names, in its order.
#[derive(Debug)]
pub(crate) struct ManifestList(Vec<ManifestFile>);

impl ManifestList {
    pub(crate) fn entries(&self) -> &[ManifestFile] {
        &self.0
    }
}

#[derive(Clone)]
enum Parsed {
    List(Arc<ManifestList>),
    Manifest(Arc<Manifest>),
    Metadata(Arc<TableMetadata>, Arc<RefMap>),
    KeyIndex(Arc<crate::lookup::KeyIndex>),
    /// A manifest layout; `None`: manifests of that spec go to iceberg-rust's writer.
    Layout(Option<Arc<crate::manifest_write::Layout>>),
    Footer(parquet::arrow::arrow_reader::ArrowReaderMetadata),
}

struct Slot {
    /// The slot's own key, shared with [`State::by_use`]: a hit moves it without allocating.
    location: Arc<str>,
    parsed: Parsed,
    bytes: u64,
    used: u64,
}

#[derive(Default)]
struct State {
    slots: HashMap<Arc<str>, Slot>,
    /// Each slot's location by when it was last used: the least recently used is the first.
    by_use: BTreeMap<u64, Arc<str>>,
    bytes: u64,
    tick: u64,
    /// Files parsed (misses) and served from memory (hits), for tests and measurements.
    parsed: u64,
    hits: u64,
}

/// Parsed manifest lists, manifests and table metadata files by location, and data files' key
/// indexes and Parquet footers, least recently used evicted first. Only files that never change once written go
/// here.
pub(crate) struct ParsedFiles {
    state: Mutex<State>,
    budget: u64,
}

impl Default for ParsedFiles {
    fn default() -> Self {
        ParsedFiles {
            state: Mutex::new(State::default()),
            budget: CACHE_BUDGET_BYTES,
        }
    }
}

impl ParsedFiles {
    fn get(&self, location: &str) -> Option<Parsed> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.tick += 1;
        let tick = s.tick;
        let (parsed, was, key) = {
            let slot = s.slots.get_mut(location)?;
            let was = std::mem::replace(&mut slot.used, tick);
            (slot.parsed.clone(), was, slot.location.clone())
        };
        s.by_use.remove(&was);
        s.by_use.insert(tick, key);
        s.hits += 1;
        Some(parsed)
    }

    fn put(&self, location: &str, parsed: Parsed, bytes: u64) {
        self.insert(location, parsed, bytes, true);
    }

    /// Keep `parsed` for `location` without counting it as parsed (its writer had it).
    fn keep(&self, location: &str, parsed: Parsed, bytes: u64) {
        self.insert(location, parsed, bytes, false);
    }

    fn insert(&self, location: &str, parsed: Parsed, bytes: u64, was_parsed: bool) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.parsed += u64::from(was_parsed);
        if bytes > self.budget {
            return;
        }
        s.tick += 1;
        let used = s.tick;
        let key: Arc<str> = Arc::from(location);
        if let Some(old) = s.slots.insert(
            key.clone(),
            Slot {
                location: key.clone(),
                parsed,
                bytes,
                used,
            },
        ) {
            s.bytes -= old.bytes;
            s.by_use.remove(&old.used);
        }
        s.by_use.insert(used, key);
        s.bytes += bytes;
        while s.bytes > self.budget {
            let Some((_, oldest)) = s.by_use.pop_first() else {
                break;
            };
            if let Some(slot) = s.slots.remove(&oldest) {
                s.bytes -= slot.bytes;
            }
        }
    }

    /// (files parsed, files served from memory) so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.parsed, s.hits)
    }
}

impl Catalog {
    /// The manifest `mf` names, its entries' snapshot ids and sequence numbers inherited from
    /// `mf` as iceberg-rust does, parsed once per catalog handle.
    pub(crate) async fn manifest(&self, mf: &ManifestFile) -> iceberg::Result<Arc<Manifest>> {
        if let Some(Parsed::Manifest(m)) = self.inner.parsed.get(&mf.manifest_path) {
            return Ok(m);
        }
        self.parse_manifest(mf).await
    }

    /// Read and parse the manifest `mf` names (the cache missed it), and keep it.
    async fn parse_manifest(&self, mf: &ManifestFile) -> iceberg::Result<Arc<Manifest>> {
        let m = if mf.key_metadata.is_some() {
            // An encrypted manifest: iceberg-rust knows how to read it.
            mf.load_manifest(&self.inner.file_io).await?
        } else {
            let bytes = self
                .inner
                .file_io
                .new_input(&mf.manifest_path)?
                .read()
                .await?;
            crate::manifest::parse(&bytes, mf, &self.inner.manifest_headers)?
        };
        let m = Arc::new(m);
        let bytes = u64::try_from(mf.manifest_length).unwrap_or(0).max(1);
        self.inner
            .parsed
            .put(&mf.manifest_path, Parsed::Manifest(m.clone()), bytes);
        Ok(m)
    }

    /// The manifests `mfs` name, in their order, each parsed once per catalog handle as
    /// [`Catalog::manifest`] does; those not parsed yet are read and parsed at once, each on a
    /// task of its own (a table's plan may need several, and each entry still costs an Avro
    /// decode even when its header was parsed before).
    pub(crate) async fn manifests(
        &self,
        mfs: &[&ManifestFile],
    ) -> iceberg::Result<Vec<Arc<Manifest>>> {
        let cache = &self.inner.parsed;
        // A hit is answered from memory; only a miss copies what its task needs.
        let loads: Vec<_> = mfs
            .iter()
            .map(|mf| match cache.get(&mf.manifest_path) {
                Some(Parsed::Manifest(m)) => futures::future::Either::Left(async { Ok(m) }),
                _ => futures::future::Either::Right(load(self.clone(), ManifestFile::clone(mf))),
            })
            .collect();
        futures::stream::iter(loads)
            .buffered(crate::read::read_parallelism())
            .try_collect()
            .await
    }

    /// Table metadata at `location` (a metadata file is never rewritten), parsed once per
    /// catalog handle by `parse`.
    pub(crate) async fn metadata_cached<F, Fut>(
        &self,
        location: &str,
        parse: F,
    ) -> Result<(Arc<TableMetadata>, Arc<RefMap>)>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(TableMetadata, RefMap, u64)>>,
    {
        let cache = &self.inner.parsed;
        if let Some(Parsed::Metadata(md, refs)) = cache.get(location) {
            return Ok((md, refs));
        }
        let (md, refs, bytes) = parse().await?;
        let (md, refs) = (Arc::new(md), Arc::new(refs));
        cache.put(
            location,
            Parsed::Metadata(md.clone(), refs.clone()),
            bytes.max(1),
        );
        Ok((md, refs))
    }

    /// Keep metadata this handle just wrote to `location` as if it had parsed the file.
    pub(crate) fn keep_parsed_metadata(
        &self,
        location: &str,
        md: Arc<TableMetadata>,
        refs: Arc<RefMap>,
        bytes: u64,
    ) {
        self.inner
            .parsed
            .keep(location, Parsed::Metadata(md, refs), bytes.max(1));
    }

    /// A data file's key index (see [`crate::lookup`]) under `slot`, read once per catalog
    /// handle by `read` (a data file is never rewritten either).
    pub(crate) async fn key_index_cached<F, Fut>(
        &self,
        slot: &str,
        read: F,
    ) -> iceberg::Result<Arc<crate::lookup::KeyIndex>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = iceberg::Result<crate::lookup::KeyIndex>>,
    {
        let cache = &self.inner.parsed;
        if let Some(Parsed::KeyIndex(ix)) = cache.get(slot) {
            return Ok(ix);
        }
        let ix = Arc::new(read().await?);
        cache.put(slot, Parsed::KeyIndex(ix.clone()), ix.bytes());
        Ok(ix)
    }

    /// The manifest layout of a table's schema and partition spec (see
    /// [`crate::manifest_write`]) under `slot`, worked out once per catalog handle by `build` (a
    /// table's schema and spec of a given id never change).
    pub(crate) async fn manifest_layout_cached<F, Fut>(
        &self,
        slot: &str,
        build: F,
    ) -> iceberg::Result<Option<Arc<crate::manifest_write::Layout>>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = iceberg::Result<Option<crate::manifest_write::Layout>>>,
    {
        let cache = &self.inner.parsed;
        if let Some(Parsed::Layout(layout)) = cache.get(slot) {
            return Ok(layout);
        }
        let layout = build().await?.map(Arc::new);
        let bytes = layout.as_ref().map_or(64, |l| l.bytes());
        // Not a file parsed: kept without counting as one.
        cache.keep(slot, Parsed::Layout(layout.clone()), bytes);
        Ok(layout)
    }

    /// A data file opened for parquet's reader, with its parsed footer: from this handle when
    /// it keeps it, else read, parsed and kept, counted by its size in memory (a data file is
    /// never rewritten, so its footer holds for as long as the file exists). `size` is the
    /// manifest's: no stat (a HEAD on an object store) per file.
    pub(crate) async fn open_data_file(
        &self,
        path: &str,
        size: u64,
    ) -> iceberg::Result<(
        iceberg::arrow::ArrowFileReader,
        parquet::arrow::arrow_reader::ArrowReaderMetadata,
    )> {
        use parquet::arrow::arrow_reader::ArrowReaderOptions;
        use parquet::file::metadata::ParquetStatisticsPolicy;
        let input = self.inner.file_io.new_input(path)?;
        let mut file = iceberg::arrow::ArrowFileReader::new(
            iceberg::io::FileMetadata { size },
            input.reader().await?,
        );
        let slot = footer_slot(path);
        if let Some(Parsed::Footer(footer)) = self.inner.parsed.get(&slot) {
            return Ok((file, footer));
        }
        // Lake reads a kept footer for its schema, its row groups' sizes and its bloom
        // filters' offsets, and picks row groups itself: the column chunks' statistics (min,
        // max, sizes, encodings; most of a footer's bytes) are skipped, not decoded.
        let options = ArrowReaderOptions::new()
            .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll);
        let footer = async {
            use parquet::arrow::async_reader::AsyncFileReader;
            let metadata = file.get_metadata(Some(&options)).await?;
            self.inner.arrow_schemas.footer(metadata, options)
        }
        .await
        .map_err(|e| crate::read::parquet_error(path, "reading the Parquet footer", e))?;
        let bytes = footer.metadata().memory_size() as u64;
        self.inner
            .parsed
            .put(&slot, Parsed::Footer(footer.clone()), bytes.max(1));
        Ok((file, footer))
    }

    /// How many manifest lists, manifests, metadata files, key indexes and data-file footers
    /// this handle parsed, and how many times it found one already parsed.
    pub fn parsed_file_counts(&self) -> (u64, u64) {
        self.inner.parsed.counts()
    }
}

/// The Arrow schema each distinct data-file footer decodes to, shared by every file of a table
/// written under one schema. A footer's Arrow schema is a function of the file's Parquet schema
/// and its key-value metadata, where Arrow's writer keeps the schema it wrote (`ARROW:schema`,
/// base64 of an IPC message: 2.4 KB for `silver.orders`); decoding and verifying that message
/// was most of what turning a parsed footer into a reader's metadata cost, for each of the
/// dozens of day files a lookup opens in a new process. The decoded schema is kept in a
/// [`crate::manifest::Memo`] (as manifest headers are) by the footer's key-value metadata,
/// with the Parquet schema it came with; a footer with the same of both is given that schema
/// (parquet's supplied-schema path, which still works out the file's own column levels and
/// checks every column's type, nullability and metadata against it); any other is decoded,
/// and kept for the next.
#[derive(Default)]
pub(crate) struct ArrowSchemas(crate::manifest::Memo<FooterKeyValues, DecodedSchema>);

/// A footer's key-value metadata, as pairs.
type FooterKeyValues = Vec<(String, Option<String>)>;

/// The Parquet schema a footer had and the Arrow schema decoded from it with its key values.
type DecodedSchema = (parquet::schema::types::TypePtr, arrow_schema::SchemaRef);

impl ArrowSchemas {
    /// `metadata` as parquet's reader takes it, its Arrow schema decoded only when the last
    /// footer decoded with the same key-value metadata did not have the same Parquet schema.
    pub(crate) fn footer(
        &self,
        metadata: Arc<parquet::file::metadata::ParquetMetaData>,
        options: parquet::arrow::arrow_reader::ArrowReaderOptions,
    ) -> parquet::errors::Result<parquet::arrow::arrow_reader::ArrowReaderMetadata> {
        use parquet::arrow::arrow_reader::ArrowReaderMetadata;
        let file = metadata.file_metadata();
        let key: FooterKeyValues = file
            .key_value_metadata()
            .into_iter()
            .flatten()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        let root = file.schema_descr().root_schema_ptr();
        if let Some(known) = self.0.get(&key)
            && *known.0 == *root
            && let Ok(footer) = ArrowReaderMetadata::try_new(
                metadata.clone(),
                options.clone().with_schema(known.1.clone()),
            )
        {
            return Ok(footer);
        }
        let footer = ArrowReaderMetadata::try_new(metadata, options)?;
        self.0.keep(key, (root, footer.schema().clone()));
        Ok(footer)
    }

    /// How many Arrow schemas are kept.
    #[cfg(test)]
    pub(crate) fn decoded(&self) -> usize {
        self.0.len()
    }
}

/// Where a data file's footer is kept (apart from its key indexes, which share its path).
fn footer_slot(path: &str) -> String {
    format!("{path}\u{0}footer")
}

/// A manifest the cache missed, read and parsed on a task of its own.
async fn load(catalog: Catalog, mf: ManifestFile) -> iceberg::Result<Arc<Manifest>> {
    tokio::spawn(async move { catalog.parse_manifest(&mf).await })
        .await
        .map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "a task parsing a manifest stopped",
            )
            .with_source(e)
        })?
}

impl Table {
    /// The manifest list of snapshot `id`, parsed once per catalog handle.
    pub(crate) async fn manifest_list(&self, id: i64) -> Result<Arc<ManifestList>> {
        let snapshot = self.snapshot_ref(id)?;
        let cache = &self.catalog().inner.parsed;
        let location = snapshot.manifest_list();
        if let Some(Parsed::List(list)) = cache.get(location) {
            return Ok(list);
        }
        let ctx = || {
            format!(
                "reading the manifest list of snapshot {id} of {}",
                self.name()
            )
        };
        let entries = async {
            if snapshot.encryption_key_id().is_some() {
                // An encrypted list: iceberg-rust knows how to read it.
                let list = self.iceberg().manifest_list_reader(snapshot).load().await?;
                return Ok(list.consume_entries().into_iter().collect());
            }
            let inner = &self.catalog().inner;
            let bytes = inner.file_io.new_input(location)?.read().await?;
            let version = self.metadata().format_version();
            crate::manifest::parse_list(&bytes, version, &inner.manifest_headers)
        }
        .await
        .map_err(|e| LakeError::iceberg(ctx(), e))?;
        let list = Arc::new(ManifestList(entries));
        let bytes = (list.entries().len() as u64 + 1) * LIST_ENTRY_BYTES;
        cache.put(location, Parsed::List(list.clone()), bytes);
        Ok(list)
    }

    /// The files a scan of snapshot `id` reads for `columns` (all when `None`), after
    /// `filter`'s pruning by the files' column bounds.
    pub(crate) async fn plan_files_at(
        &self,
        id: i64,
        columns: Option<Vec<String>>,
        filter: Option<iceberg::expr::Predicate>,
    ) -> Result<Vec<FileScanTask>> {
        let ctx = || format!("planning a scan of {} at snapshot {id}", self.name());
        let ice = |e| LakeError::iceberg(ctx(), e);
        let md = self.metadata();
        let snapshot = self.snapshot_ref(id)?;
        let list = self.manifest_list(id).await?;
        if list
            .entries()
            .iter()
            .any(|mf| mf.content != ManifestContentType::Data)
        {
            return self.plan_files_by_iceberg(id, columns, filter).await;
        }
        let schema = snapshot.schema(md).map_err(ice)?;
        let fields = schema.as_struct().fields();
        let field_ids = match columns {
            None => fields.iter().map(|f| f.id).collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    fields
                        .iter()
                        .find(|f| &f.name == n)
                        .map(|f| f.id)
                        .ok_or_else(|| LakeError::Schema {
                            table: self.name().to_string(),
                            detail: format!("no column {n:?} at snapshot {id}"),
                        })
                })
                .collect::<Result<Vec<i32>>>()?,
        };
        let bound = filter
            .map(|f| f.bind(schema.clone(), true))
            .transpose()
            .map_err(ice)?;
        let name_mapping = md
            .properties()
            .get(NAME_MAPPING_PROPERTY)
            .map(|raw| serde_json::from_str::<NameMapping>(raw))
            .transpose()
            .map_err(|e| LakeError::BadMetadata {
                table: self.name().to_string(),
                location: self.metadata_location().to_string(),
                detail: format!("table property {NAME_MAPPING_PROPERTY}: {e}"),
            })?
            .map(Arc::new);
        let mut tasks = Vec::new();
        let wanted: Vec<&ManifestFile> = list
            .entries()
            .iter()
            .filter(|mf| !crate::write::lists_no_live_file(mf))
            .collect();
        for manifest in self.catalog().manifests(&wanted).await.map_err(ice)? {
            for e in manifest.entries() {
                if !e.is_alive() || e.content_type() != DataContentType::Data {
                    continue;
                }
                let file = e.data_file();
                if let Some(p) = &bound
                    && !may_match(p, file)
                {
                    continue;
                }
                tasks.push(FileScanTask {
                    file_size_in_bytes: file.file_size_in_bytes(),
                    start: 0,
                    length: file.file_size_in_bytes(),
                    record_count: Some(file.record_count()),
                    data_file_path: file.file_path().to_string(),
                    data_file_format: file.file_format(),
                    schema: schema.clone(),
                    project_field_ids: field_ids.clone(),
                    predicate: bound.clone(),
                    deletes: Vec::new(),
                    partition: Some(file.partition().clone()),
                    partition_spec: None,
                    name_mapping: name_mapping.clone(),
                    case_sensitive: true,
                });
            }
        }
        Ok(tasks)
    }

    /// [`Table::plan_files_at`] by iceberg-rust's scan: for snapshots with delete files.
    async fn plan_files_by_iceberg(
        &self,
        id: i64,
        columns: Option<Vec<String>>,
        filter: Option<iceberg::expr::Predicate>,
    ) -> Result<Vec<FileScanTask>> {
        let ice = |e| {
            LakeError::iceberg(
                format!("planning a scan of {} at snapshot {id}", self.name()),
                e,
            )
        };
        let mut scan = self.iceberg().scan().snapshot_id(id);
        scan = match columns {
            Some(c) => scan.select(c),
            None => scan.select_all(),
        };
        if let Some(f) = filter {
            scan = scan.with_filter(f);
        }
        scan.build()
            .map_err(ice)?
            .plan_files()
            .await
            .map_err(ice)?
            .try_collect()
            .await
            .map_err(ice)
    }
}

/// False only when `file`'s column bounds prove that no row of it satisfies `p`. Missing bounds,
/// values of another type, floating-point columns (NaN and -0.0 make their bounds unreliable)
/// and predicates it does not judge (NOT, NaN tests, prefixes, ≠, NOT IN) all keep the file.
/// Bounds may be truncated, as the spec allows: a lower bound is still at or below every value,
/// an upper bound at or above.
pub(crate) fn may_match(p: &BoundPredicate, file: &DataFile) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    match p {
        BoundPredicate::AlwaysTrue => true,
        BoundPredicate::AlwaysFalse => false,
        BoundPredicate::And(e) => e.inputs().iter().all(|q| may_match(q, file)),
        BoundPredicate::Or(e) => e.inputs().iter().any(|q| may_match(q, file)),
        BoundPredicate::Not(_) => true,
        BoundPredicate::Unary(e) => {
            let id = e.term().field().id;
            match e.op() {
                // No nulls counted: IS NULL holds for no row.
                PredicateOperator::IsNull => file.null_value_counts().get(&id) != Some(&0),
                // Every value counted is null: IS NOT NULL holds for no row.
                PredicateOperator::NotNull => {
                    match (
                        file.value_counts().get(&id),
                        file.null_value_counts().get(&id),
                    ) {
                        (Some(values), Some(nulls)) => values != nulls,
                        _ => true,
                    }
                }
                _ => true,
            }
        }
        BoundPredicate::Binary(e) => {
            let id = e.term().field().id;
            let v = e.literal();
            if !comparable(v) {
                return true;
            }
            let lower = file.lower_bounds().get(&id);
            let upper = file.upper_bounds().get(&id);
            let cmp = |b: Option<&Datum>| b.and_then(|b| v.partial_cmp(b));
            match e.op() {
                // Some value below v needs lower < v.
                PredicateOperator::LessThan => {
                    cmp(lower) != Some(Less) && cmp(lower) != Some(Equal)
                }
                PredicateOperator::LessThanOrEq => cmp(lower) != Some(Less),
                PredicateOperator::GreaterThan => {
                    cmp(upper) != Some(Greater) && cmp(upper) != Some(Equal)
                }
                PredicateOperator::GreaterThanOrEq => cmp(upper) != Some(Greater),
                PredicateOperator::Eq => cmp(lower) != Some(Less) && cmp(upper) != Some(Greater),
                _ => true,
            }
        }
        BoundPredicate::Set(e) => {
            let id = e.term().field().id;
            match e.op() {
                PredicateOperator::In => {
                    let lower = file.lower_bounds().get(&id);
                    let upper = file.upper_bounds().get(&id);
                    e.literals().iter().any(|v| {
                        if !comparable(v) {
                            return true;
                        }
                        let cmp = |b: Option<&Datum>| b.and_then(|b| v.partial_cmp(b));
                        cmp(lower) != Some(Less) && cmp(upper) != Some(Greater)
                    })
                }
                _ => true,
            }
        }
    }
}

/// Whether bounds can judge `v`: not a floating-point value.
fn comparable(v: &Datum) -> bool {
    !matches!(v.data_type(), PrimitiveType::Float | PrimitiveType::Double)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_file_goes_first_when_over_budget() {
        let cache = ParsedFiles {
            state: Mutex::new(State::default()),
            budget: 300,
        };
        let ix = || Parsed::KeyIndex(Arc::new(crate::lookup::KeyIndex::empty()));
        let held = |c: &ParsedFiles, l: &str| {
            let s = c.state.lock().unwrap();
            s.slots.contains_key(l)
        };
        cache.put("a", ix(), 100);
        cache.put("b", ix(), 100);
        cache.put("c", ix(), 100);
        assert!(cache.get("a").is_some(), "a is now the most recently used");
        cache.put("d", ix(), 100);
        assert!(!held(&cache, "b"), "b was the least recently used");
        assert!(held(&cache, "a") && held(&cache, "c") && held(&cache, "d"));
        // Putting a file again replaces it without counting it twice.
        cache.put("d", ix(), 100);
        cache.put("e", ix(), 100);
        assert!(!held(&cache, "c") && held(&cache, "a") && held(&cache, "d"));
        // A file larger than the whole budget is never kept.
        cache.put("huge", ix(), 301);
        assert!(!held(&cache, "huge") && held(&cache, "e"));
        let s = cache.state.lock().unwrap();
        assert_eq!(s.bytes, 300);
        assert_eq!(s.by_use.len(), s.slots.len());
    }

    use std::collections::HashMap;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use futures::TryStreamExt;
    use iceberg::expr::{Predicate, Reference};
    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, NestedField, Schema, Type as IcebergType,
    };

    fn schema() -> Arc<Schema> {
        Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "n", IcebergType::Primitive(PrimitiveType::Long))
                        .into(),
                    NestedField::optional(2, "s", IcebergType::Primitive(PrimitiveType::String))
                        .into(),
                    NestedField::optional(3, "d", IcebergType::Primitive(PrimitiveType::Double))
                        .into(),
                ])
                .build()
                .expect("schema"),
        )
    }

    /// n in [10, 20] with no nulls; s in ["b", "d"] with 2 nulls of 5; d with bounds [0.0, 1.0].
    fn file() -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("f.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .record_count(5)
            .file_size_in_bytes(1)
            .lower_bounds(HashMap::from([
                (1, Datum::long(10)),
                (2, Datum::string("b")),
                (3, Datum::double(0.0)),
            ]))
            .upper_bounds(HashMap::from([
                (1, Datum::long(20)),
                (2, Datum::string("d")),
                (3, Datum::double(1.0)),
            ]))
            .value_counts(HashMap::from([(1, 5), (2, 5), (3, 5)]))
            .null_value_counts(HashMap::from([(1, 0), (2, 2), (3, 0)]))
            .build()
            .expect("data file")
    }

    fn may(p: Predicate) -> bool {
        may_match(&p.bind(schema(), true).expect("bind"), &file())
    }

    #[test]
    fn bounds_drop_a_file_only_when_no_row_can_match() {
        let n = || Reference::new("n");
        let s = || Reference::new("s");
        // Equality and ranges at, inside and outside the bounds [10, 20].
        assert!(!may(n().equal_to(Datum::long(9))));
        assert!(may(n().equal_to(Datum::long(10))));
        assert!(may(n().equal_to(Datum::long(20))));
        assert!(!may(n().equal_to(Datum::long(21))));
        assert!(!may(n().less_than(Datum::long(10))));
        assert!(may(n().less_than(Datum::long(11))));
        assert!(may(n().less_than_or_equal_to(Datum::long(10))));
        assert!(!may(n().less_than_or_equal_to(Datum::long(9))));
        assert!(!may(n().greater_than(Datum::long(20))));
        assert!(may(n().greater_than(Datum::long(19))));
        assert!(may(n().greater_than_or_equal_to(Datum::long(20))));
        assert!(!may(n().greater_than_or_equal_to(Datum::long(21))));
        assert!(!may(n().is_in([Datum::long(1), Datum::long(30)])));
        assert!(may(n().is_in([Datum::long(1), Datum::long(15)])));
        assert!(!may(s().equal_to(Datum::string("a"))));
        assert!(may(s().equal_to(Datum::string("c"))));
        // AND needs every side, OR any side.
        assert!(!may(n()
            .equal_to(Datum::long(15))
            .and(s().equal_to(Datum::string("z")))));
        assert!(may(n()
            .equal_to(Datum::long(5))
            .or(s().equal_to(Datum::string("c")))));
        // Null counts: no nulls in n, some in s.
        assert!(!may(n().is_null()));
        assert!(may(s().is_null()));
        assert!(may(s().is_not_null()));
    }

    #[test]
    fn what_bounds_cannot_judge_keeps_the_file() {
        // Floating point (NaN and -0.0 make bounds unreliable), NOT, inequality, NOT IN.
        assert!(may(Reference::new("d").equal_to(Datum::double(5.0))));
        assert!(may(Predicate::negate(
            Reference::new("n").equal_to(Datum::long(15))
        )));
        assert!(may(Reference::new("n").not_equal_to(Datum::long(15))));
        assert!(may(
            Reference::new("n").is_not_in([Datum::long(10), Datum::long(20)])
        ));
        // A file without bounds for the column.
        let bare = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("g.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .record_count(1)
            .file_size_in_bytes(1)
            .build()
            .expect("data file");
        let p = Reference::new("n")
            .equal_to(Datum::long(99))
            .bind(schema(), true)
            .expect("bind");
        assert!(may_match(&p, &bare));
    }

    fn batch(from: i64, n: i64) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("tag", DataType::Utf8, false),
            ])),
            vec![
                Arc::new(Int64Array::from_iter_values(from..from + n)),
                Arc::new(StringArray::from_iter_values(
                    (from..from + n).map(|i| format!("t{i}")),
                )),
            ],
        )
        .expect("batch")
    }

    async fn ids(t: &Table, filter: Option<Predicate>) -> (Vec<i64>, usize) {
        let id = t.head("audit").expect("audit head");
        let tasks = t.plan_files_at(id, None, filter).await.expect("plan");
        let files = tasks.len();
        let batches: Vec<RecordBatch> = t
            .read_file_tasks(tasks, "test".into())
            .expect("read")
            .try_collect()
            .await
            .expect("rows");
        let mut out: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("ids")
                    .values()
                    .to_vec()
            })
            .collect();
        out.sort_unstable();
        (out, files)
    }

    #[tokio::test]
    async fn a_commit_keeps_the_metadata_it_wrote_as_a_reader_of_the_file_would_have_it() {
        let store: Arc<dyn object_store::ObjectStore> =
            Arc::new(object_store::memory::InMemory::new());
        let open = || Catalog::open_store(store.clone(), "memory:///c", "memory:///w");
        let c = open();
        let schema = batch(0, 1).schema();
        c.create_table("t.kept", &schema, &[])
            .await
            .expect("create");
        let props = BTreeMap::from([("sugarshack.watermark.x".to_string(), "7".to_string())]);
        c.append("t.kept", "audit", &[batch(0, 10)], props)
            .await
            .expect("append");
        let audit = c.table("t.kept").await.expect("load").head("audit");
        let audit = audit.expect("audit head");
        let ops = [
            crate::RefOp::FastForward {
                branch: "main".into(),
                to: audit,
            },
            crate::RefOp::CreateTag {
                name: "publish-1".into(),
                snapshot_id: audit,
            },
        ];
        c.update_refs("t.kept", &ops, "publish")
            .await
            .expect("refs");
        // A change whose writer passes no refs: they come from the bytes written.
        let t = c.table("t.kept").await.expect("load");
        let props = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let change = t
            .stage_set_properties(&props)
            .expect("stage")
            .expect("a change");
        c.commit(vec![change], "set", "", BTreeMap::new())
            .await
            .expect("commit");

        let (parsed, _) = c.parsed_file_counts();
        let kept = c.table("t.kept").await.expect("load");
        assert_eq!(
            c.parsed_file_counts().0,
            parsed,
            "read back without parsing"
        );
        let read = open()
            .table("t.kept")
            .await
            .expect("a fresh handle parses the file");
        assert_eq!(kept.metadata_location(), read.metadata_location());
        assert_eq!(kept.metadata(), read.metadata());
        assert_eq!(kept.ref_entries(), read.ref_entries());
        assert_eq!(kept.head("main"), Some(audit));
        assert_eq!(
            kept.metadata().properties().get("k"),
            Some(&"v".to_string())
        );
    }

    #[tokio::test]
    async fn a_plan_reads_each_manifest_once_per_catalog_and_prunes_by_bounds() {
        let c = Catalog::in_memory();
        let schema = batch(0, 1).schema();
        c.create_table("t.ten", &schema, &[]).await.expect("create");
        for i in 0..10 {
            c.append("t.ten", "audit", &[batch(i * 100, 100)], Default::default())
                .await
                .expect("append");
        }
        let t = c.table("t.ten").await.expect("load");
        let (all, files) = ids(&t, None).await;
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
        assert_eq!(files, 10);
        let (parsed, _) = c.parsed_file_counts();
        // The same plan again, and on a fresh load of the same table: nothing parsed again.
        let t = c.table("t.ten").await.expect("load again");
        assert_eq!(ids(&t, None).await.0.len(), 1000);
        let (parsed_again, hits) = c.parsed_file_counts();
        assert_eq!(parsed_again, parsed);
        assert!(hits > 0);
        // A filter: only the files whose bounds may hold a match are planned, and only the
        // matching rows come back.
        let f = Reference::new("id")
            .greater_than_or_equal_to(Datum::long(250))
            .and(Reference::new("id").less_than(Datum::long(420)));
        let (some, files) = ids(&t, Some(f)).await;
        assert_eq!(some, (250..420).collect::<Vec<_>>());
        assert_eq!(files, 3);
        let f = Reference::new("tag").equal_to(Datum::string("t999"));
        assert_eq!(ids(&t, Some(f)).await, (vec![999], 1));
        // A column the table lacks is a named error.
        let id = t.head("audit").expect("head");
        let err = t
            .plan_files_at(id, Some(vec!["nope".into()]), None)
            .await
            .expect_err("no such column");
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
