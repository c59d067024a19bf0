//! `/widgets/parallel` on both runtimes: a handler's fan-out of N MySQL queries
//! (fibers: `fiber_web::fan_out::scope`; the twin: a `JoinSet`):
//!
//! - `n=3` of one second each answers in 0.95-1.5 s, not 3 s;
//! - with `deadline=0.5` it is a 504 within 0.8 s, and every connection is back in
//!   the pool within 1 s (the queries killed);
//! - `n` out of range and a `deadline` that is not a positive number of seconds are a
//!   400 naming the allowed range;
//! - on fibers, a server whose every fiber holds a parent still finishes the
//!   children (the reserve), and a fan-out past `--scope-children` is a 503 naming the
//!   flag.

mod common;

use std::time::{Duration, Instant};

use common::either::{Server, RUNTIMES};
use common::{get, poll};
// The fiber server's own tests (not the rig's).
#[cfg(not(rig))]
use {common::concurrent_gets, common::either::Runtime};

#[test]
fn three_one_second_queries_answer_in_about_one_second() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |_| {});
        let started = Instant::now();
        let r = get(server.addr(), "/widgets/parallel?n=3");
        let took = started.elapsed();
        assert_eq!(r.status, 200, "{runtime}: {}", r.body);
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["queries"], 3, "{runtime}: {}", r.body);
        eprintln!(
            "{runtime}: /widgets/parallel?n=3 in {} ms",
            took.as_millis()
        );
        assert!(
            took >= Duration::from_millis(950) && took <= Duration::from_millis(1500),
            "{runtime}: answered after {took:?}"
        );
    }
}

#[test]
fn past_its_deadline_a_fan_out_is_a_504_and_its_queries_are_killed() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |_| {});
        let started = Instant::now();
        let r = get(server.addr(), "/widgets/parallel?n=3&deadline=0.5");
        let took = started.elapsed();
        assert_eq!(r.status, 504, "{runtime}: {}", r.body);
        assert!(r.body.contains("deadline passed"), "{runtime}: {}", r.body);
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_millis(800),
            "{runtime}: answered after {took:?}"
        );
        let back = poll(Duration::from_secs(1), || server.in_use() == 0);
        assert!(
            back,
            "{runtime}: db.in_use is {} 1 s after the 504",
            server.in_use()
        );
        // The pool is whole: the next fan-out is served in full.
        let r = get(server.addr(), "/widgets/parallel?n=3&sleep=0.1");
        assert_eq!(r.status, 200, "{runtime}: {}", r.body);
    }
}

#[test]
fn a_count_or_deadline_out_of_range_is_a_400_naming_the_range() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |_| {});
        for (query, says) in [
            ("n=0", "from 1 to 10"),
            ("n=11", "from 1 to 10"),
            ("n=abc", "from 1 to 10"),
            ("n=-3", "from 1 to 10"),
            ("deadline=0", "above 0"),
            ("deadline=-1", "above 0"),
            ("deadline=abc", "above 0"),
            ("deadline=61", "at most 60"),
            ("sleep=11", "from 0 to 10"),
        ] {
            let r = get(server.addr(), &format!("/widgets/parallel?{query}"));
            assert_eq!(r.status, 400, "{runtime} {query}: {}", r.body);
            assert!(r.body.contains(says), "{runtime} {query}: {}", r.body);
        }
        assert_eq!(
            server.in_use(),
            0,
            "{runtime}: a refused request took a connection"
        );
    }
}

#[cfg(not(rig))] // the fiber server's own: the rig runs the rest on the twin
#[test]
fn with_every_fiber_holding_a_parent_the_children_still_run() {
    const FIBERS: usize = 4;
    // Twice as many parents as fibers: four run, four queue; each fans out to three
    // children, which the common fibers cannot take (the parents hold them all).
    let server = Server::start(Runtime::Fibers, |cfg| {
        cfg.web.fibers = FIBERS;
        cfg.web.child_reserve = 3 * FIBERS;
        cfg.db_pool = 3 * FIBERS;
    });
    let (resps, took) =
        concurrent_gets(server.addr(), "/widgets/parallel?n=3&sleep=0.3", 2 * FIBERS);
    for r in &resps {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    eprintln!(
        "{} fan-outs of 3 on {FIBERS} fibers in {} ms",
        2 * FIBERS,
        took.as_millis()
    );
    // Two waves of 0.3 s; far from the child wait (5 s) a starved child would take.
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[cfg(not(rig))] // the fiber server's own: the rig runs the rest on the twin
#[test]
fn a_fan_out_past_the_scope_limit_is_a_503_to_retry() {
    let server = Server::start(Runtime::Fibers, |cfg| cfg.web.scope_children = 2);
    let r = get(server.addr(), "/widgets/parallel?n=3&sleep=0");
    assert_eq!(r.status, 503, "{}", r.body);
    // The flag to raise is the operator's (the 5xx line); the client is told to retry.
    assert!(
        r.body.contains("the server is busy; try again shortly"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("--scope-children"), "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    let back = poll(Duration::from_secs(1), || server.in_use() == 0);
    assert!(back, "the two children that ran kept their connections");
    let r = get(server.addr(), "/widgets/parallel?n=2&sleep=0");
    assert_eq!(r.status, 200, "{}", r.body);
}
