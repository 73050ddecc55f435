//! The dashboard over a real lake: what `audit` holds never reaches a page; bad parameters are
//! clear 400/404 pages; the token guard; and the structural rule that only `published` reads.

use super::*;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use chrono::TimeZone;
use futures::future::BoxFuture;
use shack::grade::{Audit, AuditFn, GradeContext};
use shack::{AuditResult, Verdict};

#[test]
fn parameters_parse_or_say_what_was_wrong() {
    let p = parse_params(Some("publish=2&month=2026-08&x=1")).expect("ok");
    assert_eq!(p.publish, Some(2));
    assert_eq!(p.month.map(|m| m.to_string()).as_deref(), Some("2026-08"));
    // An untouched form field is absent.
    assert_eq!(
        parse_params(Some("publish=&as_of=")).expect("ok"),
        Params::default()
    );
    let p = parse_params(Some("as_of=2026-08-17")).expect("ok");
    assert_eq!(
        p.as_of.map(|(_, t)| t.to_rfc3339()).as_deref(),
        Some("2026-08-17T23:59:59+00:00")
    );
    for (q, needle) in [
        (
            "publish=abc",
            "?publish=\"abc\": a publish is a number from 1",
        ),
        ("publish=0", "?publish=\"0\""),
        ("publish=-1", "?publish=\"-1\""),
        ("as_of=yesterday", "?as_of=\"yesterday\": not a day"),
        ("month=2026-13", "?month=\"2026-13\": not a month"),
        ("publish=1&as_of=2026-08-17", "not both"),
    ] {
        let e = parse_params(Some(q)).expect_err(q);
        assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{q}");
        assert!(e.to_string().contains(needle), "{q}: {e}");
    }
}

#[test]
fn the_token_is_asked_for_as_basic_or_bearer() {
    // "anyone:s3cret"
    assert!(authorised("Basic YW55b25lOnMzY3JldA==", "s3cret"));
    assert!(authorised("Bearer s3cret", "s3cret"));
    assert!(!authorised("Basic YW55b25lOndyb25n", "s3cret")); // anyone:wrong
    assert!(!authorised("Basic !!!", "s3cret"));
    assert!(!authorised("s3cret", "s3cret"));
    assert_eq!(base64_decode("YQ").as_deref(), Some(&b"a"[..]));
    assert_eq!(base64_decode("YWI=").as_deref(), Some(&b"ab"[..]));
}

/// The rule this crate keeps: a table is read in exactly one place, at a publish's tag. No
/// other source file names a way to read a table (`At::`, `.scan(`, `.sql(`) or the `audit`
/// branch.
#[test]
fn only_published_reads_tables_and_nothing_names_the_audit_branch() {
    let sources = [
        ("lib.rs", include_str!("lib.rs")),
        ("pages.rs", include_str!("pages.rs")),
        ("html.rs", include_str!("html.rs")),
        ("svg.rs", include_str!("svg.rs")),
    ];
    for (name, text) in sources {
        for needle in ["At::", ".scan(", ".sql(", "AUDIT_BRANCH", "\"audit\""] {
            assert!(!text.contains(needle), "{name} contains {needle}");
        }
    }
    let published = include_str!("published.rs");
    let code = published.split("#[cfg(test)]").next().unwrap_or("");
    assert_eq!(code.matches("At::").count(), 1, "one At:: in published.rs");
    assert!(code.contains("At::reference(&p.tag())"));
    assert!(!code.contains("\"audit\"") && !code.contains("AUDIT_BRANCH"));
}

// ---------------------------------------------------------------------------------------------
// A lake whose audit branch holds a build an audit blocked.

fn rows(table: &str, json_lines: &[&str]) -> RecordBatch {
    let schema = shack::gold::schema(table).expect("schema");
    let mut reader = arrow::json::ReaderBuilder::new(schema)
        .build(std::io::Cursor::new(json_lines.join("\n")))
        .expect("reader");
    reader.next().expect("a batch").expect("rows")
}

fn cash(day: &str, net: i64) -> String {
    format!(
        r#"{{"processor_date":"{day}","currency":"cad","captures":1,"refunds":0,"captured_minor":{net},"refunded_minor":0,"net_minor":{net},"fx_rate_date":"{day}","fx_rate_micros":1000000,"captured_cad_minor":{net},"refunded_cad_minor":0,"net_cad_minor":{net}}}"#
    )
}

fn orders(day: &str, net: i64) -> String {
    format!(
        r#"{{"order_date":"{day}","ship_region":"NS","paid_orders":1,"gross_cad_minor":{net},"refunds_cad_minor":0,"net_cad_minor":{net},"fx_rate_date":"{day}","fx_rate_micros":1000000}}"#
    )
}

fn waiting(id: &str, over: bool) -> String {
    format!(
        r#"{{"order_id":"{id}","customer_id":"c","ship_region":"NS","currency":"cad","total_minor":100,"order_date":"2026-08-16","created_at":"2026-08-16T10:00:00Z","paid_at":"2026-08-16T10:00:00Z","as_of":"2026-08-16T23:59:59Z","waited_seconds":50000,"over_72h":{over}}}"#
    )
}

fn pass<'a>(_: &'a Catalog, _: &'a GradeContext) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async {
        Ok(AuditResult::new(
            "conservation",
            Verdict::Pass,
            "all accounted for",
            serde_json::json!({}),
        ))
    })
}

fn block<'a>(_: &'a Catalog, _: &'a GradeContext) -> BoxFuture<'a, shack::Result<AuditResult>> {
    Box::pin(async {
        Ok(AuditResult::new(
            "quarantine rate",
            Verdict::Block,
            "payments 21.30% of 324 (mostly unsupported_api_version)",
            serde_json::json!({}),
        ))
    })
}

async fn write_and_grade(lake: &Catalog, day: u32, net: i64, audit: AuditFn) -> bool {
    let d = format!("2026-08-{day:02}");
    let writes = [
        (shack::gold::MART_DAILY_CASH, cash(&d, net)),
        (shack::gold::MART_ORDER_REVENUE, orders(&d, net - 1)),
        (
            shack::gold::FULFILMENT_QUEUE,
            waiting(&format!("o-{day}"), day.is_multiple_of(2)),
        ),
    ];
    for (table, line) in writes {
        lake.append(table, "audit", &[rows(table, &[&line])], BTreeMap::new())
            .await
            .expect("append to audit");
    }
    let as_of = Utc
        .with_ymd_and_hms(2026, 8, day, 23, 59, 59)
        .single()
        .expect("t");
    let audits: Vec<std::sync::Arc<dyn Audit>> = vec![std::sync::Arc::new(audit)];
    let grade = shack::grade(lake, &["gold"], as_of, &shack::Settings::default(), &audits)
        .await
        .expect("grade");
    shack::publish(lake, &grade, 1_786_000_000_000)
        .await
        .expect("publish")
        .published()
}

async fn get(app: &App, page: Page, query: Option<&str>) -> (StatusCode, String) {
    let r = app.page(page, query.map(str::to_string)).await;
    let status = r.status();
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn value_of(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let rest = &html[at..];
    let v = rest.find("data-value=\"")? + "data-value=\"".len();
    let end = rest[v..].find('"')?;
    Some(rest[v..v + end].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_build_on_audit_never_reaches_a_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lake = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
        .expect("lake");
    for t in [
        shack::gold::MART_DAILY_CASH,
        shack::gold::MART_ORDER_REVENUE,
        shack::gold::FULFILMENT_QUEUE,
    ] {
        let schema = shack::gold::schema(t).expect("schema");
        lake.create_table(t, &schema, &shack::gold::partitioning(t))
            .await
            .expect("create");
    }
    let app = App {
        lake: lake.clone(),
        landing: None,
        token: None,
        bridges: Arc::default(),
    };

    // Nothing published: the page says so.
    let (status, html) = get(&app, Page::Revenue, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Nothing published yet"));

    assert!(write_and_grade(&lake, 16, 10_000, AuditFn::new("conservation", pass)).await);
    assert!(!write_and_grade(&lake, 17, 55_555, AuditFn::new("quarantine rate", block)).await);

    // audit holds both days; main and publish-1 only the first.
    let audit_sum = lake
        .sql(None, &lake::At::reference("audit"))
        .await
        .expect("sql")
        .query("select sum(net_cad_minor) from gold.mart_daily_cash")
        .await
        .expect("query");
    let audit_sum = published::ints(&audit_sum, 0).expect("ints");
    assert_eq!(audit_sum, vec![Some(65_555)]);

    let (status, html) = get(&app, Page::Revenue, None).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_eq!(value_of(&html, "month-cash").as_deref(), Some("10000"));
    assert_eq!(value_of(&html, "month-orders").as_deref(), Some("9999"));
    assert_eq!(value_of(&html, "queue").as_deref(), Some("1"));
    assert!(!html.contains("555.55") && !html.contains("C$655.55"));
    assert!(html.contains("gold still shows the build as of 2026-08-16 23:59 UTC"));
    assert!(html.contains("payments 21.30% of 324 (mostly unsupported_api_version)"));
    assert!(html.contains(r#"data-publish="1">2026-08-16 23:59 UTC<"#));
    assert!(html.contains(
        "sugarshack query --publish 1 &quot;select sum(net_cad_minor) as net_cad_minor from gold.mart_daily_cash where processor_date &gt;= date &#39;2026-08-01&#39;"
    ));

    // The audits page shows the blocked run as the last run, and the history.
    let (_, html) = get(&app, Page::Audits, None).await;
    assert!(html.contains("The last run: as of 2026-08-17 23:59 UTC"));
    assert_eq!(html.matches("<tr data-seq=").count(), 2);

    // Time travel by date before the block: no banner; the same numbers.
    let (_, html) = get(&app, Page::Revenue, Some("as_of=2026-08-17T12:00")).await;
    assert!(!html.contains("id=\"blocked\""), "the block came later");
    assert_eq!(value_of(&html, "month-cash").as_deref(), Some("10000"));
    assert!(html.contains(r#"href="/audits?as_of=2026-08-17T12%3A00""#));

    // The other pages draw.
    let (status, html) = get(&app, Page::TimeTravel, Some("publish=1")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Two right answers for 2026-08"));
    let (status, html) = get(&app, Page::Bridge, None).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("not available here"));

    // Bad and unknown publishes: clear pages, not panics.
    let (status, html) = get(&app, Page::Revenue, Some("publish=2")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("there is no publish 2: the only publish is 1"));
    let (status, html) = get(&app, Page::Bridge, Some("publish=two")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(html.contains("?publish=&quot;two&quot;"));
    let (status, html) = get(&app, Page::Audits, Some("as_of=2026-07-01")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("nothing was published at or before 2026-07-01 23:59 UTC"));
}

/// One raw HTTP/1.1 GET: the status line and headers, lower-cased.
async fn raw_get(addr: std::net::SocketAddr, path: &str, auth: Option<&str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    String::from_utf8_lossy(&out).to_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_page_asks_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lake = Catalog::open_local(dir.path().join("catalog"), dir.path().join("warehouse"))
        .expect("lake");
    let app = router(
        lake,
        Options {
            landing: None,
            token: Some("s3cret".into()),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let refused = raw_get(addr, "/audits", None).await;
    assert!(refused.starts_with("http/1.1 401"), "{refused}");
    assert!(refused.contains("www-authenticate: basic realm=\"sugarshack\""));
    let wrong = raw_get(addr, "/", Some("Basic YW55b25lOndyb25n")).await;
    assert!(wrong.starts_with("http/1.1 401"), "{wrong}");
    let ok = raw_get(addr, "/", Some("Basic YW55b25lOnMzY3JldA==")).await;
    assert!(ok.starts_with("http/1.1 200"), "{ok}");
    assert!(ok.contains("content-type: text/html; charset=utf-8"));
    assert!(ok.contains("nothing published yet"));
    let bad = raw_get(addr, "/bridge?month=13", Some("Bearer s3cret")).await;
    assert!(bad.starts_with("http/1.1 400"), "{bad}");
    server.abort();
}
