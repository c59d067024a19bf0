//! The overflow sweep: overflows at random depths across the built-in routes and stack
//! sizes, under normal traffic, leave the process's fds, private memory and heap and
//! the server's connections at their baseline. A binary of its own: it measures the
//! process, which any test beside it would change (a server of its own, its
//! allocations, its overflows in `fiber_pool::aftermath`).

mod common;
mod overflows;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{get, serve};
use overflows::{
    abort_when_stuck, one_fiber, open_fds, overflow_on_carrier, server_side_connections, SWEPT,
};

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
/// `FIBERSTACK_SWEEP_OVERFLOWS=1000 cargo test --test overflow_sweep -- --nocapture`
/// is the full run; it prints where the overflows struck.
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
