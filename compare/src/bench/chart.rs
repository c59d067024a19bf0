//! `bench.svg`, written by hand: three panels, one group of bars per scenario and a bar
//! per runtime in each.
//!
//! - served req/s: the median, a whisker from the slowest to the fastest round, and
//!   for sleeping routes the expected figure (dashed) and the ceiling C/S (dotted);
//! - latency: p50 (dark) inside p99 (light);
//! - memory per in-flight request, for the scenarios that measure it.
//!
//! Loads differ by orders of magnitude, so each group has its own scale. Value labels
//! sit in a column right of the bars, and the width of the picture is computed from the
//! longest label, so that none is cut at the edge.

use std::fmt::Write;

use fiber_web::html::escape_html as escape;

use crate::bench::report::{fmt_ms, Row};

const FONT: f64 = 12.0;
/// Widest advance of a digit or letter at [`FONT`] in common sans-serif faces (DejaVu
/// Sans digits are 0.64 em): labels are sized with it, so they err on the wide side.
const CHAR_W: f64 = FONT * 0.64;
const LABEL_W: f64 = 230.0;
const BAR_W: f64 = 420.0;
const BAR_H: f64 = 14.0;
const BAR_GAP: f64 = 4.0;
const GROUP_GAP: f64 = 14.0;
const PANEL_HEAD: f64 = 44.0;
const MARGIN: f64 = 12.0;
const COLORS: [(&str, &str); 3] = [
    ("fibers", "#2b7bb9"),
    ("async", "#e08a2c"),
    ("minihttp", "#6a9f3a"),
];

/// One bar: its runtime, length as a fraction of the group's scale, and label.
struct Bar {
    runtime: String,
    /// Length of the bar, as a fraction of the scale.
    value: Option<f64>,
    /// An inner, darker part (p50 inside p99).
    inner: Option<f64>,
    /// A min-max whisker.
    whisker: Option<(f64, f64)>,
    label: String,
}

/// A group of bars with its heading and reference lines (fractions of its scale).
struct Group {
    title: String,
    subtitle: String,
    bars: Vec<Bar>,
    /// (fraction of the scale, dash pattern)
    lines: Vec<(f64, &'static str)>,
}

struct Panel {
    title: String,
    note: String,
    groups: Vec<Group>,
}

fn color(runtime: &str) -> &'static str {
    COLORS
        .iter()
        .find(|(r, _)| *r == runtime)
        .map_or("#888888", |(_, c)| c)
}

/// Rows grouped by scenario, in first-appearance order.
fn scenarios(rows: &[Row]) -> Vec<Vec<&Row>> {
    let mut out: Vec<Vec<&Row>> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|g| g[0].scenario == r.scenario) {
            Some(g) => g.push(r),
            None => out.push(vec![r]),
        }
    }
    out
}

/// The short form of a row's reason for not running, for a chart label.
fn not_run(row: &Row) -> Option<String> {
    let why = row.skipped.as_deref()?;
    Some(format!("not run: {}", why.split(':').next().unwrap_or(why)))
}

/// The group of one scenario's `rows`, headed by its route and load (and its server's
/// CPU quota, if it ran under one).
fn group(rows: &[&Row], bars: Vec<Bar>, lines: Vec<(f64, &'static str)>) -> Group {
    let first = rows[0];
    let quota = first
        .quota
        .map_or(String::new(), |p| format!(", server held to {p}% of a cpu"));
    Group {
        title: first.route.clone(),
        subtitle: format!("c={} {}{quota}", first.concurrency, first.load),
        bars,
        lines,
    }
}

fn rps_panel(rows: &[Row]) -> Panel {
    let groups = scenarios(rows)
        .into_iter()
        // Loads without a rate (the idle connections) have only a memory bar.
        .filter(|g| g.iter().any(|r| r.rps.is_some() || r.errors > 0))
        .map(|g| {
            let bounds = g.iter().find_map(|r| r.bounds);
            let top = g
                .iter()
                .filter_map(|r| r.rps.map(|s| s.max))
                .fold(bounds.map_or(0.0, |b| b.ceiling), f64::max)
                .max(1e-9);
            let bars = g
                .iter()
                .map(|r| Bar {
                    runtime: r.runtime.clone(),
                    value: r.rps.map(|s| s.median / top),
                    inner: None,
                    whisker: r
                        .rps
                        .filter(|s| s.max > s.min)
                        .map(|s| (s.min / top, s.max / top)),
                    label: not_run(r).unwrap_or_else(|| match (r.rps, r.of_bounds()) {
                        (Some(s), Some((_, e))) => {
                            format!("{:.1} req/s ({:.1}% of expected)", s.median, e * 100.0)
                        }
                        (Some(s), None) if s.max > s.min => {
                            format!("{:.1} req/s (rounds {:.1}-{:.1})", s.median, s.min, s.max)
                        }
                        (Some(s), None) => format!("{:.1} req/s", s.median),
                        (None, _) => "no result".into(),
                    }),
                })
                .collect();
            let lines = bounds.map_or(Vec::new(), |b| {
                vec![(b.expected / top, "5 3"), (b.ceiling / top, "1 3")]
            });
            group(&g, bars, lines)
        })
        .collect();
    Panel {
        title: "Served req/s (2xx only), median of rounds".into(),
        note: "whisker = slowest to fastest round; dashed = expected C(D-S)/(DS) or ab floor; \
               dotted = ceiling C/S"
            .into(),
        groups,
    }
}

fn latency_panel(rows: &[Row]) -> Panel {
    let groups = scenarios(rows)
        .into_iter()
        .filter(|g| g.iter().any(|r| r.p99_ms.is_some() || r.errors > 0))
        .map(|g| {
            let top = g
                .iter()
                .filter_map(|r| r.p99_ms)
                .fold(0.0, f64::max)
                .max(1e-9);
            let bars = g
                .iter()
                .map(|r| Bar {
                    runtime: r.runtime.clone(),
                    value: r.p99_ms.map(|v| v / top),
                    inner: r.p50_ms.map(|v| v / top),
                    whisker: None,
                    label: not_run(r).unwrap_or_else(|| match (r.p50_ms, r.p99_ms) {
                        (Some(a), Some(b)) => format!("p50 {}, p99 {}", fmt_ms(a), fmt_ms(b)),
                        _ => "no result".into(),
                    }),
                })
                .collect();
            group(&g, bars, Vec::new())
        })
        .collect();
    Panel {
        title: "Latency, median of rounds".into(),
        note: "dark = p50, light = p99".into(),
        groups,
    }
}

fn memory_panel(rows: &[Row]) -> Option<Panel> {
    let measured: Vec<Vec<&Row>> = scenarios(rows)
        .into_iter()
        .filter(|g| g.iter().any(|r| r.kib_per_request.is_some()))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let top = measured
        .iter()
        .flatten()
        .filter_map(|r| r.kib_per_request)
        .fold(0.0, f64::max)
        .max(1e-9);
    let groups = measured
        .into_iter()
        .map(|g| {
            let bars = g
                .iter()
                .map(|r| Bar {
                    runtime: r.runtime.clone(),
                    value: r.kib_per_request.map(|v| v / top),
                    inner: None,
                    whisker: None,
                    label: not_run(r).unwrap_or_else(|| {
                        r.kib_per_request
                            .map_or("no result".into(), |v| format!("{v:.1} KiB"))
                    }),
                })
                .collect();
            group(&g, bars, Vec::new())
        })
        .collect();
    Some(Panel {
        title: "Memory per connection: a request in flight, or kept alive idle".into(),
        note: "(RSS under load - RSS of the fresh server) / connections, median of rounds".into(),
        groups,
    })
}

/// Pixels a text of `s` takes at most.
fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

/// Lighten a `#rrggbb` color halfway to white.
fn light(hex: &str) -> String {
    let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
    let l = |v: u8| v / 2 + 128;
    format!("#{:02x}{:02x}{:02x}", l(c(1)), l(c(3)), l(c(5)))
}

/// The chart for `rows` (rows of one scenario share its name), with `title` on top.
pub fn svg(rows: &[Row], title: &str) -> String {
    let panels: Vec<Panel> = [
        Some(rps_panel(rows)),
        Some(latency_panel(rows)),
        memory_panel(rows),
    ]
    .into_iter()
    .flatten()
    .collect();
    let label_x = LABEL_W + BAR_W + 10.0;
    let widest = panels
        .iter()
        .flat_map(|p| p.groups.iter())
        .flat_map(|g| g.bars.iter())
        .map(|b| text_w(&b.label))
        .fold(0.0, f64::max);
    let heads = panels
        .iter()
        .map(|p| MARGIN + text_w(&p.note).max(text_w(&p.title)))
        .chain([MARGIN + text_w(title) * 15.0 / FONT])
        .fold(0.0, f64::max);
    let width = (label_x + widest + MARGIN).max(heads + MARGIN).ceil();
    let group_h = |g: &Group| g.bars.len().max(2) as f64 * (BAR_H + BAR_GAP) + GROUP_GAP;
    let height = 60.0
        + panels
            .iter()
            .map(|p| PANEL_HEAD + p.groups.iter().map(group_h).sum::<f64>())
            .sum::<f64>();

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif" font-size="{FONT}">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{MARGIN}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let mut x = MARGIN;
    for (runtime, c) in COLORS {
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="34" width="12" height="12" fill="{c}"/><text x="{}" y="44">{runtime}</text>"#,
            x + 17.0
        );
        x += 17.0 + text_w(runtime) + 20.0;
    }
    let mut y = 60.0;
    for panel in &panels {
        let _ = writeln!(
            out,
            r##"<text x="{MARGIN}" y="{:.0}" font-size="14" font-weight="bold">{}</text><text x="{MARGIN}" y="{:.0}" fill="#555">{}</text>"##,
            y + 16.0,
            escape(&panel.title),
            y + 32.0,
            escape(&panel.note)
        );
        y += PANEL_HEAD;
        for g in &panel.groups {
            let _ = writeln!(
                out,
                r##"<text x="{MARGIN}" y="{:.0}" font-weight="bold">{}</text><text x="{MARGIN}" y="{:.0}" fill="#555">{}</text>"##,
                y + 12.0,
                escape(&g.title),
                y + 27.0,
                escape(&g.subtitle)
            );
            for (j, bar) in g.bars.iter().enumerate() {
                let by = y + j as f64 * (BAR_H + BAR_GAP);
                let c = color(&bar.runtime);
                if let Some(v) = bar.value {
                    let (fill, w) = if bar.inner.is_some() {
                        (light(c), BAR_W * v.min(1.0))
                    } else {
                        (c.to_string(), BAR_W * v.min(1.0))
                    };
                    let _ = writeln!(
                        out,
                        r#"<rect x="{LABEL_W}" y="{by:.1}" width="{w:.1}" height="{BAR_H}" fill="{fill}"/>"#
                    );
                }
                if let Some(inner) = bar.inner {
                    let _ = writeln!(
                        out,
                        r#"<rect x="{LABEL_W}" y="{by:.1}" width="{:.1}" height="{BAR_H}" fill="{c}"/>"#,
                        BAR_W * inner.min(1.0)
                    );
                }
                if let Some((lo, hi)) = bar.whisker {
                    let (x1, x2, my) = (
                        LABEL_W + BAR_W * lo.min(1.0),
                        LABEL_W + BAR_W * hi.min(1.0),
                        by + BAR_H / 2.0,
                    );
                    let _ = writeln!(
                        out,
                        r##"<path d="M{x1:.1} {my:.1}H{x2:.1}M{x1:.1} {:.1}V{:.1}M{x2:.1} {:.1}V{:.1}" stroke="#222" stroke-width="1.5" fill="none"/>"##,
                        by + 2.0,
                        by + BAR_H - 2.0,
                        by + 2.0,
                        by + BAR_H - 2.0
                    );
                }
                let _ = writeln!(
                    out,
                    r#"<text x="{label_x:.1}" y="{:.1}">{}</text>"#,
                    by + BAR_H - 3.0,
                    escape(&bar.label)
                );
            }
            let bottom = y + g.bars.len() as f64 * (BAR_H + BAR_GAP);
            for (f, dash) in &g.lines {
                let lx = LABEL_W + BAR_W * f.min(1.0);
                let _ = writeln!(
                    out,
                    r##"<line x1="{lx:.1}" y1="{:.1}" x2="{lx:.1}" y2="{bottom:.1}" stroke="#333" stroke-dasharray="{dash}"/>"##,
                    y - 2.0
                );
            }
            y += group_h(g);
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{Bounds, Spread};

    fn row(runtime: &str, scenario: &str, rps: f64) -> Row {
        Row {
            runtime: runtime.into(),
            scenario: scenario.into(),
            route: "/upstream/search.json?q=a&b".into(),
            concurrency: 10,
            load: "wrk 2s".into(),
            rps: Some(Spread {
                median: rps,
                min: rps * 0.9,
                max: rps * 1.1,
            }),
            p50_ms: Some(1.0),
            p99_ms: Some(3.0),
            bounds: Some(Bounds {
                ceiling: 120.0,
                expected: 100.0,
            }),
            ..Row::default()
        }
    }

    #[test]
    fn panels_bars_whiskers_and_labels_that_fit() {
        let mut skipped = row("minihttp", "a", 0.0);
        (skipped.rps, skipped.p50_ms, skipped.p99_ms) = (None, None, None);
        skipped.skipped = Some("ab hangs: may_minihttp never closes".into());
        let mut memory = row("fibers", "b", 10.0);
        memory.kib_per_request = Some(22.1);
        let rows = [
            row("fibers", "a", 99.3),
            row("async", "a", 97.0),
            skipped,
            memory,
        ];
        let svg = svg(&rows, "t <1>");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for panel in ["Served req/s", "Latency", "Memory per connection"] {
            assert!(svg.contains(panel), "no {panel} panel");
        }
        // rps: 3 bars; latency: 3 light + 3 dark; memory: 1.
        assert_eq!(svg.matches(&format!("<rect x=\"{LABEL_W}\"")).count(), 10);
        assert_eq!(
            svg.matches("<path d=").count(),
            3,
            "a whisker per measured rps bar"
        );
        assert_eq!(svg.matches("stroke-dasharray").count(), 4);
        assert!(svg.contains("q=a&amp;b") && svg.contains("t &lt;1&gt;"));
        assert!(svg.contains("not run: ab hangs<"));
        assert!(svg.contains("22.1 KiB"));
        // Every label ends inside the picture.
        let width: f64 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        let label = "99.3 req/s (99.3% of expected)";
        assert!(svg.contains(label));
        assert!(LABEL_W + BAR_W + 10.0 + text_w(label) <= width);
    }
}
