//! `fiberstack bench`: the fiber server and its async twin, measured side by side in
//! one run, by the same load tools, against identical private MariaDBs.
//!
//! ```text
//! for each round:                          (A/B order flips every round)
//!   for each settings group (scenario.rs):
//!     for each runtime: a fresh MariaDB (max_connections for the group's pool),
//!       start `fiberstack serve --runtime X` (process.rs), idle RSS,
//!       for each scenario: warm up, then ab or wrk (load.rs) while sampling RSS and CPU
//!       stop it (SIGTERM)
//! medians over rounds, bounds (bounds.rs) -> table (report.rs), chart (chart.rs)
//! -> results/<timestamp>/bench.md, bench.svg, server logs
//! ```
//! The client and the servers share this machine's cores: what one takes the other
//! does not have, and the numbers say so only together.

pub mod bounds;
pub mod chart;
pub mod load;
pub mod process;
pub mod report;
pub mod scenario;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use fiber_mysql::launcher::{LaunchConfig, MariaDb, CONNECTION_HEADROOM};

use crate::bench::process::{RssSampler, ServerProcess};
use crate::bench::report::{Row, Sample};
use crate::bench::scenario::{Load, Scenario};
use fiberstack::config::Runtime;

/// File descriptors a server needs beyond its client and MySQL connections.
const FD_SLACK: usize = 200;

/// The flags of `fiberstack bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Rounds of A/B alternation; the table shows the median of each number
    /// (default 3, or 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=50))]
    pub rounds: Option<u64>,
    /// A smoke run: small loads and short sleeps, seconds in all.
    #[arg(long)]
    pub quick: bool,
    /// Seconds of each wrk run (not for --quick).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=600))]
    pub duration: u64,
    /// Only the scenarios whose name contains this (ab-c5, ab-c220, hello-64, hello-256,
    /// widgets-http-100, widgets-1000, widgets-5000).
    #[arg(long)]
    pub only: Option<String>,
    /// Worker threads of each server (may or tokio).
    #[arg(long, default_value_t = default_workers())]
    pub workers: usize,
    /// Where the results directory is created.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// What a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    pub rows: Vec<Row>,
    pub table: String,
}

/// `fiberstack bench`: run, print the table, write the files.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let outcome = bench(args)?;
    println!("{}", outcome.table);
    for line in report::memory_lines(&outcome.rows) {
        println!("{line}");
    }
    println!("\nwritten: {}", outcome.dir.display());
    Ok(())
}

/// Run every scenario `args` selects and write the results.
pub fn bench(args: &BenchArgs) -> Result<Outcome, String> {
    let mut scenarios = if args.quick {
        scenario::quick()
    } else {
        scenario::full(args.duration)
    };
    if let Some(only) = &args.only {
        scenarios.retain(|s| s.name.contains(only.as_str()));
        if scenarios.is_empty() {
            return Err(format!("no scenario name contains '{only}'"));
        }
    }
    check_tools(&scenarios)?;
    check_open_files(&scenarios)?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let dir = args.out.join(timestamp(SystemTime::now()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;

    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 3 }) as usize;
    let groups = scenario::groups(&scenarios);
    let total = rounds * 2 * scenarios.len();
    let mut progress = Progress::new(total);
    let mut samples: HashMap<(&'static str, Runtime), Vec<Sample>> = HashMap::new();
    let mut banners: Vec<String> = Vec::new();
    let started = Instant::now();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Runtime::Fibers, Runtime::Async]
        } else {
            [Runtime::Async, Runtime::Fibers]
        };
        for (settings, list) in &groups {
            for runtime in order {
                let log = dir.join(format!("server-{runtime}.log"));
                // A fresh MariaDB for every server: one that just carried another
                // group's thousands of connections and sleeps slowed what ran next.
                let db = fresh_database(settings.db_pool)?;
                let server =
                    ServerProcess::start(&exe, runtime, &db.url(), *settings, args.workers, &log)?;
                if round == 0
                    && !banners
                        .iter()
                        .any(|b| b.contains(&format!("runtime {runtime}")))
                {
                    banners.push(server.banner.clone());
                }
                // Let start-up allocations settle before the idle reading.
                std::thread::sleep(Duration::from_millis(300));
                let idle_kib = server.rss_kib().unwrap_or(0);
                for s in list {
                    progress.step(&format!(
                        "round {}/{rounds} {runtime:<6} {} c={} {}",
                        round + 1,
                        s.path,
                        s.load.concurrency(),
                        s.load.describe()
                    ));
                    if let Err(e) = server.wait_idle(Duration::from_secs(20)) {
                        eprintln!("bench: before {} on {runtime}: {e}", s.name);
                    }
                    let sample = measure(&server, s, idle_kib);
                    if let Err(e) = &sample.result {
                        eprintln!("bench: {} on {runtime} failed: {e}", s.name);
                    }
                    samples.entry((s.name, runtime)).or_default().push(sample);
                }
                server.stop()?;
                drop(db);
            }
        }
    }
    progress.done(started.elapsed());

    let mut rows = Vec::new();
    for s in &scenarios {
        for runtime in [Runtime::Fibers, Runtime::Async] {
            let list = samples
                .get(&(s.name, runtime))
                .map_or(&[][..], Vec::as_slice);
            rows.push(Row::from_samples(
                runtime,
                s.name,
                &s.path,
                s.load.concurrency(),
                s.load.describe(),
                list,
                s.route_secs.map(|secs| bounds::bound_rps(&s.load, secs)),
                s.memory_per_request,
            ));
        }
    }
    report::fill_ratios(&mut rows);
    let table = report::text_table(&rows);
    let title = format!(
        "fiberstack bench: fibers vs async, median of {rounds} round{}{}",
        if rounds == 1 { "" } else { "s" },
        if args.quick { " (--quick)" } else { "" }
    );
    let md = markdown(
        &title,
        args,
        &scenarios,
        &rows,
        &samples,
        &banners,
        started.elapsed(),
    );
    write(&dir.join("bench.md"), &md)?;
    write(&dir.join("bench.svg"), &chart::svg(&rows, &title))?;
    Ok(Outcome { dir, rows, table })
}

/// A private MariaDB sized for a pool of `db_pool` (from the template datadir: about
/// 0.2 s).
fn fresh_database(db_pool: usize) -> Result<MariaDb, String> {
    MariaDb::start(LaunchConfig {
        max_connections: db_pool + CONNECTION_HEADROOM,
        ..LaunchConfig::default()
    })
    .map_err(|e| format!("cannot start a private MariaDB: {e}"))
}

/// One scenario on a running server: warm-up, then the load while RSS and CPU are
/// sampled.
fn measure(server: &ServerProcess, s: &Scenario, idle_kib: u64) -> Sample {
    let url = format!("http://{}{}", server.addr, s.path);
    if s.warmup_secs > 0 {
        let _ = load::wrk(
            s.load.concurrency(),
            Duration::from_secs(s.warmup_secs),
            &url,
        )
        .output();
    }
    let cpu_before = server.cpu_secs();
    let sampler = RssSampler::start(server.pid());
    let t0 = Instant::now();
    let result = load::run(&s.load, &url);
    let wall = t0.elapsed().as_secs_f64();
    let peak_kib = sampler.finish();
    let cpu_pct = match (cpu_before, server.cpu_secs()) {
        (Some(a), Some(b)) if wall > 0.0 => (b - a) / wall * 100.0,
        _ => f64::NAN,
    };
    Sample {
        result,
        idle_kib,
        peak_kib,
        cpu_pct,
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// ab and wrk must be installed for the scenarios that use them.
fn check_tools(scenarios: &[Scenario]) -> Result<(), String> {
    let needs = |ab: bool| {
        scenarios
            .iter()
            .any(|s| matches!(s.load, Load::Ab { .. }) == ab)
    };
    for (tool, arg, needed) in [("ab", "-V", needs(true)), ("wrk", "-v", needs(false))] {
        if needed && std::process::Command::new(tool).arg(arg).output().is_err() {
            return Err(format!(
                "`{tool}` is not installed: apt-get install apache2-utils wrk (or scripts/install-deps)"
            ));
        }
    }
    Ok(())
}

/// Each server holds a client and a MySQL connection per request in flight, and wrk
/// a connection per `-c`: all must fit under `ulimit -n`.
fn check_open_files(scenarios: &[Scenario]) -> Result<(), String> {
    let limit = open_files_limit().unwrap_or(u64::MAX) as usize;
    for s in scenarios {
        let need = s.load.concurrency() + s.settings.db_pool + FD_SLACK;
        if need > limit {
            return Err(format!(
                "scenario {} needs about {need} open files per process, but `ulimit -n` is {limit}: \
                 raise it or leave the scenario out with --only",
                s.name
            ));
        }
    }
    Ok(())
}

/// The soft limit on open files of this process (children inherit it).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// `2026-11-30T03-19-09Z`: UTC, sortable, safe in a file name.
fn timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The Markdown report: settings, the table, memory, and every round's req/s.
fn markdown(
    title: &str,
    args: &BenchArgs,
    scenarios: &[Scenario],
    rows: &[Row],
    samples: &HashMap<(&'static str, Runtime), Vec<Sample>>,
    banners: &[String],
    took: Duration,
) -> String {
    let mut md = format!("# {title}\n\n");
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let _ = writeln!(
        md,
        "Machine: {} cores ({cpu}); the load tools, both servers and MariaDB share them. \
         Server workers: {}. Took {:.0} s.\n",
        default_workers(),
        args.workers,
        took.as_secs_f64()
    );
    md.push_str(&report::markdown_table(rows));
    md.push('\n');
    let memory = report::memory_lines(rows);
    if !memory.is_empty() {
        md.push_str(
            "Memory per in-flight request = (RSS under load - idle RSS) / connections:\n\n",
        );
        for line in memory {
            let _ = writeln!(md, "- {line}");
        }
        md.push('\n');
    }
    md.push_str("## Scenarios\n\n| name | request | load | --fibers | --db-pool | --queue | bound |\n|---|---|---|---|---|---|---|\n");
    for s in scenarios {
        let load = match s.load {
            Load::Ab {
                concurrency,
                requests,
            } => format!("`ab -c {concurrency} -n {requests}`"),
            Load::Wrk {
                concurrency,
                duration_secs,
            } => format!(
                "`wrk -t{} -c{concurrency} -d{duration_secs}s --latency --timeout {}`",
                load::WRK_THREADS.min(concurrency),
                load::WRK_TIMEOUT
            ),
        };
        let bound = match (s.route_secs, &s.load) {
            (
                Some(secs),
                Load::Ab {
                    concurrency,
                    requests,
                },
            ) => format!(
                "ab floor {:.1} s = {:.1} req/s",
                bounds::ab_floor_secs(*requests, *concurrency, secs),
                bounds::bound_rps(&s.load, secs)
            ),
            (Some(secs), Load::Wrk { .. }) => {
                format!(
                    "C x (D-S)/D / S = {:.1} req/s",
                    bounds::bound_rps(&s.load, secs)
                )
            }
            (None, _) => "none (CPU-bound)".into(),
        };
        let _ = writeln!(
            md,
            "| {} | `{}` | {load} | {} | {} | {} | {bound} |",
            s.name, s.path, s.settings.fibers, s.settings.db_pool, s.settings.queue
        );
    }
    md.push_str("\n## Every round (req/s)\n\n| scenario | runtime | rounds |\n|---|---|---|\n");
    for s in scenarios {
        for runtime in [Runtime::Fibers, Runtime::Async] {
            let list: Vec<String> = samples
                .get(&(s.name, runtime))
                .map(|v| {
                    v.iter()
                        .map(|x| match &x.result {
                            Ok(r) => format!("{:.1} ({} failed)", r.rps, r.failed),
                            Err(_) => "error".into(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(md, "| {} | {runtime} | {} |", s.name, list.join(", "));
        }
    }
    md.push_str("\n## Servers\n\n");
    for b in banners {
        let _ = writeln!(md, "    {b}");
    }
    md
}

/// The progress line on stderr: redrawn in place on a terminal, a line per step elsewhere.
struct Progress {
    total: usize,
    done: usize,
    tty: bool,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress {
            total,
            done: 0,
            tty: std::io::stderr().is_terminal(),
        }
    }

    fn step(&mut self, what: &str) {
        self.done += 1;
        let width = 20;
        let filled = width * (self.done - 1) / self.total.max(1);
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(width - filled));
        let line = format!("bench [{bar}] {:>2}/{} {what}", self.done, self.total);
        if self.tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }

    fn done(&self, took: Duration) {
        if self.tty {
            eprintln!();
        }
        eprintln!(
            "bench: {} measurements in {:.0} s",
            self.total,
            took.as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_922_349); // 2026-11-29 03:19:09
        assert_eq!(timestamp(t), "2026-11-29T03-19-09Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00-00-00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(timestamp(leap), "2000-02-29T00-00-00Z");
    }

    #[test]
    fn this_process_has_an_open_files_limit() {
        assert!(open_files_limit().unwrap() >= 1024);
    }
}
