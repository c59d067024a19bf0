//! `compare bench`, the orchestration: the fiber server, its async twin and the raw
//! may_minihttp baseline, measured in the same rounds by the same load tools against
//! identical private MariaDBs, the servers pinned apart from the load tools.
//!
//! ```text
//! core split (cpus.rs); the quota rule picks the CPU-bound rows' quota (quota.rs);
//! tools and limits checked, the soft open-files limit raised (preflight.rs); the
//! quota's cgroup created; results/<time>
//! for each round:                          (the runtimes' order rotates every round)
//!   for each settings group (scenario.rs; a quota is a setting):
//!     for each runtime: a fresh MariaDB (max_connections for the group's pool),
//!       pinned to the server cpus, `taskset -c S` the runtime's server
//!       (`fiberstack serve` or `compare serve --runtime X`: process.rs), moved
//!       into the quota's cgroup if the group has one, idle RSS,
//!       for each scenario it runs: its route probed if the demo may lack it, warm
//!       up, then `taskset -c L` ab or wrk (load.rs) while sampling RSS, and reading
//!       the server's and the tool's CPU time and the quota's periods
//!       stop it (SIGTERM)                  (a progress line on stderr: progress.rs)
//! spreads over rounds, per-round ratios, bounds (bounds.rs) -> table (report.rs),
//!   chart (chart.rs), Markdown (markdown.rs) -> results/<time>/bench.md, bench.svg, logs
//! ```

pub mod bounds;
pub mod calendar;
pub mod chart;
pub mod cpus;
pub mod idle;
pub mod load;
pub mod markdown;
pub mod preflight;
pub mod process;
pub mod progress;
pub mod quota;
pub mod report;
pub mod scenario;
pub mod tfb;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use compare::Runtime;
use fiber_mysql::launcher::{LaunchConfig, MariaDb, CONNECTION_HEADROOM};

use crate::bench::cpus::Split;
use crate::bench::preflight::Limits;
use crate::bench::process::{CpuTimes, RssSampler, ServerProcess};
use crate::bench::progress::Progress;
use crate::bench::quota::{CpuGroup, QuotaChoice, QuotaUse};
use crate::bench::report::{Bounds, Row, Sample, Table};
use crate::bench::scenario::Scenario;

/// Rounds of a full run, and of a `--quick` one, unless `--rounds` says otherwise:
/// rounds differ by up to 25% on a shared host, so a median needs five.
const ROUNDS: u64 = 5;
const QUICK_ROUNDS: u64 = 1;
/// Time a fresh server gets to settle its start-up allocations before its idle RSS is read.
const SETTLE: Duration = Duration::from_millis(300);
/// Longest wait for what the previous scenario left in flight to finish (`wait_idle`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// The flags of `compare bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Rounds, the runtimes' order rotating each round; the table shows min, median
    /// and max (default 5, or 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=50))]
    pub rounds: Option<u64>,
    /// A smoke run: small loads and short sleeps, seconds in all.
    #[arg(long)]
    pub quick: bool,
    /// Seconds of each wrk run (not for --quick).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=600))]
    pub duration: u64,
    /// Only the scenarios whose name contains this, or one of several separated by
    /// commas (ab-c5, ab-c220, hello-64, hello-256,
    /// hello-1024, hello-5000, widgets-http-100, widgets-1000, widgets-5000,
    /// widgets-10000, sleep-10000, idle-9000, idle-50000; with --quick: ab-c5,
    /// hello-16, hello-200, widgets-http-10, widgets-20, widgets-200, sleep-200,
    /// idle-200).
    #[arg(long)]
    pub only: Option<String>,
    /// Threads of each server (may's or tokio's: `--threads`); default: the server cpus.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    /// Cpus of the servers and their MariaDB, like `1` or `0-1` (default: the upper
    /// half of the usable cpus, or those --load-cpus leaves).
    #[arg(long)]
    pub server_cpus: Option<String>,
    /// Cpus of ab and wrk (default: the lower half, or those --server-cpus leaves).
    #[arg(long)]
    pub load_cpus: Option<String>,
    /// Hold the server of the CPU-bound rows (/hello under wrk) to PCT% of one cpu
    /// with a cgroup CPU quota, so that the server, not the load tool, is the limit:
    /// 1-100, off, or auto (default): 40 when the load tools have no more cpus than the
    /// server (one each on two cores: wrk otherwise tops out first), none when they
    /// have more.
    ///
    /// Only the server goes into the quota's cgroup (fiberstack-bench-<pid>, removed
    /// at the end, also after Ctrl-C); its MariaDB stays on the server cpus outside
    /// it. Sleeping and idle rows never run under a quota. The tables' `quota` column
    /// says whether a row ran under one and how much of it the server used. Needs a
    /// writable cgroup v2 cpu controller or v1 cpu hierarchy (root): without one, a
    /// bench that needs a quota refuses to start.
    #[arg(long, default_value = "auto", value_name = "PCT|auto|off")]
    pub server_quota: QuotaChoice,
    /// Where the cgroup file system is mounted (v2, or v1 with the cpu hierarchy in
    /// cpu/). For tests: a directory that is not a cgroup shows the refusal.
    #[arg(long, env = "FIBERSTACK_BENCH_CGROUP_ROOT", default_value = quota::DEFAULT_ROOT)]
    pub cgroup_root: PathBuf,
    /// Where the preflight reads net.core.somaxconn, net.ipv4.ip_local_port_range and
    /// vm.max_map_count. For tests: a directory laid out like /proc/sys with smaller
    /// limits.
    #[arg(long, env = "FIBERSTACK_BENCH_PROC_SYS", default_value = preflight::DEFAULT_PROC_SYS)]
    pub proc_sys: PathBuf,
    /// Where the results directory is created.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// TechEmpower's six tests (json, plaintext, db, queries, fortunes, updates) on
    /// examples/techempower, axum + mysql_async and raw may_minihttp instead of the
    /// demo's scenarios (`bench/tfb.rs`); --only picks tests by name.
    #[arg(long)]
    pub tfb: bool,
    /// With --tfb: the connections of each row (default 64,256; --quick 16).
    #[arg(long, value_name = "N,N,...", requires = "tfb")]
    pub tfb_connections: Option<String>,
}

/// The runtimes a bench compares, fibers first (the others' ratios are fibers over them).
pub const RUNTIMES: [Runtime; 3] = [Runtime::Fibers, Runtime::Async, Runtime::Minihttp];

/// What a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    pub rows: Vec<Row>,
    pub table: String,
    /// Server CPU per request on the CPU-bound scenarios (`None` if none ran).
    pub cpu_table: Option<String>,
    pub split: Split,
    /// What the CPU-bound rows ran under: the quota and its cgroup, or none, and why.
    pub quota: String,
}

/// `compare bench`: run, print the table, write the files.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.tfb {
        return tfb::run(args);
    }
    let outcome = bench(args)?;
    println!("{}", outcome.split);
    println!("{}\n", outcome.quota);
    println!("{}", outcome.table);
    for line in report::memory_lines(&outcome.rows) {
        println!("{line}");
    }
    if let Some(cpu) = &outcome.cpu_table {
        println!("\nServer CPU per served request (the CPU-bound scenarios):\n\n{cpu}");
    }
    for line in report::load_bound_lines(&outcome.rows)
        .into_iter()
        .chain(report::quota_lines(&outcome.rows))
    {
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
        scenarios.retain(|s| picked(only, s.name));
        if scenarios.is_empty() {
            return Err(format!("no scenario name contains '{only}'"));
        }
    }
    let split = cpus::split(
        args.server_cpus.as_deref(),
        args.load_cpus.as_deref(),
        &cpus::usable()?,
    )?;
    eprintln!("bench: {split}");
    let decision = quota::decide(args.server_quota, &split);
    scenario::hold_cpu_bound(&mut scenarios, decision.percent);
    let threads = args
        .threads
        .map_or(split.server.len(), |t| t as usize)
        .max(1);
    preflight::check_tools(&scenarios)?;
    // Raised first, so that the check below sees what the children will have.
    if let Some(line) = preflight::raise_open_files(preflight::most_open_files(&scenarios)) {
        eprintln!("{line}");
    }
    let limits = Limits::read(&args.proc_sys);
    let pre = preflight::check_limits(
        &scenarios,
        &limits,
        &|s, r| s.skipped_on(r).is_some(),
        &preflight::hard_open_files_refusal,
    );
    for line in &pre.lines {
        eprintln!("{line}");
    }
    // Why a row is not run on a runtime: its own reason, or this machine's limits.
    let not_run: HashMap<(&'static str, Runtime), String> = scenarios
        .iter()
        .flat_map(|s| RUNTIMES.map(|r| (s, r)))
        .filter_map(|(s, r)| {
            let why = s
                .skipped_on(r)
                .or_else(|| pre.not_run.get(&(s.name, r)).cloned())?;
            Some(((s.name, r), why))
        })
        .collect();
    let runs = |s: &Scenario, r: Runtime| !not_run.contains_key(&(s.name, r));
    let runnable = |s: &Scenario| RUNTIMES.iter().any(|r| runs(s, *r));
    if !scenarios.iter().any(runnable) {
        return Err(
            "nothing left to run: every row selected is beyond this machine's limits (the \
             preflight's lines above say which, and how to raise them)"
                .into(),
        );
    }
    let group = match decision.percent {
        Some(pct)
            if scenarios
                .iter()
                .any(|s| s.settings.quota.is_some() && runnable(s)) =>
        {
            Some(CpuGroup::create(&args.cgroup_root, pct).map_err(|e| {
                format!(
                    "--server-quota {}: cannot hold the server to {pct}% of a cpu: {e}. Run \
                     the bench as root where the cgroup file system at {} (--cgroup-root) has \
                     cgroup v2's cpu controller or v1's cpu hierarchy, or pass --server-quota \
                     off to run the /hello rows without a quota (the load tool may then be \
                     their limit)",
                    args.server_quota,
                    args.cgroup_root.display()
                )
            })?)
        }
        _ => None,
    };
    let quota_line = match (&group, decision.percent) {
        (Some(g), Some(pct)) => format!(
            "quota: the CPU-bound rows (/hello under wrk) hold the server to {pct}% of one cpu \
             ({g}; {}); MariaDB stays outside it",
            decision.why
        ),
        (None, Some(pct)) => format!(
            "quota: none (no CPU-bound row runs; {pct}% from {})",
            decision.why
        ),
        (_, None) => format!("quota: none ({})", decision.why),
    };
    eprintln!("bench: {quota_line}");
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    // Before anything starts: the fiber server's binary must be there too.
    process::fiber_server(&exe)?;
    let dir = args.out.join(calendar::timestamp(SystemTime::now()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;

    let rounds = args
        .rounds
        .unwrap_or(if args.quick { QUICK_ROUNDS } else { ROUNDS }) as usize;
    let groups = scenario::groups(&scenarios);
    let per_round = scenarios
        .iter()
        .map(|s| RUNTIMES.iter().filter(|r| runs(s, **r)).count())
        .sum::<usize>();
    let mut progress = Progress::new(rounds * per_round);
    let mut samples: HashMap<(&'static str, Runtime), Vec<Sample>> = HashMap::new();
    // Rows whose route the server turned out not to have (a probe answered 404).
    let mut missing: HashMap<(&'static str, Runtime), String> = HashMap::new();
    let mut banners: Vec<String> = Vec::new();
    let started = Instant::now();
    for round in 0..rounds {
        // Rotate: each runtime goes first, second and third in turn.
        let mut order = RUNTIMES;
        order.rotate_left(round % RUNTIMES.len());
        for (settings, list) in &groups {
            for runtime in order {
                let list: Vec<&Scenario> = list.iter().filter(|s| runs(s, runtime)).collect();
                if list.is_empty() {
                    continue;
                }
                let log = dir.join(format!("server-{runtime}.log"));
                // A fresh MariaDB for every server: one that just carried another
                // group's thousands of connections and sleeps slowed what ran next.
                let db = fresh_database(settings.db_pool)?;
                split.pin_pid(db.pid())?;
                let server = ServerProcess::start(
                    &exe,
                    runtime,
                    &db.url(),
                    *settings,
                    threads,
                    &split,
                    &log,
                )?;
                // Only the server goes under the quota (quota.rs says why).
                let held = match (settings.quota, &group) {
                    (Some(_), Some(g)) => {
                        g.add(server.pid())?;
                        Some(g)
                    }
                    _ => None,
                };
                if !banners
                    .iter()
                    .any(|b| b.contains(&format!("runtime {runtime}")))
                {
                    banners.push(server.banner.clone());
                }
                // Let start-up allocations settle before the idle reading.
                std::thread::sleep(SETTLE);
                let idle_kib = server.rss_kib().unwrap_or(0);
                for s in list {
                    progress.step(&format!(
                        "round {}/{rounds} {runtime:<8} {} c={} {}{}",
                        round + 1,
                        s.path,
                        s.load.concurrency(),
                        s.load.describe(),
                        s.settings
                            .quota
                            .map_or(String::new(), |p| format!(" quota {p}%"))
                    ));
                    // A 404 says the server has no such route; anything else (no
                    // answer at all included) is measured, and shows in the row.
                    if let Some(probe) = s.probe.filter(|p| server.status_of(p) == Some(404)) {
                        missing.insert(
                            (s.name, runtime),
                            format!(
                                "this server has no such route (GET {probe} answered 404); \
                                 BENCHMARKS.md, \"The scale rows\", proposes it"
                            ),
                        );
                        continue;
                    }
                    if let Err(e) = server.wait_idle(IDLE_TIMEOUT) {
                        progress.note(format!("bench: before {} on {runtime}: {e}", s.name));
                    }
                    let sample = measure(&server, db.pid(), s, idle_kib, &split, held);
                    if let Err(e) = &sample.result {
                        progress.note(format!("bench: {} on {runtime} failed: {e}", s.name));
                    }
                    samples.entry((s.name, runtime)).or_default().push(sample);
                }
                server.stop()?;
                drop(db);
            }
        }
    }
    progress.done(started.elapsed());

    let none: Vec<Sample> = Vec::new();
    let of = |name, runtime| samples.get(&(name, runtime)).unwrap_or(&none);
    let mut rows = Vec::new();
    for s in &scenarios {
        for runtime in RUNTIMES {
            // Per-round ratios between fibers and each other runtime.
            let (fibers, this) = (of(s.name, Runtime::Fibers), of(s.name, runtime));
            let vs_fibers = runtime != Runtime::Fibers;
            let key = (s.name, runtime);
            let base = Row {
                runtime: runtime.to_string(),
                scenario: s.name.to_string(),
                route: s.path.clone(),
                concurrency: s.load.concurrency(),
                load: s.load.describe(),
                skipped: not_run.get(&key).or(missing.get(&key)).cloned(),
                ratio: vs_fibers
                    .then(|| report::round_ratios(fibers, this, report::rps))
                    .flatten(),
                cpu_ratio: vs_fibers
                    .then(|| report::round_ratios(this, fibers, report::cpu_us))
                    .flatten(),
                tool: s.load.tool(),
                load_cpus: split.load.len(),
                pinned: split.pinned,
                quota: s.settings.quota,
                ..Row::default()
            };
            let bounds = s.route_secs.map(|secs| Bounds {
                ceiling: bounds::ceiling_rps(&s.load, secs),
                expected: bounds::expected_rps(&s.load, secs),
            });
            rows.push(Row::from_samples(
                base,
                of(s.name, runtime),
                bounds,
                s.memory_per_request,
            ));
        }
    }
    let table = Table::main(&rows).text();
    let cpu_table = Table::cpu(&rows);
    let cpu_table = (!cpu_table.is_empty()).then(|| cpu_table.text());
    let title = format!(
        "compare bench: fibers vs async vs raw may_minihttp, {rounds} round{}{}",
        if rounds == 1 { "" } else { "s" },
        if args.quick { " (--quick)" } else { "" }
    );
    let md = markdown::markdown(
        &markdown::Context {
            title: &title,
            split: &split,
            threads,
            quota: &quota_line,
            preflight: &pre.lines,
            took: started.elapsed(),
        },
        &scenarios,
        &rows,
        &samples,
        &banners,
    );
    write(&dir.join("bench.md"), &md)?;
    write(&dir.join("bench.svg"), &chart::svg(&rows, &title))?;
    // The servers are stopped: the quota's group is empty, and goes.
    drop(group);
    Ok(Outcome {
        dir,
        rows,
        table,
        cpu_table,
        split,
        quota: quota_line,
    })
}

/// A private MariaDB sized for a pool of `db_pool` (from the template datadir: about
/// 0.2 s).
pub(crate) fn fresh_database(db_pool: usize) -> Result<MariaDb, String> {
    MariaDb::start(LaunchConfig {
        max_connections: db_pool + CONNECTION_HEADROOM,
        ..LaunchConfig::default()
    })
    .map_err(|e| format!("cannot start a private MariaDB: {e}"))
}

/// One scenario on a running server: warm-up, then the load while RSS and CPU (the
/// server's and its MariaDB's, `db_pid`) are sampled, and the periods of the quota the
/// server is `held` under, if any.
fn measure(
    server: &ServerProcess,
    db_pid: u32,
    s: &Scenario,
    idle_kib: u64,
    split: &Split,
    held: Option<&CpuGroup>,
) -> Sample {
    let url = format!("http://{}{}", server.addr, s.path);
    if s.warmup_secs > 0 {
        let _ = load::wrk(
            s.load.concurrency(),
            Duration::from_secs(s.warmup_secs),
            &url,
            split,
        )
        .output();
    }
    let throttling_before = held.and_then(CpuGroup::throttling);
    let cpu_before = server.cpu_times();
    let db_before = process::cpu_times(db_pid);
    let tool_before = s.load.tool().and(process::children_cpu_times());
    let sampler = RssSampler::start(server.pid());
    let t0 = Instant::now();
    let result = load::run(&s.load, server.addr, &s.path, split);
    let wall_secs = t0.elapsed().as_secs_f64();
    let peak_kib = sampler.finish();
    let since = |before: Option<CpuTimes>, after: Option<CpuTimes>| Some(after?.since(before?));
    let quota = held.map(|g| QuotaUse {
        percent: g.percent(),
        throttling: g
            .throttling()
            .and_then(|after| Some(after.since(throttling_before?))),
    });
    Sample {
        result,
        idle_kib,
        peak_kib,
        wall_secs,
        server_cpu: since(cpu_before, server.cpu_times()),
        db_cpu: since(db_before, process::cpu_times(db_pid)),
        load_cpu: since(tool_before, process::children_cpu_times()),
        load_cpus: split.load.len(),
        quota,
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Whether `name` is one that `--only` picks: it contains `only`, or one of the names
/// `only` lists separated by commas (`hello-64,hello-1024`).
pub(crate) fn picked(only: &str, name: &str) -> bool {
    only.split(',').any(|o| name.contains(o.trim()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_picks_a_name_it_contains_or_one_of_a_list() {
        assert!(super::picked("hello", "hello-1024"));
        assert!(super::picked("hello-64,hello-1024", "hello-1024"));
        assert!(super::picked("hello-64, widgets-5000", "widgets-5000"));
        assert!(!super::picked("hello-64,hello-1024", "hello-256"));
    }
}
