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
//! Run with: DATABASE_URL=mysql://... cargo run --example adversarial_app -- --bind 127.0.0.1:0
//! (any flag of `fiber_web::Options`: `--processes 2`, `--stall-limit 2`). Logs go to
//! stderr (RUST_LOG).
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use fiber_web::http::{Request, Response};
use fiber_web::metrics::Workers;
use fiber_web::supervisor;
use fiber_web::{App, Options};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Levels of recursion that overflow any fiber stack up to 64 MiB.
const TOO_DEEP: usize = 1_000_000;
/// How long `/thread_sleep` and `/busy` hold their worker thread.
const HOLD: Duration = Duration::from_secs(3);

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
    let slept = state.db.checkout().and_then(|mut conn| {
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
                "fibers": Workers::of_fibers(&state.fibers),
                "db": fiberstack::app::stats::DbStats::from(&state.db.stats()),
            })
        }),
    )
}

fn main() -> Result<(), fiber_web::Error> {
    let options = Options::from_env_and_args()?;
    fiber_web::serve(options, |started| {
        let url = std::env::var("DATABASE_URL").map_err(|e| format!("DATABASE_URL: {e}"))?;
        let opts = fiber_mysql::Opts::from_url(&url).map_err(|e| format!("DATABASE_URL: {e}"))?;
        let db = fiber_mysql::Pool::new(fiber_mysql::PoolConfig::new(opts, 60))?;
        let state = State {
            db,
            fibers: started.fibers().clone(),
        };
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            App::new(state)
                .get("/mutex", mutex)
                .named("mutex")
                .get("/lazy", lazy)
                .named("lazy")
                .get("/print", print)
                .named("print")
                .get("/thread_sleep", thread_sleep)
                .named("thread_sleep")
                .get("/busy", busy)
                .named("busy")
                .get("/sleep", sleep)
                .named("sleep")
                .get("/stats", stats)
                .named("stats"),
        )
    })
}
