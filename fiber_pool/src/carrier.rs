//! Spawning may coroutines (the *carriers* that fibers run on) behind a safe API.
//!
//! may's `coroutine::spawn` is `unsafe` because a coroutine is not a thread: it may move
//! between worker threads after any yield, so a thread-local read before a yield and
//! after it can see two different threads' values, and a blocking std call stalls every
//! coroutine on its worker. Every crate of ours but this one forbids unsafe code, so
//! this is the one place that spawns, and the contract is written here once.
//!
//! Contract for the closures passed here (the callers in this workspace keep it):
//! - no thread-local state is held across a yield (may I/O, `coroutine::sleep`,
//!   `may::sync` waits, or [`crate::FiberPool::run`]);
//! - blocking std calls are avoided, or accepted as stalling that worker.
//!
//! Breaking the contract gives wrong values or slowness, not memory unsafety, for the
//! std and may APIs we use: std's own thread-locals (panic count, stdout lock owner)
//! are only used between yields.

use std::io;

pub use may::coroutine::JoinHandle;

/// Spawn a may coroutine running `f`, with `stack_bytes` of may stack (rounded up to
/// whole 8-byte words; `None` keeps may's configured default).
pub fn spawn<F, T>(name: &str, stack_bytes: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut builder = may::coroutine::Builder::new().name(name.to_string());
    if let Some(bytes) = stack_bytes {
        builder = builder.stack_size(bytes.div_ceil(8));
    }
    // SAFETY: may's spawn is unsafe only for the thread-local and blocking caveats
    // in the module docs; they are conditions on `f`'s behaviour that callers keep,
    // and breaking them is a logic error (wrong thread-local value, stalled worker),
    // not undefined behaviour in the code we run inside coroutines.
    unsafe { builder.spawn(f) }
}

/// Spawn with may's default stack and a generic name: the `go!` of our crates.
pub fn go<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // may's Builder::spawn only fails when the OS refuses a stack mapping, which is
    // out of memory: there is nothing better to do than to stop.
    spawn("fiberstack", None, f).expect("may could not allocate a coroutine stack")
}
