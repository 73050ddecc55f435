//! Write-audit-publish in one page, on real Iceberg tables.
//!
//! Every write goes to the `audit` branch. A check reads `audit`; only when it passes does
//! `main` — what readers see — fast-forward to it. Then: time travel to before a publish, and
//! a rollback that keeps the abandoned head reachable under a tag.
//!
//!     cargo run --example wap             # in the embedded default lake (./catalog, ./warehouse)
//!     cargo run --example wap -- DIR      # or in DIR/catalog and DIR/warehouse
//!
//! It starts `demo.payments` afresh each run (older catalog versions still read the old one).

use std::collections::BTreeMap;
use std::sync::Arc;

use lake::arrow::array::{Int64Array, RecordBatch, StringArray};
use lake::arrow::datatypes::{DataType, Field, Schema};
use lake::{At, Catalog, RefOp};

const TABLE: &str = "demo.payments";

fn payments(rows: &[(&str, &str, i64)]) -> anyhow::Result<RecordBatch> {
    let schema = Schema::new(vec![
        Field::new("event_id", DataType::Utf8, false),
        Field::new("day", DataType::Utf8, false),
        Field::new("amount_minor", DataType::Int64, false),
    ]);
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )?)
}

/// The audit: no payment may have a non-positive amount. Reads the `audit` branch with SQL.
async fn check(lake: &Catalog) -> anyhow::Result<bool> {
    let sql = lake.sql(None, &At::reference("audit")).await?;
    let bad = sql
        .query("select count(*) as bad from demo.payments where amount_minor <= 0")
        .await?;
    let n = bad[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .map(|a| a.value(0))
        .unwrap_or(-1);
    println!(
        "   check   non-positive amounts on audit: {n} -> {}",
        if n == 0 { "PASS" } else { "BLOCK" }
    );
    Ok(n == 0)
}

async fn show(lake: &Catalog, label: &str, version: Option<u64>) -> anyhow::Result<()> {
    let sql = lake.sql(version, &At::Main).await?;
    let rows = sql
        .query("select count(*) as payments, coalesce(sum(amount_minor), 0) as total_minor from demo.payments")
        .await?;
    let n = rows[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .map(|a| a.value(0))
        .unwrap_or(0);
    let total = rows[0]
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .map(|a| a.value(0))
        .unwrap_or(0);
    println!(
        "   {label:<40} main: {n} payments, {}.{:02}",
        total / 100,
        total % 100
    );
    Ok(())
}

/// Publish: fast-forward `main` to `audit` (refused unless it is a fast-forward).
async fn publish(lake: &Catalog) -> anyhow::Result<u64> {
    let t = lake.table(TABLE).await?;
    let audit = t
        .head("audit")
        .ok_or_else(|| anyhow::anyhow!("nothing on audit"))?;
    let v = lake
        .update_refs(
            TABLE,
            &[RefOp::FastForward {
                branch: "main".into(),
                to: audit,
            }],
            "publish",
        )
        .await?;
    println!("   publish main -> snapshot {audit} (catalog version {v})");
    Ok(v)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    let lake = Catalog::open_local(root.join("catalog"), root.join("warehouse"))?;
    println!("lake at {}", root.join("catalog").display());

    println!("1. create {TABLE}");
    if lake.table(TABLE).await.is_ok() {
        lake.drop_table(TABLE).await?;
    }
    let schema = payments(&[])?.schema();
    lake.create_table(TABLE, &schema, &[]).await?;
    show(&lake, "a new table reads empty", None).await?;

    println!("2. day 1: write to audit, check, publish");
    let day1 = payments(&[("evt_1", "2026-08-01", 8167), ("evt_2", "2026-08-01", 2500)])?;
    lake.append(TABLE, "audit", &[day1], BTreeMap::new())
        .await?;
    show(&lake, "after the write, before the check", None).await?;
    let published_day1 = if check(&lake).await? {
        publish(&lake).await?
    } else {
        anyhow::bail!("day 1 should pass")
    };
    show(&lake, "after publishing day 1", None).await?;

    println!("3. day 2 arrives with a bad row: the check blocks, main does not move");
    let day2 = payments(&[
        ("evt_3", "2026-08-02", 4000),
        ("evt_4", "2026-08-02", -4000),
    ])?;
    lake.append(TABLE, "audit", &[day2], BTreeMap::new())
        .await?;
    if check(&lake).await? {
        anyhow::bail!("day 2 should block");
    }
    show(&lake, "blocked: readers still see day 1", None).await?;

    println!("4. fix: reset audit to main, write day 2 again, check, publish");
    let t = lake.table(TABLE).await?;
    let main = t
        .head("main")
        .ok_or_else(|| anyhow::anyhow!("main is empty"))?;
    lake.update_refs(
        TABLE,
        &[RefOp::Reset {
            branch: "audit".into(),
            to: main,
        }],
        "reset",
    )
    .await?;
    let day2 = payments(&[("evt_3", "2026-08-02", 4000)])?;
    lake.append(TABLE, "audit", &[day2], BTreeMap::new())
        .await?;
    if check(&lake).await? {
        publish(&lake).await?;
    }
    show(&lake, "after publishing day 2", None).await?;

    println!("5. time travel: main as of the day-1 publish (catalog version {published_day1})");
    show(&lake, "as of that version", Some(published_day1)).await?;

    println!("6. roll back: main returns to the day-1 publish; the abandoned head keeps a tag");
    let t = lake.table(TABLE).await?;
    let abandoned = t
        .head("main")
        .ok_or_else(|| anyhow::anyhow!("main is empty"))?;
    let day1_snapshot = lake
        .table_at_version(TABLE, published_day1)
        .await?
        .head("main")
        .ok_or_else(|| anyhow::anyhow!("no day-1 publish"))?;
    let tag = format!("rolled-back-{abandoned}");
    lake.update_refs(
        TABLE,
        &[
            RefOp::CreateTag {
                name: tag.clone(),
                snapshot_id: abandoned,
            },
            RefOp::Reset {
                branch: "main".into(),
                to: day1_snapshot,
            },
            RefOp::Reset {
                branch: "audit".into(),
                to: day1_snapshot,
            },
        ],
        "rollback",
    )
    .await?;
    show(&lake, "after the rollback", None).await?;
    let t = lake.table(TABLE).await?;
    for r in t.refs() {
        println!("   ref {:<28} {:<6} -> {}", r.name, r.kind, r.snapshot_id);
    }
    println!("   metadata: {}", t.metadata_location());
    println!(
        "look inside: cargo run -- snapshots {TABLE}; cargo run -- query \"select * from {TABLE}\""
    );
    Ok(())
}
