//! What a give-back reset costs: checkout + `select 1` + give-back on a pool of one,
//! with the session left clean (no reset) and marked dirty (COM_RESET_CONNECTION,
//! COM_INIT_DB and the tracking `SET`, pipelined). Median of 7 runs of 2000 each.
//!
//! Run with: `cargo run --release -p fiber_mysql --example reset_cost`
//! (starts a private MariaDB; or set FIBERSTACK_TEST_DATABASE_URL).

use std::time::Instant;

use fiber_mysql::{Pool, PoolConfig};

const RUNS: usize = 7;
const PER_RUN: u32 = 2000;

/// Microseconds per checkout + query + give-back, median of RUNS.
fn per_checkout(pool: &Pool, dirty: bool) -> f64 {
    let mut runs: Vec<f64> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..PER_RUN {
                let mut conn = pool.checkout().unwrap();
                conn.query("select 1").unwrap();
                if dirty {
                    conn.mark_session_dirty();
                }
            }
            started.elapsed().as_secs_f64() * 1e6 / f64::from(PER_RUN)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[RUNS / 2]
}

fn main() {
    let opts = fiber_mysql::testing::test_database_opts().expect("database");
    let pool = Pool::new(PoolConfig::new(opts, 1)).unwrap();
    per_checkout(&pool, false); // warm-up
                                // Alternated, so that both see the same neighbours on a shared machine.
    let (mut clean, mut reset) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        clean.push(per_checkout(&pool, false));
        reset.push(per_checkout(&pool, true));
    }
    let stats = pool.stats();
    println!("checkout + select 1 + give-back, us (median of {RUNS} x {PER_RUN}, 3 rounds):");
    for (round, (c, r)) in clean.iter().zip(&reset).enumerate() {
        println!(
            "  round {round}: clean {c:6.1}   reset {r:6.1}   reset costs {:+6.1}",
            r - c
        );
    }
    println!(
        "resets {} (expected {}), reset failures {}",
        stats.resets,
        3 * RUNS as u32 * PER_RUN,
        stats.reset_failures
    );
}
