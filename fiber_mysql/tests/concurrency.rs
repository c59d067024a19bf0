//! The point of the crate: waiting queries park fibers, not the worker
//! thread, and the pool is the concurrency throttle. All on ONE may worker: each
//! test sets it before anything starts may, whichever runs first (the count is the
//! process's, read once). What counts the server's connections or queries has a
//! private server of its own, since the shared test server is the whole process's
//! (and the whole run's under FIBERSTACK_TEST_DATABASE_URL). The `mysql` crate's
//! blocking of the one worker is a binary of its own (mysql_crate_blocks_the_worker):
//! beside it, every other test here would stall for its second.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_mysql::{Conn, Driver};

fn one_worker() {
    may::config().set_workers(1);
}

for_each_driver! {
    fn two_hundred_sleeps_with_a_pool_of_200_take_about_one_second(driver: Driver) {
        one_worker();
        let server = common::private_server(210);
        let pool = common::pool(server.opts(), 200, driver);
        let started = Instant::now();
        let results = common::in_fibers(200, move |_| {
            let mut conn = pool.get().unwrap();
            conn.query("SELECT SLEEP(1)").unwrap().scalar::<i64>().unwrap()
        });
        let took = started.elapsed();
        assert!(results.iter().all(|r| *r == Some(0)));
        // A blocking driver on one worker would take 200 s: 5 s is wide for a busy machine.
        assert!(took < Duration::from_secs(5), "took {took:?}");
        eprintln!("{driver}: 200 x sleep(1), pool 200, one worker: {took:?}");
    }

    fn forty_half_second_sleeps_with_a_pool_of_10_never_exceed_10(driver: Driver) {
        one_worker();
        // Its own server: SHOW PROCESSLIST shows no other test's sleeps.
        let server = common::private_server(20);
        let opts = server.opts();
        let pool = common::pool(opts.clone(), 10, driver);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let peak_on_server = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        // A watcher fiber counts our sleeping queries in SHOW PROCESSLIST.
        let watcher = {
            let (peak_on_server, done) = (peak_on_server.clone(), done.clone());
            may::go!(move || {
                let mut admin = Conn::connect(&opts).unwrap();
                while done.load(Ordering::Relaxed) < 40 {
                    let r = admin.query("SHOW PROCESSLIST").unwrap();
                    let sleeping = r.rows.iter()
                        .filter(|row| row.get::<Option<String>, _>("Info").flatten()
                            .is_some_and(|q| q == "SELECT SLEEP(0.5)" || q.starts_with("SELECT SLEEP(?")))
                        .count();
                    peak_on_server.fetch_max(sleeping, Ordering::Relaxed);
                    may::coroutine::sleep(Duration::from_millis(50));
                }
            })
        };
        let started = Instant::now();
        let p = pool.clone();
        let (f, pk, d) = (in_flight.clone(), peak.clone(), done.clone());
        common::in_fibers(40, move |_| {
            let mut conn = p.get().unwrap();
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            pk.fetch_max(now, Ordering::SeqCst);
            conn.query("SELECT SLEEP(0.5)").unwrap();
            f.fetch_sub(1, Ordering::SeqCst);
            d.fetch_add(1, Ordering::SeqCst);
        });
        let took = started.elapsed();
        watcher.join().unwrap();
        let stats = pool.stats();
        eprintln!("{driver}: 40 x sleep(0.5), pool 10: {took:?}, peak {} (server saw {}), {stats:?}",
            peak.load(Ordering::SeqCst), peak_on_server.load(Ordering::SeqCst));
        // 4 waves of 0.5 s.
        assert!(took >= Duration::from_millis(1950), "took {took:?}");
        assert!(took < Duration::from_secs(4), "took {took:?}");
        assert_eq!(peak.load(Ordering::SeqCst), 10);
        let seen = peak_on_server.load(Ordering::SeqCst);
        assert!((1..=10).contains(&seen), "server saw {seen} sleeping queries");
        assert_eq!(stats.total_waits, 30, "30 of 40 fibers had to wait");
        assert!(stats.total_wait_time > Duration::from_secs(10));
        assert_eq!((stats.in_use, stats.waiting, stats.idle), (0, 0, 10));
    }
}

/// 250 connects, 32 at a time, take about 0.8 s here. A connect lost in a full listen
/// queue (see docs/FACTS.md, MariaDB's `back_log`) would wait for the 5 s connect
/// timeout: the bound sits under that, with room for a busy 2-core machine.
#[test]
fn a_pool_of_250_opens_without_waiting_for_a_connect_timeout() {
    one_worker();
    let server = common::private_server(260);
    let started = Instant::now();
    let pool = common::pool(server.opts(), 250, Driver::Native);
    let took = started.elapsed();
    eprintln!("pool of 250 ready in {took:?}");
    assert_eq!(pool.stats().idle, 250);
    assert!(
        took < fiber_mysql::opts::DEFAULT_CONNECT_TIMEOUT - Duration::from_secs(1),
        "took {took:?}"
    );
}

#[test]
fn waiters_are_served_in_fifo_order() {
    one_worker();
    let pool = common::pool(common::opts(), 1, Driver::Native);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let held = pool.get().unwrap();
    let handles: Vec<_> = (0..5)
        .map(|i| {
            let (p, order) = (pool.clone(), order.clone());
            let h = may::go!(move || {
                let _conn = p.get().unwrap();
                order.lock().unwrap().push(i);
            });
            // Fiber i queues before fiber i+1 starts.
            let deadline = Instant::now() + Duration::from_secs(5);
            while pool.stats().waiting < i + 1 {
                assert!(Instant::now() < deadline, "fiber {i} did not queue");
                may::coroutine::sleep(Duration::from_millis(1));
            }
            h
        })
        .collect();
    assert_eq!(pool.stats().waiting, 5);
    drop(held);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}
