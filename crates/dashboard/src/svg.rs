//! Charts as server-rendered SVG: no script, no charting library, nothing fetched. Every chart
//! scales to its container (a `viewBox` and `width="100%"`), every mark carries a `<title>` with
//! its exact value (what a pointer hovering it shows), and every text is escaped.
//!
//! Geometry is computed in floating point (pixels); values and their labels stay integers (money
//! in minor units) and are formatted by [`crate::html::cad`], so no amount ever passes through a
//! float on its way to the page.

use std::fmt::Write;

use crate::html::{cad, compact_cad, escape};

/// The drawing's width in SVG units (the page scales it).
const WIDTH: f64 = 720.0;
/// Left margin for the value axis labels.
const LEFT: f64 = 64.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
/// Bottom margin for the category labels.
const BOTTOM: f64 = 28.0;

/// One bar: a label (shown under some bars, always in its title) and a value in minor units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bar {
    pub label: String,
    pub value: i64,
    /// Drawn lighter (outside the month a page is about).
    pub dim: bool,
}

/// A "nice" step (1, 2 or 5 × a power of ten) so that `range` spans about `ticks` steps.
pub fn nice_step(range: i64, ticks: i64) -> i64 {
    let raw = (range.max(1) + ticks - 1) / ticks.max(1);
    let mut magnitude = 1i64;
    while magnitude.saturating_mul(10) <= raw {
        magnitude = magnitude.saturating_mul(10);
    }
    for m in [1, 2, 5, 10] {
        let step = magnitude.saturating_mul(m);
        if step >= raw {
            return step;
        }
    }
    magnitude.saturating_mul(10)
}

/// The value axis: from a multiple of `step` at or below `lo` to one at or above `hi`.
fn axis(lo: i64, hi: i64, ticks: i64) -> (i64, i64, i64) {
    let step = nice_step(hi.saturating_sub(lo), ticks);
    let from = lo.div_euclid(step) * step;
    let to = -((-hi).div_euclid(step) * step);
    let to = if to == from { from + step } else { to };
    (from, to, step)
}

fn open(height: f64, label: &str) -> String {
    format!(
        r#"<svg class="chart" role="img" aria-label="{}" viewBox="0 0 {WIDTH} {height}" width="100%" preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">"#,
        escape(label)
    )
}

/// Horizontal grid lines with their money labels, for an axis `from..=to` by `step`.
fn grid(out: &mut String, from: i64, to: i64, step: i64, y: &dyn Fn(i64) -> f64) {
    let mut v = from;
    while v <= to {
        let py = y(v);
        let class = if v == 0 { "zero" } else { "grid" };
        let _ = write!(
            out,
            r#"<line class="{class}" x1="{LEFT}" x2="{:.1}" y1="{py:.1}" y2="{py:.1}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            WIDTH - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            escape(&compact_cad(v, step))
        );
        v += step;
    }
}

/// A bar chart of `bars` (for example a day's cash per day), negative values below the zero
/// line. Every `label_every`-th bar's label is written under it; each bar's title holds its
/// label and exact amount. An empty series draws a note instead.
pub fn bar_chart(title: &str, bars: &[Bar], label_every: usize) -> String {
    let height = 240.0;
    let mut out = open(height, title);
    if bars.is_empty() {
        let _ = write!(
            out,
            r#"<text class="note" x="{:.1}" y="{:.1}" text-anchor="middle">no rows at this publish</text></svg>"#,
            WIDTH / 2.0,
            height / 2.0
        );
        return out;
    }
    let lo = bars.iter().map(|b| b.value).min().unwrap_or(0).min(0);
    let hi = bars.iter().map(|b| b.value).max().unwrap_or(0).max(0);
    let (from, to, step) = axis(lo, hi, 4);
    let plot_h = height - TOP - BOTTOM;
    let y = |v: i64| TOP + plot_h * (to - v) as f64 / (to - from) as f64;
    grid(&mut out, from, to, step, &y);
    let slot = (WIDTH - LEFT - RIGHT) / bars.len() as f64;
    let bar_w = (slot * 0.8).max(1.0);
    let every = label_every.max(1);
    for (i, b) in bars.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar_w) / 2.0;
        let (top, bottom) = (y(b.value.max(0)), y(b.value.min(0)));
        let class = match (b.value < 0, b.dim) {
            (true, false) => "bar neg",
            (true, true) => "bar neg dim",
            (false, false) => "bar",
            (false, true) => "bar dim",
        };
        let _ = write!(
            out,
            r#"<rect class="{class}" x="{x:.1}" y="{top:.1}" width="{bar_w:.1}" height="{:.1}"><title>{}: {}</title></rect>"#,
            (bottom - top).max(0.5),
            escape(&b.label),
            escape(&cad(b.value))
        );
        if i % every == 0 {
            let _ = write!(
                out,
                r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x + bar_w / 2.0,
                height - BOTTOM + 16.0,
                escape(&b.label)
            );
        }
    }
    out.push_str("</svg>");
    out
}

/// One line of a [`line_chart`]: a name, a CSS class (its colour) and a value per x label
/// (`None`: no point there).
#[derive(Clone, Debug)]
pub struct Line {
    pub name: String,
    pub class: &'static str,
    pub values: Vec<Option<i64>>,
}

/// A line chart over the x labels `xs` (for example as-of dates), with a legend.
pub fn line_chart(title: &str, xs: &[String], lines: &[Line]) -> String {
    let height = 240.0;
    let mut out = open(height, title);
    let all: Vec<i64> = lines
        .iter()
        .flat_map(|l| l.values.iter().flatten())
        .copied()
        .collect();
    let (Some(&lo), Some(&hi)) = (all.iter().min(), all.iter().max()) else {
        let _ = write!(
            out,
            r#"<text class="note" x="{:.1}" y="{:.1}" text-anchor="middle">nothing published for these dates</text></svg>"#,
            WIDTH / 2.0,
            height / 2.0
        );
        return out;
    };
    // Zoomed to the values (the axis labels say where it starts): these lines differ by a few
    // percent, which an axis from zero would flatten.
    let pad = ((hi - lo) / 10).max(100);
    let (from, to, step) = axis(lo - pad, hi + pad, 4);
    let plot_h = height - TOP - BOTTOM - 18.0;
    let y = |v: i64| TOP + 18.0 + plot_h * (to - v) as f64 / (to - from) as f64;
    grid(&mut out, from, to, step, &y);
    let n = xs.len().max(1);
    let slot = (WIDTH - LEFT - RIGHT) / n as f64;
    let x = |i: usize| LEFT + slot * i as f64 + slot / 2.0;
    let label_every = n.div_ceil(8).max(1);
    for (i, label) in xs.iter().enumerate() {
        // Every k-th label and the last; one too close to the last gives way to it.
        if i + 1 == n || (i % label_every == 0 && n - 1 - i >= label_every) {
            let _ = write!(
                out,
                r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x(i),
                height - BOTTOM + 16.0,
                escape(label)
            );
        }
    }
    for (k, line) in lines.iter().enumerate() {
        let points: Vec<String> = line
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| format!("{:.1},{:.1}", x(i), y(v))))
            .collect();
        let _ = write!(
            out,
            r#"<polyline class="line {}" points="{}"/>"#,
            line.class,
            points.join(" ")
        );
        for (i, v) in line.values.iter().enumerate() {
            if let Some(v) = v {
                let _ = write!(
                    out,
                    r#"<circle class="dot {}" cx="{:.1}" cy="{:.1}" r="4"><title>{} as of {}: {}</title></circle>"#,
                    line.class,
                    x(i),
                    y(*v),
                    escape(&line.name),
                    escape(xs.get(i).map(String::as_str).unwrap_or("")),
                    escape(&cad(*v))
                );
            }
        }
        let lx = LEFT + 8.0 + 260.0 * k as f64;
        let _ = write!(
            out,
            r#"<rect class="key {}" x="{lx:.1}" y="4" width="12" height="12"/><text class="legend" x="{:.1}" y="14">{}</text>"#,
            line.class,
            lx + 18.0,
            escape(&line.name)
        );
    }
    out.push_str("</svg>");
    out
}

/// One step of a [`waterfall`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A total drawn from the axis' start (the bucket brigade's number, gold's).
    Total { label: String, value: i64 },
    /// A change from the running total before it to `running`.
    Delta {
        label: String,
        amount: i64,
        running: i64,
    },
}

/// A horizontal waterfall: one row per step, totals as full bars, changes as floating bars from
/// the running total before them. The axis starts at a round amount below the smallest total
/// (said on the chart): the changes are small next to the month.
pub fn waterfall(title: &str, steps: &[Step]) -> String {
    let row = 30.0;
    let label_w = 250.0;
    let height = TOP + row * steps.len() as f64 + BOTTOM;
    let mut out = open(height, title);
    let values: Vec<i64> = steps
        .iter()
        .map(|s| match s {
            Step::Total { value, .. } => *value,
            Step::Delta { running, .. } => *running,
        })
        .collect();
    let (Some(&lo), Some(&hi)) = (values.iter().min(), values.iter().max()) else {
        out.push_str("</svg>");
        return out;
    };
    let lo = lo.min(0).max(lo - (hi - lo).max(1));
    let (from, to, step) = axis(lo, hi, 4);
    let (x0, x1) = (label_w, WIDTH - RIGHT - 90.0);
    let x = |v: i64| x0 + (x1 - x0) * (v - from) as f64 / (to - from) as f64;
    let mut v = from;
    while v <= to {
        let px = x(v);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{px:.1}" x2="{px:.1}" y1="{TOP}" y2="{:.1}"/><text class="axis" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            height - BOTTOM,
            height - BOTTOM + 16.0,
            escape(&compact_cad(v, step))
        );
        v += step;
    }
    if from != 0 {
        let _ = write!(
            out,
            r#"<text class="axis" x="8" y="{:.1}">axis from {}</text>"#,
            height - BOTTOM + 16.0,
            escape(&cad(from))
        );
    }
    let mut before = from;
    for (i, s) in steps.iter().enumerate() {
        let top = TOP + row * i as f64 + 4.0;
        let (label, a, b, class, shown) = match s {
            Step::Total { label, value } => (label, from, *value, "bar total", cad(*value)),
            Step::Delta {
                label,
                amount,
                running,
            } => (
                label,
                before,
                *running,
                if *amount < 0 { "bar neg" } else { "bar pos" },
                format!(
                    "{}{}",
                    if *amount < 0 { "−" } else { "+" },
                    cad(amount.abs())
                ),
            ),
        };
        let (left, right) = (x(a.min(b)), x(a.max(b)));
        let _ = write!(
            out,
            r#"<text class="label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect class="{class}" x="{left:.1}" y="{top:.1}" width="{:.1}" height="{:.1}"><title>{}: {}</title></rect><text class="value" x="{:.1}" y="{:.1}">{}</text>"#,
            label_w - 8.0,
            top + 15.0,
            escape(label),
            (right - left).max(1.0),
            row - 10.0,
            escape(label),
            escape(&shown),
            right + 4.0,
            top + 15.0,
            escape(&shown)
        );
        before = b;
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(100, 4), 50);
        assert_eq!(nice_step(1_000_000, 4), 500_000);
        assert_eq!(nice_step(7, 4), 2);
        assert_eq!(nice_step(0, 4), 1);
        assert_eq!(nice_step(34_000_000, 4), 10_000_000);
        let (from, to, step) = axis(-120, 980, 4);
        assert_eq!((from, to, step), (-500, 1000, 500));
        let (from, to, _) = axis(0, 0, 4);
        assert!(from < to);
    }

    #[test]
    fn a_bar_chart_has_one_titled_bar_per_value_and_escapes_labels() {
        let bars = vec![
            Bar {
                label: "08-16".into(),
                value: 147_950_222,
                dim: false,
            },
            Bar {
                label: "<script>".into(),
                value: -1_234,
                dim: true,
            },
        ];
        let svg = bar_chart("cash & more", &bars, 1);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<rect").count(), 2);
        assert!(svg.contains("<title>08-16: C$1,479,502.22</title>"));
        assert!(svg.contains("class=\"bar neg dim\""));
        assert!(svg.contains("&lt;script&gt;: -C$12.34"));
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("aria-label=\"cash &amp; more\""));
        assert!(bar_chart("empty", &[], 1).contains("no rows at this publish"));
    }

    #[test]
    fn a_line_chart_draws_a_point_per_value_and_a_legend() {
        let xs = vec!["08-16".to_string(), "08-17".to_string()];
        let lines = vec![
            Line {
                name: "cash".into(),
                class: "a",
                values: vec![Some(10_000), Some(12_000)],
            },
            Line {
                name: "orders".into(),
                class: "b",
                values: vec![None, Some(9_000)],
            },
        ];
        let svg = line_chart("two", &xs, &lines);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("<title>orders as of 08-17: C$90.00</title>"));
        assert!(svg.contains(">cash</text>"));
        assert!(line_chart("none", &xs, &[]).contains("nothing published"));
    }

    #[test]
    fn a_waterfall_floats_each_change_from_the_running_total() {
        let steps = vec![
            Step::Total {
                label: "bucket brigade".into(),
                value: 100_000,
            },
            Step::Delta {
                label: "refunds".into(),
                amount: -10_000,
                running: 90_000,
            },
            Step::Delta {
                label: "usd".into(),
                amount: 30_000,
                running: 120_000,
            },
            Step::Total {
                label: "gold".into(),
                value: 120_000,
            },
        ];
        let svg = waterfall("bridge", &steps);
        assert_eq!(svg.matches("<rect").count(), 4);
        assert!(svg.contains("<title>refunds: −C$100.00</title>"));
        assert!(svg.contains("<title>usd: +C$300.00</title>"));
        assert!(svg.contains("class=\"bar total\""));
        assert!(svg.contains(">axis from C$"), "a zoomed axis says so");
    }
}
