//! The values every part of the lake passes around: table names, a table's refs, staged changes
//! and what a commit did.
//!
//! A leaf module: the catalog, the tables, the writers and maintenance all use these, and they
//! use nothing of those (so `catalog` and `table` meet here instead of importing each other's
//! value types).

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{SnapshotReference, SnapshotRetention, TableMetadata};

use std::fmt;

use iceberg::spec::MAIN_BRANCH;
use serde::Serialize;

use crate::error::{LakeError, Result};

/// Namespaces no table may be in: tables live at `<warehouse>/<namespace>/<table>`, and these are
/// folders of the warehouse that other writers own, with why. Compared ignoring ASCII case, as a
/// case-insensitive file system would.
pub const RESERVED_NAMESPACES: [(&str, &str); 2] = [
    (
        "landing",
        "<warehouse>/landing is the landing zone, where sources drop their raw files",
    ),
    (
        "truth",
        "<warehouse>/truth holds a generated season's ground truth",
    ),
];

/// `namespace.table`, each part letters, digits and `_`, the namespace not a reserved one
/// (`landing`, `truth`: see `RESERVED_NAMESPACES`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TableName {
    pub namespace: String,
    pub table: String,
}

impl TableName {
    /// Parse `namespace.table`. A name in a reserved namespace is refused
    /// ([`LakeError::ReservedNamespace`]): no table can be created, renamed or registered there,
    /// where its files would land among folders the lake does not own.
    pub fn parse(s: &str) -> Result<TableName> {
        let Some((ns, t)) = s.split_once('.') else {
            return Err(LakeError::InvalidName {
                name: s.to_string(),
                detail: "expected namespace.table".into(),
            });
        };
        Self::check_part(s, ns)?;
        Self::check_part(s, t)?;
        if let Some((_, why)) = RESERVED_NAMESPACES
            .iter()
            .find(|(reserved, _)| ns.eq_ignore_ascii_case(reserved))
        {
            return Err(LakeError::ReservedNamespace {
                name: s.to_string(),
                namespace: ns.to_string(),
                detail: (*why).to_string(),
            });
        }
        Ok(TableName {
            namespace: ns.to_string(),
            table: t.to_string(),
        })
    }

    pub(crate) fn check_part(whole: &str, part: &str) -> Result<()> {
        let ok = !part.is_empty()
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit());
        if ok {
            Ok(())
        } else {
            Err(LakeError::InvalidName {
                name: whole.to_string(),
                detail: format!(
                    "{part:?} must be letters, digits and _ (not starting with a digit)"
                ),
            })
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.namespace, self.table)
    }
}

/// A table's refs: name -> (is a branch, snapshot id), and the retention settings of the refs
/// that have any (a branch's `min-snapshots-to-keep`, `max-snapshot-age-ms`, `max-ref-age-ms`; a
/// tag's `max-ref-age-ms`), so that moving a branch keeps them without serialising the whole
/// metadata to find them (iceberg keeps the ref map private).
///
/// Derefs to the heads. [`RefMap::remove`] forgets a ref's retention with it; a ref created or
/// moved by lake keeps what [`RefMap::retention`] says (nothing, for one lake created).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RefMap {
    heads: BTreeMap<String, (bool, i64)>,
    retention: BTreeMap<String, SnapshotRetention>,
}

impl RefMap {
    pub(crate) fn new() -> RefMap {
        RefMap::default()
    }

    /// The retention settings of the refs that have any.
    pub(crate) fn retention(&self) -> &BTreeMap<String, SnapshotRetention> {
        &self.retention
    }

    /// Sets (or, with the defaults, forgets) the retention settings of `name`.
    pub(crate) fn set_retention(&mut self, name: &str, retention: SnapshotRetention) {
        if is_default_retention(&retention) {
            self.retention.remove(name);
        } else {
            self.retention.insert(name.to_string(), retention);
        }
    }

    /// Adds (or moves) a ref, with its retention settings.
    pub(crate) fn insert_ref(&mut self, name: &str, r: SnapshotReference) {
        self.heads
            .insert(name.to_string(), (r.is_branch(), r.snapshot_id));
        self.set_retention(name, r.retention);
    }

    /// `name` as a branch (or tag) at `id`, with the retention settings it has kept as one, or
    /// the defaults.
    pub(crate) fn reference(&self, name: &str, is_branch: bool, id: i64) -> SnapshotReference {
        let retention = match self.retention.get(name) {
            Some(r) if matches!(r, SnapshotRetention::Branch { .. }) == is_branch => r.clone(),
            _ => default_retention(is_branch),
        };
        SnapshotReference::new(id, retention)
    }

    /// Removes a ref and its retention settings.
    pub(crate) fn remove(&mut self, name: &str) -> Option<(bool, i64)> {
        self.retention.remove(name);
        self.heads.remove(name)
    }
}

/// A branch's (or a tag's) retention settings when it has none of its own.
pub(crate) fn default_retention(is_branch: bool) -> SnapshotRetention {
    if is_branch {
        SnapshotRetention::branch(None, None, None)
    } else {
        SnapshotRetention::Tag {
            max_ref_age_ms: None,
        }
    }
}

/// True for a branch or tag with no retention setting of its own.
fn is_default_retention(r: &SnapshotRetention) -> bool {
    *r == default_retention(matches!(r, SnapshotRetention::Branch { .. }))
}

impl std::ops::Deref for RefMap {
    type Target = BTreeMap<String, (bool, i64)>;
    fn deref(&self) -> &Self::Target {
        &self.heads
    }
}

impl std::ops::DerefMut for RefMap {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.heads
    }
}

impl<'a> IntoIterator for &'a RefMap {
    type Item = (&'a String, &'a (bool, i64));
    type IntoIter = std::collections::btree_map::Iter<'a, String, (bool, i64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.heads.iter()
    }
}

impl FromIterator<(String, (bool, i64))> for RefMap {
    fn from_iter<I: IntoIterator<Item = (String, (bool, i64))>>(iter: I) -> RefMap {
        RefMap {
            heads: iter.into_iter().collect(),
            retention: BTreeMap::new(),
        }
    }
}

impl<const N: usize> From<[(String, (bool, i64)); N]> for RefMap {
    fn from(heads: [(String, (bool, i64)); N]) -> RefMap {
        heads.into_iter().collect()
    }
}

/// The refs of a metadata, read through its serialised form (the map is private upstream).
pub(crate) fn ref_map(md: &TableMetadata) -> RefMap {
    let parsed = serde_json::to_vec(md)
        .ok()
        .and_then(|bytes| refs_of(&bytes).ok());
    parsed.unwrap_or_else(|| {
        md.current_snapshot_id()
            .map(|id| (MAIN_BRANCH.to_string(), (true, id)))
            .into_iter()
            .collect()
    })
}

/// The refs of serialised table metadata: name -> (is a branch, snapshot id), with their
/// retention settings. As iceberg reads them: the `refs` map, and `main` at
/// `current-snapshot-id` when the map has no `main`.
pub(crate) fn refs_of(metadata_json: &[u8]) -> serde_json::Result<RefMap> {
    Ok(refs_and_snapshots_of(metadata_json)?.0)
}

/// [`refs_of`], and the JSON of each of the metadata's snapshots as it stands in the file, in
/// the file's order: one pass over the bytes for both.
pub(crate) fn refs_and_snapshots_of(
    metadata_json: &[u8],
) -> serde_json::Result<(RefMap, Vec<&serde_json::value::RawValue>)> {
    #[derive(serde::Deserialize)]
    struct Refs<'a> {
        #[serde(default)]
        refs: BTreeMap<String, SnapshotReference>,
        #[serde(rename = "current-snapshot-id", default)]
        current_snapshot_id: Option<i64>,
        #[serde(borrow, default)]
        snapshots: Vec<&'a serde_json::value::RawValue>,
    }
    let parsed: Refs = serde_json::from_slice(metadata_json)?;
    let mut out = RefMap::new();
    for (name, r) in parsed.refs {
        out.insert_ref(&name, r);
    }
    if let Some(id) = parsed.current_snapshot_id.filter(|id| *id != -1) {
        out.entry(MAIN_BRANCH.to_string()).or_insert((true, id));
    }
    Ok((out, parsed.snapshots))
}

/// What a change does to one table in a catalog commit.
#[derive(Clone, Debug)]
pub(crate) enum ChangeKind {
    /// Point the table at new metadata (written by the commit).
    Update(Box<TableMetadata>),
    /// Remove the table from the catalog (its files stay until purged).
    Drop,
    /// Register an existing metadata file under this name.
    Register(String),
}

/// A change to one table, staged and not yet committed.
#[derive(Clone, Debug)]
pub struct TableChange {
    pub(crate) table: TableName,
    /// The metadata location the writer started from; `None` for a table that must not exist.
    pub(crate) base: Option<String>,
    pub(crate) kind: ChangeKind,
    /// The snapshot this change adds, if any.
    pub(crate) snapshot_id: Option<i64>,
    /// Data files the new snapshot adds: checked to exist before the catalog names them.
    pub(crate) added_files: Vec<String>,
    /// The refs the new metadata has, when the writer knows them (saves reading them back
    /// through the serialised metadata; checked against it in debug builds).
    pub(crate) refs: Option<Arc<RefMap>>,
}

impl TableChange {
    /// The table this change is for.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The snapshot this change adds, if it adds one.
    pub fn snapshot_id(&self) -> Option<i64> {
        self.snapshot_id
    }

    /// The new metadata this change would install, if it installs one.
    pub fn metadata(&self) -> Option<&TableMetadata> {
        match &self.kind {
            ChangeKind::Update(m) => Some(m),
            _ => None,
        }
    }
}

/// What a catalog commit did.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The catalog version it created.
    pub version: u64,
    /// Each changed table's new metadata location (`None` for dropped tables).
    pub tables: BTreeMap<String, Option<String>>,
    /// Each changed table's new snapshot, where the change added one.
    pub snapshots: BTreeMap<String, i64>,
    /// Each updated table's new metadata: a writer continues from its own commit without
    /// reading it back ([`crate::Catalog::table_after`]).
    pub(crate) metadata: BTreeMap<String, (Arc<TableMetadata>, Option<Arc<RefMap>>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warehouse_folders_of_other_writers_are_no_namespace() {
        for name in [
            "landing.orders",
            "truth.summary",
            "Landing.orders",
            "TRUTH.x",
        ] {
            let err = TableName::parse(name).expect_err(name);
            let LakeError::ReservedNamespace {
                name: n, namespace, ..
            } = &err
            else {
                panic!("{name}: {err:?}");
            };
            assert_eq!(n, name);
            assert_eq!(Some(namespace.as_str()), name.split('.').next());
            let msg = err.to_string();
            assert!(msg.contains(&format!("{namespace:?} is reserved")), "{msg}");
            assert!(msg.contains("<warehouse>/"), "{msg}");
        }
        assert!(
            TableName::parse("landing.orders")
                .expect_err("reserved")
                .to_string()
                .contains("landing zone")
        );
        // Only the namespace is reserved, and only exactly.
        for ok in [
            "bronze.landing_files",
            "bronze.truth",
            "landings.x",
            "truth_x.y",
        ] {
            assert!(TableName::parse(ok).is_ok(), "{ok}");
        }
    }

    #[tokio::test]
    async fn no_table_is_created_in_the_landing_zone() {
        let c = crate::Catalog::in_memory();
        let schema = arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "id",
            arrow_schema::DataType::Int64,
            false,
        )]);
        for name in ["landing.orders", "truth.summary"] {
            let err = c
                .create_table(name, &schema, &[])
                .await
                .expect_err("a reserved namespace");
            assert!(
                matches!(err, LakeError::ReservedNamespace { .. }),
                "{name}: {err:?}"
            );
        }
        assert_eq!(
            c.latest_version_number().await.expect("version"),
            0,
            "nothing committed"
        );
        c.create_table("bronze.orders", &schema, &[])
            .await
            .expect("any other namespace");
    }
}
