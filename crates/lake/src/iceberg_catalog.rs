//! The file catalog as an `iceberg::Catalog`, so iceberg-rust tooling (iceberg-datafusion's
//! catalog provider, transactions) works on it unchanged. Namespaces are one level deep.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use iceberg::spec::TableMetadataBuilder;
use iceberg::table::Table as IcebergTable;
use iceberg::{ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent};

use crate::catalog::{Catalog, ChangeKind, TableChange};
use crate::error::LakeError;
use crate::types::TableName;

fn to_ice(e: LakeError) -> iceberg::Error {
    let kind = match &e {
        LakeError::NoSuchTable { .. } => ErrorKind::TableNotFound,
        LakeError::TableExists(_) => ErrorKind::TableAlreadyExists,
        LakeError::NoSuchNamespace(_) => ErrorKind::NamespaceNotFound,
        LakeError::Conflict { .. } | LakeError::TooManyRetries { .. } => {
            ErrorKind::CatalogCommitConflicts
        }
        LakeError::InvalidName { .. } => ErrorKind::DataInvalid,
        _ => ErrorKind::Unexpected,
    };
    iceberg::Error::new(kind, e.to_string())
}

fn ns_name(ns: &NamespaceIdent) -> iceberg::Result<String> {
    match ns.as_ref().as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(iceberg::Error::new(
            ErrorKind::FeatureUnsupported,
            format!("namespace {ns:?}: the file catalog has one-level namespaces"),
        )),
    }
}

fn table_name(t: &TableIdent) -> iceberg::Result<TableName> {
    TableName::parse(&format!("{}.{}", ns_name(t.namespace())?, t.name())).map_err(to_ice)
}

/// Commit one table's change as a catalog version of its own (`operation`, with the message
/// "`verb` `name`") and return the table as that version holds it. `failed` maps the commit's
/// error (creating a table turns a conflict into "it exists").
async fn commit_one(
    catalog: &Catalog,
    name: TableName,
    base: Option<String>,
    kind: ChangeKind,
    (operation, verb): (&str, &str),
    failed: impl FnOnce(LakeError) -> iceberg::Error,
) -> iceberg::Result<IcebergTable> {
    let message = format!("{verb} {name}");
    let change = TableChange {
        table: name.clone(),
        base,
        kind,
        snapshot_id: None,
        added_files: Vec::new(),
        refs: None,
    };
    let committed = catalog
        .commit(vec![change], operation, &message, BTreeMap::new())
        .await
        .map_err(failed)?;
    let t = catalog
        .table_at_version(&name.to_string(), committed.version)
        .await
        .map_err(to_ice)?;
    Ok(t.iceberg().clone())
}

#[async_trait]
impl iceberg::Catalog for Catalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        if parent.is_some() {
            return Ok(Vec::new());
        }
        let head = self.head().await.map_err(to_ice)?;
        Ok(head
            .namespaces
            .keys()
            .map(|n| NamespaceIdent::new(n.clone()))
            .collect())
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        let ns = ns_name(namespace)?;
        let head = self.head().await.map_err(to_ice)?;
        if head.namespaces.contains_key(&ns) {
            return Err(iceberg::Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("namespace {ns} already exists"),
            ));
        }
        self.set_namespace(&ns, properties.clone().into_iter().collect())
            .await
            .map_err(to_ice)?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        let ns = ns_name(namespace)?;
        let head = self.head().await.map_err(to_ice)?;
        let props = head
            .namespaces
            .get(&ns)
            .ok_or_else(|| to_ice(LakeError::NoSuchNamespace(ns.clone())))?;
        Ok(Namespace::with_properties(
            namespace.clone(),
            props.clone().into_iter().collect(),
        ))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        let ns = ns_name(namespace)?;
        Ok(self
            .head()
            .await
            .map_err(to_ice)?
            .namespaces
            .contains_key(&ns))
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        let ns = ns_name(namespace)?;
        if !self.namespace_exists(namespace).await? {
            return Err(to_ice(LakeError::NoSuchNamespace(ns)));
        }
        self.set_namespace(&ns, properties.into_iter().collect())
            .await
            .map(|_| ())
            .map_err(to_ice)
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        let ns = ns_name(namespace)?;
        Catalog::drop_namespace(self, &ns)
            .await
            .map(|_| ())
            .map_err(to_ice)
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        let ns = ns_name(namespace)?;
        let head = self.head().await.map_err(to_ice)?;
        if !head.namespaces.contains_key(&ns) {
            return Err(to_ice(LakeError::NoSuchNamespace(ns)));
        }
        Ok(head
            .tables
            .keys()
            .filter_map(|k| TableName::parse(k).ok())
            .filter(|t| t.namespace == ns)
            .map(|t| TableIdent::new(namespace.clone(), t.table))
            .collect())
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<IcebergTable> {
        let ns = ns_name(namespace)?;
        if !self.namespace_exists(namespace).await? {
            return Err(to_ice(LakeError::NoSuchNamespace(ns)));
        }
        let name = TableName::parse(&format!("{ns}.{}", creation.name)).map_err(to_ice)?;
        let mut creation = creation;
        if creation.location.is_none() {
            creation.location = Some(self.default_table_location(&name));
        }
        let md = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let exists = name.to_string();
        commit_one(
            self,
            name,
            None,
            ChangeKind::Update(Box::new(md)),
            ("create-table", "create"),
            |e| match e {
                LakeError::Conflict { .. } => to_ice(LakeError::TableExists(exists)),
                e => to_ice(e),
            },
        )
        .await
    }

    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<IcebergTable> {
        let name = table_name(table)?;
        let t = self.table(&name.to_string()).await.map_err(to_ice)?;
        Ok(t.iceberg().clone())
    }

    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        let name = table_name(table)?;
        Catalog::drop_table(self, &name.to_string())
            .await
            .map(|_| ())
            .map_err(to_ice)
    }

    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        let name = table_name(table)?;
        let name = name.to_string();
        let head = self.head().await.map_err(to_ice)?;
        let t = self.table_in(&head, &name).await.map_err(to_ice)?;
        let location = t.location().trim_end_matches('/').to_string();
        // Deleting a folder deletes whatever is in it: refuse when another table's metadata or
        // folder is in it (a second name registered on the same metadata, a location chosen
        // around other tables), or the season's raw files are. Dropping is still possible.
        let inside = |other: &str| other == location || other.starts_with(&format!("{location}/"));
        let refuse = |what: String| {
            Err(iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!(
                    "not purging {name}: its location {location} also holds {what}; drop it without purging instead"
                ),
            ))
        };
        let warehouse = self.warehouse_url().trim_end_matches('/');
        for raw in crate::maintenance::NEVER_SWEPT {
            let raw = format!("{warehouse}/{raw}");
            if inside(&raw) {
                return refuse(format!("the season's raw files ({raw})"));
            }
        }
        for (other, entry) in &head.tables {
            if *other == name {
                continue;
            }
            if inside(&entry.metadata_location) {
                return refuse(format!("table {other}'s metadata"));
            }
            let o = self.table_in(&head, other).await.map_err(to_ice)?;
            if inside(o.location().trim_end_matches('/')) {
                return refuse(format!("table {other}'s folder"));
            }
        }
        Catalog::drop_table(self, &name).await.map_err(to_ice)?;
        self.file_io().delete_prefix(&location).await
    }

    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        let name = table_name(table)?;
        Ok(self
            .head()
            .await
            .map_err(to_ice)?
            .tables
            .contains_key(&name.to_string()))
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        let from = table_name(src)?;
        let to = table_name(dest)?;
        let t = self.table(&from.to_string()).await.map_err(to_ice)?;
        let changes = vec![
            TableChange {
                table: from.clone(),
                base: Some(t.metadata_location().to_string()),
                kind: ChangeKind::Drop,
                snapshot_id: None,
                added_files: Vec::new(),
                refs: None,
            },
            TableChange {
                table: to.clone(),
                base: None,
                kind: ChangeKind::Register(t.metadata_location().to_string()),
                snapshot_id: None,
                added_files: Vec::new(),
                refs: None,
            },
        ];
        self.commit(
            changes,
            "rename-table",
            &format!("rename {from} to {to}"),
            BTreeMap::new(),
        )
        .await
        .map(|_| ())
        .map_err(to_ice)
    }

    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<IcebergTable> {
        let name = table_name(table)?;
        // Refuse a location that is not readable Iceberg metadata: never name a missing file.
        self.read_metadata(&name, &metadata_location)
            .await
            .map_err(to_ice)?;
        commit_one(
            self,
            name,
            None,
            ChangeKind::Register(metadata_location),
            ("register-table", "register"),
            to_ice,
        )
        .await
    }

    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<IcebergTable> {
        let name = table_name(commit.identifier())?;
        let current = self.table(&name.to_string()).await.map_err(to_ice)?;
        let base = current.metadata_location().to_string();
        let staged = commit.apply(current.iceberg().clone())?;
        commit_one(
            self,
            name,
            Some(base),
            ChangeKind::Update(Box::new(staged.metadata().clone())),
            ("update-table", "update"),
            to_ice,
        )
        .await
    }
}
