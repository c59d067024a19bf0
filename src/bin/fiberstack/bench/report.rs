//! The results as a table: medians over rounds, one row per runtime and scenario, in
//! plain text for the terminal and in Markdown for `bench.md`.

use std::fmt::Write;

use crate::bench::bounds::median;
use crate::bench::load::LoadResult;
use fiberstack::config::Runtime;

/// One round's measurement of one scenario on one runtime.
#[derive(Clone, Debug)]
pub struct Sample {
    pub result: Result<LoadResult, String>,
    /// RSS right after the server started, before any load, in KiB.
    pub idle_kib: u64,
    /// Peak RSS while the load ran, in KiB.
    pub peak_kib: u64,
    /// Server CPU time during the load over its wall time, in % of one core.
    pub cpu_pct: f64,
}

/// A row of the table: medians of the rounds that completed.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub runtime: String,
    pub scenario: String,
    pub route: String,
    pub concurrency: usize,
    pub load: String,
    /// Rounds measured, and how many of them failed to produce numbers.
    pub rounds: usize,
    pub errors: usize,
    pub rps: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub failed: Option<f64>,
    pub peak_mib: Option<f64>,
    pub idle_mib: Option<f64>,
    pub cpu_pct: Option<f64>,
    /// The physical bound of the load, req/s (sleeping routes only).
    pub bound_rps: Option<f64>,
    /// Median req/s over the bound.
    pub of_bound: Option<f64>,
    /// Fibers' median req/s over the twin's (on both rows of a scenario).
    pub ratio: Option<f64>,
    /// (peak RSS - idle RSS) / concurrency, KiB (scenarios that ask for it).
    pub kib_per_request: Option<f64>,
}

impl Row {
    /// Medians of `samples` for one runtime and scenario.
    #[allow(clippy::too_many_arguments)]
    pub fn from_samples(
        runtime: Runtime,
        scenario: &str,
        route: &str,
        concurrency: usize,
        load: String,
        samples: &[Sample],
        bound_rps: Option<f64>,
        memory: bool,
    ) -> Row {
        let ok: Vec<(&LoadResult, &Sample)> = samples
            .iter()
            .filter_map(|s| s.result.as_ref().ok().map(|r| (r, s)))
            .collect();
        let med = |f: &dyn Fn(&LoadResult, &Sample) -> f64| {
            median(&ok.iter().map(|(r, s)| f(r, s)).collect::<Vec<_>>())
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        let rps = med(&|r, _| r.rps);
        Row {
            runtime: runtime.to_string(),
            scenario: scenario.to_string(),
            route: route.to_string(),
            concurrency,
            load,
            rounds: samples.len(),
            errors: samples.len() - ok.len(),
            rps,
            p50_ms: med(&|r, _| r.p50_ms),
            p99_ms: med(&|r, _| r.p99_ms),
            failed: med(&|r, _| r.failed as f64),
            peak_mib: med(&|_, s| mib(s.peak_kib)),
            idle_mib: med(&|_, s| mib(s.idle_kib)),
            cpu_pct: med(&|_, s| s.cpu_pct),
            bound_rps,
            of_bound: rps.zip(bound_rps).map(|(r, b)| r / b),
            ratio: None,
            kib_per_request: if memory {
                med(&|_, s| {
                    s.peak_kib.saturating_sub(s.idle_kib) as f64 / concurrency.max(1) as f64
                })
            } else {
                None
            },
        }
    }
}

/// Fill `ratio` on both rows of each scenario that has a fibers and an async row.
pub fn fill_ratios(rows: &mut [Row]) {
    let ratios: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.runtime == "fibers")
        .filter_map(|f| {
            let a = rows
                .iter()
                .find(|a| a.runtime == "async" && a.scenario == f.scenario)?;
            Some((f.scenario.clone(), f.rps? / a.rps?))
        })
        .collect();
    for row in rows.iter_mut() {
        row.ratio = ratios
            .iter()
            .find(|(s, _)| *s == row.scenario)
            .map(|(_, r)| *r);
    }
}

/// A latency in a width-friendly unit.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.3} s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

/// The header and cells of each row, shared by both renderings.
fn cells(rows: &[Row]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let header = vec![
        "runtime",
        "route",
        "concurrency",
        "load",
        "req/s",
        "p50",
        "p99",
        "failed",
        "server RSS",
        "CPU",
        "of bound",
        "fibers/async",
    ];
    let body = rows
        .iter()
        .map(|r| {
            let rps = match (r.rps, r.errors) {
                (Some(v), 0) => format!("{v:.1}"),
                (Some(v), e) => format!("{v:.1} ({e} of {} rounds failed)", r.rounds),
                (None, _) => "error".into(),
            };
            vec![
                r.runtime.clone(),
                r.route.clone(),
                r.concurrency.to_string(),
                r.load.clone(),
                rps,
                opt(r.p50_ms, fmt_ms),
                opt(r.p99_ms, fmt_ms),
                opt(r.failed, |v| format!("{v:.0}")),
                opt(r.peak_mib, |v| format!("{v:.0} MiB")),
                opt(r.cpu_pct, |v| format!("{v:.0}%")),
                match (r.of_bound, r.bound_rps) {
                    (Some(f), Some(b)) => format!("{:.1}% of {b:.1}", f * 100.0),
                    _ => "-".into(),
                },
                opt(r.ratio, |v| format!("{v:.2}x")),
            ]
        })
        .collect();
    (header, body)
}

/// The table for a terminal: aligned columns.
pub fn text_table(rows: &[Row]) -> String {
    let (header, body) = cells(rows);
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect(), &mut out);
    line(widths.iter().map(|w| "-".repeat(*w)).collect(), &mut out);
    for row in body {
        line(row, &mut out);
    }
    out
}

/// The table in Markdown.
pub fn markdown_table(rows: &[Row]) -> String {
    let (header, body) = cells(rows);
    let mut out = format!("| {} |\n", header.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
    for row in body {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

/// Memory per in-flight request, for the scenarios that measure it.
pub fn memory_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let per = r.kib_per_request?;
            Some(format!(
                "{} {} at {} connections: idle RSS {:.0} MiB, under load {:.0} MiB: \
                 {per:.1} KiB per in-flight request",
                r.runtime,
                r.route,
                r.concurrency,
                r.idle_mib.unwrap_or(0.0),
                r.peak_mib.unwrap_or(0.0),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rps: f64, peak_kib: u64) -> Sample {
        Sample {
            result: Ok(LoadResult {
                requests: 100,
                failed: 0,
                secs: 1.0,
                rps,
                p50_ms: 1.0,
                p99_ms: 2.0,
            }),
            idle_kib: 1024,
            peak_kib,
            cpu_pct: 50.0,
        }
    }

    #[test]
    fn rows_take_medians_bounds_and_ratios() {
        let f = [
            sample(100.0, 3072),
            sample(180.0, 2048),
            sample(170.0, 4096),
        ];
        let a = [sample(150.0, 5120), sample(85.0, 5120), sample(80.0, 5120)];
        let mut rows = vec![
            Row::from_samples(
                Runtime::Fibers,
                "w",
                "/widgets",
                2,
                "wrk 10s".into(),
                &f,
                Some(200.0),
                true,
            ),
            Row::from_samples(
                Runtime::Async,
                "w",
                "/widgets",
                2,
                "wrk 10s".into(),
                &a,
                Some(200.0),
                true,
            ),
        ];
        fill_ratios(&mut rows);
        assert_eq!(rows[0].rps, Some(170.0));
        assert_eq!(rows[0].of_bound, Some(0.85));
        assert_eq!(rows[0].ratio, Some(2.0));
        assert_eq!(rows[1].ratio, Some(2.0));
        assert_eq!(rows[0].kib_per_request, Some(1024.0));
        let text = text_table(&rows);
        assert!(text.contains("85.0% of 200.0"), "{text}");
        assert!(text.contains("2.00x"), "{text}");
        let md = markdown_table(&rows);
        assert_eq!(md.lines().count(), 4);
        assert_eq!(memory_lines(&rows).len(), 2);
    }

    #[test]
    fn failed_rounds_are_shown_not_hidden() {
        let mut bad = sample(1.0, 1);
        bad.result = Err("wrk died".into());
        let rows = [Row::from_samples(
            Runtime::Async,
            "h",
            "/hello",
            64,
            "wrk 10s".into(),
            &[bad.clone(), sample(50.0, 1)],
            None,
            false,
        )];
        assert!(text_table(&rows).contains("1 of 2 rounds failed"));
        let rows = [Row::from_samples(
            Runtime::Async,
            "h",
            "/hello",
            64,
            "x".into(),
            &[bad],
            None,
            false,
        )];
        assert!(text_table(&rows).contains("error"));
    }
}
