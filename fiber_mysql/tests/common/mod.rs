//! Helpers shared by the integration tests: the test database, fibers, drivers.
#![allow(dead_code)]

use std::time::Duration;

use fiber_mysql::launcher::{LaunchConfig, MariaDb, ThreadHandling};
use fiber_mysql::{ColumnProblem, Driver, Error, Opts, Pool, PoolConfig};

/// The shared test server (FIBERSTACK_TEST_DATABASE_URL or one per process).
pub fn opts() -> Opts {
    fiber_mysql::testing::test_database_opts().expect("test database")
}

/// A private server for tests that kill or restart it.
pub fn private_server(max_connections: usize) -> MariaDb {
    private_server_in(max_connections, ThreadHandling::default())
}

/// A private server in the thread mode `threads`.
pub fn private_server_in(max_connections: usize, threads: ThreadHandling) -> MariaDb {
    MariaDb::start(LaunchConfig {
        max_connections,
        db_name: "fiberstack_private".into(),
        thread_handling: threads,
        ..LaunchConfig::default()
    })
    .expect("private MariaDB")
}

/// A table name no other test (or test process) uses.
pub fn unique_table(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn pool(opts: Opts, size: usize, driver: Driver) -> Pool {
    let mut cfg = PoolConfig::new(opts, size);
    cfg.driver = driver;
    cfg.wait_timeout = Duration::from_secs(30);
    Pool::new(cfg).expect("pool")
}

/// Runs `f(i)` for `i in 0..n`, each in its own coroutine, and returns the results.
pub fn in_fibers<T, F>(n: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> T + Send + Sync + 'static,
{
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let f = f.clone();
            may::go!(move || f(i))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("fiber panicked"))
        .collect()
}

/// Defines one `#[test]` per driver: `name::native`, and `name::threads` when the
/// `threads` feature builds that driver.
#[macro_export]
macro_rules! for_each_driver {
    ($(fn $name:ident($driver:ident: Driver) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn run($driver: fiber_mysql::Driver) $body
            #[test]
            fn native() { run(fiber_mysql::Driver::Native) }
            #[cfg(feature = "threads")]
            #[test]
            fn threads() { run(fiber_mysql::Driver::Threads) }
        }
    )*};
}

/// The column, Rust type and problem of an `Error::Column`, and its message; panics
/// on any other outcome.
pub fn column_error<T: std::fmt::Debug>(
    r: fiber_mysql::Result<T>,
) -> (String, String, ColumnProblem, String) {
    match r {
        Err(e @ Error::Column { .. }) => {
            let message = e.to_string();
            let Error::Column {
                column,
                rust_type,
                problem,
            } = e
            else {
                unreachable!()
            };
            (column, rust_type, problem, message)
        }
        other => panic!("expected Error::Column, got {other:?}"),
    }
}

/// Established TCP connections on this machine to `port` (on loopback: the tests'
/// private servers), read from /proc/net/tcp.
pub fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote = fields.get(2).and_then(|a| a.rsplit(':').next());
            fields.get(3) == Some(&"01")
                && remote.and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
        })
        .count()
}
