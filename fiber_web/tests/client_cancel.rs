//! A call that follows its job's context: a cancel shuts its connection down through
//! a hook that runs on the canceller's side. A hook already running when the call
//! ends (its hooks were taken to run, this one not reached yet) must not shut down
//! the connection once it is back in the pool: the next call, another job's, is
//! using it by then.

mod upstream;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fiber_pool::{CancelReason, Context};
use fiber_web::client::{HttpClient, Url};
use fiber_web::config::ClientLimits;
use upstream::{fibers, poll, respond, Upstream, HOLD};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// The steps of the interleaving, each set once.
#[derive(Default)]
struct Steps {
    /// The upstream has the first call's request.
    first_arrived: AtomicBool,
    /// The canceller runs the first call's hooks: the test's own, which waits.
    hooks_running: AtomicBool,
    /// The upstream has the second call's request, on the same connection.
    second_arrived: AtomicBool,
    /// The cancel has returned: every hook of the first call has run.
    cancelled: AtomicBool,
}

/// Waits (on a plain thread) until `flag` is set.
fn wait_for(what: &str, flag: &AtomicBool) {
    assert!(
        poll(HOLD, || flag.load(Ordering::SeqCst)),
        "timed out waiting for {what}"
    );
}

#[test]
fn a_cancel_hook_that_runs_late_leaves_the_next_calls_connection_alone() {
    let steps = Arc::new(Steps::default());
    let s = Arc::clone(&steps);
    let up = Upstream::start(move |stream, req| {
        if req.connection == 0 && req.nth == 0 {
            s.first_arrived.store(true, Ordering::SeqCst);
            wait_for("the hooks to run", &s.hooks_running);
        }
        if req.connection == 0 && req.nth == 1 {
            s.second_arrived.store(true, Ordering::SeqCst);
            wait_for("the cancel to return", &s.cancelled);
        }
        respond(stream, "200 OK", "", b"ok")
    });
    let (pool, http) = (fibers(), Arc::new(HttpClient::new(ClientLimits::default())));
    let url = Url::parse(&up.url("/")).unwrap();

    // The first call, under a context that a plain thread cancels while the upstream
    // holds its answer. The job's own hook, registered first, runs first and waits
    // until the second call's request is out: the client's hook for the first call
    // runs only then.
    let ctx = Context::new();
    let (p, h, u, s, c) = (
        pool.clone(),
        Arc::clone(&http),
        url.clone(),
        Arc::clone(&steps),
        ctx.clone(),
    );
    let first = fiber_pool::spawn::go(move || {
        p.run_in("first", &c, move || {
            let ctx = fiber_pool::current().expect("a job's context");
            let _waits = ctx.on_cancel(move |_| {
                s.hooks_running.store(true, Ordering::SeqCst);
                wait_for("the second request", &s.second_arrived);
            });
            h.get(&u).map(|r| r.status)
        })
    });
    wait_for("the first request", &steps.first_arrived);
    let s = Arc::clone(&steps);
    let canceller = std::thread::spawn(move || {
        ctx.cancel(CancelReason::ClientGone);
        s.cancelled.store(true, Ordering::SeqCst);
    });
    let answered = first.join().unwrap().expect("the first job ran");
    assert_eq!(
        answered.unwrap(),
        200,
        "answered before the cancel reached it"
    );

    // The second call, another job's, takes the same kept-alive connection.
    let (p, h, u) = (pool.clone(), Arc::clone(&http), url.clone());
    let second =
        fiber_pool::spawn::go(move || p.run("second", move || h.get(&u).map(|r| r.status)));
    let answered = second.join().unwrap().expect("the second job ran");
    canceller.join().unwrap();
    assert_eq!(answered.unwrap(), 200);
    assert_eq!(
        up.connections.load(Ordering::SeqCst),
        1,
        "the second call's connection was shut down under it and the call sent again: {:?}",
        up.requests()
    );
    assert_eq!(http.stats().connects, 1, "{:?}", http.stats());
}
