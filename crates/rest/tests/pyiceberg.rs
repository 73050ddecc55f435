//! pyiceberg's RestCatalog (a client nobody here wrote) against the server: list, load, and
//! scan at `main` and at a branch, through a bearer token;
//! an append to the `audit` branch through REST, which lake then reads there (and not on `main`).
//!
//! Needs python with pyiceberg 0.12 and pyarrow: env SUGARSHACK_PYTHON, default
//! `$HOME/.cache/sugarshack/venv/bin/python`. Fails loudly when it is missing.

mod common;

use std::path::PathBuf;
use std::process::Command;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use common::batch;
use lake::RefOp;
use rest::ServeOptions;

fn python() -> PathBuf {
    // `$SUGARSHACK_PYTHON`, else the workspace's `.venv` (the README's set-up), else the venv
    // `.ci/run` keeps in `~/.cache/sugarshack/venv`.
    let local = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("../../.venv/bin/python");
    let py = std::env::var_os("SUGARSHACK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            if local.exists() {
                local
            } else {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/sugarshack/venv/bin/python")
            }
        });
    let ok = Command::new(&py)
        .args(["-c", "import pyiceberg, pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python with pyiceberg is missing at {}: install it with\n  python3 -m venv ~/.cache/sugarshack/venv && \
         ~/.cache/sugarshack/venv/bin/pip install 'pyiceberg==0.12.*' pyarrow\nor point SUGARSHACK_PYTHON at one",
        py.display()
    );
    py
}

const SCRIPT: &str = r#"
import json, sys
from pyiceberg.catalog.rest import RestCatalog
cat = RestCatalog("lake", uri=sys.argv[1], token=sys.argv[2])
out = {}
out["namespaces"] = [list(n) for n in cat.list_namespaces()]
out["tables"] = [list(t) for t in cat.list_tables("bronze")]
t = cat.load_table("bronze.events")
out["main_rows"] = sorted(t.scan().to_arrow().column("id").to_pylist())
audit = t.metadata.refs["audit"].snapshot_id
out["audit_rows"] = sorted(t.scan(snapshot_id=audit).to_arrow().column("id").to_pylist())
out["exists"] = cat.table_exists("bronze.events")
out["missing"] = cat.table_exists("bronze.nothing")
import pyarrow as pa
rows = pa.table({"id": pa.array([10, 11], pa.int64()), "name": pa.array(["x", "y"])},
                schema=t.schema().as_arrow())
t.append(rows, branch="audit")
out["after_append_main"] = sorted(cat.load_table("bronze.events").scan().to_arrow().column("id").to_pylist())
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_lists_loads_and_scans_main_and_a_branch() {
    let py = python();
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog =
        lake::Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
            .expect("catalog");
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]);
    catalog
        .create_table("bronze.events", &schema, &[])
        .await
        .expect("create");
    let t = catalog.table("bronze.events").await.expect("table");
    let s = t.arrow_schema().expect("schema");
    let first = catalog
        .append(
            "bronze.events",
            "audit",
            &[batch(s.clone(), vec![1, 2])],
            Default::default(),
        )
        .await
        .expect("append");
    catalog
        .update_refs(
            "bronze.events",
            &[RefOp::FastForward {
                branch: "main".into(),
                to: first.snapshot_id,
            }],
            "publish",
        )
        .await
        .expect("fast-forward");
    catalog
        .append(
            "bronze.events",
            "audit",
            &[batch(s, vec![3])],
            Default::default(),
        )
        .await
        .expect("append");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let uri = format!("http://{}", listener.local_addr().expect("addr"));
    let opts = ServeOptions {
        token: Some("tok".into()),
        ..ServeOptions::default()
    };
    tokio::spawn(rest::serve_on(listener, catalog.clone(), opts));

    let out = tokio::task::spawn_blocking(move || {
        Command::new(py).args(["-c", SCRIPT, &uri, "tok"]).output()
    })
    .await
    .expect("join")
    .expect("run python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pyiceberg failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json from the script");
    assert_eq!(v["namespaces"], serde_json::json!([["bronze"]]));
    assert_eq!(v["tables"], serde_json::json!([["bronze", "events"]]));
    assert_eq!(v["main_rows"], serde_json::json!([1, 2]));
    assert_eq!(v["audit_rows"], serde_json::json!([1, 2, 3]));
    assert_eq!(v["exists"], serde_json::json!(true));
    assert_eq!(v["missing"], serde_json::json!(false));
    assert_eq!(v["after_append_main"], serde_json::json!([1, 2]));

    // The append through REST landed on `audit`, seen by lake; `main` did not move.
    let t = catalog.table("bronze.events").await.expect("table");
    let ids = |batches: Vec<RecordBatch>| {
        let mut ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .map(|a| a.values().to_vec())
                    .unwrap_or_default()
            })
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(t.scan(&lake::At::reference("audit")).await.expect("audit")),
        vec![1, 2, 3, 10, 11]
    );
    assert_eq!(
        ids(t.scan(&lake::At::Main).await.expect("main")),
        vec![1, 2]
    );
}
