//! With `FiberSafeAlloc` as the global allocator, jobs that allocate at
//! every level of a runaway recursion overflow 1000 times on two may workers,
//! interleaved with normal allocating jobs, and nothing hangs (a watchdog
//! aborts the process after 60 s, so a deadlock fails instead of hanging
//! CI), and memory does not keep growing. In a binary of its own: it sets may's
//! worker count, read once per process, and measures the process's resident memory,
//! which any other test's allocations and quarantined stacks would add to.

mod common;

use std::sync::atomic::Ordering;

use fiber_pool::{FiberPool, FiberSafeAlloc, PoolConfig, RunError};

#[global_allocator]
static A: FiberSafeAlloc = FiberSafeAlloc;

fn rss_mib() -> usize {
    common::rss_pages() * 4 / 1024
}

#[test]
fn a_thousand_allocating_overflows_on_two_workers_neither_hang_nor_grow() {
    let done = common::watchdog(60);
    may::config().set_workers(2);
    const STACK: usize = 16 * 1024;
    let pool = FiberPool::new(PoolConfig {
        size: 6,
        stack_size: STACK,
        // Every overflowed stack is quarantined: one spare for each.
        spare_stacks: 1000,
        ..PoolConfig::default()
    })
    .unwrap();
    let expected = common::alloc_recurse(0, 5);
    // 4 carriers x 2 phases x 125 iterations, each one overflowing job and
    // one normal one: 2 x 500 overflows.
    let phase = |pool: &FiberPool| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let p = pool.clone();
                may::go!(move || {
                    let mut overflows = 0;
                    for i in 0..125 {
                        match p.run("runaway", move || common::alloc_recurse(i, usize::MAX)) {
                            Err(RunError::StackOverflow { .. }) => overflows += 1,
                            other => panic!("expected an overflow, got {other:?}"),
                        }
                        let ok = p.run("normal", || {
                            may::coroutine::yield_now(); // migrate between workers
                            common::alloc_recurse(0, 5)
                        });
                        assert_eq!(ok.unwrap(), expected);
                    }
                    overflows
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum::<usize>()
    };
    assert_eq!(phase(&pool), 1000 / 2);
    let after_first = rss_mib();
    assert_eq!(phase(&pool), 1000 / 2);
    let after_second = rss_mib();
    eprintln!("RSS after 500 overflows {after_first} MiB, after 1000 {after_second} MiB");
    let stats = pool.stats();
    assert_eq!((stats.overflows, stats.completed), (1000, 1000));
    assert_eq!(stats.per_label["runaway"].overflows, 1000);
    // What the abandoned frames held leaks (a few KiB per overflow), and each
    // overflowed stack stays resident in quarantine; the second 500 overflows
    // must not have added more than that.
    let quarantined_mib = 500 * STACK / (1024 * 1024);
    assert!(
        after_second <= after_first + quarantined_mib + 8,
        "RSS grew from {after_first} to {after_second} MiB over 500 overflows"
    );
    done.store(true, Ordering::SeqCst);
}
