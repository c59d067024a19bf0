//! Spawning may coroutines: the *carriers* that fibers run on. (Running a call on a
//! carrier's stack is [`carrier`](crate::carrier)'s.)
//!
//! A may coroutine is not a thread: whenever it waits (may I/O, a sleep, a
//! `may::sync` wait, a yield) may may resume it on another worker thread, and
//! every sleeper is resumed on may's timer thread. Code that holds thread-bound
//! state across such a wait then uses it from another thread than the one it
//! belongs to, while that thread's other coroutines use it too:
//! - a borrow of a `thread_local!` value: the `RefCell` (or `Cell`) it points
//!   to is the first thread's, and both threads now touch it without
//!   synchronisation. In an optimised build even a fresh access after the wait,
//!   in a function that accessed the same thread-local before it, may reach the
//!   first thread's value: the compiler treats a thread-local's address as
//!   constant within a function (test `hazards` shows the move of threads);
//! - a std `MutexGuard` or `RwLock` guard (`!Send`: unlocked on another thread
//!   than it was locked on), a `StdoutLock` or `StderrLock` (the lock's
//!   reentrancy count is a plain counter that the owning thread's coroutines
//!   keep touching while another thread touches it through the guard).
//!
//! These are data races, undefined behaviour, reachable from safe code (a safe
//! closure, a safe may sleep). So spawning a coroutine is `unsafe`, as may's own
//! `spawn` is: the spawner promises what the coroutine's code will not do, for
//! that code and for every job it runs through [`FiberPool::run`](crate::FiberPool::run)
//! (a job runs inside its carrier and waits with it), children of its jobs' scopes
//! included (code of those jobs, run by the scope on coroutines it spawns under this
//! same promise; see [`scope`](crate::scope())).
//!
//! Two more hazards are not undefined behaviour but are the spawner's to avoid:
//! waiting in a destructor while a panic unwinds (std's panic count is per
//! thread: see [`on_carrier`](crate::on_carrier)), and blocking std calls (std
//! I/O, `std::thread::sleep`, std `Condvar` waits), which stall every coroutine
//! of that worker until they return.
//!
//! ```compile_fail,E0133
//! // Spawning needs the caller's promise: an `unsafe` block.
//! let _ = fiber_pool::spawn::go(|| ());
//! ```
//!
//! ```compile_fail,E0133
//! let _ = fiber_pool::spawn::spawn("carrier", None, || ());
//! ```
//!
//! ```compile_fail,E0133
//! // The same functions where the workspace's callers name them.
//! let _ = fiber_pool::carrier::go(|| ());
//! ```

use std::io;

pub use may::coroutine::JoinHandle;

/// Spawn a may coroutine running `f`, with `stack_bytes` of may stack (rounded up to
/// whole 8-byte words; `None` keeps may's configured default).
///
/// # Safety
///
/// Neither `f` nor anything it runs (the jobs it runs through
/// [`FiberPool::run`](crate::FiberPool::run) included, and the children of the
/// [`scope`](crate::scope())s those jobs open, which run on coroutines of their own)
/// may hold thread-bound state
/// across a may wait (may I/O, `may::coroutine::sleep` or `yield_now`, a
/// `may::sync` wait, and the calls of this crate that wait through them:
/// [`sleep`](crate::sleep), [`net`](crate::net), `run` when it queues for a fiber):
/// no borrow of a `thread_local!` value (nor an access to one after the wait in a
/// function that accessed it before), no std lock guard, no
/// `StdoutLock`/`StderrLock`, no other `!Send` value tied to its thread. See the
/// module documentation for why each is a data race.
pub unsafe fn spawn<F, T>(name: &str, stack_bytes: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut builder = may::coroutine::Builder::new().name(name.to_string());
    if let Some(bytes) = stack_bytes {
        builder = builder.stack_size(bytes.div_ceil(8));
    }
    // SAFETY: may's spawn asks that the coroutine not use thread-local state
    // across its waits (and that its stack suffice, which is may's own
    // overflow check); our caller promises the first (this function's `#
    // Safety`).
    unsafe { builder.spawn(f) }
}

/// Spawn with may's default stack and a generic name: the `go!` of our crates.
///
/// # Safety
///
/// As for [`spawn`]: `f` and what it runs hold no thread-bound state across a may
/// wait.
pub unsafe fn go<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // may's Builder::spawn only fails when the OS refuses a stack mapping, which is
    // out of memory: there is nothing better to do than to stop.
    // SAFETY: our caller's promise, passed on (`spawn`'s contract is ours).
    unsafe { spawn("fiberstack", None, f) }.expect("may could not allocate a coroutine stack")
}
