//! The stall watchdog on the real demo: a job that blocks its thread is a stall
//! of its route (in /stats, and past --stall-limit a replacement request naming the
//! route), while a request that waits in may (/widgets?sleep=1) is none.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{config, get};
use fiberstack::start::start_with;

/// The route's `stalls` in /stats (0 when the route is not listed).
fn stalls(addr: std::net::SocketAddr, route: &str) -> u64 {
    let r = get(addr, "/stats");
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v["fibers"]["routes"][route]["stalls"].as_u64().unwrap_or(0)
}

#[test]
fn a_blocking_job_is_a_stall_of_its_route_and_a_waiting_one_is_not() {
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut cfg = config();
    cfg.web.watchdog.stall_warn = Duration::from_millis(100);
    cfg.web.watchdog.stall_limit = Duration::from_millis(250);
    let hook = {
        let asked = Arc::clone(&asked);
        Box::new(move |reason: &str| asked.lock().unwrap().push(reason.to_string()))
    };
    let app = start_with(&cfg, hook).unwrap_or_else(|e| panic!("the demo did not start: {e}"));
    let addr = app.addr();

    // A second of waiting in MySQL: the fiber is parked in may, its thread free.
    let r = get(addr, "/widgets?sleep=1");
    assert_eq!(r.status, 200, "{}", r.body);

    // Half a second of std::thread::sleep on a fiber: the thread is held.
    let fibers = app.state.fibers.clone();
    let blocking = move || {
        fibers.run("blocking_route", || {
            std::thread::sleep(Duration::from_millis(500));
        })
    };
    fiber_pool::carrier::go(blocking).join().unwrap().unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    while stalls(addr, "blocking_route") == 0 {
        assert!(
            Instant::now() < deadline,
            "no stall counted for blocking_route"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(stalls(addr, "blocking_route"), 1, "one holding, one stall");
    assert_eq!(stalls(addr, "widgets"), 0, "waiting in may is not a stall");
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("route blocking_route") && asked[0].contains("--stall-limit"),
        "{asked:?}"
    );
}
