//! Figures for the closing note: the cost of `pool.run` for an empty job
//! against a bare may coroutine spawn + join, and the resident memory of
//! 10,000 idle fibers with 64 KiB stacks.
//!
//! Run with: `cargo run --release -p fiber_pool --example bench`

use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, PoolConfig};

const OPS: u32 = 20_000;
const RUNS: usize = 5;

/// Median over `RUNS` of the time per operation of `OPS` calls of `op`, all
/// made from one may coroutine.
fn per_op(op: impl Fn() + Send + Sync + Clone + 'static) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let op = op.clone();
            may::go!(move || {
                let start = Instant::now();
                for _ in 0..OPS {
                    op();
                }
                start.elapsed() / OPS
            })
            .join()
            .unwrap()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn rss_kib() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs is mounted");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

fn main() {
    may::config().set_workers(2);
    let spawn = per_op(|| may::go!(|| ()).join().unwrap());
    println!("may::go! spawn + join, empty:            {spawn:>9.2?} (median of {RUNS} x {OPS}, from a coroutine)");
    let start = Instant::now();
    for _ in 0..OPS {
        may::go!(|| ()).join().unwrap();
    }
    println!(
        "may::go! spawn + join, empty:            {:>9.2?} (from the main thread)",
        start.elapsed() / OPS
    );
    for every in [0u32, 1, 16] {
        let pool = FiberPool::new(PoolConfig {
            size: 8,
            measure_every: every,
            ..PoolConfig::default()
        })
        .unwrap();
        let run = per_op(move || pool.run("empty", || ()).unwrap());
        println!("pool.run, empty job, measure_every = {every:<2}: {run:>9.2?}");
    }

    // The same 10,000 sleeping coroutines without a pool first, so that may's
    // own memory (its cache of finished coroutines, timers) is in the baseline.
    let bare: Vec<_> = (0..10_000)
        .map(|_| may::go!(|| may::coroutine::sleep(Duration::from_millis(200))))
        .collect();
    for h in bare {
        h.join().unwrap();
    }
    let before = rss_kib();
    let pool = FiberPool::new(PoolConfig {
        size: 10_000,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let created = rss_kib();
    // Use every fiber once, all at the same time (each job sleeps), so that
    // each stack has been touched by a small job.
    let handles: Vec<_> = (0..10_000)
        .map(|_| {
            let p = pool.clone();
            may::go!(move || p
                .run("touch", || may::coroutine::sleep(Duration::from_millis(
                    200
                )))
                .unwrap())
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(pool.stats().completed, 10_000);
    let used = rss_kib();
    println!(
        "10,000 fibers x 64 KiB: address space {} MiB; RSS +{} KiB after creation, +{} KiB after each ran one small job (peak stack {} B)",
        10_000 * (64 + 4) / 1024,
        created.saturating_sub(before),
        used.saturating_sub(before),
        pool.stats().peak_stack_bytes,
    );
}
