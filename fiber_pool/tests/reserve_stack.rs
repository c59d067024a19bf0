//! `reserve_stack(n)` overflows at the call when fewer than `n` bytes are
//! left, returns at once when enough are, and does nothing off a fiber.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use fiber_pool::{reserve_stack, stack_remaining, FiberPool, PoolConfig, RunError};

const STACK: usize = 32 * 1024;

fn pool() -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 1,
        stack_size: STACK,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// Recurses with ~512-byte frames until fewer than `below` bytes are left,
/// then reserves `want`; returns what was left at the call.
#[inline(never)]
fn descend_then_reserve(below: usize, want: usize, left_at_call: &AtomicUsize) -> usize {
    let buf = std::hint::black_box([7u8; 512]);
    let left = stack_remaining().expect("on a fiber");
    if left < below {
        left_at_call.store(left, Ordering::SeqCst);
        reserve_stack(want);
        return left;
    }
    let r = descend_then_reserve(below, want, left_at_call);
    std::hint::black_box(&buf); // live across the call: no tail call
    r
}

#[test]
fn reserve_stack_overflows_at_the_call_when_short_and_returns_when_not() {
    let pool = pool();
    let p = pool.clone();
    let after = Arc::new(AtomicBool::new(false));
    let left_at_call = Arc::new(AtomicUsize::new(0));
    let (a, l) = (after.clone(), left_at_call.clone());
    may::go!(move || {
        // Plenty left: returns at once.
        let left = p
            .run("roomy", || {
                reserve_stack(8 * 1024);
                reserve_stack(0);
                stack_remaining().unwrap()
            })
            .unwrap();
        assert!(left > STACK - 4096, "{left}");

        // 6 KiB left, 4 KiB wanted: returns.
        let l2 = l.clone();
        let left = p
            .run("enough", move || {
                descend_then_reserve(6 * 1024, 4 * 1024, &l2)
            })
            .unwrap();
        assert!((4 * 1024..6 * 1024).contains(&left), "{left}");

        // 6 KiB left, 12 KiB wanted: overflows right there.
        let err = p
            .run("short", move || {
                descend_then_reserve(6 * 1024, 12 * 1024, &l);
                a.store(true, Ordering::SeqCst);
            })
            .unwrap_err();
        let RunError::StackOverflow {
            stack_size,
            label,
            at_safe_point,
            fault_pc,
        } = err
        else {
            panic!("{err}")
        };
        assert_eq!((stack_size, label, at_safe_point), (STACK, "short", true));
        // The instruction that touched the guard page is reserve_stack's probe.
        let at = fiber_pool::testing::locate(&[fault_pc]).unwrap().remove(0);
        assert!(
            at.innermost() == "fiber_pool::stack_check::overflow_now",
            "fault at {fault_pc:#x} resolved to {at:?}"
        );
        // More than the whole stack is always short.
        let err = p.run("huge", || reserve_stack(STACK + 1)).unwrap_err();
        assert!(matches!(err, RunError::StackOverflow { .. }), "{err}");
        // The fiber works afterwards.
        assert_eq!(p.run("after", || 5).unwrap(), 5);
    })
    .join()
    .unwrap();
    assert!(
        !after.load(Ordering::SeqCst),
        "the job went on after the overflow"
    );
    let left = left_at_call.load(Ordering::SeqCst);
    assert!(
        (4 * 1024..6 * 1024).contains(&left),
        "the overflow was at the call, with {left} bytes still left"
    );
    let stats = pool.stats();
    assert_eq!((stats.overflows, stats.completed), (2, 3));
}

#[test]
fn reserve_stack_is_a_no_op_off_fibers() {
    let pool = pool(); // a registered pool exists, but we are not on it
    reserve_stack(usize::MAX);
    std::thread::spawn(|| reserve_stack(usize::MAX))
        .join()
        .unwrap();
    may::go!(|| {
        reserve_stack(usize::MAX);
        assert!(!fiber_pool::on_fiber());
    })
    .join()
    .unwrap();
    // And on the carrier right after a job.
    let p = pool.clone();
    may::go!(move || {
        p.run("x", || ()).unwrap();
        reserve_stack(usize::MAX);
    })
    .join()
    .unwrap();
    assert_eq!(pool.stats().overflows, 0);
}
