//! HTML pieces every page shares: escaping, money, the page frame (navigation, the time-travel
//! pickers, the inline stylesheet), and the SQL shown beside every number.
//!
//! Nothing from the lake or the request reaches a page unescaped: every text goes through
//! [`escape`], every attribute value too.

use std::fmt::Write;

/// Escape text for HTML text and attribute values (double- or single-quoted).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `1234567` → `1,234,567`.
pub use shack::thousands;

/// CAD minor units as the lake prints them: `C$1,479,502.22`, `-C$12.34`.
pub use shack::compare::cad;

/// A short axis label: `C$1.5M`, `C$250k`, `C$40`, `-C$2k` (integer arithmetic), with as many
/// decimals as ticks `step` minor units apart need to differ (`C$1.62M`, `C$1.64M`).
pub fn compact_cad(minor: i64, step: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let cents = minor.unsigned_abs();
    let step = step.unsigned_abs().max(1);
    let (unit, suffix) = if cents >= 100_000_000 {
        (100_000_000u64, "M")
    } else if cents >= 100_000 {
        (100_000, "k")
    } else {
        (100, "")
    };
    // Decimals so that one step shows: 0 when a step is at least a unit, up to 3.
    let mut decimals = 0u32;
    while decimals < 3 && step * 10u64.pow(decimals) < unit {
        decimals += 1;
    }
    let scale = 10u64.pow(decimals);
    let scaled = (cents * scale + unit / 2) / unit;
    let body = if decimals == 0 {
        scaled.to_string()
    } else {
        format!(
            "{}.{:0width$}",
            scaled / scale,
            scaled % scale,
            width = decimals as usize
        )
    };
    format!("{sign}C${body}{suffix}")
}

/// A word for a shell: as is when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+".contains(c))
    {
        s.to_string()
    } else if !s.contains(['"', '$', '`', '\\', '!']) {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command that reads `sql` at publish `n`, as a person types it in a POSIX shell:
/// `sugarshack query --publish 2 "select …"`.
pub fn query_command(n: u64, sql: &str) -> String {
    format!("sugarshack query --publish {n} {}", shell_word(sql))
}

/// The SQL beside a number: a disclosure holding the command that produced it.
pub fn sql_details(command: &str) -> String {
    format!(
        r#"<details class="sql"><summary>SQL</summary><code class="cmd">{}</code></details>"#,
        escape(command)
    )
}

/// A number on a page with the command that produced it: the shown text, its raw value (minor
/// units or a count; empty when the query gave none) in `data-value`, and the SQL beside it.
pub fn figure(shown: &str, value: Option<i64>, command: &str) -> String {
    format!(
        r#"<span class="fig"><span class="num" data-value="{}">{}</span>{}</span>"#,
        value.map(|v| v.to_string()).unwrap_or_default(),
        escape(shown),
        sql_details(command)
    )
}

/// The stylesheet: one inline block, readable from a phone to a laptop.
const STYLE: &str = r#"
:root{--ink:#1d2428;--soft:#5b6770;--line:#d8dee2;--bg:#fbfaf7;--card:#fff;--ok:#1f7a4d;--warn:#9a6700;--block:#b42318;--accent:#0f5d7a}
*{box-sizing:border-box}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:var(--bg)}
header{background:#24323a;color:#fff;padding:.6rem 1rem}
header a{color:#fff}
.brand{font-weight:700;text-decoration:none;margin-right:1rem}
nav{display:inline-flex;flex-wrap:wrap;gap:.2rem .9rem}
nav a{text-decoration:none;opacity:.85}
nav a.here{opacity:1;text-decoration:underline;text-underline-offset:.3em}
.pickers{display:flex;flex-wrap:wrap;gap:.4rem 1rem;margin-top:.5rem;font-size:.9rem}
.pickers form{display:flex;gap:.3rem;align-items:center}
.pickers select,.pickers input,.pickers button{font:inherit;padding:.15rem .3rem}
main{max-width:1100px;margin:0 auto;padding:1rem}
h1{font-size:1.4rem;margin:.2rem 0 .6rem}
h2{font-size:1.1rem;margin:1.6rem 0 .5rem}
.asof{font-size:2.2rem;font-weight:700;line-height:1.15;margin:.2rem 0}
.asof small{display:block;font-size:.95rem;font-weight:400;color:var(--soft)}
.banner{border-left:6px solid var(--block);background:#fdecea;padding:.7rem 1rem;margin:.8rem 0}
.banner.travel{border-color:var(--accent);background:#e8f3f7}
.banner strong{display:block}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(230px,1fr));gap:.8rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.7rem .9rem}
.card .what{color:var(--soft);font-size:.9rem}
.card .num{font-size:1.5rem;font-weight:650}
.fig{display:inline}
.num{font-variant-numeric:tabular-nums}
details.sql{display:block;font-size:.8rem;color:var(--soft)}
details.sql summary{cursor:pointer;width:max-content}
code.cmd{display:block;white-space:pre-wrap;word-break:break-word;background:#f1f3f4;border:1px solid var(--line);border-radius:4px;padding:.3rem .4rem;margin:.2rem 0;color:var(--ink);user-select:all}
.chart{display:block;max-width:100%;height:auto;background:var(--card);border:1px solid var(--line);border-radius:8px}
.chart .bar{fill:#2f7f9f}.chart .bar.neg{fill:var(--block)}.chart .bar.pos{fill:var(--ok)}.chart .bar.total{fill:#24323a}.chart .bar.dim{opacity:.4}
.chart .grid{stroke:#e6eaec}.chart .zero{stroke:#7a868d}
.chart text{font-size:11px;fill:var(--soft)}.chart .label,.chart .value{font-size:12px;fill:var(--ink)}
.chart .line{fill:none;stroke-width:2.5}.chart .line.a{stroke:#2f7f9f}.chart .line.b{stroke:#c2410c}
.chart .dot.a,.chart .key.a{fill:#2f7f9f}.chart .dot.b,.chart .key.b{fill:#c2410c}.chart .note{font-size:14px}
.scroll{overflow-x:auto}.wide{min-width:560px}
table{border-collapse:collapse;width:100%;background:var(--card);font-size:.92rem}
th,td{border-bottom:1px solid var(--line);padding:.35rem .5rem;text-align:left;vertical-align:top}
td.r,th.r{text-align:right}
.v{display:inline-block;font-size:.75rem;font-weight:700;padding:.05rem .35rem;border-radius:4px;color:#fff;margin:.05rem .1rem .05rem 0}
.v.PASS,.v.published{background:var(--ok)}.v.WARN{background:var(--warn)}.v.BLOCK,.v.blocked{background:var(--block)}.v.rolled{background:#6b4fbb}
.muted{color:var(--soft)}
.months a{margin-right:.6rem}.months a.here{font-weight:700}
pre{white-space:pre-wrap;word-break:break-word;font-size:.8rem}
footer{max-width:1100px;margin:2rem auto 1rem;padding:0 1rem;color:var(--soft);font-size:.85rem}
@media (max-width:600px){.asof{font-size:1.6rem}main{padding:.6rem}th,td{padding:.3rem}}
"#;

/// The pages, in navigation order: (path, name).
pub const PAGES: [(&str, &str); 4] = [
    ("/", "Revenue"),
    ("/audits", "Audits"),
    ("/bridge", "The bridge"),
    ("/time-travel", "Time travel"),
];

/// What the frame needs to draw the header: which page, the query string that keeps the
/// reader's time travel on every link, the publishes to pick from, and what is picked.
pub struct Frame<'a> {
    pub path: &'a str,
    pub title: &'a str,
    /// `?publish=2` / `?as_of=2026-08-17` / empty: appended to every navigation link.
    pub keep: &'a str,
    /// Every publish number with its as-of, newest last.
    pub publishes: &'a [(u64, String)],
    /// The publish picked (`None`: the latest).
    pub picked: Option<u64>,
    /// The as-of date picked, as typed.
    pub picked_as_of: Option<&'a str>,
    /// A month to keep when the time travel changes (hidden field), if one was chosen.
    pub month: Option<&'a str>,
}

/// A whole page: doctype, head with the inline style, header with navigation and the pickers,
/// then `body`.
pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + STYLE.len() + 4096);
    let _ = write!(
        out,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{} · Saltbox Market</title><link rel="icon" href="data:,"><style>{STYLE}</style></head><body><header><a class="brand" href="/{}">Saltbox Market</a><nav>"#,
        escape(frame.title),
        escape(frame.keep)
    );
    for (path, name) in PAGES {
        let class = if path == frame.path {
            " class=\"here\""
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<a{class} href="{}{}">{}</a>"#,
            path,
            escape(frame.keep),
            escape(name)
        );
    }
    out.push_str("</nav>");
    let hidden = frame
        .month
        .map(|m| {
            format!(
                r#"<input type="hidden" name="month" value="{}">"#,
                escape(m)
            )
        })
        .unwrap_or_default();
    let _ = write!(
        out,
        r#"<div class="pickers"><form method="get" action="{0}"><label for="pick-publish">Publish</label><select id="pick-publish" name="publish"><option value="">latest</option>"#,
        escape(frame.path)
    );
    for (n, as_of) in frame.publishes.iter().rev() {
        let selected = if frame.picked == Some(*n) {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<option value="{n}"{selected}>{n} · {}</option>"#,
            escape(as_of)
        );
    }
    let _ = write!(
        out,
        r#"</select>{hidden}<button type="submit">Show</button></form><form method="get" action="{0}"><label for="pick-as-of">As of</label><input id="pick-as-of" type="date" name="as_of" value="{1}">{hidden}<button type="submit">Show</button></form></div></header><main>{body}</main><footer>These pages read only what was published: <code>main</code> and the <code>publish-N</code> tags, never the <code>audit</code> branch. Each number's SQL runs as shown in a shell where <code>sugarshack</code> opens this lake.</footer></body></html>"#,
        escape(frame.path),
        // A date input holds a day only (an instant typed in the URL is not shown in it).
        escape(
            frame
                .picked_as_of
                .filter(|t| chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d").is_ok())
                .unwrap_or("")
        )
    );
    out
}

/// A status or verdict badge.
pub fn badge(text: &str) -> String {
    let class = text.split_whitespace().next().unwrap_or("");
    format!(
        r#"<span class="v {}">{}</span>"#,
        escape(class),
        escape(text)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_text_and_both_quotes() {
        assert_eq!(
            escape(r#"<a href="x">Tom & Jerry's</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;"
        );
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn money_prints_as_the_lake_prints_it() {
        assert_eq!(cad(147_950_222), "C$1,479,502.22");
        assert_eq!(cad(-1_234), "-C$12.34");
        assert_eq!(cad(5), "C$0.05");
        assert_eq!(compact_cad(150_000_000, 50_000_000), "C$1.5M");
        assert_eq!(compact_cad(300_000_000, 100_000_000), "C$3M");
        assert_eq!(compact_cad(25_000_000, 5_000_000), "C$250k");
        assert_eq!(compact_cad(-200_000, 100_000), "-C$2k");
        assert_eq!(compact_cad(4_000, 1_000), "C$40");
        assert_eq!(compact_cad(162_000_000, 2_000_000), "C$1.62M");
        assert_eq!(compact_cad(164_000_000, 2_000_000), "C$1.64M");
        assert_eq!(compact_cad(0, 5_000_000), "C$0");
    }

    #[test]
    fn commands_are_typed_as_a_shell_reads_them() {
        assert_eq!(
            query_command(2, "select sum(x) from gold.t where d >= date '2026-08-01'"),
            r#"sugarshack query --publish 2 "select sum(x) from gold.t where d >= date '2026-08-01'""#
        );
        assert_eq!(
            query_command(1, r#"select "$x""#),
            r#"sugarshack query --publish 1 'select "$x"'"#
        );
        assert_eq!(
            query_command(1, "it's $x"),
            r#"sugarshack query --publish 1 'it'\''s $x'"#
        );
    }

    #[test]
    fn a_figure_keeps_its_value_and_escapes_its_command() {
        let f = figure(
            "C$1.00",
            Some(100),
            "sugarshack query --publish 1 \"select 1 < 2\"",
        );
        assert!(f.contains(r#"data-value="100">C$1.00</span>"#));
        assert!(f.contains("select 1 &lt; 2"));
        assert!(figure("—", None, "x").contains(r#"data-value="""#));
    }

    #[test]
    fn the_frame_escapes_and_keeps_the_time_travel_on_every_link() {
        let publishes = vec![(1, "2026-08-16 23:59 UTC".to_string())];
        let html = page(
            &Frame {
                path: "/audits",
                title: "Audits <x>",
                keep: "?publish=1",
                publishes: &publishes,
                picked: Some(1),
                picked_as_of: Some("2026-08-17"),
                month: Some("2026-08"),
            },
            "<p>body</p>",
        );
        assert!(html.starts_with("<!doctype html>"));
        assert!(html.contains("<title>Audits &lt;x&gt; · Saltbox Market</title>"));
        assert!(html.contains(r#"<a class="here" href="/audits?publish=1">Audits</a>"#));
        assert!(html.contains(r#"<a href="/bridge?publish=1">"#));
        assert!(html.contains(r#"<option value="1" selected>"#));
        assert!(html.contains(r#"name="as_of" value="2026-08-17""#));
        let odd = page(
            &Frame {
                picked_as_of: Some("\"><script>"),
                ..Frame {
                    path: "/",
                    title: "t",
                    keep: "",
                    publishes: &publishes,
                    picked: None,
                    picked_as_of: None,
                    month: None,
                }
            },
            "",
        );
        assert!(odd.contains(r#"name="as_of" value="""#) && !odd.contains("<script>"));
        assert!(html.contains(r#"name="month" value="2026-08""#));
    }
}
