//! Admission on the real may scheduler: N+k sleeping jobs run in waves of at
//! most N, a full queue says Busy at once, a long wait says Timeout, waiters
//! are served in FIFO order.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, PoolConfig, RunError};

#[test]
fn n_plus_k_sleeping_jobs_run_in_waves_of_n() {
    common::sleeping_jobs_take_waves(4, 3);
}

/// Spins (on the test thread) until `cond` holds; panics after 5 s.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Holds the only fiber of a pool until released (or for [`Holder::MAX`], so that
/// a failing test ends instead of hanging).
struct Holder {
    release: Arc<AtomicBool>,
    job: may::coroutine::JoinHandle<()>,
}

impl Holder {
    const MAX: Duration = Duration::from_secs(10);

    /// Occupies the only fiber of `pool` and waits until it is busy.
    fn occupy(pool: &FiberPool) -> Holder {
        let release = Arc::new(AtomicBool::new(false));
        let (p, r) = (pool.clone(), release.clone());
        let job = may::go!(move || {
            p.run("hold", move || {
                let start = Instant::now();
                while !r.load(Ordering::SeqCst) && start.elapsed() < Holder::MAX {
                    may::coroutine::sleep(Duration::from_millis(1));
                }
            })
            .unwrap();
        });
        wait_until("the fiber to be busy", || pool.stats().busy == 1);
        Holder { release, job }
    }

    /// Lets the job end and waits for it.
    fn release(self) {
        self.release.store(true, Ordering::SeqCst);
        self.job.join().unwrap();
    }
}

#[test]
fn a_full_queue_is_busy_at_once() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        queue: 1,
        // A refusal that waited instead would end as Timeout, not Busy.
        wait_timeout: Some(Duration::from_secs(5)),
        ..PoolConfig::default()
    })
    .unwrap();
    let holder = Holder::occupy(&pool);
    let p = pool.clone();
    let waiter = may::go!(move || p.run("waits", || 1));
    wait_until("one waiter", || pool.stats().queued == 1);

    let p = pool.clone();
    let start = Instant::now();
    let third = may::go!(move || p.run("refused", || 2)).join().unwrap();
    // At once: well under the 5 s wait a queued caller would see (the fiber is
    // held until released), and wide for a busy machine.
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "Busy took {:?}",
        start.elapsed()
    );
    let err = third.unwrap_err();
    assert_eq!(err, RunError::Busy { queue: 1 });
    assert!(err.to_string().contains("queue"), "{err}");

    holder.release();
    assert_eq!(waiter.join().unwrap().unwrap(), 1);
    let stats = pool.stats();
    assert_eq!((stats.rejected, stats.completed), (1, 2));
}

#[test]
fn a_wait_past_the_timeout_is_timeout() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        wait_timeout: Some(Duration::from_millis(100)),
        ..PoolConfig::default()
    })
    .unwrap();
    let holder = Holder::occupy(&pool);
    let p = pool.clone();
    let res = may::go!(move || p.run("late", || 1)).join().unwrap();
    // The fiber is held until released: without the timeout the wait would last
    // `Holder::MAX`, so the upper bound can be wide for a busy machine.
    match res {
        Err(RunError::Timeout { waited }) => assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
            "waited {waited:?}"
        ),
        other => panic!("expected Timeout, got {other:?}"),
    }
    let stats = pool.stats();
    assert_eq!((stats.timed_out, stats.queued), (1, 0));
    holder.release();
    // The timed-out caller left the queue: the next one runs at once.
    let p = pool.clone();
    assert_eq!(
        may::go!(move || p.run("next", || 3))
            .join()
            .unwrap()
            .unwrap(),
        3
    );
}

#[test]
fn waiters_are_served_in_fifo_order() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    let holder = Holder::occupy(&pool);
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..5)
        .map(|i| {
            let (p, order) = (pool.clone(), order.clone());
            let h = may::go!(move || p.run("fifo", move || order.lock().unwrap().push(i)));
            wait_until("the waiter to queue", || pool.stats().queued == i + 1);
            h
        })
        .collect();
    holder.release();
    for h in waiters {
        h.join().unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[test]
fn bad_configurations_are_refused_with_what_to_change() {
    let cases = [
        (
            PoolConfig {
                size: 0,
                ..PoolConfig::default()
            },
            "`size`",
        ),
        (
            PoolConfig {
                stack_size: 100,
                ..PoolConfig::default()
            },
            "`stack_size`",
        ),
        (
            PoolConfig {
                stack_size: 1 << 40,
                ..PoolConfig::default()
            },
            "`stack_size`",
        ),
        (
            PoolConfig {
                size: 10_000_000,
                ..PoolConfig::default()
            },
            "`size`",
        ),
        (
            PoolConfig {
                size: 1_000_000,
                stack_size: 1 << 30,
                ..PoolConfig::default()
            },
            "`size`, `spare_stacks` or `stack_size`",
        ),
        (
            PoolConfig {
                spare_stacks: usize::MAX,
                ..PoolConfig::default()
            },
            "`spare_stacks`",
        ),
        (
            PoolConfig {
                queue: usize::MAX,
                ..PoolConfig::default()
            },
            "`queue`",
        ),
        (
            PoolConfig {
                child_reserve: usize::MAX,
                ..PoolConfig::default()
            },
            "`child_reserve`",
        ),
    ];
    for (cfg, field) in cases {
        let err = FiberPool::new(cfg.clone())
            .err()
            .unwrap_or_else(|| panic!("{cfg:?} accepted"));
        assert!(err.to_string().contains(field), "{cfg:?}: {err}");
    }
    // Rounded up to whole pages.
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 5000,
        ..PoolConfig::default()
    })
    .unwrap();
    assert_eq!(pool.stats().stack_size % 4096, 0);
    assert!(pool.stats().stack_size >= 5000);
}
