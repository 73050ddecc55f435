//! Commits on a local disk that survive a power cut, not only a crash of the process.
//!
//! A file written to a local folder sits in the operating system's page cache until the kernel
//! writes it back, seconds later; a directory entry (a file's name) likewise. A process that dies
//! loses nothing of what it wrote, but a machine that loses power loses whatever was not yet
//! written back, in any order: a catalog version could survive while the data files, manifests
//! or table metadata it names did not (or survive as a file of zeros, or not at all). Object
//! stores (S3) make a write durable before they acknowledge it; a local folder needs `fsync`.
//!
//! So every object lake writes to a local folder is remembered ([`Durability::record`]), and
//! before a catalog version is written, everything written since the last such point is synced
//! to disk ([`Durability::sync`]); then the version. A version therefore never reaches the disk
//! before anything it names. `LAKE_FSYNC` chooses how ([`Method`]):
//!
//! - **By file system** (the default on Linux 5.8 and later): one `syncfs` a sync, which writes
//!   back every dirty file of the file system and commits its journal (new names included), on
//!   ext2/3/4, XFS, Btrfs, F2FS and tmpfs; each file's write-back is started as it is written
//!   (`sync_file_range`), so the sync finds less to wait for. Files elsewhere (a network or FUSE
//!   file system), and every file of a sync when the machine holds more than 64 MiB not yet
//!   written back (whoever wrote it: `syncfs` would wait for all of it), are flushed one by one
//!   as below. A failed `syncfs` sends its files one by one too, so an error is reported, and
//!   named, by the file it belongs to. What it gives up: a write-back error that another
//!   process's `syncfs` of the same file system saw first is not seen again by lake's
//!   (`fsync` of the file would see it); that needs a disk error and a second program syncing
//!   that file system at once.
//! - **File by file** (`LAKE_FSYNC=files`, and the default elsewhere): each file is flushed
//!   (`fsync`), then the folders that name them: each synced file's folder, and, for a folder
//!   this process has not synced before (it may be new), its parent, up to a folder it has
//!   synced (or the root). Each file starts flushing on one of tokio's blocking threads as soon
//!   as it is written (up to [`SYNC_THREADS`] at once; a disk handles several flushes in
//!   parallel far faster than one after another), so the flushes overlap the work that writes
//!   the commit's other files; a sync waits for those and flushes the rest, a few threads at
//!   once.
//! - **Off** (`LAKE_FSYNC=off`, or `0`, `false`, `no`): for throwaway lakes (a RAM disk, a test),
//!   where a power cut loses the whole folder anyway.
//!
//! What it costs, on the two-core machine of the benchmarks (ext4, a virtual disk): file by file,
//! 2.3-2.6 s of a scale-1 `season` (93 runs, 282 catalog versions; three `season`s each way
//! against `LAKE_FSYNC=off`), and with it the cost of a blocking thread and a system call for
//! each file and folder (system time 3.0 → 4.8-5.7 s, voluntary context switches 33,000 →
//! 103,000). By file system, 564 `syncfs` a `season` (two a version) and no `fsync`: seven
//! `season`s each way, taking turns, took a median of 13.7 s against 14.7 s file by file (system
//! time 4.4 against 5.8 s, context switches 37,000 against 103,000). `tests/benches/LOG.md` has
//! these and the seasons measured before.
//!
//! Objects lake overwrites in place through [`crate::storage::put`] are not synced: the version
//! hint (a stale or torn one only slows the search for the head), work markers and the orphan
//! ledger (after a power cut no work is in progress, and an orphan forgotten is found again).

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    UploadPart,
};

use crate::error::{LakeError, Result};
use crate::storage::INLINE_BYTES;

/// At most this many threads flush files at once.
const SYNC_THREADS: usize = 8;

/// The local files written since the last sync, and the folders known to be on disk.
#[derive(Debug)]
pub(crate) struct Durability {
    method: Method,
    pending: Mutex<Vec<Written>>,
    /// Folders this process synced: their own entry in their parent is on disk.
    synced_dirs: Mutex<HashSet<PathBuf>>,
    /// How many flushes started as their files were written are still running.
    early: Arc<AtomicUsize>,
    /// One sync at a time. A commit that finds nothing pending must still wait for a sync in
    /// progress: the files it flushes may be that commit's own.
    turn: tokio::sync::Mutex<()>,
    /// Every flush, in order (tests only).
    #[cfg(test)]
    pub(crate) flushed: Mutex<Vec<PathBuf>>,
}

/// A file written since the last sync, and its flush when one started as it was written.
#[derive(Debug)]
struct Written {
    path: PathBuf,
    early: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl Default for Durability {
    fn default() -> Self {
        Durability::new(method_from_env())
    }
}

/// How a sync makes what was written durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// Nothing is flushed (`LAKE_FSYNC=off`).
    Off,
    /// Each file is flushed (`fsync`), then each folder that names one (`LAKE_FSYNC=files`; the
    /// default where [`Method::Filesystem`] is not available).
    Files,
    /// The file system holding the files is flushed whole, once a sync (Linux `syncfs`), on
    /// the file systems known to flush their journal with it; files elsewhere are flushed one
    /// by one. The default on Linux 5.8 and later, where `syncfs` reports write-back errors.
    Filesystem,
}

impl Method {
    /// The method `LAKE_FSYNC`'s value asks for: `off` (or `0`, `false`, `no`), `files`, or
    /// anything else (unset, `on`, `filesystem`) for the best this system has.
    pub(crate) fn parse(value: Option<&str>) -> Method {
        let value = value.map(|v| v.trim().to_ascii_lowercase());
        match value.as_deref() {
            Some("off" | "0" | "false" | "no") => Method::Off,
            Some("files") => Method::Files,
            _ if syncfs::available() => Method::Filesystem,
            _ => Method::Files,
        }
    }
}

/// The method `LAKE_FSYNC` asks for in this process (see [`Method::parse`]).
fn method_from_env() -> Method {
    static METHOD: std::sync::OnceLock<Method> = std::sync::OnceLock::new();
    *METHOD.get_or_init(|| Method::parse(std::env::var("LAKE_FSYNC").ok().as_deref()))
}

/// Whether `LAKE_FSYNC` turns syncing off for this process.
#[cfg(test)]
fn fsync_off() -> bool {
    method_from_env() == Method::Off
}

/// A put that carries this in its options' extensions writes a hint: an object overwritten
/// again and again and named by nothing (the version hint, work markers, the orphan ledger),
/// which [`SyncedLocal`] neither records nor flushes. Other stores ignore it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unsynced;

impl Durability {
    pub(crate) fn new(method: Method) -> Self {
        Durability {
            method,
            pending: Mutex::new(Vec::new()),
            synced_dirs: Mutex::new(HashSet::new()),
            early: Arc::new(AtomicUsize::new(0)),
            turn: tokio::sync::Mutex::new(()),
            #[cfg(test)]
            flushed: Mutex::new(Vec::new()),
        }
    }

    /// Remember a local file just written (renamed or linked into place), and start getting it
    /// to disk, so that by the time a commit syncs most of what it names is there already: by
    /// file system, its write-back; file by file, its flush, when fewer than [`SYNC_THREADS`]
    /// such flushes are running.
    fn record(&self, path: PathBuf) {
        self.record_written(path, false);
    }

    /// [`Durability::record`], for a file whose write-back its writer started already (by file
    /// system, on the handle it wrote with) when `writeback_started`.
    fn record_written(&self, path: PathBuf, writeback_started: bool) {
        let early = match self.method {
            Method::Off => return,
            Method::Files => self.start_flush(&path),
            Method::Filesystem => {
                if !writeback_started {
                    syncfs::start_writeback(&path);
                }
                None
            }
        };
        if let Ok(mut p) = self.pending.lock() {
            p.push(Written { path, early });
        }
    }

    /// Flush `path` on one of tokio's blocking threads, unless there is no runtime here or
    /// [`SYNC_THREADS`] early flushes are running (the next sync flushes it then).
    fn start_flush(&self, path: &Path) -> Option<tokio::task::JoinHandle<Result<()>>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        if self.early.fetch_add(1, Ordering::AcqRel) >= SYNC_THREADS {
            self.early.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let running = Arc::clone(&self.early);
        let path = path.to_path_buf();
        Some(runtime.spawn_blocking(move || {
            let flushed = flush(&path, false);
            running.fetch_sub(1, Ordering::AcqRel);
            flushed
        }))
    }

    /// Flush every file written since the last sync (waiting for those whose flush started as
    /// they were written), then the folders that name them. An error names the file or folder
    /// that could not be flushed, and every other file of this sync goes back on the list: they
    /// may be other writers' (one process, several commits), whose own sync, next, must flush
    /// them (and their folders) before their versions name them.
    pub(crate) async fn sync(&self) -> Result<()> {
        if self.method == Method::Off {
            return Ok(());
        }
        let _turn = self.turn.lock().await;
        let written = match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => {
                return Err(LakeError::Other(
                    "the list of files to sync is poisoned".into(),
                ));
            }
        };
        if written.is_empty() {
            return Ok(());
        }
        let written = if self.method == Method::Filesystem {
            self.sync_filesystems(written).await?
        } else {
            written
        };
        if written.is_empty() {
            return Ok(());
        }
        let mut files = Vec::with_capacity(written.len());
        let mut unflushed = Vec::new();
        let mut failed = None;
        for w in written {
            match w.early {
                None => unflushed.push(w.path.clone()),
                Some(task) => match task.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        failed.get_or_insert(e);
                    }
                    // Its task died: flush the file here instead.
                    Err(_) => unflushed.push(w.path.clone()),
                },
            }
            files.push(w.path);
        }
        let flushed = match failed {
            Some(e) => Err(e),
            None => self.flush_all(&mut files, &mut unflushed).await,
        };
        if let Err(e) = &flushed
            && let Ok(mut p) = self.pending.lock()
        {
            // All but the file that failed: its writer's commit fails, so nothing will name it,
            // and trying it again would fail every later commit of this process with it.
            if let LakeError::NotDurable { path, .. } = e {
                files.retain(|f| f.display().to_string() != *path);
            }
            p.extend(files.into_iter().map(|path| Written { path, early: None }));
        }
        flushed
    }

    /// Flush the file systems that hold `written` (one `syncfs` each), and hand back the files
    /// that must still be flushed one by one: those on a file system not flushed so, and every
    /// file of one whose flush failed, so that the error is found again, and named, file by
    /// file (a write-back error `syncfs` reports is not one a later `fsync` of the file misses).
    async fn sync_filesystems(&self, written: Vec<Written>) -> Result<Vec<Written>> {
        let paths: Vec<PathBuf> = written.iter().map(|w| w.path.clone()).collect();
        let left = tokio::task::spawn_blocking(move || syncfs::flush_filesystems(&paths))
            .await
            .map_err(|e| {
                LakeError::Other(format!("syncing files to disk: its task failed: {e}"))
            })?;
        let (rest, done): (Vec<Written>, Vec<Written>) =
            written.into_iter().partition(|w| left.contains(&w.path));
        #[cfg(test)]
        if let Ok(mut f) = self.flushed.lock() {
            let files: Vec<PathBuf> = done.iter().map(|w| w.path.clone()).collect();
            let mut dirs: Vec<PathBuf> = files
                .iter()
                .flat_map(|f| f.ancestors().skip(1).map(Path::to_path_buf))
                .collect();
            dirs.sort();
            dirs.dedup();
            f.extend(files);
            f.extend(dirs);
        }
        drop(done);
        Ok(rest)
    }

    /// Flush `unflushed` (some of `files`), then the folders of every one of `files`.
    async fn flush_all(
        &self,
        files: &mut Vec<PathBuf>,
        unflushed: &mut Vec<PathBuf>,
    ) -> Result<()> {
        files.sort();
        files.dedup();
        unflushed.sort();
        unflushed.dedup();
        flush_parallel(unflushed, false).await?;
        let dirs = self.folders_of(files)?;
        flush_parallel(&dirs, true).await?;
        #[cfg(test)]
        if let Ok(mut f) = self.flushed.lock() {
            f.extend(files.iter().cloned());
            f.extend(dirs.iter().cloned());
        }
        if let Ok(mut known) = self.synced_dirs.lock() {
            known.extend(dirs);
        }
        Ok(())
    }

    /// The folders to flush after `files`: each file's, and the parents of folders never
    /// synced here (they may be new), up to one that was (or the root).
    fn folders_of(&self, files: &[PathBuf]) -> Result<Vec<PathBuf>> {
        let known = self
            .synced_dirs
            .lock()
            .map_err(|_| LakeError::Other("the set of synced folders is poisoned".into()))?;
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut seen: HashSet<&Path> = HashSet::new();
        for f in files {
            let mut dir = f.parent();
            while let Some(d) = dir {
                if !seen.insert(d) {
                    break;
                }
                dirs.push(d.to_path_buf());
                if known.contains(d) {
                    break;
                }
                dir = d.parent();
            }
        }
        Ok(dirs)
    }
}

/// Flushing a whole file system at once (Linux `syncfs`), and starting a file's write-back.
#[cfg(target_os = "linux")]
mod syncfs {
    use std::collections::{HashMap, HashSet};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    /// File systems whose `syncfs` commits their journal (so new names, not only file data,
    /// reach the disk) and reports write-back errors: ext2/3/4, XFS, Btrfs, F2FS, and tmpfs
    /// (where there is no disk, as with `fsync`). Network and FUSE file systems are flushed
    /// file by file.
    const FLUSHED_WHOLE: [u64; 5] = [0xEF53, 0x5846_5342, 0x9123_683E, 0xF2F5_2010, 0x0102_1994];

    /// Whether this kernel's `syncfs` reports write-back errors (Linux 5.8 and later); before,
    /// it reported none, and a sync would succeed over a file the disk had refused.
    pub(super) fn available() -> bool {
        // SAFETY: `uname` fills the struct it is given; a zeroed `utsname` is a valid one.
        let mut name: libc::utsname = unsafe { std::mem::zeroed() };
        if unsafe { libc::uname(&mut name) } != 0 {
            return false;
        }
        let release: String = name
            .release
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect();
        reports_errors(&release)
    }

    /// Whether a kernel of `release` ("6.18.44-…") reports write-back errors from `syncfs`.
    pub(super) fn reports_errors(release: &str) -> bool {
        let mut parts = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor) >= (5, 8),
            _ => false,
        }
    }

    /// Ask the kernel to start writing `path`'s data back now, without waiting for it, so a
    /// sync finds less to write. Best effort: the sync flushes it either way.
    pub(super) fn start_writeback(path: &Path) {
        if let Ok(f) = std::fs::File::open(path) {
            start_writeback_of(&f);
        }
    }

    /// [`start_writeback`] of an open file.
    pub(super) fn start_writeback_of(file: &std::fs::File) {
        // SAFETY: a valid descriptor; the call only starts write-back of its pages.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }

    /// Flush the file systems holding `files`, one `syncfs` each, and return the files it did
    /// not cover: those whose folder cannot be opened (gone, or unreadable), those on a file
    /// system not in [`FLUSHED_WHOLE`], and those on one whose `syncfs` failed; or every file,
    /// when the machine holds more than [`MOST_UNWRITTEN`] unwritten (or does not say).
    pub(super) fn flush_filesystems(files: &[PathBuf]) -> HashSet<PathBuf> {
        let unwritten = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| unwritten_bytes(&m));
        if unwritten.is_none_or(|b| b > MOST_UNWRITTEN) {
            return files.iter().cloned().collect();
        }
        flush_whole(files)
    }

    /// [`flush_filesystems`] without its check of how much is unwritten. Each folder is looked
    /// up once (`stat`) for its device; one folder a device is opened, to ask its file system's
    /// kind and flush it.
    pub(super) fn flush_whole(files: &[PathBuf]) -> HashSet<PathBuf> {
        let mut left = HashSet::new();
        let mut folders: HashMap<&Path, Vec<&PathBuf>> = HashMap::new();
        for f in files {
            match f.parent() {
                Some(dir) => folders.entry(dir).or_default().push(f),
                None => {
                    left.insert(f.clone());
                }
            }
        }
        // Per device: a folder on it, and the files of every folder on it.
        let mut devices: HashMap<u64, (&Path, Vec<&PathBuf>)> = HashMap::new();
        for (dir, in_dir) in folders {
            match std::fs::metadata(dir) {
                Ok(m) => devices
                    .entry(m.dev())
                    .or_insert((dir, Vec::new()))
                    .1
                    .extend(in_dir),
                Err(_) => left.extend(in_dir.into_iter().cloned()),
            }
        }
        for (dir, on_device) in devices.into_values() {
            let covered = std::fs::File::open(dir).is_ok_and(|folder| {
                // SAFETY: a valid descriptor of a folder on the file system to flush.
                flushed_whole(&folder) && unsafe { libc::syncfs(folder.as_raw_fd()) == 0 }
            });
            if !covered {
                left.extend(on_device.into_iter().cloned());
            }
        }
        left
    }

    /// The most data the machine may hold unwritten (dirty, or being written back) for a sync to
    /// flush whole file systems: `syncfs` waits for all of it, whoever wrote it, so past this a
    /// sync flushes its own files one by one and never waits on another program's gigabytes.
    pub(super) const MOST_UNWRITTEN: u64 = 64 << 20;

    /// The bytes `/proc/meminfo` (its text, `meminfo`) says are dirty or being written back.
    pub(super) fn unwritten_bytes(meminfo: &str) -> Option<u64> {
        let field = |name: &str| {
            meminfo.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?.trim();
                let kb = rest.strip_suffix("kB").unwrap_or(rest).trim();
                kb.parse::<u64>().ok()
            })
        };
        Some((field("Dirty")? + field("Writeback")?).saturating_mul(1024))
    }

    /// Whether the file system holding `folder` is one [`FLUSHED_WHOLE`] names.
    fn flushed_whole(folder: &std::fs::File) -> bool {
        // SAFETY: `fstatfs` fills the struct it is given; a zeroed `statfs` is a valid one.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(folder.as_raw_fd(), &mut st) } != 0 {
            return false;
        }
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
        let kind = st.f_type as u64;
        FLUSHED_WHOLE.contains(&kind)
    }
}

/// Elsewhere there is no `syncfs`: every file is flushed by itself.
#[cfg(not(target_os = "linux"))]
mod syncfs {
    use std::collections::HashSet;
    use std::path::{Path, PathBuf};

    pub(super) fn available() -> bool {
        false
    }

    pub(super) fn start_writeback(_path: &Path) {}

    pub(super) fn start_writeback_of(_file: &std::fs::File) {}

    pub(super) fn flush_filesystems(files: &[PathBuf]) -> HashSet<PathBuf> {
        files.iter().cloned().collect()
    }

    #[cfg(test)]
    pub(super) fn flush_whole(files: &[PathBuf]) -> HashSet<PathBuf> {
        flush_filesystems(files)
    }
}

/// `fsync` each path (files, or folders when `dirs`), a few at once on tokio's blocking
/// threads. A path gone since it was written is skipped: nothing can name what is not there.
async fn flush_parallel(paths: &[PathBuf], dirs: bool) -> Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    let threads = paths.len().div_ceil(4).clamp(1, SYNC_THREADS);
    let chunk = paths.len().div_ceil(threads);
    let tasks = paths.chunks(chunk).map(|part| {
        let part = part.to_vec();
        tokio::task::spawn_blocking(move || part.iter().try_for_each(|p| flush(p, dirs)))
    });
    for done in futures::future::join_all(tasks).await {
        done.map_err(|e| {
            LakeError::Other(format!("syncing files to disk: its task failed: {e}"))
        })??;
    }
    Ok(())
}

fn flush(path: &Path, dir: bool) -> Result<()> {
    let failed = |e: std::io::Error| LakeError::NotDurable {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(failed(e)),
    };
    match file.sync_all() {
        Ok(()) => Ok(()),
        // Some file systems refuse to sync a folder (the entry is then as durable as they make
        // it): nothing more can be done about that one.
        Err(e) if dir && e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

/// The local file system, remembering each file it writes for [`Durability::sync`].
///
/// The local file system store hands every call to one of tokio's blocking threads and wakes the
/// calling task when it is done. Most of what lake writes and reads whole is small (table
/// metadata, manifests, manifest lists, catalog versions, a day's data files), and a small file
/// in the page cache is written or read in microseconds, less than that round trip: puts of up
/// to [`INLINE_BYTES`], gets whose range is at most that, and heads are done here on the calling
/// task, the same way (a staging file renamed or linked into place, the same tags and errors).
/// On the benchmarks' two-core machine that took a scale-1 `season`'s voluntary context
/// switches from about 125,000 to 87,000 and its processor time by a median of 14% (ten
/// seasons of each, taking turns; `tests/benches/LOG.md`).
#[derive(Debug)]
pub(crate) struct SyncedLocal {
    inner: LocalFileSystem,
    durability: Arc<Durability>,
}

impl SyncedLocal {
    pub(crate) fn new(durability: Arc<Durability>) -> Self {
        SyncedLocal {
            inner: LocalFileSystem::new(),
            durability,
        }
    }

    fn record(&self, location: &ObjectPath) {
        if let Ok(p) = self.inner.path_to_filesystem(location) {
            self.durability.record(p);
        }
    }
}

impl fmt::Display for SyncedLocal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyncedLocal({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for SyncedLocal {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let create = match opts.mode {
            PutMode::Overwrite => Some(false),
            PutMode::Create => Some(true),
            PutMode::Update(_) => None,
        };
        let path = self.inner.path_to_filesystem(location)?;
        let unsynced = opts.extensions.get::<Unsynced>().is_some();
        // By file system, a file written here starts its write-back on the handle it was
        // written with, rather than being opened again to start it.
        let writeback = !unsynced && self.durability.method == Method::Filesystem;
        let (r, started) = match create {
            Some(create)
                if payload.content_length() as u64 <= INLINE_BYTES
                    && opts.attributes.is_empty() =>
            {
                (put_here(&path, &payload, create, writeback)?, writeback)
            }
            _ => (self.inner.put_opts(location, payload, opts).await?, false),
        };
        if !unsynced {
            self.durability.record_written(path, started);
        }
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        let path = self.inner.path_to_filesystem(location).ok();
        Ok(Box::new(SyncedUpload {
            inner,
            path,
            durability: self.durability.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let path = self.inner.path_to_filesystem(location)?;
        get_here(path, location.clone(), options)
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjectPath>,
        offset: &ObjectPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await?;
        self.record(to);
        Ok(())
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await?;
        self.record(to);
        Ok(())
    }
}

fn local_error(path: &Path, e: std::io::Error) -> object_store::Error {
    let path = path.display().to_string();
    match e.kind() {
        std::io::ErrorKind::NotFound => object_store::Error::NotFound {
            path,
            source: Box::new(e),
        },
        std::io::ErrorKind::AlreadyExists => object_store::Error::AlreadyExists {
            path,
            source: Box::new(e),
        },
        _ => object_store::Error::Generic {
            store: "LocalFileSystem",
            source: format!("{path}: {e}").into(),
        },
    }
}

/// A new staging file beside `dest` (`dest#1`, `dest#2`, …, names the local file system store
/// leaves out of its listings), its folders created as needed.
fn staged(dest: &Path) -> std::io::Result<(std::fs::File, PathBuf)> {
    let mut n = 1u64;
    loop {
        let mut name = dest.as_os_str().to_owned();
        name.push(format!("#{n}"));
        let path = PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match path.parent() {
                Some(dir) => std::fs::create_dir_all(dir)?,
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// Write `payload` to `dest` as the local file system store does, on the calling thread: into
/// a staging file, then renamed over `dest` (overwrite) or linked to it, which fails when
/// `dest` exists (create). With `writeback`, the file's write-back is started before its handle
/// closes (see [`Method::Filesystem`]).
fn put_here(
    dest: &Path,
    payload: &PutPayload,
    create: bool,
    writeback: bool,
) -> object_store::Result<PutResult> {
    use std::io::Write;
    let (mut file, staging) = staged(dest).map_err(|e| local_error(dest, e))?;
    let written = payload
        .iter()
        .try_for_each(|part| file.write_all(part))
        .and_then(|()| file.metadata());
    if writeback && written.is_ok() {
        syncfs::start_writeback_of(&file);
    }
    drop(file);
    let placed = written.and_then(|meta| {
        if create {
            std::fs::hard_link(&staging, dest)?;
            let _ = std::fs::remove_file(&staging);
        } else {
            std::fs::rename(&staging, dest)?;
        }
        Ok(meta)
    });
    match placed {
        Ok(meta) => Ok(PutResult {
            e_tag: Some(e_tag(&meta)),
            version: None,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&staging);
            Err(local_error(dest, e))
        }
    }
}

/// The local file system store's tag for a file: inode, modification time and size.
fn e_tag(meta: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(meta);
    #[cfg(not(unix))]
    let inode = 0u64;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::SystemTime::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("{inode:x}-{mtime:x}-{:x}", meta.len())
}

/// Answer a get as the local file system store does, on the calling thread: the file's
/// metadata, checked against the request's conditions, and the requested bytes when they are
/// at most [`INLINE_BYTES`] (larger ranges are handed back as the open file, which the caller
/// reads on a blocking thread).
fn get_here(
    path: PathBuf,
    location: ObjectPath,
    options: GetOptions,
) -> object_store::Result<GetResult> {
    // A head needs only the metadata; a read opens the file and asks the handle.
    let file = if options.head {
        None
    } else {
        Some(std::fs::File::open(&path).map_err(|e| local_error(&path, e))?)
    };
    let meta = match &file {
        Some(f) => f.metadata(),
        None => std::fs::metadata(&path),
    }
    .map_err(|e| local_error(&path, e))?;
    if meta.is_dir() {
        return Err(local_error(
            &path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "is a directory"),
        ));
    }
    let last_modified = meta.modified().map_err(|e| local_error(&path, e))?.into();
    let object = ObjectMeta {
        location,
        last_modified,
        size: meta.len(),
        e_tag: Some(e_tag(&meta)),
        version: None,
    };
    options.check_preconditions(&object)?;
    let range = match &options.range {
        Some(r) => r
            .as_range(object.size)
            .map_err(|e| object_store::Error::Generic {
                store: "LocalFileSystem",
                source: format!("{}: {e}", path.display()).into(),
            })?,
        None => 0..object.size,
    };
    let payload = match file {
        None => GetResultPayload::Stream(futures::stream::empty().boxed()),
        Some(file) if range.end - range.start <= INLINE_BYTES => {
            let bytes =
                crate::storage::read_range(&file, range.clone(), &path.display().to_string())
                    .map_err(|e| object_store::Error::Generic {
                        store: "LocalFileSystem",
                        source: Box::new(e),
                    })?;
            GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed())
        }
        Some(file) => GetResultPayload::File(file, path),
    };
    Ok(GetResult {
        payload,
        meta: object,
        range,
        attributes: Default::default(),
    })
}

/// A multipart write to a local file, remembered once it is complete.
#[derive(Debug)]
struct SyncedUpload {
    inner: Box<dyn MultipartUpload>,
    path: Option<PathBuf>,
    durability: Arc<Durability>,
}

#[async_trait]
impl MultipartUpload for SyncedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let r = self.inner.complete().await?;
        if let Some(p) = self.path.take() {
            self.durability.record(p);
        }
        Ok(r)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use object_store::ObjectStoreExt;
    use std::collections::BTreeMap;

    /// Every regular file and folder under `root`.
    fn tree(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let (mut files, mut dirs) = (Vec::new(), vec![root.to_path_buf()]);
        let mut todo = vec![root.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).expect("read_dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    dirs.push(p.clone());
                    todo.push(p);
                } else {
                    files.push(p);
                }
            }
        }
        (files, dirs)
    }

    /// A sync that fails on one file (here a socket, which cannot be opened to flush) keeps
    /// every other file it took on the list: another writer's file flushed in the same batch is
    /// not forgotten, and the next sync flushes it; the failed one is not tried again.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_failed_sync_keeps_every_file_for_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let theirs = root.join("theirs.parquet");
        std::fs::write(&theirs, b"data").expect("write");
        let socket = root.join("bad.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let d = Durability::new(Method::Files);
        d.record(theirs.clone());
        d.record(socket.clone());
        let err = d.sync().await.expect_err("a socket cannot be flushed");
        assert!(
            matches!(&err, LakeError::NotDurable { path, .. } if path.ends_with("bad.sock")),
            "{err}"
        );
        let pending = d.pending_paths();
        assert!(pending.contains(&theirs), "{pending:?}");
        assert!(
            !pending.contains(&socket),
            "the failed file is not tried again"
        );
        std::fs::remove_file(&socket).expect("rm");
        d.sync()
            .await
            .expect("the bad file is gone: the rest flushes");
        assert!(d.flushed.lock().expect("flushed").contains(&theirs));
        assert!(d.pending.lock().expect("pending").is_empty());
    }

    #[tokio::test]
    async fn a_version_reaches_the_disk_after_everything_it_names() {
        if fsync_off() {
            eprintln!("LAKE_FSYNC is off in this process: nothing to check");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let c = Catalog::open_local(root.join("cat"), root.join("wh")).expect("open");
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        c.create_table("a.t", &schema, &[]).await.expect("create");
        for i in 0..2 {
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from(vec![i, i + 10]))],
            )
            .expect("batch");
            c.append("a.t", "main", &[b], BTreeMap::new())
                .await
                .expect("append");
        }
        let flushed = c
            .stores()
            .durability()
            .flushed
            .lock()
            .expect("flushed")
            .clone();
        let at = |p: &Path| flushed.iter().position(|f| f == p);
        let (files, dirs) = tree(&root);
        // Every file but the hint was flushed, and every folder.
        let hint = root.join("cat").join("version-hint.txt");
        for f in files.iter().filter(|f| **f != hint) {
            assert!(
                at(f).is_some(),
                "{} was never flushed: {flushed:#?}",
                f.display()
            );
        }
        for d in &dirs {
            assert!(at(d).is_some(), "folder {} was never flushed", d.display());
        }
        // The last version after every table file (data, manifests, metadata): it names them.
        let versions: Vec<&PathBuf> = files
            .iter()
            .filter(|f| f.starts_with(root.join("cat").join("versions")))
            .collect();
        let last = versions.iter().max().expect("a version");
        let last_at = at(last).expect("flushed");
        for f in files.iter().filter(|f| f.starts_with(root.join("wh"))) {
            assert!(
                at(f).is_some_and(|i| i < last_at),
                "{} flushed after {}",
                f.display(),
                last.display()
            );
        }
        // The hint is never flushed (it is rewritten after every version and only speeds up
        // finding the head), so nothing is left to flush.
        assert!(at(&hint).is_none());
        let n = flushed.len();
        c.stores().sync().await.expect("sync");
        assert_eq!(
            c.stores()
                .durability()
                .flushed
                .lock()
                .expect("flushed")
                .len(),
            n
        );
    }

    /// A file starts flushing as it is written (so a commit's sync mostly finds its files on
    /// disk already), never more than [`SYNC_THREADS`] at once; the rest wait for the sync.
    #[tokio::test]
    async fn files_start_flushing_as_they_are_written_and_the_sync_waits_for_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let d = Durability::new(Method::Files);
        let files: Vec<PathBuf> = (0..3 * SYNC_THREADS)
            .map(|i| root.join(format!("f{i}")))
            .collect();
        for f in &files {
            std::fs::write(f, b"x").expect("write");
            d.record(f.clone());
        }
        let started = d
            .pending
            .lock()
            .expect("pending")
            .iter()
            .filter(|w| w.early.is_some())
            .count();
        assert!(started >= 1, "no flush started as its file was written");
        assert!(d.early.load(Ordering::Acquire) <= SYNC_THREADS);
        d.sync().await.expect("sync");
        assert_eq!(d.early.load(Ordering::Acquire), 0);
        let flushed = d.flushed.lock().expect("flushed").clone();
        for f in &files {
            assert!(flushed.contains(f), "{} not flushed", f.display());
        }
        assert!(flushed.contains(&root), "and the folder naming them");
        assert!(d.pending_paths().is_empty());
    }

    #[tokio::test]
    async fn a_file_gone_since_it_was_written_is_skipped_and_a_folder_parent_is_synced_once_known()
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let d = Durability::new(Method::Files);
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("a/b/x"), b"x").expect("write");
        let mut files = vec![root.join("a/b/x"), root.join("a/b/gone")];
        d.flush_all(&mut files.clone(), &mut files)
            .await
            .expect("a missing file is not an error");
        let first = d.flushed.lock().expect("flushed").clone();
        assert!(first.contains(&root.join("a/b")));
        assert!(first.contains(&root.join("a")), "a new folder's parent");
        // The next file in a known folder: that folder only.
        std::fs::write(root.join("a/b/y"), b"y").expect("write");
        d.flush_all(&mut vec![root.join("a/b/y")], &mut vec![root.join("a/b/y")])
            .await
            .expect("flush");
        let second = d.flushed.lock().expect("flushed")[first.len()..].to_vec();
        assert_eq!(second, [root.join("a/b/y"), root.join("a/b")]);
    }

    #[test]
    fn lake_fsync_chooses_the_method() {
        for off in ["off", "0", "false", "NO", " off "] {
            assert_eq!(Method::parse(Some(off)), Method::Off, "{off:?}");
        }
        assert_eq!(Method::parse(Some("files")), Method::Files);
        let best = if syncfs::available() {
            Method::Filesystem
        } else {
            Method::Files
        };
        for on in [None, Some("on"), Some("1"), Some("filesystem"), Some("")] {
            assert_eq!(Method::parse(on), best, "{on:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn syncfs_is_used_only_where_it_reports_write_back_errors() {
        for (release, reports) in [
            ("6.18.44-fc-v1272", true),
            ("5.8.0", true),
            ("5.10.0-27-amd64", true),
            ("5.7.19", false),
            ("4.19.0", false),
            ("", false),
            ("unknown", false),
        ] {
            assert_eq!(syncfs::reports_errors(release), reports, "{release:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn unwritten_data_is_read_from_meminfo() {
        let meminfo = "MemTotal:       24633180 kB\nDirty:               280 kB\nWriteback:            12 kB\n";
        assert_eq!(syncfs::unwritten_bytes(meminfo), Some(292 * 1024));
        assert_eq!(
            syncfs::unwritten_bytes("Dirty: 1 kB\n"),
            None,
            "no Writeback line"
        );
        assert_eq!(
            syncfs::unwritten_bytes("Dirty: x kB\nWriteback: 0 kB\n"),
            None
        );
        assert!(syncfs::unwritten_bytes(meminfo).is_some_and(|b| b <= syncfs::MOST_UNWRITTEN));
        assert!(
            syncfs::unwritten_bytes("Dirty: 900000 kB\nWriteback: 0 kB\n")
                .is_some_and(|b| b > syncfs::MOST_UNWRITTEN)
        );
    }

    /// With the file system flushed whole, a sync flushes each file written since the last
    /// (and what names them) with no flush started per file; a file whose folder is gone is
    /// left to the file-by-file path, which skips it (nothing can name it).
    #[tokio::test]
    async fn a_sync_by_file_system_covers_every_file_written_since_the_last() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        if !syncfs::available() {
            eprintln!("no syncfs that reports errors here: nothing to check");
            return;
        }
        let d = Durability::new(Method::Filesystem);
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        let files: Vec<PathBuf> = (0..5).map(|i| root.join(format!("a/b/f{i}"))).collect();
        for f in &files {
            std::fs::write(f, b"x").expect("write");
            d.record(f.clone());
        }
        let gone = root.join("c/gone");
        d.record(gone.clone());
        assert!(
            d.pending
                .lock()
                .expect("pending")
                .iter()
                .all(|w| w.early.is_none()),
            "no per-file flush is started"
        );
        let left = syncfs::flush_whole(&d.pending_paths());
        assert_eq!(left.into_iter().collect::<Vec<_>>(), [gone]);
        d.sync().await.expect("sync");
        let flushed = d.flushed.lock().expect("flushed").clone();
        for f in &files {
            assert!(flushed.contains(f), "{} not flushed", f.display());
        }
        assert!(
            flushed.contains(&root.join("a")),
            "and the folders naming them"
        );
        assert!(d.pending_paths().is_empty());
        d.sync()
            .await
            .expect("nothing left: a sync with nothing to do");
    }

    /// By file system, a small object written on the calling task is remembered (its write-back
    /// started on the handle it was written with, not a second open) and the next sync covers it.
    #[tokio::test]
    async fn a_small_put_by_file_system_waits_for_the_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let d = Arc::new(Durability::new(Method::Filesystem));
        let store = SyncedLocal::new(d.clone());
        let p = root.join("t/x.json");
        store
            .put(&at(&p), PutPayload::from_static(b"{}"))
            .await
            .expect("put");
        assert_eq!(std::fs::read(&p).expect("read"), b"{}");
        assert_eq!(d.pending_paths(), std::slice::from_ref(&p));
        d.sync().await.expect("sync");
        assert!(d.flushed.lock().expect("flushed").contains(&p));
        assert!(d.pending_paths().is_empty());
    }

    impl Durability {
        fn pending_paths(&self) -> Vec<PathBuf> {
            let p = self.pending.lock().expect("pending");
            p.iter().map(|w| w.path.clone()).collect()
        }
    }

    /// The store lake builds for local folders, and the local file system store itself.
    fn stores() -> (SyncedLocal, LocalFileSystem) {
        (
            SyncedLocal::new(Arc::new(Durability::new(Method::Files))),
            LocalFileSystem::new(),
        )
    }

    fn at(p: &Path) -> ObjectPath {
        ObjectPath::from_absolute_path(p).expect("absolute path")
    }

    /// What lake writes and reads on a local disk goes through the store on the calling task
    /// when it is small: with tokio's one blocking thread held by another task, puts, gets and
    /// heads of small objects still complete (the local file system store would wait for that
    /// thread), and a large read still goes to the blocking thread, once it is free.
    #[test]
    fn small_objects_are_written_and_read_without_a_blocking_thread() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (store, _) = stores();
        rt.block_on(async {
            let (release, held) = std::sync::mpsc::channel::<()>();
            let holder = tokio::task::spawn_blocking(move || held.recv());
            let small = at(&root.join("t/metadata/v1.json"));
            let done = tokio::time::timeout(std::time::Duration::from_secs(30), async {
                store
                    .put_opts(
                        &small,
                        PutPayload::from_static(b"{}"),
                        PutMode::Create.into(),
                    )
                    .await
                    .expect("put");
                let got = store.get(&small).await.expect("get");
                assert_eq!(got.bytes().await.expect("bytes").as_ref(), b"{}");
                assert_eq!(store.head(&small).await.expect("head").size, 2);
            })
            .await;
            release.send(()).expect("release");
            holder.await.expect("holder").expect("held");
            done.expect("small objects did not wait for the blocking thread");
            let big = at(&root.join("t/data/big.parquet"));
            let bytes = vec![7u8; INLINE_BYTES as usize + 1];
            store
                .put(&big, PutPayload::from(bytes.clone()))
                .await
                .expect("put big");
            let got = store.get(&big).await.expect("get big");
            assert_eq!(got.bytes().await.expect("bytes").as_ref(), &bytes[..]);
        });
    }

    /// The inline paths answer as the local file system store does: contents, sizes, tags and
    /// times, ranges, conditions, a refused create, overwrites, missing files and folders, and
    /// no staging file left behind.
    #[tokio::test]
    async fn the_inline_paths_answer_as_the_local_file_system_store_does() {
        use object_store::GetRange;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (ours, theirs) = stores();
        let a = at(&root.join("new/folders/a.json"));
        ours.put_opts(
            &a,
            PutPayload::from_static(b"first"),
            PutMode::Create.into(),
        )
        .await
        .expect("create makes its folders");
        let refused = ours
            .put_opts(
                &a,
                PutPayload::from_static(b"second"),
                PutMode::Create.into(),
            )
            .await
            .expect_err("a second create is refused");
        assert!(
            matches!(refused, object_store::Error::AlreadyExists { .. }),
            "{refused}"
        );
        let (mine, reference) = (
            ours.head(&a).await.expect("head"),
            theirs.head(&a).await.expect("head"),
        );
        assert_eq!(
            mine, reference,
            "size, time and tag as the store gives them"
        );
        assert_eq!(
            ours.get(&a)
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes")
                .as_ref(),
            b"first",
            "the refused create left the file as it was"
        );
        ours.put(&a, PutPayload::from_static(b"overwritten"))
            .await
            .expect("overwrite");
        let ranged = ours
            .get_opts(
                &a,
                GetOptions {
                    range: Some(GetRange::Bounded(4..8)),
                    ..Default::default()
                },
            )
            .await
            .expect("range");
        assert_eq!(ranged.range, 4..8);
        assert_eq!(ranged.bytes().await.expect("bytes").as_ref(), b"writ");
        let tag = ours.head(&a).await.expect("head").e_tag;
        assert_eq!(tag, theirs.head(&a).await.expect("head").e_tag);
        let stale = ours
            .get_opts(
                &a,
                GetOptions {
                    if_match: Some("not-its-tag".into()),
                    ..Default::default()
                },
            )
            .await
            .expect_err("a condition that does not hold");
        assert!(
            matches!(stale, object_store::Error::Precondition { .. }),
            "{stale}"
        );
        let missing = at(&root.join("new/none.json"));
        for got in [
            ours.get(&missing).await.map(|_| ()),
            ours.head(&missing).await.map(|_| ()),
            ours.head(&at(&root.join("new/folders"))).await.map(|_| ()),
        ] {
            assert!(
                matches!(got, Err(object_store::Error::NotFound { .. })),
                "{got:?}"
            );
        }
        let (files, _) = tree(&root);
        assert_eq!(
            files,
            [root.join("new/folders/a.json")],
            "no staging file left"
        );
        let listed: Vec<_> = theirs
            .list(Some(&at(&root)))
            .map(|m| m.expect("listed").location)
            .collect()
            .await;
        assert_eq!(listed, [a]);
    }
}
