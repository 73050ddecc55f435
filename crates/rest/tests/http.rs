//! The REST catalog over HTTP, in process: a real server on 127.0.0.1:0 and a real HTTP client.
//! Every endpoint's happy path, and every bad input answered with its documented status in the
//! spec's error model, the lake unchanged.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use reqwest::{Client, Method, StatusCode};
use rest::ServeOptions;
use serde_json::{Value, json};
use tempfile::TempDir;

struct Server {
    base: String,
    catalog: lake::Catalog,
    client: Client,
    token: Option<String>,
    _dir: TempDir,
}

async fn start(opts: ServeOptions) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog =
        lake::Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
            .expect("catalog");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let token = opts.token.clone();
    tokio::spawn(rest::serve_on(listener, catalog.clone(), opts));
    Server {
        base: format!("http://{addr}"),
        catalog,
        client: Client::new(),
        token,
        _dir: dir,
    }
}

impl Server {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn raw(&self, method: Method, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn version(&self) -> u64 {
        self.catalog.latest_version_number().await.expect("version")
    }
}

/// What, method, path, body, the status and the error type it must get.
type BadCase = (
    &'static str,
    Method,
    &'static str,
    Vec<u8>,
    StatusCode,
    &'static str,
);

fn error_type(v: &Value) -> &str {
    v["error"]["type"].as_str().unwrap_or("<not an ErrorModel>")
}

fn schema_json() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "name", "required": false, "type": "string"}
    ]})
}

async fn lake_table_with_rows(catalog: &lake::Catalog, name: &str) {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]);
    catalog
        .create_table(name, &schema, &[])
        .await
        .expect("create");
    let t = catalog.table(name).await.expect("table");
    let batch = RecordBatch::try_new(
        t.arrow_schema().expect("schema"),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .expect("batch");
    catalog
        .append(name, "main", &[batch], Default::default())
        .await
        .expect("append");
}

#[tokio::test]
async fn config_and_namespaces() {
    let s = start(ServeOptions::default()).await;
    let (st, v) = s.call(Method::GET, "/v1/config", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(v["defaults"].is_object() && v["overrides"].is_object());

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces",
            Some(json!({"namespace": ["bronze"], "properties": {"owner": "ops"}})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["namespace"], json!(["bronze"]));
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces",
            Some(json!({"namespace": ["bronze"]})),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::CONFLICT, "AlreadyExistsException")
    );
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces",
            Some(json!({"namespace": ["a", "b"]})),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::BAD_REQUEST, "BadRequestException")
    );

    let (st, v) = s.call(Method::GET, "/v1/namespaces", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["namespaces"], json!([["bronze"]]));
    let (st, v) = s
        .call(Method::GET, "/v1/namespaces?parent=bronze", None)
        .await;
    assert_eq!((st, v["namespaces"].clone()), (StatusCode::OK, json!([])));
    let (st, _) = s
        .call(Method::GET, "/v1/namespaces?parent=nope", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    let (st, v) = s.call(Method::GET, "/v1/namespaces/bronze", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["properties"], json!({"owner": "ops"}));
    let (st, _) = s.call(Method::HEAD, "/v1/namespaces/bronze", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = s.call(Method::HEAD, "/v1/namespaces/silver", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, v) = s.call(Method::GET, "/v1/namespaces/silver", None).await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::NOT_FOUND, "NoSuchNamespaceException")
    );

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/bronze/properties",
            Some(json!({"removals": ["owner", "ghost"], "updates": {"tier": "raw"}})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"updated": ["tier"], "removed": ["owner"], "missing": ["ghost"]})
    );
    let (_, v) = s.call(Method::GET, "/v1/namespaces/bronze", None).await;
    assert_eq!(v["properties"], json!({"tier": "raw"}));
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/namespaces/bronze/properties",
            Some(json!({"removals": ["tier"], "updates": {"tier": "x"}})),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);

    // Not empty: 409; empty: 204; gone: 404.
    lake_table_with_rows(&s.catalog, "bronze.events").await;
    let (st, v) = s.call(Method::DELETE, "/v1/namespaces/bronze", None).await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::CONFLICT, "NamespaceNotEmptyException")
    );
    s.catalog.drop_table("bronze.events").await.expect("drop");
    let (st, _) = s.call(Method::DELETE, "/v1/namespaces/bronze", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = s.call(Method::DELETE, "/v1/namespaces/bronze", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tables_create_load_list_rename_drop_register() {
    let s = start(ServeOptions::default()).await;
    s.call(
        Method::POST,
        "/v1/namespaces",
        Some(json!({"namespace": ["ns"]})),
    )
    .await;

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/ns/tables",
            Some(json!({"name": "t", "schema": schema_json(), "properties": {"k": "v"}})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let loc = v["metadata-location"]
        .as_str()
        .expect("metadata-location")
        .to_string();
    assert_eq!(v["metadata"]["format-version"], json!(2));
    assert_eq!(v["metadata"]["properties"]["k"], json!("v"));
    let t = s.catalog.table("ns.t").await.expect("lake sees the table");
    assert_eq!(t.metadata_location(), loc);

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/ns/tables",
            Some(json!({"name": "t", "schema": schema_json()})),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::CONFLICT, "AlreadyExistsException")
    );
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/nope/tables",
            Some(json!({"name": "t", "schema": schema_json()})),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::NOT_FOUND, "NoSuchNamespaceException")
    );

    let (st, v) = s.call(Method::GET, "/v1/namespaces/ns/tables", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        v["identifiers"],
        json!([{"namespace": ["ns"], "name": "t"}])
    );
    let (st, v) = s
        .call(Method::GET, "/v1/namespaces/ns/tables/t", None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["metadata-location"], json!(loc));
    assert_eq!(
        v["metadata"]["table-uuid"],
        json!(t.metadata().uuid().to_string())
    );
    let (st, _) = s
        .call(Method::HEAD, "/v1/namespaces/ns/tables/t", None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = s
        .call(Method::HEAD, "/v1/namespaces/ns/tables/u", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, v) = s
        .call(Method::GET, "/v1/namespaces/ns/tables/u", None)
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::NOT_FOUND, "NoSuchTableException")
    );

    // Rename: to an existing name 409, into a missing namespace 404, else 204.
    s.call(
        Method::POST,
        "/v1/namespaces/ns/tables",
        Some(json!({"name": "other", "schema": schema_json()})),
    )
    .await;
    let rename = |to_ns: &str, to: &str| json!({"source": {"namespace": ["ns"], "name": "t"}, "destination": {"namespace": [to_ns], "name": to}});
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/tables/rename",
            Some(rename("ns", "other")),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT);
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/tables/rename",
            Some(rename("nope", "t2")),
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = s
        .call(Method::POST, "/v1/tables/rename", Some(rename("ns", "t2")))
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert!(s.catalog.table("ns.t").await.is_err());
    assert_eq!(
        s.catalog
            .table("ns.t2")
            .await
            .expect("renamed")
            .metadata_location(),
        loc
    );
    let (st, _) = s
        .call(Method::POST, "/v1/tables/rename", Some(rename("ns", "t3")))
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // Register the renamed table's metadata under a second name.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/ns/register",
            Some(json!({"name": "again", "metadata-location": loc})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["metadata-location"], json!(loc));
    assert_eq!(
        s.catalog
            .table("ns.again")
            .await
            .expect("registered")
            .metadata_location(),
        loc
    );
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/ns/register",
            Some(json!({"name": "again", "metadata-location": loc})),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::CONFLICT, "AlreadyExistsException")
    );

    // Purging a name whose metadata another table shares is refused: nothing is deleted.
    let (st, v) = s
        .call(
            Method::DELETE,
            "/v1/namespaces/ns/tables/again?purgeRequested=true",
            None,
        )
        .await;
    assert!(st.is_client_error(), "{st} {v}");
    assert!(v.to_string().contains("not purging ns.again"), "{v}");
    assert!(s.catalog.table("ns.again").await.is_ok(), "still there");

    // Drop; purge keeps other tables' files.
    let (st, _) = s
        .call(Method::DELETE, "/v1/namespaces/ns/tables/again", None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = s
        .call(Method::DELETE, "/v1/namespaces/ns/tables/again", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = s
        .call(
            Method::DELETE,
            "/v1/namespaces/ns/tables/other?purgeRequested=true",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = s
        .call(Method::GET, "/v1/namespaces/ns/tables/t2", None)
        .await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test]
async fn bad_input_is_refused_and_the_lake_is_unchanged() {
    let s = start(ServeOptions {
        max_body_bytes: 64 * 1024,
        ..ServeOptions::default()
    })
    .await;
    lake_table_with_rows(&s.catalog, "ns.t").await;
    let t = s.catalog.table("ns.t").await.expect("table");
    let before = s.version().await;
    let tpath = "/v1/namespaces/ns/tables/t";

    let bad: Vec<BadCase> = vec![
        ("malformed JSON", Method::POST, "/v1/namespaces", b"{\"namespace\": [".to_vec(), StatusCode::BAD_REQUEST, "BadRequestException"),
        ("wrong shape", Method::POST, "/v1/namespaces", b"{\"namespace\": 7}".to_vec(), StatusCode::BAD_REQUEST, "BadRequestException"),
        (
            "unknown update type",
            Method::POST,
            tpath,
            serde_json::to_vec(&json!({"requirements": [], "updates": [{"action": "make-it-faster"}]})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "failing requirement",
            Method::POST,
            tpath,
            serde_json::to_vec(&json!({
                "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 42}],
                "updates": [{"action": "set-properties", "updates": {"a": "b"}}]
            }))
            .unwrap_or_default(),
            StatusCode::CONFLICT,
            "CommitFailedException",
        ),
        (
            "wrong table uuid",
            Method::POST,
            tpath,
            serde_json::to_vec(&json!({
                "requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
                "updates": []
            }))
            .unwrap_or_default(),
            StatusCode::CONFLICT,
            "CommitFailedException",
        ),
        (
            "update that does not apply",
            Method::POST,
            tpath,
            serde_json::to_vec(&json!({"updates": [{"action": "set-current-schema", "schema-id": 99}]})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "set-location outside the warehouse",
            Method::POST,
            tpath,
            serde_json::to_vec(&json!({"updates": [{"action": "set-location", "location": "file:///tmp/elsewhere"}]})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        ("huge body", Method::POST, "/v1/namespaces", vec![b' '; 1024 * 1024], StatusCode::PAYLOAD_TOO_LARGE, "BadRequestException"),
        (
            "create outside the warehouse",
            Method::POST,
            "/v1/namespaces/ns/tables",
            serde_json::to_vec(&json!({"name": "x", "schema": schema_json(), "location": "/tmp/x"})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "create escaping the warehouse by ..",
            Method::POST,
            "/v1/namespaces/ns/tables",
            serde_json::to_vec(&json!({"name": "x", "schema": schema_json(), "location": format!("{}/../x", s.catalog.warehouse_url())})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "register outside the warehouse",
            Method::POST,
            "/v1/namespaces/ns/register",
            serde_json::to_vec(&json!({"name": "x", "metadata-location": "/etc/passwd"})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "register a file that is not metadata",
            Method::POST,
            "/v1/namespaces/ns/register",
            serde_json::to_vec(&json!({"name": "x", "metadata-location": format!("{}/ns/t/nothing.json", s.catalog.warehouse_url())})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "bad table name",
            Method::POST,
            "/v1/namespaces/ns/tables",
            serde_json::to_vec(&json!({"name": "no-dashes", "schema": schema_json()})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "transaction without identifiers",
            Method::POST,
            "/v1/transactions/commit",
            serde_json::to_vec(&json!({"table-changes": [{"requirements": [], "updates": []}]})).unwrap_or_default(),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "transaction with a failing requirement",
            Method::POST,
            "/v1/transactions/commit",
            serde_json::to_vec(&json!({"table-changes": [{
                "identifier": {"namespace": ["ns"], "name": "t"},
                "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}],
                "updates": []
            }]}))
            .unwrap_or_default(),
            StatusCode::CONFLICT,
            "CommitFailedException",
        ),
        (
            "transaction naming a missing table",
            Method::POST,
            "/v1/transactions/commit",
            serde_json::to_vec(&json!({"table-changes": [{"identifier": {"namespace": ["ns"], "name": "ghost"}, "updates": []}]})).unwrap_or_default(),
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
    ];
    for (what, method, path, body, status, kind) in bad {
        let (st, v) = s.raw(method, path, body).await;
        assert_eq!((st, error_type(&v)), (status, kind), "{what}: {v}");
        assert_eq!(s.version().await, before, "{what} changed the lake");
    }
    let after = s.catalog.table("ns.t").await.expect("table");
    assert_eq!(after.metadata_location(), t.metadata_location());
    // Unknown routes are 404 in the error model too.
    let (st, v) = s.call(Method::GET, "/v1/nothing", None).await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::NOT_FOUND, "NotFoundException")
    );
}

#[tokio::test]
async fn a_commit_checks_requirements_applies_updates_and_moves_the_table() {
    let s = start(ServeOptions::default()).await;
    lake_table_with_rows(&s.catalog, "ns.t").await;
    let t = s.catalog.table("ns.t").await.expect("table");
    let before = s.version().await;
    let main = t.head("main").expect("main");
    let body = json!({
        "identifier": {"namespace": ["ns"], "name": "t"},
        "requirements": [
            {"type": "assert-table-uuid", "uuid": t.metadata().uuid().to_string()},
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": main}
        ],
        "updates": [
            {"action": "set-properties", "updates": {"owner": "rest"}},
            {"action": "set-snapshot-ref", "ref-name": "audit", "type": "branch", "snapshot-id": main}
        ]
    });
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/namespaces/ns/tables/t",
            Some(body.clone()),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(s.version().await, before + 1);
    let after = s.catalog.table("ns.t").await.expect("table");
    assert_eq!(v["metadata-location"], json!(after.metadata_location()));
    assert_ne!(after.metadata_location(), t.metadata_location());
    assert_eq!(
        after
            .metadata()
            .properties()
            .get("owner")
            .map(String::as_str),
        Some("rest")
    );
    assert_eq!(after.head("audit"), Some(main));
    assert_eq!(v["metadata"]["properties"]["owner"], json!("rest"));

    // The same commit again: the branch it asserts absent... still holds, but a requirement on
    // a ref that moved fails with 409 and changes nothing.
    let stale = json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "audit", "snapshot-id": null}],
        "updates": [{"action": "set-properties", "updates": {"owner": "late"}}]
    });
    let (st, v) = s
        .call(Method::POST, "/v1/namespaces/ns/tables/t", Some(stale))
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::CONFLICT, "CommitFailedException")
    );
    assert_eq!(s.version().await, before + 1);
    // An identifier naming another table than the path: 400.
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/namespaces/ns/tables/t",
            Some(json!({"identifier": {"namespace": ["ns"], "name": "u"}, "updates": []})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_transaction_moves_two_tables_in_one_catalog_version_or_none() {
    let s = start(ServeOptions::default()).await;
    lake_table_with_rows(&s.catalog, "ns.a").await;
    lake_table_with_rows(&s.catalog, "ns.b").await;
    let before = s.version().await;
    let a = s.catalog.table("ns.a").await.expect("a");
    let b = s.catalog.table("ns.b").await.expect("b");
    let change = |name: &str, id: i64, prop: &str| {
        json!({
            "identifier": {"namespace": ["ns"], "name": name},
            "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": id}],
            "updates": [
                {"action": "set-snapshot-ref", "ref-name": "published", "type": "tag", "snapshot-id": id},
                {"action": "set-properties", "updates": {"publish": prop}}
            ]
        })
    };
    let (a_main, b_main) = (
        a.head("main").expect("a main"),
        b.head("main").expect("b main"),
    );
    // One change's requirement fails: nothing lands.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/transactions/commit",
            Some(
                json!({"table-changes": [change("a", a_main, "1"), change("b", a_main + 1, "1")]}),
            ),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::CONFLICT, "CommitFailedException")
    );
    assert_eq!(s.version().await, before);
    // Both hold: one new catalog version moves both.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/transactions/commit",
            Some(json!({"table-changes": [change("a", a_main, "1"), change("b", b_main, "1")]})),
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    assert_eq!(s.version().await, before + 1);
    let head = s.catalog.head().await.expect("head");
    let mut changed = head.changed.clone();
    changed.sort();
    assert_eq!(changed, vec!["ns.a".to_string(), "ns.b".to_string()]);
    for (name, id) in [("ns.a", a_main), ("ns.b", b_main)] {
        let t = s.catalog.table(name).await.expect("table");
        assert_eq!(t.head("published"), Some(id), "{name}");
        assert_eq!(
            t.metadata().properties().get("publish").map(String::as_str),
            Some("1")
        );
    }
    // The same table twice in one transaction: 400, nothing lands.
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/transactions/commit",
            Some(json!({"table-changes": [change("a", a_main, "2"), change("a", a_main, "3")]})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(s.version().await, before + 1);
}

/// 16 clients × 50 commits to one table: every commit lands or gets 409 and lands on retry; no
/// update is lost. Prints the commit latency (first attempt to landing) at p50 and p99: a figure
/// for people, not an assertion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_to_one_table_all_land() {
    const CLIENTS: usize = 16;
    const COMMITS: usize = 50;
    let s = Arc::new(start(ServeOptions::default()).await);
    lake_table_with_rows(&s.catalog, "ns.t").await;
    let before = s.version().await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            let mut latencies = Vec::with_capacity(COMMITS);
            for i in 0..COMMITS {
                let body = json!({"updates": [{"action": "set-properties", "updates": {format!("c{c}-{i}"): "x"}}]});
                let started = std::time::Instant::now();
                loop {
                    let (st, v) = s.call(Method::POST, "/v1/namespaces/ns/tables/t", Some(body.clone())).await;
                    match st {
                        StatusCode::OK => break,
                        StatusCode::CONFLICT => {
                            assert_eq!(error_type(&v), "CommitFailedException");
                            conflicts += 1;
                        }
                        other => panic!("client {c} commit {i}: {other} {v}"),
                    }
                }
                latencies.push(started.elapsed());
            }
            (conflicts, latencies)
        }));
    }
    let mut conflicts = 0;
    let mut latencies = Vec::new();
    for t in tasks {
        let (c, l) = t.await.expect("client");
        conflicts += c;
        latencies.extend(l);
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    let t = s.catalog.table("ns.t").await.expect("table");
    for c in 0..CLIENTS {
        for i in 0..COMMITS {
            assert!(
                t.metadata().properties().contains_key(&format!("c{c}-{i}")),
                "lost c{c}-{i}"
            );
        }
    }
    assert_eq!(s.version().await, before + (CLIENTS * COMMITS) as u64);
    println!(
        "{} commits, {conflicts} answered 409 and retried; commit latency p50 {:.1} ms, p99 {:.1} ms",
        CLIENTS * COMMITS,
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3
    );
}

#[tokio::test]
async fn token_and_read_only() {
    let s = start(ServeOptions {
        token: Some("s3cret".into()),
        ..ServeOptions::default()
    })
    .await;
    let before = s.version().await;
    for token in [None, Some("wrong"), Some("s3cret2"), Some("")] {
        let mut req = s
            .client
            .post(format!("{}/v1/namespaces", s.base))
            .json(&json!({"namespace": ["x"]}));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(error_type(&v), "NotAuthorizedException");
    }
    assert_eq!(s.version().await, before);
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/namespaces",
            Some(json!({"namespace": ["x"]})),
        )
        .await;
    assert_eq!(st, StatusCode::OK);

    let ro = start(ServeOptions {
        read_only: true,
        ..ServeOptions::default()
    })
    .await;
    lake_table_with_rows(&ro.catalog, "ns.t").await;
    let before = ro.version().await;
    let (st, v) = ro
        .call(
            Method::POST,
            "/v1/namespaces",
            Some(json!({"namespace": ["x"]})),
        )
        .await;
    assert_eq!(
        (st, error_type(&v)),
        (StatusCode::FORBIDDEN, "ForbiddenException")
    );
    let (st, _) = ro
        .call(Method::DELETE, "/v1/namespaces/ns/tables/t", None)
        .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, _) = ro
        .call(Method::GET, "/v1/namespaces/ns/tables/t", None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(ro.version().await, before);
}

#[tokio::test]
async fn a_public_address_without_a_token_is_refused() {
    let catalog = lake::Catalog::in_memory();
    let opts = ServeOptions {
        addr: "0.0.0.0:0".parse().expect("addr"),
        ..ServeOptions::default()
    };
    let e = rest::serve(catalog, opts).await.err();
    assert!(
        matches!(e, Some(rest::ServeError::NonLoopbackWithoutToken(_))),
        "{e:?}"
    );
}
