//! Handlers that break fiberstack's rules, written as a user would write them on the
//! public API, to show what containment does with them (tests/adversarial.rs drives
//! it; nothing of it is reachable from the demo):
//!
//! - `/mutex?depth=N`: locks a `static std::sync::Mutex`, then recurses N levels
//!   (default: far too deep for the stack). The next `/mutex` blocks its worker thread.
//! - `/lazy`: reads a `LazyLock` whose initializer recurses too deep. The next reader
//!   blocks its worker thread on the `Once`.
//! - `/print?depth=N`: recurses N levels, printing a line at each (std's stdout lock is
//!   held when the overflow strikes inside `println!`).
//! - `/thread_sleep`: `std::thread::sleep` for 3 s (a blocking std call).
//! - `/busy`: a 3 s CPU loop.
//! - `/sleep?sleep=S`: `select sleep(S)` on MySQL (`DATABASE_URL`), the load's route.
//! - `/stats`: which process answered, its fibers, stalls and overflows.
//!
//! Run with: DATABASE_URL=mysql://... cargo run --example adversarial_app -- 127.0.0.1:0 2 2000
//! (address, worker processes, --stall-limit in ms). Logs go to stderr (RUST_LOG).
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::io;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use fiber_web::counters::HttpStats;
use fiber_web::http::{Handler, Request, Response, Router};
use fiber_web::server::{self, App, RouteLimits};
use fiber_web::supervisor::{self, SupervisorConfig};
use fiberstack::config::{HttpLimits, WatchdogLimits};

/// Levels of recursion that overflow any fiber stack up to 64 MiB.
const TOO_DEEP: usize = 1_000_000;
/// How long `/thread_sleep` and `/busy` hold their worker thread.
const HOLD: Duration = Duration::from_secs(3);
/// How long a stopping worker lets its in-flight requests finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// When the stall watchdog reports a held thread.
const STALL_WARN: Duration = Duration::from_millis(100);

struct State {
    db: fiber_mysql::Pool,
    fibers: fiber_pool::FiberPool,
}

static COUNTER: Mutex<u64> = Mutex::new(0);

/// A value whose initializer recurses too deep: it overflows the first time.
static TABLE: LazyLock<u64> = LazyLock::new(|| recurse(TOO_DEEP));

/// N levels of recursion with a 256-byte frame each.
fn recurse(depth: usize) -> u64 {
    let frame = black_box([depth as u8; 256]);
    if depth == 0 {
        return frame[0] as u64;
    }
    black_box(recurse(depth - 1)) + frame[255] as u64
}

/// N levels of recursion, printing at each.
fn recurse_printing(depth: usize) -> u64 {
    let frame = black_box([depth as u8; 64]);
    println!("level {depth}");
    if depth == 0 {
        return 0;
    }
    black_box(recurse_printing(depth - 1)) + frame[63] as u64
}

fn depth(req: &Request) -> usize {
    req.query_param("depth")
        .and_then(|d| d.parse().ok())
        .unwrap_or(TOO_DEEP)
}

fn mutex(_: &State, req: &Request) -> Response {
    let mut count = COUNTER.lock().unwrap_or_else(|e| e.into_inner());
    *count += recurse(depth(req));
    Response::text(200, format!("{}\n", *count))
}

fn lazy(_: &State, _: &Request) -> Response {
    Response::text(200, format!("{}\n", *TABLE))
}

fn print(_: &State, req: &Request) -> Response {
    Response::text(200, format!("{}\n", recurse_printing(depth(req))))
}

fn thread_sleep(_: &State, _: &Request) -> Response {
    std::thread::sleep(HOLD);
    Response::text(200, "slept\n")
}

fn busy(_: &State, _: &Request) -> Response {
    let start = Instant::now();
    let mut spins = 0u64;
    while start.elapsed() < HOLD {
        spins = black_box(spins + 1);
    }
    Response::text(200, format!("{spins}\n"))
}

fn sleep(state: &State, req: &Request) -> Response {
    let secs: f64 = req
        .query_param("sleep")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    let slept = fiberstack::app::db_conn(&state.db).and_then(|mut conn| {
        conn.query(&format!("select sleep({secs})"))?
            .scalar::<i64>()
    });
    match slept {
        Ok(_) => Response::text(200, "ok\n"),
        Err(e) => fiberstack::app::db_error(&e),
    }
}

fn stats(state: &State, _: &Request) -> Response {
    Response::json(
        200,
        &fiber_pool::on_carrier(|| {
            serde_json::json!({
                "worker": supervisor::describe(),
                "fibers": fiberstack::app::stats::fibers_json(&state.fibers.stats()),
                "db": fiberstack::app::stats::db_json(&state.db.stats()),
            })
        }),
    )
}

fn invalid(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {e}"))
}

fn main() -> io::Result<()> {
    supervisor::init();
    fiber_web::logging::init();
    let mut args = std::env::args().skip(1);
    let addr: std::net::SocketAddr = match args.next() {
        Some(a) => a.parse().map_err(|e| invalid(&a, e))?,
        None => ([127, 0, 0, 1], 3002).into(),
    };
    let processes = args
        .next()
        .map_or(Ok(1), |n| n.parse::<usize>().map_err(|e| invalid(&n, e)))?;
    let stall_limit = args.next().map_or(Ok(Duration::from_secs(10)), |ms| {
        ms.parse()
            .map(Duration::from_millis)
            .map_err(|e| invalid(&ms, e))
    })?;
    if let Some(done) = supervisor::supervise(SupervisorConfig::new(processes, addr)) {
        return done.map_err(io::Error::other);
    }

    may::config().set_workers(2);
    let url = std::env::var("DATABASE_URL").map_err(|e| invalid("DATABASE_URL", e))?;
    let opts = fiber_mysql::Opts::from_url(&url).map_err(|e| invalid("DATABASE_URL", e))?;
    let db =
        fiber_mysql::Pool::new(fiber_mysql::PoolConfig::new(opts, 60)).map_err(io::Error::other)?;
    let stops = supervisor::stop_requests()?;
    let fibers = fiber_pool::FiberPool::new(fiber_pool::PoolConfig {
        size: 120,
        ..fiber_pool::PoolConfig::default()
    })
    .map_err(io::Error::other)?;
    let router = Router::<Handler<State>>::new()
        .get("/mutex", "mutex", mutex)
        .get("/lazy", "lazy", lazy)
        .get("/print", "print", print)
        .get("/thread_sleep", "thread_sleep", thread_sleep)
        .get("/busy", "busy", busy)
        .get("/sleep", "sleep", sleep)
        .get("/stats", "stats", stats);
    let labels: Vec<&str> = router.routes().iter().map(|r| r.label).collect();
    let http_stats = Arc::new(HttpStats::new(labels, false));
    let app = App {
        router,
        state: Arc::new(State {
            db,
            fibers: fibers.clone(),
        }),
        fibers,
        limits: RouteLimits::default(),
        stats: Arc::clone(&http_stats),
    };
    // The stall watchdog: its replacement requests go to the supervisor.
    let _watchdog = fiber_web::watchdog::spawn(
        WatchdogLimits {
            stall_warn: STALL_WARN,
            stall_limit,
            ..WatchdogLimits::default()
        },
        Box::new(supervisor::ask_for_replacement),
    )?;
    let server = server::spawn(
        supervisor::listener(addr)?,
        Arc::new(app),
        HttpLimits::default(),
        http_stats,
    )?;
    println!(
        "listening on http://{}/ (pid {})",
        server.addr(),
        std::process::id()
    );
    supervisor::ready();
    stops.wait();
    // Requests on a thread an abandoned lock blocks never finish: say how many were
    // left when the grace ended (tests/adversarial.rs compares it with ab's failures).
    let drained = server.shutdown(SHUTDOWN_GRACE);
    eprintln!(
        "adversarial_app: pid {} stopped; {} connections unfinished after the grace",
        std::process::id(),
        drained.connections_left
    );
    Ok(())
}
