//! With `FiberSafeAlloc` as the global allocator, jobs that allocate at
//! every level of a runaway recursion overflow 1000 times on two may workers,
//! interleaved with normal allocating jobs, and nothing hangs (a watchdog
//! aborts the process after 60 s, so a deadlock fails instead of hanging
//! CI), and memory does not keep growing. Also: a `Lent` made with just over
//! `LENT_STACK_MARGIN` left never overflows inside its ledger's lock.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fiber_pool::{
    lent::LENT_STACK_MARGIN, stack_remaining, FiberPool, FiberSafeAlloc, Lent, PoolConfig, RunError,
};

#[global_allocator]
static A: FiberSafeAlloc = FiberSafeAlloc;

/// Aborts the process if `done` is not set within `secs`.
fn watchdog(secs: u64) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        for _ in 0..secs * 10 {
            std::thread::sleep(Duration::from_millis(100));
            if d.load(Ordering::SeqCst) {
                return;
            }
        }
        eprintln!("watchdog: still running after {secs} s: a deadlock; aborting");
        std::process::abort();
    });
    done
}

fn rss_mib() -> usize {
    common::rss_pages() * 4 / 1024
}

#[test]
fn a_thousand_allocating_overflows_on_two_workers_neither_hang_nor_grow() {
    let done = watchdog(60);
    may::config().set_workers(2);
    const STACK: usize = 16 * 1024;
    let pool = FiberPool::new(PoolConfig {
        size: 6,
        stack_size: STACK,
        // Every overflowed stack is quarantined: one spare for each.
        spare_stacks: 1000,
        ..PoolConfig::default()
    })
    .unwrap();
    let expected = common::alloc_recurse(0, 5);
    // 4 carriers x 2 phases x 125 iterations, each one overflowing job and
    // one normal one: 2 x 500 overflows.
    let phase = |pool: &FiberPool| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let p = pool.clone();
                may::go!(move || {
                    let mut overflows = 0;
                    for i in 0..125 {
                        match p.run("runaway", move || common::alloc_recurse(i, usize::MAX)) {
                            Err(RunError::StackOverflow { .. }) => overflows += 1,
                            other => panic!("expected an overflow, got {other:?}"),
                        }
                        let ok = p.run("normal", || {
                            may::coroutine::yield_now(); // migrate between workers
                            common::alloc_recurse(0, 5)
                        });
                        assert_eq!(ok.unwrap(), expected);
                    }
                    overflows
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum::<usize>()
    };
    assert_eq!(phase(&pool), 1000 / 2);
    let after_first = rss_mib();
    assert_eq!(phase(&pool), 1000 / 2);
    let after_second = rss_mib();
    eprintln!("RSS after 500 overflows {after_first} MiB, after 1000 {after_second} MiB");
    let stats = pool.stats();
    assert_eq!((stats.overflows, stats.completed), (1000, 1000));
    assert_eq!(stats.per_label["runaway"].overflows, 1000);
    // What the abandoned frames held leaks (a few KiB per overflow), and each
    // overflowed stack stays resident in quarantine; the second 500 overflows
    // must not have added more than that.
    let quarantined_mib = 500 * STACK / (1024 * 1024);
    assert!(
        after_second <= after_first + quarantined_mib + 8,
        "RSS grew from {after_first} to {after_second} MiB over 500 overflows"
    );
    done.store(true, Ordering::SeqCst);
}

/// Recurses until at most `target` bytes are left, then makes 40 Lents
/// (the ledger's Vec grows 4 times with its lock held).
#[inline(never)]
fn lents_at(target: usize) -> usize {
    let pad = std::hint::black_box([1u8; 64]);
    if stack_remaining().unwrap() > target {
        let r = lents_at(target);
        std::hint::black_box(&pad); // live across the call: no tail call
        return r;
    }
    let mut lents = Vec::with_capacity(40);
    for i in 0..40 {
        lents.push(Lent::new(i, |_| {}));
    }
    let mut sum = 0;
    for l in &lents {
        sum += **l;
    }
    sum
}

/// Lents made with anything from `LENT_STACK_MARGIN` - 256 to + 2 KiB left:
/// each job completes, or overflows at `Lent::new`'s margin check, before
/// the ledger's lock; never inside it (the ledger would stay locked and the
/// carrier's hand-back, or the next Lent on that fiber, would deadlock: the
/// watchdog would fire).
#[test]
fn lents_made_near_the_margin_complete_or_overflow_before_the_lock() {
    let done = watchdog(60);
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 32 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let (ok, overflowed) = may::go!(move || {
        let (mut ok, mut overflowed) = (0, 0);
        for target in (LENT_STACK_MARGIN - 256..LENT_STACK_MARGIN + 2048).step_by(16) {
            match p.run("margin", move || lents_at(target)) {
                Ok(sum) => {
                    assert_eq!(sum, (0..40).sum::<usize>());
                    ok += 1;
                }
                Err(RunError::StackOverflow { .. }) => overflowed += 1,
                Err(e) => panic!("{e}"),
            }
            // The fiber's ledger is usable again.
            let l = p.run("after", || *Lent::new(3, |_| {})).unwrap();
            assert_eq!(l, 3);
        }
        (ok, overflowed)
    })
    .join()
    .unwrap();
    eprintln!("{ok} jobs completed, {overflowed} overflowed at the margin check");
    assert!(ok > 0 && overflowed > 0, "the window spans the margin");
    done.store(true, Ordering::SeqCst);
}
