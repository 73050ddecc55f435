//! # shack — the medallion pipeline of the Saltbox Market lake
//!
//! `shack` owns the pipeline that turns the landing zone into tables people can trust: the
//! **tap** (bronze, the sap tank: every landing line kept raw, with its lineage, content-addressed
//! so a re-sent file is never taken twice, committed crash-safe and idempotently to the `audit`
//! branch), the **boil** (silver: parsed by API version, quarantined with reasons, deduplicated,
//! change logs folded by LSN), the **finish** (gold: facts in CAD, the marts, the fulfilment
//! queue), the **grade** (the four [`audits`]) and the **publish** (one catalog commit moves
//! `main` of every table, or none). [`run`] chains them. It decides what the tables of each layer
//! are and which rules they keep.
//!
//! It does not own the table format: catalogs, snapshots, manifests, branches and commits are
//! `lake`'s, and `shack` only calls its public API (it knows nothing of manifests). It does not
//! generate seasons either: the landing zone and its ground truth are `sugarbush`'s, and `shack`
//! only lists what `sugarbush::landed` says had arrived and reads those files' bytes. Printing and
//! argument parsing belong to the `sugarshack` binary; here reports render to strings and
//! serialise to JSON.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use chrono::{TimeZone, Utc};
//! let catalog = lake::Catalog::open_local("catalog", "warehouse")?;
//! let through = Utc
//!     .with_ymd_and_hms(2026, 8, 16, 23, 59, 59)
//!     .single()
//!     .ok_or("no such instant")?;
//! let report = shack::tap(
//!     &catalog,
//!     std::path::Path::new("warehouse"),
//!     through,
//!     &shack::TapOptions::default(),
//!     &shack::NoProgress,
//! )
//! .await?;
//! print!("{}", report.render());
//! # Ok(()) }
//! ```

pub mod audits;
pub mod bronze;
mod cols;
pub mod compare;
pub mod config;
pub mod diff;
mod error;
pub mod gold;
pub mod grade;
mod layer;
mod lines;
mod par;
pub mod publish;
mod run;
pub mod season;
pub mod silver;
mod tap;

pub use config::Settings;
pub use error::{Result, ShackError};
pub use gold::{FinishOptions, FinishReport, finish};
pub use grade::{Audit, AuditResult, Grade, GradeContext, Verdict, grade};
pub use layer::Staged;
pub use publish::{
    PublishOutcome, PublishRecord, RollbackOutcome, last_published, publish, publish_at_or_before,
    publishes, rollback,
};
pub use run::{RunOptions, RunReport, run, tap_alone};
pub use season::{SeasonOptions, SeasonReport, SeasonRun, Skipped, play_season};
pub use silver::{BoilOptions, BoilReport, boil};
pub use sugarbush::{NoProgress, Progress, Source};
pub use tap::{
    BatchReport, ChangedReport, DuplicateReport, LEDGER_FILES_KEPT, TapOptions, TapReport, tap,
    thousands,
};
