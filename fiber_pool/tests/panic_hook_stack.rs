//! A panic hook that needs more stack than a fiber has left runs on a stack of its
//! own (`run_panic_hook_off_fiber`): a panic near the guard page is reported, and the
//! thread's panic state is not left behind by an overflow inside the hook. In a binary
//! of its own: it sets the process's panic hook, which every other test's panics would
//! run (and count), and reads the process-wide aftermath.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::near_the_guard;
use fiber_pool::{FiberPool, PoolConfig};

/// How close to its guard page the job panics: room for the unwinder (libgcc's, on the
/// fiber), not for a hook that needs [`HOOK_STACK`].
const PANIC_NEAR: usize = 6 * 1024;
/// Stack the test's panic hook uses, as std's may when it prints a backtrace: more than
/// the fiber has left, and more than a carrier's 32 KiB (where an overflow would end
/// the process), less than the hook stack.
const HOOK_STACK: usize = 64 * 1024;
static HOOK_RAN: AtomicUsize = AtomicUsize::new(0);

#[test]
fn a_panic_hook_runs_on_its_own_stack_so_a_panic_near_the_guard_page_is_reported() {
    // A hook that needs more stack than the fiber has left (std's prints a backtrace
    // with RUST_BACKTRACE=1), and holds nothing: on the fiber it would overflow while
    // panicking, the thread's panic state left behind.
    std::panic::set_hook(Box::new(|_| {
        let scratch = std::hint::black_box([1u8; HOOK_STACK]);
        HOOK_RAN.fetch_add(usize::from(scratch[HOOK_STACK - 1]), Ordering::SeqCst);
    }));
    fiber_pool::run_panic_hook_off_fiber();
    let p = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 16 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    // Waited for with a timeout: without the fix the carrier never comes back.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let carrier = move || {
            p.run("panics", || {
                near_the_guard(PANIC_NEAR, &mut || -> u32 { panic!("near the guard page") })
            })
        };
        let got = fiber_pool::spawn::go(carrier).join();
        let _ = tx.send(got);
    });
    // Failures abort: with the hook overflowed on the fiber, std's hook lock stays
    // read-locked and the test process would hang at exit instead of failing.
    let fail = |why: String| -> ! {
        eprintln!("{why}");
        std::process::abort()
    };
    let got = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(got)) => got,
        other => fail(format!("the carrier did not come back: {other:?}")),
    };
    if !matches!(&got, Err(fiber_pool::RunError::Panicked { message, .. })
        if message.contains("near the guard page"))
    {
        fail(format!("the panic was not reported: {got:?}"));
    }
    if HOOK_RAN.load(Ordering::SeqCst) != 1 {
        fail("the hook did not run once".into());
    }
    let after = fiber_pool::aftermath();
    if after.is_broken() {
        fail(format!("the aftermath is broken: {after:?}"));
    }
}
