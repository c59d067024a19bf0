//! The results as a table: medians and spreads over rounds, per-round ratios, one row
//! per runtime and scenario, in plain text for the terminal and in Markdown for
//! `bench.md`.

use std::fmt::Write;

use crate::bench::bounds::median;
use crate::bench::load::LoadResult;
use crate::bench::scenario::IDLE_LOAD;

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

impl Sample {
    /// (peak RSS - idle RSS) / `connections`, in KiB.
    pub fn kib_per_connection(&self, connections: usize) -> f64 {
        self.peak_kib.saturating_sub(self.idle_kib) as f64 / connections.max(1) as f64
    }
}

/// A median with the smallest and largest value it was taken from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of the finite `values`; `None` if there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        Some(Spread {
            median: median(&v)?,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// The bounds of a sleeping route's load (see bounds.rs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bounds {
    /// The true ceiling C / S, req/s.
    pub ceiling: f64,
    /// What the load tool lets through at best: the ab floor, or C x (D-S) / (D x S).
    pub expected: f64,
}

/// A row of the table: one runtime on one scenario, medians of the rounds that
/// completed.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub runtime: String,
    pub scenario: String,
    pub route: String,
    pub concurrency: usize,
    pub load: String,
    /// Why this runtime did not run the scenario (then every figure is `None`).
    pub skipped: Option<String>,
    /// Rounds measured, and how many of them failed to produce numbers.
    pub rounds: usize,
    pub errors: usize,
    /// Served (2xx) req/s over the rounds.
    pub rps: Option<Spread>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub failed: Option<f64>,
    pub peak_mib: Option<f64>,
    pub idle_mib: Option<f64>,
    pub cpu_pct: Option<f64>,
    /// The load's bounds (sleeping routes only).
    pub bounds: Option<Bounds>,
    /// Fibers' req/s over this runtime's, per round: their median and spread (rows
    /// of other runtimes than fibers).
    pub ratio: Option<Spread>,
    /// False when the bench could not pin (one cpu): ratios are marked so.
    pub pinned: bool,
    /// (peak RSS - idle RSS) / concurrency, KiB (scenarios that ask for it).
    pub kib_per_request: Option<f64>,
}

impl Row {
    /// The figures of `samples`, one per round, for one runtime and scenario.
    pub fn from_samples(
        base: Row,
        samples: &[Sample],
        bounds: Option<Bounds>,
        memory: bool,
    ) -> Row {
        let ok: Vec<(&LoadResult, &Sample)> = samples
            .iter()
            .filter_map(|s| s.result.as_ref().ok().map(|r| (r, s)))
            .collect();
        let all = |f: &dyn Fn(&LoadResult, &Sample) -> f64| -> Vec<f64> {
            ok.iter().map(|(r, s)| f(r, s)).collect()
        };
        let med = |f: &dyn Fn(&LoadResult, &Sample) -> f64| median(&all(f));
        let mib = |kib: u64| kib as f64 / 1024.0;
        Row {
            rounds: samples.len(),
            errors: samples.len() - ok.len(),
            rps: Spread::of(&all(&|r, _| r.rps)),
            p50_ms: med(&|r, _| r.p50_ms),
            p99_ms: med(&|r, _| r.p99_ms),
            failed: med(&|r, _| r.failed as f64),
            peak_mib: med(&|_, s| mib(s.peak_kib)),
            idle_mib: med(&|_, s| mib(s.idle_kib)),
            cpu_pct: med(&|_, s| s.cpu_pct),
            bounds,
            kib_per_request: if memory {
                med(&|_, s| s.kib_per_connection(base.concurrency))
            } else {
                None
            },
            ..base
        }
    }

    /// Median served req/s over the ceiling C/S and over the expected figure.
    pub fn of_bounds(&self) -> Option<(f64, f64)> {
        let (rps, b) = (self.rps?.median, self.bounds?);
        Some((rps / b.ceiling, rps / b.expected))
    }
}

/// Fibers' req/s over `other`'s, round by round (both lists in round order), as a
/// median with its spread: only ratios within a round mean anything when rounds
/// differ by more than the servers do.
pub fn round_ratios(fibers: &[Sample], other: &[Sample]) -> Option<Spread> {
    let per_round: Vec<f64> = fibers
        .iter()
        .zip(other)
        .filter_map(|(f, o)| {
            let (f, o) = (f.result.as_ref().ok()?, o.result.as_ref().ok()?);
            (o.rps > 0.0).then(|| f.rps / o.rps)
        })
        .collect();
    Spread::of(&per_round)
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

/// The column that holds the median req/s (the chart and the tests find it by name).
pub const RPS_COLUMN: &str = "served/s median";

/// The header and cells of each row, shared by both renderings.
fn cells(rows: &[Row]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let header = vec![
        "runtime",
        "route",
        "concurrency",
        "load",
        RPS_COLUMN,
        "min-max",
        "p50",
        "p99",
        "failed",
        "server RSS",
        "CPU",
        "of ceiling C/S",
        "of expected",
        "fibers/this",
    ];
    let body = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.runtime.clone(),
                r.route.clone(),
                r.concurrency.to_string(),
                r.load.clone(),
            ];
            if let Some(why) = &r.skipped {
                cells.push(format!("not run: {why}"));
                cells.extend((0..9).map(|_| "-".to_string()));
                return cells;
            }
            cells.push(match (r.rps, r.errors) {
                (Some(v), 0) => format!("{:.1}", v.median),
                (Some(v), e) => format!("{:.1} ({e} of {} rounds failed)", v.median, r.rounds),
                // Measured, but a load without a rate (the idle connections).
                (None, e) if e < r.rounds => "-".into(),
                (None, _) => "error".into(),
            });
            cells.push(opt(r.rps.map(|v| v.min), |min| {
                format!("{min:.1}-{:.1}", r.rps.map_or(min, |v| v.max))
            }));
            let bounds = r.of_bounds();
            cells.extend([
                opt(r.p50_ms, fmt_ms),
                opt(r.p99_ms, fmt_ms),
                opt(r.failed, |v| format!("{v:.0}")),
                opt(r.peak_mib, |v| format!("{v:.0} MiB")),
                opt(r.cpu_pct, |v| format!("{v:.0}%")),
                match (bounds, r.bounds) {
                    (Some((c, _)), Some(b)) => format!("{:.1}% of {:.1}", c * 100.0, b.ceiling),
                    _ => "-".into(),
                },
                match (bounds, r.bounds) {
                    (Some((_, e)), Some(b)) => format!("{:.1}% of {:.1}", e * 100.0, b.expected),
                    _ => "-".into(),
                },
                match r.ratio {
                    Some(v) => format!(
                        "{:.2}x ({:.2}-{:.2}){}",
                        v.median,
                        v.min,
                        v.max,
                        if r.pinned { "" } else { " unpinned" }
                    ),
                    None => "-".into(),
                },
            ]);
            cells
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

/// Memory per in-flight request, or per idle keep-alive connection, for the scenarios
/// that measure it.
pub fn memory_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let per = r.kib_per_request?;
            let (load, what) = if r.load == IDLE_LOAD {
                ("with them open", "per idle keep-alive connection")
            } else {
                ("under load", "per in-flight request")
            };
            Some(format!(
                "{} {} at {} connections: fresh server's RSS {:.0} MiB, {load} {:.0} MiB: \
                 {per:.1} KiB {what}",
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
                served: 100,
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

    fn row(runtime: &str, samples: &[Sample], bounds: Option<Bounds>) -> Row {
        Row::from_samples(
            Row {
                runtime: runtime.into(),
                scenario: "w".into(),
                route: "/widgets".into(),
                concurrency: 2,
                load: "wrk 10s".into(),
                pinned: true,
                ..Row::default()
            },
            samples,
            bounds,
            true,
        )
    }

    #[test]
    fn rows_take_spreads_bounds_and_per_round_ratios() {
        let f = [
            sample(100.0, 3072),
            sample(180.0, 2048),
            sample(170.0, 4096),
        ];
        let a = [sample(150.0, 5120), sample(85.0, 5120), sample(80.0, 5120)];
        let bounds = Some(Bounds {
            ceiling: 250.0,
            expected: 200.0,
        });
        let fibers = row("fibers", &f, bounds);
        let mut async_ = row("async", &a, bounds);
        async_.ratio = round_ratios(&f, &a);
        let rps = fibers.rps.unwrap();
        assert_eq!((rps.min, rps.median, rps.max), (100.0, 170.0, 180.0));
        assert_eq!(fibers.of_bounds(), Some((0.68, 0.85)));
        // Per round: 100/150, 180/85, 170/80: the median is 2.118 (not 170/85 = 2.0).
        let ratio = async_.ratio.unwrap();
        assert!((ratio.median - 180.0 / 85.0).abs() < 1e-9, "{ratio:?}");
        assert!((ratio.min - 100.0 / 150.0).abs() < 1e-9, "{ratio:?}");
        assert_eq!(fibers.kib_per_request, Some(1024.0));
        let rows = [fibers, async_];
        let text = text_table(&rows);
        assert!(text.contains("68.0% of 250.0"), "{text}");
        assert!(text.contains("85.0% of 200.0"), "{text}");
        assert!(text.contains("100.0-180.0"), "{text}");
        assert!(text.contains("2.12x (0.67-2.12)"), "{text}");
        let md = markdown_table(&rows);
        assert_eq!(md.lines().count(), 4);
        assert_eq!(memory_lines(&rows).len(), 2);
        let mut unpinned = rows[1].clone();
        unpinned.pinned = false;
        assert!(text_table(&[unpinned]).contains("x (0.67-2.12) unpinned"));
    }

    #[test]
    fn skipped_rows_say_why() {
        let mut r = row("minihttp", &[], None);
        r.skipped = Some("ab hangs".into());
        assert!(text_table(&[r]).contains("not run: ab hangs"));
    }

    #[test]
    fn failed_rounds_are_shown_not_hidden() {
        let mut bad = sample(1.0, 1);
        bad.result = Err("wrk died".into());
        let rows = [row("async", &[bad.clone(), sample(50.0, 1)], None)];
        assert!(text_table(&rows).contains("1 of 2 rounds failed"));
        let rows = [row("async", &[bad], None)];
        assert!(text_table(&rows).contains("error"));
    }
}
