//! The REST envelope types. What they carry — table metadata, schemas, partition specs, sort
//! orders, requirements, updates, identifiers — are iceberg-rust's own serde types.

use std::collections::HashMap;

use iceberg::spec::{Schema, SortOrder, TableMetadata, UnboundPartitionSpec};
use iceberg::{NamespaceIdent, TableIdent, TableRequirement, TableUpdate};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize)]
pub struct ConfigResponse {
    pub defaults: HashMap<String, String>,
    pub overrides: HashMap<String, String>,
    pub endpoints: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct ListNamespacesResponse {
    pub namespaces: Vec<NamespaceIdent>,
}

#[derive(Debug, Deserialize)]
pub struct CreateNamespaceRequest {
    pub namespace: NamespaceIdent,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct NamespaceResponse {
    pub namespace: NamespaceIdent,
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct UpdateNamespacePropertiesRequest {
    #[serde(default)]
    pub removals: Vec<String>,
    #[serde(default)]
    pub updates: HashMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct UpdateNamespacePropertiesResponse {
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ListTablesResponse {
    pub identifiers: Vec<TableIdent>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateTableRequest {
    pub name: String,
    pub location: Option<String>,
    pub schema: Schema,
    pub partition_spec: Option<UnboundPartitionSpec>,
    pub write_order: Option<SortOrder>,
    #[serde(default)]
    pub stage_create: bool,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LoadTableResult {
    /// `None` for a table staged and not created yet (stage-create).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_location: Option<String>,
    pub metadata: TableMetadata,
    pub config: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RegisterTableRequest {
    pub name: String,
    pub metadata_location: String,
    #[serde(default)]
    pub overwrite: bool,
}

#[derive(Debug, Deserialize)]
pub struct RenameTableRequest {
    pub source: TableIdent,
    pub destination: TableIdent,
}

#[derive(Debug, Deserialize)]
pub struct CommitTableRequest {
    pub identifier: Option<TableIdent>,
    #[serde(default)]
    pub requirements: Vec<TableRequirement>,
    #[serde(default)]
    pub updates: Vec<TableUpdate>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitTableResponse {
    pub metadata_location: String,
    pub metadata: TableMetadata,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitTransactionRequest {
    pub table_changes: Vec<CommitTableRequest>,
}
