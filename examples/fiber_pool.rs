//! N fibers bound the concurrency: 12 blocking-looking jobs of 200 ms on a pool of 4
//! fibers take three rounds (about 600 ms), and never more than 4 run at once.
//!
//! Run with: cargo run --example fiber_pool
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, PoolConfig};

fn main() {
    let pool = FiberPool::new(PoolConfig {
        size: 4,
        ..PoolConfig::default()
    })
    .unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let jobs: Vec<_> = (0..12)
        .map(|i| {
            let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
            let caller = move || {
                pool.run("sleepy", move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Looks blocking; yields to may so other fibers run meanwhile.
                    may::coroutine::sleep(Duration::from_millis(200));
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                })
            };
            // Each caller is a may coroutine, as an HTTP connection would be.
            fiber_pool::carrier::go(caller)
        })
        .collect();
    for job in jobs {
        job.join().unwrap().unwrap();
    }
    println!(
        "12 jobs of 200 ms on 4 fibers took {} ms; at most {} ran at once",
        start.elapsed().as_millis(),
        most.load(Ordering::SeqCst)
    );
}
