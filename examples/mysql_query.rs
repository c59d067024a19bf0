//! A MySQL query from a fiber, on the may-native client: ten `select sleep(0.5)` at
//! once on a pool of ten connections take about 0.5 s in all, because each wait
//! parks its fiber instead of blocking a thread. Starts a private MariaDB for itself.
//!
//! Run with: cargo run --release --example mysql_query
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::time::Instant;

use fiber_mysql::launcher::MariaDb;
use fiber_pool::{FiberPool, PoolConfig};

const QUERIES: usize = 10;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Dropping it stops the server and deletes its data directory.
    let mariadb = MariaDb::start(Default::default())?;
    let db = fiber_mysql::Pool::new(fiber_mysql::PoolConfig::new(mariadb.opts(), QUERIES))?;
    let fibers = FiberPool::new(PoolConfig {
        size: QUERIES,
        ..PoolConfig::default()
    })?;

    let start = Instant::now();
    let queries: Vec<_> = (0..QUERIES)
        .map(|_| {
            let (db, fibers) = (db.clone(), fibers.clone());
            let caller = move || {
                fibers.run("query", move || -> Result<f64, fiber_mysql::Error> {
                    // A handler should hold the checkout in a fiber_pool::Lent (see
                    // fiber_mysql::Pool::checkout); this job is too shallow to overflow.
                    let mut conn = db.get()?;
                    let slept = conn.query("select sleep(0.5)")?.scalar::<i64>()?;
                    Ok(slept.unwrap_or(-1) as f64)
                })
            };
            // Each caller is a may coroutine, as an HTTP connection would be.
            fiber_pool::carrier::go(caller)
        })
        .collect();
    for q in queries {
        let value = q.join().expect("the carrier does not panic")??;
        assert_eq!(value, 0.0, "sleep() returns 0 when not interrupted");
    }
    println!(
        "{QUERIES} x select sleep(0.5) on a pool of {QUERIES} took {:.2} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
