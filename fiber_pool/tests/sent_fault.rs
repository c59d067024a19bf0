//! A SIGSEGV or SIGBUS that no instruction raised, sent to a fiber's own thread
//! (`tgkill`, while its job runs near its guard page) or to the process (`kill`), is
//! not taken for a fault: the job goes on, the process lives, and the next real
//! overflows are still caught, each as its own job's error. Passed on to std's
//! handler, such a signal would restore the default action, and the next overflow
//! would kill the process. In a binary of its own: the process's signal handling is
//! what it checks.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::wait_until;
use fiber_pool::{FiberPool, PoolConfig};

#[test]
fn a_sent_sigsegv_or_sigbus_is_ignored_and_later_overflows_are_caught() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        let (tid, sent) = (
            Arc::new(AtomicI32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (t, s, p) = (Arc::clone(&tid), Arc::clone(&sent), pool.clone());
        let job = fiber_pool::spawn::go(move || {
            p.run("near the guard", move || {
                fiber_pool::testing::with_stack_left(1024, &mut || {
                    // SAFETY: gettid has no preconditions.
                    t.store(unsafe { libc::gettid() }, Ordering::SeqCst);
                    while !s.load(Ordering::SeqCst) {
                        std::hint::spin_loop();
                    }
                    // A system call: a signal pending on this thread is delivered
                    // before it returns, here, near the guard.
                    // SAFETY: getpid has no preconditions.
                    unsafe { libc::syscall(libc::SYS_getpid) }
                })
            })
        });
        wait_until("the job to start", Duration::from_secs(10), || {
            tid.load(Ordering::SeqCst) != 0
        });
        // SAFETY: sends a signal to a thread of this process; no memory is touched.
        let aimed = unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid(),
                tid.load(Ordering::SeqCst),
                sig,
            )
        };
        assert_eq!(aimed, 0, "tgkill");
        sent.store(true, Ordering::SeqCst);
        let ran = job.join().unwrap();
        // SAFETY: getpid has no preconditions.
        assert_eq!(
            ran,
            Ok(i64::from(unsafe { libc::getpid() })),
            "the job went on"
        );
        // To the process: taken by this thread (the kernel prefers the sender's),
        // before `kill` returns.
        // SAFETY: sends a signal to this process; no memory is touched.
        assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0, "kill");
        for _ in 0..2 {
            common::overflow_is_caught(&pool, &format!("after a sent signal {sig}"));
        }
    }
    assert_eq!(pool.stats().overflows, 4);
}
