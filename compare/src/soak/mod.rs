//! `compare soak` (run by `scripts/soak`): the demo as a user starts it, every fault at
//! once for minutes, nothing unexplained lost and nothing growing.
//!
//! It starts a private MariaDB (`fiberstack mariadb --control`: the soak kills and
//! starts it through its stdin, which `serve`'s own private MariaDB offers no way to
//! do), `fiberstack serve --processes 2` on it (the defaults otherwise; port 0, as other
//! servers may hold 3000) and the todo API of examples/todo_api.rs on the same database
//! (the demo itself serves no todo API); drives the lanes of `load.rs` throughout;
//! injects the faults of `faults.rs` (its slow and garbage clients in `probes.rs`) on
//! the timetable of `plan.rs`, over the processes of `procs.rs`; prints a line per
//! row (`report.rs`) and ends with the verdict of `rule.rs`, whose header states what
//! explains a failure. The demo has no route that loops for ever, so the watchdog's
//! replacement of a stuck worker is not among the faults (tests/adversarial.rs and
//! tests/watchdog.rs cover it with their own apps).
//!
//! What it writes goes under `--out` (`target/soak`): each server's log without its
//! access lines, and every failure with its time, cause and what explained it. The
//! MariaDB URL holds a password: it reaches the servers in their environment only.

mod client;
mod faults;
mod load;
mod plan;
mod probes;
mod procs;
mod report;
mod rule;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fiber_mysql::launcher::CONNECTION_HEADROOM;

use faults::Drill;
use load::{Load, Tally};
use plan::Plan;
use procs::{MariaDb, Server};
use report::{Monitor, Processes, Sample};
use rule::Growth;

/// Worker processes of the demo: the default is one, and a supervisor with one worker
/// cannot lose a worker without a gap.
pub const PROCESSES: usize = 2;
/// The todo API's MySQL pool (fixed in examples/todo_api.rs).
pub const TODO_POOL: usize = 10;
/// Unexplained failures printed (all are in the failures file).
pub const UNEXPLAINED_SHOWN: usize = 20;

/// `compare soak`'s flags.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Minutes to run: after the first, a cycle of faults each minute, the last half
    /// minute quiet.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1440))]
    minutes: u64,
    /// Seconds to run instead of minutes (at least 60); under two minutes, one cycle
    /// of faults compressed between the first quarter and the last 10 s.
    #[arg(long, value_parser = clap::value_parser!(u64).range(60..=86_400))]
    seconds: Option<u64>,
    /// The fiberstack binary (default: beside this one).
    #[arg(long)]
    fiberstack: Option<PathBuf>,
    /// The todo API example's binary (default: examples/todo_api beside this one).
    #[arg(long)]
    todo_api: Option<PathBuf>,
    /// Where the logs and the failures go.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
}

/// A binary beside this one (`rel` below its directory), or `given`.
fn beside_me(given: &Option<PathBuf>, rel: &str) -> Result<PathBuf, compare::Error> {
    let path = match given {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .ok_or("this binary has no directory")?
            .join(rel),
    };
    match path.is_file() {
        true => Ok(path),
        false => Err(format!(
            "{} is missing: build it (scripts/soak does: cargo build --release --bin fiberstack \
             --example todo_api)",
            path.display()
        )
        .into()),
    }
}

/// Whether `program` runs from PATH; else the Debian package that has it.
fn needs(program: &str, package: &str) -> Result<(), compare::Error> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match found {
        true => Ok(()),
        false => Err(format!(
            "the soak needs `{program}`: apt-get install {package} (scripts/install-deps)"
        )
        .into()),
    }
}

/// `compare soak`: see the module's header.
pub fn run(args: &SoakArgs) -> Result<(), compare::Error> {
    let total = Duration::from_secs(args.seconds.unwrap_or(args.minutes * 60));
    let plan = Plan::new(total)?;
    let fiberstack = beside_me(&args.fiberstack, "fiberstack")?;
    let todo_api = beside_me(&args.todo_api, "examples/todo_api")?;
    needs("ab", "apache2-utils")?;
    needs("curl", "curl")?;
    std::fs::create_dir_all(&args.out)?;

    let t0 = Instant::now();
    let defaults = fiberstack::flags::parse(Vec::new())?;
    // Room for every pool and one replacement's beside the one it replaces, as `serve`
    // sizes its own private server; the same for the todo API.
    let pools = defaults.db_pool * (PROCESSES + 1) + TODO_POOL * 2;
    let mariadb = MariaDb::start(&fiberstack, pools + CONNECTION_HEADROOM)?;
    let url = mariadb.url().to_string();
    let mut monitor = Monitor::new(&url)?;

    let mut serve = Command::new(&fiberstack);
    serve
        .args(["serve", "--bind", "127.0.0.1:0", "--processes"])
        .arg(PROCESSES.to_string())
        .env("DATABASE_URL", &url);
    let mut demo = Server::start("demo", serve, t0, &args.out.join("demo.log"))?;
    let mut todo_cmd = Command::new(&todo_api);
    todo_cmd
        .args(["--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", &url);
    let mut todo = Server::start("todo API", todo_cmd, t0, &args.out.join("todo.log"))?;

    let tally = Arc::new(Tally::new(t0, plan.row, plan.rows()));
    let burst = ((defaults.web.fibers + defaults.web.queue) * PROCESSES) as f64
        * faults::BURST_OVER_CAPACITY;
    let mariadb_control = mariadb.pid();
    let drill = Arc::new(Drill {
        t0,
        plan: plan.clone(),
        demo_addr: demo.addr,
        demo_pid: demo.pid(),
        demo_log: Arc::clone(&demo.log),
        first_workers: demo.workers(),
        processes: PROCESSES,
        todo_addr: todo.addr,
        mariadb: Arc::new(Mutex::new(mariadb)),
        mariadb_control,
        tally: Arc::clone(&tally),
        windows: Mutex::new(Vec::new()),
        burst: burst as usize,
    });
    println!(
        "soak: {} s from {}: demo at http://{} (supervisor pid {}, workers {:?}), todo API at \
         http://{}, MariaDB pid {}; a line every {} s; {} cycle(s) of faults every {} s from \
         +{} s; quiet from +{} s; logs in {}",
        total.as_secs(),
        fiberstack.display(),
        demo.addr,
        demo.pid(),
        drill.first_workers,
        todo.addr,
        procs::mariadbd_under(mariadb_control).map_or("?".into(), |p| p.to_string()),
        plan.row.as_secs(),
        plan.cycles,
        plan.period.as_secs_f64().round(),
        plan.warmup.as_secs(),
        (total - plan.settle).as_secs(),
        args.out.display()
    );
    let load = Load::start(&tally, demo.addr, todo.addr)?;

    let mut scheduler = Some({
        let drill = Arc::clone(&drill);
        std::thread::Builder::new()
            .name("soak-faults".into())
            .spawn(move || {
                let mut faults = Vec::new();
                for (at, step, cycle) in drill.plan.schedule() {
                    std::thread::sleep(at.saturating_sub(drill.t0.elapsed()));
                    let drill = Arc::clone(&drill);
                    faults.push(std::thread::spawn(move || drill.run(step, cycle)));
                }
                for f in faults {
                    let _ = f.join();
                }
            })?
    });

    let mut samples: Vec<Sample> = Vec::new();
    for i in 0..plan.rows() {
        let end = (plan.row * (i as u32 + 1)).min(total);
        std::thread::sleep(end.saturating_sub(t0.elapsed()));
        if i + 1 == plan.rows() {
            // The last figures once every fault is over (each is bounded).
            if let Some(faults) = scheduler.take() {
                let _ = faults.join();
            }
            std::thread::sleep(end.saturating_sub(t0.elapsed()));
        }
        let procs = Processes {
            demo: demo.processes(),
            todo: todo.processes(),
            mariadb: procs::mariadbd_under(mariadb_control),
        };
        let quarantined = report::quarantined(demo.addr, &procs.demo[1..]);
        let (line, sample) = report::row(
            &plan.row_name(i),
            &tally.row(i),
            &procs,
            monitor.threads_connected(),
            &quarantined,
        );
        println!("{line}");
        samples.push(sample);
    }

    load.stop();
    drop(monitor);
    for server in [&mut demo, &mut todo] {
        let start = tally.now();
        if let Err(e) = server.stop() {
            println!("soak: stopping the {}: {e}", server.name);
            tally.failed(rule::Failure {
                start,
                end: tally.now(),
                route: "check shutdown",
                cause: rule::Cause::Check,
                detail: e,
            });
        }
    }
    let access_lines = (demo.log.access_lines(), todo.log.access_lines());
    drop((demo, todo));
    if let Err(e) = drill
        .mariadb
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .stop()
    {
        println!("soak: stopping MariaDB: {e}");
    }

    let windows = drill
        .windows
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (requests, failures) = tally.totals();
    let (totals, unexplained) = rule::judge(requests, &failures, &windows);
    write_failures(&args.out.join("failures.txt"), &failures, &windows)?;
    let first = samples.first().cloned().unwrap_or_default();
    let last = samples.last().cloned().unwrap_or_default();
    let as_f64 = |v: Option<u64>| v.map(|v| v as f64);
    let growth = Growth {
        rss: rule::growth(as_f64(first.rss_kib), as_f64(last.rss_kib)),
        fds: rule::growth(as_f64(first.fds), as_f64(last.fds)),
        mysql: rule::growth(as_f64(first.mysql), as_f64(last.mysql)),
    };
    println!(
        "soak: explained by fault: {:?}; access lines logged: demo {}, todo API {}",
        totals.by_fault, access_lines.0, access_lines.1
    );
    for f in unexplained.iter().take(UNEXPLAINED_SHOWN) {
        println!(
            "soak: unexplained: +{:.2}s..+{:.2}s {} {}: {}",
            f.start, f.end, f.route, f.cause, f.detail
        );
    }
    println!("{}", rule::verdict(&totals, &growth));
    match rule::passes(&totals, &growth) {
        true => Ok(()),
        false => Err(format!(
            "the soak failed: {} unexplained failure(s), or growth over {}% (see {})",
            unexplained.len(),
            rule::MAX_GROWTH_PERCENT,
            args.out.join("failures.txt").display()
        )
        .into()),
    }
}

/// Every failure, one a line: times, route, cause, what explained it, detail.
fn write_failures(
    path: &Path,
    failures: &[rule::Failure],
    windows: &[rule::Window],
) -> std::io::Result<()> {
    let mut text = String::new();
    for w in windows {
        let _ = writeln!(
            text,
            "window {} +{:.2}s..+{:.2}s",
            w.fault.name(),
            w.start,
            w.end
        );
    }
    for f in failures {
        let by = rule::explained_by(f, windows).map_or("UNEXPLAINED", |w| w.fault.name());
        let _ = writeln!(
            text,
            "+{:.3}s..+{:.3}s {} {} [{by}] {}",
            f.start, f.end, f.route, f.cause, f.detail
        );
    }
    std::fs::write(path, text)
}
