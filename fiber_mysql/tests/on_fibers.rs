//! The pool's calls on a guarded fiber with little stack left: a `/stats` route runs
//! `Pool::stats` on a handler's fiber, from code that may hold anything, so the
//! stats check the stack before each of their locks and an overflow strikes there,
//! reported outside a safe point, never with a lock of the pool held.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use fiber_mysql::Driver;
use fiber_pool::{FiberPool, PoolConfig, RunError};

#[test]
fn stats_with_too_little_stack_overflow_before_their_locks() {
    let mysql = common::pool(common::opts(), 1, Driver::Native);
    let fibers = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let m = mysql.clone();
    let ran = fiber_pool::spawn::go(move || {
        fibers.run("stats", move || {
            // Plenty for the stats themselves, less than a lock checks for.
            let left = fiber_pool::LOCK_STACK_MARGIN / 2;
            fiber_pool::testing::with_stack_left(left, &mut || m.stats().idle)
        })
    })
    .join()
    .unwrap();
    assert!(
        matches!(
            ran,
            Err(RunError::StackOverflow {
                at_safe_point: false,
                ..
            })
        ),
        "the stats' check overflows, claiming no safe point: {ran:?}"
    );
    // The locks are free: the stats and a checkout work off the fiber.
    assert_eq!(mysql.stats().idle, 1);
    mysql.get().unwrap().ping().unwrap();
}
