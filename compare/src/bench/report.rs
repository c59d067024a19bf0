//! The results as tables: medians and spreads over rounds, per-round ratios, one row
//! per runtime and scenario; a second table of server CPU per request on the
//! CPU-bound scenarios, whether each ran under a CPU quota and how much of it the
//! server used, and a note where the load tool was the bottleneck, or a quota'd
//! server did not reach its quota. In plain text for the terminal and in Markdown for
//! `bench.md`.

use std::fmt::Write;

use crate::bench::bounds::median;
use crate::bench::load::LoadResult;
use crate::bench::process::CpuTimes;
use crate::bench::quota::{self, QuotaUse};
use crate::bench::scenario::IDLE_LOAD;

/// A load tool that used this much of its cpus (%) or more was the bottleneck: the
/// server could have served more than it was asked to.
pub const LOAD_BOUND_PCT: f64 = 90.0;

/// One round's measurement of one scenario on one runtime.
#[derive(Clone, Debug)]
pub struct Sample {
    pub result: Result<LoadResult, String>,
    /// RSS right after the server started, before any load, in KiB.
    pub idle_kib: u64,
    /// Peak RSS while the load ran, in KiB.
    pub peak_kib: u64,
    /// Wall-clock seconds of the load as the bench timed it (the tool's start to its
    /// exit).
    pub wall_secs: f64,
    /// The server's CPU time over the load (`None` if /proc could not be read).
    pub server_cpu: Option<CpuTimes>,
    /// Its MariaDB's CPU time over the load: on the server's cpu, what the server did
    /// not get of it (`None` if /proc could not be read).
    pub db_cpu: Option<CpuTimes>,
    /// The load tool's own CPU time over its run (`None` for the idle load, which
    /// runs no tool).
    pub load_cpu: Option<CpuTimes>,
    /// How many cpus the load tool was given.
    pub load_cpus: usize,
    /// The server's CPU quota during the load (`None`: it ran without one).
    pub quota: Option<QuotaUse>,
}

impl Sample {
    /// Server CPU time during the load over its wall time, in % of one core.
    pub fn cpu_pct(&self) -> Option<f64> {
        self.pct_of_wall(self.server_cpu?)
    }

    /// MariaDB's CPU time during the load over its wall time, in % of one core.
    pub fn db_pct(&self) -> Option<f64> {
        self.pct_of_wall(self.db_cpu?)
    }

    fn pct_of_wall(&self, cpu: CpuTimes) -> Option<f64> {
        (self.wall_secs > 0.0).then(|| cpu.total() / self.wall_secs * 100.0)
    }

    /// The server's CPU time per served (2xx) request, in microseconds: what the
    /// server itself spends on a request, whether or not the load tool could keep
    /// it busy.
    pub fn cpu_us_per_request(&self) -> Option<CpuTimes> {
        let served = self.result.as_ref().ok()?.served;
        (served > 0).then(|| self.server_cpu.map(|c| c.per(served as f64, 1e6)))?
    }

    /// The load tool's CPU time over the run, in % of the cpus it was given.
    pub fn load_pct(&self) -> Option<f64> {
        let cpu = self.load_cpu?;
        let capacity = self.wall_secs * self.load_cpus.max(1) as f64;
        (capacity > 0.0).then(|| cpu.total() / capacity * 100.0)
    }

    /// The server's CPU over its quota, in % (100: it used all of it).
    pub fn quota_used_pct(&self) -> Option<f64> {
        Some(self.cpu_pct()? / f64::from(self.quota?.percent) * 100.0)
    }

    /// Of the quota's periods during the load, those in which the server used it up, %.
    pub fn throttled_pct(&self) -> Option<f64> {
        let t = self.quota?.throttling?;
        (t.periods > 0).then(|| t.throttled as f64 / t.periods as f64 * 100.0)
    }

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
    /// MariaDB's CPU over the load, % of one core (the median over rounds).
    pub db_pct: Option<f64>,
    /// The load's bounds (sleeping routes only).
    pub bounds: Option<Bounds>,
    /// Fibers' req/s over this runtime's, per round: their median and spread (rows
    /// of other runtimes than fibers).
    pub ratio: Option<Spread>,
    /// Server CPU per served request over the rounds, us (user + kernel).
    pub cpu_us: Option<Spread>,
    /// Its user and kernel parts, medians over the rounds, us.
    pub user_us: Option<f64>,
    pub kernel_us: Option<f64>,
    /// This runtime's CPU per request over fibers', per round: their median and
    /// spread (rows of other runtimes than fibers). Above 1, fibers spend less.
    pub cpu_ratio: Option<Spread>,
    /// The load tool's CPU over its run, in % of its cpus: the median over rounds.
    pub load_pct: Option<f64>,
    /// The load tool (`None` for the idle load) and how many cpus it had.
    pub tool: Option<&'static str>,
    pub load_cpus: usize,
    /// False when the bench could not pin (one cpu): ratios are marked so.
    pub pinned: bool,
    /// (peak RSS - idle RSS) / concurrency, KiB (scenarios that ask for it).
    pub kib_per_request: Option<f64>,
    /// The server's CPU quota, % of one cpu (`None`: no quota).
    pub quota: Option<u32>,
    /// How much of its quota the server used, and in how many of the quota's periods
    /// it used it up, %: medians over the rounds.
    pub quota_used: Option<f64>,
    pub throttled_pct: Option<f64>,
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
            cpu_pct: med(&|_, s| s.cpu_pct().unwrap_or(f64::NAN)),
            db_pct: med(&|_, s| s.db_pct().unwrap_or(f64::NAN)),
            cpu_us: Spread::of(&all(&|_, s| cpu_us(s).unwrap_or(f64::NAN))),
            user_us: med(&|_, s| s.cpu_us_per_request().map_or(f64::NAN, |c| c.user)),
            kernel_us: med(&|_, s| s.cpu_us_per_request().map_or(f64::NAN, |c| c.kernel)),
            load_pct: med(&|_, s| s.load_pct().unwrap_or(f64::NAN)),
            bounds,
            kib_per_request: if memory {
                med(&|_, s| s.kib_per_connection(base.concurrency))
            } else {
                None
            },
            quota_used: med(&|_, s| s.quota_used_pct().unwrap_or(f64::NAN)),
            throttled_pct: med(&|_, s| s.throttled_pct().unwrap_or(f64::NAN)),
            ..base
        }
    }

    /// A CPU-bound route driven by a load tool: its row belongs in the CPU table.
    pub fn cpu_bound(&self) -> bool {
        self.bounds.is_none() && self.tool.is_some() && self.skipped.is_none()
    }

    /// Median served req/s over the ceiling C/S and over the expected figure.
    pub fn of_bounds(&self) -> Option<(f64, f64)> {
        let (rps, b) = (self.rps?.median, self.bounds?);
        Some((rps / b.ceiling, rps / b.expected))
    }
}

/// `num`'s `figure` over `den`'s, round by round (both lists in round order), as a
/// median with its spread: only ratios within a round mean anything when rounds
/// differ by more than the servers do.
pub fn round_ratios(
    num: &[Sample],
    den: &[Sample],
    figure: fn(&Sample) -> Option<f64>,
) -> Option<Spread> {
    let per_round: Vec<f64> = num
        .iter()
        .zip(den)
        .filter_map(|(n, d)| {
            let (n, d) = (figure(n)?, figure(d)?);
            (d > 0.0).then(|| n / d)
        })
        .collect();
    Spread::of(&per_round)
}

/// Served req/s of a round that produced numbers.
pub fn rps(s: &Sample) -> Option<f64> {
    s.result.as_ref().ok().map(|r| r.rps)
}

/// Server CPU per served request, us, of a round that produced numbers.
pub fn cpu_us(s: &Sample) -> Option<f64> {
    s.cpu_us_per_request().map(|c| c.total())
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

/// The min-max of a spread, with `decimals` places.
fn min_max(v: Option<Spread>, decimals: usize) -> String {
    opt(v.map(|v| v.min), |min| {
        format!("{min:.decimals$}-{:.decimals$}", v.map_or(min, |v| v.max))
    })
}

/// A per-round ratio of `row` with its spread, marked when the bench could not pin.
fn ratio(row: &Row, v: Option<Spread>) -> String {
    match v {
        Some(v) => format!(
            "{:.2}x ({:.2}-{:.2}){}",
            v.median,
            v.min,
            v.max,
            if row.pinned { "" } else { " unpinned" }
        ),
        None => "-".into(),
    }
}

/// The column that holds the median req/s (the chart and the tests find it by name).
pub const RPS_COLUMN: &str = "served/s median";

/// The column of the CPU table that holds the median server CPU per request.
pub const CPU_COLUMN: &str = "server CPU/request";

/// The column of both tables that says whether a row ran under a CPU quota.
pub const QUOTA_COLUMN: &str = "quota";

/// `-`, or the quota with how much of it the server used: `40%, used 99%`.
fn quota_cell(r: &Row) -> String {
    match (r.quota, r.quota_used) {
        (None, _) => "-".into(),
        (Some(p), Some(used)) => format!("{p}%, used {used:.0}%"),
        (Some(p), None) => format!("{p}%"),
    }
}

/// The header and cells of the main table, a row per runtime and scenario.
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
        "MariaDB CPU",
        QUOTA_COLUMN,
        "of ceiling C/S",
        "of expected",
        "fibers/this",
    ];
    let body = rows
        .iter()
        .map(|r| {
            let mut cells = lead(r);
            if let Some(why) = &r.skipped {
                cells.push(format!("not run: {why}"));
                cells.extend((0..11).map(|_| "-".to_string()));
                return cells;
            }
            cells.push(match (r.rps, r.errors) {
                (Some(v), 0) => format!("{:.1}", v.median),
                (Some(v), e) => format!("{:.1} ({e} of {} rounds failed)", v.median, r.rounds),
                // Measured, but a load without a rate (the idle connections).
                (None, e) if e < r.rounds => "-".into(),
                (None, _) => "error".into(),
            });
            cells.push(min_max(r.rps, 1));
            let bounds = r.of_bounds();
            cells.extend([
                opt(r.p50_ms, fmt_ms),
                opt(r.p99_ms, fmt_ms),
                opt(r.failed, |v| format!("{v:.0}")),
                opt(r.peak_mib, |v| format!("{v:.0} MiB")),
                opt(r.cpu_pct, |v| format!("{v:.0}%")),
                opt(r.db_pct, |v| format!("{v:.0}%")),
                quota_cell(r),
                match (bounds, r.bounds) {
                    (Some((c, _)), Some(b)) => format!("{:.1}% of {:.1}", c * 100.0, b.ceiling),
                    _ => "-".into(),
                },
                match (bounds, r.bounds) {
                    (Some((_, e)), Some(b)) => format!("{:.1}% of {:.1}", e * 100.0, b.expected),
                    _ => "-".into(),
                },
                ratio(r, r.ratio),
            ]);
            cells
        })
        .collect();
    (header, body)
}

/// The header and cells of the CPU table: what the server spends per request on the
/// CPU-bound scenarios, whether or not the load tool could keep it busy, and how busy
/// the tool was.
fn cpu_cells(rows: &[Row]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let mut header = LEAD.to_vec();
    header.extend([
        CPU_COLUMN,
        "min-max",
        "user",
        "kernel",
        "this/fibers",
        "load tool CPU",
        QUOTA_COLUMN,
    ]);
    let us = |v: f64| format!("{v:.2} us");
    let body = rows
        .iter()
        .filter(|r| r.cpu_bound())
        .map(|r| {
            let mut cells = lead(r);
            cells.extend([
                opt(r.cpu_us.map(|v| v.median), us),
                min_max(r.cpu_us, 2),
                opt(r.user_us, us),
                opt(r.kernel_us, us),
                ratio(r, r.cpu_ratio),
                opt(r.load_pct, |v| format!("{v:.0}% of {}", cpus(r.load_cpus))),
                quota_cell(r),
            ]);
            cells
        })
        .collect();
    (header, body)
}

/// A table's header and cells, rendered for the terminal or in Markdown.
pub struct Table {
    header: Vec<&'static str>,
    body: Vec<Vec<String>>,
}

impl Table {
    /// The main table: a row per runtime and scenario.
    pub fn main(rows: &[Row]) -> Table {
        let (header, body) = cells(rows);
        Table { header, body }
    }

    /// Server CPU per request on the CPU-bound scenarios, and the load tool's use.
    pub fn cpu(rows: &[Row]) -> Table {
        let (header, body) = cpu_cells(rows);
        Table { header, body }
    }

    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// For a terminal: aligned columns.
    pub fn text(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.body {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", padded.join("  ").trim_end());
        };
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        line(&header, &mut out);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, &mut out);
        for row in &self.body {
            line(row, &mut out);
        }
        out
    }

    /// In Markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!("| {} |\n", self.header.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(self.header.len()));
        for row in &self.body {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out
    }
}

/// The columns that name a row (the main table starts with them too).
const LEAD: [&str; 4] = ["runtime", "route", "concurrency", "load"];

/// The cells of [`LEAD`].
fn lead(r: &Row) -> Vec<String> {
    vec![
        r.runtime.clone(),
        r.route.clone(),
        r.concurrency.to_string(),
        r.load.clone(),
    ]
}

/// `1 cpu`, `2 cpus`.
fn cpus(n: usize) -> String {
    format!("{n} cpu{}", if n == 1 { "" } else { "s" })
}

/// The rows whose load tool was the bottleneck (it used [`LOAD_BOUND_PCT`] or more
/// of its cpus), each as a sentence saying so and what to do.
pub fn load_bound_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let (pct, tool) = (r.load_pct?, r.tool?);
            let what = match r.quota {
                None => format!(
                    "req/s is bounded by the load tool; compare server CPU per request, or \
                     hold the server under a quota (--server-quota {})",
                    quota::AUTO_PERCENT
                ),
                Some(p) => format!(
                    "even with the server held to {p}% of a cpu the load tool was the limit: \
                     give a smaller --server-quota"
                ),
            };
            (pct >= LOAD_BOUND_PCT).then(|| {
                format!(
                    "{} {} c={}: {tool} used {pct:.0}% of its {}: {what}",
                    r.runtime,
                    r.route,
                    r.concurrency,
                    cpus(r.load_cpus)
                )
            })
        })
        .collect()
}

/// The quota'd rows whose server did not reach its quota (it used less than
/// [`quota::REACHED_PCT`] of it): the quota did not hold it, something else did.
pub fn quota_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let (p, used) = (r.quota?, r.quota_used?);
            (used < quota::REACHED_PCT).then(|| {
                format!(
                    "{} {} c={}: held to {p}% of a cpu, the server used {used:.0}% of it and ran \
                     out in {} of the quota's periods: the quota was not the limit (the load \
                     tool used {} of its cpus; a busy machine takes the server's cpu too)",
                    r.runtime,
                    r.route,
                    r.concurrency,
                    opt(r.throttled_pct, |v| format!("{v:.0}%")),
                    opt(r.load_pct, |v| format!("{v:.0}%")),
                )
            })
        })
        .collect()
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
                 {per:.2} KiB {what}",
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
            wall_secs: 1.0,
            server_cpu: Some(CpuTimes {
                user: 0.25,
                kernel: 0.25,
            }),
            db_cpu: Some(CpuTimes {
                user: 0.5,
                kernel: 0.25,
            }),
            load_cpu: Some(CpuTimes {
                user: 0.2,
                kernel: 0.3,
            }),
            load_cpus: 1,
            quota: None,
        }
    }

    /// A round of 100 served requests in 1 s, the server spending `user` and
    /// `kernel` us on each, the load tool `load_pct` of its one cpu.
    fn cpu_sample(user: f64, kernel: f64, load_pct: f64) -> Sample {
        Sample {
            server_cpu: Some(CpuTimes {
                user: user * 100.0 / 1e6,
                kernel: kernel * 100.0 / 1e6,
            }),
            load_cpu: Some(CpuTimes {
                user: load_pct / 100.0,
                kernel: 0.0,
            }),
            ..sample(100.0, 2048)
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
        async_.ratio = round_ratios(&f, &a, rps);
        let rps = fibers.rps.unwrap();
        assert_eq!((rps.min, rps.median, rps.max), (100.0, 170.0, 180.0));
        assert_eq!(fibers.of_bounds(), Some((0.68, 0.85)));
        // Per round: 100/150, 180/85, 170/80: the median is 2.118 (not 170/85 = 2.0).
        let ratio = async_.ratio.unwrap();
        assert!((ratio.median - 180.0 / 85.0).abs() < 1e-9, "{ratio:?}");
        assert!((ratio.min - 100.0 / 150.0).abs() < 1e-9, "{ratio:?}");
        assert_eq!(fibers.kib_per_request, Some(1024.0));
        let rows = [fibers, async_];
        let text = Table::main(&rows).text();
        assert!(text.contains("68.0% of 250.0"), "{text}");
        assert!(text.contains("85.0% of 200.0"), "{text}");
        assert!(text.contains("100.0-180.0"), "{text}");
        assert!(text.contains("2.12x (0.67-2.12)"), "{text}");
        let md = Table::main(&rows).markdown();
        assert_eq!(md.lines().count(), 4);
        assert_eq!(memory_lines(&rows).len(), 2);
        let mut unpinned = rows[1].clone();
        unpinned.pinned = false;
        assert!(Table::main(&[unpinned])
            .text()
            .contains("x (0.67-2.12) unpinned"));
    }

    #[test]
    fn cpu_rows_give_us_per_request_per_round_ratios_and_load_bound_notes() {
        let f = [
            cpu_sample(1.0, 7.0, 97.0),
            cpu_sample(1.0, 6.0, 95.0),
            cpu_sample(2.0, 7.0, 99.0),
        ];
        let m = [
            cpu_sample(1.0, 5.0, 50.0),
            cpu_sample(1.0, 6.0, 60.0),
            cpu_sample(1.0, 8.0, 70.0),
        ];
        let hello = |runtime: &str, samples: &[Sample]| Row {
            route: "/hello".into(),
            tool: Some("wrk"),
            load_cpus: 1,
            ..row(runtime, samples, None)
        };
        let fibers = Row::from_samples(hello("fibers", &f), &f, None, false);
        let mut mini = Row::from_samples(hello("minihttp", &m), &m, None, false);
        mini.cpu_ratio = round_ratios(&m, &f, cpu_us);
        let cpu = fibers.cpu_us.unwrap();
        assert!((cpu.median - 8.0).abs() < 1e-9, "{cpu:?}");
        assert!((fibers.user_us.unwrap() - 1.0).abs() < 1e-9);
        assert!((fibers.kernel_us.unwrap() - 7.0).abs() < 1e-9);
        assert!((fibers.cpu_pct.unwrap() - 0.08).abs() < 1e-9);
        // MariaDB's 0.75 s of CPU over the 1 s load.
        assert!((fibers.db_pct.unwrap() - 75.0).abs() < 1e-9);
        // Per round: 6/8, 7/7, 9/9: the median is 1.0 (not 7/8, the medians' ratio).
        let ratio = mini.cpu_ratio.unwrap();
        assert!((ratio.median - 1.0).abs() < 1e-9, "{ratio:?}");
        assert!((ratio.min - 0.75).abs() < 1e-9, "{ratio:?}");
        let rows = [fibers, mini];
        let text = Table::cpu(&rows).text();
        assert!(text.contains(CPU_COLUMN), "{text}");
        let md = Table::cpu(&rows).markdown();
        assert_eq!(md.lines().count(), 4, "{md}");
        assert!(
            md.contains("| 8.00 us | 7.00-9.00 | 1.00 us | 7.00 us | - | 97% of 1 cpu |"),
            "{md}"
        );
        assert!(md.contains("| 1.00x (0.75-1.00) | 60% of 1 cpu |"), "{md}");
        // Only fibers' wrk was the bottleneck (97% median), and the note says so.
        let notes = load_bound_lines(&rows);
        assert_eq!(
            notes,
            [
                "fibers /hello c=2: wrk used 97% of its 1 cpu: req/s is bounded by the load \
              tool; compare server CPU per request, or hold the server under a quota \
              (--server-quota 40)"
            ]
        );
        // Sleeping routes and the idle load are not in the CPU table.
        let sleeping = row("fibers", &f, Some(Bounds::default()));
        let idle = Row {
            tool: None,
            ..row("fibers", &f, None)
        };
        assert!(Table::cpu(&[sleeping, idle]).is_empty());
    }

    #[test]
    fn a_round_without_requests_or_a_reading_has_no_cpu_figure() {
        let mut none_served = cpu_sample(1.0, 7.0, 97.0);
        none_served.result = none_served.result.map(|r| LoadResult { served: 0, ..r });
        assert_eq!(none_served.cpu_us_per_request(), None);
        let unread = Sample {
            server_cpu: None,
            db_cpu: None,
            load_cpu: None,
            ..cpu_sample(1.0, 7.0, 97.0)
        };
        assert_eq!(
            (unread.cpu_us_per_request(), unread.load_pct()),
            (None, None)
        );
        assert_eq!((unread.cpu_pct(), unread.db_pct()), (None, None));
    }

    /// A round under a quota of 40%: the server used `cpu_pct` of a core over the load,
    /// and used the quota up in `throttled` of 100 periods.
    fn quota_sample(cpu_pct: f64, throttled: u64) -> Sample {
        Sample {
            server_cpu: Some(CpuTimes {
                user: 0.0,
                kernel: cpu_pct / 100.0,
            }),
            quota: Some(QuotaUse {
                percent: 40,
                throttling: Some(quota::Throttling {
                    periods: 100,
                    throttled,
                }),
            }),
            ..cpu_sample(1.0, 7.0, 45.0)
        }
    }

    #[test]
    fn quota_rows_say_how_much_of_it_the_server_used() {
        let held = |samples: &[Sample]| {
            let base = Row {
                route: "/hello".into(),
                tool: Some("wrk"),
                load_cpus: 1,
                quota: Some(40),
                ..row("fibers", &[], None)
            };
            Row::from_samples(base, samples, None, false)
        };
        let full = held(&[quota_sample(39.6, 97), quota_sample(40.4, 99)]);
        assert!((full.quota_used.unwrap() - 100.0).abs() < 1e-9, "{full:?}");
        assert!(
            (full.throttled_pct.unwrap() - 98.0).abs() < 1e-9,
            "{full:?}"
        );
        let short = held(&[quota_sample(20.0, 10)]);
        let unheld = row("async", &[sample(10.0, 1)], None);
        let rows = [full, short, unheld];
        let main = Table::main(&rows).markdown();
        assert!(main.contains("| 40%, used 100% |"), "{main}");
        assert!(main.contains("| 40%, used 50% |"), "{main}");
        assert!(main.contains("| 50% | 75% | - |"), "no quota: {main}");
        let cpu = Table::cpu(&rows[..2]).markdown();
        assert!(cpu.ends_with("| 45% of 1 cpu | 40%, used 50% |\n"), "{cpu}");
        // Only the server that did not reach its quota gets a note.
        assert_eq!(
            quota_lines(&rows),
            [
                "fibers /hello c=2: held to 40% of a cpu, the server used 50% of it and ran out \
              in 10% of the quota's periods: the quota was not the limit (the load tool used \
              45% of its cpus; a busy machine takes the server's cpu too)"
            ]
        );
        // A load tool at its limit under a quota: the quota should be smaller.
        let mut saturated = rows[0].clone();
        saturated.load_pct = Some(95.0);
        assert!(load_bound_lines(&[saturated])[0].ends_with("give a smaller --server-quota"));
    }

    #[test]
    fn skipped_rows_say_why() {
        let mut r = row("minihttp", &[], None);
        r.skipped = Some("ab hangs".into());
        assert!(Table::main(&[r]).text().contains("not run: ab hangs"));
    }

    #[test]
    fn failed_rounds_are_shown_not_hidden() {
        let mut bad = sample(1.0, 1);
        bad.result = Err("wrk died".into());
        let rows = [row("async", &[bad.clone(), sample(50.0, 1)], None)];
        assert!(Table::main(&rows).text().contains("1 of 2 rounds failed"));
        let rows = [row("async", &[bad], None)];
        assert!(Table::main(&rows).text().contains("error"));
    }
}
