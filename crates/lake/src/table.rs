//! A table as of one catalog version: its snapshots, refs and ancestry, and staged ref changes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use iceberg::spec::{
    FormatVersion, MAIN_BRANCH, SnapshotReference, TableMetadata, TableMetadataBuilder,
};
use iceberg::table::Table as IcebergTable;
use serde::Serialize;

use crate::catalog::{Catalog, ChangeKind, TableChange};
use crate::error::{LakeError, Result};
use crate::types::default_retention;
pub(crate) use crate::types::{RefMap, TableName, ref_map};

/// Which state of a table to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum At {
    /// The `main` branch: what readers see.
    Main,
    /// A branch or tag by name.
    Ref(String),
    /// One snapshot by id.
    Snapshot(i64),
}

impl At {
    /// A branch or tag by name (`main` is [`At::Main`]).
    pub fn reference(name: &str) -> At {
        if name == MAIN_BRANCH {
            At::Main
        } else {
            At::Ref(name.to_string())
        }
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Main => write!(f, "branch main"),
            At::Ref(r) => write!(f, "ref {r}"),
            At::Snapshot(s) => write!(f, "snapshot {s}"),
        }
    }
}

/// A snapshot, as people and tools want to see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    pub snapshot_id: i64,
    pub parent_id: Option<i64>,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub operation: String,
    pub summary: BTreeMap<String, String>,
    pub manifest_list: String,
}

/// A branch or tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefInfo {
    pub name: String,
    /// `branch` or `tag`.
    pub kind: &'static str,
    pub snapshot_id: i64,
}

/// A change to a table's refs, staged with [`Table::stage_refs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefOp {
    /// Create a branch at a snapshot (refused if the name exists).
    CreateBranch { name: String, snapshot_id: i64 },
    /// Create a tag at a snapshot (refused if the name exists).
    CreateTag { name: String, snapshot_id: i64 },
    /// Move `branch` forward to `to`; refused unless the branch head is an ancestor of `to`.
    /// A branch that does not exist yet is created at `to`.
    FastForward { branch: String, to: i64 },
    /// Point `branch` at any snapshot (a rollback); creates it if missing.
    Reset { branch: String, to: i64 },
    /// Remove a branch or tag (`main` cannot be removed).
    Remove { name: String },
    /// Point `branch` at no snapshot: `main` then reads as the empty table it was before its
    /// first snapshot (a rollback to before the table was written); another branch is removed,
    /// as it would be if it had never been created. Nothing when the branch is not there.
    Empty { branch: String },
}

/// A table as of one catalog version.
#[derive(Clone)]
pub struct Table {
    catalog: Catalog,
    name: TableName,
    inner: IcebergTable,
    version: u64,
    /// Ref name -> (is a branch, snapshot id), with the refs' retention settings. iceberg-rust
    /// keeps its ref map private.
    refs: Arc<RefMap>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name.to_string())
            .field("metadata", &self.metadata_location())
            .field("catalog_version", &self.version)
            .finish()
    }
}

impl Table {
    pub(crate) fn new(
        catalog: Catalog,
        name: TableName,
        inner: IcebergTable,
        version: u64,
        refs: Option<Arc<RefMap>>,
    ) -> Table {
        // Serialising the metadata to read its refs costs more than the rest of loading it:
        // writers pass the refs they just set. Debug builds check they agree.
        let refs = match refs {
            Some(r) => {
                debug_assert_eq!(*r, ref_map(inner.metadata()), "refs passed for {name}");
                r
            }
            None => Arc::new(ref_map(inner.metadata())),
        };
        Table {
            catalog,
            name,
            inner,
            version,
            refs,
        }
    }

    /// Ref name -> (is a branch, snapshot id).
    pub(crate) fn ref_entries(&self) -> &RefMap {
        &self.refs
    }

    /// `namespace.table`.
    pub fn name(&self) -> &TableName {
        &self.name
    }

    /// The catalog this table was loaded from.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The catalog version this handle was read at.
    pub fn catalog_version(&self) -> u64 {
        self.version
    }

    /// The Iceberg table (for iceberg-rust and iceberg-datafusion).
    pub fn iceberg(&self) -> &IcebergTable {
        &self.inner
    }

    /// The Iceberg metadata.
    pub fn metadata(&self) -> &TableMetadata {
        self.inner.metadata()
    }

    /// The metadata file this handle reads.
    pub fn metadata_location(&self) -> &str {
        self.inner.metadata_location().unwrap_or_default()
    }

    /// The table's location (`<warehouse>/<namespace>/<table>`).
    pub fn location(&self) -> &str {
        self.metadata().location()
    }

    /// The current schema as Arrow, with Iceberg field ids in the field metadata.
    pub fn arrow_schema(&self) -> Result<SchemaRef> {
        let s = iceberg::arrow::schema_to_arrow_schema(self.metadata().current_schema())
            .map_err(|e| LakeError::iceberg(format!("schema of {}", self.name), e))?;
        Ok(Arc::new(s))
    }

    /// Refuse writes and ref changes to a table that is not Iceberg format v2 (the writer builds
    /// v2 manifests and snapshots, which a v1 or v3 table must not be given), or that lives
    /// outside the catalog's warehouse ([`LakeError::OutsideWarehouse`]). Reads stay allowed.
    pub(crate) fn check_writable(&self) -> Result<()> {
        self.catalog()
            .check_inside_warehouse(&self.name.to_string(), self.location())?;
        let found = self.metadata().format_version();
        if found != FormatVersion::V2 {
            return Err(LakeError::UnsupportedTableFormat {
                table: self.name.to_string(),
                location: self.metadata_location().to_string(),
                found: found as u8,
            });
        }
        Ok(())
    }

    /// The snapshot a ref points at, if the ref exists.
    pub fn head(&self, ref_name: &str) -> Option<i64> {
        self.refs.get(ref_name).map(|r| r.1)
    }

    /// True when `name` is a branch (not a tag).
    pub fn is_branch(&self, name: &str) -> bool {
        self.refs.get(name).map(|r| r.0).unwrap_or(false)
    }

    /// The snapshot `at` names. `Ok(None)` for `main` on a table never published (it reads empty).
    pub fn resolve(&self, at: &At) -> Result<Option<i64>> {
        match at {
            At::Main => Ok(self.head(MAIN_BRANCH)),
            At::Ref(r) => match self.head(r) {
                Some(s) => Ok(Some(s)),
                None => Err(LakeError::NoSuchRef {
                    table: self.name.to_string(),
                    kind: "branch or tag",
                    name: r.clone(),
                }),
            },
            At::Snapshot(s) => {
                self.snapshot(*s)?;
                Ok(Some(*s))
            }
        }
    }

    /// One snapshot.
    pub fn snapshot(&self, id: i64) -> Result<SnapshotInfo> {
        Ok(info(self.snapshot_ref(id)?))
    }

    /// One snapshot, as iceberg holds it.
    pub(crate) fn snapshot_ref(&self, id: i64) -> Result<&iceberg::spec::SnapshotRef> {
        self.metadata()
            .snapshot_by_id(id)
            .ok_or_else(|| LakeError::NoSuchSnapshot {
                table: self.name.to_string(),
                snapshot_id: id,
            })
    }

    /// Every snapshot the metadata still holds, oldest first (by sequence number).
    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        let mut v: Vec<_> = self.metadata().snapshots().map(|s| info(s)).collect();
        v.sort_by_key(|s| (s.sequence_number, s.timestamp_ms));
        v
    }

    /// Every branch and tag, `main` first, then by name.
    pub fn refs(&self) -> Vec<RefInfo> {
        let mut v: Vec<_> = self
            .refs
            .iter()
            .map(|(n, r)| RefInfo {
                name: n.clone(),
                kind: if r.0 { "branch" } else { "tag" },
                snapshot_id: r.1,
            })
            .collect();
        v.sort_by(|a, b| (a.name != MAIN_BRANCH, &a.name).cmp(&(b.name != MAIN_BRANCH, &b.name)));
        v
    }

    /// `from` and its ancestors, newest first, as far as the metadata still holds them.
    pub fn ancestry(&self, from: i64) -> Result<Vec<SnapshotInfo>> {
        Ok(self.ancestors(from)?.map(|s| info(s)).collect())
    }

    /// [`Table::ancestry`] walked lazily, as iceberg holds the snapshots: a caller that stops
    /// early (at a watermark) pays only for the snapshots it looked at.
    pub(crate) fn ancestors(
        &self,
        from: i64,
    ) -> Result<impl Iterator<Item = &iceberg::spec::SnapshotRef>> {
        let first = self.snapshot_ref(from)?;
        let mut seen = HashSet::from([from]);
        Ok(std::iter::successors(Some(first), move |s| {
            let p = s.parent_snapshot_id()?;
            if !seen.insert(p) {
                return None;
            }
            // An expired parent ends the ancestry.
            self.metadata().snapshot_by_id(p)
        }))
    }

    /// True when `ancestor` is `of` or one of its ancestors.
    pub fn is_ancestor(&self, ancestor: i64, of: i64) -> bool {
        let mut cur = Some(of);
        let mut steps = 0usize;
        while let Some(id) = cur {
            if id == ancestor {
                return true;
            }
            steps += 1;
            if steps > 10_000_000 {
                return false;
            }
            cur = self
                .metadata()
                .snapshot_by_id(id)
                .and_then(|s| s.parent_snapshot_id());
        }
        false
    }

    /// Stage `properties` onto this table (each set to its value; others kept), or `None`
    /// when the table already holds every one. Only the metadata changes: data files already
    /// written keep the layout they were written with; files written from then on follow it.
    pub fn stage_set_properties(
        &self,
        properties: &BTreeMap<String, String>,
    ) -> Result<Option<TableChange>> {
        let current = self.metadata();
        let missing: HashMap<String, String> = properties
            .iter()
            .filter(|(k, v)| current.properties().get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        let metadata = current
            .clone()
            .into_builder(Some(self.metadata_location().to_string()))
            .set_properties(missing)
            .and_then(|b| b.build())
            .map_err(|e| LakeError::iceberg(format!("setting properties of {}", self.name), e))?
            .metadata;
        self.stage_metadata(metadata).map(Some)
    }

    /// Stage new metadata for this table, built by the caller from this handle's metadata (a
    /// REST commit's updates applied with iceberg's own builders, say), as a change for
    /// [`Catalog::commit`]. Like every change it lands only while the table is still at the
    /// metadata this handle read: a writer that moved it first makes the commit a
    /// [`LakeError::Conflict`]. The metadata must keep the table's location and uuid.
    pub fn stage_metadata(&self, metadata: TableMetadata) -> Result<TableChange> {
        let current = self.metadata();
        if metadata.uuid() != current.uuid() || metadata.location() != current.location() {
            return Err(LakeError::Other(format!(
                "new metadata for {} must keep its uuid {} and location {}",
                self.name,
                current.uuid(),
                current.location()
            )));
        }
        let snapshot_id = metadata
            .current_snapshot_id()
            .filter(|id| current.snapshot_by_id(*id).is_none());
        Ok(TableChange {
            table: self.name.clone(),
            base: Some(self.metadata_location().to_string()),
            kind: ChangeKind::Update(Box::new(metadata)),
            snapshot_id,
            added_files: Vec::new(),
            refs: None,
        })
    }

    /// Stage ref changes (branch, tag, fast-forward, reset, remove) without committing.
    pub fn stage_refs(&self, ops: &[RefOp]) -> Result<TableChange> {
        self.check_writable()?;
        let table = self.name.to_string();
        let md = self.metadata();
        let mut b: TableMetadataBuilder = md
            .clone()
            .into_builder(Some(self.metadata_location().to_string()));
        // Track refs as the ops apply, so a later op sees an earlier one.
        let mut refs: RefMap = (*self.refs).clone();
        let need = |id: i64| -> Result<()> {
            if md.snapshot_by_id(id).is_none() {
                return Err(LakeError::NoSuchSnapshot {
                    table: table.clone(),
                    snapshot_id: id,
                });
            }
            Ok(())
        };
        // A moved branch keeps its retention settings (min-snapshots-to-keep, max-snapshot-age-ms,
        // max-ref-age-ms); a created one gets the defaults. The settings travel with the refs.
        for op in ops {
            b = match op {
                RefOp::CreateBranch { name, snapshot_id }
                | RefOp::CreateTag { name, snapshot_id } => {
                    need(*snapshot_id)?;
                    if refs.contains_key(name) {
                        return Err(LakeError::RefExists {
                            table: table.clone(),
                            name: name.clone(),
                        });
                    }
                    let is_branch = matches!(op, RefOp::CreateBranch { .. });
                    let r = SnapshotReference::new(*snapshot_id, default_retention(is_branch));
                    refs.insert_ref(name, r.clone());
                    b.set_ref(name, r).map_err(|e| {
                        LakeError::iceberg(format!("creating ref {name} of {table}"), e)
                    })?
                }
                RefOp::FastForward { branch, to } => {
                    need(*to)?;
                    match refs.get(branch) {
                        Some((false, _)) => {
                            return Err(LakeError::NoSuchRef {
                                table: table.clone(),
                                kind: "branch",
                                name: branch.clone(),
                            });
                        }
                        Some((true, from)) if !self.is_ancestor(*from, *to) => {
                            return Err(LakeError::NotFastForward {
                                table: table.clone(),
                                branch: branch.clone(),
                                from: *from,
                                to: *to,
                            });
                        }
                        _ => {}
                    }
                    refs.insert(branch.clone(), (true, *to));
                    b.set_ref(branch, refs.reference(branch, true, *to))
                        .map_err(|e| LakeError::iceberg(format!("moving {branch} of {table}"), e))?
                }
                RefOp::Reset { branch, to } => {
                    need(*to)?;
                    if let Some((false, _)) = refs.get(branch) {
                        return Err(LakeError::NoSuchRef {
                            table: table.clone(),
                            kind: "branch",
                            name: branch.clone(),
                        });
                    }
                    refs.insert(branch.clone(), (true, *to));
                    b.set_ref(branch, refs.reference(branch, true, *to))
                        .map_err(|e| {
                            LakeError::iceberg(format!("resetting {branch} of {table}"), e)
                        })?
                }
                RefOp::Remove { name } => {
                    if name == MAIN_BRANCH {
                        return Err(LakeError::CannotRemoveMain {
                            table: table.clone(),
                        });
                    }
                    if refs.remove(name).is_none() {
                        return Err(LakeError::NoSuchRef {
                            table: table.clone(),
                            kind: "branch or tag",
                            name: name.clone(),
                        });
                    }
                    b.remove_ref(name)
                }
                RefOp::Empty { branch } => match refs.get(branch) {
                    Some((false, _)) => {
                        return Err(LakeError::NoSuchRef {
                            table: table.clone(),
                            kind: "branch",
                            name: branch.clone(),
                        });
                    }
                    Some((true, _)) => {
                        refs.remove(branch);
                        b.remove_ref(branch)
                    }
                    None => b,
                },
            };
        }
        let built = b
            .build()
            .map_err(|e| LakeError::iceberg(format!("updating refs of {table}"), e))?;
        Ok(TableChange {
            table: self.name.clone(),
            base: Some(self.metadata_location().to_string()),
            kind: ChangeKind::Update(Box::new(built.metadata)),
            snapshot_id: None,
            added_files: Vec::new(),
            refs: Some(Arc::new(refs)),
        })
    }
}

pub(crate) fn info(s: &iceberg::spec::Snapshot) -> SnapshotInfo {
    let summary = s.summary();
    SnapshotInfo {
        snapshot_id: s.snapshot_id(),
        parent_id: s.parent_snapshot_id(),
        sequence_number: s.sequence_number(),
        timestamp_ms: s.timestamp_ms(),
        operation: summary.operation.as_str().to_string(),
        summary: summary
            .additional_properties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        manifest_list: s.manifest_list().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_namespace_dot_table() {
        let n = TableName::parse("bronze.payments").unwrap();
        assert_eq!(
            (n.namespace.as_str(), n.table.as_str()),
            ("bronze", "payments")
        );
        assert_eq!(n.to_string(), "bronze.payments");
        for bad in [
            "payments", "bronze.", ".x", "a.b.c", "a-b.c", "1a.b", "a.b c",
        ] {
            assert!(
                matches!(TableName::parse(bad), Err(LakeError::InvalidName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn main_is_its_own_at() {
        assert_eq!(At::reference("main"), At::Main);
        assert_eq!(At::reference("audit"), At::Ref("audit".into()));
    }
}
