//! Provoking overflows in the demo's routes, for the stack tests: the routes a sweep
//! drives, a handler run with a given stack left, a one-fiber pool, a watchdog that
//! aborts a run that stopped moving, and the process's fds and the server's
//! connections, which the tests that count them read alone in their binaries.
#![allow(dead_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Connections the server has open besides `admin`, after giving it up to 5 s to notice
/// closed sockets: MariaDB sees a close asynchronously.
pub fn server_side_connections(admin: &mut fiber_mysql::Conn, at_most: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        // Everyone but this admin session: the pool's, and any half-open handshake
        // ("unauthenticated user").
        let n: usize = admin
            .query(
                "select count(*) from information_schema.processlist where id <> connection_id()",
            )
            .unwrap()
            .scalar::<u64>()
            .unwrap()
            .unwrap() as usize;
        if n <= at_most || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The built-in routes the overflow sweeps drive (every route that runs on a fiber
/// and does more than format a constant; `/healthz` and `/metrics` run on the
/// connection's coroutine, not on a fiber).
pub const SWEPT: [&str; 6] = [
    "/stats",
    "/widgets?sleep=0",
    "/widgets/http",
    "/twitter",
    "/upstream/search.json?q=rails",
    "/readyz",
];

/// A lock left held hangs the next locker: fail loudly instead of hanging CI. The
/// test bumps the counter at each step and says in the string where it is; 10 s
/// without a bump aborts the process, naming that place.
pub fn abort_when_stuck() -> (
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::Mutex<String>>,
) {
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let current = Arc::new(std::sync::Mutex::new(String::new()));
    {
        let (progress, current) = (Arc::clone(&progress), Arc::clone(&current));
        std::thread::spawn(move || {
            let mut last = usize::MAX;
            loop {
                std::thread::sleep(Duration::from_secs(10));
                let now = progress.load(Ordering::SeqCst);
                if now == last {
                    // Say where, from a thread of its own (in case printing blocks too),
                    // then abort: exit() runs handlers that a wedged runtime can block.
                    let at = current.lock().map(|c| c.clone()).unwrap_or_default();
                    std::thread::spawn(move || {
                        eprintln!("no progress for 10 s at {at}: a lock left held");
                    });
                    std::thread::sleep(Duration::from_secs(1));
                    std::process::abort();
                }
                last = now;
            }
        });
    }
    (progress, current)
}

/// Run `target`'s handler on `pool` with at most `left` bytes of its stack left, then
/// take every lock a route takes (this hangs if an overflow left one held); whether it
/// overflowed, and if so whether at a safe point.
pub fn run_with_stack_left(
    app: &fiberstack::start::Running,
    pool: &fiber_pool::FiberPool,
    target: &str,
    left: usize,
) -> Option<Overflow> {
    let (pool, state, target) = (pool.clone(), Arc::clone(&app.state), target.to_string());
    let overflow = move || overflow_on_carrier(&state, &pool, &target, left);
    fiber_pool::carrier::go(overflow).join().unwrap()
}

/// An overflow provoked by [`overflow_on_carrier`]: where it struck.
pub struct Overflow {
    /// At a safe point (`reserve_stack`), holding nothing.
    pub at_safe_point: bool,
    /// The address of the instruction that touched the guard page.
    pub fault_pc: usize,
}

/// [`run_with_stack_left`]'s work, on the carrier (the may coroutine) it is called on.
pub fn overflow_on_carrier(
    state: &Arc<fiberstack::app::AppState>,
    pool: &fiber_pool::FiberPool,
    target: &str,
    left: usize,
) -> Option<Overflow> {
    let mut req = fiber_web::Request::get(target);
    let app = fiberstack::app::app(Arc::clone(state), 1, Duration::from_secs(10));
    let Some((label, handler)) = app.handler_for(&mut req) else {
        panic!("no route for {target}")
    };
    let job_state = Arc::clone(state);
    let outcome = pool.run(label, move || {
        fiber_pool::testing::with_stack_left(left, &mut || handler.call(&job_state, &req).status)
    });
    state.fibers.stats();
    state.db.stats();
    state.http.stats();
    match outcome {
        Ok(_) => None,
        Err(fiber_pool::RunError::StackOverflow {
            at_safe_point,
            fault_pc,
            ..
        }) => Some(Overflow {
            at_safe_point,
            fault_pc,
        }),
        Err(e) => panic!("{target} with {left} bytes left: {e}"),
    }
}

/// A single-fiber pool with `stack_size` bytes of stack, and a spare stack for each
/// of the overflows a sweep provokes on it (each overflowed stack is quarantined).
pub fn one_fiber(stack_size: usize) -> fiber_pool::FiberPool {
    fiber_pool::FiberPool::new(fiber_pool::PoolConfig {
        size: 1,
        stack_size,
        spare_stacks: 2048,
        ..fiber_pool::PoolConfig::default()
    })
    .unwrap()
}
