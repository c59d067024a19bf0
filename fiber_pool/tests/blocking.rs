//! `blocking` with ONE may worker: real blocking calls (a thread sleep, `std::fs`, a
//! `std::net` connect that hangs) park only their fibers while another fiber on the
//! same worker keeps ticking, and none counts as a stall; a panic is an error, a full
//! queue an error at once, and a caller's deadline, cancel or wait ends its wait
//! while the closure runs on to its end.
//!
//! Every test runs on one may worker (`common::pool_on_workers`; may reads the count
//! once per process, so every test of this binary sets the same). The contrast, a
//! blocking call made on the fiber that holds the worker, is test
//! `blocking_holds_the_worker`, in a process of its own.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{in_coroutine, wait_until};
use fiber_pool::{BlockingConfig, BlockingPool, CancelReason, Context, RunError};

const LONG: Duration = Duration::from_secs(10);
const BLOCK: Duration = Duration::from_millis(300);

#[test]
fn blocking_calls_park_only_their_fibers_while_another_fiber_on_the_worker_ticks() {
    let pool = common::pool_on_workers(1, 4);
    let silent = fiber_pool::testing::UnansweringListener::new().unwrap();
    let addr = silent.addr;
    let dir = std::env::temp_dir().join(format!("fiber_pool_blocking_{}", std::process::id()));

    let ticker = common::ticker::Ticker::start(&pool);

    let started = Instant::now();
    let (p, d) = (pool.clone(), dir.clone());
    let blocked = move || {
        p.run("blocks", move || {
            let slept = fiber_pool::blocking(|| std::thread::sleep(BLOCK));
            let fs = fiber_pool::blocking(move || {
                std::fs::create_dir_all(&d)?;
                std::fs::write(d.join("f"), b"on a blocking thread")?;
                std::fs::read_to_string(d.join("f"))
            });
            let connect = fiber_pool::blocking(move || {
                std::net::TcpStream::connect_timeout(&addr, BLOCK).map(drop)
            });
            (slept, fs, connect)
        })
    };
    let blocked = fiber_pool::spawn::go(blocked);
    // While it blocks, nothing holds the worker: no job runs its own code for long.
    // Looked at in real time: the ticker's turns while the job blocks (a worker held
    // meanwhile would run them all at once afterwards).
    let mut looked = 0;
    let (mut first, mut last) = (None, 0);
    while !blocked.is_done() {
        let stalls = fiber_pool::jobs_running_longer_than(Duration::from_millis(100));
        assert!(
            stalls.is_empty(),
            "a blocking call held the worker: {stalls:?}"
        );
        looked += 1;
        last = ticker.ticks();
        first.get_or_insert(last);
        std::thread::sleep(Duration::from_millis(10));
    }
    let (slept, fs, connect) = blocked.join().unwrap().unwrap();
    let took = started.elapsed();
    let ticked = last - first.unwrap_or(last);
    ticker.stop();
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(slept, Ok(()));
    assert_eq!(fs.unwrap().unwrap(), "on a blocking thread");
    let connect = connect.unwrap().unwrap_err();
    assert!(
        matches!(
            connect.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
        "{connect:?}"
    );
    assert!(took >= BLOCK * 2, "{took:?}");
    assert!(looked > 10, "looked {looked} times");
    // Turns all through the 600+ ms of blocking: the worker was free.
    println!("blocked {took:?} on the only worker; the ticker took {ticked} turns meanwhile");
    assert!(ticked >= 20, "the ticker took {ticked} turns in {took:?}");
}

#[test]
fn a_panic_in_the_closure_is_the_callers_error() {
    let pool = common::pool_on_workers(1, 1);
    let p = pool.clone();
    let got = in_coroutine(move || {
        p.run("panics", || {
            fiber_pool::blocking(|| -> u8 { panic!("sync {}", "boom") })
        })
    });
    assert_eq!(
        got,
        Ok(Err(RunError::Panicked {
            label: fiber_pool::blocking::BLOCKING_LABEL,
            message: "sync boom".into()
        }))
    );
    // The thread survives and serves the next closure.
    assert_eq!(fiber_pool::blocking(|| 7), Ok(7));
}

#[test]
fn over_the_queue_a_call_fails_at_once() {
    let _pool = common::pool_on_workers(1, 1);
    let blocking = BlockingPool::new(BlockingConfig {
        threads: 1,
        queue: 1,
        ..BlockingConfig::default()
    })
    .unwrap();
    let release = Context::new();
    let running = Arc::new(AtomicBool::new(false));
    let (b, r, go) = (blocking.clone(), release.clone(), running.clone());
    let first = std::thread::spawn(move || {
        b.run(move || {
            go.store(true, Ordering::SeqCst);
            // Blocks its thread until released (or 10 s).
            let start = Instant::now();
            while !r.is_cancelled() && start.elapsed() < LONG {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    });
    wait_until("the only thread to be busy", LONG, || {
        running.load(Ordering::SeqCst)
    });
    let b = blocking.clone();
    let second = std::thread::spawn(move || b.run(|| 2));
    wait_until("the second to queue", LONG, || blocking.stats().queued == 1);
    let start = Instant::now();
    assert_eq!(
        blocking.run(|| 3),
        Err(RunError::BlockingQueueFull { queue: 1 })
    );
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
    release.cancel(CancelReason::Requested);
    assert_eq!(first.join().unwrap(), Ok(()));
    assert_eq!(second.join().unwrap(), Ok(2));
}

#[test]
fn the_callers_deadline_cancel_or_wait_ends_its_wait_and_the_closure_runs_on() {
    let pool = common::pool_on_workers(1, 2);
    // A deadline.
    let finished = Arc::new(AtomicBool::new(false));
    let f = finished.clone();
    let ctx = Context::new().with_timeout(Duration::from_millis(100));
    let p = pool.clone();
    let start = Instant::now();
    let job = move || {
        fiber_pool::blocking(move || {
            std::thread::sleep(Duration::from_millis(400));
            f.store(true, Ordering::SeqCst);
        })
    };
    let got = in_coroutine(move || p.run_in("deadline", &ctx, job));
    let took = start.elapsed();
    assert_eq!(
        got,
        Ok(Err(RunError::Cancelled {
            reason: CancelReason::DeadlinePassed
        }))
    );
    assert!(took < Duration::from_millis(350), "{took:?}");
    assert!(!finished.load(Ordering::SeqCst));
    wait_until("the closure to run to its end", LONG, || {
        finished.load(Ordering::SeqCst)
    });

    // A cancel from another thread.
    let ctx = Context::new();
    let entered = Arc::new(AtomicBool::new(false));
    let (p, c, e) = (pool.clone(), ctx.clone(), entered.clone());
    let job = move || {
        fiber_pool::blocking(move || {
            e.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
        })
    };
    let waiter = fiber_pool::spawn::go(move || p.run_in("cancel", &c, job));
    wait_until("the closure to start", LONG, || {
        entered.load(Ordering::SeqCst)
    });
    let start = Instant::now();
    ctx.cancel(CancelReason::ClientGone);
    let got = waiter.join().unwrap();
    assert_eq!(
        got,
        Ok(Err(RunError::Cancelled {
            reason: CancelReason::ClientGone
        }))
    );
    assert!(
        start.elapsed() < Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );

    // The pool's own wait.
    let short = BlockingPool::new(BlockingConfig {
        wait: Some(Duration::from_millis(50)),
        ..BlockingConfig::default()
    })
    .unwrap();
    let got = short.run(|| std::thread::sleep(Duration::from_millis(300)));
    assert!(
        matches!(got, Err(RunError::BlockingTimeout { .. })),
        "{got:?}"
    );
}

#[test]
fn a_closure_still_queued_when_its_caller_stops_waiting_never_runs() {
    let _pool = common::pool_on_workers(1, 1);
    let blocking = BlockingPool::new(BlockingConfig {
        threads: 1,
        ..BlockingConfig::default()
    })
    .unwrap();
    let release = Context::new();
    let busy = Arc::new(AtomicBool::new(false));
    let (b, r, flag) = (blocking.clone(), release.clone(), busy.clone());
    let first = std::thread::spawn(move || {
        b.run(move || {
            flag.store(true, Ordering::SeqCst);
            let start = Instant::now();
            while !r.is_cancelled() && start.elapsed() < LONG {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    });
    wait_until("the only thread to be busy", LONG, || {
        busy.load(Ordering::SeqCst)
    });
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let ctx = Context::new().with_timeout(Duration::from_millis(50));
    let got = blocking.run_in(&ctx, move || r.store(true, Ordering::SeqCst));
    assert_eq!(
        got,
        Err(RunError::Cancelled {
            reason: CancelReason::DeadlinePassed
        })
    );
    release.cancel(CancelReason::Requested);
    first.join().unwrap().unwrap();
    // The thread is free again: a later closure runs, the abandoned one never did.
    assert_eq!(blocking.run(|| 5), Ok(5));
    assert!(!ran.load(Ordering::SeqCst));
}
