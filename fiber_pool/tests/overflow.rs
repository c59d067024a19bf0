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

/// A panic payload whose own drop panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the payload's drop panics too");
    }
}

#[test]
fn a_panic_whose_payload_panics_when_dropped_leaves_the_slot_whole() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let (first, second) = may::go!(move || {
        let first = p.run("bomb", || std::panic::panic_any(Bomb));
        (first, p.run("after the bomb", || 7))
    })
    .join()
    .expect("run returns an error for the bomb instead of unwinding into its caller");
    assert!(
        matches!(&first, Err(RunError::Panicked { label: "bomb", .. })),
        "{first:?}"
    );
    assert_eq!(second.expect("the only fiber works again"), 7);
    let stats = pool.stats();
    assert_eq!((stats.panics, stats.completed, stats.busy), (1, 1, 0));
    // The stall table is the process's: the other tests of this binary run jobs
    // meanwhile, under labels of their own.
    let left: Vec<_> = fiber_pool::jobs_running_longer_than(std::time::Duration::ZERO)
        .into_iter()
        .filter(|j| ["bomb", "after the bomb"].contains(&j.label))
        .collect();
    assert!(
        left.is_empty(),
        "no thread is left marked as running this test's jobs: {left:?}"
    );
}
