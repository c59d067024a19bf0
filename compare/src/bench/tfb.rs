//! `compare bench --tfb`: TechEmpower's six tests on the three servers that pass its
//! rules (`examples/techempower` on fiber_web, `compare tfb --runtime async` on axum +
//! mysql_async, `compare tfb --runtime minihttp` on raw may_minihttp + fiber_mysql),
//! each on a fresh private MariaDB that `--setup` fills, with the same pool size, the
//! same worker threads, pinned to the server cpus, wrk on the load cpus.
//!
//! ```text
//! for each round (the servers' order rotating):
//!   for held in [quota, none]:   json and plaintext under the quota (the load tool
//!                                would be their limit); the database tests without
//!     for each server: fresh MariaDB, start, (into the quota's cgroup)
//!       for each test x connections: warm up, wrk (plaintext pipelined 16 deep, as
//!         TFB runs it), the server's CPU time around the run
//! medians of req/s, CPU per request and p99; per-round ratios fiber_web / each
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use crate::bench::cpus::Split;
use crate::bench::load::{self, LoadResult};
use crate::bench::process::{CpuTimes, ServerProcess};
use crate::bench::quota::{self, CpuGroup};
use crate::bench::report::Spread;
use crate::bench::{calendar, fresh_database, BenchArgs};

/// One of TechEmpower's test types, as wrk asks it.
#[derive(Clone, Copy, Debug)]
pub struct Test {
    pub name: &'static str,
    pub path: &'static str,
    /// Requests per write (TFB pipelines plaintext 16 deep).
    pub pipeline: usize,
    /// Cheap enough per request that wrk on as many cpus would be the limit: run
    /// under the quota.
    pub cpu_bound: bool,
}

/// The six, in TFB's order; `/queries` and `/updates` with 20 rows, TFB's middle step.
pub const TESTS: [Test; 6] = [
    Test {
        name: "json",
        path: "/json",
        pipeline: 1,
        cpu_bound: true,
    },
    Test {
        name: "plaintext",
        path: "/plaintext",
        pipeline: 16,
        cpu_bound: true,
    },
    Test {
        name: "db",
        path: "/db",
        pipeline: 1,
        cpu_bound: false,
    },
    Test {
        name: "queries",
        path: "/queries?queries=20",
        pipeline: 1,
        cpu_bound: false,
    },
    Test {
        name: "fortunes",
        path: "/fortunes",
        pipeline: 1,
        cpu_bound: false,
    },
    Test {
        name: "updates",
        path: "/updates?queries=20",
        pipeline: 1,
        cpu_bound: false,
    },
];

/// Connections of each row: TFB's 64 and 256 (its 512 with `--tfb-connections`).
pub const CONNECTIONS: [usize; 2] = [64, 256];

/// MySQL connections of every server's pool: one number for all three, so the pool is
/// no server's advantage.
pub const DB_POOL: usize = 8;

/// Seconds of warm-up before each measured run (the statement caches fill, the pools
/// open their connections).
const WARMUP: Duration = Duration::from_secs(2);

/// The three servers, fiber_web first (the ratios are it over the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Server {
    FiberWeb,
    Axum,
    Minihttp,
}

pub const SERVERS: [Server; 3] = [Server::FiberWeb, Server::Axum, Server::Minihttp];

impl Server {
    pub fn label(self) -> &'static str {
        match self {
            Server::FiberWeb => "fiber_web",
            Server::Axum => "axum + mysql_async",
            Server::Minihttp => "raw may_minihttp",
        }
    }

    /// Its command, pinned to the server cpus, on a pool of [`DB_POOL`] with `threads`
    /// worker threads, filling its database first, for up to `connections` at once.
    fn command(
        self,
        exe: &Path,
        split: &Split,
        threads: usize,
        connections: usize,
    ) -> Result<Command, String> {
        // Room for twice the connections: when one wrk run ends, its requests still in
        // flight finish (cancelled) while the next run's connections arrive.
        let room = (2 * connections + 64).to_string();
        let (pool, threads) = (DB_POOL.to_string(), threads.to_string());
        let (program, args): (PathBuf, Vec<&str>) = match self {
            // One process, no supervisor: its /proc is all the server's CPU. A fiber
            // for every connection, so that no request queues for one.
            Server::FiberWeb => (
                example(exe)?,
                vec![
                    "--setup",
                    "on",
                    "--supervisor",
                    "off",
                    "--access-log",
                    "off",
                    "--db-pool",
                    &pool,
                    "--threads",
                    &threads,
                    "--fibers",
                    &room,
                    "--max-connections",
                    &room,
                ],
            ),
            Server::Axum | Server::Minihttp => (
                exe.to_path_buf(),
                vec![
                    "tfb",
                    "--runtime",
                    if self == Server::Axum {
                        "async"
                    } else {
                        "minihttp"
                    },
                    "--setup",
                    "--pool",
                    &pool,
                    "--threads",
                    &threads,
                ],
            ),
        };
        let mut cmd = split.command(&split.server, &program.to_string_lossy());
        cmd.args(args).args(["--bind", "127.0.0.1:0"]);
        Ok(cmd)
    }
}

/// `examples/techempower`, built beside this binary (`cargo build --release
/// --examples`).
fn example(exe: &Path) -> Result<PathBuf, String> {
    let path = exe
        .parent()
        .map(|dir| dir.join("examples").join("techempower"))
        .ok_or("this binary has no directory")?;
    if !path.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release --example techempower`",
            path.display()
        ));
    }
    Ok(path)
}

/// What one measured run gave.
#[derive(Clone, Debug)]
pub struct Run {
    pub load: LoadResult,
    /// Server CPU per served request, µs.
    pub cpu_us: f64,
}

type Key = (&'static str, usize, Server);

/// `compare bench --tfb`: every round, print the tables, write `tfb.md`.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let split = crate::bench::cpus::split(
        args.server_cpus.as_deref(),
        args.load_cpus.as_deref(),
        &crate::bench::cpus::usable()?,
    )?;
    eprintln!("bench --tfb: {split}");
    let threads = args
        .threads
        .map_or(split.server.len(), |t| t as usize)
        .max(1);
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 5 }) as usize;
    let duration = Duration::from_secs(if args.quick { 2 } else { args.duration });
    let connections: Vec<usize> = match &args.tfb_connections {
        Some(list) => parse_connections(list)?,
        None if args.quick => vec![16],
        None => CONNECTIONS.to_vec(),
    };
    let tests: Vec<Test> = TESTS
        .into_iter()
        .filter(|t| {
            args.only
                .as_deref()
                .is_none_or(|o| super::picked(o, t.name))
        })
        .collect();
    if tests.is_empty() {
        return Err(format!(
            "no TechEmpower test name contains '{}'",
            args.only.as_deref().unwrap_or("")
        ));
    }
    let decision = quota::decide(args.server_quota, &split);
    let group = match decision.percent {
        Some(pct) if tests.iter().any(|t| t.cpu_bound) => Some(
            CpuGroup::create(&args.cgroup_root, pct)
                .map_err(|e| format!("--server-quota: cannot hold the server to {pct}% of a cpu: {e} (run as root, or --server-quota off)"))?,
        ),
        _ => None,
    };
    let quota_line = match &group {
        Some(g) => format!(
            "json and plaintext hold the server to {}% of one cpu ({g}; {})",
            g.percent(),
            decision.why
        ),
        None => format!("no quota ({})", decision.why),
    };
    eprintln!("bench --tfb: {quota_line}");
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    example(&exe)?;
    let dir = args.out.join(calendar::timestamp(SystemTime::now()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let script = dir.join("pipeline.lua");
    std::fs::write(&script, PIPELINE_LUA)
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;

    let max_conns = connections.iter().copied().max().unwrap_or(64);
    let mut runs: HashMap<Key, Vec<Option<Run>>> = HashMap::new();
    let started = Instant::now();
    for round in 0..rounds {
        let mut order = SERVERS;
        order.rotate_left(round % SERVERS.len());
        for held in [true, false] {
            let list: Vec<Test> = tests
                .iter()
                .copied()
                .filter(|t| t.cpu_bound == held)
                .collect();
            if list.is_empty() {
                continue;
            }
            for server in order {
                let db = fresh_database(DB_POOL)?;
                split.pin_pid(db.pid())?;
                let mut cmd = server.command(&exe, &split, threads, max_conns)?;
                cmd.env("DATABASE_URL", db.url());
                let log = dir.join(format!(
                    "server-{}.log",
                    server.label().split(' ').next().unwrap_or("x")
                ));
                let proc = ServerProcess::launch(cmd, &log, server.label())?;
                if held {
                    if let Some(g) = &group {
                        g.add(proc.pid())?;
                    }
                }
                for test in &list {
                    for &c in &connections {
                        eprintln!(
                            "bench --tfb: round {}/{rounds} {:<18} {:<9} c={c} ({:.0?} so far)",
                            round + 1,
                            server.label(),
                            test.name,
                            started.elapsed()
                        );
                        let got = measure(&proc, test, c, duration, &split, &script);
                        if let Err(e) = &got {
                            eprintln!("bench --tfb: {} {} c={c}: {e}", server.label(), test.name);
                        }
                        runs.entry((test.name, c, server))
                            .or_default()
                            .push(got.ok());
                    }
                }
                proc.stop()?;
                drop(db);
            }
        }
    }
    drop(group);
    let md = report(
        &runs,
        &tests,
        &connections,
        rounds,
        threads,
        &split,
        &quota_line,
        duration,
    );
    println!("{md}");
    let path = dir.join("tfb.md");
    std::fs::write(&path, &md).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("written: {}", path.display());
    Ok(())
}

/// `64,256,512`.
fn parse_connections(list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(|n| match n.trim().parse::<usize>() {
            Ok(n) if (1..=16_384).contains(&n) => Ok(n),
            _ => Err(format!(
                "--tfb-connections: '{n}' is not a number of connections from 1 to 16384"
            )),
        })
        .collect()
}

/// wrk's script for a pipelined test: `depth` requests per write (`-- 16`), TFB's
/// own `pipeline.lua` in effect.
const PIPELINE_LUA: &str = r#"init = function(args)
  local depth = tonumber(args[1]) or 1
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format()
  end
  req = table.concat(r)
end

request = function()
  return req
end
"#;

/// One warmed-up wrk run of `test` at `c` connections, with the server's CPU time
/// around it.
fn measure(
    proc: &ServerProcess,
    test: &Test,
    c: usize,
    duration: Duration,
    split: &Split,
    script: &Path,
) -> Result<Run, String> {
    let url = format!("http://{}{}", proc.addr, test.path);
    let wrk = |secs: Duration| {
        let mut cmd = load::wrk(c, secs, &url, split);
        if test.pipeline > 1 {
            cmd.arg("-s")
                .arg(script)
                .arg("--")
                .arg(test.pipeline.to_string());
        }
        cmd
    };
    let _ = wrk(WARMUP).output();
    let before: CpuTimes = proc
        .cpu_times()
        .ok_or("the server's CPU time is unreadable")?;
    let mut cmd = wrk(duration);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e} (install wrk)"))?;
    let after = proc
        .cpu_times()
        .ok_or("the server's CPU time is unreadable")?;
    let load = load::parse_wrk(&String::from_utf8_lossy(&out.stdout))?;
    if load.served == 0 {
        return Err(format!(
            "nothing answered 2xx: {}",
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    if load.failed * 100 > load.requests {
        return Err(format!(
            "{} of {} requests failed",
            load.failed, load.requests
        ));
    }
    let cpu_us = after.since(before).total() * 1e6 / load.served as f64;
    Ok(Run { load, cpu_us })
}

/// The Markdown the run prints and writes: per test and connections, each server's
/// median req/s, CPU per request and p99, and fiber_web's per-round ratios.
#[allow(clippy::too_many_arguments)]
fn report(
    runs: &HashMap<Key, Vec<Option<Run>>>,
    tests: &[Test],
    connections: &[usize],
    rounds: usize,
    threads: usize,
    split: &Split,
    quota: &str,
    duration: Duration,
) -> String {
    let none = Vec::new();
    let of = |t: &'static str, c: usize, s: Server| runs.get(&(t, c, s)).unwrap_or(&none);
    let spread = |v: Vec<f64>| Spread::of(&v);
    let fmt = |s: Option<Spread>, f: fn(f64) -> String| match s {
        Some(s) => format!("{} ({}-{})", f(s.median), f(s.min), f(s.max)),
        None => "-".into(),
    };
    let ratio = |t, c, s, figure: fn(&Run) -> f64| {
        let per_round = of(t, c, Server::FiberWeb)
            .iter()
            .zip(of(t, c, s))
            .filter_map(|(a, b)| Some(figure(a.as_ref()?) / figure(b.as_ref()?)))
            .collect();
        spread(per_round)
    };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "TechEmpower's six tests, {rounds} rotating round{}, {}s of wrk each after {}s of warm-up; \
         every server: {threads} worker thread{}, a MySQL pool of {DB_POOL}, its own private \
         MariaDB; {split}; {quota}. Median (min-max) over rounds.\n",
        if rounds == 1 { "" } else { "s" },
        duration.as_secs(),
        WARMUP.as_secs(),
        if threads == 1 { "" } else { "s" },
    );
    md.push_str(
        "| test | conns | server | req/s | CPU µs/req | p99 |\n|---|---|---|---|---|---|\n",
    );
    for t in tests {
        for &c in connections {
            for s in SERVERS {
                let ok: Vec<&Run> = of(t.name, c, s).iter().flatten().collect();
                let _ = writeln!(
                    md,
                    "| {} | {c} | {} | {} | {} | {} |",
                    t.name,
                    s.label(),
                    fmt(
                        spread(ok.iter().map(|r| r.load.rps).collect()),
                        |x| format!("{x:.0}")
                    ),
                    fmt(spread(ok.iter().map(|r| r.cpu_us).collect()), |x| format!(
                        "{x:.1}"
                    )),
                    fmt(spread(ok.iter().map(|r| r.load.p99_ms).collect()), load_ms),
                );
            }
        }
    }
    md.push_str(
        "\nfiber_web over each, median of per-round ratios (min-max): req/s (higher is better), \
         CPU per request (lower is better).\n\n\
         | test | conns | req/s vs axum | req/s vs raw may | CPU/req vs axum | CPU/req vs raw may |\n\
         |---|---|---|---|---|---|\n",
    );
    let x = |v: f64| format!("{v:.2}x");
    for t in tests {
        for &c in connections {
            let _ = writeln!(
                md,
                "| {} | {c} | {} | {} | {} | {} |",
                t.name,
                fmt(ratio(t.name, c, Server::Axum, |r| r.load.rps), x),
                fmt(ratio(t.name, c, Server::Minihttp, |r| r.load.rps), x),
                fmt(ratio(t.name, c, Server::Axum, |r| r.cpu_us), x),
                fmt(ratio(t.name, c, Server::Minihttp, |r| r.cpu_us), x),
            );
        }
    }
    md
}

fn load_ms(ms: f64) -> String {
    crate::bench::report::fmt_ms(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_a_list_of_counts() {
        assert_eq!(
            parse_connections("64, 256,512").unwrap(),
            vec![64, 256, 512]
        );
        assert!(parse_connections("64,lots").unwrap_err().contains("'lots'"));
        assert!(parse_connections("0").is_err());
    }
}
