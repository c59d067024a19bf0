//! `select 1` queries per second: native vs threads driver vs the `mysql`
//! crate on a plain thread, on one connection and with 32 concurrent
//! callers; medians of 3 short runs. Also prints the fiber stack a query uses.
//!
//! Run with: `cargo run --release -p fiber_mysql --example query_bench`
//! (starts a private MariaDB; or set FIBERSTACK_TEST_DATABASE_URL).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_mysql::{Conn, Driver, Pool, PoolConfig};
use mysql::prelude::Queryable;

const RUN: Duration = Duration::from_secs(2);
const CONCURRENCY: usize = 32;

/// Lets the callers run for RUN, stops and joins them; returns queries/s.
fn rate_after_run(
    started: Instant,
    count: &AtomicU64,
    stop: &AtomicBool,
    join: impl FnOnce(),
) -> f64 {
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    join();
    count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(|a, b| a.total_cmp(b));
    runs[runs.len() / 2]
}

/// Runs `callers` coroutines each looping `query` for RUN; returns queries/s.
fn fibers(pool: &Pool, callers: usize) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..callers)
        .map(|_| {
            let (pool, count, stop) = (pool.clone(), count.clone(), stop.clone());
            may::go!(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut conn = pool.get().unwrap();
                    conn.query("select 1").unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    rate_after_run(started, &count, &stop, || {
        handles.into_iter().for_each(|h| h.join().unwrap())
    })
}

/// The `mysql` crate on plain OS threads, one connection each.
fn plain_threads(url: &str, threads: usize) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let conns: Vec<mysql::Conn> = (0..threads)
        .map(|_| mysql::Conn::new(mysql::Opts::from_url(url).unwrap()).unwrap())
        .collect();
    let started = Instant::now();
    let handles: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (count, stop) = (count.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _: Option<i64> = conn.query_first("select 1").unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    rate_after_run(started, &count, &stop, || {
        handles.into_iter().for_each(|h| h.join().unwrap())
    })
}

fn main() {
    may::config().set_workers(2);
    let opts = fiber_mysql::testing::test_database_opts().expect("database");
    let url = format!(
        "{}?prefer_socket=false",
        opts.url().split('?').next().unwrap()
    );

    // Stack used by connect + query on a fiber: an odd stack size makes may
    // paint the stack and print "used size" (in words) when the fiber ends.
    let o = opts.clone();
    let h = may::go!(
        may::coroutine::Builder::new().stack_size(0x4001),
        move || {
            let mut conn = Conn::connect(&o).unwrap();
            conn.query("select 1").unwrap();
            conn.exec("select ?", (1,)).unwrap();
        }
    )
    .unwrap();
    h.join().unwrap();

    println!("select 1, queries/s, median of 3 x {RUN:?}");
    for (label, size, callers) in [("1 connection", 1, 1), ("pool of 32", 32, CONCURRENCY)] {
        for driver in [Driver::Native, Driver::Threads] {
            let mut cfg = PoolConfig::new(opts.clone(), size);
            cfg.driver = driver;
            let pool = Pool::new(cfg).unwrap();
            let qps = median((0..3).map(|_| fibers(&pool, callers)).collect());
            println!("  {label:<13} {driver:<8} (fibers): {qps:>8.0}");
        }
        let qps = median((0..3).map(|_| plain_threads(&url, callers)).collect());
        println!("  {label:<13} mysql crate (plain threads): {qps:>8.0}");
    }
}
