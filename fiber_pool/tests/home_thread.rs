//! The patched may (`patches/may`) runs every coroutine on one OS thread, its home
//! worker, from its first instruction to its last, whatever it waits on and
//! whichever thread ends the wait: a sleep or a park that times out (may's timer
//! thread), a socket whose events come to another worker's event loop, an I/O
//! timeout, an unpark from a plain thread or from another worker, a yield, a
//! `may::sync` wait. Stock may 0.3.51 resumed sleepers on its timer thread, and let
//! idle workers steal ready coroutines.
//!
//! Every test of this binary runs with the same three workers (`WORKERS`), so that
//! `cargo test` (one process for them all) and nextest (one each) agree.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::cell::RefCell;
use std::io::{Read, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::thread::{self, ThreadId};
use std::time::Duration;

use fiber_pool::{FiberPool, PoolConfig};

/// may workers in this binary: more than two, so that a coroutine has two other
/// threads to be moved to.
const WORKERS: usize = 3;
/// Coroutines per test, and waits per coroutine.
const COROUTINES: usize = 200;
const WAITS: usize = 10;

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        may::config().set_workers(WORKERS);
    });
}

/// Spawns `n` coroutines (round-robin homes, as may's `go!`), each running `body`
/// with its index, and returns how many of them saw their thread change: `body`
/// returns the ids it saw at each of its checkpoints.
fn moves(n: usize, body: impl Fn(usize) -> Vec<ThreadId> + Send + Sync + 'static) -> usize {
    init();
    let body = Arc::new(body);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let body = Arc::clone(&body);
            fiber_pool::spawn::go(move || body(i))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("the coroutine panicked"))
        .filter(|seen| seen.windows(2).any(|w| w[0] != w[1]))
        .count()
}

fn here() -> ThreadId {
    thread::current().id()
}

#[test]
fn sleeps_end_on_the_sleepers_own_thread() {
    let moved = moves(COROUTINES, |_| {
        let mut seen = vec![here()];
        for _ in 0..WAITS {
            may::coroutine::sleep(Duration::from_micros(200));
            seen.push(here());
        }
        seen
    });
    assert_eq!(
        moved, 0,
        "coroutines that resumed on another thread after a sleep"
    );
}

#[test]
fn a_park_that_times_out_resumes_at_home() {
    let moved = moves(COROUTINES, |_| {
        let mut seen = vec![here()];
        for _ in 0..WAITS {
            // may keeps a park's timeout in whole milliseconds (under 1 ms it
            // would park for ever).
            may::coroutine::park_timeout(Duration::from_millis(1));
            seen.push(here());
        }
        seen
    });
    assert_eq!(moved, 0);
}

#[test]
fn unparked_by_a_plain_thread_or_another_worker_resumes_at_home() {
    init();
    let rounds = 200;
    let (tx, rx) = std::sync::mpsc::channel::<may::coroutine::Coroutine>();
    let waiter = move || {
        let mut seen = vec![here()];
        for _ in 0..rounds {
            tx.send(may::coroutine::current()).unwrap();
            may::coroutine::park();
            seen.push(here());
        }
        seen
    };
    let waiter = fiber_pool::spawn::go(waiter);
    // Every other unpark from a plain thread, the rest from coroutines of any worker.
    for i in 0..rounds {
        let co = rx.recv().unwrap();
        if i % 2 == 0 {
            co.unpark();
        } else {
            fiber_pool::spawn::go(move || co.unpark());
        }
    }
    let seen = waiter.join().unwrap();
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "the waiter changed thread"
    );
}

#[test]
fn io_whose_events_reach_another_workers_loop_resumes_at_home() {
    init();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // An echo peer on plain threads, answering each byte after a pause so that every
    // read waits.
    thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            thread::spawn(move || {
                let mut byte = [0u8; 1];
                while stream.read_exact(&mut byte).is_ok() {
                    thread::sleep(Duration::from_micros(300));
                    if stream.write_all(&byte).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let moved = moves(60, move |_| {
        // Sockets are registered with worker `fd % WORKERS`: among a few
        // connections, some belong to another worker than this coroutine's.
        let mut streams: Vec<_> = (0..WORKERS)
            .map(|_| may::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut seen = vec![here()];
        for round in 0..WAITS {
            let s = &mut streams[round % WORKERS];
            s.write_all(b"x").unwrap();
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte).unwrap();
            seen.push(here());
        }
        // A read that ends by its timeout: may's I/O timer runs on the socket's
        // worker.
        for s in &mut streams {
            s.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
            let mut byte = [0u8; 1];
            let e = s.read(&mut byte).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ),
                "{e}"
            );
            seen.push(here());
        }
        seen
    });
    assert_eq!(moved, 0);
}

#[test]
fn yields_and_may_sync_waits_stay_at_home() {
    let lock = Arc::new(may::sync::Mutex::new(0u64));
    let (tx, rx) = may::sync::mpsc::channel::<usize>();
    let rx = Arc::new(may::sync::Mutex::new(rx));
    let moved = moves(COROUTINES, move |i| {
        let mut seen = vec![here()];
        for _ in 0..WAITS {
            may::coroutine::yield_now();
            seen.push(here());
            // Contended by coroutines of every worker: a waiter is woken by the
            // unlocker's thread.
            *lock.lock().unwrap() += 1;
            seen.push(here());
        }
        // Half send, half receive (parked until a sender on any worker sends).
        if i % 2 == 0 {
            tx.send(i).unwrap();
        } else {
            rx.lock().unwrap().recv().unwrap();
            seen.push(here());
        }
        seen
    });
    assert_eq!(moved, 0);
}

#[test]
fn a_coroutine_spawned_on_a_plain_thread_with_spawn_local_runs_on_a_worker() {
    init();
    let caller = here();
    let ran = thread::spawn(move || {
        let plain = here();
        // SAFETY: reads its thread id and sleeps.
        let h = unsafe {
            may::coroutine::Builder::new().spawn_local(move || {
                let first = here();
                may::coroutine::sleep(Duration::from_millis(1));
                (first, here())
            })
        }
        .unwrap();
        (plain, h.join().unwrap())
    })
    .join()
    .unwrap();
    let (plain, (first, after)) = ran;
    assert_ne!(
        first, plain,
        "a coroutine ran on the plain thread that spawned it"
    );
    assert_ne!(first, caller);
    assert_eq!(first, after);
}

#[test]
fn coroutines_spawned_with_one_id_share_one_thread() {
    init();
    let threads: Vec<ThreadId> = (0..12)
        .map(|_| {
            // SAFETY: reads its thread id after a sleep.
            let h = unsafe {
                may::coroutine::Builder::new().id(WORKERS + 1).spawn(|| {
                    may::coroutine::sleep(Duration::from_micros(100));
                    here()
                })
            }
            .unwrap();
            h.join().unwrap()
        })
        .collect();
    assert!(threads.windows(2).all(|w| w[0] == w[1]), "{threads:?}");
}

thread_local! {
    /// This thread's id, borrowed across waits.
    static OWNER: RefCell<Option<ThreadId>> = const { RefCell::new(None) };
    /// A reference-counted value of this thread (what `rand::thread_rng()` hands out).
    static SHARED: Rc<()> = Rc::new(());
}

#[test]
fn thread_local_borrows_and_rcs_held_across_waits_stay_with_their_thread() {
    let wrong = Arc::new(AtomicUsize::new(0));
    let w = Arc::clone(&wrong);
    let moved = moves(COROUTINES, move |_| {
        // Other coroutines of this thread may hold their borrows already: set it
        // once, by the first.
        OWNER.with(|o| {
            if o.borrow().is_none() {
                *o.borrow_mut() = Some(here());
            }
        });
        let mut seen = vec![here()];
        let held = SHARED.with(Rc::clone);
        OWNER.with(|owner| {
            let owner = owner.borrow();
            for _ in 0..WAITS {
                may::coroutine::sleep(Duration::from_micros(200));
                seen.push(here());
                if *owner != Some(here()) || !SHARED.with(|s| Rc::ptr_eq(s, &held)) {
                    w.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        drop(held);
        seen
    });
    assert_eq!(moved, 0);
    assert_eq!(
        wrong.load(Ordering::Relaxed),
        0,
        "values that were another thread's"
    );
    // Every borrow ended on its own thread: each worker can borrow mutably again, and
    // holds no clone of its Rc but its own.
    for worker in 0..WORKERS {
        // SAFETY: checks its thread's locals within one call.
        let h = unsafe {
            may::coroutine::Builder::new().id(worker).spawn(|| {
                let free = OWNER.with(|o| o.try_borrow_mut().is_ok());
                let count = SHARED.with(Rc::strong_count);
                (free, count)
            })
        }
        .unwrap();
        assert_eq!(h.join().unwrap(), (true, 1), "worker {worker}");
    }
}

#[test]
fn a_job_on_a_fiber_resumes_on_its_thread_after_every_wait() {
    init();
    let pool = FiberPool::new(PoolConfig {
        size: 50,
        ..PoolConfig::default()
    })
    .unwrap();
    let moved = moves(COROUTINES, move |i| {
        pool.run("home", move || {
            let mut seen = vec![here()];
            for _ in 0..WAITS {
                fiber_pool::sleep(Duration::from_micros(200));
                seen.push(here());
            }
            let _ = i;
            seen
        })
        .unwrap()
    });
    assert_eq!(moved, 0);
}
