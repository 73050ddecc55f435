//! The whole pipeline with the lake on S3 (catalog and warehouse in a bucket of a local
//! S3-compatible server: moto's server mode, from the venv `.ci/run` builds) and the landing zone
//! in a local folder (`--landing`): the same commands give the same tables as on local disk, row
//! for row.

mod support;

use support::python;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};

/// Start moto on a free loopback port, create bucket `lake`, print `ready <port>`, serve until
/// stdin closes.
const LAUNCH: &str = r#"
import sys
import boto3
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
port = server.get_host_and_port()[1]
boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
             aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket="lake")
print(f"ready {port}", flush=True)
sys.stdin.read()
server.stop()
"#;

struct Moto {
    child: Child,
    _stdin: Option<ChildStdin>,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto() -> Moto {
    let py = python();
    let mut child = Command::new(&py)
        .args(["-c", LAUNCH])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): .ci/run installs moto[server]",
                py.display()
            )
        });
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let Some(port) = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
    else {
        let _ = child.kill();
        panic!(
            "moto's S3 server did not start with {}: pip install 'moto[server]==5.2.5'",
            py.display()
        );
    };
    Moto {
        _stdin: child.stdin.take(),
        child,
        port,
    }
}

fn sugarshack(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(support::program());
    cmd.current_dir(dir).args(args);
    for k in [
        "SUGAR_PARSERS",
        "SUGARSHACK_CATALOG",
        "SUGARSHACK_WAREHOUSE",
        "SUGARSHACK_LANDING",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run sugarshack")
}

fn ok(dir: &Path, args: &[&str], env: &[(&str, String)]) -> String {
    let o = sugarshack(dir, args, env);
    assert!(
        o.status.success() || o.status.code() == Some(3),
        "sugarshack {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Columns that name a run rather than hold data (tap ids, wall-clock instants, snapshot ids).
const RUN_SPECIFIC: [&str; 6] = [
    "tap_id",
    "tapped_at",
    "snapshot_id",
    "sequence_number",
    "_bronze_snapshot_id",
    "recorded_at",
];

/// Every row of `table` at main, as sorted JSON without run-specific columns.
fn rows(dir: &Path, table: &str, lake: &[&str], env: &[(&str, String)]) -> Vec<String> {
    let sql = format!("select * from {table}");
    let mut args: Vec<&str> = lake.to_vec();
    args.extend(["query", &sql, "--format", "json"]);
    let out = ok(dir, &args, env);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json rows");
    let mut rows: Vec<String> = v
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(o) = r.as_object_mut() {
                for c in RUN_SPECIFIC {
                    o.remove(c);
                }
            }
            r.to_string()
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn the_pipeline_on_s3_gives_the_tables_it_gives_on_local_disk() {
    let server = moto();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    ok(dir, &["sugarbush"], &[]);
    let landing = dir.join("warehouse").display().to_string();
    let s3 = [
        "--catalog",
        "s3://lake/catalog",
        "--warehouse",
        "s3://lake/warehouse",
        "--landing",
        landing.as_str(),
    ];
    let env = [
        (
            "AWS_ENDPOINT_URL",
            format!("http://127.0.0.1:{}", server.port),
        ),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ALLOW_HTTP", "true".to_string()),
    ];
    for through in ["2026-08-16", "2026-08-17T12:00"] {
        let local = ok(dir, &["run", "--through", through], &[]);
        let mut args = s3.to_vec();
        args.extend(["run", "--through", through]);
        let remote = ok(dir, &args, &env);
        assert_eq!(
            remote, local,
            "the same run prints the same on S3 as on disk"
        );
    }
    let tables: serde_json::Value =
        serde_json::from_str(&ok(dir, &["tables", "--format", "json"], &[])).expect("json");
    let mut args = s3.to_vec();
    args.extend(["tables", "--format", "json"]);
    let remote: serde_json::Value = serde_json::from_str(&ok(dir, &args, &env)).expect("json");
    let names = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .expect("rows")
            .iter()
            .filter_map(|t| t["table"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(names(&remote), names(&tables), "the same tables");
    for t in remote.as_array().expect("rows") {
        let loc = t["metadata_location"].as_str().unwrap_or_default();
        assert!(loc.starts_with("s3://lake/warehouse/"), "{loc}");
    }
    for table in names(&tables) {
        if table.starts_with("ops.") {
            continue;
        }
        let a = rows(dir, &table, &[], &[]);
        let b = rows(dir, &table, &s3, &env);
        assert_eq!(a.len(), b.len(), "{table}: row count");
        assert!(a == b, "{table}: row for row");
    }
    let mut args = s3.to_vec();
    args.push("verify");
    ok(dir, &args, &env);
    // A mistyped prefix is no lake, not an empty one.
    for cmd in ["status", "verify", "tables"] {
        let o = sugarshack(
            dir,
            &[
                "--catalog",
                "s3://lake/catalgo",
                "--warehouse",
                "s3://lake/warehouse",
                cmd,
            ],
            &env,
        );
        assert_eq!(o.status.code(), Some(1), "{cmd}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.starts_with("error: no lake here: s3://lake/catalgo holds no catalog version"),
            "{cmd}: {e}"
        );
    }
}
