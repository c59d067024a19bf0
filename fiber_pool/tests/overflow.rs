//! A stack overflow becomes `RunError::StackOverflow` and a panic
//! `RunError::Panicked`; the fiber works again afterwards.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use fiber_pool::{FiberPool, PoolConfig, RunError};

mod common;
use common::recurse;

#[test]
fn one_overflow_is_an_error_and_the_fiber_works_again() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 16 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    may::go!(move || {
        let err = p.run("deep", || recurse(0)).unwrap_err();
        let RunError::StackOverflow {
            stack_size,
            label,
            at_safe_point,
            fault_pc,
        } = err.clone()
        else {
            panic!("{err}")
        };
        assert_eq!(
            (stack_size, label, at_safe_point),
            (16 * 1024, "deep", false)
        );
        // The faulting instruction is the job's own: the recursion.
        let at = fiber_pool::testing::locate(&[fault_pc]).unwrap().remove(0);
        assert!(at.innermost().ends_with("common::recurse"), "{at:?}");
        assert!(err.to_string().contains("stack_size"), "{err}");
        assert_eq!(p.run("shallow", || 7).unwrap(), 7);
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!((stats.overflows, stats.completed), (1, 1));
    assert_eq!(stats.per_label["deep"].overflows, 1);
}

#[test]
fn a_panic_is_an_error_and_the_pool_goes_on() {
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    may::go!(move || {
        let err = p.run("boom", || -> u32 { panic!("kaboom {}", 42) });
        assert_eq!(
            err.unwrap_err(),
            RunError::Panicked {
                label: "boom",
                message: "kaboom 42".into()
            }
        );
        assert_eq!(p.run("after", || 1).unwrap(), 1);
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!((stats.panics, stats.completed), (1, 1));
}
