//! A real-time signal (a library's timer or wake-up, `SIGRTMIN`) while a fiber runs:
//! aimed at the fiber's own thread it stays pending there (its handler, installed
//! without `SA_ONSTACK`, never runs on the fiber's stack); sent to the process it is
//! handled by a thread that carries no fiber, not lost.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::{stack_remaining, FiberPool, PoolConfig};

const STACK: usize = 64 * 1024;

static HANDLED: AtomicUsize = AtomicUsize::new(0);
/// The address of a local of the latest handler run: where its frame was.
static HANDLER_AT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn note(_: libc::c_int) {
    let here = 0u8;
    HANDLER_AT.store(
        std::hint::black_box(&here) as *const u8 as usize,
        Ordering::SeqCst,
    );
    HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// Whether `sig` is pending on thread `tid` (its own queue, not the process's).
fn pending_on(tid: i32, sig: libc::c_int) -> bool {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigPnd:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    mask & (1 << (sig - 1)) != 0
}

/// Polls `cond` until it holds; panics after 10 s.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

#[test]
fn a_real_time_signal_never_runs_its_handler_on_a_fiber_and_is_not_lost() {
    let sig = libc::SIGRTMIN();
    // Installed the way a library would, without SA_ONSTACK: delivered on a fiber,
    // its frame would go on the fiber's stack.
    // SAFETY: a handler that only stores to atomics.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = note as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(sig, &action, std::ptr::null_mut()), 0);
    }
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: STACK,
        ..PoolConfig::default()
    })
    .unwrap();
    let tid = Arc::new(AtomicI32::new(0));
    let bottom = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (t, b, d) = (Arc::clone(&tid), Arc::clone(&bottom), Arc::clone(&done));
    let job = may::go!(move || pool.run("spins", move || {
        b.store(
            fiber_pool::testing::running_stack_bottom().expect("on a fiber"),
            Ordering::SeqCst,
        );
        // SAFETY: gettid has no preconditions.
        t.store(unsafe { libc::gettid() }, Ordering::SeqCst);
        // Stay on this thread, running, until the test is done (never yields).
        let deadline = Instant::now() + Duration::from_secs(20);
        while d.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::hint::spin_loop();
        }
        stack_remaining().unwrap()
    }));
    wait_until("the job to run", || tid.load(Ordering::SeqCst) != 0);
    let tid = tid.load(Ordering::SeqCst);
    let bottom = bottom.load(Ordering::SeqCst);
    let on_fiber = |at: usize| (bottom..bottom + STACK).contains(&at);

    // Aimed at the fiber's thread: blocked there, it waits in that thread's queue.
    // SAFETY: tgkill to a thread of this process.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) };
    assert_eq!(r, 0);
    wait_until("the signal pending on the fiber's thread", || {
        pending_on(tid, sig) || HANDLED.load(Ordering::SeqCst) != 0
    });
    assert_eq!(
        HANDLED.load(Ordering::SeqCst),
        0,
        "the handler ran on the fiber's thread (at {:#x}, on the fiber: {})",
        HANDLER_AT.load(Ordering::SeqCst),
        on_fiber(HANDLER_AT.load(Ordering::SeqCst))
    );

    // Sent to the process: a thread that does not block it (this one, the main
    // thread) takes it, while the fiber still runs.
    // SAFETY: kill to our own process, with a signal whose handler is installed.
    assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0);
    wait_until("the handler to run", || HANDLED.load(Ordering::SeqCst) == 1);
    let at = HANDLER_AT.load(Ordering::SeqCst);
    assert!(
        !on_fiber(at),
        "the handler ran on the fiber's stack, at {at:#x}"
    );

    done.store(1, Ordering::SeqCst);
    let left = job.join().unwrap().unwrap();
    assert!(left > 0);
    assert!(
        pending_on(tid, sig),
        "still pending on the fiber's may thread, which blocks it for good"
    );
    assert_eq!(HANDLED.load(Ordering::SeqCst), 1);
}
