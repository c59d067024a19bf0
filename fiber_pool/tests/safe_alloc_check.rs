//! `FiberPool::new` refuses to start unless `FiberSafeAlloc` is the global allocator,
//! and tells by one probe allocation: it clears a flag, allocates, and looks whether
//! `FiberSafeAlloc` served it. Pools made on many threads at once probe at once, and
//! one probe's clear must not fall between another's allocation and its look (which
//! would refuse a pool of a binary that does declare the allocator).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::sync::Barrier;

use fiber_pool::{ConfigError, FiberPool, PoolConfig};

const THREADS: usize = 8;
const CALLS_EACH: usize = 20_000;

#[test]
fn pools_made_on_many_threads_at_once_all_see_the_safe_allocator() {
    // A size of 0 is refused after the probe (`new` probes before it looks at the
    // config), so each call is little more than a probe, and the probes of the
    // threads overlap all the time.
    let start = Barrier::new(THREADS);
    let refused: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let mut refused = Vec::new();
                    for _ in 0..CALLS_EACH {
                        let cfg = PoolConfig {
                            size: 0,
                            ..PoolConfig::default()
                        };
                        match FiberPool::new(cfg) {
                            Err(ConfigError::ZeroSize) => {}
                            other => refused.push(format!("{:?}", other.map(drop))),
                        }
                    }
                    // And a pool that starts, on each thread.
                    let cfg = PoolConfig {
                        size: 1,
                        ..PoolConfig::default()
                    };
                    if let Err(e) = FiberPool::new(cfg) {
                        refused.push(format!("{e:?}"));
                    }
                    refused
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        refused.is_empty(),
        "{} of {} calls did not see FiberSafeAlloc as the global allocator: {:?}",
        refused.len(),
        THREADS * (CALLS_EACH + 1),
        &refused[..refused.len().min(3)]
    );
}
