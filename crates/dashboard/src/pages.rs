//! The four pages: what each reads (always through [`AtPublish`], at one publish) and how its
//! data becomes HTML. Reading and drawing are separate functions, so the drawing is tested on
//! data made by hand.

use std::fmt::Write;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use shack::PublishRecord;
use shack::compare::Comparison;

use crate::html::{badge, cad, escape, figure, sql_details, thousands};
use crate::published::{AtPublish, Log, Published, dates, ints};
use crate::svg::{self, Bar, Line, Step};
use crate::{DashboardError, Result};

/// A calendar month.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    pub year: i32,
    pub month: u32,
}

impl Month {
    /// `2026-08`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Month> {
        let (y, m) = s.split_once('-')?;
        if y.len() != 4 || m.len() != 2 {
            return None;
        }
        let month = Month {
            year: y.parse().ok()?,
            month: m.parse().ok()?,
        };
        month.first_day().map(|_| month)
    }

    pub fn of(d: NaiveDate) -> Month {
        Month {
            year: d.year(),
            month: d.month(),
        }
    }

    pub fn first_day(self) -> Option<NaiveDate> {
        NaiveDate::from_ymd_opt(self.year, self.month, 1)
    }

    pub fn next(self) -> Month {
        if self.month == 12 {
            Month {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Month {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    pub fn previous(self) -> Month {
        if self.month == 1 {
            Month {
                year: self.year - 1,
                month: 12,
            }
        } else {
            Month {
                year: self.year,
                month: self.month - 1,
            }
        }
    }

    /// Midnight UTC of its first day.
    pub fn start(self) -> Option<DateTime<Utc>> {
        self.first_day()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| Utc.from_utc_datetime(&t))
    }

    fn bounds(self) -> (String, String) {
        (
            format!("{}-{:02}-01", self.year, self.month),
            format!("{}-{:02}-01", self.next().year, self.next().month),
        )
    }
}

impl std::fmt::Display for Month {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{:02}", self.year, self.month)
    }
}

/// The month a page opens on: the month before the as-of when the publish has cash in it (what
/// `sugarshack compare` weighs by default: on 8 September, August), else the as-of's own month.
pub fn default_month(as_of: DateTime<Utc>, months: &[Month]) -> Month {
    let own = Month::of(as_of.date_naive());
    let before = own.previous();
    if months.contains(&before) {
        before
    } else if months.contains(&own) || months.is_empty() {
        own
    } else {
        months.last().copied().unwrap_or(own)
    }
}

/// The SQL every page runs; each number on a page shows its query as a `sugarshack query
/// --publish N` command.
pub mod sql {
    use super::Month;

    pub const DAILY_CASH: &str = "select processor_date, sum(net_cad_minor) as net_cad_minor from gold.mart_daily_cash group by processor_date order by processor_date";
    pub const ORDER_REVENUE: &str = "select order_date, sum(net_cad_minor) as net_cad_minor from gold.mart_order_revenue group by order_date order by order_date";
    pub const WAITING: &str = "select count(*) as waiting from gold.fulfilment_queue";
    pub const OVER_72H: &str =
        "select count(*) as over_72h from gold.fulfilment_queue where over_72h";

    /// The month's cash by processor date (what `two-answers` calls cash).
    pub fn month_cash(m: Month) -> String {
        let (from, to) = m.bounds();
        format!(
            "select sum(net_cad_minor) as net_cad_minor from gold.mart_daily_cash where processor_date >= date '{from}' and processor_date < date '{to}'"
        )
    }

    /// The month's orders by order date (what `two-answers` calls orders).
    pub fn month_orders(m: Month) -> String {
        let (from, to) = m.bounds();
        format!(
            "select sum(net_cad_minor) as net_cad_minor from gold.mart_order_revenue where order_date >= date '{from}' and order_date < date '{to}'"
        )
    }
}

/// A number and the command that produced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figure {
    pub value: Option<i64>,
    pub command: String,
}

impl Figure {
    async fn read(at: &AtPublish, sql: &str) -> Result<Figure> {
        let (value, command) = at.scalar(sql).await?;
        Ok(Figure { value, command })
    }

    fn money(&self) -> String {
        figure(
            &self.value.map(cad).unwrap_or_else(|| "—".into()),
            self.value,
            &self.command,
        )
    }

    fn count(&self) -> String {
        figure(
            &self
                .value
                .map(|v| thousands(v.unsigned_abs()))
                .unwrap_or_else(|| "—".into()),
            self.value,
            &self.command,
        )
    }
}

/// A daily series and the command that produced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    pub points: Vec<(NaiveDate, i64)>,
    pub command: String,
}

impl Series {
    async fn read(at: &AtPublish, sql: &str) -> Result<Series> {
        let rows = at.query(sql).await?;
        let days = dates(&rows.batches, 0)?;
        let values = ints(&rows.batches, 1)?;
        let points = days
            .into_iter()
            .zip(values)
            .filter_map(|(d, v)| Some((d?, v.unwrap_or(0))))
            .collect();
        Ok(Series {
            points,
            command: rows.command,
        })
    }

    fn months(&self) -> Vec<Month> {
        let mut m: Vec<Month> = self.points.iter().map(|(d, _)| Month::of(*d)).collect();
        m.dedup();
        m
    }

    /// The series as bars, the month's days in full colour and the others lighter.
    fn chart(&self, title: &str, month: Month) -> String {
        let bars: Vec<Bar> = self
            .points
            .iter()
            .map(|(d, v)| Bar {
                label: d.format("%m-%d").to_string(),
                value: *v,
                dim: Month::of(*d) != month,
            })
            .collect();
        let every = bars.len().div_ceil(12).max(1);
        svg::bar_chart(title, &bars, every)
    }
}

/// What is shown and why: the publish a page reads, and the runs blocked after it.
#[derive(Clone, Debug)]
pub struct View {
    pub log: Log,
    /// The publish the page reads (`None`: nothing published yet).
    pub shown: Option<Published>,
    /// The newest publish.
    pub latest: Option<Published>,
    /// The runs recorded after the shown publish and before the next one: all blocked.
    pub blocked: Vec<PublishRecord>,
    /// True when the reader chose a publish or a date (time travel).
    pub travelling: bool,
    /// `?publish=2`, `?as_of=2026-08-17` or empty: kept on every link.
    pub keep: String,
    /// The as-of date typed, if one was.
    pub as_of_typed: Option<String>,
}

impl View {
    /// A link to `path` keeping the time travel, with a month.
    pub fn link(&self, path: &str, month: Option<Month>) -> String {
        let mut q = self.keep.clone();
        if let Some(m) = month {
            q.push(if q.is_empty() { '?' } else { '&' });
            let _ = write!(q, "month={m}");
        }
        format!("{path}{q}")
    }
}

pub fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn recorded(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .map(stamp)
        .unwrap_or_else(|| "?".into())
}

/// The big as-of, the time-travel note and the blocked banner: the top of every page.
pub fn top(view: &View, path: &str) -> String {
    let mut out = String::new();
    let Some(shown) = &view.shown else {
        out.push_str(r#"<p class="asof" id="as-of">Nothing published yet<small>No build has passed its audits: there are no graded numbers to show.</small></p>"#);
        if let Some(last) = view.log.records().last() {
            let _ = write!(
                out,
                r#"<div class="banner" id="blocked"><strong>The last run (as of {}) was blocked.</strong>{}</div>"#,
                escape(&stamp(last.as_of)),
                blocking_reasons(last)
            );
        }
        return out;
    };
    let r = shown.record();
    let _ = write!(
        out,
        r#"<p class="asof">as of <span id="as-of" data-publish="{n}">{}</span><small>publish {n}{} · recorded {} · tag <code>publish-{n}</code></small></p>"#,
        escape(&stamp(r.as_of)),
        if r.is_rollback() {
            format!(" ({})", escape(&r.audits[0].reason))
        } else {
            String::new()
        },
        escape(&recorded(r.recorded_at_ms)),
        n = shown.number()
    );
    if view.travelling
        && let Some(latest) = &view.latest
        && latest.number() != shown.number()
    {
        let _ = write!(
            out,
            r#"<div class="banner travel" id="travel"><strong>Time travel: these are publish {}'s numbers.</strong>The latest is publish {} (as of {}): <a href="{}">show the latest</a>.</div>"#,
            shown.number(),
            latest.number(),
            escape(&stamp(latest.as_of())),
            escape(path)
        );
    }
    if let Some(last) = view.blocked.last() {
        let more = match view.blocked.len() {
            1 => String::new(),
            n => format!(" ({n} runs in a row)"),
        };
        let is_latest = view
            .latest
            .as_ref()
            .is_some_and(|l| l.number() == shown.number());
        let headline = if is_latest {
            format!(
                "The last run (as of {}) was blocked{more}: gold still shows the build as of {}.",
                stamp(last.as_of),
                stamp(r.as_of)
            )
        } else {
            format!(
                "The run after this publish (as of {}) was blocked{more}: gold kept showing the build as of {} until the next publish.",
                stamp(last.as_of),
                stamp(r.as_of)
            )
        };
        let _ = write!(
            out,
            r#"<div class="banner" id="blocked"><strong>{}</strong>{}<a href="{}">See its audits</a>.</div>"#,
            escape(&headline),
            blocking_reasons(last),
            escape(&view.link("/audits", None))
        );
    }
    out
}

fn blocking_reasons(r: &PublishRecord) -> String {
    let mut out = String::new();
    for a in r
        .audits
        .iter()
        .filter(|a| a.verdict == shack::Verdict::Block)
    {
        let _ = write!(
            out,
            r#"<span class="reason">{} {}: {}</span><br>"#,
            badge("BLOCK"),
            escape(&a.name),
            escape(&a.reason)
        );
    }
    out
}

fn month_links(view: &View, path: &str, months: &[Month], chosen: Month) -> String {
    if months.len() < 2 {
        return String::new();
    }
    let mut out = String::from(r#"<p class="months">Month: "#);
    for m in months {
        let class = if *m == chosen { r#" class="here""# } else { "" };
        let _ = write!(
            out,
            r#"<a{class} href="{}">{m}</a>"#,
            escape(&view.link(path, Some(*m)))
        );
    }
    out.push_str("</p>");
    out
}

// ---------------------------------------------------------------------------------------------
// Revenue

/// The Revenue page's numbers.
#[derive(Clone, Debug)]
pub struct Revenue {
    pub month: Month,
    pub months: Vec<Month>,
    pub daily_cash: Series,
    pub order_revenue: Series,
    pub month_cash: Figure,
    pub month_orders: Figure,
    pub waiting: Figure,
    pub over_72h: Figure,
}

impl Revenue {
    pub async fn read(at: &AtPublish, month: Option<Month>) -> Result<Revenue> {
        let daily_cash = Series::read(at, sql::DAILY_CASH).await?;
        let order_revenue = Series::read(at, sql::ORDER_REVENUE).await?;
        let months = daily_cash.months();
        let month = month.unwrap_or_else(|| default_month(at.publish().as_of(), &months));
        Ok(Revenue {
            month,
            months,
            month_cash: Figure::read(at, &sql::month_cash(month)).await?,
            month_orders: Figure::read(at, &sql::month_orders(month)).await?,
            waiting: Figure::read(at, sql::WAITING).await?,
            over_72h: Figure::read(at, sql::OVER_72H).await?,
            daily_cash,
            order_revenue,
        })
    }
}

pub fn render_revenue(view: &View, data: &Revenue) -> String {
    let mut out = String::from("<h1>Revenue</h1>");
    out.push_str(&top(view, "/"));
    out.push_str(&month_links(view, "/", &data.months, data.month));
    let m = data.month;
    let _ = write!(
        out,
        r#"<div class="cards"><div class="card" id="month-cash"><div class="what">{m} cash, by processor date</div>{}</div><div class="card" id="month-orders"><div class="what">{m} orders, by order date</div>{}</div><div class="card" id="queue"><div class="what">orders paid, awaiting shipment</div>{}</div><div class="card" id="queue-over"><div class="what">of which paid over 72 hours ago</div>{}</div></div>"#,
        data.month_cash.money(),
        data.month_orders.money(),
        data.waiting.count(),
        data.over_72h.count()
    );
    let _ = write!(
        out,
        r#"<h2>Daily cash, by processor date</h2><p class="muted">What the processor booked each UTC day, net of refunds, in CAD: what finance reconciles with the settlements. {m}'s days in full colour; the as-of's own day is only partly in.</p>{}{}"#,
        data.daily_cash
            .chart("Daily cash by processor date", data.month),
        sql_details(&data.daily_cash.command)
    );
    let _ = write!(
        out,
        r#"<h2>Order revenue, by order date</h2><p class="muted">Each order's payments and refunds on the day (Halifax time) the customer ordered, in CAD: what product uses. A refund next month changes this month's bars.</p>{}{}"#,
        data.order_revenue
            .chart("Order revenue by order date", data.month),
        sql_details(&data.order_revenue.command)
    );
    // The numbers behind the charts, day by day.
    let mut days: std::collections::BTreeMap<NaiveDate, (Option<i64>, Option<i64>)> =
        std::collections::BTreeMap::new();
    for (d, v) in &data.daily_cash.points {
        days.entry(*d).or_default().0 = Some(*v);
    }
    for (d, v) in &data.order_revenue.points {
        days.entry(*d).or_default().1 = Some(*v);
    }
    out.push_str(r#"<details><summary>The numbers behind the charts</summary><div class="scroll"><table><thead><tr><th>day</th><th class="r">cash (processor date)</th><th class="r">orders (order date)</th></tr></thead><tbody>"#);
    for (d, (c, o)) in &days {
        let _ = write!(
            out,
            r#"<tr><td>{d}</td><td class="r num">{}</td><td class="r num">{}</td></tr>"#,
            c.map(cad).unwrap_or_default(),
            o.map(cad).unwrap_or_default()
        );
    }
    out.push_str("</tbody></table></div></details>");
    out
}

// ---------------------------------------------------------------------------------------------
// Audits

pub fn render_audits(view: &View) -> String {
    let mut out = String::from("<h1>Audits</h1>");
    out.push_str(&top(view, "/audits"));
    let records = match &view.shown {
        Some(p) => view.log.through(p, None),
        None => view.log.records().to_vec(),
    };
    if let Some(last) = records.last() {
        let _ = write!(
            out,
            r#"<h2>The last run: as of {}, {}</h2>{}"#,
            escape(&stamp(last.as_of)),
            badge(last.status()),
            audit_cards(last)
        );
        if let Some(p) = &view.shown
            && p.record().seq != last.seq
        {
            let _ = write!(
                out,
                r#"<h2>The build shown: publish {}, as of {}</h2>{}"#,
                p.number(),
                escape(&stamp(p.as_of())),
                audit_cards(p.record())
            );
        }
    } else {
        out.push_str("<p>No run has been graded yet.</p>");
    }
    out.push_str(r#"<h2>History</h2><p class="muted">Every publish, blocked run and rollback, newest first (as <code>sugarshack history</code> lists them).</p><div class="scroll"><table id="history"><thead><tr><th>seq</th><th>publish</th><th>status</th><th>as of</th><th>audits</th><th>recorded</th></tr></thead><tbody>"#);
    for r in records.iter().rev() {
        let publish = match r.publish_number {
            Some(n) => format!(
                r#"<a href="{}">publish-{n}</a>"#,
                escape(&format!("/audits?publish={n}"))
            ),
            None => "—".into(),
        };
        let audits: String = if r.is_rollback() {
            escape(&r.audits[0].reason)
        } else {
            r.audits
                .iter()
                .map(|a| {
                    format!(
                        r#"<span title="{}">{} {}</span> "#,
                        escape(&a.reason),
                        escape(&a.name),
                        badge(a.verdict.as_str())
                    )
                })
                .collect()
        };
        let _ = write!(
            out,
            r#"<tr data-seq="{}"><td>{}</td><td>{publish}</td><td>{}</td><td>{}</td><td>{audits}</td><td class="muted">{}</td></tr>"#,
            r.seq,
            r.seq,
            badge(r.status()),
            escape(&stamp(r.as_of)),
            escape(&recorded(r.recorded_at_ms))
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

fn audit_cards(r: &PublishRecord) -> String {
    let mut out = String::from(r#"<div class="cards audits">"#);
    for a in &r.audits {
        let evidence = serde_json::to_string_pretty(&a.evidence).unwrap_or_default();
        let _ = write!(
            out,
            r#"<div class="card audit" data-verdict="{}"><div>{} <strong>{}</strong></div><div>{}</div><details><summary>evidence</summary><pre>{}</pre></details></div>"#,
            a.verdict.as_str(),
            badge(a.verdict.as_str()),
            escape(&a.name),
            escape(&a.reason),
            escape(&evidence)
        );
    }
    out.push_str("</div>");
    out
}

// ---------------------------------------------------------------------------------------------
// The bridge

/// The bridge page's numbers.
#[derive(Clone, Debug)]
pub struct Bridge {
    pub month: Month,
    pub months: Vec<Month>,
    /// The comparison, or why there is none (no landing zone here).
    pub comparison: std::result::Result<Comparison, String>,
    /// `sugarshack compare …`: what gives the same bridge in a shell.
    pub compare_command: String,
    pub gold_month: Figure,
    pub waiting: Figure,
    pub over_72h: Figure,
}

impl Bridge {
    pub async fn read(
        at: &AtPublish,
        month: Option<Month>,
        compare: impl AsyncFnOnce(Month) -> std::result::Result<Comparison, String>,
    ) -> Result<Bridge> {
        let months = Series::read(at, sql::DAILY_CASH).await?.months();
        let month = month.unwrap_or_else(|| default_month(at.publish().as_of(), &months));
        let through = at.publish().as_of().format("%Y-%m-%dT%H:%M:%SZ");
        Ok(Bridge {
            month,
            months,
            comparison: compare(month).await,
            compare_command: format!("sugarshack compare --through {through} --month {month}"),
            gold_month: Figure::read(at, &sql::month_cash(month)).await?,
            waiting: Figure::read(at, sql::WAITING).await?,
            over_72h: Figure::read(at, sql::OVER_72H).await?,
        })
    }
}

pub fn render_bridge(view: &View, data: &Bridge) -> String {
    let mut out = String::from("<h1>The bridge: the bucket brigade to gold</h1>");
    out.push_str(&top(view, "/bridge"));
    out.push_str(&month_links(view, "/bridge", &data.months, data.month));
    let m = data.month;
    let c = match &data.comparison {
        Ok(c) => c,
        Err(why) => {
            let _ = write!(
                out,
                r#"<p class="banner travel">The bridge is not available here: {}</p><h2>Gold</h2><p>{m} cash at this publish: {}</p>"#,
                escape(why),
                data.gold_month.money()
            );
            return out;
        }
    };
    let _ = write!(
        out,
        r#"<p class="muted">{m} net revenue as the old dashboard computed it straight from the landing files, then each of its errors measured directly in the same files, ending at gold.</p>"#
    );
    let mut steps = vec![Step::Total {
        label: "bucket brigade dashboard".into(),
        value: c.naive_minor,
    }];
    for l in &c.lines {
        steps.push(Step::Delta {
            label: l.label.clone(),
            amount: l.amount_minor,
            running: l.running_minor,
        });
    }
    steps.push(Step::Total {
        label: "gold.mart_daily_cash".into(),
        value: c.gold_minor,
    });
    // On a phone the waterfall keeps a readable width and scrolls sideways.
    let _ = write!(
        out,
        r#"<div class="scroll"><div class="wide">{}</div></div>"#,
        svg::waterfall(&format!("{m} bridge"), &steps)
    );
    out.push_str(r#"<div class="scroll"><table id="bridge"><thead><tr><th></th><th class="r">change</th><th class="r">running total</th></tr></thead><tbody>"#);
    let _ = write!(
        out,
        r#"<tr><td>bucket brigade dashboard</td><td></td><td class="r num" data-value="{}">{}</td></tr>"#,
        c.naive_minor,
        cad(c.naive_minor)
    );
    for l in &c.lines {
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td class="r num">{}{}</td><td class="r num" data-value="{}">{}</td></tr>"#,
            escape(&l.label),
            if l.amount_minor < 0 { "−" } else { "+" },
            cad(l.amount_minor.abs()),
            l.running_minor,
            cad(l.running_minor)
        );
    }
    let verdict = if c.matches() {
        "matches".to_string()
    } else {
        format!("the bridge ends {} away", cad(c.end_minor - c.gold_minor))
    };
    let _ = write!(
        out,
        r#"<tr id="gold-line"><td><strong>gold.mart_daily_cash</strong> ({})</td><td></td><td class="r">{}</td></tr></tbody></table></div><p class="muted">The bucket brigade's lines are computed from the landing files that had arrived by this publish's as-of; the same bridge in a shell:</p><code class="cmd">{}</code>"#,
        escape(&verdict),
        data.gold_month.money(),
        escape(&data.compare_command)
    );
    let _ = write!(
        out,
        r#"<h2>Awaiting shipment</h2><div class="scroll"><table id="queue"><thead><tr><th></th><th class="r">all</th><th class="r">over 72h</th></tr></thead><tbody><tr><td>bucket brigade (the last change received per order)</td><td class="r num">{}</td><td class="r num">{}</td></tr><tr><td>gold.fulfilment_queue</td><td class="r">{}</td><td class="r">{}</td></tr></tbody></table></div>"#,
        thousands(c.queue_naive.waiting),
        thousands(c.queue_naive.over_72h),
        data.waiting.count(),
        data.over_72h.count()
    );
    out
}

// ---------------------------------------------------------------------------------------------
// Time travel

/// One as-of of the two-right-answers table.
#[derive(Clone, Debug)]
pub struct Answer {
    pub publish: u64,
    pub as_of: DateTime<Utc>,
    pub cash: Figure,
    pub orders: Figure,
}

/// The time-travel page's numbers.
#[derive(Clone, Debug)]
pub struct TimeTravel {
    pub month: Month,
    pub months: Vec<Month>,
    pub answers: Vec<Answer>,
    /// How many publishes the answers were picked from.
    pub of: usize,
    /// True when they are the publishes after the month ended; false: during it.
    pub ended: bool,
}

/// At most this many rows in the two-answers table.
pub const MAX_ANSWERS: usize = 10;

/// Up to `max` of `items`, evenly spaced, always the first and the last.
pub fn thin<T: Clone>(items: &[T], max: usize) -> Vec<T> {
    if items.len() <= max || max < 2 {
        return items
            .iter()
            .take(max.max(items.len().min(1)))
            .cloned()
            .collect();
    }
    let last = items.len() - 1;
    let mut picked: Vec<usize> = (0..max).map(|k| k * last / (max - 1)).collect();
    picked.dedup();
    picked.into_iter().map(|i| items[i].clone()).collect()
}

impl TimeTravel {
    /// The two right answers for a month at every publish from the month's start up to the
    /// shown one (at most [`MAX_ANSWERS`], evenly spaced).
    pub async fn read(
        at: &AtPublish,
        lake: &lake::Catalog,
        log: &Log,
        month: Option<Month>,
    ) -> Result<TimeTravel> {
        let months = Series::read(at, sql::DAILY_CASH).await?.months();
        let shown = at.publish();
        let month = month.unwrap_or_else(|| default_month(shown.as_of(), &months));
        let start = month.start().ok_or_else(|| DashboardError::BadParam {
            name: "month",
            value: month.to_string(),
            why: "not a month".into(),
        })?;
        // The month's answers after it ended, when there are any (what the story weighs: cash
        // settles, orders keep moving); while it is still running, as it went.
        let end = month
            .next()
            .start()
            .ok_or_else(|| DashboardError::BadParam {
                name: "month",
                value: month.to_string(),
                why: "no next month".into(),
            })?;
        let upto: Vec<Published> = log
            .publishes()
            .into_iter()
            .filter(|p| p.record().seq <= shown.record().seq)
            .collect();
        let after: Vec<Published> = upto.iter().filter(|p| p.as_of() >= end).cloned().collect();
        let ended = !after.is_empty();
        let candidates = if ended {
            after
        } else {
            upto.into_iter().filter(|p| p.as_of() >= start).collect()
        };
        let mut answers = Vec::new();
        for p in thin(&candidates, MAX_ANSWERS) {
            let here = if p.number() == shown.number() {
                None
            } else {
                Some(AtPublish::open(lake, &p).await?)
            };
            let reader = here.as_ref().unwrap_or(at);
            answers.push(Answer {
                publish: p.number(),
                as_of: p.as_of(),
                cash: Figure::read(reader, &sql::month_cash(month)).await?,
                orders: Figure::read(reader, &sql::month_orders(month)).await?,
            });
        }
        Ok(TimeTravel {
            month,
            months,
            answers,
            of: candidates.len(),
            ended,
        })
    }
}

pub fn render_time_travel(view: &View, data: &TimeTravel) -> String {
    let mut out = String::from("<h1>Time travel</h1>");
    out.push_str(&top(view, "/time-travel"));
    out.push_str(r#"<p>Pick a publish or an as-of date above: every page then shows that publish's numbers, read at its tag <code>publish-N</code> — what <code>sugarshack query --publish N</code> and <code>--as-of</code> read.</p>"#);
    out.push_str(&month_links(view, "/time-travel", &data.months, data.month));
    let m = data.month;
    let _ = write!(
        out,
        r#"<h2>Two right answers for {m}</h2><p class="muted">{m}'s cash (by the processor's UTC day, what finance reconciles) and its orders (by the Halifax day the customer ordered, what product uses), as each publish saw them: cash settles, orders keep moving as refunds of the month's orders arrive. {}</p>"#,
        {
            let which = if data.ended {
                format!("publishes after {m} ended")
            } else {
                format!("publishes since {m} began (it has not ended at this publish)")
            };
            if data.of > data.answers.len() {
                format!(
                    "{} of the {} {which}, evenly spaced.",
                    data.answers.len(),
                    data.of
                )
            } else {
                format!("Every one of the {which}.")
            }
        }
    );
    let xs: Vec<String> = data
        .answers
        .iter()
        .map(|a| a.as_of.format("%m-%d %H:%M").to_string())
        .collect();
    out.push_str(&svg::line_chart(
        &format!("{m} cash and orders by as-of"),
        &xs,
        &[
            Line {
                name: format!("{m} cash (processor date)"),
                class: "a",
                values: data.answers.iter().map(|a| a.cash.value).collect(),
            },
            Line {
                name: format!("{m} orders (order date)"),
                class: "b",
                values: data.answers.iter().map(|a| a.orders.value).collect(),
            },
        ],
    ));
    let _ = write!(
        out,
        r#"<div class="scroll"><table id="two-answers"><thead><tr><th>as of</th><th>publish</th><th class="r">{m} cash<br><span class="muted">(by processor date)</span></th><th class="r">{m} orders<br><span class="muted">(by order date)</span></th></tr></thead><tbody>"#
    );
    for a in &data.answers {
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td><a href="{}">{}</a></td><td class="r">{}</td><td class="r">{}</td></tr>"#,
            escape(&stamp(a.as_of)),
            escape(&format!("/?publish={}", a.publish)),
            a.publish,
            a.cash.money(),
            a.orders.money()
        );
    }
    out.push_str("</tbody></table></div>");
    out.push_str(r#"<h2>Every publish</h2><div class="scroll"><table id="publishes"><thead><tr><th>publish</th><th>status</th><th>as of</th><th>pages</th></tr></thead><tbody>"#);
    for p in view.log.publishes().iter().rev() {
        let n = p.number();
        let _ = write!(
            out,
            r#"<tr><td>{n}</td><td>{}</td><td>{}</td><td><a href="/?publish={n}">revenue</a> · <a href="/audits?publish={n}">audits</a> · <a href="/bridge?publish={n}">bridge</a></td></tr>"#,
            badge(p.record().status()),
            escape(&stamp(p.as_of()))
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shack::{AuditResult, Verdict};
    use std::collections::BTreeMap;

    fn rec(seq: u64, n: Option<u64>, day: u32, verdict: Verdict) -> PublishRecord {
        PublishRecord {
            seq,
            publish_number: n,
            as_of: Utc
                .with_ymd_and_hms(2026, 8, day, 12, 0, 0)
                .single()
                .expect("t"),
            audits: vec![
                AuditResult::new(
                    "quarantine rate",
                    verdict,
                    "payments 21.30% of 324 <mostly unsupported_api_version>",
                    serde_json::json!({"n": 1}),
                ),
                AuditResult::new("conservation", Verdict::Pass, "ok", serde_json::json!({})),
            ],
            snapshots: BTreeMap::new(),
            graded_version: seq,
            base_version: seq,
            recorded_at_ms: 0,
        }
    }

    fn view(log: Log, shown: u64, travelling: bool) -> View {
        let shown = log.number(shown);
        let blocked = shown
            .as_ref()
            .map(|p| log.blocked_after(p, None))
            .unwrap_or_default();
        View {
            latest: log.latest(),
            shown,
            blocked,
            travelling,
            keep: if travelling {
                "?publish=1".into()
            } else {
                String::new()
            },
            as_of_typed: None,
            log,
        }
    }

    fn fig(v: i64) -> Figure {
        Figure {
            value: Some(v),
            command: format!("sugarshack query --publish 1 \"select {v}\""),
        }
    }

    #[test]
    fn months_parse_and_default_to_the_month_before_when_it_has_cash() {
        assert_eq!(
            Month::parse("2026-08"),
            Some(Month {
                year: 2026,
                month: 8
            })
        );
        for bad in ["2026-13", "2026-8", "august", "", "2026-08-01"] {
            assert_eq!(Month::parse(bad), None, "{bad}");
        }
        let aug = Month::parse("2026-08").expect("m");
        let sep = Month::parse("2026-09").expect("m");
        let t = Utc
            .with_ymd_and_hms(2026, 9, 8, 12, 0, 0)
            .single()
            .expect("t");
        assert_eq!(default_month(t, &[aug, sep]), aug);
        let t = Utc
            .with_ymd_and_hms(2026, 8, 16, 23, 59, 59)
            .single()
            .expect("t");
        assert_eq!(default_month(t, &[aug]), aug);
        assert_eq!(sql::month_cash(aug).matches("date '2026-09-01'").count(), 1);
        assert_eq!(
            Month::parse("2026-12").expect("m").next(),
            Month::parse("2027-01").expect("m")
        );
    }

    #[test]
    fn thinning_keeps_the_first_and_the_last() {
        let v: Vec<u32> = (1..=30).collect();
        let t = thin(&v, 10);
        assert_eq!(t.len(), 10);
        assert_eq!((t[0], t[9]), (1, 30));
        assert_eq!(thin(&v[..3], 10), vec![1, 2, 3]);
        assert!(thin::<u32>(&[], 10).is_empty());
    }

    #[test]
    fn a_blocked_run_after_the_publish_shows_the_banner_with_its_reason() {
        let log = Log::of(vec![
            rec(1, Some(1), 16, Verdict::Pass),
            rec(2, None, 17, Verdict::Block),
        ]);
        let v = view(log, 1, false);
        let html = top(&v, "/");
        assert!(html.contains("id=\"blocked\""));
        assert!(html.contains("gold still shows the build as of 2026-08-16 12:00 UTC"));
        assert!(html.contains("The last run (as of 2026-08-17 12:00 UTC) was blocked"));
        assert!(html.contains("quarantine rate: payments 21.30% of 324 &lt;mostly"));
        assert!(html.contains(r#"<span id="as-of" data-publish="1">2026-08-16 12:00 UTC</span>"#));
        // Audits: the last run is the blocked one; the build shown is publish 1.
        let audits = render_audits(&v);
        assert!(audits.contains("The last run: as of 2026-08-17 12:00 UTC"));
        assert!(audits.contains("The build shown: publish 1"));
        assert_eq!(audits.matches("<tr data-seq=").count(), 2);
        assert!(!audits.contains("<mostly"));
    }

    #[test]
    fn no_banner_once_a_later_publish_passed_and_a_travel_note_when_travelling() {
        let log = Log::of(vec![
            rec(1, Some(1), 16, Verdict::Pass),
            rec(2, None, 17, Verdict::Block),
            rec(3, Some(2), 17, Verdict::Pass),
        ]);
        let latest = view(log.clone(), 2, false);
        assert!(!top(&latest, "/").contains("id=\"blocked\""));
        let back = view(log, 1, true);
        let html = top(&back, "/");
        assert!(html.contains("Time travel: these are publish 1's numbers"));
        assert!(
            html.contains("id=\"blocked\""),
            "publish 1 was followed by a block"
        );
        assert!(html.contains("The run after this publish (as of 2026-08-17 12:00 UTC) was blocked: gold kept showing the build as of 2026-08-16 12:00 UTC until the next publish."));
    }

    #[test]
    fn nothing_published_says_so() {
        let log = Log::of(vec![rec(1, None, 17, Verdict::Block)]);
        let v = View {
            latest: None,
            shown: None,
            blocked: log.records().to_vec(),
            travelling: false,
            keep: String::new(),
            as_of_typed: None,
            log,
        };
        let html = top(&v, "/");
        assert!(html.contains("Nothing published yet"));
        assert!(html.contains("was blocked"));
    }

    #[test]
    fn the_revenue_page_draws_both_series_and_every_figure_with_its_sql() {
        let log = Log::of(vec![rec(1, Some(1), 16, Verdict::Pass)]);
        let v = view(log, 1, true);
        let day = |d: u32| NaiveDate::from_ymd_opt(2026, 8, d).expect("d");
        let data = Revenue {
            month: Month::parse("2026-08").expect("m"),
            months: vec![Month::parse("2026-08").expect("m")],
            daily_cash: Series {
                points: vec![(day(15), 10_000), (day(16), -500)],
                command: "sugarshack query --publish 1 \"select a\"".into(),
            },
            order_revenue: Series {
                points: vec![(day(16), 7_000)],
                command: "sugarshack query --publish 1 \"select b\"".into(),
            },
            month_cash: fig(9_500),
            month_orders: fig(7_000),
            waiting: fig(12),
            over_72h: fig(3),
        };
        let html = render_revenue(&v, &data);
        assert!(html.contains(r#"data-value="9500">C$95.00</span>"#));
        assert!(html.contains(r#"data-value="12">12</span>"#));
        assert_eq!(html.matches("<svg").count(), 2);
        assert_eq!(html.matches("class=\"cmd\"").count(), 6);
        assert!(html.contains("<title>08-16: -C$5.00</title>"));
        assert!(html.contains(
            "<td>2026-08-16</td><td class=\"r num\">-C$5.00</td><td class=\"r num\">C$70.00</td>"
        ));
    }

    #[test]
    fn the_bridge_page_says_why_when_there_is_no_landing_zone() {
        let log = Log::of(vec![rec(1, Some(1), 16, Verdict::Pass)]);
        let v = view(log, 1, false);
        let data = Bridge {
            month: Month::parse("2026-08").expect("m"),
            months: Vec::new(),
            comparison: Err("no landing zone <here>".into()),
            compare_command: "sugarshack compare".into(),
            gold_month: fig(1),
            waiting: fig(0),
            over_72h: fig(0),
        };
        let html = render_bridge(&v, &data);
        assert!(html.contains("not available here: no landing zone &lt;here&gt;"));
    }
}
