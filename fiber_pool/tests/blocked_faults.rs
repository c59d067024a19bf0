//! A thread whose signal mask blocks SIGSEGV and SIGBUS (inherited, or set by a
//! library) creates the first pool, so may's threads are started with that mask, and
//! runs jobs both itself and through may: every overflow is still caught. Blocked, the
//! kernel would kill the process at the first overflow instead of running the
//! handler, so the pool unblocks both where it sets a thread's mask. In a binary of
//! its own: may's threads are started once per process, by the first pool.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use common::recurse;
use fiber_pool::{FiberPool, PoolConfig, RunError};

/// Blocks SIGSEGV and SIGBUS on the calling thread.
fn block_faults() {
    // SAFETY: builds a signal set in a local and changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGSEGV);
        libc::sigaddset(&mut set, libc::SIGBUS);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
            0
        );
    }
}

/// Whether `sig` is blocked on the calling thread.
fn blocked(sig: libc::c_int) -> bool {
    // SAFETY: reads this thread's mask into a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
        libc::sigismember(&set, sig) == 1
    }
}

#[test]
fn overflows_are_caught_on_threads_that_had_sigsegv_and_sigbus_blocked() {
    std::thread::spawn(|| {
        block_faults();
        let pool = FiberPool::new(PoolConfig {
            size: 1,
            stack_size: 64 * 1024,
            ..PoolConfig::default()
        })
        .unwrap();
        // Carried by this plain thread: its mask is set for the run, then put back.
        let ran = pool.run("overflows here", || recurse(0));
        assert!(
            matches!(ran, Err(RunError::StackOverflow { .. })),
            "{ran:?}"
        );
        assert!(blocked(libc::SIGSEGV), "the thread's own mask is back");
        // Carried by a may coroutine, on a worker started with this thread's mask.
        for _ in 0..2 {
            common::overflow_is_caught(&pool, "on a may worker");
        }
        assert_eq!(pool.stats().overflows, 3);
    })
    .join()
    .unwrap();
}
