//! Stack overflows become `RunError::StackOverflow`, many times over, while
//! normal jobs interleave on two worker threads; the pool stays whole and
//! memory does not keep growing.

use std::time::Duration;

use fiber_pool::{FiberPool, PoolConfig, RunError};

/// Recurses with a 1 KiB frame until the stack runs out (on purpose).
#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let mut buf = [0u8; 1024];
    buf[depth as usize % 1024] = depth as u8;
    let buf = std::hint::black_box(buf);
    recurse(depth + 1) + u64::from(buf[0])
}

/// Resident pages of this process, from /proc/self/statm.
fn rss_pages() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs is mounted");
    statm.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn one_overflow_is_an_error_and_the_fiber_works_again() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 16 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    may::go!(move || {
        let err = p.run("deep", || recurse(0)).unwrap_err();
        assert_eq!(
            err,
            RunError::StackOverflow {
                stack_size: 16 * 1024,
                label: "deep"
            }
        );
        assert!(err.to_string().contains("stack_size"), "{err}");
        assert_eq!(p.run("shallow", || 7).unwrap(), 7);
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!((stats.overflows, stats.completed), (1, 1));
    assert_eq!(stats.per_label["deep"].overflows, 1);
}

#[test]
fn a_thousand_overflows_interleaved_on_two_workers() {
    may::config().set_workers(2);
    const N: usize = 4;
    let pool = FiberPool::new(PoolConfig {
        size: N,
        stack_size: 16 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    // A fixed set of carriers, so that may's own cache of finished
    // coroutines (up to 1000, with their dirty stacks) does not look like
    // our leak.
    const CARRIERS: usize = 8;
    const WARMUP: usize = 25;
    const ROUNDS: usize = 1000 / CARRIERS;
    let barrier = std::sync::Arc::new(may::sync::Barrier::new(CARRIERS + 1));
    let handles: Vec<_> = (0..CARRIERS)
        .map(|c| {
            let p = pool.clone();
            let b = barrier.clone();
            may::go!(move || {
                for i in 0..ROUNDS {
                    if i == WARMUP {
                        b.wait(); // the main thread reads RSS here
                        b.wait();
                    }
                    // A normal job that yields, so carriers migrate between
                    // the two workers mid-job.
                    let ok = p.run("normal", move || {
                        may::coroutine::sleep(Duration::from_micros(50));
                        c * i
                    });
                    assert_eq!(ok.unwrap(), c * i);
                    let err = p
                        .run("overflow", || {
                            may::coroutine::yield_now();
                            recurse(0)
                        })
                        .unwrap_err();
                    assert!(matches!(err, RunError::StackOverflow { .. }), "{err}");
                }
            })
        })
        .collect();
    barrier.wait();
    let rss_after_warmup = rss_pages();
    barrier.wait();
    for h in handles {
        h.join().expect("a carrier coroutine panicked");
    }
    let stats = pool.stats();
    assert_eq!(stats.overflows, 1000);
    assert_eq!(stats.completed, 1000);
    assert_eq!((stats.busy, stats.queued), (0, 0));

    // Every fiber still works: run N jobs that are all inside at once.
    let barrier = std::sync::Arc::new(may::sync::Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let p = pool.clone();
            let b = barrier.clone();
            may::go!(move || p.run("all", move || {
                b.wait();
                i
            }))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap().unwrap(), i);
    }

    // Memory does not keep growing: the 800 overflows after the warm-up cost
    // less than 400 KiB more (a leaked page each would be 3.2 MiB).
    let grown = rss_pages().saturating_sub(rss_after_warmup);
    eprintln!("RSS grew by {grown} pages over the last 800 overflows");
    assert!(grown < 100, "RSS grew by {grown} pages over 800 overflows");
}

#[test]
fn a_panic_is_an_error_and_the_pool_goes_on() {
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    may::go!(move || {
        let err = p.run("boom", || -> u32 { panic!("kaboom {}", 42) });
        assert_eq!(
            err.unwrap_err(),
            RunError::Panicked {
                label: "boom",
                message: "kaboom 42".into()
            }
        );
        assert_eq!(p.run("after", || 1).unwrap(), 1);
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!((stats.panics, stats.completed), (1, 1));
}
