//! # dashboard — the honest dashboard: web pages over what the lake published
//!
//! `dashboard` owns the Saltbox Market web pages that `sugarshack serve` mounts at `/` next to
//! the REST catalog: **Revenue** (daily cash by processor date and order revenue by order date as
//! SVG charts, the as-of of the publish they come from shown large, and a banner when the runs
//! after it were blocked: "gold still shows the build as of …" with the blocking audit's reason),
//! **Audits** (the last run's audits and the history of publishes, blocked runs and rollbacks),
//! **The bridge** (`shack::compare`'s waterfall from the old "bucket brigade" to gold for a month,
//! and the awaiting-shipment queue both ways) and **Time travel** (pick a publish, `?publish=N`,
//! or a date, `?as_of=2026-08-17`, and every page shows that publish's numbers; the two right
//! answers across as-of dates). Every number shows beside it the `sugarshack query --publish N
//! "…"` command that produced it — the same SQL the page ran.
//!
//! It reads only what was published: the publish log, and tables at a publish's tag
//! `publish-N` (the newest publish is what `main` holds). Never the `audit` branch: every read
//! goes through [`published::AtPublish`], which can only be opened on a [`published::Published`],
//! which can only come from the publish log. A blocked run therefore never reaches a page except
//! as the banner saying it was blocked.
//!
//! It does not own the numbers' definitions (gold's tables, the audits, the bridge are `shack`'s),
//! the table format (`lake`'s), nor the HTTP server or the REST catalog (`rest` and the
//! `sugarshack` binary, which merges [`router`] with `rest::router`). Pages are plain HTML with
//! one inline stylesheet and server-rendered SVG: no script, no CDN, they work offline.

pub mod html;
pub mod pages;
pub mod published;
pub mod svg;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use lake::Catalog;
use shack::compare::Comparison;

use crate::html::{Frame, escape};
use crate::pages::{Bridge, Month, Revenue, TimeTravel, View};
use crate::published::{AtPublish, Log};

/// Why a page could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// A query parameter that does not parse (400).
    #[error("?{name}={value:?}: {why}")]
    BadParam {
        name: &'static str,
        value: String,
        why: String,
    },
    /// A publish number the log does not hold (404).
    #[error("there is no publish {number}: {range}")]
    NoSuchPublish { number: u64, range: String },
    /// A date before the first publish (404).
    #[error("nothing was published at or before {at}: {range}")]
    NothingPublishedBy { at: String, range: String },
    /// The publish log could not be read.
    #[error(transparent)]
    Shack(#[from] shack::ShackError),
    /// A table could not be read at a publish.
    #[error("reading {what}: {source}")]
    Lake {
        what: String,
        source: lake::LakeError,
    },
    /// A query gave rows of an unexpected shape.
    #[error("unexpected data: {0}")]
    Data(String),
}

impl DashboardError {
    fn status(&self) -> StatusCode {
        match self {
            DashboardError::BadParam { .. } => StatusCode::BAD_REQUEST,
            DashboardError::NoSuchPublish { .. } | DashboardError::NothingPublishedBy { .. } => {
                StatusCode::NOT_FOUND
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

pub type Result<T> = std::result::Result<T, DashboardError>;

/// What the dashboard needs besides the lake.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The local folder holding `landing/` (the bridge reads the landing files); `None`: the
    /// bridge page says it is not available.
    pub landing: Option<PathBuf>,
    /// When set, every page asks for it: HTTP Basic authentication with the token as the
    /// password (any user name; a browser prompts), or `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

/// What the handlers share.
#[derive(Clone)]
struct App {
    lake: Catalog,
    landing: Option<PathBuf>,
    token: Option<Arc<str>>,
    /// Comparisons by (publish-log seq, month): they read every landing file of the month.
    bridges: Arc<Mutex<HashMap<(u64, Month), Comparison>>>,
}

/// The dashboard's routes (`/`, `/audits`, `/bridge`, `/time-travel`): merge them with
/// `rest::router`, whose routes all live under `/v1/`.
pub fn router(lake: Catalog, options: Options) -> Router {
    let app = App {
        lake,
        landing: options.landing,
        token: options.token.filter(|t| !t.is_empty()).map(Arc::from),
        bridges: Arc::default(),
    };
    Router::new()
        .route("/", get(revenue))
        .route("/audits", get(audits))
        .route("/bridge", get(bridge))
        .route("/time-travel", get(time_travel))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// The time travel and month a request asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    pub publish: Option<u64>,
    /// As typed, and the instant it means.
    pub as_of: Option<(String, DateTime<Utc>)>,
    pub month: Option<Month>,
}

/// `2026-08-17T12:00`, RFC 3339, or a day (its last second) — as `sugarshack query --as-of`.
pub use shack::publish::parse_as_of;

/// Read the query string. Empty values are absent (what an untouched form field sends);
/// unknown names are ignored; a value that does not parse is a [`DashboardError::BadParam`].
pub fn parse_params(query: Option<&str>) -> Result<Params> {
    let mut p = Params::default();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        match &*k {
            "publish" => {
                let n = v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    DashboardError::BadParam {
                        name: "publish",
                        value: v.to_string(),
                        why: "a publish is a number from 1 (`sugarshack history` lists them)"
                            .into(),
                    }
                })?;
                p.publish = Some(n);
            }
            "as_of" => {
                let t = parse_as_of(v).ok_or_else(|| DashboardError::BadParam {
                    name: "as_of",
                    value: v.to_string(),
                    why: "not a day (2026-08-16) or an instant (2026-08-17T12:00)".into(),
                })?;
                p.as_of = Some((v.to_string(), t));
            }
            "month" => {
                p.month = Some(Month::parse(v).ok_or_else(|| DashboardError::BadParam {
                    name: "month",
                    value: v.to_string(),
                    why: "not a month like 2026-08".into(),
                })?);
            }
            _ => {}
        }
    }
    if p.publish.is_some() && p.as_of.is_some() {
        return Err(DashboardError::BadParam {
            name: "as_of",
            value: p.as_of.map(|(s, _)| s).unwrap_or_default(),
            why: "give a publish or an as-of date, not both".into(),
        });
    }
    Ok(p)
}

/// The publish a request reads, from the log.
pub fn resolve(log: Log, params: &Params) -> Result<View> {
    let latest = log.latest();
    let (shown, until, keep) = match (params.publish, &params.as_of) {
        (Some(n), _) => (
            Some(log.number(n).ok_or_else(|| DashboardError::NoSuchPublish {
                number: n,
                range: log.range(),
            })?),
            None,
            format!("?publish={n}"),
        ),
        (None, Some((typed, t))) => (
            Some(
                log.at_or_before(*t)
                    .ok_or_else(|| DashboardError::NothingPublishedBy {
                        at: pages::stamp(*t),
                        range: log.range(),
                    })?,
            ),
            Some(*t),
            format!(
                "?{}",
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("as_of", typed)
                    .finish()
            ),
        ),
        (None, None) => (latest.clone(), None, String::new()),
    };
    let blocked = match &shown {
        Some(p) => log.blocked_after(p, until),
        None => log.records().to_vec(),
    };
    Ok(View {
        travelling: params.publish.is_some() || params.as_of.is_some(),
        as_of_typed: params.as_of.as_ref().map(|(s, _)| s.clone()),
        log,
        shown,
        latest,
        blocked,
        keep,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Page {
    Revenue,
    Audits,
    Bridge,
    TimeTravel,
}

impl Page {
    fn path(self) -> &'static str {
        match self {
            Page::Revenue => "/",
            Page::Audits => "/audits",
            Page::Bridge => "/bridge",
            Page::TimeTravel => "/time-travel",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Page::Revenue => "Revenue",
            Page::Audits => "Audits",
            Page::Bridge => "The bridge",
            Page::TimeTravel => "Time travel",
        }
    }
}

async fn revenue(State(app): State<App>, RawQuery(q): RawQuery) -> Response {
    app.page(Page::Revenue, q).await
}

async fn audits(State(app): State<App>, RawQuery(q): RawQuery) -> Response {
    app.page(Page::Audits, q).await
}

async fn bridge(State(app): State<App>, RawQuery(q): RawQuery) -> Response {
    app.page(Page::Bridge, q).await
}

async fn time_travel(State(app): State<App>, RawQuery(q): RawQuery) -> Response {
    app.page(Page::TimeTravel, q).await
}

impl App {
    async fn page(&self, page: Page, query: Option<String>) -> Response {
        let log = Log::read(&self.lake).await;
        let publishes: Vec<(u64, String)> = log
            .as_ref()
            .map(|l| {
                l.publishes()
                    .iter()
                    .map(|p| (p.number(), pages::stamp(p.as_of())))
                    .collect()
            })
            .unwrap_or_default();
        let params = parse_params(query.as_deref());
        let (picked, as_of, month) = match &params {
            Ok(p) => (
                p.publish,
                p.as_of.as_ref().map(|(s, _)| s.clone()),
                p.month.map(|m| m.to_string()),
            ),
            Err(_) => (None, None, None),
        };
        let result = match (log, params) {
            (Ok(log), Ok(params)) => self.body(page, log, &params).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let (status, body) = match result {
            Ok(body) => (StatusCode::OK, body),
            Err(e) => (
                e.status(),
                format!(
                    r#"<h1>{}</h1><p class="banner" id="error">{}</p><p><a href="{}">Back to the latest publish</a></p>"#,
                    match e.status() {
                        StatusCode::BAD_REQUEST => "Bad request",
                        StatusCode::NOT_FOUND => "Not found",
                        _ => "Could not draw this page",
                    },
                    escape(&e.to_string()),
                    page.path()
                ),
            ),
        };
        let keep = match (picked, &as_of) {
            (Some(n), _) if status == StatusCode::OK => format!("?publish={n}"),
            (None, Some(t)) if status == StatusCode::OK => format!(
                "?{}",
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("as_of", t)
                    .finish()
            ),
            _ => String::new(),
        };
        let html = html::page(
            &Frame {
                path: page.path(),
                title: page.title(),
                keep: &keep,
                publishes: &publishes,
                picked,
                picked_as_of: as_of.as_deref(),
                month: month.as_deref(),
            },
            &body,
        );
        let mut response = (status, html).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        response
    }

    async fn body(&self, page: Page, log: Log, params: &Params) -> Result<String> {
        let view = resolve(log, params)?;
        let Some(shown) = view.shown.clone() else {
            return Ok(format!(
                "<h1>{}</h1>{}",
                page.title(),
                pages::top(&view, page.path())
            ));
        };
        if page == Page::Audits {
            return Ok(pages::render_audits(&view));
        }
        let at = AtPublish::open(&self.lake, &shown).await?;
        match page {
            Page::Revenue => Ok(pages::render_revenue(
                &view,
                &Revenue::read(&at, params.month).await?,
            )),
            Page::Bridge => {
                let data = Bridge::read(&at, params.month, async |m| {
                    self.comparison(shown.record(), m).await
                })
                .await?;
                Ok(pages::render_bridge(&view, &data))
            }
            Page::TimeTravel => Ok(pages::render_time_travel(
                &view,
                &TimeTravel::read(&at, &self.lake, &view.log, params.month).await?,
            )),
            Page::Audits => Ok(pages::render_audits(&view)),
        }
    }

    /// `shack::compare` of the month at the publish (cached: it reads the landing files).
    async fn comparison(
        &self,
        record: &shack::PublishRecord,
        month: Month,
    ) -> std::result::Result<Comparison, String> {
        let key = (record.seq, month);
        if let Some(c) = self.bridges.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let Some(landing) = self.landing.as_ref().filter(|l| l.join("landing").is_dir()) else {
            return Err(match &self.landing {
                Some(l) => format!(
                    "it reads the landing files, and {} holds no landing/ folder",
                    l.join("landing").display()
                ),
                None => "it reads the landing files, and this server was started without a local landing zone (--landing)".into(),
            });
        };
        let c =
            shack::compare::compare_publish(&self.lake, landing, record, (month.year, month.month))
                .await
                .map_err(|e| e.to_string())?;
        if let Ok(mut m) = self.bridges.lock() {
            m.insert(key, c.clone());
        }
        Ok(c)
    }
}

/// With a token: Basic (the token as password) or Bearer; else 401 asking for Basic.
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    if let Some(token) = &app.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let ok = given.is_some_and(|g| authorised(g, token));
        if !ok {
            let mut r = (
                StatusCode::UNAUTHORIZED,
                "the dashboard needs the server's token: any user name, the token as password\n",
            )
                .into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"sugarshack\", charset=\"UTF-8\""),
            );
            return r;
        }
    }
    next.run(req).await
}

/// Does an `Authorization` header carry `token` (Bearer, or Basic with it as the password)?
pub fn authorised(header: &str, token: &str) -> bool {
    if let Some(b) = header.strip_prefix("Bearer ") {
        return same(b.as_bytes(), token.as_bytes());
    }
    let Some(encoded) = header.strip_prefix("Basic ") else {
        return false;
    };
    let Some(decoded) = base64_decode(encoded.trim()) else {
        return false;
    };
    match decoded.iter().position(|b| *b == b':') {
        Some(i) => same(&decoded[i + 1..], token.as_bytes()),
        None => false,
    }
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 with padding (what browsers send for Basic authentication).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
