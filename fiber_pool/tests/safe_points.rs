//! Which overflows count as struck at a safe point: only those at a check whose
//! caller declared that its job holds nothing (`reserve_stack`, `lock`). The
//! allocator's check cannot know what the job holds: an allocation made with a
//! std `Mutex` locked overflows with the lock held, and that is reported as an
//! overflow outside a safe point (and the lock is indeed left held). Neither can a
//! library's own locks (`lock_anywhere`, which `FiberPool::stats` takes).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::sync::{Mutex, TryLockError};

use fiber_pool::{stack_remaining, Aftermath, FiberPool, PoolConfig, RunError};

/// Recurses (128-byte frames) until fewer than `left` bytes of fiber stack remain,
/// then runs `f` there.
#[inline(never)]
fn near_the_guard(left: usize, f: &mut dyn FnMut()) {
    let pad = std::hint::black_box([0u8; 128]);
    if stack_remaining().expect("on a fiber") < left {
        f();
    } else {
        near_the_guard(left, f);
    }
    std::hint::black_box(&pad);
}

fn pool() -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 32 * 1024,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// The overflow of `job`, with where its faulting instruction was.
fn overflow_of(pool: &FiberPool, job: impl FnOnce() + Send + 'static) -> (bool, String) {
    let p = pool.clone();
    let err = may::go!(move || p.run("job", job))
        .join()
        .unwrap()
        .unwrap_err();
    let RunError::StackOverflow {
        at_safe_point,
        fault_pc,
        ..
    } = err
    else {
        panic!("{err}")
    };
    let at = fiber_pool::testing::locate(&[fault_pc]).unwrap().remove(0);
    (at_safe_point, at.innermost().to_string())
}

/// Asserts that `overflow` (at a safe point?, the function that faulted) of a job of
/// `pool` that held `held` struck in a stack check that claims no safe point, left
/// `held` locked, and was counted outside a safe point: in the process's aftermath
/// since `before`, and in the pool's stats (its only one).
fn struck_outside_a_safe_point<T>(
    pool: &FiberPool,
    before: Aftermath,
    (at_safe_point, function): (bool, String),
    held: &Mutex<T>,
) {
    assert_eq!(
        function, "fiber_pool::stack_check::overflow_now",
        "struck in a check"
    );
    assert!(!at_safe_point, "the check did not know what the job held");
    assert!(
        matches!(held.try_lock(), Err(TryLockError::WouldBlock)),
        "the abandoned guard keeps the job's Mutex locked"
    );
    // Process-wide: other tests of this binary may overflow meanwhile.
    let after = fiber_pool::aftermath();
    assert!(after.outside_safe_point > before.outside_safe_point);
    assert_eq!(
        pool.stats().unsafe_overflows,
        1,
        "and the pool's locks are free"
    );
}

static HELD: Mutex<Vec<u8>> = Mutex::new(Vec::new());

#[test]
fn an_allocation_with_a_lock_held_overflows_outside_a_safe_point() {
    let pool = pool();
    let before = fiber_pool::aftermath();
    let overflow = overflow_of(&pool, || {
        let mut held = HELD.lock().unwrap();
        // Just under the allocator's margin left (a debug build's frames between
        // the allocation and the check take over 1 KiB).
        near_the_guard(fiber_pool::ALLOC_STACK_MARGIN, &mut || {
            held.push(std::hint::black_box(Vec::<u8>::with_capacity(64)).capacity() as u8);
        });
    });
    struck_outside_a_safe_point(&pool, before, overflow, &HELD);
}

#[test]
fn reserve_stack_declares_a_safe_point_and_check_stack_does_not() {
    let pool = pool();
    let (declared, at) = overflow_of(&pool, || {
        near_the_guard(4096, &mut || fiber_pool::reserve_stack(8192))
    });
    assert!(declared, "{at}");
    let (checked, at) = overflow_of(&pool, || {
        near_the_guard(4096, &mut || fiber_pool::check_stack(8192))
    });
    assert!(!checked, "{at}");
    assert_eq!(at, "fiber_pool::stack_check::overflow_now");
    let stats = pool.stats();
    assert_eq!((stats.overflows, stats.unsafe_overflows), (2, 1));
}

static HANDLER_LOCK: Mutex<u32> = Mutex::new(0);

/// A handler that holds a lock of its own and asks for the pool's stats (a /stats
/// route) with too little stack: the overflow strikes in the stats' check, before
/// their locks, and is not reported at a safe point, since the library cannot know
/// what its caller holds (here a Mutex, left locked).
#[test]
fn a_librarys_lock_under_a_lock_of_the_job_overflows_outside_a_safe_point() {
    let pool = pool();
    let before = fiber_pool::aftermath();
    let p = pool.clone();
    let overflow = overflow_of(&pool, move || {
        let mut held = HANDLER_LOCK.lock().unwrap();
        // Less than the stats' locks check for (`LOCK_STACK_MARGIN`).
        near_the_guard(fiber_pool::LOCK_STACK_MARGIN / 2, &mut || {
            *held += std::hint::black_box(p.stats()).completed as u32;
        });
    });
    struck_outside_a_safe_point(&pool, before, overflow, &HANDLER_LOCK);
}
