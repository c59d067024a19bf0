//! A job's context: a cancel from another thread wakes a sleeping job within
//! milliseconds, a deadline cancels by itself (with or without a hook waiting for it),
//! hooks run once and never on the fiber, a dropped registration never runs, a job
//! waiting for a fiber stops waiting when cancelled, a shared hook
//! (`on_cancel_shared`) is told as a closure would run, `current()` finds the
//! running job's context by its stack (none outside a job), and a renewed context is
//! live again without touching another holder's.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{in_coroutine, median_p99, wait_until};
use fiber_pool::{CancelReason, Context, FiberPool, PoolConfig, RunError};

fn pool(size: usize) -> FiberPool {
    FiberPool::new(PoolConfig {
        size,
        ..PoolConfig::default()
    })
    .unwrap()
}

const LONG: Duration = Duration::from_secs(10);

#[test]
fn a_cancel_from_another_thread_wakes_a_ten_second_sleep_within_milliseconds() {
    const ROUNDS: usize = 40;
    let pool = pool(2);
    let mut latencies = Vec::new();
    for _ in 0..ROUNDS {
        let ctx = Context::new();
        let asleep = Arc::new(AtomicBool::new(false));
        let (p, c, a) = (pool.clone(), ctx.clone(), asleep.clone());
        let sleeper = move || {
            p.run_in("sleeper", &c, move || {
                a.store(true, Ordering::SeqCst);
                let slept = fiber_pool::sleep_or_cancelled(LONG);
                (slept, Instant::now())
            })
        };
        let job = fiber_pool::spawn::go(sleeper);
        wait_until("the job to start sleeping", LONG, || {
            asleep.load(Ordering::SeqCst)
        });
        // Past the flag, into the park (a cancel before it ends the sleep just as well).
        std::thread::yield_now();
        let cancelled_at = Instant::now();
        assert!(ctx.cancel(CancelReason::ClientGone));
        let (slept, woke_at) = job.join().unwrap().unwrap();
        assert_eq!(slept, Err(CancelReason::ClientGone));
        let latency = woke_at.saturating_duration_since(cancelled_at);
        assert!(
            latency < Duration::from_secs(1),
            "woke {latency:?} after the cancel"
        );
        latencies.push(latency);
    }
    let (median, p99) = median_p99(&mut latencies);
    println!("cancel -> sleeper awake: median {median:?}, p99 {p99:?} over {ROUNDS} rounds");
    assert!(median < Duration::from_millis(5), "median {median:?}");
    assert!(p99 < Duration::from_millis(200), "p99 {p99:?}");
}

#[test]
fn a_deadline_ends_a_sleep_by_itself() {
    let pool = pool(1);
    let ctx = Context::new().with_timeout(Duration::from_millis(100));
    let start = Instant::now();
    let p = pool.clone();
    let slept =
        in_coroutine(move || p.run_in("deadline", &ctx, || fiber_pool::sleep_or_cancelled(LONG)));
    let took = start.elapsed();
    assert_eq!(slept, Ok(Err(CancelReason::DeadlinePassed)));
    assert!(took >= Duration::from_millis(100), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_deadline_with_a_hook_and_no_waiter_fires_the_hook_on_the_deadline_thread() {
    let ctx = Context::new().with_timeout(Duration::from_millis(50));
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let _hook = ctx.on_cancel(move |reason| {
        let thread = std::thread::current().name().map(str::to_owned);
        *s.lock().unwrap() = Some((reason, thread, Instant::now()));
    });
    let start = Instant::now();
    wait_until("the deadline hook", LONG, || seen.lock().unwrap().is_some());
    let (reason, thread, at) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(reason, CancelReason::DeadlinePassed);
    assert_eq!(thread.as_deref(), Some("fiber-deadlines"));
    assert!(at.duration_since(start) < Duration::from_secs(2));
    assert_eq!(ctx.reason(), Some(CancelReason::DeadlinePassed));
}

#[test]
fn hooks_run_once_and_never_on_the_fiber() {
    let pool = pool(1);
    let ctx = Context::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let on_fiber = Arc::new(AtomicBool::new(false));
    let late_ran_on_fiber = Arc::new(Mutex::new(None));
    let (c, r, f, late) = (
        ctx.clone(),
        runs.clone(),
        on_fiber.clone(),
        late_ran_on_fiber.clone(),
    );
    let job = move || {
        let ctx = fiber_pool::current().expect("a job has a context");
        let hook = ctx.on_cancel(move |reason| {
            assert_eq!(reason, CancelReason::Requested);
            r.fetch_add(1, Ordering::SeqCst);
            f.fetch_or(fiber_pool::on_fiber(), Ordering::SeqCst);
        });
        // Cancelled from the job itself, twice: the hook runs on the carrier, once.
        assert!(ctx.cancel(CancelReason::Requested));
        assert!(
            !ctx.cancel(CancelReason::ClientGone),
            "the first reason holds"
        );
        // Registered after the cancel: runs at once, still off the fiber.
        let _late = ctx.on_cancel(move |_| *late.lock().unwrap() = Some(fiber_pool::on_fiber()));
        drop(hook);
    };
    let p = pool.clone();
    in_coroutine(move || p.run_in("hooks", &c, job)).unwrap();
    ctx.cancel(CancelReason::Shutdown);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the hook ran once");
    assert!(
        !on_fiber.load(Ordering::SeqCst),
        "the hook ran on the carrier"
    );
    assert_eq!(*late_ran_on_fiber.lock().unwrap(), Some(false));
    assert_eq!(ctx.reason(), Some(CancelReason::Requested));
}

#[test]
fn a_registration_dropped_before_the_cancel_never_runs() {
    let ctx = Context::new().with_timeout(Duration::from_millis(30));
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    drop(ctx.on_cancel(move |_| {
        r.fetch_add(1, Ordering::SeqCst);
    }));
    let r = ran.clone();
    let kept = ctx.on_cancel(move |_| {
        r.fetch_add(10, Ordering::SeqCst);
    });
    // The deadline fires the kept hook; by then the dropped one had its chance.
    wait_until("the kept hook", LONG, || ran.load(Ordering::SeqCst) >= 10);
    ctx.cancel(CancelReason::Requested);
    assert_eq!(ran.load(Ordering::SeqCst), 10, "only the kept hook ran");
    drop(kept);
}

/// A shared hook: records each reason it was told and whether it ran on a fiber.
#[derive(Default)]
struct Told {
    reasons: Mutex<Vec<CancelReason>>,
    on_fiber: AtomicBool,
}

impl fiber_pool::CancelHook for Told {
    fn cancelled(self: Arc<Self>, reason: CancelReason) {
        self.reasons.lock().unwrap().push(reason);
        self.on_fiber
            .fetch_or(fiber_pool::on_fiber(), Ordering::SeqCst);
    }
}

/// `on_cancel_shared`: told once, with the first reason, off the fiber; never when
/// its registration was dropped first; at once when registered on a cancelled
/// context; and no reference to it is kept once told or unregistered.
#[test]
fn a_shared_hook_is_told_as_a_closure_would_run() {
    let pool = pool(1);
    let ctx = Context::new();
    let (kept, dropped, late) = (
        Arc::new(Told::default()),
        Arc::new(Told::default()),
        Arc::new(Told::default()),
    );
    let (c, k, d, l) = (ctx.clone(), kept.clone(), dropped.clone(), late.clone());
    let job = move || {
        let ctx = fiber_pool::current().expect("a job has a context");
        let registration = ctx.on_cancel_shared(k);
        drop(ctx.on_cancel_shared(d));
        assert!(ctx.cancel(CancelReason::ClientGone));
        assert!(
            !ctx.cancel(CancelReason::Requested),
            "the first reason holds"
        );
        let _late = ctx.on_cancel_shared(l);
        drop(registration);
    };
    let p = pool.clone();
    in_coroutine(move || p.run_in("shared hooks", &c, job)).unwrap();
    ctx.cancel(CancelReason::Shutdown);
    assert_eq!(*kept.reasons.lock().unwrap(), [CancelReason::ClientGone]);
    assert!(dropped.reasons.lock().unwrap().is_empty());
    assert_eq!(*late.reasons.lock().unwrap(), [CancelReason::ClientGone]);
    for told in [&kept, &dropped, &late] {
        assert!(!told.on_fiber.load(Ordering::SeqCst), "told on the carrier");
        assert_eq!(Arc::strong_count(told), 1, "no reference kept");
    }
}

#[test]
fn current_inside_a_job_is_its_context_and_outside_none() {
    assert!(
        fiber_pool::current().is_none(),
        "the test thread runs no job"
    );
    let pool = pool(1);
    let ctx = Context::new().with_timeout(LONG);
    let deadline = ctx.deadline();
    let outer = ctx.clone();
    let p = pool.clone();
    let job = move || {
        let mine = fiber_pool::current().expect("a job has a context");
        assert_eq!(mine.deadline(), deadline, "the context it was given");
        // On the carrier's stack there is no job.
        assert!(fiber_pool::on_carrier(|| fiber_pool::current().is_none()));
        // Cancelled from outside, seen through `current()`.
        outer.cancel(CancelReason::ClientGone);
        fiber_pool::current().unwrap().reason()
    };
    let seen = in_coroutine(move || p.run_in("current", &ctx, job));
    assert_eq!(seen, Ok(Some(CancelReason::ClientGone)));

    // Run without one, a job gets a fresh context, the same for the whole job.
    let p = pool.clone();
    let job = || {
        fiber_pool::current()
            .unwrap()
            .cancel(CancelReason::Requested);
        fiber_pool::current().unwrap().reason()
    };
    let seen = in_coroutine(move || p.run("fresh", job));
    assert_eq!(seen, Ok(Some(CancelReason::Requested)));
    // And the next job on that fiber starts with a live one.
    let p = pool.clone();
    let job = || fiber_pool::current().unwrap().is_cancelled();
    assert_eq!(in_coroutine(move || p.run("next", job)), Ok(false));
    assert!(fiber_pool::current().is_none());
}

#[test]
fn a_job_run_from_a_job_runs_under_its_context() {
    let pool = pool(2);
    let ctx = Context::new();
    let (p, outer) = (pool.clone(), ctx.clone());
    let job = move || {
        p.run("inner", move || {
            outer.cancel(CancelReason::ClientGone);
            fiber_pool::current().unwrap().reason()
        })
    };
    let p = pool.clone();
    let seen = in_coroutine(move || p.run_in("outer", &ctx, job));
    assert_eq!(seen, Ok(Ok(Some(CancelReason::ClientGone))));
}

#[test]
fn a_cancel_ends_the_wait_for_a_fiber_and_the_job_never_runs() {
    let pool = pool(1);
    let release = Context::new();
    let holding = Arc::new(AtomicBool::new(false));
    let (p, r, h) = (pool.clone(), release.clone(), holding.clone());
    let holder = move || {
        p.run("hold", move || {
            h.store(true, Ordering::SeqCst);
            r.sleep(LONG)
        })
    };
    let holder = fiber_pool::spawn::go(holder);
    wait_until("the only fiber to be taken", LONG, || {
        holding.load(Ordering::SeqCst)
    });

    let ctx = Context::new();
    let ran = Arc::new(AtomicBool::new(false));
    let (p, c, r) = (pool.clone(), ctx.clone(), ran.clone());
    let waiter = move || {
        let start = Instant::now();
        let got = p.run_in("waits", &c, move || r.store(true, Ordering::SeqCst));
        (got, start.elapsed())
    };
    let waiter = fiber_pool::spawn::go(waiter);
    wait_until("the second job to queue", LONG, || pool.stats().queued == 1);
    ctx.cancel(CancelReason::ClientGone);
    let (got, waited) = waiter.join().unwrap();
    assert_eq!(
        got,
        Err(RunError::Cancelled {
            reason: CancelReason::ClientGone
        })
    );
    assert!(
        waited < Duration::from_secs(5),
        "{waited:?} (wait_timeout is 30 s)"
    );
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!((pool.stats().queued, pool.stats().cancelled), (0, 1));

    // A deadline ends the wait the same way.
    let ctx = Context::new().with_timeout(Duration::from_millis(50));
    let p = pool.clone();
    let got = in_coroutine(move || p.run_in("waits", &ctx, || ()));
    assert_eq!(
        got,
        Err(RunError::Cancelled {
            reason: CancelReason::DeadlinePassed
        })
    );

    release.cancel(CancelReason::Requested);
    assert_eq!(holder.join().unwrap(), Ok(Err(CancelReason::Requested)));
}

#[test]
fn a_child_context_follows_its_parent_but_not_the_other_way() {
    let parent = Context::new().with_timeout(LONG);
    let child = parent.clone().with_timeout(Duration::from_secs(1));
    assert!(child.deadline() < parent.deadline(), "the tighter deadline");
    let loose = parent.clone().with_timeout(LONG * 2);
    assert_eq!(
        loose.deadline(),
        parent.deadline(),
        "never looser than the parent"
    );
    let sibling = parent.child();
    sibling.cancel(CancelReason::Requested);
    assert!(!parent.is_cancelled() && !child.is_cancelled());
    parent.cancel(CancelReason::Shutdown);
    assert_eq!(child.reason(), Some(CancelReason::Shutdown));
    assert_eq!(loose.reason(), Some(CancelReason::Shutdown));
    assert_eq!(sibling.reason(), Some(CancelReason::Requested));
    // A child made from a cancelled parent is born cancelled.
    assert_eq!(parent.child().reason(), Some(CancelReason::Shutdown));
}

#[test]
fn a_renewed_context_is_live_and_leaves_other_holders_theirs() {
    // Alone: renewed in place, cancel and deadline gone.
    let ctx = Context::new().with_deadline(Instant::now());
    ctx.cancel(CancelReason::Requested);
    let renewed = ctx.renewed();
    assert_eq!(renewed.reason(), None);
    assert_eq!(renewed.deadline(), None);

    // Held elsewhere (a clone, a hook armed for its deadline): a new one, and the
    // other holder still sees the cancel and has its hook run by it.
    for armed in [false, true] {
        let ctx = Context::new().with_deadline(Instant::now() + LONG);
        let fired = Arc::new(AtomicUsize::new(0));
        let f = Arc::clone(&fired);
        let _hook = armed.then(|| {
            ctx.on_cancel(move |_| {
                f.fetch_add(1, Ordering::SeqCst);
            })
        });
        let other = ctx.clone();
        let renewed = ctx.renewed();
        assert_eq!((renewed.reason(), renewed.deadline()), (None, None));
        renewed.cancel(CancelReason::ClientGone);
        assert_eq!(
            other.reason(),
            None,
            "renewing cancelled another holder's context"
        );
        other.cancel(CancelReason::Requested);
        assert_eq!(other.reason(), Some(CancelReason::Requested));
        assert_eq!(fired.load(Ordering::SeqCst), usize::from(armed));
    }
}
