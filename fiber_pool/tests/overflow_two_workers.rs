//! A thousand stack overflows in a row, interleaved with normal jobs that
//! yield, on two may worker threads (own test binary: may reads its worker
//! count once per process). Afterwards all N fibers work and memory has not
//! kept growing.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::time::Duration;

use common::{recurse, rss_pages};
use fiber_pool::{FiberPool, PoolConfig, RunError};

#[test]
fn a_thousand_overflows_interleaved_on_two_workers() {
    may::config().set_workers(2);
    const N: usize = 4;
    const STACK: usize = 16 * 1024;
    let pool = FiberPool::new(PoolConfig {
        size: N,
        stack_size: STACK,
        // Every overflowed stack is quarantined: one spare for each.
        spare_stacks: 1000,
        ..PoolConfig::default()
    })
    .unwrap();
    // A fixed set of carriers, so that may's own cache of finished
    // coroutines (up to 1000, with their dirty stacks) does not look like
    // our leak.
    const CARRIERS: usize = 8;
    const WARMUP: usize = 25;
    const ROUNDS: usize = 1000 / CARRIERS;
    let barrier = std::sync::Arc::new(may::sync::Barrier::new(CARRIERS + 1));
    let handles: Vec<_> = (0..CARRIERS)
        .map(|c| {
            let p = pool.clone();
            let b = barrier.clone();
            may::go!(move || {
                for i in 0..ROUNDS {
                    if i == WARMUP {
                        b.wait(); // the main thread reads RSS here
                        b.wait();
                    }
                    // A normal job that yields, so carriers migrate between
                    // the two workers mid-job.
                    let ok = p.run("normal", move || {
                        may::coroutine::sleep(Duration::from_micros(50));
                        c * i
                    });
                    assert_eq!(ok.unwrap(), c * i);
                    let err = p
                        .run("overflow", || {
                            may::coroutine::yield_now();
                            recurse(0)
                        })
                        .unwrap_err();
                    assert!(matches!(err, RunError::StackOverflow { .. }), "{err}");
                }
            })
        })
        .collect();
    barrier.wait();
    let rss_after_warmup = rss_pages();
    barrier.wait();
    for h in handles {
        h.join().expect("a carrier coroutine panicked");
    }
    let stats = pool.stats();
    assert_eq!(stats.overflows, 1000);
    assert_eq!(stats.completed, 1000);
    assert_eq!((stats.busy, stats.queued), (0, 0));

    // Every fiber still works: run N jobs that are all inside at once.
    let barrier = std::sync::Arc::new(may::sync::Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let p = pool.clone();
            let b = barrier.clone();
            may::go!(move || p.run("all", move || {
                b.wait();
                i
            }))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap().unwrap(), i);
    }

    // Memory grows by the quarantined stacks and nothing else: the 800
    // overflows after the warm-up cost their 800 stacks (each touched to its
    // guard) and less than 400 KiB more (a leaked page each would be 3.2 MiB).
    let stats = pool.stats();
    assert_eq!(stats.spare_stacks, 0);
    assert_eq!(stats.retired, 0);
    let grown = rss_pages().saturating_sub(rss_after_warmup);
    let quarantined = (ROUNDS - WARMUP) * CARRIERS * STACK / 4096;
    eprintln!(
        "RSS grew by {grown} pages over the last 800 overflows, {quarantined} of them quarantined stacks"
    );
    assert!(
        grown < quarantined + 100,
        "RSS grew by {grown} pages over 800 overflows"
    );
}
