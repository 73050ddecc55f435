//! The lake on S3, against a local S3-compatible server each test starts on loopback: moto's
//! server mode (`moto[server]` from PyPI, in the venv CI builds). Without it these tests FAIL,
//! naming the install line: they never pass silently.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{batch, ids, schema};
use lake::faults::{Fault, FaultyStore, Gate, Op};
use lake::s3::S3Config;
use lake::{At, Catalog, LakeError, PartitionField, RefOp};
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};

const INSTALL: &str = "$HOME/.cache/sugarshack/venv/bin/pip install 'moto[server]' (set SUGARSHACK_PYTHON to that venv's python; .ci/run installs it)";

/// Start moto on a free loopback port, create the buckets, print `ready <port>`, then serve
/// until stdin closes (so the server dies with the test process even if Drop never runs).
const LAUNCH: &str = r#"
import sys
import boto3
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
port = server.get_host_and_port()[1]
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                  aws_access_key_id="testing", aws_secret_access_key="testing")
for bucket in sys.argv[1:]:
    s3.create_bucket(Bucket=bucket)
print(f"ready {port}", flush=True)
sys.stdin.read()
server.stop()
"#;

/// `$SUGARSHACK_PYTHON`, else the workspace's `.venv` (the README's set-up), else the venv
/// `.ci/run` keeps in `~/.cache/sugarshack/venv`.
fn python() -> PathBuf {
    match std::env::var("SUGARSHACK_PYTHON") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let local = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
                .join("../../.venv/bin/python");
            if local.exists() {
                local
            } else {
                PathBuf::from(std::env::var("HOME").unwrap_or_default())
                    .join(".cache/sugarshack/venv/bin/python")
            }
        }
    }
}

/// A moto server for one test; killed on drop.
struct Moto {
    child: Child,
    _stdin: Option<ChildStdin>,
    port: u16,
    _logs: tempfile::TempDir,
}

impl Moto {
    fn start(buckets: &[&str]) -> Moto {
        let py = python();
        let logs = tempfile::tempdir().expect("temp dir");
        let err_path = logs.path().join("moto.stderr");
        let err = std::fs::File::create(&err_path).expect("moto log");
        let mut child = Command::new(&py)
            .arg("-c")
            .arg(LAUNCH)
            .args(buckets)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}): install moto with {INSTALL}",
                    py.display()
                )
            });
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let port = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            panic!(
                "moto's S3 server did not start with {}: install it with {INSTALL}\n{stderr}",
                py.display()
            );
        };
        Moto {
            _stdin: child.stdin.take(),
            child,
            port,
            _logs: logs,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How a writer reaches this server: nothing from the environment, short retries.
    fn config(&self) -> S3Config {
        S3Config::new()
            .without_env()
            .option("aws_endpoint", &self.endpoint())
            .option("aws_access_key_id", "testing")
            .option("aws_secret_access_key", "testing")
            .option("aws_region", "us-east-1")
            .option("aws_allow_http", "true")
            .option("timeout", "2s")
            .retry(RetryConfig {
                max_retries: 1,
                retry_timeout: Duration::from_secs(3),
                ..Default::default()
            })
    }

    fn store(&self) -> Arc<dyn ObjectStore> {
        self.config().build("s3://lake").expect("s3 store")
    }

    /// A catalog in bucket `lake`, as one process would open it.
    fn catalog(&self) -> Catalog {
        Catalog::open_store(self.store(), "s3://lake/catalog", "s3://lake/warehouse")
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{sig} moto");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn none() -> BTreeMap<String, String> {
    BTreeMap::new()
}

async fn main_ids(c: &Catalog, name: &str, at: &At) -> Vec<i64> {
    let t = c.table(name).await.unwrap();
    ids(&t.scan(at).await.unwrap())
}

#[tokio::test]
async fn commits_branches_reads_maintenance_and_verify_on_s3() {
    let moto = Moto::start(&["lake"]);
    let c = moto.catalog();
    c.create_table(
        "bronze.events",
        &schema(),
        &[PartitionField::identity("day")],
    )
    .await
    .unwrap();
    c.append(
        "bronze.events",
        "main",
        &[batch(0..3, "2026-08-01")],
        none(),
    )
    .await
    .unwrap();
    // Append to audit, then fast-forward main to it.
    let wrote = c
        .append(
            "bronze.events",
            "audit",
            &[batch(3..6, "2026-08-02")],
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        main_ids(&c, "bronze.events", &At::Main).await,
        vec![0, 1, 2]
    );
    assert_eq!(
        main_ids(&c, "bronze.events", &At::reference("audit")).await,
        (0..6).collect::<Vec<_>>()
    );
    c.update_refs(
        "bronze.events",
        &[RefOp::FastForward {
            branch: "main".into(),
            to: wrote.snapshot_id,
        }],
        "publish",
    )
    .await
    .unwrap();

    // Another process (its own store) reads the same lake.
    let other = moto.catalog();
    assert_eq!(
        main_ids(&other, "bronze.events", &At::Main).await,
        (0..6).collect::<Vec<_>>()
    );
    assert_eq!(other.latest_version_number().await.unwrap(), 4);
    assert_eq!(other.log().await.unwrap().len(), 4);

    // Every location the table names is on S3: metadata, manifest list, manifests, data.
    let t = other.table("bronze.events").await.unwrap();
    assert!(
        t.metadata_location()
            .starts_with("s3://lake/warehouse/bronze/events/metadata/"),
        "{}",
        t.metadata_location()
    );
    let md = t.metadata();
    for s in md.snapshots() {
        assert!(
            s.manifest_list().starts_with("s3://lake/warehouse/"),
            "{}",
            s.manifest_list()
        );
        let bytes = other
            .file_io()
            .new_input(s.manifest_list())
            .unwrap()
            .read()
            .await
            .expect("manifest list");
        let list =
            lake::iceberg::spec::ManifestList::parse_with_version(&bytes, md.format_version())
                .expect("manifest list parses");
        for m in list.entries() {
            assert!(
                m.manifest_path.starts_with("s3://lake/warehouse/"),
                "{}",
                m.manifest_path
            );
        }
    }
    let files = t.data_files(&At::Main).await.unwrap();
    assert_eq!(files.len(), 2);
    for f in &files {
        assert!(
            f.file_path()
                .starts_with("s3://lake/warehouse/bronze/events/data/"),
            "{}",
            f.file_path()
        );
    }
    // SQL over the S3 table.
    let sql = other.sql(None, &At::Main).await.unwrap();
    let rows = sql
        .query("SELECT count(*) AS n FROM bronze.events")
        .await
        .unwrap();
    let n = rows[0]
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(n, 6);

    // Maintenance: a stray file goes, every live file stays, verify is clean.
    let store = moto.store();
    let stray = object_store::path::Path::from("warehouse/bronze/events/data/stray.parquet");
    store.put(&stray, "junk".into()).await.unwrap();
    let report = c
        .remove_orphans(chrono::Utc::now().timestamp_millis() + 1, 0)
        .await
        .unwrap();
    let removed: Vec<&String> = report.removed.values().flatten().collect();
    assert!(
        removed.iter().any(|r| r.ends_with("stray.parquet")),
        "{report:?}"
    );
    assert!(store.head(&stray).await.is_err(), "the stray is gone");
    for f in &files {
        let p = object_store::path::Path::from(f.file_path().strip_prefix("s3://lake/").unwrap());
        assert!(store.head(&p).await.is_ok(), "live file kept: {p}");
    }
    let v = c.verify().await.unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    assert_eq!(
        main_ids(&moto.catalog(), "bronze.events", &At::Main).await,
        (0..6).collect::<Vec<_>>()
    );
    // The create-if-absent check left no marker behind.
    let all: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
        .await
        .unwrap();
    assert!(
        all.iter()
            .all(|m| !m.location.as_ref().contains("create-if-absent")),
        "{all:?}"
    );
}

#[tokio::test]
async fn two_writers_racing_on_one_version_exactly_one_wins_and_the_loser_retries() {
    let moto = Moto::start(&["lake"]);
    let setup = moto.catalog();
    setup
        .create_table("bronze.t", &schema(), &[])
        .await
        .unwrap();
    let base = setup.latest_version_number().await.unwrap();

    // Writer A holds its catalog-version put at a gate; writer B commits meanwhile.
    let a_store = FaultyStore::new(moto.store());
    let a = Catalog::open_store(
        Arc::new(a_store.clone()),
        "s3://lake/catalog",
        "s3://lake/warehouse",
    );
    let b = moto.catalog();
    let ta = a.table("bronze.t").await.unwrap();
    let files_a = ta.write_data_files(&[batch(0..3, "d")]).await.unwrap();
    let change_a = ta
        .stage_files("main", files_a.clone(), None, none())
        .await
        .unwrap();
    let gate = Gate::new();
    a_store.inject(Op::Put, "/versions/v", Fault::Pause(gate.clone()), 1);
    let a2 = a.clone();
    let racing =
        tokio::spawn(async move { a2.commit(vec![change_a], "append", "a", none()).await });
    gate.reached().await;
    let won = b
        .append("bronze.t", "main", &[batch(10..13, "d")], none())
        .await
        .unwrap();
    assert_eq!(won.version, base + 1);
    gate.release();
    // A's put of the same version is refused by S3 (If-None-Match: *): a typed conflict.
    let lost = racing.await.unwrap().unwrap_err();
    assert!(matches!(lost, LakeError::Conflict { .. }), "{lost}");
    assert_eq!(b.latest_version_number().await.unwrap(), base + 1);
    // Version base+1 is B's: only B's rows are on main.
    assert_eq!(main_ids(&b, "bronze.t", &At::Main).await, vec![10, 11, 12]);

    // A's retry on the new head lands, with the files it wrote once.
    let ta = a.table("bronze.t").await.unwrap();
    let change_a = ta.stage_files("main", files_a, None, none()).await.unwrap();
    let retried = a
        .commit(vec![change_a], "append", "a", none())
        .await
        .unwrap();
    assert_eq!(retried.version, base + 2);
    assert_eq!(
        main_ids(&moto.catalog(), "bronze.t", &At::Main).await,
        vec![0, 1, 2, 10, 11, 12]
    );
    // Nothing points at a missing object.
    let v = b.verify().await.unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
}

#[tokio::test]
async fn a_bucket_without_create_if_absent_is_refused_with_a_typed_error() {
    let moto = Moto::start(&["lake"]);
    // Conditional put disabled: object_store cannot send If-None-Match.
    let store = moto
        .config()
        .option("aws_conditional_put", "disabled")
        .build("s3://lake")
        .unwrap();
    let c = Catalog::open_store(store.clone(), "s3://lake/catalog", "s3://lake/warehouse");
    let err = c
        .create_table("bronze.t", &schema(), &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LakeError::NoCreateIfAbsent { location, .. } if location.starts_with("s3://lake/")),
        "{err}"
    );
    // No catalog version was written.
    assert_eq!(c.latest_version_number().await.unwrap(), 0);
    let versions: Vec<_> =
        futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(&"catalog".into())))
            .await
            .unwrap();
    assert!(versions.is_empty(), "{versions:?}");
}

#[tokio::test]
async fn a_failing_version_put_is_a_typed_error_naming_it_and_the_lake_stays_readable() {
    let moto = Moto::start(&["lake"]);
    let faulty = FaultyStore::new(moto.store());
    let c = Catalog::open_store(
        Arc::new(faulty.clone()),
        "s3://lake/catalog",
        "s3://lake/warehouse",
    );
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    c.append("bronze.t", "main", &[batch(0..3, "d")], none())
        .await
        .unwrap();
    let before = c.latest_version_number().await.unwrap();
    // Every put of the next version is refused.
    faulty.inject(Op::Put, "/versions/v", Fault::FailBefore, 100);
    let err = c
        .append("bronze.t", "main", &[batch(3..6, "d")], none())
        .await
        .unwrap_err();
    let want = format!("versions/v{:020}.json", before + 1);
    assert!(
        matches!(&err, LakeError::CommitOutcomeUnknown { version, detail } if *version == before + 1 && detail.contains(&want)),
        "{err}"
    );
    faulty.clear();
    // The previous state, read by a fresh process.
    let fresh = moto.catalog();
    assert_eq!(fresh.latest_version_number().await.unwrap(), before);
    assert_eq!(main_ids(&fresh, "bronze.t", &At::Main).await, vec![0, 1, 2]);
    // The next run succeeds.
    c.append("bronze.t", "main", &[batch(3..6, "d")], none())
        .await
        .unwrap();
    assert_eq!(
        main_ids(&fresh, "bronze.t", &At::Main).await,
        (0..6).collect::<Vec<_>>()
    );
    let v = fresh.verify().await.unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
}

#[tokio::test]
async fn the_server_stopped_mid_commit_gives_a_typed_error_and_the_lake_stays_readable() {
    let moto = Moto::start(&["lake"]);
    let faulty = FaultyStore::new(moto.store());
    let c = Catalog::open_store(
        Arc::new(faulty.clone()),
        "s3://lake/catalog",
        "s3://lake/warehouse",
    );
    c.create_table("bronze.t", &schema(), &[]).await.unwrap();
    c.append("bronze.t", "main", &[batch(0..3, "d")], none())
        .await
        .unwrap();
    let before = c.latest_version_number().await.unwrap();
    // Data files and metadata are written; the server stops just before the version put.
    let gate = Gate::new();
    faulty.inject(Op::Put, "/versions/v", Fault::Pause(gate.clone()), 1);
    let c2 = c.clone();
    let commit = tokio::spawn(async move {
        c2.append("bronze.t", "main", &[batch(3..6, "d")], none())
            .await
    });
    gate.reached().await;
    moto.signal("STOP");
    gate.release();
    let err = commit.await.unwrap().unwrap_err();
    moto.signal("CONT");
    let want = format!("versions/v{:020}.json", before + 1);
    assert!(
        matches!(&err, LakeError::CommitOutcomeUnknown { version, detail } if *version == before + 1 && detail.contains(&want)),
        "{err}"
    );
    // A stopped server's buffered request may still land when it resumes: the lake is at
    // the previous version or at this commit, and readable and whole either way.
    let fresh = moto.catalog();
    let now = fresh.latest_version_number().await.unwrap();
    assert!(now == before || now == before + 1, "{now}");
    let rows = main_ids(&fresh, "bronze.t", &At::Main).await;
    if now == before {
        assert_eq!(rows, vec![0, 1, 2]);
    } else {
        assert_eq!(rows, (0..6).collect::<Vec<_>>());
    }
    let v = fresh.verify().await.unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    // The next run succeeds.
    c.append("bronze.t", "main", &[batch(10..11, "d")], none())
        .await
        .unwrap();
    assert!(main_ids(&fresh, "bronze.t", &At::Main).await.contains(&10));
}

const READER: &str = r#"
import json, sys
from pyiceberg.table import StaticTable
endpoint = sys.argv[2]
t = StaticTable.from_metadata(sys.argv[1], properties={
    "s3.endpoint": endpoint,
    "s3.access-key-id": "testing",
    "s3.secret-access-key": "testing",
    "s3.region": "us-east-1",
})
tab = t.scan().to_arrow()
print(json.dumps({
    "ids": sorted(tab.column("id").to_pylist()),
    "files": sorted(task.file.file_path for task in t.scan().plan_files()),
}))
"#;

#[tokio::test]
async fn pyiceberg_reads_a_table_on_s3_by_its_metadata_location() {
    let moto = Moto::start(&["lake"]);
    let c = moto.catalog();
    c.create_table("silver.m", &schema(), &[PartitionField::identity("day")])
        .await
        .unwrap();
    c.append(
        "silver.m",
        "main",
        &[batch(0..4, "2026-08-01"), batch(4..8, "2026-08-02")],
        none(),
    )
    .await
    .unwrap();
    let t = c.table("silver.m").await.unwrap();
    let out = Command::new(python())
        .arg("-c")
        .arg(READER)
        .arg(t.metadata_location())
        .arg(moto.endpoint())
        .output()
        .unwrap_or_else(|e| panic!("run python ({e}); install with {INSTALL}"));
    assert!(
        out.status.success(),
        "pyiceberg failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let got_ids: Vec<i64> = got["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(got_ids, (0..8).collect::<Vec<_>>());
    let files = got["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert!(
        files.iter().all(|f| f
            .as_str()
            .unwrap()
            .starts_with("s3://lake/warehouse/silver/m/data/")),
        "{files:?}"
    );
}

/// The path the CLI takes: `Catalog::open_url` with `s3://` URLs and the AWS environment. Run
/// in a child process (this test binary again) so the environment is set before any thread.
#[tokio::test]
async fn open_url_reaches_s3_through_the_aws_environment() {
    let moto = Moto::start(&["lake"]);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "open_url_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SUGARSHACK_S3_CHILD", "1")
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The child's lake is in the bucket, readable here.
    let c = Catalog::open_store(moto.store(), "s3://lake/c", "s3://lake/w");
    assert_eq!(main_ids(&c, "bronze.e", &At::Main).await, vec![0, 1]);
    assert!(
        c.table("bronze.e")
            .await
            .unwrap()
            .metadata_location()
            .starts_with("s3://lake/w/bronze/e/")
    );
}

#[tokio::test]
async fn open_url_child() {
    if std::env::var("SUGARSHACK_S3_CHILD").is_err() {
        return; // only run by open_url_reaches_s3_through_the_aws_environment
    }
    let c = Catalog::open_url("s3://lake/c", "s3://lake/w").unwrap();
    c.create_table("bronze.e", &schema(), &[]).await.unwrap();
    c.append("bronze.e", "main", &[batch(0..2, "d")], none())
        .await
        .unwrap();
    assert_eq!(main_ids(&c, "bronze.e", &At::Main).await, vec![0, 1]);
}

/// A file larger than object_store's 10 MiB `BufWriter` buffer goes up as a multipart upload
/// (10 MiB parts); a smaller one as one PUT. Both read back whole through the lake's FileIO.
#[tokio::test]
async fn a_large_file_is_written_by_multipart_upload_and_reads_back_whole() {
    let moto = Moto::start(&["lake"]);
    let faulty = FaultyStore::new(moto.store());
    let c = Catalog::open_store(
        Arc::new(faulty.clone()),
        "s3://lake/catalog",
        "s3://lake/warehouse",
    );
    let big: Vec<u8> = (0..(12u32 << 20)).map(|i| (i % 251) as u8).collect();
    let loc = "s3://lake/warehouse/big/data/big.bin";
    let out = c.file_io().new_output(loc).unwrap();
    let mut w = out.writer().await.unwrap();
    for chunk in big.chunks(1 << 20) {
        w.write(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    w.close().await.unwrap();
    // S3 names a multipart object's ETag by its part count: 12 MiB in 10 MiB parts is 2.
    let meta = faulty
        .head(&object_store::path::Path::from(
            "warehouse/big/data/big.bin",
        ))
        .await
        .unwrap();
    let etag = meta.e_tag.unwrap_or_default();
    assert!(etag.trim_matches('"').ends_with("-2"), "{etag}");
    let back = c.file_io().new_input(loc).unwrap().read().await.unwrap();
    assert_eq!(back.len(), big.len());
    assert!(back.as_ref() == big.as_slice(), "same bytes");
}
