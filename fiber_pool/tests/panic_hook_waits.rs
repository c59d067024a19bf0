//! A panic hook that waits, run off the fiber by `run_panic_hook_off_fiber`. One that
//! parks its coroutine (a may sleep) lets the other coroutines of its thread run, and
//! resumes on the thread it started on, where it gives the thread's hook stack back:
//! the next panic's hook runs on that stack again. A panic of another coroutine of
//! the thread while the hook is parked aborts the process: std allows no panic on a
//! thread inside its panic hook. In a binary of its own: the process's panic hook and
//! may's worker count (one, so that every coroutine shares the hook's thread) are
//! set once per process.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{child_mode, wait_until};
use fiber_pool::{FiberPool, PoolConfig, RunError};

/// How long a parking hook sleeps.
const PARK: Duration = Duration::from_millis(50);

/// What one run of the hook saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HookRun {
    /// The thread it started on, and the one it ended on.
    tids: (i32, i32),
    /// Whether it ran on a fiber's stack (instead of its thread's hook stack).
    on_fiber: bool,
    /// Ticks of the other coroutine while it waited.
    ticks: usize,
}

static RUNS: Mutex<Vec<HookRun>> = Mutex::new(Vec::new());
static ENTERED: AtomicUsize = AtomicUsize::new(0);
/// Whether the next hook parks (else it returns at once).
static PARKS: AtomicBool = AtomicBool::new(true);
static TICKS: AtomicUsize = AtomicUsize::new(0);

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// One may worker, and a hook that parks in a may sleep when `PARKS` says so, run off
/// the fiber.
fn setup() -> FiberPool {
    may::config().set_workers(1);
    std::panic::set_hook(Box::new(|_| {
        ENTERED.fetch_add(1, Ordering::SeqCst);
        let (before, ticks) = (tid(), TICKS.load(Ordering::SeqCst));
        if PARKS.swap(false, Ordering::SeqCst) {
            may::coroutine::sleep(PARK);
        }
        RUNS.lock().unwrap().push(HookRun {
            tids: (before, tid()),
            on_fiber: fiber_pool::on_fiber(),
            ticks: TICKS.load(Ordering::SeqCst) - ticks,
        });
    }));
    fiber_pool::run_panic_hook_off_fiber();
    FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// A job of `pool` that panics, carried by a may coroutine.
fn panics(
    pool: &FiberPool,
    label: &'static str,
) -> may::coroutine::JoinHandle<Result<u32, RunError>> {
    let p = pool.clone();
    fiber_pool::spawn::go(move || p.run(label, move || -> u32 { panic!("{label}") }))
}

#[test]
fn a_hook_that_parks_resumes_on_its_thread_and_gives_its_stack_back() {
    let pool = setup();
    // Another coroutine of the one worker: it can tick only while the hook is parked.
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let ticker = fiber_pool::spawn::go(move || {
        while !s.load(Ordering::SeqCst) {
            TICKS.fetch_add(1, Ordering::SeqCst);
            may::coroutine::sleep(Duration::from_millis(1));
        }
    });
    let first = panics(&pool, "parks in its hook").join().unwrap();
    assert!(matches!(first, Err(RunError::Panicked { .. })), "{first:?}");
    let second = panics(&pool, "panics after").join().unwrap();
    assert!(
        matches!(second, Err(RunError::Panicked { .. })),
        "{second:?}"
    );
    stop.store(true, Ordering::SeqCst);
    ticker.join().unwrap();

    let runs = RUNS.lock().unwrap().clone();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let (parked, after) = (runs[0], runs[1]);
    assert_eq!(
        parked.tids.0, parked.tids.1,
        "the parked hook resumed on its own thread: {parked:?}"
    );
    assert!(
        parked.ticks > 0,
        "the thread's other coroutine ran meanwhile: {parked:?}"
    );
    assert!(!parked.on_fiber, "{parked:?}");
    assert!(
        !after.on_fiber,
        "the next panic's hook ran on the hook stack, given back: {after:?}"
    );
    assert_eq!(after.tids, parked.tids, "one worker, one thread");
}

/// Written by the child just before the panic that aborts it.
const SECOND_PANIC: &str = "child: a second coroutine panics while the hook is parked";

#[test]
fn a_panic_on_the_thread_of_a_parked_hook_aborts_the_process() {
    const NAME: &str = "a_panic_on_the_thread_of_a_parked_hook_aborts_the_process";
    if child_mode(NAME).is_none() {
        let says = [SECOND_PANIC, "thread panicked while processing panic"];
        return common::assert_child_dies(NAME, "abort", libc::SIGABRT, &says);
    }
    let pool = setup();
    let _first = panics(&pool, "parks in its hook");
    wait_until("the first hook to park", Duration::from_secs(10), || {
        ENTERED.load(Ordering::SeqCst) == 1
    });
    eprintln!("{SECOND_PANIC}");
    // Runs on the one worker while the hook is parked there: std aborts at its panic,
    // before any hook.
    let second = panics(&pool, "panics while the hook is parked").join();
    eprintln!("child: the process lived on: {second:?}");
}
