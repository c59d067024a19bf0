//! The demo's point: one process runs many one-second queries and HTTP calls at once,
//! with the fiber pool and the MySQL pool as the throttles. Bounds are wide: these
//! machines are shared, and a blocking implementation would miss them by a mile.

mod common;

use common::{concurrent_gets, get, serve};
use std::time::Duration;

#[test]
fn ten_one_second_queries_run_at_once() {
    let app = serve(|c| {
        c.web.fibers = 10;
        c.db_pool = 10;
    });
    let (resps, took) = concurrent_gets(app.addr(), "/widgets", 10);
    assert!(resps.iter().all(|r| r.status == 200 && r.body == "Oh hai"));
    assert!(
        took < Duration::from_secs(4),
        "10 x 1 s took {took:?}: something blocks"
    );
}

#[test]
fn ten_http_self_calls_run_at_once() {
    let app = serve(|c| {
        c.web.fibers = 20;
        c.db_pool = 10;
    });
    let (resps, took) = concurrent_gets(app.addr(), "/widgets/http", 10);
    assert!(
        resps.iter().all(|r| r.status == 200),
        "{:?}",
        resps.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

#[test]
fn one_worker_thread_still_runs_every_query_at_once() {
    let app = serve(|c| {
        c.web.threads = 1;
        c.web.fibers = 60;
        c.db_pool = 60;
    });
    let (resps, took) = concurrent_gets(app.addr(), "/widgets", 60);
    assert!(resps.iter().all(|r| r.status == 200));
    assert!(
        took < Duration::from_secs(5),
        "60 x 1 s on one thread took {took:?}"
    );
}

#[test]
fn the_db_pool_throttles_and_requests_wait_for_it() {
    let app = serve(|c| {
        c.web.fibers = 20;
        c.db_pool = 2;
    });
    // 6 queries of 0.5 s through 2 connections: three waves, about 1.5 s.
    let (resps, took) = concurrent_gets(app.addr(), "/widgets?sleep=0.5", 6);
    assert!(resps.iter().all(|r| r.status == 200));
    assert!(
        took >= Duration::from_millis(1400),
        "the pool of 2 did not throttle: {took:?}"
    );
    assert!(took < Duration::from_secs(6), "took {took:?}");
    let v: serde_json::Value = serde_json::from_str(&get(app.addr(), "/stats").body).unwrap();
    assert!(v["db"]["total_waits"].as_u64().unwrap() >= 4, "{}", v["db"]);
    assert!(
        v["db"]["total_wait_ms"].as_f64().unwrap() >= 500.0,
        "{}",
        v["db"]
    );
}

#[test]
fn the_fiber_pool_throttles_too() {
    let app = serve(|c| {
        c.web.fibers = 2;
        c.db_pool = 10;
    });
    let (resps, took) = concurrent_gets(app.addr(), "/widgets?sleep=0.5", 6);
    assert!(resps.iter().all(|r| r.status == 200));
    assert!(
        took >= Duration::from_millis(1400),
        "2 fibers ran more than 2 at once: {took:?}"
    );
}
