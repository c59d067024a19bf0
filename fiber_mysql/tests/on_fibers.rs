//! The pool's calls on a guarded fiber with little stack left: a `/stats` route runs
//! `Pool::stats` on a handler's fiber, from code that may hold anything, so the
//! stats check the stack before each of their locks and an overflow strikes there,
//! reported outside a safe point, never with a lock of the pool held. And a checkout
//! lent to a job lets go of its connection when it ends, whoever keeps its cancel
//! handle.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::time::{Duration, Instant};

use fiber_mysql::Driver;
use fiber_pool::{FiberPool, PoolConfig, RunError};

#[test]
fn stats_with_too_little_stack_overflow_before_their_locks() {
    let mysql = common::pool(common::opts(), 1, Driver::Native);
    let fibers = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let m = mysql.clone();
    let ran = fiber_pool::spawn::go(move || {
        fibers.run("stats", move || {
            // Plenty for the stats themselves, less than a lock checks for.
            let left = fiber_pool::LOCK_STACK_MARGIN / 2;
            fiber_pool::testing::with_stack_left(left, &mut || m.stats().idle)
        })
    })
    .join()
    .unwrap();
    assert!(
        matches!(
            ran,
            Err(RunError::StackOverflow {
                at_safe_point: false,
                ..
            })
        ),
        "the stats' check overflows, claiming no safe point: {ran:?}"
    );
    // The locks are free: the stats and a checkout work off the fiber.
    assert_eq!(mysql.stats().idle, 1);
    mysql.get().unwrap().ping().unwrap();
}

/// A checkout lent to a job keeps a second handle on its socket, to end the session
/// should an overflow leak the checkout, in the gate its cancel handles share. The
/// checkout's end lets go of it: a connection the pool then closes is closed, its
/// server session ended, while a handle of that checkout is still held.
#[test]
fn a_handle_kept_past_a_lent_checkout_keeps_no_closed_connection_open() {
    let server = common::private_server(10);
    let mysql = common::pool(server.opts(), 1, Driver::Native);
    assert_eq!(common::connections_to(server.port()), 1);
    let fibers = FiberPool::new(PoolConfig {
        size: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    let m = mysql.clone();
    let handle = fiber_pool::spawn::go(move || {
        fibers.run("kept handle", move || {
            let mut conn = m.checkout().unwrap();
            conn.ping().unwrap();
            let handle = conn.cancel_handle();
            conn.into_inner().discard();
            handle
        })
    })
    .join()
    .unwrap()
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while common::connections_to(server.port()) != 0 {
        assert!(
            Instant::now() < until,
            "the discarded connection stays open while its checkout's handle is held"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!handle.is_cancelled());
    handle.cancel().unwrap();
}
