//! The landing zone's layout, and how a reader finds what had arrived by a given instant.
//!
//! ```text
//! <warehouse>/landing/<source>/<arrival date yyyy-mm-dd>/<arrival stamp>-<source>-<label>.<ext>
//! e.g. landing/payments/2026-08-17/20260817T000012Z-payments-20260816T23.jsonl
//! ```
//!
//! The stamp is the moment the file arrived (UTC, to the second); the folder is its date. A
//! reader never opens a file to decide whether it had arrived: the name says.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{IoContext, Result, SugarbushError};
use crate::source::Source;
use crate::time;

/// The landing zone under a warehouse root.
pub fn landing_dir(warehouse_root: &Path) -> PathBuf {
    warehouse_root.join("landing")
}

/// The truth folder under a warehouse root.
pub fn truth_dir(warehouse_root: &Path) -> PathBuf {
    warehouse_root.join("truth")
}

/// What a landing file's name says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandingName {
    pub source: Source,
    pub arrived_at: DateTime<Utc>,
    /// What the file holds, e.g. `20260816T23` (an hour), `2026-08-12` (a rate or settlement date).
    pub label: String,
}

/// A landing file that had arrived by some instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandedFile {
    pub source: Source,
    /// The file on disk.
    pub path: PathBuf,
    /// The path relative to `landing/`, with `/` separators:
    /// `payments/2026-08-17/20260817T000012Z-payments-20260816T23.jsonl`.
    pub relative_name: String,
    pub arrived_at: DateTime<Utc>,
    /// Its size and modification time when it was listed, or `None` when it was gone by then
    /// (deleted between the folder's listing and its own).
    pub seen: Option<Seen>,
}

/// A landing file's size and modification time, as the listing found them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Seen {
    pub bytes: u64,
    /// `None` where the file system keeps no modification times.
    pub modified: Option<SystemTime>,
}

/// What `entry` is (a symbolic link is followed, as opening its path would) and, for a file,
/// its size and modification time. `Ok(None)`: it was gone by the time it was looked at.
///
/// An entry's own metadata is looked up relative to the folder being listed (`fstatat` on
/// Linux), not by walking its whole path again: a tap lists every landing file every run.
fn entry_metadata(entry: &fs::DirEntry) -> std::io::Result<Option<fs::Metadata>> {
    let found = match entry.file_type() {
        Ok(t) if t.is_symlink() => fs::metadata(entry.path()),
        Ok(_) => entry.metadata(),
        Err(e) => Err(e),
    };
    match found {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Parses a landing file name, or a path ending in one, into its source and arrival time.
///
/// Accepts `20260817T000012Z-payments-20260816T23.jsonl` and
/// `payments/2026-08-17/20260817T000012Z-payments-20260816T23.jsonl` alike.
pub fn parse_landing_name(name: &str) -> Result<LandingName> {
    let (source, ms, label) = name_parts(name).ok_or_else(|| SugarbushError::BadLandingName {
        path: PathBuf::from(name),
    })?;
    Ok(LandingName {
        source,
        arrived_at: time::to_datetime(ms),
        label: label.to_string(),
    })
}

/// What [`parse_landing_name`] reads from `name`, borrowed: its source, its arrival time in
/// milliseconds and its label. `None` when it is not a landing name.
fn name_parts(name: &str) -> Option<(Source, i64, &str)> {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let (stamp, rest) = file.split_once('-')?;
    let ms = time::parse_compact_stamp(stamp)?;
    let source = Source::ALL.into_iter().find(|s| {
        rest.strip_prefix(s.as_str())
            .is_some_and(|r| r.starts_with('-'))
    })?;
    let after = &rest[source.as_str().len() + 1..];
    let label = after
        .strip_suffix(source.extension())
        .and_then(|l| l.strip_suffix('.'))
        .filter(|l| !l.is_empty())?;
    Some((source, ms, label))
}

/// The relative name (under `landing/`) of a file of `source` that arrived at `arrived_ms`.
pub(crate) fn relative_name(source: Source, arrived_ms: i64, label: &str) -> String {
    format!(
        "{src}/{date}/{stamp}-{src}-{label}.{ext}",
        src = source.as_str(),
        date = time::date_string(time::day_of(arrived_ms)),
        stamp = time::compact_stamp(arrived_ms),
        ext = source.extension(),
    )
}

/// The landing files of `source` that had arrived by `through` (inclusive), in arrival order
/// (then by name). Cheap: lists folders, parses names and looks up each listed file's size and
/// modification time ([`Seen`]), never reads a file.
///
/// A missing `landing/<source>` folder means nothing has arrived yet (an empty list). Hidden
/// entries (a name starting with `.`, such as a temporary file a crashed writer left behind)
/// are skipped; any other entry whose name is not a landing name is an error that names it.
pub fn landed(
    warehouse_root: &Path,
    source: Source,
    through: DateTime<Utc>,
) -> Result<Vec<LandedFile>> {
    let dir = landing_dir(warehouse_root).join(source.as_str());
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let through_ms = time::from_datetime(&through);
    let last_day = time::day_of(through_ms);
    let mut out = Vec::new();
    for day_entry in fs::read_dir(&dir).at(&dir)? {
        let day_entry = day_entry.at(&dir)?;
        let day_name = day_entry.file_name();
        let day_name = day_name.to_string_lossy();
        if day_name.starts_with('.') {
            continue;
        }
        let day_path = day_entry.path();
        let day = time::parse_date(&day_name).ok_or_else(|| SugarbushError::BadLandingName {
            path: day_path.clone(),
        })?;
        // A folder that vanished since the listing holds nothing.
        let Some(day_meta) = entry_metadata(&day_entry).at(&day_path)? else {
            continue;
        };
        if !day_meta.is_dir() {
            return Err(SugarbushError::BadLandingName { path: day_path });
        }
        if day > last_day {
            continue;
        }
        // A tap lists every landing file every run, so a name is parsed where it lies and
        // copied once, into its relative name; the path is built only for a file listed.
        for entry in fs::read_dir(&day_path).at(&day_path)? {
            let entry = entry.at(&day_path)?;
            let file_name = entry.file_name();
            if file_name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let bad = || SugarbushError::BadLandingName { path: entry.path() };
            let name = file_name.to_str().ok_or_else(bad)?;
            let (named_source, arrived_ms, _) = name_parts(name).ok_or_else(bad)?;
            if named_source != source || time::day_of(arrived_ms) != day {
                return Err(bad());
            }
            if arrived_ms > through_ms {
                continue;
            }
            let path = entry.path();
            let seen = entry_metadata(&entry).at(&path)?.map(|m| Seen {
                bytes: m.len(),
                modified: m.modified().ok(),
            });
            out.push(LandedFile {
                source,
                relative_name: [source.as_str(), "/", &day_name, "/", name].concat(),
                path,
                arrived_at: time::to_datetime(arrived_ms),
                seen,
            });
        }
    }
    // Relative names are unique, so an unstable sort orders them as a stable one would.
    out.sort_unstable_by(|a, b| {
        a.arrived_at
            .cmp(&b.arrived_at)
            .then_with(|| a.relative_name.cmp(&b.relative_name))
    });
    Ok(out)
}

/// A sha256 over the whole landing zone: for every file in order of its relative path, the
/// path, a NUL, the length as 8 little-endian bytes, then the bytes. Same tree, same digest.
pub fn landing_digest(warehouse_root: &Path) -> Result<String> {
    let root = landing_dir(warehouse_root);
    let mut files = Vec::new();
    collect_files(&root, &root, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for rel in files {
        let path = root.join(&rel);
        let bytes = fs::read(&path).at(&path)?;
        hasher.update(rel.as_bytes());
        hasher.update([0u8]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else {
            let rel = path.strip_prefix(root).map_err(|_| {
                SugarbushError::Internal(format!("{} escaped its root", path.display()))
            })?;
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(rel.join("/"));
        }
    }
    Ok(())
}

/// Whether a folder holds anything at all.
pub(crate) fn is_non_empty_dir(dir: &Path) -> Result<bool> {
    if !dir.exists() {
        return Ok(false);
    }
    let mut entries = fs::read_dir(dir).at(dir)?;
    Ok(entries.next().is_some())
}

/// Writes `bytes` to `path` through a temporary sibling and a rename, so no reader ever sees
/// half a file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_at(path, bytes, None)
}

/// [`write_atomic`], the file's modification time set to `modified` when given.
pub(crate) fn write_atomic_at(
    path: &Path,
    bytes: &[u8],
    modified: Option<std::time::SystemTime>,
) -> Result<()> {
    let tmp = temp_sibling(path)?;
    {
        let mut f = fs::File::create(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        f.flush().at(&tmp)?;
        if let Some(t) = modified {
            f.set_modified(t).at(&tmp)?;
        }
    }
    fs::rename(&tmp, path).at(path)
}

/// `<dir>/.<name>.tmp`: hidden, so `landed` never lists it.
pub(crate) fn temp_sibling(path: &Path) -> Result<PathBuf> {
    let parent = path
        .parent()
        .ok_or_else(|| SugarbushError::Internal(format!("{} has no parent", path.display())))?;
    fs::create_dir_all(parent).at(parent)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(parent.join(format!(".{name}.tmp")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let ms = time::ms_of_date(2026, 8, 17) + 12 * time::SECOND;
        let rel = relative_name(Source::Payments, ms, "20260816T23");
        assert_eq!(
            rel,
            "payments/2026-08-17/20260817T000012Z-payments-20260816T23.jsonl"
        );
        let parsed = parse_landing_name(&rel).expect("parses");
        assert_eq!(parsed.source, Source::Payments);
        assert_eq!(parsed.arrived_at.timestamp_millis(), ms);
        assert_eq!(parsed.label, "20260816T23");
        let fx = relative_name(Source::FxRates, ms, "2026-08-12");
        assert_eq!(
            parse_landing_name(&fx).expect("parses").source,
            Source::FxRates
        );
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in [
            "",
            "notes.txt",
            "20260817T000012Z-payments-.jsonl",
            "20260817T000012Z-payments-x.csv",
            "20260817T000012Z-fx-2026-08-12.csv",
            "20260817T000012-payments-x.jsonl",
            "20260817T250012Z-payments-x.jsonl",
        ] {
            assert!(parse_landing_name(bad).is_err(), "{bad}");
        }
    }
}
