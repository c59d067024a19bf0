//! Figures for the README: the cost of `pool.run` for an empty job against
//! a bare may coroutine spawn + join, the cost of `FiberSafeAlloc` against
//! the plain system allocator (on and off fibers, with 1 and 16 pools
//! alive), and the address space, resident memory and mappings of 10,000 idle
//! fibers with 64 KiB stacks.
//!
//! Run with: `cargo run --release -p fiber_pool --example pool_bench`
//! (`-- alloc` for the allocator figures only, `-- run` for `pool.run` only,
//! `-- memory` for the 10,000 fibers only, `-- quarantine` for what stacks
//! quarantined after overflows keep, `-- context` for the cost of running a job under a
//! context, with and without a deadline, `-- scope` for the cost of a fan-out; with
//! `ONE_WORKER=1` in the environment, may runs one worker instead of two).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::alloc::{GlobalAlloc, Layout, System};
use std::time::{Duration, Instant};

use fiber_pool::{reserve_stack, FiberPool, FiberSafeAlloc, PoolConfig};

const OPS: u32 = 20_000;
const RUNS: usize = 5;

/// Median over `RUNS` of the time per operation of `OPS` calls of `op`, all
/// made from one may coroutine.
fn per_op(op: impl Fn() + Send + Sync + Clone + 'static) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let op = op.clone();
            may::go!(move || {
                let start = Instant::now();
                for _ in 0..OPS {
                    op();
                }
                start.elapsed() / OPS
            })
            .join()
            .unwrap()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn rss_kib() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs is mounted");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

/// Address space of this process, in KiB.
fn vm_kib() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs is mounted");
    let pages: usize = statm.split_whitespace().next().unwrap().parse().unwrap();
    pages * 4
}

/// Mappings (VMAs) of this process.
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("procfs is mounted")
        .lines()
        .count()
}

/// Allocation pairs per timed batch.
const PAIRS: usize = 50_000;
/// Alternating batches per allocator figure (the machine is shared: many
/// short batches and their median).
const ALLOC_RUNS: usize = 21;

/// `PAIRS` alloc + dealloc pairs through `a`, sizes 16..4 KiB (tcache and
/// small bins); returns pairs per second. Pointers go through `black_box` so
/// that LLVM keeps every call.
#[inline(never)]
fn alloc_pairs<A: GlobalAlloc>(a: &A) -> f64 {
    let start = Instant::now();
    for i in 0..PAIRS {
        let layout = Layout::from_size_align(16 + (i * 61) % 4000, 8).unwrap();
        // SAFETY: non-zero size; freed at once with the same layout.
        unsafe {
            let p = std::hint::black_box(a.alloc(layout));
            a.dealloc(p, layout);
        }
    }
    PAIRS as f64 / start.elapsed().as_secs_f64()
}

/// `PAIRS` calls of `reserve_stack(ALLOC_STACK_MARGIN)`; returns ns per call.
#[inline(never)]
fn reserve_ns() -> f64 {
    let start = Instant::now();
    for _ in 0..PAIRS {
        reserve_stack(std::hint::black_box(fiber_pool::ALLOC_STACK_MARGIN));
    }
    start.elapsed().as_nanos() as f64 / PAIRS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Allocation pairs/s through `System` and `FiberSafeAlloc`, off a fiber (a
/// may coroutine) and on one, and the cost of one `reserve_stack`: median of
/// `RUNS` batches, the two allocators alternated.
fn alloc_figures(pools_alive: usize) {
    let pools: Vec<FiberPool> = (0..pools_alive)
        .map(|i| {
            FiberPool::new(PoolConfig {
                size: 4 + i,
                stack_size: 64 * 1024,
                measure_every: 0,
                ..PoolConfig::default()
            })
            .unwrap()
        })
        .collect();
    // The pool used is the oldest: its node is last in the registry list,
    // the worst case of the walk.
    let pool = pools[0].clone();
    let (mut sys_off, mut safe_off, mut sys_on, mut safe_on) = (vec![], vec![], vec![], vec![]);
    let (mut res_off, mut res_on) = (vec![], vec![]);
    for _ in 0..ALLOC_RUNS {
        let p = pool.clone();
        let (a, b, c, d, e, f) = may::go!(move || {
            let a = alloc_pairs(&System);
            let b = alloc_pairs(&FiberSafeAlloc);
            let e = reserve_ns();
            let (c, d, f) = p
                .run("alloc", || {
                    (
                        alloc_pairs(&System),
                        alloc_pairs(&FiberSafeAlloc),
                        reserve_ns(),
                    )
                })
                .unwrap();
            (a, b, c, d, e, f)
        })
        .join()
        .unwrap();
        sys_off.push(a);
        safe_off.push(b);
        sys_on.push(c);
        safe_on.push(d);
        res_off.push(e);
        res_on.push(f);
    }
    let m = |v: Vec<f64>| median(v) / 1e6;
    let (so, fo, sn, fn_) = (m(sys_off), m(safe_off), m(sys_on), m(safe_on));
    println!(
        "{pools_alive:>2} pool(s) alive | off a fiber: System {so:6.1} M pairs/s, FiberSafeAlloc {fo:6.1} M ({:+.1}%) | on a fiber: System {sn:6.1} M, FiberSafeAlloc {fn_:6.1} M ({:+.1}%) | reserve_stack {:.2} ns off, {:.2} ns on",
        (fo / so - 1.0) * 100.0,
        (fn_ / sn - 1.0) * 100.0,
        median(res_off),
        median(res_on),
    );
}

fn main() {
    let workers = if std::env::var_os("ONE_WORKER").is_some() {
        1
    } else {
        2
    };
    may::config().set_workers(workers);
    let what = std::env::args().nth(1).unwrap_or_default();
    if what.is_empty() || what == "alloc" {
        println!("alloc + dealloc pairs (16 B..4 KiB), median of {ALLOC_RUNS} x {PAIRS}:");
        for pools in [1, 16] {
            alloc_figures(pools);
        }
        if what == "alloc" {
            return;
        }
    }
    if what == "run" {
        run_costs(&[0, 16]);
        return;
    }
    if what == "context" {
        return context_costs();
    }
    if what == "scope" {
        return scope_costs();
    }
    if what == "memory" {
        return memory();
    }
    if what == "quarantine" {
        // may's threads and the handlers first, so that they are not counted.
        drop(
            FiberPool::new(PoolConfig {
                size: 1,
                ..PoolConfig::default()
            })
            .unwrap(),
        );
        for stack_kib in [64, 128] {
            quarantine(stack_kib);
        }
        return;
    }
    let spawn = per_op(|| may::go!(|| ()).join().unwrap());
    println!("may::go! spawn + join, empty:            {spawn:>9.2?} (median of {RUNS} x {OPS}, from a coroutine)");
    let start = Instant::now();
    for _ in 0..OPS {
        may::go!(|| ()).join().unwrap();
    }
    println!(
        "may::go! spawn + join, empty:            {:>9.2?} (from the main thread)",
        start.elapsed() / OPS
    );
    run_costs(&[0, 1, 16]);
    memory();
}

/// Address space, resident memory and mappings of 10,000 fibers, before and after
/// each ran one small job.
fn memory() {
    // The same 10,000 sleeping coroutines without a pool first, so that may's
    // own memory (its cache of finished coroutines, timers) is in the baseline.
    let bare: Vec<_> = (0..10_000)
        .map(|_| may::go!(|| may::coroutine::sleep(Duration::from_millis(200))))
        .collect();
    for h in bare {
        h.join().unwrap();
    }
    let (before, vm_before, maps_before) = (rss_kib(), vm_kib(), mappings());
    let pool = FiberPool::new(PoolConfig {
        size: 10_000,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let (created, vm_created, maps_created) = (rss_kib(), vm_kib(), mappings());
    // Use every fiber once, all at the same time (each job sleeps), so that
    // each stack has been touched by a small job.
    let handles: Vec<_> = (0..10_000)
        .map(|_| {
            let p = pool.clone();
            may::go!(move || p
                .run("touch", || may::coroutine::sleep(Duration::from_millis(
                    200
                )))
                .unwrap())
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(pool.stats().completed, 10_000);
    let used = rss_kib();
    println!(
        "10,000 fibers x 64 KiB, guards of {} KiB: address space +{} MiB, mappings +{}; RSS +{} KiB after creation, +{} KiB after each ran one small job (peak stack {} B)",
        fiber_pool::config::GUARD_SIZE / 1024,
        vm_created.saturating_sub(vm_before) / 1024,
        maps_created.saturating_sub(maps_before),
        created.saturating_sub(before),
        used.saturating_sub(before),
        pool.stats().peak_stack_bytes,
    );
}

/// Recurses with 1 KiB frames until the stack runs out.
#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let mut buf = [0u8; 1024];
    buf[depth as usize % 1024] = depth as u8;
    let buf = std::hint::black_box(buf);
    recurse(depth + 1) + u64::from(buf[0])
}

/// Address space, resident memory and mappings that `PoolConfig::spare_stacks`
/// (the default) overflows leave behind in quarantine, with `stack_kib` stacks.
fn quarantine(stack_kib: usize) {
    let spares = PoolConfig::default().spare_stacks;
    let (vm_before, rss_before, maps_before) = (vm_kib(), rss_kib(), mappings());
    let pool = FiberPool::new(PoolConfig {
        size: 4,
        stack_size: stack_kib * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let (vm_created, rss_created, maps_created) = (vm_kib(), rss_kib(), mappings());
    let p = pool.clone();
    may::go!(move || {
        for _ in 0..spares {
            assert!(p.run("deep", || recurse(0)).is_err());
        }
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!(
        (stats.overflows, stats.spare_stacks, stats.retired),
        (spares as u64, 0, 0)
    );
    let (rss_after, maps_after) = (rss_kib(), mappings());
    println!(
        "4 fibers x {stack_kib} KiB, {spares} spare stacks: address space +{} MiB, mappings +{}, RSS +{} KiB at creation; after {spares} overflows RSS +{} KiB ({} KiB per quarantined stack), mappings +{}",
        vm_created.saturating_sub(vm_before) / 1024,
        maps_created.saturating_sub(maps_before),
        rss_created.saturating_sub(rss_before),
        rss_after.saturating_sub(rss_created),
        rss_after.saturating_sub(rss_created) / spares,
        maps_after.saturating_sub(maps_created),
    );
}

/// The cost of `pool.run` for an empty job, at each sampling rate of the stack mark.
fn run_costs(rates: &[u32]) {
    for &every in rates {
        let pool = FiberPool::new(PoolConfig {
            size: 8,
            measure_every: every,
            ..PoolConfig::default()
        })
        .unwrap();
        let run = per_op(move || pool.run("empty", || ()).unwrap());
        println!("pool.run, empty job, measure_every = {every:<2}: {run:>9.2?}");
    }
}

/// What a context costs per run: `pool.run` against `run_in` with a context made per
/// run (as a server makes one per request), without and with a deadline, with the
/// job asking for it (`current()`), and with an `on_cancel` hook on the deadline
/// (which arms the deadline thread). The variants alternate, batch by batch, for
/// `CONTEXT_ROUNDS` batches of `OPS` runs (the machine is shared: a drift hits every
/// variant alike), and each figure is the median of its batches.
fn context_costs() {
    use fiber_pool::Context;
    const CONTEXT_ROUNDS: usize = 21;
    let pool = FiberPool::new(PoolConfig {
        size: 8,
        measure_every: 0,
        ..PoolConfig::default()
    })
    .unwrap();
    let deadline = Duration::from_secs(30);
    type Variant = (&'static str, fn(&FiberPool, Duration));
    let variants: [Variant; 5] = [
        ("run", |p, _| p.run("empty", || ()).unwrap()),
        ("run_in(&Context::new())", |p, _| {
            p.run_in("empty", &Context::new(), || ()).unwrap()
        }),
        ("  + with_timeout(30 s)", |p, d| {
            p.run_in("empty", &Context::new().with_timeout(d), || ())
                .unwrap()
        }),
        ("  + job calls current().is_cancelled()", |p, d| {
            let ctx = Context::new().with_timeout(d);
            p.run_in("empty", &ctx, || {
                fiber_pool::current().unwrap().is_cancelled()
            })
            .unwrap();
        }),
        ("  + on_cancel hook (deadline thread armed)", |p, d| {
            let ctx = Context::new().with_timeout(d);
            let _hook = ctx.on_cancel(|_| ());
            p.run_in("empty", &ctx, || ()).unwrap()
        }),
    ];
    let p = pool.clone();
    let times = may::go!(move || {
        let mut times = vec![Vec::new(); variants.len()];
        for _ in 0..CONTEXT_ROUNDS {
            for (i, (_, run)) in variants.iter().enumerate() {
                let start = Instant::now();
                for _ in 0..OPS {
                    run(&p, deadline);
                }
                times[i].push(start.elapsed() / OPS);
            }
        }
        times
    })
    .join()
    .unwrap();
    println!("per run, median of {CONTEXT_ROUNDS} alternated batches of {OPS}:");
    for ((name, _), mut t) in variants.iter().zip(times) {
        t.sort();
        println!("  {name:<44} {:>9.2?}", t[CONTEXT_ROUNDS / 2]);
    }
}

/// What a fan-out costs: a job that opens a scope and joins 1 or 3 empty children
/// (each a job of its own, on its own carrier coroutine), against the empty job.
fn scope_costs() {
    let pool = FiberPool::new(PoolConfig {
        size: 8,
        measure_every: 0,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let plain = per_op(move || p.run("empty", || ()).unwrap());
    for children in [1usize, 3] {
        let p = pool.clone();
        let fan = per_op(move || {
            p.run("parent", move || {
                fiber_pool::scope(|s| {
                    let kids: Vec<_> = (0..children).map(|_| s.spawn(|| ())).collect();
                    kids.into_iter().for_each(|k| k.join().unwrap());
                })
            })
            .unwrap()
        });
        println!(
            "job with a scope of {children} empty children: {fan:>9.2?} (the empty job: {plain:.2?})"
        );
    }
}
