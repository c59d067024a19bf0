//! Fiber stacks: the built-in routes fit the default with 4x headroom, a stack too
//! small for /widgets overflows into a 500 and the server goes on, overflows under load
//! lose no normal request, and /deep behaves at each size. (STACK_SIZES.md has the
//! figures these bounds come from.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{get, serve};
use fiberstack::config::DEFAULT_STACK_SIZE;
use fiberstack::stack_use::{measure, PROBES, STEP};

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
    let size = format!("{SMALL_STACK}-byte stack");
    for says in [
        "fiber stack overflow",
        "route widgets",
        &size,
        "--stack-size",
    ] {
        assert!(r.body.contains(says), "{says}: {}", r.body);
    }
    // "The server is fine" only when the overflow struck at a safe point.
    let unsafe_overflows = app.state.fibers.stats().unsafe_overflows;
    assert_eq!(
        r.body.contains("The server is fine and kept serving"),
        unsafe_overflows == 0,
        "{unsafe_overflows} overflows outside a safe point: {}",
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
        r.body.contains("route deep") && r.body.contains("16384-byte"),
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
        v["fibers"]["busy"], 1,
        "only /stats itself is running: {}",
        v["fibers"]
    );
    assert_eq!(v["db"]["in_use"], 0);
}

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Connections the server has open besides `admin`, after giving it up to 5 s to notice
/// closed sockets: MariaDB sees a close asynchronously.
fn server_side_connections(admin: &mut fiber_mysql::Conn, at_most: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        // Everyone but this admin session: the pool's, and any half-open handshake
        // ("unauthenticated user").
        let n: usize = admin
            .query(
                "select count(*) from information_schema.processlist where id <> connection_id()",
            )
            .unwrap()
            .scalar::<u64>()
            .unwrap()
            .unwrap() as usize;
        if n <= at_most || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_connection_held_by_an_overflowing_fiber_is_ended_on_the_server_and_its_slot_freed() {
    use fiber_pool::{FiberPool, PoolConfig, RunError};
    // A private server: the count of its connections is ours alone.
    let app = serve(|c| {
        c.database_url = None;
        c.db_pool = 2;
        c.db_wait_timeout = std::time::Duration::from_secs(2);
    });
    let mariadb = app.mariadb.as_ref().expect("a private MariaDB");
    let mut admin = fiber_mysql::Conn::connect(&mariadb.admin_opts()).unwrap();
    let fibers = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 32 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let before = open_fds();
    for i in 0..30 {
        let db = app.state.db.clone();
        let fibers = fibers.clone();
        let holds_db = move || {
            fibers.run("holds_db", move || {
                let mut conn = db
                    .checkout()
                    .unwrap_or_else(|e| panic!("checkout {i}: {e}"));
                conn.query("select 1")
                    .unwrap_or_else(|e| panic!("query {i}: {e}"));
                // Deeper than 32 KiB while the checkout is held.
                fiberstack::app::deep::level(400, 1024)
            })
        };
        let outcome = fiber_pool::carrier::go(holds_db).join().unwrap();
        assert!(
            matches!(outcome, Err(RunError::StackOverflow { .. })),
            "{outcome:?}"
        );
        let open = server_side_connections(&mut admin, 2);
        assert!(
            open <= 2,
            "iteration {i}: the server still has {open} connections of a pool of 2"
        );
    }
    let s = app.state.db.stats();
    assert_eq!((s.in_use, s.abandoned), (0, 30), "{s:?}");
    // Our end of each abandoned socket stays open, leaked with its checkout (the
    // checkout may be mid-command, or in use by a thread the job started: see
    // fiber_mysql's pool.rs, "Abandoned checkouts"): its two fds per overflow, no
    // more. The server's end is what the pool's shutdown ended (above), so the pool
    // of 2 was never exhausted.
    assert!(
        open_fds() <= before + 2 * 30 + 2,
        "fds {before} -> {}",
        open_fds()
    );
    assert_eq!(get(app.addr(), "/widgets?sleep=0").status, 200);
}

/// The built-in routes the overflow sweeps drive (every route that runs on a fiber
/// and does more than format a constant; `/healthz` and `/metrics` run on the
/// connection's coroutine, not on a fiber).
const SWEPT: [&str; 6] = [
    "/stats",
    "/widgets?sleep=0",
    "/widgets/http",
    "/twitter",
    "/upstream/search.json?q=rails",
    "/readyz",
];

/// A lock left held hangs the next locker: fail loudly instead of hanging CI. The
/// test bumps the counter at each step and says in the string where it is; 10 s
/// without a bump aborts the process, naming that place.
fn abort_when_stuck() -> (
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::Mutex<String>>,
) {
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let current = Arc::new(std::sync::Mutex::new(String::new()));
    {
        let (progress, current) = (Arc::clone(&progress), Arc::clone(&current));
        std::thread::spawn(move || {
            let mut last = usize::MAX;
            loop {
                std::thread::sleep(Duration::from_secs(10));
                let now = progress.load(Ordering::SeqCst);
                if now == last {
                    // Say where, from a thread of its own (in case printing blocks too),
                    // then abort: exit() runs handlers that a wedged runtime can block.
                    let at = current.lock().map(|c| c.clone()).unwrap_or_default();
                    std::thread::spawn(move || {
                        eprintln!("no progress for 10 s at {at}: a lock left held");
                    });
                    std::thread::sleep(Duration::from_secs(1));
                    std::process::abort();
                }
                last = now;
            }
        });
    }
    (progress, current)
}

/// Run `target`'s handler on `pool` with at most `left` bytes of its stack left, then
/// take every lock a route takes (this hangs if an overflow left one held); whether it
/// overflowed, and if so whether at a safe point.
fn run_with_stack_left(
    app: &fiberstack::start::Running,
    pool: &fiber_pool::FiberPool,
    target: &str,
    left: usize,
) -> Option<Overflow> {
    let (pool, state, target) = (pool.clone(), Arc::clone(&app.state), target.to_string());
    let overflow = move || overflow_on_carrier(&state, &pool, &target, left);
    fiber_pool::carrier::go(overflow).join().unwrap()
}

/// An overflow provoked by [`overflow_on_carrier`]: where it struck.
struct Overflow {
    /// At a safe point (`reserve_stack`), holding nothing.
    at_safe_point: bool,
    /// The address of the instruction that touched the guard page.
    fault_pc: usize,
}

/// [`run_with_stack_left`]'s work, on the carrier (the may coroutine) it is called on.
fn overflow_on_carrier(
    state: &Arc<fiberstack::app::AppState>,
    pool: &fiber_pool::FiberPool,
    target: &str,
    left: usize,
) -> Option<Overflow> {
    let mut req = fiber_web::Request::get(target);
    let app = fiberstack::app::app(Arc::clone(state), 1, Duration::from_secs(10));
    let Some((label, handler)) = app.handler_for(&mut req) else {
        panic!("no route for {target}")
    };
    let job_state = Arc::clone(state);
    let outcome = pool.run(label, move || {
        fiber_pool::testing::with_stack_left(left, &mut || handler.call(&job_state, &req).status)
    });
    state.fibers.stats();
    state.db.stats();
    state.http.stats();
    match outcome {
        Ok(_) => None,
        Err(fiber_pool::RunError::StackOverflow {
            at_safe_point,
            fault_pc,
            ..
        }) => Some(Overflow {
            at_safe_point,
            fault_pc,
        }),
        Err(e) => panic!("{target} with {left} bytes left: {e}"),
    }
}

/// A single-fiber pool with `stack_size` bytes of stack, and a spare stack for each
/// of the overflows a sweep provokes on it (each overflowed stack is quarantined).
fn one_fiber(stack_size: usize) -> fiber_pool::FiberPool {
    fiber_pool::FiberPool::new(fiber_pool::PoolConfig {
        size: 1,
        stack_size,
        spare_stacks: 2048,
        ..fiber_pool::PoolConfig::default()
    })
    .unwrap()
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

/// This process's private (anonymous) resident memory, in bytes: the heap, stacks
/// and mappings it made. File-backed pages (the binary's code, paged in as new code
/// paths run) are shared and are not counted.
fn private_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("RssAnon in /proc/self/status");
    kib * 1024
}

/// Overflows the CI run provokes; FIBERSTACK_SWEEP_OVERFLOWS=1000 is the run.
const SWEEP_OVERFLOWS: usize = 150;
/// Overflows before the baseline is taken: the first ones fault in the pages of the
/// overflow path's own state (the allocator's per-thread arenas, alternate signal
/// stacks, the stats tables' per-route entries).
const WARM_UP_OVERFLOWS: usize = 20;
/// Growth of private memory allowed over the sweep beyond twice the heap the abandoned
/// frames held (after the allocator gave its free memory back; a leaked chunk also
/// pins the rest of its page): stacks, mappings. Measured: 1000 overflows grew the
/// heap by 1.9 MiB and private memory by 2.9 MiB.
const RSS_SLACK: usize = 1 << 20;
/// Heap an overflow of a built-in route may leave behind on average: the values its
/// abandoned frames owned (a response body being built, a parsed row), which are not
/// dropped by design. Big buffers live in a `Lent` or are built on the carrier, so
/// this is a few KiB (see the sweep's output).
const HEAP_PER_OVERFLOW: usize = 8 * 1024;
/// The largest stack the sweep's pools have: an overflowed stack is quarantined (kept
/// mapped, never reused), so each overflow may keep up to this much touched memory
/// until the process is replaced (`PoolConfig::spare_stacks`).
const SWEEP_MAX_STACK: usize = 32 * 1024;

/// What [`sweep`] did.
#[derive(Default)]
struct Swept {
    runs: usize,
    overflows: usize,
    unsafe_overflows: usize,
    /// Every overflow's faulting instruction, and the run it was in.
    faults: Vec<(usize, String)>,
}

/// Runs routes with random stack sizes (8 to 32 KiB in 64-byte steps, a pool per size
/// as `--stack-size` would make) and random depths (a fixed seed) until `wanted` of
/// them overflowed. All on one carrier: a carrier per run would cycle through may's
/// cache of 1000 coroutine stacks and touch each of them (about 20 MiB in a debug
/// build), which is may's memory, not the server's.
fn sweep(
    state: Arc<fiberstack::app::AppState>,
    wanted: usize,
    seed: u64,
    progress: Arc<std::sync::atomic::AtomicUsize>,
    current: Arc<std::sync::Mutex<String>>,
) -> Swept {
    let mut rng = seed;
    let mut next = move |below: usize| {
        // xorshift64*: the same sequence every run.
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        (rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as usize % below
    };
    let sweep = move || {
        let mut swept = Swept::default();
        while swept.overflows < wanted {
            let stack = 8 * 1024 + 64 * next((32 - 8) * 1024 / 64 + 1);
            let target = SWEPT[next(SWEPT.len())];
            let left = 512 + next(stack / 2);
            let run = format!("{target} on a {stack}-byte stack with {left} bytes left");
            *current.lock().unwrap() = run.clone();
            if let Some(o) = overflow_on_carrier(&state, &one_fiber(stack), target, left) {
                swept.overflows += 1;
                swept.unsafe_overflows += usize::from(!o.at_safe_point);
                swept.faults.push((o.fault_pc, run));
            }
            swept.runs += 1;
            progress.fetch_add(1, Ordering::SeqCst);
        }
        swept
    };
    fiber_pool::carrier::go(sweep).join().unwrap()
}

/// Resolves the faulting instructions to their functions; asserts that none is in may,
/// generator or corosensei (their code runs on the carrier's stack, never a fiber's)
/// and that every one resolved (else the check proves nothing). Returns the functions
/// overflows struck in, most frequent first.
fn where_overflows_struck(faults: &[(usize, String)]) -> Vec<(String, usize)> {
    let pcs: Vec<usize> = faults.iter().map(|(pc, _)| *pc).collect();
    let located = fiber_pool::testing::locate(&pcs).expect("addr2line (binutils)");
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for at in &located {
        *counts.entry(at.innermost().to_string()).or_default() += 1;
    }
    let unresolved: Vec<_> = located.iter().filter(|at| at.innermost() == "??").collect();
    assert!(unresolved.is_empty(), "unresolved faults: {unresolved:x?}");
    let in_runtime: Vec<_> = located
        .iter()
        .zip(faults)
        .filter(|(at, _)| {
            let f = at.innermost().trim_start_matches('<');
            ["may::", "may_queue::", "generator::", "corosensei::"]
                .iter()
                .any(|runtime| f.starts_with(runtime))
        })
        .map(|(at, (_, run))| (&at.functions, run))
        .collect();
    assert!(
        in_runtime.is_empty(),
        "overflows struck inside may, generator or corosensei: {in_runtime:#x?}"
    );
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts
}

/// The overflow sweep: overflows at random depths (a fixed seed) across the
/// built-in routes, on stacks from 8 KiB to 32 KiB in 64-byte steps, while normal
/// traffic runs over HTTP: no normal request lost, no hang (see [`abort_when_stuck`]),
/// fds, MySQL connections and private memory back to their baseline, and no faulting
/// instruction inside may, generator or corosensei (each resolved to its function).
/// `FIBERSTACK_SWEEP_OVERFLOWS=1000 cargo nextest run --test stack -E 'test(sweep)'
/// --no-capture` is the full run; it prints where the overflows struck.
#[test]
fn overflow_sweep_over_stack_sizes_loses_no_request_and_leaks_nothing() {
    const SEED: u64 = 0x5eed_0ff1_be5e_ed00;
    let wanted = std::env::var("FIBERSTACK_SWEEP_OVERFLOWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SWEEP_OVERFLOWS);
    // A private MariaDB: the count of its connections is ours alone.
    let app = serve(|c| {
        c.database_url = None;
        c.db_pool = 4;
    });
    let addr = app.addr();
    let mariadb = app.mariadb.as_ref().expect("a private MariaDB");
    let mut admin = fiber_mysql::Conn::connect(&mariadb.admin_opts()).unwrap();
    let (progress, current) = abort_when_stuck();
    for target in SWEPT {
        get(addr, target);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let normal: Vec<_> = ["/widgets?sleep=0", "/hello"]
        .into_iter()
        .map(|path| {
            let (stop, answered) = (Arc::clone(&stop), Arc::clone(&answered));
            std::thread::spawn(move || {
                let (mut served, mut failed) = (0, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let r = get(addr, path);
                    if r.status == 200 {
                        served += 1;
                    } else {
                        failed.push(format!("{path} -> {}: {}", r.status, r.body));
                    }
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                (served, failed)
            })
        })
        .collect();

    // The baseline, once the overflow path has run and the normal traffic (a connection
    // per request) has cycled through may's whole cache of coroutine stacks.
    let state = || Arc::clone(&app.state);
    let (p, c) = (Arc::clone(&progress), Arc::clone(&current));
    sweep(state(), WARM_UP_OVERFLOWS, !SEED, p, c);
    common::wait_until(
        "normal traffic through every cached coroutine stack",
        Duration::from_secs(60),
        || answered.load(Ordering::Relaxed) > 8 * fiber_web::rig::COROUTINE_CACHE,
    );
    fiber_pool::testing::trim_heap();
    let (fds0, rss0, heap0) = (
        open_fds(),
        private_rss(),
        fiber_pool::testing::heap_in_use(),
    );
    let conns0 = server_side_connections(&mut admin, usize::MAX);
    let (abandoned0, overflows0) = (
        app.state.db.stats().abandoned,
        fiber_pool::aftermath().quarantined,
    );

    let swept = sweep(state(), wanted, SEED, progress, current);
    stop.store(true, Ordering::Relaxed);
    let (mut served, mut failed) = (0, Vec::new());
    for t in normal {
        let (s, f) = t.join().unwrap();
        served += s;
        failed.extend(f);
    }
    assert!(failed.is_empty(), "normal requests failed: {failed:#?}");
    assert!(served >= 20, "normal traffic ran alongside: {served}");

    common::wait_until(
        "every overflowed checkout back in the pool",
        Duration::from_secs(5),
        || app.state.db.stats().in_use == 0,
    );
    let client = app.state.http.stats();
    assert_eq!(client.in_flight, 0, "HTTP client: {client:?}");
    // Every server-side connection is one the pool knows of: idle, in use, or kept for
    // KILL QUERY (the pool may hold more idle ones than at the baseline).
    let db = app.state.db.stats();
    let known = db.idle + db.in_use + db.kill_connections;
    let conns = server_side_connections(&mut admin, known);
    assert!(
        conns <= known,
        "MySQL connections {conns0} -> {conns}, the pool knows of {known}; fds {fds0} -> {}; \
         db {:?}; processlist {:?}",
        open_fds(),
        app.state.db.stats(),
        admin
            .query(
                "select concat_ws(' ', id, user, host, command, time, state) \
                 from information_schema.processlist"
            )
            .map(|r| r
                .rows
                .iter()
                .map(|row| row.get::<String, usize>(0).unwrap_or_default())
                .collect::<Vec<_>>())
    );
    // An overflow leaks what it held in a `Lent`, our end of its sockets included (the
    // server's end was shut down: above): two fds for a MySQL checkout (its socket and
    // the second descriptor that ended its session), one for an HTTP client
    // connection (at most one per overflow).
    let leaked = 2 * (app.state.db.stats().abandoned - abandoned0) as usize
        + (fiber_pool::aftermath().quarantined - overflows0) as usize;
    let fds_ok = common::poll(Duration::from_secs(5), || open_fds() <= fds0 + 2 + leaked);
    assert!(
        fds_ok,
        "fds {fds0} -> {}; db {:?}; http client {:?}",
        open_fds(),
        app.state.db.stats(),
        app.state.http.stats()
    );
    let heap1 = fiber_pool::testing::heap_in_use();
    fiber_pool::testing::trim_heap();
    let rss1 = private_rss();
    let leaked = heap1.saturating_sub(heap0);
    assert!(
        leaked <= HEAP_PER_OVERFLOW * swept.overflows,
        "heap in use {} KiB -> {} KiB over {} overflows",
        heap0 / 1024,
        heap1 / 1024,
        swept.overflows
    );
    let quarantined = SWEEP_MAX_STACK * swept.overflows;
    assert!(
        rss1 <= rss0 + 2 * leaked + quarantined + RSS_SLACK,
        "private memory {} KiB -> {} KiB over {} overflows, of which heap {} KiB and at \
         most {} KiB of quarantined stacks",
        rss0 / 1024,
        rss1 / 1024,
        swept.overflows,
        leaked / 1024,
        quarantined / 1024
    );
    let struck = where_overflows_struck(&swept.faults);
    eprintln!(
        "sweep: {} overflows ({} outside a safe point) in {} runs, {served} normal requests \
         served, 0 failed; fds {fds0} -> {}, MySQL connections {conns0} -> {conns}, heap in \
         use {} -> {} KiB ({} bytes an overflow), private memory {} -> {} KiB; the \
         overflows struck in {} functions, none in may, generator or corosensei; most often:",
        swept.overflows,
        swept.unsafe_overflows,
        swept.runs,
        open_fds(),
        heap0 / 1024,
        heap1 / 1024,
        leaked / swept.overflows.max(1),
        rss0 / 1024,
        rss1 / 1024,
        struck.len()
    );
    for (function, count) in struck.iter().take(12) {
        eprintln!("  {count:5}  {function}");
    }
}
