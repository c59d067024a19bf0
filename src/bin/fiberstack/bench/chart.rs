//! `bench.svg`: one group of two horizontal bars (fibers, async) per scenario, written
//! by hand. Loads differ by orders of magnitude, so each group has its own scale: the
//! physical bound (a dashed line) where the route sleeps, else the larger of the two.

use std::fmt::Write;

use fiberstack::http::html::escape_html as escape;

use crate::bench::report::Row;

const WIDTH: f64 = 900.0;
const LABEL_W: f64 = 250.0;
const BAR_W: f64 = 470.0;
const BAR_H: f64 = 16.0;
const GROUP_H: f64 = 58.0;
const TOP: f64 = 56.0;
const FIBERS: &str = "#2b7bb9";
const ASYNC: &str = "#e08a2c";

/// The chart for `rows` (rows of one scenario share its name), with `title` on top.
pub fn svg(rows: &[Row], title: &str) -> String {
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    let height = TOP + GROUP_H * scenarios.len() as f64 + 30.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="10" y="34" width="12" height="12" fill="{FIBERS}"/><text x="27" y="44">fibers</text><rect x="80" y="34" width="12" height="12" fill="{ASYNC}"/><text x="97" y="44">async (tokio)</text><text x="200" y="44" fill="#555">bar = req/s; dashed line = physical bound of the load</text>"##
    );
    for (i, name) in scenarios.iter().enumerate() {
        let y0 = TOP + GROUP_H * i as f64;
        let group: Vec<&Row> = rows.iter().filter(|r| r.scenario == *name).collect();
        let Some(first) = group.first() else { continue };
        let best = group.iter().filter_map(|r| r.rps).fold(0.0, f64::max);
        let scale = first.bound_rps.unwrap_or(best * 1.05).max(best).max(1e-9);
        let _ = writeln!(
            out,
            r##"<text x="10" y="{:.0}" font-weight="bold">{}</text><text x="10" y="{:.0}" fill="#555">c={} {}</text>"##,
            y0 + 16.0,
            escape(&first.route),
            y0 + 31.0,
            first.concurrency,
            escape(&first.load)
        );
        for (j, runtime) in ["fibers", "async"].iter().enumerate() {
            let y = y0 + 4.0 + j as f64 * (BAR_H + 4.0);
            let row = group.iter().find(|r| r.runtime == *runtime);
            let rps = row.and_then(|r| r.rps);
            let w = rps.map_or(0.0, |v| BAR_W * v / scale);
            let color = if j == 0 { FIBERS } else { ASYNC };
            let label = match (rps, row.and_then(|r| r.of_bound)) {
                (Some(v), Some(f)) => format!("{v:.1} req/s ({:.1}% of bound)", f * 100.0),
                (Some(v), None) => format!("{v:.1} req/s"),
                (None, _) => "no result".into(),
            };
            let _ = writeln!(
                out,
                r#"<rect x="{LABEL_W}" y="{y:.1}" width="{w:.1}" height="{BAR_H}" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                LABEL_W + w + 5.0,
                y + BAR_H - 4.0,
                escape(&label)
            );
        }
        if first.bound_rps.is_some() {
            let x = LABEL_W + BAR_W * first.bound_rps.unwrap_or(0.0) / scale;
            let _ = writeln!(
                out,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="4 3"/>"##,
                y0 + 1.0,
                y0 + 2.0 * BAR_H + 11.0
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_gets_two_bars_and_text_is_escaped() {
        let row = |runtime: &str, scenario: &str, rps| Row {
            runtime: runtime.into(),
            scenario: scenario.into(),
            route: "/upstream/search.json?q=a&b".into(),
            concurrency: 10,
            load: "wrk 2s".into(),
            rps: Some(rps),
            bound_rps: Some(100.0),
            of_bound: Some(rps / 100.0),
            ..Row::default()
        };
        let rows = [
            row("fibers", "a", 99.0),
            row("async", "a", 97.0),
            row("fibers", "b", 10.0),
        ];
        let svg = svg(&rows, "t <1>");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=\"250\"").count(), 4);
        assert_eq!(svg.matches("stroke-dasharray").count(), 2);
        assert!(svg.contains("q=a&amp;b") && svg.contains("t &lt;1&gt;"));
        assert!(svg.contains("no result"));
    }
}
