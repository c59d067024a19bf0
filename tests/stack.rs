//! Fiber stacks: the built-in routes fit the default with 4x headroom, a stack too
//! small for /widgets overflows into a 500 and the server goes on, overflows under load
//! lose no normal request, an overflow at any point of any route leaves no lock held,
//! and /deep behaves at each size. (STACK_SIZES.md has the figures these bounds come
//! from.) What counts the process's fds and memory is a binary of its own:
//! overflow_ends_its_connection and overflow_sweep.

mod common;
mod overflows;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{get, serve};
use fiberstack::config::DEFAULT_STACK_SIZE;
use fiberstack::stack_use::{measure, PROBES, STEP};
use overflows::{abort_when_stuck, one_fiber, run_with_stack_left, SWEPT};

/// Headroom every built-in route keeps at the default stack size.
const HEADROOM: f64 = 4.0;

/// The most stack any route demands to have left before it goes on: the largest of a
/// lock's, a MySQL checkout's, a `Lent`'s and the allocator's. may I/O demands none: it
/// runs on the carrier's stack (`fiber_pool::on_carrier`).
const LARGEST_RESERVATION: usize = max(
    max(
        fiber_pool::LOCK_STACK_MARGIN,
        fiber_mysql::CHECKOUT_STACK_MARGIN,
    ),
    max(
        fiber_pool::lent::LENT_STACK_MARGIN,
        fiber_pool::ALLOC_STACK_MARGIN,
    ),
);

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

#[test]
fn every_built_in_route_fits_the_default_stack_with_4x_headroom() {
    let app = serve(|_| {});
    let state = Arc::clone(&app.state);
    // The built-in routes, and /deep at its default parameters.
    let probes: Vec<&'static str> = PROBES
        .iter()
        .copied()
        .filter(|p| !p.starts_with("/deep") || *p == "/deep?depth=10&frame=256")
        .collect();
    let probe = move || measure(&state, &probes);
    let rows = fiber_pool::carrier::go(probe).join().unwrap().unwrap();
    assert_eq!(rows.len(), 8);
    for row in &rows {
        assert!(row.peak > 256, "{}: nothing measured", row.target);
        assert!(
            row.headroom(DEFAULT_STACK_SIZE) >= HEADROOM,
            "{} uses {} bytes: under {HEADROOM}x headroom at the default {} bytes. \
             Make it shallower or raise DEFAULT_STACK_SIZE (and STACK_SIZES.md).",
            row.target,
            row.peak,
            DEFAULT_STACK_SIZE
        );
        // A stack smaller than the peak cannot serve the route; the smallest that does
        // is set by the peak or by a reservation: before a MySQL checkout or a lock the
        // route demands that much stack left *unused* (reserve_stack), at a depth no
        // deeper than its peak. may I/O demands none: it runs on the carrier's stack.
        // Release: /widgets peaks at 3.0 KiB and needs 8 KiB, for its checkout's 4 KiB
        // (it needed 16 KiB while may ran on the fiber). The search steps by STEP,
        // which the bound adds once.
        let smallest = row.smallest.expect("some stack serves it");
        assert!(
            smallest >= row.peak && smallest < row.peak + LARGEST_RESERVATION + STEP,
            "{row:?}: the smallest stack is off the peak by more than a reservation"
        );
    }
}

/// A stack too small for /widgets but big enough for /healthz: 4 KiB in a release
/// build (/widgets needs 8 KiB, its MySQL checkout reserving 4 KiB; /healthz 0.4 KiB
/// plus the allocator's 2 KiB margin); 8 KiB in a debug build, where every frame is
/// bigger (/widgets 20 KiB, /healthz 3.5 KiB plus 2 KiB).
const SMALL_STACK: usize = if cfg!(debug_assertions) { 8192 } else { 4096 };

#[test]
fn a_small_stack_overflows_on_widgets_with_a_500_that_says_what_to_do() {
    let app = serve(|c| c.web.stack_size = SMALL_STACK);
    let r = get(app.addr(), "/widgets?sleep=0");
    assert_eq!(r.status, 500, "{}", r.body);
    // The client reads what failed; the stack size and the flag to raise it are the
    // operator's (the 5xx line: tests/logs.rs).
    assert!(
        r.body
            .contains("fiber stack overflow in route widgets: the request could not be handled"),
        "{}",
        r.body
    );
    assert!(
        !r.body.contains("--stack-size") && !r.body.contains("-byte"),
        "{}",
        r.body
    );
    assert_eq!(get(app.addr(), "/healthz").status, 200);
    assert_eq!(get(app.addr(), "/hello").body, "Hello, World!");
    // Read in-process: /stats itself needs more than this in a debug build.
    let fibers = app.state.fibers.stats();
    assert!(fibers.overflows >= 1, "{fibers:?}");
    assert!(fibers.per_label["widgets"].overflows >= 1, "{fibers:?}");
    let db = app.state.db.stats();
    assert_eq!(db.in_use, 0, "the overflowed checkout came back: {db:?}");
}

#[test]
fn deep_fits_in_64kib_but_not_in_16kib() {
    let target = "/deep?depth=100&frame=256";
    let roomy = serve(|c| c.web.stack_size = 64 * 1024);
    let r = get(roomy.addr(), target);
    assert_eq!(
        (r.status, r.body.starts_with("depth 100 frame 256")),
        (200, true),
        "{}",
        r.body
    );
    drop(roomy);
    let small = serve(|c| c.web.stack_size = 16 * 1024);
    let r = get(small.addr(), target);
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains("fiber stack overflow in route deep"),
        "{}",
        r.body
    );
    assert_eq!(get(small.addr(), "/healthz").status, 200);
}

#[test]
fn deep_rejects_values_out_of_bounds() {
    let app = serve(|_| {});
    for q in ["depth=-1", "depth=100001", "frame=65537", "depth=x"] {
        let r = get(app.addr(), &format!("/deep?{q}"));
        assert_eq!(r.status, 400, "{q}");
        assert!(r.body.contains("whole number from 0 to"), "{q}: {}", r.body);
    }
}

#[test]
fn two_hundred_overflows_under_load_lose_no_normal_request() {
    let app = serve(|c| {
        c.web.fibers = 20;
        c.db_pool = 10;
    });
    let addr = app.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let normal: Vec<_> = (0..4)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut served = 0;
                while !stop.load(Ordering::Relaxed) {
                    let path = if i % 2 == 0 {
                        "/widgets?sleep=0"
                    } else {
                        "/hello"
                    };
                    let r = get(addr, path);
                    assert_eq!(r.status, 200, "a normal request failed: {}", r.body);
                    served += 1;
                }
                served
            })
        })
        .collect();
    let mut inside = 0;
    for _ in 0..200 {
        let r = get(addr, "/deep?depth=400&frame=1024");
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(r.body.contains("fiber stack overflow"), "{}", r.body);
        inside += usize::from(r.body.contains("outside a safe point"));
    }
    stop.store(true, Ordering::Relaxed);
    let served: usize = normal.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(served >= 20, "normal traffic ran alongside: {served}");
    let v: serde_json::Value = serde_json::from_str(&get(addr, "/stats").body).unwrap();
    assert_eq!(v["fibers"]["routes"]["deep"]["overflows"], 200);
    // Each 500 said where its overflow struck, as /stats counts them.
    assert_eq!(v["fibers"]["routes"]["deep"]["unsafe_overflows"], inside);
    assert_eq!(v["fibers"]["unsafe_overflows"], inside);
    assert_eq!(
        v["fibers"]["busy"], 0,
        "no request fiber is held (/stats runs on a monitoring fiber): {}",
        v["fibers"]
    );
    assert_eq!(v["db"]["in_use"], 0);
}

#[test]
fn an_overflow_at_any_point_of_any_route_leaves_no_lock_held() {
    const STACK: usize = 32 * 1024;
    let app = serve(|c| c.db_pool = 4);
    let (progress, current) = abort_when_stuck();
    // Over HTTP first, so that the app's pool has per-route stats: /stats then copies
    // a real table under its lock (an empty one allocates nothing).
    for target in SWEPT {
        get(app.addr(), target);
    }
    let mut overflows = 0;
    for target in SWEPT {
        let pool = one_fiber(STACK);
        // Once a route fits, it fits with more stack too: stop after a few in a row
        // (each fitting /widgets/http waits for a one-second /widgets).
        let mut fits_in_a_row = 0;
        for left in (1024..24 * 1024).step_by(64) {
            if fits_in_a_row == 4 {
                break;
            }
            *current.lock().unwrap() = format!("{target} with {left} bytes of stack left");
            let overflowed = run_with_stack_left(&app, &pool, target, left).is_some();
            overflows += usize::from(overflowed);
            fits_in_a_row = if overflowed { 0 } else { fits_in_a_row + 1 };
            progress.fetch_add(1, Ordering::SeqCst);
        }
        assert_eq!(get(app.addr(), "/healthz").status, 200, "after {target}");
    }
    assert!(
        overflows > 500,
        "the sweep provoked overflows at many points: {overflows}"
    );
    let db = app.state.db.stats();
    assert_eq!(db.in_use, 0, "every overflowed checkout came back: {db:?}");
}
