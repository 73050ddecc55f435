//! `verify`: like `git fsck` for the lake.
//!
//! Every kept catalog version must parse and chain to the one before it (its
//! `previous_sha256` is the SHA-256 of the previous kept version's exact bytes, where both are
//! kept and consecutive), and every file a kept version reaches — metadata files, manifest
//! lists, manifests, data and delete files, statistics files — must exist with the size its
//! manifest (`file_size_in_bytes`), manifest list (`manifest_length`) or table metadata
//! records. The walk is the one orphan removal uses ([`Catalog::remove_orphans`]): what verify
//! checks is exactly what the sweep keeps.
//!
//! Versions written before the chain existed carry no hash: they are reported as unchained,
//! not as damage. The newest version has no successor to vouch for it, so an edit to the head
//! alone shows only if it no longer parses.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

use crate::catalog::{CATALOG_FORMAT, Catalog, CatalogVersion};
use crate::error::Result;
use crate::maintenance::{FileKind, Reached};
use crate::storage;

/// One thing wrong in the lake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyProblem {
    /// What is damaged: `catalog-version`, `metadata`, `manifest-list`, `manifest`,
    /// `data-file`, `delete-file`, `statistics`, `partition-statistics`.
    pub kind: String,
    /// The file (or the catalog version's file).
    pub location: String,
    /// The catalog version, for a problem with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// The table whose metadata names the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// What is wrong.
    pub detail: String,
}

/// What [`Catalog::verify`] checked and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// The catalog root.
    pub catalog: String,
    /// The kept catalog versions, oldest first.
    pub versions: Vec<u64>,
    /// Versions whose recorded hash of the previous kept version was checked.
    pub versions_chained: usize,
    /// Versions that follow a kept version but record no hash of it (written before the chain
    /// existed): not damage, but not vouched for either.
    pub versions_unchained: Vec<u64>,
    /// How many were checked, per kind (`catalog-version`, `metadata`, `data-file`, …).
    pub checked: BTreeMap<String, usize>,
    /// Every problem found.
    pub problems: Vec<VerifyProblem>,
    /// Tables of the newest version whose metadata lies outside the warehouse, with that
    /// metadata's location: read here, never written ([`crate::LakeError::OutsideWarehouse`]).
    /// Not a problem of this lake, but its reads depend on another folder (a lake folder
    /// copied or moved, a table registered from another lake).
    pub read_only: Vec<(String, String)>,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn checked(&mut self, kind: &str) {
        *self.checked.entry(kind.to_string()).or_default() += 1;
    }
}

/// How many storage HEAD requests verify keeps in flight.
const CONCURRENT_HEADS: usize = 16;

impl Catalog {
    /// Check the whole lake (see the module docs). Storage errors other than a missing file end
    /// the check with an error; everything wrong with the lake itself is in the report.
    pub async fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport {
            catalog: self.catalog_url().to_string(),
            ..VerifyReport::default()
        };
        // 1. The catalog versions, and the chain between consecutive kept ones.
        let mut kept: Vec<(u64, Bytes, Option<CatalogVersion>)> = Vec::new();
        // Versions below the floor are expired (their files may linger until deleted).
        let floor = self.floor().await?;
        for n in self
            .list_versions()
            .await?
            .into_iter()
            .filter(|n| *n >= floor)
        {
            // Expired by another handle between the listing and the read: not kept any more.
            let Some(bytes) = self.version_bytes(n).await? else {
                continue;
            };
            report.checked("catalog-version");
            report.versions.push(n);
            let parsed = match check_version(&bytes, n) {
                Ok(v) => Some(v),
                Err(detail) => {
                    report.problems.push(VerifyProblem {
                        kind: "catalog-version".into(),
                        location: self.version_location(n),
                        version: Some(n),
                        table: None,
                        detail,
                    });
                    None
                }
            };
            kept.push((n, bytes, parsed));
        }
        // The kept log is contiguous from the floor to the head: expiry raises the floor before
        // it deletes, and a version is written only on the one before it. A number missing
        // above the floor (read again, in case an expiry ran meanwhile) is a lost version:
        // readers that stop at the gap see an older lake, and a writer would commit into it.
        let floor_now = self.floor().await?;
        // (Version numbers start at 1; a floor of 0 means nothing was ever expired.)
        let mut expected = floor_now.max(1);
        for (n, _, _) in &kept {
            if *n > expected {
                let missing = if expected + 1 == *n {
                    format!("version {expected} is missing")
                } else {
                    format!("versions {expected} to {} are missing", n - 1)
                };
                report.problems.push(VerifyProblem {
                    kind: "catalog-version".into(),
                    location: self.version_location(expected),
                    version: Some(expected),
                    table: None,
                    detail: format!(
                        "{missing} between the floor ({floor_now}) and version {n}: the log has a gap"
                    ),
                });
            }
            expected = expected.max(n + 1);
        }
        for pair in kept.windows(2) {
            let [(prev_n, prev_bytes, _), (n, _, Some(v))] = pair else {
                continue;
            };
            if *prev_n + 1 != *n {
                continue;
            }
            match &v.previous_sha256 {
                None => report.versions_unchained.push(*n),
                Some(recorded) => {
                    report.versions_chained += 1;
                    let actual = crate::log::sha256_hex(prev_bytes);
                    if *recorded != actual {
                        report.problems.push(VerifyProblem {
                            kind: "catalog-version".into(),
                            location: self.version_location(*prev_n),
                            version: Some(*prev_n),
                            table: None,
                            detail: format!(
                                "its bytes hash to {actual}, but version {n} records {recorded}: version {prev_n} was changed after version {n} was written (or version {n} was)"
                            ),
                        });
                    }
                }
            }
        }
        let versions: Vec<CatalogVersion> = kept.into_iter().filter_map(|(_, _, v)| v).collect();
        if let Some(newest) = versions.last() {
            report.read_only = newest
                .tables
                .iter()
                .filter(|(_, t)| !self.inside_warehouse(&t.metadata_location))
                .map(|(name, t)| (name.clone(), t.metadata_location.clone()))
                .collect();
        }

        // 2. Every file the kept versions reach: the walk orphan removal keeps.
        let reach = self.reachable(&versions).await?;
        let unreadable: HashSet<&str> = reach
            .unreadable
            .iter()
            .map(|u| u.location.as_str())
            .collect();
        for u in &reach.unreadable {
            report.problems.push(VerifyProblem {
                kind: u.kind.as_str().into(),
                location: u.location.clone(),
                version: None,
                table: Some(u.table.clone()),
                detail: u.detail.clone(),
            });
        }
        let mut to_head: Vec<&Reached> = Vec::new();
        let mut files: Vec<&Reached> = reach.files.values().collect();
        files.sort_by(|a, b| (a.kind, &a.location).cmp(&(b.kind, &b.location)));
        for r in files {
            if !r.live {
                continue; // a `deleted` manifest entry: no snapshot reads it
            }
            report.checked(r.kind.as_str());
            match r.read_size {
                // Read by the walk: its length is known even when it did not parse.
                Some(size) => size_problem(&mut report, r, size),
                None if unreadable.contains(r.location.as_str()) => {} // reported above
                None => to_head.push(r),
            }
        }
        let stores = self.stores();
        let sizes: Vec<(&Reached, Option<u64>)> = futures::stream::iter(to_head)
            .map(|r| async move {
                storage::read_head(stores, &r.location)
                    .await
                    .map(|size| (r, size))
            })
            .buffered(CONCURRENT_HEADS)
            .try_collect()
            .await?;
        for (r, size) in sizes {
            match size {
                Some(size) => size_problem(&mut report, r, size),
                None => report.problems.push(VerifyProblem {
                    kind: r.kind.as_str().into(),
                    location: r.location.clone(),
                    version: None,
                    table: Some(r.table.clone()),
                    detail: "file does not exist".into(),
                }),
            }
        }
        Ok(report)
    }
}

/// A catalog version's bytes parse, in a format this build reads, under the right number.
fn check_version(bytes: &[u8], n: u64) -> std::result::Result<CatalogVersion, String> {
    let v: CatalogVersion =
        serde_json::from_slice(bytes).map_err(|e| format!("does not parse: {e}"))?;
    if v.format > CATALOG_FORMAT {
        return Err(format!(
            "format {} is newer than this build reads ({CATALOG_FORMAT})",
            v.format
        ));
    }
    if v.version != n {
        return Err(format!(
            "file says version {}, its name says {n}",
            v.version
        ));
    }
    Ok(v)
}

fn size_problem(report: &mut VerifyReport, r: &Reached, actual: u64) {
    let Some(recorded) = r.recorded_size else {
        return;
    };
    if recorded == actual {
        return;
    }
    let by = match r.kind {
        FileKind::Manifest => "its manifest list records",
        FileKind::Statistics | FileKind::PartitionStatistics => "the table metadata records",
        _ => "its manifest records",
    };
    report.problems.push(VerifyProblem {
        kind: r.kind.as_str().into(),
        location: r.location.clone(),
        version: None,
        table: Some(r.table.clone()),
        detail: format!("the file is {actual} bytes; {by} {recorded}"),
    });
}
