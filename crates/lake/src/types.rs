//! The values a commit takes and gives back: staged changes and what a commit did.
//!
//! A leaf module: the catalog, the writers and maintenance all use these, and they use nothing
//! of those.

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::TableMetadata;

use crate::table::{RefMap, TableName};

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
