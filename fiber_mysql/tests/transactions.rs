//! `transaction(|tx| ..)` against a real MariaDB: commit on `Ok`, rollback on `Err`
//! (the caller gets its own error back) and on panic (resumed), through a `Lent`
//! checkout too; and a fiber that overflows mid-transaction: its connection is
//! closed, the server rolls back, the pool slot is freed (with either driver).

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
mod common;

use std::time::{Duration, Instant};

use fiber_mysql::{Conn, Driver, Error, Pool};

/// Longest any wait for a state in these tests.
const STATE_WAIT: Duration = Duration::from_secs(10);

fn setup() -> (Pool, Conn, String) {
    setup_with(Driver::Native)
}

/// [`setup`] with a pool of `driver`.
fn setup_with(driver: Driver) -> (Pool, Conn, String) {
    let opts = common::opts();
    let table = common::unique_table("tx");
    let mut other = Conn::connect(&opts).unwrap();
    other
        .query(&format!("CREATE TABLE {table} (v INT) ENGINE=InnoDB"))
        .unwrap();
    (common::pool(opts, 1, driver), other, table)
}

/// Rows with value `v`, seen from another connection (so committed ones only).
fn committed(other: &mut Conn, table: &str, v: i64) -> i64 {
    other
        .exec(&format!("SELECT COUNT(*) FROM {table} WHERE v = ?"), (v,))
        .unwrap()
        .scalar::<i64>()
        .unwrap()
        .unwrap()
}

#[test]
fn ok_commits_through_a_lent_checkout() {
    let (pool, mut other, table) = setup();
    let mut conn = pool.checkout().unwrap();
    let n = conn
        .transaction(|tx| {
            tx.exec(&format!("INSERT INTO {table} VALUES (?)"), (1,))?;
            assert_eq!(
                committed(&mut other, &table, 1),
                0,
                "not visible before commit"
            );
            tx.exec(&format!("SELECT COUNT(*) FROM {table}"), ())?
                .scalar::<i64>()
        })
        .unwrap();
    assert_eq!(n, Some(1));
    assert_eq!(committed(&mut other, &table, 1), 1);
    assert_eq!(
        conn.reset_reason(),
        None,
        "committed: nothing left to reset"
    );
}

#[derive(Debug, PartialEq)]
enum AppError {
    Db(String),
    OutOfStock { item: u32 },
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Db(e.to_string())
    }
}

#[test]
fn err_rolls_back_and_the_callers_error_comes_back_unchanged() {
    let (pool, mut other, table) = setup();
    let mut conn = pool.get().unwrap();
    let result: Result<(), AppError> = conn.transaction(|tx| {
        tx.exec(&format!("INSERT INTO {table} VALUES (?)"), (2,))?;
        Err(AppError::OutOfStock { item: 7 })
    });
    assert_eq!(result, Err(AppError::OutOfStock { item: 7 }));
    assert_eq!(committed(&mut other, &table, 2), 0);
    // Rolled back here, not left for the give-back's reset.
    assert_eq!(conn.reset_reason(), None);
    assert_eq!(
        conn.query(&format!("SELECT COUNT(*) FROM {table}"))
            .unwrap()
            .scalar::<i64>()
            .unwrap(),
        Some(0)
    );
}

#[test]
fn a_panic_rolls_back_and_goes_on() {
    let (pool, mut other, table) = setup();
    let mut conn = pool.get().unwrap();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<(), Error> = conn.transaction(|tx| {
            tx.exec(&format!("INSERT INTO {table} VALUES (?)"), (3,))?;
            panic!("handler bug");
        });
    }))
    .unwrap_err();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"handler bug"));
    assert_eq!(committed(&mut other, &table, 3), 0);
    assert_eq!(
        conn.reset_reason(),
        None,
        "rolled back before the panic went on"
    );
    assert_eq!(
        conn.query("SELECT 1").unwrap().scalar::<i64>().unwrap(),
        Some(1)
    );
}

/// Never returns: a deep recursion that hits the fiber's guard page.
#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let mut buf = [0u8; 1024];
    buf[depth as usize % 1024] = depth as u8;
    let buf = std::hint::black_box(buf);
    recurse(depth + 1) + u64::from(buf[0])
}

// The native driver's session ends by the shutdown of a second descriptor of its
// socket; the threads driver's, which has none, by `KILL CONNECTION` of its id.
for_each_driver! {
    fn an_overflow_mid_transaction_discards_the_connection_and_commits_nothing(driver: Driver) {
        let (pool, mut other, table) = setup_with(driver);
        let fibers = fiber_pool::FiberPool::new(fiber_pool::PoolConfig {
            size: 1,
            stack_size: 64 * 1024,
            ..fiber_pool::PoolConfig::default()
        })
        .unwrap();
        let (p, t) = (pool.clone(), table.clone());
        let id = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = id.clone();
        let result = may::go!(move || fibers.run("overflow", move || {
            let mut conn = p.checkout().unwrap();
            let _: Result<(), Error> = conn.transaction(|tx| {
                tx.exec(&format!("INSERT INTO {t} VALUES (?)"), (4,))?;
                seen.store(
                    tx.connection_id().unwrap(),
                    std::sync::atomic::Ordering::SeqCst,
                );
                recurse(0);
                Ok(())
            });
        }))
        .join()
        .unwrap();
        assert!(
            matches!(result, Err(fiber_pool::RunError::StackOverflow { .. })),
            "{result:?}"
        );
        let stats = pool.stats();
        assert_eq!(
            (stats.in_use, stats.abandoned),
            (0, 1),
            "slot freed: {stats:?}"
        );
        // The server ends the closed session (and rolls back) on its own time: poll.
        let id = id.load(std::sync::atomic::Ordering::SeqCst);
        let until = Instant::now() + STATE_WAIT;
        while other
            .query("SHOW PROCESSLIST")
            .unwrap()
            .rows
            .iter()
            .any(|row| row.get::<u64, _>("Id") == Some(u64::from(id)))
        {
            assert!(
                Instant::now() < until,
                "connection {id} still open on the server"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(committed(&mut other, &table, 4), 0);
        // The freed slot serves again, with a new connection.
        let mut conn = pool.get().unwrap();
        assert_eq!(
            conn.query("SELECT 1").unwrap().scalar::<i64>().unwrap(),
            Some(1)
        );
        assert_ne!(conn.connection_id(), Some(id));
    }
}
