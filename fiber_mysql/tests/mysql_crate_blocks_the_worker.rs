//! The contrast to the crate's point: the `mysql` crate used directly inside fibers
//! blocks the one may worker. A binary of its own: it holds the process's only worker
//! on purpose, which would stall any test beside it. It needs the `mysql` crate, which
//! only the `threads` feature builds.
#![cfg(feature = "threads")]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

/// 4 x sleep(0.25) on 4 fibers take 1 s instead of 0.25 s: each holds the worker.
#[test]
fn the_blocking_mysql_crate_on_fibers_serialises_them() {
    may::config().set_workers(1);
    // The mysql crate needs more than may's default 32 KiB fiber stack.
    may::config().set_stack_size(0x10000);
    let opts = common::opts();
    let url = format!(
        "{}?prefer_socket=false",
        opts.url().split('?').next().unwrap()
    );
    let conns: Vec<_> = (0..4)
        .map(|_| {
            std::sync::Mutex::new(Some(
                mysql::Conn::new(mysql::Opts::from_url(&url).unwrap()).unwrap(),
            ))
        })
        .collect();
    let conns = Arc::new(conns);
    let started = Instant::now();
    common::in_fibers(4, move |i| {
        use mysql::prelude::Queryable;
        let mut conn = conns[i].lock().unwrap().take().unwrap();
        let _: Vec<i64> = conn.query("SELECT SLEEP(0.25)").unwrap();
    });
    let took = started.elapsed();
    eprintln!("mysql crate in 4 fibers on one worker: {took:?}");
    assert!(took >= Duration::from_millis(950), "took {took:?}");
}
