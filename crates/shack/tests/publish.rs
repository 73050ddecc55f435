//! The publish's promises on small hand-made tables in bronze, silver and gold (no season):
//! a passing grade moves every table's `main` in ONE catalog version and tags it; a blocked one
//! moves nothing and is recorded; a write to `audit` after grading started is never published
//! unaudited; two publishes racing give one publish and one clear conflict, never a mix.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use chrono::{DateTime, TimeZone, Utc};
use futures::future::BoxFuture;
use lake::{At, Catalog};
use serde_json::json;
use shack::grade::{AuditFn, LAYERS};
use shack::publish::{self, LOG_TABLE};
use shack::{Audit, AuditResult, Grade, GradeContext, Settings, ShackError, Verdict};

const TABLES: [&str; 3] = ["bronze.sap", "silver.boiled", "gold.syrup"];
/// A table outside the graded namespaces: never graded, never moved by a publish.
const OTHER: &str = "tide.listing";

fn utc(d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 8, d, h, mi, 0)
        .single()
        .expect("a valid instant")
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]))
}

fn rows(values: &[i64]) -> RecordBatch {
    RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(values.to_vec()))])
        .expect("batch")
}

fn open(dir: &Path) -> Catalog {
    Catalog::open_local(dir.join("catalog"), dir.join("warehouse")).expect("open lake")
}

/// Create the tables and write one run to `audit` on each.
async fn setup(catalog: &Catalog) {
    for t in TABLES.iter().chain([&OTHER]) {
        catalog
            .create_table(t, &schema(), &[])
            .await
            .expect("create");
    }
    write_run(catalog, &[1, 2, 3]).await;
}

/// A run: append `values` to `audit` of every table (and of the table outside the layers).
async fn write_run(catalog: &Catalog, values: &[i64]) {
    for t in TABLES.iter().chain([&OTHER]) {
        catalog
            .append(t, "audit", &[rows(values)], BTreeMap::new())
            .await
            .expect("append");
    }
}

async fn heads(catalog: &Catalog, branch: &str) -> BTreeMap<String, Option<i64>> {
    let mut out = BTreeMap::new();
    for t in TABLES.iter().chain([&OTHER]) {
        let table = catalog.table(t).await.expect("table");
        out.insert(t.to_string(), table.head(branch));
    }
    out
}

async fn count(catalog: &Catalog, table: &str, at: &At) -> usize {
    let t = catalog.table(table).await.expect("table");
    t.scan(at)
        .await
        .expect("scan")
        .iter()
        .map(RecordBatch::num_rows)
        .sum()
}

fn pass_audit<'a>(
    _: &'a Catalog,
    _: &'a GradeContext,
) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async {
        Ok(AuditResult::new(
            "conservation",
            Verdict::Pass,
            "3 events, same count and same net in silver and gold",
            json!({"events": 3}),
        ))
    })
}

fn warn_audit<'a>(
    _: &'a Catalog,
    _: &'a GradeContext,
) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async {
        Ok(AuditResult::new(
            "reconciliation",
            Verdict::Warn,
            "still settling: 2026-08-16 CAD net off by -298.01",
            json!({}),
        ))
    })
}

fn block_audit<'a>(
    _: &'a Catalog,
    _: &'a GradeContext,
) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async {
        Ok(AuditResult::new(
            "quarantine rate",
            Verdict::Block,
            "orders 0.00% of 1,049; payments 20.42% of 284 (mostly unsupported_api_version)",
            json!({"payments": {"rows": 284, "quarantined": 58}}),
        ))
    })
}

/// An audit that fails to run: the grade must block, not pass.
fn failing_audit<'a>(
    _: &'a Catalog,
    _: &'a GradeContext,
) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async {
        Err(ShackError::NoBronze {
            table: "bronze.payments".into(),
        })
    })
}

/// An audit during which another writer appends to `audit` of gold; it then counts gold's rows
/// through the grade's SQL session, which must see only the graded snapshot.
fn racing_audit<'a>(
    catalog: &'a Catalog,
    ctx: &'a GradeContext,
) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async move {
        catalog
            .append("gold.syrup", "audit", &[rows(&[666])], BTreeMap::new())
            .await
            .expect("append during grading");
        let sql = ctx.sql(catalog).await?;
        let batches = sql
            .query("select count(*) as n, coalesce(max(n), 0) as top from gold.syrup")
            .await
            .map_err(|e| ShackError::BadTable {
                table: "gold.syrup".into(),
                detail: e.to_string(),
            })?;
        let b = &batches[0];
        let top = b
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("max")
            .value(0);
        let verdict = if top == 666 {
            Verdict::Block
        } else {
            Verdict::Pass
        };
        Ok(AuditResult::new(
            "graded snapshot",
            verdict,
            format!("largest value {top}"),
            json!({"top": top}),
        ))
    })
}

fn audits(fns: &[(&str, shack::grade::AuditFnPtr)]) -> Vec<Arc<dyn Audit>> {
    fns.iter()
        .map(|(name, f)| Arc::new(AuditFn::new(name, *f)) as Arc<dyn Audit>)
        .collect()
}

async fn grade_with(
    catalog: &Catalog,
    as_of: DateTime<Utc>,
    fns: &[(&str, shack::grade::AuditFnPtr)],
) -> Grade {
    shack::grade(catalog, &LAYERS, as_of, &Settings::default(), &audits(fns))
        .await
        .expect("grade")
}

async fn passing(catalog: &Catalog, as_of: DateTime<Utc>) -> Grade {
    grade_with(
        catalog,
        as_of,
        &[("conservation", pass_audit), ("reconciliation", warn_audit)],
    )
    .await
}

/// For every kept catalog version, each table's `main` there: a version either has all the
/// tables at one publish or none moved — never a mix.
async fn mains_by_version(catalog: &Catalog) -> Vec<(u64, BTreeMap<String, Option<i64>>)> {
    let mut out = Vec::new();
    for v in catalog.log().await.expect("log") {
        let mut mains = BTreeMap::new();
        for t in TABLES {
            let main = if v.tables.contains_key(t) {
                let table = catalog.table_in(&v, t).await.expect("table");
                table.head("main")
            } else {
                None
            };
            mains.insert(t.to_string(), main);
        }
        out.push((v.version, mains));
    }
    out
}

#[tokio::test]
async fn a_passing_grade_moves_every_main_in_one_catalog_version_and_tags_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;
    let before = heads(&catalog, "main").await;
    assert!(before.values().all(Option::is_none), "{before:?}");

    let as_of = utc(16, 23, 59);
    let grade = passing(&catalog, as_of).await;
    assert!(!grade.blocked());
    assert_eq!(
        grade
            .snapshots()
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec!["bronze.sap", "gold.syrup", "silver.boiled"],
        "every table of the layers, nothing else"
    );
    let audit_heads = heads(&catalog, "audit").await;
    for (t, s) in grade.snapshots() {
        assert_eq!(audit_heads[t], Some(*s));
    }

    let out = shack::publish(&catalog, &grade, 1_000)
        .await
        .expect("publish");
    assert!(out.published());
    assert_eq!(out.record.publish_number, Some(1));
    assert_eq!(out.render(), "Published gold as of 2026-08-16 23:59 UTC.");
    assert_eq!(out.previous, None);

    // Every table's main and tag at the graded snapshot; the table outside the layers untouched.
    let mains = heads(&catalog, "main").await;
    for (t, s) in grade.snapshots() {
        assert_eq!(mains[t], Some(*s), "{t}");
        let table = catalog.table(t).await.expect("table");
        assert_eq!(table.head("publish-1"), Some(*s), "{t} tagged");
        assert!(!table.is_branch("publish-1"), "a tag, not a branch");
        assert_eq!(count(&catalog, t, &At::Main).await, 3);
    }
    assert_eq!(mains[OTHER], None, "{OTHER} is not in a graded namespace");

    // ONE version moved all of them, and it also holds the log row.
    let v = catalog.version(out.version).await.expect("version");
    for t in TABLES.iter().chain([&LOG_TABLE]) {
        assert!(v.changed.iter().any(|c| c == t), "{t} in {:?}", v.changed);
    }
    assert_eq!(
        v.properties.get(publish::PROP_NUMBER).map(String::as_str),
        Some("1")
    );
    let history = mains_by_version(&catalog).await;
    let moved: Vec<u64> = history
        .windows(2)
        .filter(|w| w[0].1 != w[1].1)
        .map(|w| w[1].0)
        .collect();
    assert_eq!(
        moved,
        vec![out.version],
        "main moved in exactly one version"
    );
    for (version, mains) in &history {
        let moved = mains.values().filter(|m| m.is_some()).count();
        assert!(
            moved == 0 || moved == TABLES.len(),
            "version {version} has some mains moved and others not: {mains:?}"
        );
    }

    // The log.
    let log = shack::publishes(&catalog).await.expect("log");
    assert_eq!(log.len(), 1);
    let r = &log[0];
    assert_eq!(r, &out.record);
    assert_eq!(r.seq, 1);
    assert_eq!(r.status(), "published");
    assert_eq!(r.as_of, as_of);
    assert_eq!(r.recorded_at_ms, 1_000);
    assert_eq!(r.graded_version, grade.version());
    assert!(r.base_version < out.version);
    assert_eq!(&r.snapshots, grade.snapshots());
    assert_eq!(r.audits, grade.results);
    assert_eq!(r.audits[1].verdict, Verdict::Warn);
    assert_eq!(
        publish::publish_version(&catalog, r)
            .await
            .expect("version"),
        Some(out.version)
    );

    // A second run publishes as publish 2; time travel finds each by as-of.
    write_run(&catalog, &[4, 5]).await;
    let as_of2 = utc(17, 12, 0);
    let grade2 = passing(&catalog, as_of2).await;
    assert_eq!(grade2.context.previous.as_ref(), Some(r));
    // What arrived since the last publish, by snapshot id: only the second run's rows.
    let since = grade2
        .context
        .since_last_publish(&catalog, "bronze.sap")
        .await
        .expect("incremental");
    assert_eq!(since.num_rows(), 2);
    assert_eq!(since.after, grade.snapshots().get("bronze.sap").copied());
    let since_start = grade
        .context
        .since_last_publish(&catalog, "bronze.sap")
        .await
        .expect("incremental");
    assert_eq!(
        since_start.num_rows(),
        3,
        "nothing published before: everything"
    );
    let out2 = shack::publish(&catalog, &grade2, 2_000)
        .await
        .expect("publish 2");
    assert_eq!(out2.record.publish_number, Some(2));
    assert_eq!(out2.record.seq, 2);
    for t in TABLES {
        assert_eq!(count(&catalog, t, &At::Main).await, 5);
        assert_eq!(count(&catalog, t, &At::reference("publish-1")).await, 3);
    }
    let last = shack::last_published(&catalog).await.expect("last");
    assert_eq!(last.as_ref(), Some(&out2.record));
    let at = |t| {
        let catalog = catalog.clone();
        async move { shack::publish_at_or_before(&catalog, t).await.expect("at") }
    };
    assert_eq!(at(utc(16, 0, 0)).await, None);
    assert_eq!(at(as_of).await.map(|r| r.seq), Some(1));
    assert_eq!(at(utc(17, 11, 59)).await.map(|r| r.seq), Some(1));
    assert_eq!(at(as_of2).await.map(|r| r.seq), Some(2));
    assert_eq!(at(utc(31, 0, 0)).await.map(|r| r.seq), Some(2));
}

#[tokio::test]
async fn a_blocked_grade_moves_no_main_and_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;

    // Blocked before anything was published.
    let grade = grade_with(
        &catalog,
        utc(16, 23, 59),
        &[
            ("conservation", pass_audit),
            ("quarantine rate", block_audit),
        ],
    )
    .await;
    assert!(grade.blocked());
    let out = shack::publish(&catalog, &grade, 500)
        .await
        .expect("record block");
    assert!(!out.published());
    assert_eq!(
        out.render(),
        "Not published. Nothing has been published yet."
    );
    assert!(heads(&catalog, "main").await.values().all(Option::is_none));

    // Published once, then a run that blocks.
    let first = shack::publish(&catalog, &passing(&catalog, utc(16, 23, 59)).await, 1_000)
        .await
        .expect("publish");
    assert_eq!(first.record.publish_number, Some(1));
    write_run(&catalog, &[4, 5]).await;
    let mains = heads(&catalog, "main").await;
    let audit_heads = heads(&catalog, "audit").await;
    let grade = grade_with(
        &catalog,
        utc(17, 12, 0),
        &[
            ("conservation", pass_audit),
            ("quarantine rate", block_audit),
            ("reconciliation", warn_audit),
        ],
    )
    .await;
    print!("{}", grade.render());
    assert!(grade.render().contains(
        "  BLOCK  quarantine rate  orders 0.00% of 1,049; payments 20.42% of 284 (mostly unsupported_api_version)"
    ));
    let out = shack::publish(&catalog, &grade, 2_000)
        .await
        .expect("record block");
    println!("{out}");
    assert!(!out.published());
    assert_eq!(
        out.render(),
        "Not published. gold still shows the build as of 2026-08-16 23:59 UTC."
    );
    assert_eq!(heads(&catalog, "main").await, mains, "no main moved");
    assert_eq!(
        heads(&catalog, "audit").await,
        audit_heads,
        "audit keeps the run"
    );
    for t in TABLES {
        let table = catalog.table(t).await.expect("table");
        assert_eq!(
            table.head("publish-2"),
            None,
            "{t}: no tag for a blocked run"
        );
        assert_eq!(count(&catalog, t, &At::Main).await, 3);
        assert_eq!(count(&catalog, t, &At::reference("audit")).await, 5);
    }
    // The block has its own commit, touching only the log.
    let v = catalog.version(out.version).await.expect("version");
    assert_eq!(v.changed, vec![LOG_TABLE.to_string()]);

    let log = shack::publishes(&catalog).await.expect("log");
    assert_eq!(
        log.iter().map(|r| (r.seq, r.status())).collect::<Vec<_>>(),
        vec![(1, "blocked"), (2, "published"), (3, "blocked")]
    );
    let blocked = &log[2];
    assert_eq!(blocked.publish_number, None);
    assert_eq!(blocked.recorded_at_ms, 2_000);
    assert_eq!(blocked.audits.len(), 3);
    assert_eq!(blocked.audits[1].name, "quarantine rate");
    assert_eq!(blocked.audits[1].verdict, Verdict::Block);
    assert_eq!(blocked.audits[1].evidence["payments"]["quarantined"], 58);
    assert_eq!(&blocked.snapshots, grade.snapshots());
    assert_eq!(
        shack::last_published(&catalog)
            .await
            .expect("last")
            .map(|r| r.seq),
        Some(2),
        "a block is not a publish"
    );

    // The next run continues on audit; its publish is number 2 and reaches the blocked rows too.
    let out = shack::publish(&catalog, &passing(&catalog, utc(18, 6, 0)).await, 3_000)
        .await
        .expect("publish");
    assert_eq!(out.record.publish_number, Some(2));
    assert_eq!(out.record.seq, 4);
    for t in TABLES {
        assert_eq!(count(&catalog, t, &At::Main).await, 5);
    }
}

#[tokio::test]
async fn an_audit_that_cannot_run_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;
    let grade = grade_with(
        &catalog,
        utc(16, 23, 59),
        &[("conservation", pass_audit), ("fx coverage", failing_audit)],
    )
    .await;
    assert!(grade.blocked());
    assert_eq!(grade.results[1].name, "fx coverage");
    assert!(
        grade.results[1].reason.starts_with("could not run: "),
        "{:?}",
        grade.results[1]
    );
    let out = shack::publish(&catalog, &grade, 1).await.expect("record");
    assert!(!out.published());
    assert!(heads(&catalog, "main").await.values().all(Option::is_none));
}

#[tokio::test]
async fn a_write_to_audit_after_grading_started_is_never_published_unaudited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;

    // Between grading and publish.
    let grade = passing(&catalog, utc(16, 23, 59)).await;
    write_run(&catalog, &[100]).await;
    let out = shack::publish(&catalog, &grade, 1_000)
        .await
        .expect("publish");
    assert!(out.published());
    let audit_heads = heads(&catalog, "audit").await;
    for (t, s) in grade.snapshots() {
        let table = catalog.table(t).await.expect("table");
        assert_eq!(
            table.head("main"),
            Some(*s),
            "{t}: main at the graded snapshot"
        );
        assert_ne!(audit_heads[t], Some(*s), "{t}: audit moved on");
        assert_eq!(
            count(&catalog, t, &At::Main).await,
            3,
            "{t}: the late row is not on main"
        );
        assert_eq!(count(&catalog, t, &At::reference("audit")).await, 4);
    }

    // During grading: the audit reads the graded snapshot, and that is what is published.
    let grade = grade_with(
        &catalog,
        utc(17, 12, 0),
        &[("graded snapshot", racing_audit)],
    )
    .await;
    assert!(
        !grade.blocked(),
        "the audit saw the write made during grading: {grade:?}"
    );
    assert_eq!(grade.results[0].reason, "largest value 100");
    let out = shack::publish(&catalog, &grade, 2_000)
        .await
        .expect("publish");
    assert!(out.published());
    assert_eq!(count(&catalog, "gold.syrup", &At::Main).await, 4);
    assert_eq!(
        count(&catalog, "gold.syrup", &At::reference("audit")).await,
        5
    );
    let gold = catalog.table("gold.syrup").await.expect("table");
    assert_eq!(gold.head("main"), Some(grade.snapshots()["gold.syrup"]));
    assert_ne!(gold.head("main"), gold.head("audit"));
}

/// Two runs grade the same lake through two handles and publish at once: one publishes, the
/// other is refused with a conflict, and every table's main is at the winner's graded snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_publishes_give_one_winner_and_a_clear_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = open(dir.path());
    let b = open(dir.path());
    setup(&a).await;
    let mut number = 0;
    for round in 0..4u32 {
        let as_of = utc(16 + round, 12, 0);
        let grade_a = passing(&a, as_of).await;
        // In odd rounds the second run has written more before grading: different snapshots.
        if round % 2 == 1 {
            write_run(&b, &[10 + i64::from(round)]).await;
        }
        let grade_b = passing(&b, as_of).await;
        let (ra, rb) = tokio::join!(
            shack::publish(&a, &grade_a, 1_000),
            shack::publish(&b, &grade_b, 1_000)
        );
        let (winner, loser) = match (&ra, &rb) {
            (Ok(_), Err(_)) => (&grade_a, rb),
            (Err(_), Ok(_)) => (&grade_b, ra),
            _ => panic!(
                "round {round}: expected one publish and one conflict, got {ra:?} and {rb:?}"
            ),
        };
        let err = loser.expect_err("the loser");
        assert!(
            matches!(err, ShackError::PublishConflict { .. }),
            "round {round}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains("another run published"), "{msg}");
        number += 1;

        let log = shack::publishes(&a).await.expect("log");
        let published: Vec<_> = log.iter().filter(|r| r.is_published()).collect();
        assert_eq!(
            published.len(),
            number,
            "round {round}: one publish per round"
        );
        assert_eq!(published[number - 1].publish_number, Some(number as u64));
        assert_eq!(&published[number - 1].snapshots, winner.snapshots());
        let tag = publish::tag(number as u64);
        for (t, s) in winner.snapshots() {
            let table = b.table(t).await.expect("table");
            assert_eq!(table.head("main"), Some(*s), "round {round}: {t}");
            assert_eq!(table.head(&tag), Some(*s), "round {round}: {t}");
        }
        write_run(&a, &[i64::from(round)]).await;
    }
    // Every version's mains are all unpublished or exactly one publish's graded snapshots.
    let published: Vec<BTreeMap<String, Option<i64>>> = shack::publishes(&a)
        .await
        .expect("log")
        .iter()
        .filter(|r| r.is_published())
        .map(|r| {
            r.snapshots
                .iter()
                .map(|(t, s)| (t.clone(), Some(*s)))
                .collect()
        })
        .collect();
    for (version, mains) in mains_by_version(&a).await {
        assert!(
            mains.values().all(Option::is_none) || published.contains(&mains),
            "version {version}: mains {mains:?} are not one publish"
        );
    }
}

/// A publish restages over unrelated writes (runs appending to `audit` meanwhile) and still
/// moves main to exactly the graded snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_racing_writes_to_audit_retries_and_publishes_the_graded_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = open(dir.path());
    let b = open(dir.path());
    setup(&a).await;
    let grade = passing(&a, utc(16, 23, 59)).await;
    let writer = async {
        for i in 0..3 {
            write_run(&b, &[50 + i]).await;
        }
    };
    let (out, ()) = tokio::join!(shack::publish(&a, &grade, 1_000), writer);
    let out = out.expect("publish retried over writes to audit");
    assert!(out.published());
    for (t, s) in grade.snapshots() {
        let table = a.table(t).await.expect("table");
        assert_eq!(table.head("main"), Some(*s), "{t}");
        assert_eq!(table.head("publish-1"), Some(*s), "{t}");
        assert_eq!(count(&a, t, &At::Main).await, 3);
        assert_eq!(count(&a, t, &At::reference("audit")).await, 6);
    }
    assert_eq!(
        publish::publish_version(&a, &out.record)
            .await
            .expect("version"),
        Some(out.version)
    );
}

/// A grade taken before another run's publish is refused even when it publishes afterwards,
/// not only in a race.
#[tokio::test]
async fn a_stale_grade_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;
    let stale = passing(&catalog, utc(16, 12, 0)).await;
    let fresh = passing(&catalog, utc(16, 23, 59)).await;
    shack::publish(&catalog, &fresh, 1).await.expect("publish");
    let mains = heads(&catalog, "main").await;
    let err = shack::publish(&catalog, &stale, 2)
        .await
        .expect_err("stale");
    assert!(matches!(err, ShackError::PublishConflict { .. }), "{err}");
    assert_eq!(heads(&catalog, "main").await, mains);
    assert_eq!(shack::publishes(&catalog).await.expect("log").len(), 1);
}

mod held_commit {
    //! Races ordered exactly: the publish's put of its catalog version is held at a gate while
    //! another writer commits, then released.

    use super::*;
    use lake::datafusion::object_store::memory::InMemory;
    use lake::faults::{Fault, FaultyStore, Gate, Op};

    fn open_store(store: &FaultyStore) -> Catalog {
        Catalog::open_store(
            Arc::new(store.clone()),
            "memory:///catalog",
            "memory:///warehouse",
        )
    }

    /// A lake with one publish done (so the log exists), a new run on `audit`, and its grade.
    async fn prepared(store: &FaultyStore) -> (Catalog, Grade) {
        let c = open_store(store);
        setup(&c).await;
        shack::publish(&c, &passing(&c, utc(16, 23, 59)).await, 1)
            .await
            .expect("publish 1");
        write_run(&c, &[4, 5]).await;
        let grade = passing(&c, utc(17, 12, 0)).await;
        (c, grade)
    }

    /// Hold the next catalog-version put at the returned gate.
    async fn hold_next_version(store: &FaultyStore, c: &Catalog) -> Gate {
        let next = c.latest_version_number().await.expect("head") + 1;
        let gate = Gate::new();
        store.inject(
            Op::Put,
            &format!("catalog/versions/v{next:020}.json"),
            Fault::Pause(gate.clone()),
            1,
        );
        gate
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_that_loses_its_version_to_an_audit_write_is_restaged() {
        let store = FaultyStore::new(Arc::new(InMemory::new()));
        let (c, grade) = prepared(&store).await;
        let other = open_store(&store);
        let base = c.latest_version_number().await.expect("head");
        let gate = hold_next_version(&store, &c).await;
        let publisher = {
            let (c, grade) = (c.clone(), grade.clone());
            tokio::spawn(async move { shack::publish(&c, &grade, 2).await })
        };
        gate.reached().await;
        let late = other
            .append("bronze.sap", "audit", &[rows(&[99])], BTreeMap::new())
            .await
            .expect("audit write");
        assert_eq!(late.version, base + 1);
        gate.release();
        let out = publisher.await.expect("task").expect("publish restaged");
        assert!(out.published());
        assert_eq!(
            out.record.base_version,
            base + 1,
            "restaged on the new head"
        );
        assert_eq!(out.version, base + 2);
        assert_eq!(
            publish::publish_version(&c, &out.record)
                .await
                .expect("version"),
            Some(out.version)
        );
        for (t, s) in grade.snapshots() {
            let table = c.table(t).await.expect("table");
            assert_eq!(table.head("main"), Some(*s), "{t}");
            assert_eq!(table.head("publish-2"), Some(*s), "{t}");
        }
        let sap = c.table("bronze.sap").await.expect("table");
        assert_eq!(sap.head("audit"), Some(late.snapshot_id));
        assert_eq!(
            count(&c, "bronze.sap", &At::Main).await,
            5,
            "the late row waits"
        );
        assert_eq!(
            shack::publishes(&c)
                .await
                .expect("log")
                .iter()
                .map(|r| r.seq)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_that_loses_its_version_to_another_publish_is_refused() {
        let store = FaultyStore::new(Arc::new(InMemory::new()));
        let (c, grade) = prepared(&store).await;
        let other = open_store(&store);
        write_run(&other, &[6]).await;
        let other_grade = passing(&other, utc(17, 12, 0)).await;
        let gate = hold_next_version(&store, &c).await;
        let publisher = {
            let (c, grade) = (c.clone(), grade.clone());
            tokio::spawn(async move { shack::publish(&c, &grade, 2).await })
        };
        gate.reached().await;
        let won = shack::publish(&other, &other_grade, 3)
            .await
            .expect("the other publish");
        gate.release();
        let err = publisher
            .await
            .expect("task")
            .expect_err("refused after losing to a publish");
        assert!(matches!(err, ShackError::PublishConflict { .. }), "{err}");
        assert!(err.to_string().contains("another run published"), "{err}");
        for (t, s) in other_grade.snapshots() {
            let table = c.table(t).await.expect("table");
            assert_eq!(table.head("main"), Some(*s), "{t}: the winner's snapshot");
            assert_eq!(count(&c, t, &At::Main).await, 6);
        }
        let log = shack::publishes(&c).await.expect("log");
        assert_eq!(log.len(), 2);
        assert_eq!(log[1], won.record);
    }
}

/// Grade a run as of noon on `day` (a block by the quarantine-rate audit when `block`) and
/// publish or record it.
async fn publish_or_block(catalog: &Catalog, day: u32, block: bool) {
    let grade = if block {
        grade_with(
            catalog,
            utc(day, 12, 0),
            &[("quarantine rate", block_audit)],
        )
        .await
    } else {
        passing(catalog, utc(day, 12, 0)).await
    };
    shack::publish(catalog, &grade, 100).await.expect("publish");
}

/// `main` of the publish log reset by hand to snapshot `to`.
async fn move_log_back(catalog: &Catalog, to: i64) {
    catalog
        .update_refs(
            LOG_TABLE,
            &[lake::RefOp::Reset {
                branch: "main".into(),
                to,
            }],
            "test: move the log back",
        )
        .await
        .expect("reset");
}

/// The seqs of the log as one whole read of `ops.publish_log` at `main` finds them.
async fn log_read_whole(catalog: &Catalog) -> Vec<u64> {
    let t = catalog.table(LOG_TABLE).await.expect("log table");
    let mut seqs: Vec<u64> = Vec::new();
    for b in t.scan(&At::Main).await.expect("scan log") {
        let c = b
            .column_by_name("seq")
            .expect("seq column")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("seq is a long")
            .clone();
        seqs.extend(c.values().iter().map(|&v| v as u64));
    }
    seqs.sort();
    seqs
}

#[tokio::test]
async fn the_log_read_after_each_run_is_the_log_read_whole_even_after_main_moved_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;
    let seqs =
        |log: &[shack::publish::PublishRecord]| log.iter().map(|r| r.seq).collect::<Vec<_>>();

    // Publishes and blocks, the log read after each (a process reads only what was appended
    // since its last read): always what a whole read finds.
    for day in 16..20 {
        publish_or_block(&catalog, day, day == 18).await;
        let log = publish::publishes(&catalog).await.expect("read log");
        assert_eq!(
            seqs(&log),
            log_read_whole(&catalog).await,
            "after day {day}"
        );
        write_run(&catalog, &[day as i64]).await;
    }
    let before = publish::publishes(&catalog).await.expect("read log");
    assert_eq!(before.len(), 4);

    // `main` of the log moved back by hand two records: the next read is the shorter log,
    // never the records it held before plus nothing.
    let t = catalog.table(LOG_TABLE).await.expect("log table");
    let snaps = t.snapshots_between("main", None, None).expect("snapshots");
    let back = snaps[snaps.len() - 3].snapshot_id;
    move_log_back(&catalog, back).await;
    let after = publish::publishes(&catalog).await.expect("read log");
    assert_eq!(seqs(&after), seqs(&before[..2]));
    assert_eq!(seqs(&after), log_read_whole(&catalog).await);

    // And appends after that (here a blocked run: a publish would find its tag taken) are
    // read on top of the shorter log.
    let blocked = grade_with(
        &catalog,
        utc(21, 12, 0),
        &[("quarantine rate", block_audit)],
    )
    .await;
    shack::publish(&catalog, &blocked, 100)
        .await
        .expect("record the block");
    let log = publish::publishes(&catalog).await.expect("read log");
    assert_eq!(log.len(), 3);
    assert_eq!(seqs(&log), log_read_whole(&catalog).await);
}

/// The log's tail as a run reads it, and as the whole log says it should be.
async fn tails(catalog: &Catalog) -> (publish::LogTail, publish::LogTail) {
    let head = catalog.head().await.expect("head");
    let tail = publish::log_tail_in(catalog, &head)
        .await
        .expect("read the tail");
    let log = publish::publishes(catalog).await.expect("read log");
    let whole = publish::LogTail {
        newest_seq: log.iter().map(|r| r.seq).max().unwrap_or(0),
        last_published: log.iter().rev().find(|r| r.is_published()).cloned(),
        records: log.len() as u64,
    };
    (tail, whole)
}

#[tokio::test]
async fn the_logs_tail_is_what_the_whole_log_says_past_blocked_runs_a_move_back_and_a_rewrite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = open(dir.path());
    setup(&catalog).await;
    let (tail, whole) = tails(&catalog).await;
    assert_eq!(tail, whole);
    assert_eq!(tail, publish::LogTail::default());

    // Two publishes, then three blocked runs: the tail walks back past the blocks to the
    // second publish.
    for day in 10..15 {
        publish_or_block(&catalog, day, day >= 12).await;
        let (tail, whole) = tails(&catalog).await;
        assert_eq!(tail, whole, "after day {day}");
        write_run(&catalog, &[day as i64]).await;
    }
    let (tail, _) = tails(&catalog).await;
    assert_eq!(tail.newest_seq, 5);
    assert_eq!(tail.records, 5);
    let last = tail.last_published.expect("a publish");
    assert_eq!((last.seq, last.publish_number), (2, Some(2)));
    assert_eq!(
        shack::last_published(&catalog).await.expect("last"),
        Some(last)
    );

    // The log rewritten whole (as a compaction would, one file for every record): the tail is
    // read from the whole log, and the next publish numbers on from it.
    let t = catalog.table(LOG_TABLE).await.expect("log table");
    let all = t.scan(&At::Main).await.expect("scan log");
    let change = t
        .stage_replace("main", &lake::Replace::All, &all, BTreeMap::new())
        .await
        .expect("stage the rewrite");
    catalog
        .commit(
            vec![change],
            "rewrite",
            "test: rewrite the log",
            BTreeMap::new(),
        )
        .await
        .expect("rewrite");
    let (tail, whole) = tails(&catalog).await;
    assert_eq!(tail, whole);
    assert_eq!((tail.newest_seq, tail.records), (5, 5));
    let grade = passing(&catalog, utc(16, 12, 0)).await;
    let out = shack::publish(&catalog, &grade, 100)
        .await
        .expect("publish");
    assert_eq!((out.record.seq, out.record.publish_number), (6, Some(3)));
    let (tail, whole) = tails(&catalog).await;
    assert_eq!(tail, whole);

    // `main` of the log moved back to before the rewrite: the tail is the shorter log's.
    let t = catalog.table(LOG_TABLE).await.expect("log table");
    let snaps = t.snapshots_between("main", None, None).expect("snapshots");
    let back = snaps[2].snapshot_id;
    move_log_back(&catalog, back).await;
    let (tail, whole) = tails(&catalog).await;
    assert_eq!(tail, whole);
    assert_eq!(tail.newest_seq, 3);
}
