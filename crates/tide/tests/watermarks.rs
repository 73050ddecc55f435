//! The story's claims on a short deterministic window (three days from Wednesday 3 June 2026:
//! one pallet, on the Thursday), on the lake's own snapshots.

use lake::{At, Catalog};
use tide::report::CadenceReport;
use tide::{LakeAt, TideArgs, TideError, TideReport};

fn short(days: u32) -> TideArgs {
    TideArgs {
        days,
        ..TideArgs::default()
    }
}

fn variant<'a>(c: &'a CadenceReport, name: &str) -> &'a tide::report::VariantReport {
    c.variants
        .iter()
        .find(|v| v.variant == name)
        .unwrap_or_else(|| panic!("no variant {name} at {}", c.cadence))
}

fn assert_story_holds(r: &TideReport) {
    assert_eq!(
        r.source.writers[2].transactions, 1,
        "one pallet in the window"
    );
    assert!(r.checks.snapshot_watermark_loses_nothing);
    assert!(r.checks.one_row_transactions_lose_nothing);
    assert!(r.checks.loss_grows_as_cadence_shortens);
    assert!(r.checks.every_cadence_saw_every_row);
    assert!(r.checks.no_unexpected_repeats);
    let mut previous_loss = u64::MAX;
    for c in &r.cadences {
        let (a, b) = (variant(c, "a"), variant(c, "b"));
        // (b) loses nothing, by construction, and its daily reconciliation is zero.
        assert_eq!((b.rows, b.lost), (r.source.rows, 0), "{}", c.cadence);
        assert_eq!(b.reconciliation.total_missing, 0);
        assert_eq!(b.reconciliation.days_with_missing, 0);
        // (a) loses rows, none of them from one-row transactions or sales.
        assert!(a.lost > 0, "{}", c.cadence);
        assert_eq!(a.lost_by_writer[0].lost, 0, "shoppers at {}", c.cadence);
        assert_eq!(a.lost_by_side[0].lost, 0, "sales at {}", c.cadence);
        assert_eq!(a.gmv_cents, r.source.gmv_cents);
        // The reconciliation counts exactly the loss.
        assert_eq!(a.reconciliation.total_missing, a.lost);
        assert!(a.reconciliation.days_with_missing > 0);
        // Shorter cadence, more loss (cadences are sorted shortest first).
        assert!(a.lost < previous_loss, "{}", c.cadence);
        previous_loss = a.lost;
        // Survival follows the closed form — interval ÷ (2 × duration) for transactions longer
        // than the cadence — within its sampling noise (where the mark happened to land in each
        // transaction) plus a point for what the closed form leaves out (the two seconds every
        // row is stamped before its commit).
        let s = &c.survival;
        assert!(
            s.longer_transactions >= 1,
            "{}: the pallet is longer than any cadence",
            c.cadence
        );
        assert!(
            s.longer_deviation_pp.abs() <= 4.0 * s.longer_standard_error_pp + 1.0,
            "{}: {:.2}% measured vs {:.2}% closed form (standard error {:.2} pp)",
            c.cadence,
            s.longer_measured_pct,
            s.longer_closed_form_pct,
            s.longer_standard_error_pp
        );
        for b in &s.buckets {
            assert!(
                b.deviation_pp.abs() <= 4.0 * b.standard_error_pp + 1.0,
                "{}: {}s–{}s off by {} pp (standard error {})",
                c.cadence,
                b.from_s,
                b.to_s,
                b.deviation_pp,
                b.standard_error_pp
            );
        }
        // A look-back loses less and writes rows more than once.
        let lb = variant(c, "a_lb30m");
        assert!(lb.lost < a.lost);
        assert!(lb.written_per_row_kept > 1.0);
        assert_eq!(a.written_per_row_kept, 1.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_lake_a_timestamp_mark_drops_long_transactions_and_a_snapshot_mark_drops_nothing()
-> Result<(), TideError> {
    let dir = tempfile::tempdir().map_err(|source| TideError::Io {
        path: "tempdir".into(),
        source,
    })?;
    let args = short(3);
    let on_lake = tide::run_on(&args, LakeAt::Dir(dir.path().to_path_buf()), false).await?;
    assert_story_holds(&on_lake);
    // With dozens of transactions longer than five minutes, "closely" means closely.
    let five = &on_lake.cadences[0].survival;
    assert!(
        five.longer_transactions >= 50,
        "{}",
        five.longer_transactions
    );
    assert!(
        five.longer_deviation_pp.abs() < 2.0,
        "{}",
        five.longer_deviation_pp
    );

    // The lake's incremental reads delivered exactly what the in-memory reference did.
    let reference = tide::run_reference(&args).await?;
    assert_eq!(on_lake.source, reference.source);
    assert_eq!(on_lake.cadences, reference.cadences);

    // Bronze: one snapshot per loader commit, the loader's clock in each summary, history
    // bounded by expiry.
    let lake = on_lake.lake.as_ref().map(|l| {
        (
            l.loader_commits,
            l.snapshots_expired,
            l.max_snapshots_retained,
        )
    });
    let Some((commits, expired, max_retained)) = lake else {
        panic!("a lake run reports its lake")
    };
    assert!(
        commits >= 3 * 24 * 12,
        "every 5 minutes of the window brings rows: {commits}"
    );
    assert!(expired > commits / 2);
    assert!(max_retained < 64, "{max_retained} snapshots held at once");

    // The tidy kept the lake's disk bounded: one catalog version left, nothing on disk
    // that it does not reach.
    let tidy = on_lake
        .lake
        .as_ref()
        .map(|l| (l.catalog_versions_expired, l.files_removed));
    assert!(
        tidy.is_some_and(|(v, f)| v > commits && f > commits),
        "{tidy:?}"
    );
    let catalog = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))?;
    assert_eq!(catalog.log().await?.len(), 1);
    let now = chrono::Utc::now().timestamp_millis() + 1_000;
    assert_eq!(catalog.remove_orphans(now, 0).await?.total(), 0);
    let bronze = catalog.table(tide::BRONZE).await?;
    let head = bronze.head("main").unwrap_or_default();
    let head_info = bronze.snapshot(head)?;
    assert!(head_info.summary.contains_key(tide::SUMMARY_LOADED_AT_MS));

    // (b)'s target records its watermark — the bronze snapshot it consumed through — in its
    // own snapshot summary: the head of bronze, since every model ran after the last load.
    let b = catalog.table("tide.fct_listing_event_15m_b").await?;
    let b_head = b.snapshot(b.head("main").unwrap_or_default())?;
    assert_eq!(
        b_head.summary.get(tide::SUMMARY_SOURCE_SNAPSHOT),
        Some(&head.to_string())
    );

    // The targets are real tables: the count SQL sees matches the report.
    let ctx = catalog.sql(None, &At::Main).await?;
    let got = ctx
        .query("select count(*) as n from tide.fct_listing_event_5m_a")
        .await?;
    let n = got
        .first()
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
        })
        .map(|a| a.value(0));
    let a5 = on_lake
        .cadences
        .first()
        .map(|c| variant(c, "a").rows as i64);
    assert_eq!(n, a5);
    Ok(())
}

#[tokio::test]
async fn same_input_same_numbers_to_the_digit() -> Result<(), TideError> {
    let args = short(2);
    let first = tide::run_on(&args, LakeAt::Memory, false).await?;
    let second = tide::run_on(&args, LakeAt::Memory, false).await?;
    let json = |r: &TideReport| tide::render(r, tide::TideFormat::Json);
    assert_eq!(json(&first)?, json(&second)?);
    assert_eq!(tide::render_table(&first), tide::render_table(&second));
    // A different seed is a different shop.
    let other = tide::run_reference(&TideArgs { seed: 7, ..args }).await?;
    assert_ne!(other.source, first.source);
    Ok(())
}

#[tokio::test]
async fn the_loader_cadence_does_not_matter_when_every_run_lands_on_a_commit()
-> Result<(), TideError> {
    let five = tide::run_reference(&short(3)).await?;
    let one = tide::run_reference(&TideArgs {
        loader_every: Some(tide::Span::minutes(1)),
        ..short(3)
    })
    .await?;
    assert_eq!(five.cadences, one.cadences);
    Ok(())
}

#[tokio::test]
async fn any_cadence_on_the_command_line() -> Result<(), TideError> {
    let args = TideArgs {
        cadence: vec![tide::Span::minutes(7), tide::Span::minutes(45)],
        ..short(2)
    };
    let r = tide::run_reference(&args).await?;
    let names: Vec<&str> = r.cadences.iter().map(|c| c.cadence.as_str()).collect();
    assert_eq!(names, ["5m", "7m", "15m", "30m", "45m", "1h"]);
    assert_eq!(r.config.loader_every, "1m");
    assert!(r.checks.snapshot_watermark_loses_nothing);
    assert!(r.checks.one_row_transactions_lose_nothing);
    Ok(())
}
