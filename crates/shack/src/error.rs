//! Typed errors: each names the landing file, line or table it is about, and says whether
//! anything was committed (a failed tap never commits anything).

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// Result with [`ShackError`].
pub type Result<T, E = ShackError> = std::result::Result<T, E>;

/// What went wrong in the pipeline, in terms a person can act on.
#[derive(Debug, Error)]
pub enum ShackError {
    /// The landing zone of a source could not be listed (a folder or file name that is not a
    /// landing name, or an unreadable folder).
    #[error("listing the {source_name} landing zone: {error}")]
    Landing {
        source_name: &'static str,
        #[source]
        error: sugarbush::SugarbushError,
    },

    /// The landing zone is not there (`missing`) or holds no landing file at all: the warehouse
    /// is not the one the season was generated into, or nothing was ever generated.
    #[error(
        "no landing zone to tap: {} {}; nothing was committed",
        dir.display(),
        if *missing { "does not exist or is not a folder" } else { "holds no landing files" }
    )]
    NoLandingZone { dir: PathBuf, missing: bool },

    /// A landing file could not be read.
    #[error("reading landing file {}{}: {error}; nothing was committed", path.display(), line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Read {
        path: PathBuf,
        /// The line being read, when the failure was inside the file.
        line: Option<u64>,
        #[source]
        error: std::io::Error,
    },

    /// A landing file's bytes changed between hashing it and reading its lines.
    #[error(
        "landing file {file} changed while it was being tapped (sha256 {first} when hashed, {second} when read); nothing was committed"
    )]
    FileChanged {
        file: String,
        first: String,
        second: String,
    },

    /// The lake refused or failed an operation on a table (named once: not again in front of a
    /// lake error that starts with it).
    #[error("{}", lake_message(.table, .error))]
    Lake {
        table: String,
        #[source]
        error: Box<lake::LakeError>,
    },

    /// Another writer committed to a table between this step's read of it and its commit
    /// (`step`: `tap`, `boil`, `finish`, `boil and finish`). For the tap, taking the files
    /// anyway could take a file twice; for the others, the build would miss what the other
    /// writer committed. Nothing of the step was committed.
    #[error(
        "another writer committed to {table} while this {step} ran, so nothing of this {step} was committed (run it again; it will see what the other writer committed): {detail}"
    )]
    Conflict {
        step: String,
        table: String,
        detail: String,
    },

    /// A row of a bronze table that this crate could not have written.
    #[error("table {table} holds a row this tap cannot read: {detail}")]
    BadTable { table: String, detail: String },

    /// The tap ran so long that its own uncommitted files could have been taken for a crashed
    /// run's orphans by a concurrent tap. It refuses to commit rather than risk naming a file
    /// that was swept away.
    #[error(
        "this tap wrote data for {elapsed:?}, more than half the orphan grace period ({grace:?}); nothing was committed (raise the grace period so it exceeds twice the longest tap)"
    )]
    OutlivedGrace { elapsed: Duration, grace: Duration },

    /// A payments API version was asked for that the parser registry has no entry for.
    #[error("no parser for payments api_version {version:?} (the registry knows {})", known.join(", "))]
    UnknownParser { version: String, known: Vec<String> },

    /// A bronze table the boil reads does not exist yet.
    #[error("{table} does not exist: tap the landing zone before boiling")]
    NoBronze { table: String },

    /// Row-level checks of severity error failed: the boil committed nothing.
    #[error("silver checks failed, nothing was committed: {}", failures.join("; "))]
    ChecksFailed { failures: Vec<String> },

    /// The settings file is not JSON, names an unknown key, or gives a key a bad value.
    #[error("settings file {}{}: {detail}", file.display(), key.as_ref().map(|k| format!(", key {k:?}")).unwrap_or_default())]
    Settings {
        file: PathBuf,
        /// The key at fault, when the file parsed as JSON.
        key: Option<String>,
        detail: String,
    },

    /// Another run published (or the log moved in a way this publish cannot restage over)
    /// after this run's grading started: nothing of this publish was committed; grade again.
    #[error("publish refused, nothing was committed: {detail}")]
    PublishConflict { detail: String },

    /// A silver table the finish reads does not exist yet (or has no snapshot on the branch).
    #[error("{table} does not exist: boil bronze before finishing")]
    NoSilver { table: String },

    /// A run as of an instant before the last publish's as-of.
    #[error(
        "the lake is published as of {published} (publish {number}), after --through {through}: a run cannot go back in time (read that morning with `query --as-of`, or `rollback` to an earlier publish first)"
    )]
    AsOfGoesBack {
        through: chrono::DateTime<chrono::Utc>,
        published: chrono::DateTime<chrono::Utc>,
        number: u64,
    },

    /// A run as of an instant before a landing file bronze already holds on `audit` arrived (a
    /// tap went further ahead, or a rollback kept what was tapped): its publish would show that
    /// file's rows as of an instant they had not arrived by. Nothing was written.
    #[error(
        "bronze on `audit` already holds {file}, which arrived at {arrived}, after --through {through}: a publish as of {through} would include it; run --through {arrived} or later (nothing was written)"
    )]
    BronzeAhead {
        through: chrono::DateTime<chrono::Utc>,
        arrived: chrono::DateTime<chrono::Utc>,
        file: String,
    },

    /// A run at the as-of of the last publish found nothing new: nothing was committed.
    /// Not a failure (the CLI says so and exits 0); a run that finds nothing to do commits
    /// nothing rather than publishing the same rows again.
    #[error(
        "nothing new has landed since publish {number} (as of {as_of}) and nothing waits on `audit`: nothing to do"
    )]
    NothingNew {
        number: u64,
        as_of: chrono::DateTime<chrono::Utc>,
    },

    /// A rollback or a time travel named a publish that cannot be used.
    #[error("cannot roll back to publish {number}: {detail} (`sugarshack history` lists them)")]
    NoSuchPublish { number: u64, detail: String },

    /// `compare` found no published gold to weigh.
    #[error("nothing to compare: {detail} (`sugarshack history` lists the publishes)")]
    NothingToCompare { detail: String },

    /// A diff named a branch or tag that no bronze, silver or gold table holds.
    #[error(
        "no bronze, silver or gold table has a branch or tag named {name:?} (`sugarshack branches` lists them)"
    )]
    NoSuchRef { name: String },

    /// `season --through` before the season's first morning: there is nothing to play.
    #[error(
        "nothing to play: --through {through} is before the season's first morning ({first}); nothing was written"
    )]
    BeforeTheSeason {
        through: chrono::DateTime<chrono::Utc>,
        first: chrono::DateTime<chrono::Utc>,
    },
}

impl ShackError {
    pub(crate) fn lake(table: impl Into<String>, error: lake::LakeError) -> Self {
        ShackError::Lake {
            table: table.into(),
            error: Box::new(error),
        }
    }

    /// True when running the same command again is the remedy (a concurrent writer won).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            ShackError::Conflict { .. } | ShackError::PublishConflict { .. }
        )
    }
}

/// `table: error`, or the error alone when it already starts with the table's name.
fn lake_message(table: &str, error: &lake::LakeError) -> String {
    let said = error.to_string();
    match said.strip_prefix(table) {
        Some(rest) if rest.starts_with(' ') => said,
        _ => format!("{table}: {said}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_named_once() {
        let outside = ShackError::lake(
            "bronze.orders",
            lake::LakeError::OutsideWarehouse {
                table: "bronze.orders".into(),
                location: "file:///a/bronze/orders".into(),
                warehouse: "file:///b".into(),
            },
        )
        .to_string();
        assert!(
            outside.starts_with("bronze.orders is read-only in this lake: it lives at file:///a/"),
            "{outside}"
        );
        assert_eq!(outside.matches("bronze.orders").count(), 1, "{outside}");
        // An error that does not start with the name gets it in front; a longer name that
        // starts with it is another table.
        let other = ShackError::lake(
            "bronze.orders",
            lake::LakeError::Other("no such file".into()),
        );
        assert_eq!(other.to_string(), "bronze.orders: no such file");
        let longer = ShackError::lake(
            "bronze.o",
            lake::LakeError::Other("bronze.orders went away".into()),
        );
        assert_eq!(longer.to_string(), "bronze.o: bronze.orders went away");
    }
}
