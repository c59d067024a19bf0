//! A job that panics through a destructor that waits on the carrier, through
//! `on_carrier` directly (which the pool cannot prevent: its own waits do not park
//! while the thread is panicking), comes back to its own thread, and no thread is left
//! counting a panic once it has unwound. In a binary of its own: while its carrier is
//! parked, every coroutine of its worker sees a panic in progress, and the tests of
//! `unwinding` ask every thread whether it is panicking.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::time::Duration;

use common::panicking::{panicking_per_thread, tid};
use fiber_pool::RunError;

const NAP: Duration = Duration::from_millis(2);

/// Waits on the carrier in its drop, through `on_carrier` directly: what the pool
/// cannot prevent.
struct WaitsOnTheCarrier;

impl Drop for WaitsOnTheCarrier {
    fn drop(&mut self) {
        fiber_pool::on_carrier(|| may::coroutine::sleep(NAP));
    }
}

#[test]
fn an_unwinding_fiber_that_waits_inside_on_carrier_comes_back_to_its_thread() {
    let pool = common::pool_on_workers(2, 2);
    let p = pool.clone();
    let carrier = move || {
        let before = tid();
        let r = p.run("unwinds", || -> () {
            let _w = WaitsOnTheCarrier;
            panic!("unwinding through a drop that waits on the carrier")
        });
        (before, tid(), r)
    };
    let (before, after, r) = fiber_pool::spawn::go(carrier).join().unwrap();
    assert!(matches!(r, Err(RunError::Panicked { .. })), "{r:?}");
    // The sleep ended on may's timer thread, which handed the carrier back to its
    // own worker: the panic ended on the thread that began it, and no thread is left
    // counting one.
    assert_eq!(before, after, "the carrier changed thread");
    assert!(!fiber_pool::aftermath().is_broken());
    let panicking = panicking_per_thread();
    assert!(
        panicking.values().all(|&p| !p),
        "threads left panicking (thread id: panicking): {panicking:?}"
    );
}
