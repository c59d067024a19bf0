//! Which threads a coroutine can run on count a panic in progress
//! ([`panicking_per_thread`]), and the thread id (`gettid`) that tells them apart.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// This thread's kernel id.
pub fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// `std::thread::panicking()` on every thread a coroutine can run on: the
/// workers (a fresh coroutine lands on each in turn) and may's timer thread
/// (where a coroutine runs right after a sleep), asked while a plain thread of
/// its own is in the middle of unwinding. std answers from a process-wide count
/// first, which is 0 once every panic ended, and hides a thread's own count
/// then; with a panic in progress elsewhere it reads each thread's own count,
/// which must be 0 on every thread that is not unwinding.
pub fn panicking_per_thread() -> BTreeMap<i32, bool> {
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
