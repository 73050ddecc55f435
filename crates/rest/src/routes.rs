//! The REST catalog routes (Iceberg REST OpenAPI v1), each answered from the file catalog.
//!
//! Namespaces are one level deep, as the file catalog's are: a multi-level namespace (parts
//! joined by `%1F` in a path) is refused with 400.
//!
//! A table commit is the body parsed into iceberg's `TableRequirement`/`TableUpdate`, the
//! requirements checked against the table's current metadata (409 on failure), the updates
//! applied with iceberg's `TableMetadataBuilder` (400 when they do not apply), new locations kept
//! in the warehouse, and the new metadata staged with `lake::Table::stage_metadata` and committed
//! by the file catalog: it lands only if the table has not moved since it was read (409 else).
//! A transaction stages every table's change and commits them as one catalog version.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use iceberg::spec::{
    FormatVersion, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{NamespaceIdent, TableCreation, TableIdent, TableRequirement, TableUpdate};
use lake::{CatalogVersion, TableName};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::error::RestError;
use crate::model::*;

type Answer<T> = std::result::Result<T, RestError>;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/config", get(config))
        .route(
            "/v1/namespaces",
            get(list_namespaces).post(create_namespace),
        )
        .route(
            "/v1/namespaces/{ns}",
            get(load_namespace)
                .head(namespace_exists)
                .delete(drop_namespace),
        )
        .route("/v1/namespaces/{ns}/properties", post(update_namespace))
        .route(
            "/v1/namespaces/{ns}/tables",
            get(list_tables).post(create_table),
        )
        .route("/v1/namespaces/{ns}/register", post(register_table))
        .route(
            "/v1/namespaces/{ns}/tables/{table}",
            get(load_table)
                .head(table_exists)
                .delete(drop_table)
                .post(commit_table),
        )
        .route("/v1/tables/rename", post(rename_table))
        .route("/v1/transactions/commit", post(commit_transaction))
        .fallback(|| async {
            RestError::new(StatusCode::NOT_FOUND, "NotFoundException", "no such route")
        })
}

/// A JSON request body: too large is 413, malformed or not the expected shape is 400, both in
/// the error model.
pub(crate) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &S) -> Answer<Self> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                RestError::new(status, "BadRequestException", "request body too large")
            } else {
                RestError::bad_request(r.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| RestError::bad_request(format!("malformed request body: {e}")))
    }
}

fn json<T: Serialize>(value: T) -> Response {
    axum::Json(value).into_response()
}

fn path<T>(p: std::result::Result<Path<T>, PathRejection>) -> Answer<T> {
    p.map(|Path(t)| t)
        .map_err(|r| RestError::bad_request(r.body_text()))
}

fn query(
    q: std::result::Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Answer<HashMap<String, String>> {
    q.map(|Query(q)| q)
        .map_err(|r| RestError::bad_request(r.body_text()))
}

/// A one-level namespace name from a path segment.
fn namespace(raw: &str) -> Answer<String> {
    if raw.contains('\u{1f}') {
        return Err(RestError::bad_request(format!(
            "namespace {raw:?}: the file catalog has one-level namespaces"
        )));
    }
    TableName::parse(&format!("{raw}.t"))
        .map(|t| t.namespace)
        .map_err(|_| {
            RestError::bad_request(format!(
                "namespace {raw:?} must be letters, digits and _ (not starting with a digit)"
            ))
        })
}

fn namespace_of(ident: &NamespaceIdent) -> Answer<String> {
    match ident.as_ref().as_slice() {
        [one] => namespace(one),
        _ => Err(RestError::bad_request(format!(
            "namespace {:?}: the file catalog has one-level namespaces",
            ident.as_ref()
        ))),
    }
}

fn table_name(ns: &str, table: &str) -> Answer<TableName> {
    TableName::parse(&format!("{ns}.{table}")).map_err(RestError::from)
}

fn ident_name(ident: &TableIdent) -> Answer<TableName> {
    table_name(&namespace_of(ident.namespace())?, ident.name())
}

fn ident(name: &TableName) -> TableIdent {
    TableIdent::new(
        NamespaceIdent::new(name.namespace.clone()),
        name.table.clone(),
    )
}

async fn head(state: &AppState) -> Answer<CatalogVersion> {
    Ok(state.catalog.head().await?)
}

fn require_namespace(head: &CatalogVersion, ns: &str) -> Answer<()> {
    if head.namespaces.contains_key(ns) {
        Ok(())
    } else {
        Err(RestError::no_namespace(ns))
    }
}

/// A location a client gave, as the catalog writes locations: `file:///…` for local paths.
fn normalize_location(location: &str) -> String {
    if location.starts_with('/') {
        format!("file://{location}")
    } else if let Some(rest) = location.strip_prefix("file:/")
        && !rest.starts_with('/')
    {
        format!("file:///{rest}")
    } else {
        location.to_string()
    }
}

/// `location` normalized, when it is strictly inside the warehouse; else 400.
pub(crate) fn inside_warehouse(warehouse: &str, location: &str) -> Answer<String> {
    let loc = normalize_location(location);
    let refuse = |why: &str| {
        Err(RestError::bad_request(format!(
            "location {location:?} {why} (warehouse {warehouse})"
        )))
    };
    let lower = loc.to_ascii_lowercase();
    if loc.contains('\\')
        || lower.contains("%2e")
        || lower.contains("%2f")
        || loc.split('/').any(|s| s == "." || s == "..")
    {
        return refuse("has relative or encoded path segments");
    }
    let root = warehouse.trim_end_matches('/');
    match loc.strip_prefix(root) {
        Some(rest) if rest.starts_with('/') && !rest.trim_matches('/').is_empty() => Ok(loc),
        _ => refuse("is outside the warehouse"),
    }
}

fn load_result(location: &str, metadata: &TableMetadata) -> Response {
    json(LoadTableResult {
        metadata_location: (!location.is_empty()).then(|| location.to_string()),
        metadata: metadata.clone(),
        config: HashMap::new(),
    })
}

// ---- config ---------------------------------------------------------------------------------

async fn config() -> Response {
    json(ConfigResponse {
        defaults: HashMap::new(),
        overrides: HashMap::new(),
        endpoints: vec![
            "GET /v1/{prefix}/namespaces",
            "POST /v1/{prefix}/namespaces",
            "GET /v1/{prefix}/namespaces/{namespace}",
            "HEAD /v1/{prefix}/namespaces/{namespace}",
            "DELETE /v1/{prefix}/namespaces/{namespace}",
            "POST /v1/{prefix}/namespaces/{namespace}/properties",
            "GET /v1/{prefix}/namespaces/{namespace}/tables",
            "POST /v1/{prefix}/namespaces/{namespace}/tables",
            "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "POST /v1/{prefix}/namespaces/{namespace}/register",
            "POST /v1/{prefix}/tables/rename",
            "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "POST /v1/{prefix}/transactions/commit",
        ],
    })
}

// ---- namespaces -----------------------------------------------------------------------------

async fn list_namespaces(
    State(state): State<AppState>,
    q: std::result::Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Answer<Response> {
    let q = query(q)?;
    let head = head(&state).await?;
    if let Some(parent) = q.get("parent") {
        // One-level namespaces have no children.
        let parent = namespace(parent)?;
        require_namespace(&head, &parent)?;
        return Ok(json(ListNamespacesResponse {
            namespaces: Vec::new(),
        }));
    }
    Ok(json(ListNamespacesResponse {
        namespaces: head
            .namespaces
            .keys()
            .map(|n| NamespaceIdent::new(n.clone()))
            .collect(),
    }))
}

async fn create_namespace(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<CreateNamespaceRequest>,
) -> Answer<Response> {
    let ns = namespace_of(&req.namespace)?;
    let created = iceberg::Catalog::create_namespace(
        &state.catalog,
        &NamespaceIdent::new(ns),
        req.properties,
    )
    .await?;
    Ok(json(NamespaceResponse {
        namespace: created.name().clone(),
        properties: created.properties().clone(),
    }))
}

async fn load_namespace(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
) -> Answer<Response> {
    let ns = namespace(&path(p)?)?;
    let head = head(&state).await?;
    let props = head
        .namespaces
        .get(&ns)
        .ok_or_else(|| RestError::no_namespace(&ns))?;
    Ok(json(NamespaceResponse {
        namespace: NamespaceIdent::new(ns),
        properties: props.clone().into_iter().collect(),
    }))
}

async fn namespace_exists(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
) -> Answer<StatusCode> {
    let ns = namespace(&path(p)?)?;
    require_namespace(&head(&state).await?, &ns)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn drop_namespace(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
) -> Answer<StatusCode> {
    let ns = namespace(&path(p)?)?;
    state.catalog.drop_namespace(&ns).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn update_namespace(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
    JsonBody(req): JsonBody<UpdateNamespacePropertiesRequest>,
) -> Answer<Response> {
    let ns = namespace(&path(p)?)?;
    if let Some(both) = req.removals.iter().find(|k| req.updates.contains_key(*k)) {
        return Err(RestError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "UnprocessableEntityException",
            format!("property {both:?} is both removed and updated"),
        ));
    }
    let head = head(&state).await?;
    let mut props: BTreeMap<String, String> = head
        .namespaces
        .get(&ns)
        .ok_or_else(|| RestError::no_namespace(&ns))?
        .clone();
    let mut removed = Vec::new();
    let mut missing = Vec::new();
    for k in req.removals {
        if props.remove(&k).is_some() {
            removed.push(k);
        } else {
            missing.push(k);
        }
    }
    let mut updated: Vec<String> = req.updates.keys().cloned().collect();
    updated.sort();
    props.extend(req.updates);
    state.catalog.set_namespace(&ns, props).await?;
    Ok(json(UpdateNamespacePropertiesResponse {
        updated,
        removed,
        missing,
    }))
}

// ---- tables ---------------------------------------------------------------------------------

async fn list_tables(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
) -> Answer<Response> {
    let ns = namespace(&path(p)?)?;
    let mut identifiers =
        iceberg::Catalog::list_tables(&state.catalog, &NamespaceIdent::new(ns)).await?;
    identifiers.sort();
    Ok(json(ListTablesResponse { identifiers }))
}

async fn create_table(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
    JsonBody(req): JsonBody<CreateTableRequest>,
) -> Answer<Response> {
    let ns = namespace(&path(p)?)?;
    let name = table_name(&ns, &req.name)?;
    let location = req
        .location
        .as_deref()
        .map(|l| inside_warehouse(state.catalog.warehouse_url(), l))
        .transpose()?;
    let head = head(&state).await?;
    require_namespace(&head, &ns)?;
    if head.tables.contains_key(&name.to_string()) {
        return Err(RestError::exists(format!("table {name} already exists")));
    }
    let stage_only = req.stage_create;
    // `format-version` is a reserved property: clients (DuckDB, Spark) use it to ask for a
    // format version; the table gets that version, and the property is not stored.
    let mut properties = req.properties;
    let format_version = match properties.remove("format-version").as_deref() {
        None | Some("2") => FormatVersion::V2,
        Some("1") => FormatVersion::V1,
        Some("3") => FormatVersion::V3,
        Some(other) => {
            return Err(RestError::bad_request(format!(
                "format-version {other:?} is not a table format version (1, 2 or 3)"
            )));
        }
    };
    let creation = TableCreation::builder()
        .name(name.table.clone())
        .schema(req.schema)
        .location_opt(location)
        .partition_spec_opt(req.partition_spec)
        .sort_order_opt(req.write_order)
        .properties(properties)
        .format_version(format_version)
        .build();
    if stage_only {
        // Stage-create: the metadata the table would start with, nothing committed. The client
        // creates it with a commit that asserts it does not exist yet (a create transaction).
        let mut creation = creation;
        if creation.location.is_none() {
            creation.location = Some(state.catalog.default_table_location(&name));
        }
        let md = TableMetadataBuilder::from_table_creation(creation)
            .and_then(|b| b.build())
            .map_err(|e| RestError::from_commit(&e))?
            .metadata;
        return Ok(load_result("", &md));
    }
    let t =
        iceberg::Catalog::create_table(&state.catalog, &NamespaceIdent::new(ns), creation).await?;
    Ok(load_result(
        t.metadata_location().unwrap_or_default(),
        t.metadata(),
    ))
}

async fn load_table(
    State(state): State<AppState>,
    p: std::result::Result<Path<(String, String)>, PathRejection>,
) -> Answer<Response> {
    let (ns, table) = path(p)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let t = state.catalog.table(&name.to_string()).await?;
    Ok(load_result(t.metadata_location(), t.metadata()))
}

async fn table_exists(
    State(state): State<AppState>,
    p: std::result::Result<Path<(String, String)>, PathRejection>,
) -> Answer<StatusCode> {
    let (ns, table) = path(p)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    if head(&state).await?.tables.contains_key(&name.to_string()) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(RestError::no_table(&name.to_string()))
    }
}

async fn drop_table(
    State(state): State<AppState>,
    p: std::result::Result<Path<(String, String)>, PathRejection>,
    q: std::result::Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Answer<StatusCode> {
    let (ns, table) = path(p)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let purge = query(q)?
        .get("purgeRequested")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if purge {
        let t = state.catalog.table(&name.to_string()).await?;
        // Never delete files outside the warehouse, whatever the metadata says.
        inside_warehouse(state.catalog.warehouse_url(), t.location())?;
        iceberg::Catalog::purge_table(&state.catalog, &ident(&name)).await?;
    } else {
        state.catalog.drop_table(&name.to_string()).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn rename_table(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<RenameTableRequest>,
) -> Answer<StatusCode> {
    let from = ident_name(&req.source)?;
    let to = ident_name(&req.destination)?;
    let head = head(&state).await?;
    if !head.tables.contains_key(&from.to_string()) {
        return Err(RestError::no_table(&from.to_string()));
    }
    require_namespace(&head, &to.namespace)?;
    if head.tables.contains_key(&to.to_string()) {
        return Err(RestError::exists(format!("table {to} already exists")));
    }
    iceberg::Catalog::rename_table(&state.catalog, &ident(&from), &ident(&to)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn register_table(
    State(state): State<AppState>,
    p: std::result::Result<Path<String>, PathRejection>,
    JsonBody(req): JsonBody<RegisterTableRequest>,
) -> Answer<Response> {
    let ns = namespace(&path(p)?)?;
    let name = table_name(&ns, &req.name)?;
    if req.overwrite {
        return Err(RestError::unsupported(
            "register with overwrite is not supported",
        ));
    }
    let warehouse = state.catalog.warehouse_url();
    let location = inside_warehouse(warehouse, &req.metadata_location)?;
    let metadata = TableMetadata::read_from(state.catalog.file_io(), &location)
        .await
        .map_err(|e| {
            RestError::bad_request(format!(
                "cannot read Iceberg metadata at {location}: {}",
                e.message()
            ))
        })?;
    inside_warehouse(warehouse, metadata.location())?;
    let head = head(&state).await?;
    require_namespace(&head, &ns)?;
    if head.tables.contains_key(&name.to_string()) {
        return Err(RestError::exists(format!("table {name} already exists")));
    }
    let t = iceberg::Catalog::register_table(&state.catalog, &ident(&name), location).await?;
    Ok(load_result(
        t.metadata_location().unwrap_or_default(),
        t.metadata(),
    ))
}

// ---- commits --------------------------------------------------------------------------------

/// A table's commit, validated and applied to its current metadata; not yet committed.
struct Prepared {
    /// The table as the commit was checked against: the commit lands only while the table is
    /// still there (the file catalog's compare-and-swap). `None`: a create transaction (the
    /// commit lands only while no table of that name exists).
    base: Option<lake::Table>,
    name: TableName,
    metadata: TableMetadata,
}

impl Prepared {
    fn stage(self, catalog: &lake::Catalog) -> lake::Result<lake::TableChange> {
        match self.base {
            Some(base) => base.stage_metadata(self.metadata),
            None => catalog.stage_new_table(&self.name.to_string(), self.metadata),
        }
    }
}

/// A create transaction (`assert-create` and the new table's updates, after a stage-create):
/// the metadata built from scratch with iceberg's builder from the first schema and location
/// the updates carry, then every update applied in order.
fn prepare_create(state: &AppState, name: &TableName, req: CommitTableRequest) -> Answer<Prepared> {
    for r in &req.requirements {
        r.check(None).map_err(|e| RestError::from_commit(&e))?;
    }
    if !req
        .requirements
        .iter()
        .any(|r| matches!(r, TableRequirement::NotExist))
    {
        return Err(RestError::no_table(&name.to_string()));
    }
    let warehouse = state.catalog.warehouse_url();
    let schema = req
        .updates
        .iter()
        .find_map(|u| match u {
            TableUpdate::AddSchema { schema } => Some(schema.clone()),
            _ => None,
        })
        .ok_or_else(|| RestError::bad_request("a create transaction needs add-schema"))?;
    let location = match req.updates.iter().find_map(|u| match u {
        TableUpdate::SetLocation { location } => Some(location.clone()),
        _ => None,
    }) {
        Some(l) => inside_warehouse(warehouse, &l)?,
        None => state.catalog.default_table_location(name),
    };
    let format = req
        .updates
        .iter()
        .find_map(|u| match u {
            TableUpdate::UpgradeFormatVersion { format_version } => Some(*format_version),
            _ => None,
        })
        .unwrap_or(FormatVersion::V2);
    let builder = TableMetadataBuilder::new(
        schema,
        UnboundPartitionSpec::builder().build(),
        SortOrder::unsorted_order(),
        location,
        format,
        HashMap::new(),
    )
    .map_err(|e| RestError::from_commit(&e))?;
    let metadata = apply_updates(warehouse, builder, req.updates)?;
    Ok(Prepared {
        base: None,
        name: name.clone(),
        metadata,
    })
}

/// Apply a commit's updates with iceberg's builder (a location outside the warehouse is
/// refused; an update that does not apply is the client's error) and build the new metadata.
fn apply_updates(
    warehouse: &str,
    mut builder: TableMetadataBuilder,
    updates: Vec<TableUpdate>,
) -> Answer<TableMetadata> {
    for u in updates {
        if let TableUpdate::SetLocation { location } = &u {
            inside_warehouse(warehouse, location)?;
        }
        builder = u.apply(builder).map_err(|e| RestError::from_commit(&e))?;
    }
    Ok(builder
        .build()
        .map_err(|e| RestError::from_commit(&e))?
        .metadata)
}

/// Check `req`'s requirements against the table's current metadata (409 when one fails) and
/// apply its updates with iceberg's builder (400 when they do not apply).
async fn prepare(state: &AppState, name: &TableName, req: CommitTableRequest) -> Answer<Prepared> {
    let t = match state.catalog.table(&name.to_string()).await {
        Ok(t) => t,
        Err(lake::LakeError::NoSuchTable { .. }) => return prepare_create(state, name, req),
        Err(e) => return Err(e.into()),
    };
    for r in &req.requirements {
        r.check(Some(t.metadata()))
            .map_err(|e| RestError::from_commit(&e))?;
    }
    let warehouse = state.catalog.warehouse_url();
    let builder: TableMetadataBuilder = t
        .metadata()
        .clone()
        .into_builder(Some(t.metadata_location().to_string()));
    let metadata = apply_updates(warehouse, builder, req.updates)?;
    Ok(Prepared {
        base: Some(t),
        name: name.clone(),
        metadata,
    })
}

async fn commit_table(
    State(state): State<AppState>,
    p: std::result::Result<Path<(String, String)>, PathRejection>,
    JsonBody(req): JsonBody<CommitTableRequest>,
) -> Answer<Response> {
    let (ns, table) = path(p)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    if let Some(id) = &req.identifier
        && ident_name(id)? != name
    {
        return Err(RestError::bad_request(format!(
            "the body's identifier does not name table {name}"
        )));
    }
    let prepared = prepare(&state, &name, req).await?;
    let key = name.to_string();
    let committed = state
        .catalog
        .commit(
            vec![prepared.stage(&state.catalog)?],
            "rest-commit",
            &format!("REST commit to {key}"),
            BTreeMap::new(),
        )
        .await?;
    let t = match state.catalog.table_after(&committed, &key)? {
        Some(t) => t,
        None => {
            state
                .catalog
                .table_at_version(&key, committed.version)
                .await?
        }
    };
    Ok(json(CommitTableResponse {
        metadata_location: t.metadata_location().to_string(),
        metadata: t.metadata().clone(),
    }))
}

/// Several tables' commits as one catalog version: all land or none does.
async fn commit_transaction(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<CommitTransactionRequest>,
) -> Answer<StatusCode> {
    if req.table_changes.is_empty() {
        return Err(RestError::bad_request("a transaction needs table-changes"));
    }
    let mut seen = BTreeSet::new();
    let mut named = Vec::new();
    for change in req.table_changes {
        let id = change.identifier.as_ref().ok_or_else(|| {
            RestError::bad_request("every table change of a transaction needs its identifier")
        })?;
        let name = ident_name(id)?;
        if !seen.insert(name.to_string()) {
            return Err(RestError::bad_request(format!(
                "table {name} is changed twice in one transaction"
            )));
        }
        named.push((name, change));
    }
    let mut changes = Vec::new();
    for (name, change) in named {
        changes.push(
            prepare(&state, &name, change)
                .await?
                .stage(&state.catalog)?,
        );
    }
    let tables: Vec<String> = seen.into_iter().collect();
    state
        .catalog
        .commit(
            changes,
            "rest-transaction",
            &format!("REST transaction on {}", tables.join(", ")),
            BTreeMap::new(),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_stay_in_the_warehouse() {
        let w = "file:///data/warehouse";
        assert_eq!(
            inside_warehouse(w, "/data/warehouse/ns/t").ok().as_deref(),
            Some("file:///data/warehouse/ns/t")
        );
        assert!(inside_warehouse(w, "file:/data/warehouse/ns/t").is_ok());
        for bad in [
            "/data/warehouse",
            "/data/warehouse/",
            "/data/warehouse2/t",
            "/data/warehouse/../etc",
            "/data/warehouse/ns/%2e%2e/%2E%2E/x",
            "/tmp/t",
            "s3://bucket/t",
            "file:///data/warehouse\\..\\x",
        ] {
            let e = inside_warehouse(w, bad).err();
            assert_eq!(e.map(|e| e.status), Some(StatusCode::BAD_REQUEST), "{bad}");
        }
    }

    #[test]
    fn namespaces_are_one_level() {
        assert_eq!(namespace("bronze").ok().as_deref(), Some("bronze"));
        assert!(namespace("a\u{1f}b").is_err());
        assert!(namespace("1x").is_err());
        assert!(namespace("").is_err());
    }
}
