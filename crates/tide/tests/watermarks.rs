//! The story's claims on short deterministic windows, on the lake's own snapshots: three days
//! from Tuesday 2 June 2026 (the default start: a pallet on the Tuesday and the Thursday), and
//! the story's own three days — 25 to 27 August 2026, the schedule changing (hourly to every
//! fifteen minutes) on the 26th, the 12,000-item pallet committing at 00:40 on the 27th.

use lake::{At, Catalog};
use tide::report::CadenceReport;
use tide::{LakeAt, TideArgs, TideError, TideReport};

fn short(days: u32) -> TideArgs {
    TideArgs {
        days,
        ..TideArgs::default()
    }
}

/// 25–27 August: the schedule changes on the 26th, the big pallet commits on the 27th.
fn story_window() -> TideArgs {
    let date = |d| chrono::NaiveDate::from_ymd_opt(2026, 8, d).unwrap_or_default();
    TideArgs {
        days: 3,
        start: date(25),
        change_on: date(26),
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
    assert!(
        r.source.writers[2].transactions >= 1,
        "a pallet in the window"
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

/// The story's own claims, on the story window.
fn assert_story_told(r: &TideReport, on_lake: bool) {
    let Some(s) = &r.story else {
        panic!("the story's model runs in every window")
    };
    let ck = &r.checks;
    assert!(ck.story_loses_no_sale && ck.replay_matches_the_model);
    assert!(ck.merge_and_append_lose_the_same_rows && ck.lossless_lookback_loses_nothing);
    assert_eq!(
        (s.before.cadence.as_str(), s.after.cadence.as_str()),
        ("1h", "15m")
    );
    assert_eq!((s.before.days, s.after.days), (1, 2));
    // The 27 August pallet: 12,000 items over three and a half hours, committed at 00:40,
    // read by the 00:49 run with the mark of the 00:34 run (Figure 1).
    let Some(p) = &s.big_pallet else {
        panic!("the big pallet commits in the window")
    };
    assert_eq!(p.items, 12_000);
    assert_eq!(p.commit, "2026-08-27 00:40:00");
    assert_eq!(p.read_by_run.as_deref(), Some("2026-08-27 00:49:00"));
    assert!(
        p.mark
            .as_deref()
            .is_some_and(|m| m.starts_with("2026-08-27 00:32:5"))
    );
    assert!((12_500.0..12_700.0).contains(&p.duration_s));
    // Survivors: what was stamped between the mark and the commit (about 7 minutes of items),
    // within a tenth of the story's 402; a 30-minute look-back adds 30 minutes of items.
    assert!((362..=442).contains(&p.survived), "{}", p.survived);
    let lb30 = p
        .survived_with_lookback
        .iter()
        .find(|(l, _)| l == "30m")
        .map(|(_, n)| *n);
    assert!(
        lb30.is_some_and(|n| (1_900..=2_330).contains(&n)),
        "{lb30:?}"
    );
    let lossless = p.survived_with_lookback.last().map(|(_, n)| *n);
    assert_eq!(lossless, Some(12_000));
    // Money is untouched; listings are not.
    let b = &s.business;
    assert_eq!(b.sales_lost, 0);
    assert!(b.sale_events > 0);
    assert_eq!(b.gmv_source_cents, b.gmv_model_cents);
    let created = b
        .by_event_type
        .iter()
        .find(|l| l.group == "listing_created");
    assert!(created.is_some_and(|l| l.lost >= 11_000), "{created:?}");
    assert_eq!(b.counted_by_sql, on_lake);
    if on_lake {
        let [at_change, at_end] = b.catalogue.as_slice() else {
            panic!(
                "the catalogue at the change and at the end: {:?}",
                b.catalogue
            )
        };
        assert!(at_end.missing > at_change.missing);
        assert!(at_end.missing >= 11_000 && at_end.missing_value_cents > 0);
        assert!(at_end.missing < at_end.shop_live);
    }
    // The reconciliation counts exactly the loss, on both sides of the change.
    let rc = &s.reconciliation;
    assert_eq!(rc.before.total_missing, s.before.lost);
    assert_eq!(rc.after.total_missing, s.after.lost);
    assert!(rc.after.median_missing > rc.before.median_missing);
    assert!(rc.worst_day.as_ref().is_some_and(|d| d.missing > 0));
    // The bets: merge and append lose the same rows, the look-back writes rows about three
    // times, the lossless look-back loses nothing, microbatch by day writes the most.
    let bet = |name: &str| {
        s.bets
            .strategies
            .iter()
            .chain(&s.bets.microbatch)
            .find(|b| b.strategy == name)
            .cloned()
            .unwrap_or_else(|| panic!("no bet {name}"))
    };
    let (merge, append) = (
        bet("merge, event_ts > max(event_ts)"),
        bet("append, event_ts > max(event_ts)"),
    );
    assert_eq!(
        (merge.lost, merge.row_writes),
        (append.lost, append.row_writes)
    );
    assert_eq!(merge.lost, s.after.lost);
    let (m30, a30) = (bet("merge, look-back 30m"), bet("append, look-back 30m"));
    assert_eq!(m30.lost, a30.lost);
    assert!(m30.lost < merge.lost);
    assert!(a30.duplicates > s.bets.rows && (2.5..3.5).contains(&a30.writes_per_row));
    let mb1 = bet("microbatch by event hour, lookback 1");
    let day = bet("microbatch by event day, lookback 1");
    assert!(mb1.lost < merge.lost && day.lost == 0);
    assert!(day.row_writes > mb1.row_writes);
    assert!(s.bets.microbatch_lossless_hour_lookback.is_some());
    assert_eq!(bet("snapshot id (the fix)").lost, 0);
    assert!(!s.against_the_story.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_lake_a_timestamp_mark_drops_long_transactions_and_a_snapshot_mark_drops_nothing()
-> Result<(), TideError> {
    let dir = tempfile::tempdir().map_err(|source| TideError::Io {
        path: "tempdir".into(),
        source,
    })?;
    let args = story_window();
    let on_lake = tide::run_on(&args, LakeAt::Dir(dir.path().to_path_buf()), false).await?;
    assert_story_holds(&on_lake);
    assert_story_told(&on_lake, true);
    // Every transaction longer than five minutes, together, follows the closed form.
    let five = &on_lake.cadences[0].survival;
    assert!(
        five.longer_transactions >= 10,
        "{}",
        five.longer_transactions
    );

    // The lake's incremental reads delivered exactly what the in-memory reference did.
    let reference = tide::run_reference(&args).await?;
    assert_eq!(on_lake.source, reference.source);
    assert_eq!(on_lake.cadences, reference.cadences);
    assert_story_told(&reference, false);
    let parts = |r: &TideReport| {
        r.story.as_ref().map(|s| {
            (
                s.before.clone(),
                s.after.clone(),
                s.big_pallet.clone(),
                s.bets.clone(),
            )
        })
    };
    assert_eq!(parts(&on_lake), parts(&reference));

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
    assert_eq!(names, ["5m", "7m", "10m", "15m", "30m", "45m", "1h"]);
    assert_eq!(r.config.loader_every, "1m");
    assert!(r.checks.snapshot_watermark_loses_nothing);
    assert!(r.checks.one_row_transactions_lose_nothing);
    Ok(())
}
