//! The hazards of a review of fiber_pool, provoked on purpose: an asynchronous signal
//! aimed at a may thread whose fiber sits just above its guard page, a `Lent` kept in
//! a thread-local past its job, and the alternate signal stack of a worker that never
//! called `run`. The SIGPROF handler the first installs is the process's; no other
//! test of this binary uses SIGPROF. (A panic near the guard page, whose test sets the
//! process's panic hook, is test `panic_hook_stack`.)

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::near_the_guard;
use fiber_pool::{on_carrier, stack_remaining, FiberPool, Lent, PoolConfig};

static HANDLED: AtomicUsize = AtomicUsize::new(0);

/// How close to its guard page the job waits for the signal (debug frames included).
const NEAR: usize = 3 * 1024;

extern "C" fn count(_: libc::c_int) {
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

/// A pool of `size` fibers with `stack_size` bytes of stack each.
fn pool(size: usize, stack_size: usize) -> FiberPool {
    FiberPool::new(PoolConfig {
        size,
        stack_size,
        ..PoolConfig::default()
    })
    .unwrap()
}

#[test]
fn a_signal_sent_to_a_may_thread_whose_fiber_is_at_its_guard_page_does_not_kill() {
    // A SIGPROF handler installed the way profilers do, without SA_ONSTACK: the
    // kernel would build its frame on the interrupted (fiber) stack.
    // SAFETY: a plain handler that only increments an atomic.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = count as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()),
            0
        );
    }
    let pool = pool(1, 16 * 1024);
    let tid = Arc::new(AtomicI32::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let (t, s) = (Arc::clone(&tid), Arc::clone(&sent));
    let carrier = move || {
        pool.run("at_the_guard", move || {
            near_the_guard(NEAR, &mut || {
                // SAFETY: gettid has no preconditions.
                t.store(unsafe { libc::gettid() }, Ordering::SeqCst);
                // Stay here, on this thread, until the signal was sent (and a bit).
                let deadline = Instant::now() + Duration::from_secs(20);
                while s.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                    std::hint::spin_loop();
                }
                let settle = Instant::now() + Duration::from_millis(50);
                while Instant::now() < settle {
                    std::hint::spin_loop();
                }
                stack_remaining().unwrap()
            })
        })
    };
    let job = fiber_pool::spawn::go(carrier);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tid.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the job never reached its guard page"
        );
        std::thread::yield_now();
    }
    // The thread carrying the fiber blocks every asynchronous signal of the list.
    let status = std::fs::read_to_string(format!(
        "/proc/self/task/{}/status",
        tid.load(Ordering::SeqCst)
    ))
    .unwrap();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    for sig in fiber_pool::testing::blocked_on_may_threads() {
        assert!(
            blocked & (1 << (sig - 1)) != 0,
            "signal {sig} is not blocked on the fiber's may thread: SigBlk {blocked:x}"
        );
    }
    // Aimed at that very thread: without the block, the kernel finds no room for the
    // signal frame (1-3.5 KiB) this close to the guard page and kills the process
    // with SIGSEGV; with room for it, the handler runs on the fiber stack.
    // SAFETY: tgkill to a thread of this process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            tid.load(Ordering::SeqCst),
            libc::SIGPROF,
        )
    };
    assert_eq!(r, 0);
    sent.store(1, Ordering::SeqCst);
    let left = job.join().unwrap().unwrap();
    assert!(left < NEAR, "{left}");
    assert_eq!(
        HANDLED.load(Ordering::Relaxed),
        0,
        "blocked on may threads: the signal stays pending there"
    );
}

thread_local! {
    static KEPT: RefCell<Option<Lent<u32>>> = const { RefCell::new(None) };
}

#[test]
fn a_lent_kept_in_a_thread_local_panics_outside_its_job_instead_of_racing() {
    let pool = pool(2, 64 * 1024);
    let p = pool.clone();
    let carrier = move || {
        // One job keeps its Lent in this thread's thread-local...
        p.run("keeps", || {
            KEPT.with(|k| *k.borrow_mut() = Some(Lent::new(7, |_| {})))
        })
        .unwrap();
        // ...and a later job on the same thread reaches it.
        p.run("reads", || KEPT.with(|k| k.borrow().as_ref().map(|l| **l)))
    };
    let outcome = fiber_pool::spawn::go(carrier).join().unwrap();
    let err = outcome.unwrap_err();
    assert!(
        err.to_string().contains("outside the job that made it"),
        "{err}"
    );
    // Dropping it from elsewhere is fine: the value goes exactly once.
    KEPT.with(|k| k.borrow_mut().take());
}

#[test]
fn a_worker_that_never_called_run_gets_an_alt_stack_before_a_fiber_runs_on_it() {
    // Two may workers; the carrier migrates between them inside `on_carrier` (may
    // sleeps and yields there). Every return to the fiber readies the thread it lands
    // on, so the fiber's thread has a 64 KiB alt stack whichever worker that is.
    let pool = pool(1, 64 * 1024);
    let carrier = move || {
        pool.run("migrates", || {
            let mut sizes = Vec::new();
            for _ in 0..20 {
                on_carrier(|| {
                    may::coroutine::yield_now();
                    may::coroutine::sleep(Duration::from_millis(1));
                });
                // SAFETY: querying the current thread's alt stack into a local.
                let mut st: libc::stack_t = unsafe { std::mem::zeroed() };
                // SAFETY: `st` is a valid out-pointer.
                assert_eq!(unsafe { libc::sigaltstack(std::ptr::null(), &mut st) }, 0);
                sizes.push(st.ss_size);
            }
            sizes
        })
    };
    let sizes = fiber_pool::spawn::go(carrier).join().unwrap().unwrap();
    assert!(
        sizes
            .iter()
            .all(|&s| s >= fiber_pool::signal::ALT_STACK_SIZE),
        "{sizes:?}"
    );
}

#[test]
fn a_job_that_runs_another_job_does_it_from_the_carrier_and_leaks_no_fiber() {
    // A job that runs a job of another pool, 3 KiB above its guard page (and the room
    // the switch to the carrier needs): the inner run's admission wait, stall slot and
    // fiber switch belong on the carrier's stack.
    let outer = Arc::new(pool(1, 16 * 1024));
    let inner = Arc::new(pool(1, 16 * 1024));
    let (o, i) = (Arc::clone(&outer), Arc::clone(&inner));
    let carrier = move || {
        let mut results = Vec::new();
        for n in 0..50u64 {
            let i = Arc::clone(&i);
            // Close to the guard page: the inner run's waits and switches must not use
            // this fiber's stack (nested here, they overflowed it in debug builds).
            let got = o.run("outer", move || {
                near_the_guard(NEAR + fiber_pool::SWITCH_STACK_MARGIN, &mut || {
                    i.run("inner", move || n * 2)
                })
            });
            results.push(got);
        }
        results
    };
    let done = fiber_pool::spawn::go(carrier)
        .join()
        .expect("the carrier finished");
    for (n, got) in done.into_iter().enumerate() {
        assert_eq!(got.expect("outer ran").expect("inner ran"), n as u64 * 2);
    }
    for pool in [&outer, &inner] {
        let stats = pool.stats();
        assert_eq!(stats.busy, 0, "a fiber stayed taken: {stats:?}");
        assert_eq!(stats.overflows, 0, "{stats:?}");
    }
}

/// A job that waits resumes on the thread it waited on (may resumes a sleeper from
/// its timer thread, which hands it back to its worker), so thread-bound state it
/// held across the wait (a `thread_local!` borrow, a lock guard) is still its own
/// thread's: why spawning a carrier is safe. Test `home_thread` covers every wait.
#[test]
fn a_job_that_waits_resumes_on_its_own_thread() {
    let pool = pool(1, 64 * 1024);
    let carrier = move || {
        pool.run("waits", || {
            // SAFETY: gettid has no preconditions.
            let before = unsafe { libc::gettid() };
            fiber_pool::sleep(Duration::from_millis(1));
            // SAFETY: as above.
            (before, unsafe { libc::gettid() })
        })
    };
    let (before, after) = fiber_pool::spawn::go(carrier).join().unwrap().unwrap();
    assert_eq!(
        before, after,
        "the job resumed on another thread than it waited on"
    );
}

/// The calling thread's blocked-signal mask, from procfs.
fn blocked_signals() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap()
}

#[test]
fn a_plain_thread_blocks_async_signals_while_it_runs_a_fiber_and_only_then() {
    // A thread that is not a may worker calls `run` itself: while its fiber runs, a
    // signal delivered there would find the fiber's stack pointer near its guard
    // (no room for the kernel's frame: the process dies by SIGSEGV).
    let pool = pool(1, 64 * 1024);
    let (before, during, after) = std::thread::spawn(move || {
        let before = blocked_signals();
        let during = pool.run("plain_thread", blocked_signals).unwrap();
        (before, during, blocked_signals())
    })
    .join()
    .unwrap();
    for sig in fiber_pool::testing::blocked_on_may_threads() {
        let bit = 1u64 << (sig - 1);
        assert_eq!(before & bit, 0, "signal {sig} blocked before: {before:x}");
        assert_ne!(
            during & bit,
            0,
            "signal {sig} not blocked in the job: {during:x}"
        );
    }
    assert_eq!(after, before, "the thread's own mask is back after run");
}
