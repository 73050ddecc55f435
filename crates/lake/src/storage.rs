//! One object_store-backed storage for the catalog log and every table file.
//!
//! Iceberg's `FileIO` hands us absolute locations (`file:///…`, `memory:///…`, `s3://bucket/…`).
//! A location maps to an object store by its scheme and authority, and to an object path by its
//! URL path. The same code path serves a local folder, memory (tests) and any object_store URL.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use url::Url;

use crate::error::{LakeError, Result};

/// The object stores a lake uses, keyed by `scheme://authority`.
#[derive(Clone, Debug, Default)]
pub struct Stores {
    by_root: BTreeMap<String, Arc<dyn ObjectStore>>,
    /// Stores built on first use for roots nobody registered: one per root, shared by clones
    /// (a local file system store, or what `object_store::parse_url` builds).
    built: Arc<Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>>,
    /// What the local file system store wrote since the last sync (see [`crate::durable`]),
    /// shared by clones.
    durability: Arc<crate::durable::Durability>,
}

impl Stores {
    /// A registry that resolves `file://` to the local file system and nothing else yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Use `store` for every location under `scheme://authority` of `url`.
    pub fn with_store(mut self, url: &Url, store: Arc<dyn ObjectStore>) -> Self {
        self.by_root.insert(root_key(url), store);
        self
    }

    /// The local file behind `location` when it is a `file://` location (or a bare absolute
    /// path) that no registered store serves: such a file is read through the file system
    /// directly (see [`LocalRead`]). `None` for every other location.
    fn local_file(&self, location: &str) -> Option<std::path::PathBuf> {
        let url = parse_location(location).ok()?;
        if url.scheme() != "file" || self.by_root.contains_key(&root_key(&url)) {
            return None;
        }
        url.to_file_path().ok()
    }

    /// Flush to disk every local file written through these stores since the last sync, and the
    /// folders naming them: what a catalog version is about to name (see [`crate::durable`]).
    /// Nothing to do for object stores, which make a write durable before acknowledging it.
    pub(crate) async fn sync(&self) -> Result<()> {
        self.durability.sync().await
    }

    #[cfg(test)]
    pub(crate) fn durability(&self) -> &Arc<crate::durable::Durability> {
        &self.durability
    }

    /// Resolve a location to its store and object path.
    pub fn resolve(&self, location: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        let url = parse_location(location)?;
        let path = ObjectPath::from_url_path(url.path()).map_err(|e| LakeError::Location {
            location: location.to_string(),
            detail: e.to_string(),
        })?;
        let key = root_key(&url);
        if let Some(store) = self.by_root.get(&key) {
            return Ok((store.clone(), path));
        }
        if let Some(store) = self.built.lock().ok().and_then(|b| b.get(&key).cloned()) {
            return Ok((store, path));
        }
        let (store, store_path): (Arc<dyn ObjectStore>, ObjectPath) = if url.scheme() == "file" {
            (
                Arc::new(crate::durable::SyncedLocal::new(self.durability.clone())),
                path.clone(),
            )
        } else if matches!(url.scheme(), "s3" | "s3a") {
            // One store per bucket, from the AWS environment, checked for create-if-absent.
            (crate::s3::S3Config::new().build(location)?, path.clone())
        } else {
            let (store, p) = object_store::parse_url(&url).map_err(|e| LakeError::Location {
                location: location.to_string(),
                detail: format!("no object store for this URL ({e}); build sugarshack with the matching object_store feature"),
            })?;
            (Arc::from(store), p)
        };
        // Reuse it only where its paths are the URL paths (for every location of the root);
        // a store that maps paths otherwise is built per location, as before.
        if store_path == path
            && let Ok(mut built) = self.built.lock()
        {
            return Ok((built.entry(key).or_insert(store).clone(), path));
        }
        Ok((store, store_path))
    }
}

fn root_key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.authority())
}

/// Parse an absolute location. A bare absolute path is taken as a local file.
pub fn parse_location(location: &str) -> Result<Url> {
    if location.starts_with('/') {
        return Url::from_file_path(location).map_err(|_| LakeError::Location {
            location: location.to_string(),
            detail: "not an absolute path".into(),
        });
    }
    Url::parse(location).map_err(|e| LakeError::Location {
        location: location.to_string(),
        detail: e.to_string(),
    })
}

/// The `file://` location of a local folder (a relative path is taken from the working
/// directory), as [`crate::Catalog::open_local`] names it: for mixing a local folder with a URL
/// in [`crate::Catalog::open_url`].
pub fn local_dir_location(dir: &std::path::Path) -> Result<String> {
    let bad = |detail: String| LakeError::Location {
        location: dir.display().to_string(),
        detail,
    };
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| bad(e.to_string()))?
            .join(dir)
    };
    let url =
        Url::from_directory_path(&abs).map_err(|_| bad("not a usable directory path".into()))?;
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Join a relative path onto a directory URL, keeping exactly one `/` between them.
pub fn join(base: &str, rel: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        rel.trim_start_matches('/')
    )
}

/// Read a whole object. `Ok(None)` when it does not exist.
pub async fn read_optional(stores: &Stores, location: &str) -> Result<Option<Bytes>> {
    let (store, path) = stores.resolve(location)?;
    match store.get(&path).await {
        Ok(r) => Ok(Some(
            r.bytes().await.map_err(|e| LakeError::store(location, e))?,
        )),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(LakeError::store(location, e)),
    }
}

/// Write an object only if nothing is there yet. `Ok(false)` when another writer was first.
pub async fn put_if_absent(stores: &Stores, location: &str, bytes: Bytes) -> Result<bool> {
    match try_put_if_absent(stores, location, bytes).await? {
        PutIfAbsent::Written => Ok(true),
        PutIfAbsent::Exists => Ok(false),
        PutIfAbsent::Failed(e) => Err(LakeError::store(location, e)),
    }
}

/// What a create-if-absent put answered.
#[derive(Debug)]
pub(crate) enum PutIfAbsent {
    /// Ours is there.
    Written,
    /// Something was there already (perhaps ours, from an earlier put whose answer was lost).
    Exists,
    /// The store failed: the put may or may not have landed.
    Failed(object_store::Error),
}

/// [`put_if_absent`] that hands back a store failure instead of turning it into an error, for
/// callers that must settle whether the put landed.
pub(crate) async fn try_put_if_absent(
    stores: &Stores,
    location: &str,
    bytes: Bytes,
) -> Result<PutIfAbsent> {
    let (store, path) = stores.resolve(location)?;
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    Ok(
        match store.put_opts(&path, PutPayload::from(bytes), opts).await {
            Ok(_) => PutIfAbsent::Written,
            Err(object_store::Error::AlreadyExists { .. }) => PutIfAbsent::Exists,
            // Refused before anything was sent: nothing landed, and nothing ever will.
            Err(e @ object_store::Error::NotImplemented { .. }) => {
                return Err(LakeError::NoCreateIfAbsent {
                    location: location.to_string(),
                    detail: e.to_string(),
                });
            }
            Err(e) => PutIfAbsent::Failed(e),
        },
    )
}

/// Overwrite an object (used only for hints, never for truth: not flushed to disk before the
/// next catalog version, see [`crate::durable`]).
pub async fn put(stores: &Stores, location: &str, bytes: Bytes) -> Result<()> {
    let (store, path) = stores.resolve(location)?;
    let mut opts = PutOptions::default();
    opts.extensions.insert(crate::durable::Unsynced);
    store
        .put_opts(&path, PutPayload::from(bytes), opts)
        .await
        .map_err(|e| LakeError::store(location, e))?;
    Ok(())
}

/// Delete an object; a missing object is not an error.
pub async fn delete(stores: &Stores, location: &str) -> Result<()> {
    let (store, path) = stores.resolve(location)?;
    match store.delete(&path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(LakeError::store(location, e)),
    }
}

/// One listed object: its absolute location, and when it was last written (the store's clock).
#[derive(Clone, Debug)]
pub struct Listed {
    pub location: String,
    pub last_modified: chrono::DateTime<chrono::Utc>,
}

/// List every object under a directory location (recursively).
pub async fn list(stores: &Stores, dir: &str) -> Result<Vec<Listed>> {
    list_from(stores, dir, None).await
}

/// The objects under `dir` whose location sorts after `after` (a location under `dir`): a
/// listing that starts past it (S3's `start-after`), so when nothing follows it costs one
/// request however much sorts before.
pub async fn list_after(stores: &Stores, dir: &str, after: &str) -> Result<Vec<Listed>> {
    list_from(stores, dir, Some(after)).await
}

async fn list_from(stores: &Stores, dir: &str, after: Option<&str>) -> Result<Vec<Listed>> {
    let url = parse_location(dir)?;
    let (store, path) = stores.resolve(dir)?;
    let prefix = format!("{}://{}", url.scheme(), url.authority());
    let listing = match after {
        Some(after) => {
            let (_, offset) = stores.resolve(after)?;
            store.list_with_offset(Some(&path), &offset)
        }
        None => store.list(Some(&path)),
    };
    let metas: Vec<_> = listing
        .try_collect()
        .await
        .map_err(|e| LakeError::store(dir, e))?;
    Ok(metas
        .into_iter()
        .map(|m| Listed {
            location: format!("{prefix}/{}", m.location),
            last_modified: m.last_modified,
        })
        .collect())
}

/// Iceberg storage over [`Stores`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LakeStorage {
    #[serde(skip)]
    stores: Stores,
}

impl LakeStorage {
    fn resolve(&self, path: &str) -> iceberg::Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        self.stores.resolve(path).map_err(to_iceberg)
    }
}

fn to_iceberg(e: LakeError) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string())
}

fn store_err(path: &str, e: object_store::Error) -> iceberg::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => iceberg::ErrorKind::DataInvalid,
        _ => iceberg::ErrorKind::Unexpected,
    };
    iceberg::Error::new(kind, format!("{path}: {e}"))
}

#[async_trait]
#[typetag::serde]
impl Storage for LakeStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        let (store, p) = self.resolve(path)?;
        match store.head(&p).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_err(path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        let (store, p) = self.resolve(path)?;
        let meta = store.head(&p).await.map_err(|e| store_err(path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        let (store, p) = self.resolve(path)?;
        let got = store.get(&p).await.map_err(|e| store_err(path, e))?;
        got.bytes().await.map_err(|e| store_err(path, e))
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        if let Some(file) = self.stores.local_file(path) {
            return Ok(Box::new(LocalRead::open(file, path)?));
        }
        let (store, p) = self.resolve(path)?;
        Ok(Box::new(ObjectRead {
            store,
            path: p,
            location: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        let (store, p) = self.resolve(path)?;
        store
            .put(&p, PutPayload::from(bs))
            .await
            .map(|_| ())
            .map_err(|e| store_err(path, e))
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let (store, p) = self.resolve(path)?;
        Ok(Box::new(ObjectWrite {
            inner: Some(object_store::buffered::BufWriter::new(store, p)),
            location: path.to_string(),
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        let (store, p) = self.resolve(path)?;
        match store.delete(&p).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_err(path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let listed = list(&self.stores, path).await.map_err(to_iceberg)?;
        for l in listed {
            Storage::delete(self, &l.location).await?;
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(p) = paths.next().await {
            Storage::delete(self, &p).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    location: String,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        self.store
            .get_range(&self.path, range)
            .await
            .map_err(|e| store_err(&self.location, e))
    }
}

/// A local file opened once and read by position.
///
/// object_store's local file system opens, seeks and closes the file for every range it is
/// asked for, each on a blocking thread. A Parquet read asks for many ranges of one file (the
/// footer, a bloom filter per row group, a column chunk per projected column), and a daily run
/// reads a few thousand such ranges: this reader opens the file once when iceberg asks for a
/// reader, then reads each range with a positioned read (`pread`) of the one handle. Ranges up to
/// [`INLINE_BYTES`] are read on the calling task (a page-cache hit costs microseconds, less
/// than handing the work to a blocking thread and back); larger ones go to a blocking thread.
struct LocalRead {
    file: Arc<std::fs::File>,
    location: String,
}

/// The largest local read or write done on the calling task: a range [`LocalRead`] reads, and a
/// put or get of lake's local store ([`crate::durable::SyncedLocal`]). A small file in the page
/// cache is read or written in microseconds, less than handing the work to one of tokio's
/// blocking threads and waking the task again; larger ones go to a blocking thread.
pub(crate) const INLINE_BYTES: u64 = 256 * 1024;

impl LocalRead {
    fn open(path: std::path::PathBuf, location: &str) -> iceberg::Result<LocalRead> {
        let file = std::fs::File::open(&path).map_err(|e| local_err(location, e))?;
        Ok(LocalRead {
            file: Arc::new(file),
            location: location.to_string(),
        })
    }
}

fn local_err(location: &str, e: std::io::Error) -> iceberg::Error {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => iceberg::ErrorKind::DataInvalid,
        _ => iceberg::ErrorKind::Unexpected,
    };
    iceberg::Error::new(kind, format!("{location}: {e}"))
}

/// Read exactly `range` of `file`, or say why not (a range past the end names the file's size).
pub(crate) fn read_range(
    file: &std::fs::File,
    range: Range<u64>,
    location: &str,
) -> iceberg::Result<Bytes> {
    let len = range.end.checked_sub(range.start).ok_or_else(|| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!("{location}: range {range:?} ends before it starts"),
        )
    })?;
    let len = usize::try_from(len).map_err(|_| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!("{location}: range {range:?} does not fit in memory"),
        )
    })?;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match read_at(file, &mut buf[done..], range.start + done as u64) {
            Ok(0) => {
                let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                return Err(iceberg::Error::new(
                    iceberg::ErrorKind::DataInvalid,
                    format!(
                        "{location}: range {range:?} is past the end of the file ({size} bytes)"
                    ),
                ));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(local_err(location, e)),
        }
    }
    Ok(Bytes::from(buf))
}

#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

#[async_trait]
impl FileRead for LocalRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if range.end.saturating_sub(range.start) <= INLINE_BYTES {
            return read_range(&self.file, range, &self.location);
        }
        let file = self.file.clone();
        let location = self.location.clone();
        tokio::task::spawn_blocking(move || read_range(&file, range, &location))
            .await
            .map_err(|e| {
                iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    format!("{}: the read was cancelled: {e}", self.location),
                )
            })?
    }
}

struct ObjectWrite {
    inner: Option<object_store::buffered::BufWriter>,
    location: String,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        let Some(w) = self.inner.as_mut() else {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{}: write after close", self.location),
            ));
        };
        w.put(bs).await.map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{}: {e}", self.location),
            )
        })
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let Some(mut w) = self.inner.take() else {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{}: closed twice", self.location),
            ));
        };
        w.shutdown().await.map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{}: {e}", self.location),
            )
        })
    }
}

/// Builds [`LakeStorage`] for iceberg's `FileIO`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LakeStorageFactory {
    #[serde(skip)]
    stores: Stores,
}

#[typetag::serde]
impl StorageFactory for LakeStorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(LakeStorage {
            stores: self.stores.clone(),
        }))
    }
}

/// A `FileIO` that reads and writes through `stores`.
pub fn file_io(stores: &Stores) -> FileIO {
    FileIOBuilder::new(Arc::new(LakeStorageFactory {
        stores: stores.clone(),
    }))
    .build()
}

/// The size of an object, or `None` when it does not exist.
pub async fn read_head(stores: &Stores, location: &str) -> Result<Option<u64>> {
    let (store, path) = stores.resolve(location)?;
    match store.head(&path).await {
        Ok(m) => Ok(Some(m.size)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(LakeError::store(location, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_file_is_read_by_position_through_one_handle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let bytes: Vec<u8> = (0..=255u8)
            .cycle()
            .take(INLINE_BYTES as usize + 10)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let location = Url::from_file_path(&path).unwrap().to_string();
        let storage = LakeStorage {
            stores: Stores::new(),
        };
        assert!(storage.stores.local_file(&location).is_some());
        let r = storage.reader(&location).await.unwrap();
        // A small range (read on the task) and a large one (on a blocking thread).
        assert_eq!(r.read(3..7).await.unwrap(), bytes[3..7]);
        let end = bytes.len() as u64;
        assert_eq!(r.read(1..end).await.unwrap(), bytes[1..]);
        // Past the end: an error that names the file and its size, never short bytes.
        let err = r.read(end - 2..end + 2).await.unwrap_err().to_string();
        assert!(
            err.contains("f.bin") && err.contains(&end.to_string()),
            "{err}"
        );
        // A missing file is an error when the reader is asked for, naming it.
        let gone = Url::from_file_path(dir.path().join("gone"))
            .unwrap()
            .to_string();
        let err = storage.reader(&gone).await.err().unwrap().to_string();
        assert!(err.contains("gone"), "{err}");
        // A registered store for the root is used instead (tests, fault injection).
        let registered = Stores::new().with_store(
            &Url::parse("file:///").unwrap(),
            Arc::new(object_store::memory::InMemory::new()),
        );
        assert!(registered.local_file(&location).is_none());
    }

    #[tokio::test]
    async fn one_store_per_root_is_built_once_and_reused() {
        let stores = Stores::new();
        let dir = tempfile::tempdir().unwrap();
        let base = Url::from_directory_path(dir.path()).unwrap();
        let (a, _) = stores.resolve(base.join("a").unwrap().as_str()).unwrap();
        let (b, _) = stores
            .clone()
            .resolve(base.join("b/c").unwrap().as_str())
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one local file system store");
        // A memory store built from its URL is the same memory on every call.
        put(&stores, "memory:///x/y", Bytes::from("1"))
            .await
            .unwrap();
        assert_eq!(
            read_optional(&stores, "memory:///x/y").await.unwrap(),
            Some(Bytes::from("1"))
        );
    }

    #[test]
    fn an_s3_url_resolves_to_one_checked_s3_store_per_bucket() {
        let stores = Stores::new();
        let (a, pa) = stores.resolve("s3://lake/catalog/versions/v1").unwrap();
        let (b, pb) = stores.resolve("s3://lake/warehouse/t/x.parquet").unwrap();
        let (c, _) = stores.resolve("s3://other/x").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one store per bucket, reused");
        assert!(!Arc::ptr_eq(&a, &c), "another bucket, another store");
        assert_eq!(pa.as_ref(), "catalog/versions/v1");
        assert_eq!(pb.as_ref(), "warehouse/t/x.parquet");
        assert!(a.to_string().starts_with("s3://lake"), "{a}");
        // Never a local path.
        assert!(!a.to_string().contains("LocalFileSystem"), "{a}");
    }
}
