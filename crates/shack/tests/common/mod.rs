//! Helpers shared by the tap tests: the default season (generated once per target dir and
//! shared by every test process), hand-made landing zones, and ways to look at a lake.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow_array::{Array, RecordBatch};
use chrono::{DateTime, TimeZone, Utc};
use lake::{At, Catalog};
use shack::{Source, TapOptions, TapReport, bronze};

/// An instant in UTC.
pub fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
        .single()
        .expect("a valid instant")
}

/// The story's first run: the end of August 16.
pub fn aug16() -> DateTime<Utc> {
    utc(2026, 8, 16, 23, 59, 59)
}

/// Options for tests: no concurrent writers, so crashed runs' orphans go at once.
pub fn no_grace() -> TapOptions {
    TapOptions {
        orphan_grace: Duration::ZERO,
        ..TapOptions::default()
    }
}

/// The default season, generated once into the target dir and reused by every test process
/// (a lock file makes the others wait for the first; a finished season is renamed into place).
pub fn season() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let done = root.join(format!(
        "shack-season-v{}-seed{}",
        sugarbush::GENERATOR_VERSION,
        sugarbush::DEFAULT_SEED
    ));
    let lock = root.join(format!(
        "shack-season-v{}.lock",
        sugarbush::GENERATOR_VERSION
    ));
    fs::create_dir_all(&root).expect("target tmp dir");
    loop {
        if done.join("truth").join("summary.json").exists() {
            return done;
        }
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => {
                if !done.join("truth").join("summary.json").exists() {
                    let tmp = root.join(format!("shack-season-tmp-{}", std::process::id()));
                    let _ = fs::remove_dir_all(&tmp);
                    sugarbush::generate(
                        &tmp,
                        &sugarbush::SeasonConfig::default(),
                        &sugarbush::GenerateOptions { force: true },
                        &sugarbush::NoProgress,
                    )
                    .expect("generate the default season");
                    let _ = fs::remove_dir_all(&done);
                    fs::rename(&tmp, &done).expect("move the season into place");
                }
                let _ = fs::remove_file(&lock);
                return done;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Another process is generating; a lock older than 15 minutes is a dead one's.
                let stale = fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(15 * 60));
                if stale {
                    let _ = fs::remove_file(&lock);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("lock {}: {e}", lock.display()),
        }
    }
}

/// A fresh local catalog and warehouse for tables, in a temp dir.
pub struct Lake {
    pub dir: tempfile::TempDir,
    pub catalog: Catalog,
}

impl Lake {
    pub fn new() -> Lake {
        let dir = tempfile::tempdir().expect("tempdir");
        let catalog = Catalog::open_local(dir.path().join("catalog"), dir.path().join("tables"))
            .expect("open catalog");
        Lake { dir, catalog }
    }

    /// Every file under the catalog and the tables, with its size.
    pub fn files(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        walk(self.dir.path(), self.dir.path(), &mut out);
        out
    }

    pub async fn tap(&self, landing_root: &Path, through: DateTime<Utc>) -> TapReport {
        self.tap_with(landing_root, through, &TapOptions::default())
            .await
    }

    pub async fn tap_with(
        &self,
        landing_root: &Path,
        through: DateTime<Utc>,
        options: &TapOptions,
    ) -> TapReport {
        shack::tap(
            &self.catalog,
            landing_root,
            through,
            options,
            &shack::NoProgress,
        )
        .await
        .expect("tap")
    }

    /// Every bronze table's refs: (table, ref) → snapshot.
    pub async fn refs(&self) -> BTreeMap<(String, String), i64> {
        let mut out = BTreeMap::new();
        for name in bronze::table_names() {
            let t = self.catalog.table(&name).await.expect("table");
            for r in t.refs() {
                out.insert((name.clone(), r.name), r.snapshot_id);
            }
        }
        out
    }

    /// Rows of a SQL query over the lake at `at`.
    pub async fn sql(&self, at: &At, query: &str) -> Vec<RecordBatch> {
        self.catalog
            .sql(None, at)
            .await
            .expect("sql context")
            .query(query)
            .await
            .expect("query")
    }

    /// Rows of a table at the audit branch.
    pub async fn audit_rows(&self, table: &str) -> Vec<RecordBatch> {
        let t = self.catalog.table(table).await.expect("table");
        t.scan(&At::reference(bronze::AUDIT_BRANCH))
            .await
            .expect("scan")
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, u64>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            let rel = p
                .strip_prefix(root)
                .map(|r| r.display().to_string())
                .unwrap_or_default();
            out.insert(rel, e.metadata().map(|m| m.len()).unwrap_or(0));
        }
    }
}

/// Lines of a landing file as the tests count them, independently of the tap: split on `\n`,
/// a final line without one counts, a trailing `\n` does not start another.
pub fn file_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    body.split(|b| *b == b'\n').map(|l| l.to_vec()).collect()
}

/// Sum of an integer column over batches.
pub fn int_column(batches: &[RecordBatch], column: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for b in batches {
        let col = b.column_by_name(column).expect("column");
        let col = arrow::compute::cast(col, &arrow_schema::DataType::Int64).expect("cast");
        let a = col
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("int64");
        for i in 0..a.len() {
            out.push(if a.is_null(i) { i64::MIN } else { a.value(i) });
        }
    }
    out
}

/// A string column over batches (nulls as `None`).
pub fn str_column(batches: &[RecordBatch], column: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for b in batches {
        let col = b.column_by_name(column).expect("column");
        let col = arrow::compute::cast(col, &arrow_schema::DataType::Utf8).expect("cast");
        let a = col
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .expect("utf8");
        for i in 0..a.len() {
            out.push((!a.is_null(i)).then(|| a.value(i).to_string()));
        }
    }
    out
}

pub fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

/// A hand-made landing zone: `put` writes a file where sugarbush would.
pub struct Landing {
    pub dir: tempfile::TempDir,
}

impl Landing {
    pub fn new() -> Landing {
        Landing {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Write `bytes` as a `source` file that arrived at `at`; returns its relative name.
    pub fn put(&self, source: Source, at: DateTime<Utc>, label: &str, bytes: &[u8]) -> String {
        let rel = format!(
            "{src}/{date}/{stamp}-{src}-{label}.{ext}",
            src = source.as_str(),
            date = at.format("%Y-%m-%d"),
            stamp = at.format("%Y%m%dT%H%M%SZ"),
            ext = source.extension(),
        );
        let path = self.root().join("landing").join(&rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, bytes).expect("write landing file");
        rel
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join("landing").join(rel)
    }
}

/// Every row of some batches as a line of text (cells joined by `|`), sorted: how tables are
/// compared row for row.
pub fn rows_as_text(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, i).expect("displayable"))
                .collect();
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}
