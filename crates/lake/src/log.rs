//! The catalog's version log: numbered, immutable version files, written create-if-absent.
//!
//! - Version `n` lives at `<catalog>/versions/v<n, 20 digits>.json`. A commit writes `head + 1`
//!   with `PutMode::Create`, so of two writers exactly one wins the number.
//! - Each version carries a fresh `commit_id`. When a put errors (a timeout, a lost response) or
//!   finds the number taken, the writer reads the version back: its own id means it won; another
//!   id means it lost the race; no answer means [`LakeError::CommitOutcomeUnknown`], and nothing
//!   the commit wrote may be deleted (the head may name it).
//! - Each version records the SHA-256 of the exact bytes of the version it was written after
//!   (`previous_sha256`): the log is a hash chain [`Catalog::version_sha256`] and `verify` check.
//! - The head is found by probing with HEAD requests from the newest version a handle knows
//!   (or the hint, `version-hint.txt`, or a listing) and reading only the last one.
//! - Expired versions leave a floor behind: before any version is deleted, a marker
//!   `<catalog>/versions/floor/f<20 digits>` records the lowest kept version; the floor is the
//!   highest marker. Readers ignore versions below it, and a writer whose version lands below it
//!   (it held a stale head while the log moved on and was expired) takes it back and retries —
//!   unless nothing after it is left either, when it first asks the tables it changed whether
//!   it had been in the log after all (built on, then expired), so no change is applied twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::catalog::Catalog;
use crate::error::{LakeError, Result};
use crate::storage::{self, PutIfAbsent};

/// The catalog file format this build writes and the newest it reads.
pub const CATALOG_FORMAT: u32 = 1;

/// How often a head lookup starts over when the log moves under it (expiry racing the probes).
const HEAD_ATTEMPTS: u32 = 8;
/// How often one version number is put again while the put errors and nothing is there.
const PUT_ATTEMPTS: u32 = 3;

/// One table's entry in a catalog version.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TableEntry {
    /// The table's current Iceberg metadata file.
    pub metadata_location: String,
}

/// One immutable catalog version.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CatalogVersion {
    /// File format of this version ([`CATALOG_FORMAT`]).
    pub format: u32,
    /// The version number; 0 is the empty catalog that is never written.
    pub version: u64,
    /// When the commit that wrote it happened (ms since the epoch, UTC).
    pub committed_at_ms: i64,
    /// What kind of change: `create-table`, `append`, `overwrite`, `refs`, `publish`, …
    pub operation: String,
    /// A message for people.
    pub message: String,
    /// Caller properties (a publish records its as-of and audits here).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Namespaces and their properties.
    #[serde(default)]
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Every table, by `namespace.table`.
    #[serde(default)]
    pub tables: BTreeMap<String, TableEntry>,
    /// The tables this version changed.
    #[serde(default)]
    pub changed: Vec<String>,
    /// A unique id of the commit that wrote this version: a writer whose put failed or timed
    /// out reads the version back and knows by this id whether it was its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_id: Option<String>,
    /// SHA-256 (hex) of the exact bytes of version `version - 1`, so the log is a hash chain:
    /// `verify` checks every kept version against the one before it. `None` for version 1 and
    /// for versions written before the chain existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_sha256: Option<String>,
}

impl CatalogVersion {
    pub(crate) fn empty() -> Self {
        CatalogVersion {
            format: CATALOG_FORMAT,
            version: 0,
            committed_at_ms: 0,
            operation: "empty".into(),
            message: String::new(),
            properties: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            tables: BTreeMap::new(),
            changed: Vec::new(),
            commit_id: None,
            previous_sha256: None,
        }
    }
}

/// A version as stored, with the SHA-256 of its exact bytes (what the next version records).
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) version: CatalogVersion,
    pub(crate) sha256: String,
}

/// The lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What became of a write of the next version.
pub(crate) enum Written {
    /// It is in the log.
    Won(Arc<Stored>),
    /// It is not: another writer took the number, or ours landed below the floor and was taken
    /// back. `landed` says ours was in storage for a while (its files must then be kept: the
    /// take-back may have failed, and a reader may have seen it).
    Lost { landed: bool },
    /// Ours landed as `version`, the floor was then found above it, and the version after it
    /// was gone too. Either ours was put after its number had expired (never in the log), or it
    /// was the head for a while, was built on, and both were expired before this writer looked
    /// at the floor. The version files cannot tell which: the caller settles it from the tables
    /// (see `Catalog::commit_version`) before it may retry, since a retry of a change that had
    /// landed would apply it twice.
    Expired { version: u64 },
}

/// What a create-if-absent put of one version number settled to.
enum Put {
    Landed,
    Taken,
}

impl Catalog {
    pub(crate) fn version_location(&self, n: u64) -> String {
        storage::join(&self.inner.catalog_url, &format!("versions/v{n:020}.json"))
    }

    fn floor_dir(&self) -> String {
        storage::join(&self.inner.catalog_url, "versions/floor")
    }

    pub(crate) fn hint_location(&self) -> String {
        storage::join(&self.inner.catalog_url, "version-hint.txt")
    }

    /// The exact bytes of version `n` as stored (`None` when there is no such file). Versions
    /// below the floor are returned too: this is the raw log.
    pub(crate) async fn version_bytes(&self, n: u64) -> Result<Option<Bytes>> {
        storage::read_optional(self.stores(), &self.version_location(n)).await
    }

    /// The SHA-256 (lowercase hex) of the exact bytes of version `n` as stored: what version
    /// `n + 1` records as `previous_sha256`.
    pub async fn version_sha256(&self, n: u64) -> Result<String> {
        match self.version_bytes(n).await? {
            Some(b) => Ok(sha256_hex(&b)),
            None => Err(LakeError::NoSuchVersion {
                version: n,
                latest: self.latest_version_number().await?,
            }),
        }
    }

    async fn version_present(&self, n: u64) -> Result<bool> {
        Ok(storage::read_head(self.stores(), &self.version_location(n))
            .await?
            .is_some())
    }

    /// Version `n` unless it is below the floor or absent (`n` > 0).
    pub(crate) async fn read_kept_version(&self, n: u64) -> Result<Option<CatalogVersion>> {
        if let Some(s) = self.newest().filter(|s| s.version.version == n) {
            return Ok(Some(s.version.clone()));
        }
        if n < self.floor().await? {
            return Ok(None);
        }
        match self.version_bytes(n).await? {
            Some(b) => Ok(Some(parse_version(&self.version_location(n), &b, n)?)),
            None => Ok(None),
        }
    }

    /// The floor: versions below it are expired (ignored by readers, taken back by writers).
    /// 0 when nothing was ever expired.
    pub(crate) async fn floor(&self) -> Result<u64> {
        let listed = storage::list(self.stores(), &self.floor_dir()).await?;
        let floor = listed
            .iter()
            .filter_map(|l| floor_number(&l.location))
            .max()
            .unwrap_or(0);
        self.inner.floor_seen.fetch_max(floor, Ordering::Relaxed);
        Ok(floor)
    }

    /// Record that every version below `lowest_kept` is expired. Must happen before any of
    /// them is deleted: see [`Catalog::delete_version`] for why that order makes the floor safe.
    pub(crate) async fn raise_floor(&self, lowest_kept: u64) -> Result<()> {
        let marker = storage::join(&self.floor_dir(), &format!("f{lowest_kept:020}"));
        match storage::try_put_if_absent(self.stores(), &marker, Bytes::new()).await? {
            PutIfAbsent::Written | PutIfAbsent::Exists => {}
            PutIfAbsent::Failed(e) => return Err(LakeError::store(marker, e)),
        }
        // On disk before any version below it is deleted.
        self.stores().sync().await?;
        self.inner
            .floor_seen
            .fetch_max(lowest_kept, Ordering::Relaxed);
        // Lower markers say nothing the highest does not: drop them (best effort; the floor is
        // the highest marker, so a leftover one is harmless).
        if let Ok(listed) = storage::list(self.stores(), &self.floor_dir()).await {
            for l in listed {
                if floor_number(&l.location).is_some_and(|f| f < lowest_kept) {
                    let _ = storage::delete(self.stores(), &l.location).await;
                }
            }
        }
        Ok(())
    }

    /// The numbers of the version files in storage, ascending (expired ones leave gaps; files
    /// below the floor not yet deleted are listed too).
    pub(crate) async fn list_versions(&self) -> Result<Vec<u64>> {
        let dir = storage::join(&self.inner.catalog_url, "versions");
        let listed = storage::list(self.stores(), &dir).await?;
        let mut out: Vec<u64> = listed
            .iter()
            .filter_map(|l| version_number(&l.location))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Delete the file of catalog version `n` (maintenance; never the newest, oldest first).
    ///
    /// The floor is raised past `n` first unless this handle knows it already is (expiry calls
    /// [`Catalog::raise_floor`] once for the whole run). Why the order makes a stale writer
    /// safe: a writer that holds an old head puts version `m` create-if-absent. If `m` still
    /// exists the put fails and the writer re-reads the log. If the put succeeds, `m` had been
    /// deleted, so the marker (written before the deletion) is already in storage, and the
    /// writer's check of the floor — after its put — sees `m` below it and takes the version
    /// back. Readers check the floor after probing, so they never take such a version for
    /// the head either.
    pub(crate) async fn delete_version(&self, n: u64) -> Result<()> {
        if self.inner.floor_seen.load(Ordering::Relaxed) <= n {
            self.raise_floor(n + 1).await?;
        }
        storage::delete(self.stores(), &self.version_location(n)).await
    }

    /// The newest version this handle read or wrote, if it kept one.
    pub(crate) fn newest(&self) -> Option<Arc<Stored>> {
        self.inner.newest.lock().ok().and_then(|g| g.clone())
    }

    /// Remember `s` if it is newer than what this handle knows.
    fn remember(&self, s: Arc<Stored>) {
        if let Ok(mut g) = self.inner.newest.lock()
            && g.as_ref()
                .is_none_or(|old| old.version.version < s.version.version)
        {
            *g = Some(s);
        }
    }

    async fn read_hint(&self) -> Result<Option<u64>> {
        Ok(
            match storage::read_optional(self.stores(), &self.hint_location()).await? {
                Some(b) => std::str::from_utf8(&b)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok()),
                None => None,
            },
        )
    }

    async fn list_max_version(&self) -> Result<u64> {
        Ok(self.list_versions().await?.last().copied().unwrap_or(0))
    }

    /// The highest version stored above `n` (`None`: none), by one listing that starts after
    /// version `n`'s name: nothing follows the head, so normally it finds nothing.
    async fn max_version_after(&self, n: u64) -> Result<Option<u64>> {
        let dir = storage::join(&self.inner.catalog_url, "versions");
        let listed = storage::list_after(self.stores(), &dir, &self.version_location(n)).await?;
        Ok(listed
            .iter()
            .filter_map(|l| version_number(&l.location))
            .filter(|v| *v > n)
            .max())
    }

    /// The newest version (`None` for the empty catalog) and the floor read after finding it.
    ///
    /// Probes with HEAD requests from the newest version this handle knows (else the hint, else
    /// a listing; see [`Catalog::last_present_from`]), reads only the last version found, and
    /// checks the floor afterwards: the kept log is contiguous from the floor to the head, so
    /// the version after which nothing follows is the head unless it lies below the floor. A
    /// log with a hole (a version deleted outside lake) is not contiguous: probes from the
    /// handle's own version read the hint beside the floor, and a hint past where they stopped
    /// sends one listing past it, so a long-lived handle does not read the version before the
    /// hole for good.
    pub(crate) async fn find_head(&self) -> Result<(Option<Arc<Stored>>, u64)> {
        self.find_head_with(true).await
    }

    /// [`Catalog::find_head`] for a commit: without reading the hint, since a commit into a
    /// hole is refused ([`LakeError::LogGap`]) after it lands, and a commit's own table reads
    /// found the head with it. One small read less on every commit.
    pub(crate) async fn find_head_for_commit(&self) -> Result<(Option<Arc<Stored>>, u64)> {
        self.find_head_with(false).await
    }

    async fn find_head_with(&self, read_hint: bool) -> Result<(Option<Arc<Stored>>, u64)> {
        let cached = self.newest();
        // A guess from the cache needs no check that it exists: an expired one is below the
        // floor (the floor is raised before any deletion).
        let (mut from, mut checked) = match &cached {
            Some(s) => (s.version.version, true),
            None => match self.read_hint().await? {
                Some(h) => (h, false),
                None => (self.list_max_version().await?, true),
            },
        };
        // Probes from the hint stop at a hole in the log (a version deleted outside lake),
        // and would take a version below it for the head: one listing past where they stopped
        // finds any version beyond.
        let mut look_past = cached.is_none() && !checked;
        // Probes from this handle's own newest version stop at such a hole too. The hint,
        // read beside the floor (best effort: whoever commits writes it after its version),
        // says when versions lie beyond where they stopped; then one listing finds them.
        let mut consult_hint = read_hint && cached.is_some();
        for _ in 0..HEAD_ATTEMPTS {
            if !checked && from > 0 && !self.version_present(from).await? {
                // A stale guess: a hint past the end of the log, or an expired version.
                let floor = self.floor().await?;
                from = floor.max(self.list_max_version().await?);
                look_past = false;
            }
            checked = false;
            let n = self.last_present_from(from).await?;
            let (floor, hint) = if std::mem::take(&mut consult_hint) {
                let (floor, hint) = futures::join!(self.floor(), self.read_hint());
                (floor?, hint.ok().flatten())
            } else {
                (self.floor().await?, None)
            };
            if n < floor {
                from = floor;
                continue;
            }
            if hint.is_some_and(|h| h > n) {
                look_past = true;
            }
            if look_past {
                look_past = false;
                if let Some(m) = self.max_version_after(n + 1).await? {
                    from = m;
                    checked = true;
                    continue;
                }
            }
            if n == 0 {
                return Ok((None, floor));
            }
            if let Some(c) = cached.as_ref().filter(|c| c.version.version == n) {
                return Ok((Some(c.clone()), floor));
            }
            match self.version_bytes(n).await? {
                Some(b) => {
                    let version = parse_version(&self.version_location(n), &b, n)?;
                    let stored = Arc::new(Stored {
                        version,
                        sha256: sha256_hex(&b),
                    });
                    self.remember(stored.clone());
                    return Ok((Some(stored), floor));
                }
                // Expired between the probe and the read: start again from what is kept.
                None => from = floor.max(self.list_max_version().await?),
            }
        }
        Err(LakeError::Other(format!(
            "the catalog log at {} kept moving while its head was looked for ({HEAD_ATTEMPTS} attempts)",
            self.inner.catalog_url
        )))
    }

    /// The last version of the run that goes on from `from` (taken as present): galloping HEAD
    /// probes (`from + 1`, `+ 2`, `+ 4`, …) up to a missing one, then bisection. Exact because
    /// the kept log is contiguous from the floor to the head (a result below the floor is
    /// thrown away by the caller), and cheap for a handle far behind: about 2·log₂ of the
    /// versions it missed, and one probe when it missed none.
    async fn last_present_from(&self, from: u64) -> Result<u64> {
        let mut lo = from;
        let mut step = 1u64;
        let mut hi = loop {
            let probe = lo.saturating_add(step);
            if probe == lo || !self.version_present(probe).await? {
                break probe;
            }
            lo = probe;
            step = step.saturating_mul(2);
        };
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.version_present(mid).await? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Write `next` (edited from `base`, the head) as the version after `base`. `floor_before`
    /// is the floor read when `base` was found. `next.commit_id` must be fresh for this attempt.
    pub(crate) async fn write_next(
        &self,
        base: Option<&Stored>,
        floor_before: u64,
        mut next: CatalogVersion,
    ) -> Result<Written> {
        next.format = CATALOG_FORMAT;
        next.version = base.map(|b| b.version.version).unwrap_or(0) + 1;
        next.previous_sha256 = base.map(|b| b.sha256.clone());
        let n = next.version;
        let commit_id = next.commit_id.clone().unwrap_or_default();
        let bytes = Bytes::from(
            serde_json::to_vec_pretty(&next).map_err(|e| LakeError::Other(e.to_string()))?,
        );
        // Everything this version names reaches the disk before it does (see `durable`); a
        // failure here fails the commit before anything names what was written.
        self.stores().sync().await?;
        if let Put::Taken = self.put_version(n, &bytes, &commit_id).await? {
            return Ok(Written::Lost { landed: false });
        }
        // Then the version itself: it is in the log now, for every reader, but a power cut
        // could still take it back.
        if let Err(e) = self.stores().sync().await {
            return Err(LakeError::CommitOutcomeUnknown {
                version: n,
                detail: format!("it landed, but {e}"),
            });
        }
        let sha256 = sha256_hex(&bytes);
        // Ours is in storage. Below the floor it landed in the expired range (see
        // `delete_version`): nobody builds on it; take it back and try on the real head.
        let floor_after = self
            .floor()
            .await
            .map_err(|e| unknown(n, "reading the floor", e))?;
        // Whether a version after ours was written on ours (`None`: there is none yet).
        let next_follows = self.next_follows(n, &sha256).await?;
        if n < floor_after && (n <= floor_before || next_follows != Some(true)) {
            let _ = storage::delete(self.stores(), &self.version_location(n)).await;
            // Above the floor read before the put and with no version after it left, ours may
            // have been in the log: the caller must find out before it tries again.
            return Ok(if n > floor_before && next_follows.is_none() {
                Written::Expired { version: n }
            } else {
                Written::Lost { landed: true }
            });
        }
        // Above the floor, a version after ours that does not follow from it: ours filled a
        // hole in the log below the real head (a version deleted outside lake), from a head
        // found short of it (a handle whose newest version lies just below the hole). Reported
        // as a success, the
        // commit would be lost behind the head: take it back and refuse.
        if next_follows == Some(false) {
            let _ = storage::delete(self.stores(), &self.version_location(n)).await;
            return Err(LakeError::LogGap {
                version: n,
                next: n + 1,
            });
        }
        // Best effort: the hint only speeds up finding the head.
        let _ = storage::put(
            self.stores(),
            &self.hint_location(),
            Bytes::from(n.to_string()),
        )
        .await;
        let stored = Arc::new(Stored {
            version: next,
            sha256,
        });
        self.remember(stored.clone());
        Ok(Written::Won(stored))
    }

    /// Whether version `n + 1` was written on our version `n` (its `previous_sha256` is ours),
    /// or `None` when there is no version `n + 1`: one HEAD probe, and a read only when it is
    /// there.
    ///
    /// It settles two doubts after ours landed. Below the floor read after it: ours was in the
    /// log (the head, expired later) rather than landed in the expired range only if the floor
    /// before our put was below `n` (at least `n + 1` when `n` was already expired) and `n + 1`
    /// follows from ours; when `n + 1` is gone too, it cannot tell ([`Written::Expired`]). Above
    /// it, an `n + 1` that does not follow means ours filled a hole.
    async fn next_follows(&self, n: u64, sha256: &str) -> Result<Option<bool>> {
        let after = match self.version_present(n + 1).await {
            Ok(false) => Ok(None),
            Ok(true) => self.version_bytes(n + 1).await,
            Err(e) => Err(e),
        }
        .map_err(|e| unknown(n, "reading the version after it", e))?;
        Ok(after.map(|b| {
            parse_version(&self.version_location(n + 1), &b, n + 1)
                .ok()
                .and_then(|v| v.previous_sha256)
                .is_some_and(|p| p == sha256)
        }))
    }

    /// Put version `n` create-if-absent and settle every doubt by reading it back.
    async fn put_version(&self, n: u64, bytes: &Bytes, commit_id: &str) -> Result<Put> {
        let location = self.version_location(n);
        let mut last = String::new();
        for _ in 0..PUT_ATTEMPTS {
            let doubt =
                match storage::try_put_if_absent(self.stores(), &location, bytes.clone()).await? {
                    PutIfAbsent::Written => return Ok(Put::Landed),
                    PutIfAbsent::Exists => "the version already exists".to_string(),
                    PutIfAbsent::Failed(e) => e.to_string(),
                };
            // The put may have landed (its response lost), or another writer's is there.
            match self.version_bytes(n).await {
                Ok(Some(found)) => {
                    let ours = found == *bytes
                        || parse_version(&location, &found, n)
                            .ok()
                            .and_then(|v| v.commit_id)
                            .is_some_and(|id| id == commit_id);
                    return Ok(if ours { Put::Landed } else { Put::Taken });
                }
                // Nothing there: put it again; create-if-absent settles the number (a delayed
                // put of ours landing first is recognised as ours).
                Ok(None) => last = doubt,
                Err(e) => {
                    return Err(LakeError::CommitOutcomeUnknown {
                        version: n,
                        detail: format!(
                            "writing {location} failed ({doubt}); reading it back failed too ({e})"
                        ),
                    });
                }
            }
        }
        Err(LakeError::CommitOutcomeUnknown {
            version: n,
            detail: format!(
                "writing {location} failed {PUT_ATTEMPTS} times, the last with {last}; it was not there when read back, but a put still in flight may land"
            ),
        })
    }
}

fn unknown(n: u64, doing: &str, e: LakeError) -> LakeError {
    LakeError::CommitOutcomeUnknown {
        version: n,
        detail: format!("version {n} was written, then {doing} failed: {e}"),
    }
}

/// The `N` of a version file `…/versions/v<N>.json`.
fn version_number(location: &str) -> Option<u64> {
    let name = location.rsplit('/').next()?;
    name.strip_prefix('v')?.strip_suffix(".json")?.parse().ok()
}

/// The `N` of a floor marker `…/versions/floor/f<N>`.
fn floor_number(location: &str) -> Option<u64> {
    location.rsplit('/').next()?.strip_prefix('f')?.parse().ok()
}

pub(crate) fn parse_version(location: &str, bytes: &[u8], expected: u64) -> Result<CatalogVersion> {
    #[derive(Deserialize)]
    struct Probe {
        format: u32,
    }
    let probe: Probe = serde_json::from_slice(bytes).map_err(|e| LakeError::BadCatalogVersion {
        location: location.to_string(),
        detail: e.to_string(),
    })?;
    if probe.format > CATALOG_FORMAT {
        return Err(LakeError::UnsupportedFormat {
            location: location.to_string(),
            found: probe.format,
            supported: CATALOG_FORMAT,
        });
    }
    let v: CatalogVersion =
        serde_json::from_slice(bytes).map_err(|e| LakeError::BadCatalogVersion {
            location: location.to_string(),
            detail: e.to_string(),
        })?;
    if v.version != expected {
        return Err(LakeError::BadCatalogVersion {
            location: location.to_string(),
            detail: format!("file says version {}, its name says {expected}", v.version),
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_for_format_shape_and_number() {
        let ok = serde_json::to_vec(&CatalogVersion {
            version: 3,
            ..CatalogVersion::empty()
        })
        .unwrap();
        assert_eq!(parse_version("v3", &ok, 3).unwrap().version, 3);
        assert!(matches!(
            parse_version("v4", &ok, 4),
            Err(LakeError::BadCatalogVersion { .. })
        ));
        assert!(matches!(
            parse_version("v", br#"{"format": 2}"#, 1),
            Err(LakeError::UnsupportedFormat { found: 2, .. })
        ));
        assert!(matches!(
            parse_version("v", b"not json", 1),
            Err(LakeError::BadCatalogVersion { .. })
        ));
    }

    #[tokio::test]
    async fn the_floor_is_the_highest_marker_and_deleting_a_version_raises_it_first() {
        let c = Catalog::in_memory();
        for ns in ["a", "b", "c", "d"] {
            c.set_namespace(ns, BTreeMap::new()).await.unwrap();
        }
        assert_eq!(c.floor().await.unwrap(), 0);
        c.raise_floor(2).await.unwrap();
        c.raise_floor(3).await.unwrap();
        c.raise_floor(2).await.unwrap(); // a late, lower marker changes nothing
        assert_eq!(c.floor().await.unwrap(), 3);
        // A handle that never raised the floor raises it past what it deletes.
        let other = Catalog::open_store(
            c.stores().resolve("memory:///catalog").unwrap().0,
            "memory:///catalog",
            "memory:///warehouse",
        );
        other.delete_version(3).await.unwrap();
        assert_eq!(other.floor().await.unwrap(), 4);
        assert_eq!(c.log().await.unwrap().len(), 1);
        assert!(matches!(
            c.version(2).await,
            Err(LakeError::NoSuchVersion { version: 2, .. })
        ));
        // Version 1 and 2 are still stored but below the floor: ignored, and listed for
        // maintenance to delete.
        assert_eq!(c.list_versions().await.unwrap(), vec![1, 2, 4]);
        assert_eq!(c.head().await.unwrap().version, 4);
    }

    #[test]
    fn floor_markers_and_hashes() {
        assert_eq!(
            floor_number("memory:///c/versions/floor/f00000000000000000007"),
            Some(7)
        );
        assert_eq!(floor_number("memory:///c/versions/v1.json"), None);
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
