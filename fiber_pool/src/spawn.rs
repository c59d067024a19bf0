//! Spawning may coroutines: the *carriers* that fibers run on. (Running a call on a
//! carrier's stack is [`carrier`](crate::carrier)'s.)
//!
//! **A coroutine never changes OS thread.** The workspace builds may with the patch in
//! `patches/may` (PATCH.md there): every coroutine has a home worker, chosen when it is
//! spawned, and only that worker's thread ever runs it, whatever it waits on and
//! whichever thread ends the wait (may's timer thread after a sleep or a timeout,
//! another worker's event loop for a socket registered there, a plain thread that
//! unparks it). A job on a fiber runs inside its carrier and waits with it, so it too
//! stays on the thread it started on, as do the children of its scopes (each on a
//! carrier of its own). So code that holds thread-bound state across a wait (a
//! `thread_local!` borrow, an `Rc` into a thread-local such as `rand::thread_rng()`, a
//! `tracing` span entered on this thread's stack, a std lock guard) finds it on its own
//! thread when it resumes: no value is ever touched from two threads, and spawning is a
//! safe function. Test `home_thread` checks every kind of wait.
//!
//! What stays the coroutine's to avoid is not undefined behaviour, but it is what
//! a single thread shared by many coroutines gives, as on a current-thread async
//! executor: the other coroutines of the thread run between a wait's start and its end.
//! A `RefCell` borrowed mutably across a wait makes theirs panic; a std `Mutex` held
//! across a wait deadlocks the thread if another of its coroutines locks it (use
//! `may::sync::Mutex`, which parks the coroutine instead); blocking std calls (std I/O,
//! `std::thread::sleep`, a std `Condvar` wait) stall every coroutine of the worker until
//! they return; and waiting in a destructor while a panic unwinds shows the panic to
//! every coroutine of the thread (std's panic count is per thread: see
//! [`on_carrier`](crate::on_carrier)).
//!
//! A coroutine's home: [`spawn`] and [`go`] take the next worker round robin, so
//! coroutines spread over the workers as they are made (nothing moves them later);
//! [`spawn_for_socket`] takes the worker whose event loop waits for that socket, so that
//! the socket's events wake the coroutine without a hop between threads.

use std::io;
use std::os::fd::AsRawFd;

pub use may::coroutine::JoinHandle;

/// Spawn a may coroutine running `f`, with `stack_bytes` of may stack (rounded up to
/// whole 8-byte words; `None` keeps may's configured default), on the next worker
/// round robin. `f` runs on that worker's thread from start to end (see the module
/// documentation).
pub fn spawn<F, T>(name: &str, stack_bytes: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    build(name, stack_bytes, None, f)
}

/// [`spawn`], homed on the worker whose event loop waits for `socket`'s events (the
/// patched may registers a socket with worker `fd % workers`): a connection's
/// coroutine made this way is woken by its own thread's event loop, with no hand-off
/// from another worker. Spreads over the workers as descriptors do.
pub fn spawn_for_socket<F, T>(
    name: &str,
    stack_bytes: Option<usize>,
    socket: &impl AsRawFd,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // may's `id` is taken modulo the worker count, as its event loop takes the
    // descriptor: the same worker.
    let fd = usize::try_from(socket.as_raw_fd()).unwrap_or(0);
    build(name, stack_bytes, Some(fd), f)
}

fn build<F, T>(
    name: &str,
    stack_bytes: Option<usize>,
    home: Option<usize>,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut builder = may::coroutine::Builder::new().name(name.to_string());
    if let Some(bytes) = stack_bytes {
        builder = builder.stack_size(bytes.div_ceil(8));
    }
    if let Some(home) = home {
        builder = builder.id(home);
    }
    // SAFETY: may's spawn asks that the coroutine not use thread-local state across
    // its waits, because stock may continues a coroutine on another thread after
    // them; the patched may this workspace builds (`patches/may`) never does, so
    // thread-local state is always its own thread's (module documentation). Its
    // other ask, that the coroutine's stack suffice, is what any thread's is: may's
    // stacks end in a guard page, and an overflow into it ends the process, as
    // for a std thread.
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
    spawn("fiber_pool", None, f).expect("may could not allocate a coroutine stack")
}
