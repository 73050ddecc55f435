//! Work markers: a writer that runs several commits in a row (a pipeline run) says so in the
//! catalog before it starts and takes it back when it finishes, so the next writer knows whether
//! the last one was interrupted (a crash or an error between its commits leaves data files no
//! catalog version names) and only then pays for an orphan sweep.
//!
//! A marker is one small object `<catalog>/work/<name>`; the catalog folder is never swept.

use bytes::Bytes;

use crate::catalog::Catalog;
use crate::error::{LakeError, Result};
use crate::storage;

impl Catalog {
    fn work_dir(&self) -> String {
        storage::join(self.catalog_url(), "work")
    }

    /// Mark work `name` as begun (`name`: letters, digits, `-`, `_` and `.`).
    pub async fn begin_work(&self, name: &str) -> Result<()> {
        check_name(name)?;
        let at = storage::join(&self.work_dir(), name);
        storage::put(self.stores(), &at, Bytes::from_static(b"begun\n")).await
    }

    /// Take back the marker of work `name` (finished); a marker that is gone is not an error.
    pub async fn end_work(&self, name: &str) -> Result<()> {
        check_name(name)?;
        storage::delete(self.stores(), &storage::join(&self.work_dir(), name)).await
    }

    /// The names of every work begun and not ended: interrupted, or still running.
    pub async fn unfinished_work(&self) -> Result<Vec<String>> {
        // A marker's name is the last segment of its location (names hold no '/'; comparing
        // whole locations would trip over how a store spells a folder with a space).
        let mut names: Vec<String> = storage::list(self.stores(), &self.work_dir())
            .await?
            .into_iter()
            .filter_map(|l| l.location.rsplit('/').next().map(str::to_string))
            .filter(|n| check_name(n).is_ok())
            .collect();
        names.sort();
        Ok(names)
    }
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(LakeError::Other(format!(
            "{name:?} is not a work marker name (letters, digits, '-', '_' and '.', not starting with '.')"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn markers_begin_list_and_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c =
            Catalog::open_local(dir.path().join("cat alog"), dir.path().join("wh")).expect("open");
        assert!(c.unfinished_work().await.expect("list").is_empty());
        c.begin_work("run-1").await.expect("begin");
        c.begin_work("run-2").await.expect("begin");
        assert_eq!(c.unfinished_work().await.expect("list"), ["run-1", "run-2"]);
        c.end_work("run-1").await.expect("end");
        c.end_work("run-1").await.expect("ending twice is fine");
        assert_eq!(c.unfinished_work().await.expect("list"), ["run-2"]);
        assert!(c.begin_work("../x").await.is_err());
        assert!(c.begin_work("").await.is_err());
        // Markers are not catalog versions.
        assert_eq!(c.log().await.expect("log").len(), 0);
    }
}
