//! A job that panics unwinds through its destructors on the fiber. A destructor
//! that waits (a sleep, a `Lent` whose value's drop gives a connection back)
//! must not park the carrier meanwhile: `std::thread::panicking()` is per
//! thread, so every coroutine that ran on that worker in the meantime would see
//! a panic in progress (and poison the locks it drops; one that panicked itself
//! would abort the process). The fiber comes back to its own thread when it
//! does wait, so the count is right again once it has unwound.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, Lent, PoolConfig, RunError};

const NAP: Duration = Duration::from_millis(2);

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Where each drop ran: the thread before and after its wait, and how long it
/// waited.
type Seen = Arc<Mutex<Vec<(i32, i32, Duration)>>>;

/// Sleeps in its drop, as a destructor that gives something back over the
/// network would wait.
struct SleepOnDrop(Seen);

impl Drop for SleepOnDrop {
    fn drop(&mut self) {
        let (before, start) = (tid(), Instant::now());
        fiber_pool::sleep(NAP);
        self.0
            .lock()
            .unwrap()
            .push((before, tid(), start.elapsed()));
    }
}

/// `std::thread::panicking()` on every thread a coroutine can run on: the
/// workers (a fresh coroutine lands on each in turn) and may's timer thread
/// (where a coroutine runs right after a sleep), asked while a plain thread of
/// its own is in the middle of unwinding. std answers from a process-wide count
/// first, which is 0 once every panic ended, and hides a thread's own count
/// then; with a panic in progress elsewhere it reads each thread's own count,
/// which must be 0 on every thread that is not unwinding.
fn panicking_per_thread() -> BTreeMap<i32, bool> {
    let (unwinding_tx, unwinding) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    struct HoldWhileUnwinding(mpsc::Sender<()>, mpsc::Receiver<()>);
    impl Drop for HoldWhileUnwinding {
        fn drop(&mut self) {
            self.0.send(()).unwrap();
            let _ = self.1.recv();
        }
    }
    let held = std::thread::spawn(move || {
        let _hold = HoldWhileUnwinding(unwinding_tx, released);
        panic!("held in the middle of unwinding while the others are asked");
    });
    unwinding.recv().unwrap();
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let seen = Arc::clone(&seen);
            let carrier = move || {
                seen.lock().unwrap().insert(tid(), std::thread::panicking());
                may::coroutine::sleep(Duration::from_millis(1));
                seen.lock().unwrap().insert(tid(), std::thread::panicking());
            };
            fiber_pool::spawn::go(carrier)
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    release.send(()).unwrap();
    assert!(held.join().is_err());
    let seen = seen.lock().unwrap().clone();
    seen
}

fn pool() -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 2,
        ..PoolConfig::default()
    })
    .unwrap()
}

#[test]
fn a_drop_that_sleeps_while_unwinding_leaves_no_thread_panicking() {
    may::config().set_workers(2);
    let pool = pool();
    let seen: Seen = Arc::default();
    for _ in 0..20 {
        let (p, s) = (pool.clone(), Arc::clone(&seen));
        let carrier = move || {
            let r = p.run("unwinds", move || -> () {
                let _d = SleepOnDrop(s);
                panic!("unwinding through a drop that sleeps")
            });
            (r, std::thread::panicking())
        };
        let (r, panicking_after) = fiber_pool::spawn::go(carrier).join().unwrap();
        assert!(matches!(r, Err(RunError::Panicked { .. })), "{r:?}");
        assert!(
            !panicking_after,
            "the carrier's thread still counts a panic"
        );
        let &(before, after, _) = seen.lock().unwrap().last().unwrap();
        if before != after {
            break; // the unwinding moved to another thread: the case to check
        }
    }
    for &(_, _, waited) in seen.lock().unwrap().iter() {
        assert!(waited >= NAP, "the drop's sleep still waits: {waited:?}");
    }
    let panicking = panicking_per_thread();
    assert!(
        panicking.values().all(|&p| !p),
        "threads left panicking (thread id: panicking): {panicking:?}, drops: {:?}",
        seen.lock().unwrap()
    );
}

/// A value whose drop waits, on the carrier, as a pooled connection's give-back
/// may.
struct SlowToGiveBack(Arc<AtomicUsize>);

impl Drop for SlowToGiveBack {
    fn drop(&mut self) {
        may::coroutine::sleep(NAP);
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_lent_dropped_while_unwinding_is_given_back_after_the_job_not_during() {
    may::config().set_workers(2);
    let pool = pool();
    let dropped = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let (p, d, a) = (pool.clone(), Arc::clone(&dropped), Arc::clone(&abandoned));
        let carrier = move || {
            p.run("unwinds", move || -> () {
                let _conn = Lent::new(SlowToGiveBack(d), move |_| {
                    a.fetch_add(1, Ordering::SeqCst);
                });
                panic!("unwinding through a Lent")
            })
        };
        let r = fiber_pool::spawn::go(carrier).join().unwrap();
        assert!(matches!(r, Err(RunError::Panicked { .. })), "{r:?}");
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 5, "each value dropped once");
    assert_eq!(abandoned.load(Ordering::SeqCst), 0);
    let panicking = panicking_per_thread();
    assert!(
        panicking.values().all(|&p| !p),
        "threads left panicking (thread id: panicking): {panicking:?}"
    );
}

/// Waits on the carrier in its drop, through `on_carrier` directly: what the pool
/// cannot prevent.
struct WaitsOnTheCarrier;

impl Drop for WaitsOnTheCarrier {
    fn drop(&mut self) {
        fiber_pool::on_carrier(|| may::coroutine::sleep(NAP));
    }
}

#[test]
fn an_unwinding_fiber_that_waits_inside_on_carrier_comes_back_to_its_thread() {
    may::config().set_workers(2);
    let pool = pool();
    let p = pool.clone();
    let carrier = move || {
        let before = tid();
        let r = p.run("unwinds", || -> () {
            let _w = WaitsOnTheCarrier;
            panic!("unwinding through a drop that waits on the carrier")
        });
        (before, tid(), r)
    };
    let (before, after, r) = fiber_pool::spawn::go(carrier).join().unwrap();
    assert!(matches!(r, Err(RunError::Panicked { .. })), "{r:?}");
    // The sleep ended on may's timer thread, which handed the carrier back to its
    // own worker: the panic ended on the thread that began it, and no thread is left
    // counting one.
    assert_eq!(before, after, "the carrier changed thread");
    assert!(!fiber_pool::aftermath().is_broken());
    let panicking = panicking_per_thread();
    assert!(
        panicking.values().all(|&p| !p),
        "threads left panicking (thread id: panicking): {panicking:?}"
    );
}
