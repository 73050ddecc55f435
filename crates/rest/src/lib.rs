//! # rest — the Iceberg REST catalog protocol served over the lake file catalog
//!
//! `rest` owns the HTTP face of a `lake::Catalog`: the Iceberg REST catalog OpenAPI (v1) routes
//! for config, namespaces and tables, answered from the file catalog, so engines that speak the
//! protocol (pyiceberg, DuckDB, Spark, iceberg-rust's REST client) attach to the same tables. It
//! owns the server's guard rails: loopback by default, a bearer token when one is set (and no
//! non-loopback address without one), a read-only mode, request bodies limited in size, table
//! locations kept inside the warehouse, and errors in the spec's `ErrorModel` with the status a
//! client acts on.
//!
//! It does not own the table format or the commit protocol — those are `lake`'s, reused through
//! its `iceberg::Catalog` implementation and its API — and it knows no maple syrup. Requests and
//! responses use iceberg-rust's own serde types (`TableMetadata`, `TableRequirement`,
//! `TableUpdate`, `Schema`, …); only the few envelope structs are defined here.
//!
//! Table commits (`POST …/tables/{table}`) check their requirements against the table's current
//! metadata, apply their updates with iceberg's builders and commit through the file catalog's
//! compare-and-swap (409 when another writer got there first: the client retries);
//! `POST /v1/transactions/commit` does that for several tables as one catalog version.

mod error;
mod model;
pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;

pub use error::RestError;

/// How the server listens and what it allows.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen; loopback unless a token is set.
    pub addr: SocketAddr,
    /// When set, every request must carry `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Refuse every request that would change the catalog (403).
    pub read_only: bool,
    /// The largest request body accepted (413 above it).
    pub max_body_bytes: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 8181)),
            token: None,
            read_only: false,
            max_body_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Why the server did not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to listen on {0}, which is not a loopback address, without a token")]
    NonLoopbackWithoutToken(SocketAddr),
    #[error("the token is empty")]
    EmptyToken,
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}

pub type Result<T> = std::result::Result<T, ServeError>;

/// Check the options before listening: an empty token, or a non-loopback address without a
/// token, is refused.
pub fn check_options(addr: SocketAddr, opts: &ServeOptions) -> Result<()> {
    match opts.token.as_deref() {
        Some("") => Err(ServeError::EmptyToken),
        None if !addr.ip().is_loopback() => Err(ServeError::NonLoopbackWithoutToken(addr)),
        _ => Ok(()),
    }
}

/// Serve the catalog at `opts.addr` until the process ends.
pub async fn serve(catalog: lake::Catalog, opts: ServeOptions) -> Result<()> {
    check_options(opts.addr, &opts)?;
    let listener = TcpListener::bind(opts.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: opts.addr,
            source,
        })?;
    serve_on(listener, catalog, opts).await
}

/// Serve the catalog on a listener already bound (tests bind `127.0.0.1:0`). The listener's
/// address is checked as [`serve`] checks `opts.addr`.
pub async fn serve_on(
    listener: TcpListener,
    catalog: lake::Catalog,
    opts: ServeOptions,
) -> Result<()> {
    let addr = listener.local_addr().map_err(ServeError::Serve)?;
    check_options(addr, &opts)?;
    axum::serve(listener, router(catalog, opts))
        .await
        .map_err(ServeError::Serve)
}

/// Serve `app` — [`router`] merged with other routes (`sugarshack serve` adds the dashboard's
/// pages next to the REST routes, which all live under `/v1/`) — on a listener already bound.
/// The listener's address is checked as [`serve`] checks `opts.addr`.
pub async fn serve_router_on(
    listener: TcpListener,
    app: Router,
    opts: &ServeOptions,
) -> Result<()> {
    let addr = listener.local_addr().map_err(ServeError::Serve)?;
    check_options(addr, opts)?;
    axum::serve(listener, app).await.map_err(ServeError::Serve)
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) catalog: lake::Catalog,
    token: Option<Arc<str>>,
    read_only: bool,
}

/// The REST routes over `catalog`, with the token, read-only and body-size guards applied.
pub fn router(catalog: lake::Catalog, opts: ServeOptions) -> Router {
    let state = AppState {
        catalog,
        token: opts.token.filter(|t| !t.is_empty()).map(Arc::from),
        read_only: opts.read_only,
    };
    routes::routes()
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(opts.max_body_bytes))
        .with_state(state)
}

/// Token first (401), then read-only (403).
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ok = given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()));
        if !ok {
            return RestError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "NotAuthorizedException",
                "a valid bearer token is required",
            )
            .into_response();
        }
    }
    if state.read_only && !matches!(*req.method(), Method::GET | Method::HEAD) {
        return RestError::forbidden("the server is read-only").into_response();
    }
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_needs_a_token() {
        let opts = ServeOptions::default();
        let public: SocketAddr = "0.0.0.0:8181".parse().unwrap_or(opts.addr);
        assert!(matches!(
            check_options(public, &opts),
            Err(ServeError::NonLoopbackWithoutToken(_))
        ));
        let with_token = ServeOptions {
            token: Some("s3cret".into()),
            ..ServeOptions::default()
        };
        assert!(check_options(public, &with_token).is_ok());
        assert!(check_options(opts.addr, &opts).is_ok());
        let empty = ServeOptions {
            token: Some(String::new()),
            ..ServeOptions::default()
        };
        assert!(matches!(
            check_options(opts.addr, &empty),
            Err(ServeError::EmptyToken)
        ));
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
