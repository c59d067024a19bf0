//! After an overflow something may still refer to the abandoned frames (here a
//! thread started by `std::thread::scope`, which borrows a local of the job and
//! was never joined): the stack is never reused, so that reference keeps
//! reading the memory it borrowed. A fiber whose stack overflowed gets a spare
//! stack (with none left it is retired: test `retired`).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use common::{recurse, Watch};
use fiber_pool::{FiberPool, PoolConfig, RunError};

const STACK: usize = 64 * 1024;
const MAGIC: u64 = 0x5afe_57ac_c0de_0001;

/// Overwrites most of the stack it runs on with a pattern.
#[inline(never)]
fn paint_the_stack() -> u8 {
    let mut paint = [0x55u8; 48 * 1024];
    std::hint::black_box(&mut paint);
    paint[100]
}

#[test]
fn a_local_borrowed_by_another_thread_stays_valid_after_its_job_overflows() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: STACK,
        ..PoolConfig::default()
    })
    .unwrap();
    let watch = Arc::new(Watch::default());
    let (p, w) = (pool.clone(), Arc::clone(&watch));
    let first = may::go!(move || p.run("lends", move || {
        let local = AtomicU64::new(MAGIC);
        std::thread::scope(|s| {
            w.start(s, &local, MAGIC);
            // Overflows with the scope still open: the thread is never joined.
            recurse(0)
        })
    }))
    .join()
    .unwrap();
    assert!(
        matches!(first, Err(RunError::StackOverflow { .. })),
        "{first:?}"
    );
    // The only fiber runs again; on the overflowed stack it would overwrite the
    // frame that `local` lives in.
    let p = pool.clone();
    let painted = may::go!(move || p.run("paints", paint_the_stack))
        .join()
        .unwrap();
    assert_eq!(painted.unwrap(), 0x55);
    // Let the watcher look again, well after the paint.
    assert!(
        !watch.finish(),
        "the borrowed local changed under the thread borrowing it: its stack was reused"
    );
    // This pool's own count, and the process-wide one, which counts every pool's.
    let stats = pool.stats();
    assert_eq!(stats.spare_stacks, PoolConfig::default().spare_stacks - 1);
    assert!(fiber_pool::aftermath().quarantined >= 1);
}
