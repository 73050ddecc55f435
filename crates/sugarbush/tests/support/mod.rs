//! Shared by the integration tests: the default season, generated once per test binary and
//! shared between test processes (nextest runs each test in its own), and the landing files
//! read back the way the story's pipeline reads them.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sugarbush::{GenerateOptions, NoProgress, SeasonConfig, Source, generate, landed};

/// The default season's warehouse, generated once for this test binary.
pub fn season() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sugarbush-default-season");
        fs::create_dir_all(&base).expect("create the cache folder");
        let lock = fs::File::create(base.join(".lock")).expect("create the lock file");
        lock.lock().expect("lock the cache");
        // The season is a function of this binary (and so of the generator compiled into it).
        let exe = std::env::current_exe().expect("the test binary");
        let meta = fs::metadata(&exe).expect("its metadata");
        let key = format!(
            "{} {:?} {}",
            exe.display(),
            meta.modified().expect("its mtime"),
            meta.len()
        );
        let wh = base.join("wh");
        let marker = base.join("generated-by");
        if fs::read_to_string(&marker).ok().as_deref() != Some(key.as_str()) {
            let _ = fs::remove_file(&marker);
            generate(
                &wh,
                &SeasonConfig::default(),
                &GenerateOptions { force: true },
                &NoProgress,
            )
            .expect("the default season generates");
            fs::write(&marker, key).expect("write the marker");
        }
        drop(lock);
        wh
    })
}

/// Far enough in the future to see every file.
pub fn end_of_time() -> DateTime<Utc> {
    "2027-01-01T00:00:00Z".parse().expect("an instant")
}

pub fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("an instant")
}

/// One line of a landing file, with where it came from.
#[derive(Debug, Clone)]
pub struct Line {
    pub file: String,
    pub arrived_at: DateTime<Utc>,
    pub line_no: usize,
    pub text: String,
}

/// Every line of every landed file of a source, files in arrival order.
pub fn lines(root: &Path, source: Source) -> Vec<Line> {
    let mut out = Vec::new();
    for f in landed(root, source, end_of_time()).expect("landed") {
        let text = fs::read_to_string(&f.path).expect("read a landing file");
        for (i, l) in text.lines().enumerate() {
            out.push(Line {
                file: f.relative_name.clone(),
                arrived_at: f.arrived_at,
                line_no: i + 1,
                text: l.to_string(),
            });
        }
    }
    out
}

/// The landed files whose bytes arrived before under another name (the re-sent copies).
pub fn resent_copies(root: &Path) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let mut seen = BTreeSet::new();
    let mut copies = Vec::new();
    for source in Source::ALL {
        for f in landed(root, source, end_of_time()).expect("landed") {
            let digest = hex::encode(Sha256::digest(fs::read(&f.path).expect("read")));
            if !seen.insert(digest) {
                copies.push(f.relative_name.clone());
            }
        }
    }
    copies
}

/// A payment event as the story's silver parsers read it (one entry per API version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub event_id: String,
    pub refund: bool,
    pub api_version: String,
    pub created: i64,
    pub charge_id: String,
    pub refund_id: Option<String>,
    pub order_id: String,
    pub amount: i64,
    pub currency: String,
}

fn s(v: &Value, path: &[&str]) -> Option<String> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_str().map(str::to_string)
}

fn i(v: &Value, path: &[&str]) -> Option<i64> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_i64()
}

/// `parsers.sql` of the story, in Rust. `None` for a line no parser reads.
pub fn parse_payment(line: &str) -> Option<Parsed> {
    let j: Value = serde_json::from_str(line).ok()?;
    let api_version = s(&j, &["api_version"])?;
    let o = ["data", "object"];
    let (charge_id, refund_id, order_id, amount, currency) = match api_version.as_str() {
        "2025-11-01" => (
            s(&j, &[o[0], o[1], "id"])?,
            s(&j, &[o[0], o[1], "refund", "id"]),
            s(&j, &[o[0], o[1], "order_id"])?,
            i(&j, &[o[0], o[1], "refund", "amount"]).or_else(|| i(&j, &[o[0], o[1], "amount"]))?,
            s(&j, &[o[0], o[1], "currency"])?,
        ),
        "2026-08-01" => (
            s(&j, &[o[0], o[1], "charge"]).or_else(|| s(&j, &[o[0], o[1], "id"]))?,
            (s(&j, &[o[0], o[1], "object"]).as_deref() == Some("refund"))
                .then(|| s(&j, &[o[0], o[1], "id"]))
                .flatten(),
            s(&j, &[o[0], o[1], "metadata", "order_id"])?,
            i(&j, &[o[0], o[1], "amount", "value"])?,
            s(&j, &[o[0], o[1], "amount", "currency"])?.to_ascii_lowercase(),
        ),
        _ => return None,
    };
    let refund = match s(&j, &["type"])?.as_str() {
        "charge.succeeded" => false,
        "charge.refunded" => true,
        _ => return None,
    };
    if refund && refund_id.is_none() {
        return None;
    }
    Some(Parsed {
        event_id: s(&j, &["id"])?,
        refund,
        api_version,
        created: i(&j, &["created"])?,
        charge_id,
        refund_id,
        order_id,
        amount,
        currency,
    })
}

/// A change event's fields the tests need.
#[derive(Debug, Clone)]
pub struct Change {
    pub op: String,
    pub lsn: u64,
    pub order_id: String,
    pub status: String,
    pub updated_at: String,
    pub ts_ms: i64,
    pub customer_id: String,
}

pub fn parse_change(line: &str) -> Change {
    let j: Value = serde_json::from_str(line).expect("a change event parses");
    let row = if j["after"].is_null() {
        &j["before"]
    } else {
        &j["after"]
    };
    Change {
        op: j["op"].as_str().expect("op").to_string(),
        lsn: j["lsn"].as_u64().expect("lsn"),
        order_id: row["order_id"].as_str().expect("order_id").to_string(),
        status: row["status"].as_str().expect("status").to_string(),
        updated_at: row["updated_at"].as_str().expect("updated_at").to_string(),
        ts_ms: j["ts_ms"].as_i64().expect("ts_ms"),
        customer_id: row["customer_id"]
            .as_str()
            .expect("customer_id")
            .to_string(),
    }
}
