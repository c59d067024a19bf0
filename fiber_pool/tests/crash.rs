//! Faults that are not a fiber's guard page still kill the process by SIGSEGV
//! (checked in a child process: this test binary re-run with an env var).

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use fiber_pool::{FiberPool, PoolConfig};

const CHILD: &str = "FIBER_POOL_CRASH_CHILD";

/// Re-runs this binary's test `name` as a child that crashes; returns the
/// signal that ended it.
fn crash_in_child(name: &str) -> Option<i32> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    out.status.signal()
}

fn null_write() {
    // SAFETY: none; this is the crash under test.
    unsafe { std::ptr::write_volatile(std::hint::black_box(std::ptr::null_mut::<u8>()), 1) };
}

#[test]
fn child_null_write_outside_fibers() {
    if std::env::var_os(CHILD).is_none() {
        return; // only meaningful as the child of the test below
    }
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    assert_eq!(
        may::go!(move || p.run("ok", || 1)).join().unwrap().unwrap(),
        1
    );
    null_write();
}

#[test]
fn child_null_write_inside_a_fiber() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let _ = may::go!(move || p.run("crash", null_write)).join();
}

#[test]
fn a_null_write_outside_fibers_still_dies_by_sigsegv() {
    assert_eq!(
        crash_in_child("child_null_write_outside_fibers"),
        Some(libc::SIGSEGV)
    );
}

#[test]
fn a_null_write_inside_a_fiber_still_dies_by_sigsegv() {
    assert_eq!(
        crash_in_child("child_null_write_inside_a_fiber"),
        Some(libc::SIGSEGV)
    );
}
