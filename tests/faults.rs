//! Faults: more requests than fibers and queue, waits past their timeouts, self-calls
//! that could starve every fiber, and MySQL going away under load. Every request gets
//! a meaningful status within a bounded time, and nothing leaks.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{concurrent_gets, get, serve, wait_until};

fn statuses(resps: &[common::Resp]) -> Vec<u16> {
    let mut s: Vec<u16> = resps.iter().map(|r| r.status).collect();
    s.sort();
    s
}

#[test]
fn more_requests_than_fibers_and_queue_get_503_with_retry_after_at_once() {
    let app = serve(|c| {
        c.web.fibers = 2;
        c.web.queue = 2;
    });
    let started = Instant::now();
    let (resps, took) = concurrent_gets(app.addr(), "/widgets?sleep=1", 10);
    // 2 run, 2 wait their turn, 6 are refused.
    assert_eq!(
        statuses(&resps),
        [200, 200, 200, 200, 503, 503, 503, 503, 503, 503]
    );
    for r in resps.iter().filter(|r| r.status == 503) {
        assert_eq!(r.header("Retry-After"), Some("1"));
        assert!(
            r.body.contains("the queue is full") && !r.body.contains("--queue"),
            "{}",
            r.body
        );
    }
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "two waves of 1 s"
    );
    let f = app.state.fibers.stats();
    assert_eq!((f.rejected, f.busy, f.queued), (6, 0, 0), "{f:?}");
}

#[test]
fn a_wait_for_a_fiber_past_its_timeout_is_a_503() {
    let app = serve(|c| {
        c.web.fibers = 1;
        c.web.fiber_wait = Duration::from_millis(300);
    });
    let (resps, _) = concurrent_gets(app.addr(), "/widgets?sleep=1", 3);
    assert_eq!(statuses(&resps), [200, 503, 503], "{resps:?}");
    let r = resps.iter().find(|r| r.status == 503).unwrap();
    // The client reads that the server is busy; how long it waited and the flag to
    // raise are the operator's (the 5xx log line).
    assert!(
        r.body
            .contains("waited for a worker in vain; try again shortly"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("--fiber-wait"), "{}", r.body);
    assert_eq!(app.state.fibers.stats().timed_out, 2);
}

#[test]
fn a_wait_for_a_db_connection_past_its_timeout_is_a_503() {
    let app = serve(|c| {
        c.web.fibers = 10;
        c.db_pool = 1;
        c.db_wait_timeout = Duration::from_millis(300);
    });
    let (resps, _) = concurrent_gets(app.addr(), "/widgets?sleep=1", 3);
    assert_eq!(statuses(&resps), [200, 503, 503], "{resps:?}");
    let r = resps.iter().find(|r| r.status == 503).unwrap();
    assert!(r.body.contains("database unavailable"), "{}", r.body);
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert_eq!(app.state.db.stats().in_use, 0);
}

#[test]
fn a_burst_far_beyond_capacity_keeps_memory_flat() {
    let app = serve(|c| {
        c.web.fibers = 4;
        c.web.queue = 4;
    });
    let rss = || {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        statm.split(' ').nth(1).unwrap().parse::<usize>().unwrap() * 4096
    };
    concurrent_gets(app.addr(), "/widgets?sleep=0.05", 50); // warm up
    let before = rss();
    for _ in 0..10 {
        let (resps, _) = concurrent_gets(app.addr(), "/widgets?sleep=0.05", 100);
        assert!(resps.iter().all(|r| r.status == 200 || r.status == 503));
        assert!(
            resps.iter().any(|r| r.status == 503),
            "the burst exceeded capacity"
        );
    }
    let grew = rss().saturating_sub(before);
    assert!(
        grew < 32 << 20,
        "RSS grew {} MiB over 1000 requests",
        grew >> 20
    );
}

#[test]
fn self_calls_cannot_starve_the_fibers() {
    // Every fiber busy in /widgets/http calling /widgets on this server: without the
    // route limit the inner calls would find no fiber until the waits time out.
    let app = serve(|c| {
        c.web.fibers = 10;
        c.db_pool = 10;
        // Short, so that a starved run fails in seconds instead of passing late.
        c.client.read_timeout = Duration::from_secs(4);
    });
    let (resps, took) = concurrent_gets(app.addr(), "/widgets/http", 10);
    assert!(
        resps.iter().all(|r| r.status == 200),
        "{:?}",
        statuses(&resps)
    );
    // At most 5 at once (half the fibers), each about 1 s: two waves.
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (resps, took) = concurrent_gets(app.addr(), "/widgets/http", 20);
    assert!(
        resps.iter().all(|r| r.status == 200),
        "{:?}",
        statuses(&resps)
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    let f = app.state.fibers.stats();
    assert_eq!((f.busy, f.timed_out), (0, 0), "{f:?}");
}

#[test]
fn self_calls_over_their_limit_wait_then_get_a_503_not_a_hang() {
    let app = serve(|c| {
        c.web.fibers = 4;
        c.self_call_limit = Some(1);
        // One call at a time, each about 1 s (the fixed sleep of /widgets): the
        // second waits one call (1 s plus overhead), the third two (2 s at least).
        // 1.5 s is the middle of that window; it cannot be wider than 0.5 s each way
        // while /widgets/http sleeps a fixed 1 s.
        c.web.fiber_wait = Duration::from_millis(1500);
    });
    let (resps, took) = concurrent_gets(app.addr(), "/widgets/http", 4);
    let s = statuses(&resps);
    assert_eq!(
        s.iter().filter(|&&x| x == 200).count(),
        2,
        "{s:?}: one per second for 1.5 s"
    );
    let refused = resps.iter().find(|r| r.status == 503).unwrap();
    assert!(
        refused.body.contains("route widgets_http"),
        "{}",
        refused.body
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn a_mysql_outage_is_503_then_the_pool_recovers_without_a_restart() {
    let mut app = serve(|c| {
        c.database_url = None; // a private server this test may kill
        c.web.fibers = 20;
        c.db_pool = 5;
    });
    let addr = app.addr();
    assert_eq!(get(addr, "/readyz").status, 200);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let r = get(addr, "/widgets?sleep=0.1");
                    seen.lock()
                        .unwrap()
                        .push((r.status, r.body, started.elapsed()));
                }
            })
        })
        .collect();
    let count = |ok: bool| {
        let seen = seen.lock().unwrap();
        seen.iter().filter(|(s, _, _)| (*s == 200) == ok).count()
    };
    wait_until("load served", Duration::from_secs(10), || count(true) >= 4);
    let db = app.mariadb.as_mut().expect("a private MariaDB");
    db.kill_server().unwrap();
    wait_until("failure seen by the load", Duration::from_secs(10), || {
        count(false) > 0
    });
    let down = get(addr, "/readyz");
    assert_eq!(down.status, 503, "{}", down.body);
    assert!(down.body.contains("not ready"), "{}", down.body);
    assert!(
        !down.body.contains("database unavailable"),
        "the driver's text is the log's: {}",
        down.body
    );
    assert_eq!(get(addr, "/healthz").status, 200, "alive, just not ready");
    db.start_server().unwrap();
    // The pool reconnects by itself.
    wait_until("recovery", Duration::from_secs(10), || {
        get(addr, "/readyz").status == 200
    });
    let served_before = count(true);
    wait_until(
        "load served after the restart",
        Duration::from_secs(10),
        || count(true) >= served_before + 4,
    );
    stop.store(true, Ordering::Relaxed);
    load.into_iter().for_each(|t| t.join().unwrap());

    let seen = seen.lock().unwrap();
    let failed: Vec<_> = seen.iter().filter(|(s, _, _)| *s != 200).collect();
    assert!(!failed.is_empty(), "the outage was seen");
    for (status, body, took) in &failed {
        assert_eq!(*status, 503, "{body}");
        assert!(body.contains("database unavailable"), "{body}");
        assert!(*took < Duration::from_secs(3), "answered quickly: {took:?}");
    }
    assert_eq!(
        seen.last().unwrap().0,
        200,
        "served again after the restart"
    );
    let (f, d) = (app.state.fibers.stats(), app.state.db.stats());
    assert_eq!(
        (f.busy, d.in_use, d.waiting),
        (0, 0, 0),
        "nothing leaked: {f:?} {d:?}"
    );
    assert_eq!(get(addr, "/widgets?sleep=0").status, 200);
}
