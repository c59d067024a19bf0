//! Faults that are not a fiber's guard page still kill the process by SIGSEGV.
//! Each test re-runs itself as a child process (see `common::child_mode`): the
//! child crashes, the test asserts on the child's signal and output.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use fiber_pool::{FiberPool, PoolConfig};

/// Written by the child just before its crash, so that a child that died
/// earlier (or ran no test at all) fails the test.
const ABOUT_TO_CRASH: &str = "child: writing to address 0";

fn null_write() {
    eprintln!("{ABOUT_TO_CRASH}");
    // SAFETY: none; this is the crash under test.
    unsafe { std::ptr::write_volatile(std::hint::black_box(std::ptr::null_mut::<u8>()), 1) };
}

fn pool() -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// Runs the test `name` as a child and asserts that it wrote
/// [`ABOUT_TO_CRASH`] and then died by SIGSEGV.
fn assert_child_dies_by_sigsegv(name: &str) {
    common::assert_child_dies(name, "crash", libc::SIGSEGV, &[ABOUT_TO_CRASH]);
}

#[test]
fn a_null_write_outside_fibers_still_dies_by_sigsegv() {
    const NAME: &str = "a_null_write_outside_fibers_still_dies_by_sigsegv";
    if common::child_mode(NAME).is_none() {
        return assert_child_dies_by_sigsegv(NAME);
    }
    // The child: the pool's handler is installed (a job has run), then a
    // fault that is no fiber's.
    let p = pool();
    assert_eq!(
        may::go!(move || p.run("ok", || 1)).join().unwrap().unwrap(),
        1
    );
    null_write();
}

#[test]
fn a_null_write_inside_a_fiber_still_dies_by_sigsegv() {
    const NAME: &str = "a_null_write_inside_a_fiber_still_dies_by_sigsegv";
    if common::child_mode(NAME).is_none() {
        return assert_child_dies_by_sigsegv(NAME);
    }
    // The child: a fault on a fiber, but not in its guard page.
    let p = pool();
    let _ = may::go!(move || p.run("crash", null_write)).join();
}
