//! Conformance: tables this lake writes, read by pyiceberg through `StaticTable.from_metadata`,
//! at `main` and at a branch — same rows, snapshot ids, parents, refs and summaries.
//!
//! Needs a Python with pyiceberg: `$SUGARSHACK_PYTHON`, or `.venv/bin/python` at the workspace
//! root (`.ci/run` creates it; the README shows the one-line set-up).

mod support;

use support::python;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;

use lake::arrow::array::{Int64Array, RecordBatch, StringArray};
use lake::arrow::datatypes::{DataType, Field, Schema};
use lake::{At, Catalog, PartitionField, RefOp, Replace};
use serde_json::Value;

const READER: &str = r#"
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1])
md = t.metadata
def ids(snapshot_id):
    if snapshot_id is None:
        return []
    tab = t.scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(tab.column("id").to_pylist())
out = {
    "format_version": md.format_version,
    "refs": {name: {"snapshot_id": r.snapshot_id, "type": str(r.snapshot_ref_type.value)} for name, r in md.refs.items()},
    "snapshots": {str(s.snapshot_id): {
        "parent": s.parent_snapshot_id,
        "sequence_number": s.sequence_number,
        "operation": s.summary.operation.value,
        "summary": {k: v for k, v in s.summary.additional_properties.items()},
    } for s in md.snapshots},
    "main": ids(md.refs["main"].snapshot_id if "main" in md.refs else None),
    "audit": ids(md.refs["audit"].snapshot_id if "audit" in md.refs else None),
    "current": sorted(t.scan().to_arrow().column("id").to_pylist()),
}
print(json.dumps(out))
"#;

/// A lake in a temporary folder, run through the end of 16 August, served by `sugarshack serve`
/// (as a user starts it, on any free port); the server is killed on drop.
struct Served {
    dir: tempfile::TempDir,
    server: std::process::Child,
    uri: String,
}

impl Served {
    fn start(serve_args: &[&str]) -> Served {
        use std::io::BufRead;
        let dir = tempfile::tempdir().expect("tempdir");
        let sugarshack = |args: &[&str]| {
            let mut cmd = Command::new(support::program());
            cmd.current_dir(dir.path())
                .args(args)
                .env_remove("SUGAR_PARSERS")
                .env_remove("SUGARSHACK_CATALOG")
                .env_remove("SUGARSHACK_WAREHOUSE")
                .env_remove("SUGARSHACK_REST_TOKEN");
            cmd
        };
        let o = sugarshack(&["sugarbush"]).output().expect("sugarbush");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = sugarshack(&["run", "--through", "2026-08-16"])
            .output()
            .expect("run");
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
        args.extend_from_slice(serve_args);
        let mut server = sugarshack(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the server");
        let mut first = String::new();
        let mut out = std::io::BufReader::new(server.stdout.take().expect("stdout"));
        out.read_line(&mut first)
            .expect("the server says where it listens");
        // Keep reading what it prints, as a terminal would.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let uri = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("an http:// address")
            .to_string();
        Served { dir, server, uri }
    }

    /// The lake, opened by lake itself.
    fn catalog(&self) -> Catalog {
        Catalog::open_local(
            self.dir.path().join("catalog"),
            self.dir.path().join("warehouse"),
        )
        .expect("open")
    }

    /// Run a Python script with the server's address as its argument.
    fn python(&self, script: &str) -> std::process::Output {
        Command::new(python())
            .args(["-c", script, &self.uri])
            .output()
            .expect("run python")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// `sum(net_minor)` and the row count of `gold.mart_daily_cash` at main, as lake reads them.
async fn daily_cash_totals(c: &Catalog) -> (i64, i64) {
    let rows = c
        .sql(None, &At::Main)
        .await
        .expect("sql")
        .query("select count(*) as n, sum(net_minor) as net from gold.mart_daily_cash")
        .await
        .expect("query");
    let int = |name: &str| {
        rows[0]
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .map(|a| a.value(0))
            .expect("an integer")
    };
    (int("n"), int("net"))
}

fn read_with_pyiceberg(metadata_location: &str) -> Value {
    let py = python();
    let out = Command::new(&py)
        .arg("-c")
        .arg(READER)
        .arg(metadata_location)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run {} ({e}). The interop test needs pyiceberg: python3 -m venv .venv && .venv/bin/pip install 'pyiceberg[pyarrow]==0.12.0' (or set SUGARSHACK_PYTHON)",
            py.display()
        ),
    };
    assert!(
        out.status.success(),
        "pyiceberg failed to read {metadata_location}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pyiceberg printed JSON")
}

fn batch(ids: std::ops::Range<i64>, day: &str) -> RecordBatch {
    let n = ids.clone().count();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("day", DataType::Utf8, false),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(day, n))),
        ],
    )
    .expect("batch")
}

#[tokio::test]
async fn pyiceberg_reads_main_and_audit_exactly_as_we_report_them() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    let schema = batch(0..1, "x").schema();
    c.create_table("gold.daily", &schema, &[PartitionField::identity("day")])
        .await
        .unwrap();
    let props = BTreeMap::from([("sugarshack.source-snapshot".to_string(), "123".to_string())]);
    let s1 = c
        .append(
            "gold.daily",
            "audit",
            &[batch(0..5, "2026-08-01"), batch(5..8, "2026-08-02")],
            props,
        )
        .await
        .unwrap();
    c.update_refs(
        "gold.daily",
        &[RefOp::FastForward {
            branch: "main".into(),
            to: s1.snapshot_id,
        }],
        "publish",
    )
    .await
    .unwrap();
    c.append(
        "gold.daily",
        "audit",
        &[batch(8..10, "2026-08-03")],
        BTreeMap::new(),
    )
    .await
    .unwrap();
    let day2 = lake::Struct::from_iter([Some(lake::Literal::string("2026-08-02"))]);
    c.replace(
        "gold.daily",
        "audit",
        &Replace::Partitions(vec![day2]),
        &[batch(50..51, "2026-08-02")],
        BTreeMap::new(),
    )
    .await
    .unwrap();

    let t = c.table("gold.daily").await.unwrap();
    let py = read_with_pyiceberg(t.metadata_location());

    assert_eq!(py["format_version"], 2);
    // Rows at main and at audit.
    let ours_main: Vec<i64> = sorted_ids(&t.scan(&At::Main).await.unwrap());
    let ours_audit: Vec<i64> = sorted_ids(&t.scan(&At::reference("audit")).await.unwrap());
    assert_eq!(ours_main, (0..8).collect::<Vec<_>>());
    assert_eq!(ours_audit, vec![0, 1, 2, 3, 4, 8, 9, 50]);
    assert_eq!(as_ids(&py["main"]), ours_main);
    assert_eq!(
        as_ids(&py["current"]),
        ours_main,
        "pyiceberg's current snapshot is main"
    );
    assert_eq!(as_ids(&py["audit"]), ours_audit);
    // Refs.
    for r in t.refs() {
        assert_eq!(
            py["refs"][&r.name]["snapshot_id"], r.snapshot_id,
            "ref {}",
            r.name
        );
        assert_eq!(py["refs"][&r.name]["type"], r.kind, "ref {}", r.name);
    }
    assert_eq!(py["refs"].as_object().unwrap().len(), t.refs().len());
    // Snapshots: ids, parents, sequence numbers, operations, summaries.
    let snaps = t.snapshots();
    assert_eq!(py["snapshots"].as_object().unwrap().len(), snaps.len());
    for s in snaps {
        let p = &py["snapshots"][s.snapshot_id.to_string()];
        assert_eq!(
            p["parent"],
            serde_json::json!(s.parent_id),
            "parent of {}",
            s.snapshot_id
        );
        assert_eq!(p["sequence_number"], s.sequence_number);
        assert_eq!(p["operation"], s.operation);
        for (k, v) in &s.summary {
            assert_eq!(p["summary"][k], *v, "summary {k} of {}", s.snapshot_id);
        }
    }
}

/// Every codec lake writes data files in (`write.parquet.compression-codec`; the lake's tests
/// check each property gives its codec) is one pyiceberg reads: the same rows at `main`.
#[tokio::test]
async fn pyiceberg_reads_every_codec_lake_writes() {
    let dir = tempfile::tempdir().unwrap();
    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse")).unwrap();
    let schema = batch(0..1, "x").schema();
    for codec in ["snappy", "zstd", "lz4_raw", "uncompressed"] {
        let name = format!("gold.{codec}");
        let props = BTreeMap::from([(lake::PROP_COMPRESSION_CODEC.to_string(), codec.to_string())]);
        let change = c
            .stage_create_table_with_properties(&name, &schema, &[], &props)
            .await
            .unwrap();
        c.commit(vec![change], "create-table", "create", BTreeMap::new())
            .await
            .unwrap();
        c.append(
            &name,
            "main",
            &[batch(0..3_000, "2026-08-01")],
            BTreeMap::new(),
        )
        .await
        .unwrap();
        let t = c.table(&name).await.unwrap();
        let py = read_with_pyiceberg(t.metadata_location());
        assert_eq!(
            as_ids(&py["main"]),
            (0..3_000).collect::<Vec<_>>(),
            "pyiceberg reads {codec}"
        );
    }
}

fn sorted_ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut v: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("id")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .map(|a| a.values().to_vec())
                .unwrap_or_default()
        })
        .collect();
    v.sort_unstable();
    v
}

fn as_ids(v: &Value) -> Vec<i64> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
        .unwrap_or_default()
}

/// What pyiceberg sees of a table at each named ref: rows, every integer column's exact sum, every
/// string column's values sorted (nulls last).
const REF_READER: &str = r#"
import json, sys
import pyarrow as pa, pyarrow.compute as pc
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1])
out = {}
for ref in sys.argv[2:]:
    r = t.metadata.refs.get(ref)
    if r is None:
        out[ref] = None
        continue
    tab = t.scan(snapshot_id=r.snapshot_id).to_arrow()
    cols = {}
    for name in tab.column_names:
        col = tab.column(name)
        if pa.types.is_integer(col.type):
            cols[name] = {"sum": str(sum(v for v in col.to_pylist() if v is not None))}
        elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            cols[name] = {"sorted": sorted(col.to_pylist(), key=lambda v: (v is None, v or ""))}
    out[ref] = {"snapshot_id": r.snapshot_id, "rows": tab.num_rows, "columns": cols}
print(json.dumps(out))
"#;

/// The same digest of a table at a ref, computed by this lake.
async fn digest(table: &lake::Table, reference: &str) -> Value {
    use lake::arrow::array::{Array, Int32Array, LargeStringArray};
    let Some(snapshot) = table.head(reference) else {
        return Value::Null;
    };
    let batches = table.scan(&At::reference(reference)).await.expect("scan");
    let schema = table.arrow_schema().expect("schema");
    let mut columns = serde_json::Map::new();
    let mut rows = 0;
    for b in &batches {
        rows += b.num_rows();
    }
    for (i, f) in schema.fields().iter().enumerate() {
        let col = |b: &RecordBatch| b.column(i).clone();
        match f.data_type() {
            DataType::Int64 | DataType::Int32 => {
                // Sums of ids and LSNs overflow 64 bits: add in 128 and compare as text.
                let mut sum: i128 = 0;
                for b in &batches {
                    let c = col(b);
                    if let Some(a) = c.as_any().downcast_ref::<Int64Array>() {
                        sum += a.iter().flatten().map(i128::from).sum::<i128>();
                    } else if let Some(a) = c.as_any().downcast_ref::<Int32Array>() {
                        sum += a.iter().flatten().map(i128::from).sum::<i128>();
                    }
                }
                columns.insert(
                    f.name().clone(),
                    serde_json::json!({ "sum": sum.to_string() }),
                );
            }
            DataType::Utf8 | DataType::LargeUtf8 => {
                let mut values: Vec<Option<String>> = Vec::new();
                for b in &batches {
                    let c = col(b);
                    if let Some(a) = c.as_any().downcast_ref::<StringArray>() {
                        values.extend(a.iter().map(|v| v.map(str::to_string)));
                    } else if let Some(a) = c.as_any().downcast_ref::<LargeStringArray>() {
                        values.extend(a.iter().map(|v| v.map(str::to_string)));
                    }
                }
                values.sort_by(|a, b| (a.is_none(), a).cmp(&(b.is_none(), b)));
                columns.insert(f.name().clone(), serde_json::json!({ "sorted": values }));
            }
            _ => {}
        }
    }
    serde_json::json!({ "snapshot_id": snapshot, "rows": rows, "columns": columns })
}

/// The pipeline's published tables, read by pyiceberg: every gold table (and the silver tables
/// gold is built from) at `main` and at every publish tag gives the rows lake gives — the
/// story's August 16 publish, the blocked August 17 morning (no tag), and its replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_reads_gold_at_main_and_at_every_publish_tag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sugarshack = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(support::program());
        cmd.current_dir(dir.path())
            .args(args)
            .env_remove("SUGAR_PARSERS")
            .env_remove("SUGARSHACK_CATALOG")
            .env_remove("SUGARSHACK_WAREHOUSE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run sugarshack")
    };
    assert!(sugarshack(&["sugarbush"], &[]).status.success());
    let o = sugarshack(&["run", "--through", "2026-08-16"], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let morning = ["run", "--through", "2026-08-17T12:00"];
    let o = sugarshack(&morning, &[("SUGAR_PARSERS", "2025-11-01")]);
    assert_eq!(o.status.code(), Some(3), "the morning blocks");
    let o = sugarshack(&[&morning[..], &["--replay"]].concat(), &[]);
    assert_eq!(o.status.code(), Some(0), "the replay publishes");

    let c = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
        .expect("open");
    let refs = ["main", "publish-1", "publish-2", "publish-3"];
    for name in [
        "gold.fct_payments",
        "gold.mart_daily_cash",
        "gold.mart_order_revenue",
        "gold.fulfilment_queue",
        "silver.payments",
        "silver.orders",
    ] {
        let table = c.table(name).await.expect("table");
        let py = Command::new(python())
            .arg("-c")
            .arg(REF_READER)
            .arg(table.metadata_location())
            .args(refs)
            .output()
            .expect("run python");
        assert!(
            py.status.success(),
            "pyiceberg failed on {name}: {}",
            String::from_utf8_lossy(&py.stderr)
        );
        let theirs: Value = serde_json::from_slice(&py.stdout).expect("json");
        for r in refs {
            let ours = digest(&table, r).await;
            assert_eq!(theirs[r], ours, "{name} at {r}");
        }
        assert!(
            theirs["publish-3"].is_null(),
            "{name}: two publishes, no third"
        );
        assert_eq!(
            theirs["main"], theirs["publish-2"],
            "{name}: main is the last publish"
        );
        assert!(
            theirs["publish-1"]["rows"].as_u64().unwrap_or(0) > 0,
            "{name} has rows at publish-1"
        );
    }
}

/// `sugarshack serve`, as a user starts it, read by pyiceberg's RestCatalog: after a run, the
/// namespaces and tables are listed and gold at `main` scans to the rows lake reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_reads_gold_through_sugarshack_serve() {
    let served = Served::start(&["--read-only"]);
    let script = r#"
import json, sys
from pyiceberg.catalog.rest import RestCatalog
cat = RestCatalog("sugarshack", uri=sys.argv[1])
t = cat.load_table("gold.mart_daily_cash")
print(json.dumps({
    "namespaces": sorted(".".join(n) for n in cat.list_namespaces()),
    "gold": sorted(".".join(i) for i in cat.list_tables("gold")),
    "rows": t.scan().to_arrow().num_rows,
    "net": sum(t.scan().to_arrow().column("net_minor").to_pylist()),
}))
"#;
    let py = served.python(script);
    assert!(
        py.status.success(),
        "pyiceberg through serve: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let theirs: Value = serde_json::from_slice(&py.stdout).expect("json");
    let (n, net) = daily_cash_totals(&served.catalog()).await;
    assert_eq!(theirs["rows"].as_i64(), Some(n));
    assert_eq!(theirs["net"].as_i64(), Some(net));
    for ns in ["bronze", "gold", "ops", "silver"] {
        assert!(
            theirs["namespaces"]
                .as_array()
                .is_some_and(|a| a.iter().any(|n| n == ns)),
            "{ns}: {theirs}"
        );
    }
    assert_eq!(
        theirs["gold"],
        serde_json::json!([
            "gold.fct_payments",
            "gold.fulfilment_queue",
            "gold.mart_daily_cash",
            "gold.mart_order_revenue"
        ])
    );
}

/// DuckDB's iceberg extension (the PyPI wheels `.ci/run` installs; nothing downloaded at run
/// time) attached to `sugarshack serve`: it reads gold as lake does, then creates a table and
/// INSERTs rows that lake reads as snapshots of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duckdb_attaches_through_sugarshack_serve() {
    let served = Served::start(&[]);
    let script = r#"
import glob, json, os, sys
import duckdb
c = duckdb.connect()
for ext in ["httpfs", "avro", "iceberg"]:
    mod = __import__(f"duckdb_extension_{ext}")
    path = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", f"{ext}.duckdb_extension"))[0]
    c.sql(f"LOAD '{path}'")
c.sql(f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{sys.argv[1]}', AUTHORIZATION_TYPE 'none')")
rows, net = c.sql("SELECT count(*), sum(net_minor) FROM lake.gold.mart_daily_cash").fetchone()
c.sql("CREATE SCHEMA IF NOT EXISTS lake.scratch")
c.sql("CREATE TABLE lake.scratch.notes (id BIGINT, note VARCHAR)")
c.sql("INSERT INTO lake.scratch.notes VALUES (1, 'from duckdb'), (2, 'through rest')")
c.sql("INSERT INTO lake.scratch.notes VALUES (3, 'again')")
print(json.dumps({"rows": rows, "net": int(net)}))
"#;
    let py = served.python(script);
    assert!(
        py.status.success(),
        "DuckDB through serve (needs the duckdb and duckdb-extension-{{iceberg,avro,httpfs}} 1.5.5 wheels): {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let theirs: Value = serde_json::from_slice(&py.stdout).expect("json");
    let c = served.catalog();
    let (n, net) = daily_cash_totals(&c).await;
    assert_eq!(theirs["rows"].as_i64(), Some(n));
    assert_eq!(theirs["net"].as_i64(), Some(net));
    // DuckDB's writes are lake's snapshots.
    let notes = c
        .table("scratch.notes")
        .await
        .expect("the table DuckDB created");
    let snapshots = notes.snapshots();
    assert_eq!(snapshots.len(), 2, "one snapshot per INSERT");
    let mut ids = sorted_ids(&notes.scan(&At::Main).await.expect("scan"));
    ids.dedup();
    assert_eq!(ids, [1, 2, 3]);
}
