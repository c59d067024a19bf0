//! A fiber whose stack overflowed gets a spare stack; with none left it is retired,
//! a pool with every fiber retired says so, and the process's aftermath counts the
//! quarantined stacks and retired fibers and calls the process broken. In a binary of
//! its own: those counters are process-wide (any other test's overflow would add to
//! them), and a broken aftermath is what other tests assert against.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use common::recurse;
use fiber_pool::{FiberPool, PoolConfig, RunError};

#[test]
fn without_spare_stacks_overflowed_fibers_retire_and_then_the_pool_says_so() {
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        stack_size: 16 * 1024,
        spare_stacks: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let results = may::go!(move || {
        let mut results = Vec::new();
        for _ in 0..3 {
            results.push(p.run("deep", || recurse(0)).map(|_| ()));
            results.push(p.run("fine", || ()));
        }
        results.push(p.run("after", || ()));
        results
    })
    .join()
    .unwrap();
    // 1st overflow: the spare replaces the stack. 2nd and 3rd: no spare left,
    // the fiber retires. Then no fiber is left.
    let overflowed = |r: &Result<(), RunError>| matches!(r, Err(RunError::StackOverflow { .. }));
    assert!(overflowed(&results[0]) && results[1].is_ok(), "{results:?}");
    assert!(overflowed(&results[2]) && results[3].is_ok(), "{results:?}");
    assert!(overflowed(&results[4]), "{results:?}");
    for r in &results[5..] {
        assert_eq!(r, &Err(RunError::Retired { size: 2 }), "{results:?}");
    }
    let stats = pool.stats();
    assert_eq!(
        (
            stats.retired,
            stats.spare_stacks,
            stats.busy,
            stats.overflows
        ),
        (2, 0, 0, 3)
    );
    let after = fiber_pool::aftermath();
    assert_eq!((after.quarantined, after.retired), (3, 2));
    assert!(after.is_broken(), "{after:?}");
}
