//! Handlers that break fiberstack's rules, written as a user would write them on the
//! public API, to show what containment does with them (tests/adversarial.rs drives
//! it; nothing of it is reachable from the demo):
//!
//! - `/mutex?depth=N`: locks a `static std::sync::Mutex`, then recurses N levels
//!   (default: far too deep for the stack). The next `/mutex` blocks its thread.
//! - `/lazy`: reads a `LazyLock` whose initializer recurses too deep. The next reader
//!   blocks its thread on the `Once`.
//! - `/print?depth=N`: recurses N levels, printing a line at each (std's stdout lock is
//!   held when the overflow strikes inside `println!`).
//! - `/may_mutex?depth=N`: the same with a `may::sync::Mutex`: later lockers park for
//!   ever instead of blocking a thread.
//! - `/refcell?depth=N`: borrows a thread-local `RefCell`, then recurses: the borrow
//!   is left standing on that thread.
//! - `/alloc_locked?depth=N`: locks a std Mutex, recurses until under 1 KiB of stack is
//!   left, then allocates: the allocator's stack check overflows with the lock held.
//! - `/skip_guard`: recurses to near the end of the stack, then skips 8 KiB down as C's
//!   `alloca` does, past a one-page guard; the wide guard catches it.
//! - `/bomb`: panics with a payload whose own drop panics.
//! - `/scope?depth=N`: a fan-out child that locks a `static std::sync::Mutex`, then
//!   recurses N levels: the child's overflow fails the request too, outside a safe
//!   point.
//!
//! With `?depth=1` each route does its work without breaking anything (what a later
//! request, on a fresh worker, should get); `/lazy` has no such form.
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

use fiber_web::metrics::HandlerPool;
use fiber_web::{fan_out, App, Options, Request, Response};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Levels of recursion that overflow any fiber stack up to 64 MiB.
const TOO_DEEP: usize = 1_000_000;
/// How long `/thread_sleep` and `/busy` hold their thread.
const HOLD: Duration = Duration::from_secs(3);

struct State {
    db: fiber_mysql::Pool,
    fibers: fiber_pool::FiberPool,
}

static COUNTER: Mutex<u64> = Mutex::new(0);

/// What `/scope`'s child locks (its own, so that `/mutex` never meets it).
static CHILD_COUNTER: Mutex<u64> = Mutex::new(0);

static MAY_COUNTER: LazyLock<may::sync::Mutex<u64>> = LazyLock::new(|| may::sync::Mutex::new(0));

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Stack left when `/alloc_locked` allocates: less than the allocator checks for.
const ALLOC_AT: usize = 1024;
/// How far `/skip_guard` moves the stack pointer at once: more than a page, as a C
/// frame with a big VLA does.
const SKIP: usize = 8 * 1024;

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

fn may_mutex(_: &State, req: &Request) -> Response {
    let mut count = MAY_COUNTER.lock().unwrap_or_else(|e| e.into_inner());
    *count += recurse(depth(req));
    Response::text(200, format!("{}\n", *count))
}

fn refcell(_: &State, req: &Request) -> Response {
    let n = depth(req);
    SCRATCH.with(|scratch| {
        let mut held = scratch.borrow_mut();
        held.push(recurse(n) as u8);
        Response::text(200, format!("{}\n", held.len()))
    })
}

/// Recurses until under `left` bytes of stack remain, then allocates `bytes`.
fn allocate_near_the_end(left: usize) -> usize {
    let frame = black_box([0u8; 128]);
    if fiber_pool::stack_remaining().is_some_and(|r| r < left) {
        return black_box(vec![frame[0]; 64]).len();
    }
    black_box(allocate_near_the_end(left)) + usize::from(frame[127])
}

fn alloc_locked(_: &State, req: &Request) -> Response {
    let mut count = COUNTER.lock().unwrap_or_else(|e| e.into_inner());
    let grown = if req.query_param("depth").is_some() {
        vec![0u8; 64].len()
    } else {
        allocate_near_the_end(ALLOC_AT)
    };
    *count += grown as u64;
    Response::text(200, format!("{}\n", *count))
}

/// Recurses until under `SKIP` bytes remain, then skips `SKIP` down.
fn skip_near_the_end() -> u64 {
    let frame = black_box([0u8; 128]);
    if fiber_pool::stack_remaining().is_some_and(|r| r < SKIP) {
        fiber_pool::testing::skip_down(SKIP);
        return 0;
    }
    black_box(skip_near_the_end()) + u64::from(frame[127])
}

fn skip_guard(_: &State, req: &Request) -> Response {
    if req.query_param("depth").is_some() {
        return Response::text(200, "stayed on the stack\n");
    }
    Response::text(200, format!("{}\n", skip_near_the_end()))
}

/// A panic payload that panics again when dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the payload's own drop panics");
    }
}

fn bomb(_: &State, req: &Request) -> Response {
    if req.query_param("depth").is_none() {
        std::panic::panic_any(Bomb);
    }
    Response::text(200, "defused\n")
}

fn scope(_: &State, req: &Request) -> Result<Response, Response> {
    let n = depth(req);
    let count = fan_out::scope(|s| {
        s.spawn(|| {
            let mut count = CHILD_COUNTER.lock().unwrap_or_else(|e| e.into_inner());
            *count += recurse(n);
            Ok(*count)
        })
        .join()
    })?;
    Ok(Response::text(200, format!("{count}\n")))
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
                "worker": fiber_web::worker::describe(),
                "fibers": HandlerPool::of_fibers(&state.fibers),
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
                .get("/may_mutex", may_mutex)
                .named("may_mutex")
                .get("/refcell", refcell)
                .named("refcell")
                .get("/alloc_locked", alloc_locked)
                .named("alloc_locked")
                .get("/skip_guard", skip_guard)
                .named("skip_guard")
                .get("/bomb", bomb)
                .named("bomb")
                .get("/scope", scope)
                .named("scope")
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
