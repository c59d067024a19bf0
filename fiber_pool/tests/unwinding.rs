//! A job that panics unwinds through its destructors on the fiber. A destructor
//! that waits (a sleep, a `Lent` whose value's drop gives a connection back)
//! must not park the carrier meanwhile: `std::thread::panicking()` is per
//! thread, so every coroutine that ran on that worker in the meantime would see
//! a panic in progress (and poison the locks it drops; one that panicked itself
//! would abort the process). The fiber comes back to its own thread when it
//! does wait, so the count is right again once it has unwound (test
//! `unwinding_on_carrier`, in a process of its own).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::panicking::{panicking_per_thread, tid};
use fiber_pool::{Lent, RunError};

const NAP: Duration = Duration::from_millis(2);

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

/// may workers, the same for every test of this binary (see `common::pool_on_workers`).
const WORKERS: usize = 2;

#[test]
fn a_drop_that_sleeps_while_unwinding_leaves_no_thread_panicking() {
    let pool = common::pool_on_workers(WORKERS, 2);
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
    let pool = common::pool_on_workers(WORKERS, 2);
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
