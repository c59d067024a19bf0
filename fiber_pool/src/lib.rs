//! A fixed-size pool of guarded fibers on [may], where a stack overflow in a
//! job is an error, not the end of the process.
//!
//! [`FiberPool::run`] is called from a may coroutine (an HTTP connection's,
//! say). It waits for one of N fibers (FIFO, bounded queue, timeout) and runs
//! the job on that fiber's stack, carried by the calling coroutine. Jobs do
//! may I/O directly on the fiber stack: may suspends the carrier with the
//! fiber inside it, and other coroutines run. (We chose this over
//! `Yielder::on_parent_stack` so that jobs are plain closures, and so that the
//! stack high-water marks include the I/O code paths the job really runs.)
//!
//! # A fiber's stack
//!
//! ```text
//!   high addresses
//!  ┌──────────────────────┐ ◄─ top: the job starts here, the stack grows down
//!  │ used by the job      │
//!  │ (frames, may I/O)    │
//!  ├──────────────────────┤ ◄─ high-water mark: lowest non-zero word since the
//!  │                      │    last madvise(DONTNEED) (see `highwater`)
//!  │ never touched: not   │
//!  │ committed, costs no  │    usable part: `stack_size` bytes, page-rounded
//!  │ memory               │
//!  ├──────────────────────┤ ◄─ guard_end
//!  │ guard page PROT_NONE │    touching it raises SIGSEGV → StackOverflow
//!  └──────────────────────┘ ◄─ bottom
//!   low addresses
//! ```
//!
//! # Overflow recovery, and its safety contract
//!
//! A global lock-free registry ([`registry`]) maps stack addresses to running
//! fibers. The SIGSEGV/SIGBUS handler ([`signal`], installed once after may's
//! own) checks whether the faulting thread's stack pointer is in a running
//! fiber and the fault on its guard page; if so it resets the fiber with
//! corosensei's `CoroutineTrapHandler` and `run` returns
//! [`RunError::StackOverflow`]. Any other fault goes to the previous handler,
//! so real crashes still crash. Each thread that carries fibers gets a 64 KiB
//! alternate signal stack on its first `run`; a carrier that migrated
//! mid-job to a worker that never called `run` uses the alternate stack std
//! gives every thread (8 KiB), which is enough for our handler alone.
//!
//! The abandoned frames are **not unwound**: their destructors never run.
//! Memory they owned leaks; locks they held stay held. So:
//! * hand resources (database connections) to a [`Lent`]: they are given back
//!   through its `on_abandon` after an overflow;
//! * an overflow inside a global lock's critical section (`println!`, the
//!   allocator, a panic hook) can leave that lock held for ever. This is the
//!   limit of trap-based recovery (corosensei's `setup_trap_handler` contract
//!   asks that a trapping coroutine touch no outside memory); size stacks so
//!   that overflows are rare bugs, and watch `peak_stack_bytes`.
//!
//! # Example
//!
//! ```
//! use fiber_pool::{FiberPool, PoolConfig};
//!
//! let pool = FiberPool::new(PoolConfig { size: 4, ..PoolConfig::default() }).unwrap();
//! let p = pool.clone();
//! let answer = may::go!(move || p.run("answer", || {
//!     may::coroutine::sleep(std::time::Duration::from_millis(1)); // may I/O on the fiber
//!     40 + 2
//! }))
//! .join()
//! .unwrap();
//! assert_eq!(answer.unwrap(), 42);
//! assert_eq!(pool.stats().completed, 1);
//! ```
//!
//! Layout: [`config`] (limits), [`error`], `stack` (guarded stacks),
//! [`registry`] (stacks by address), [`signal`] (trap handler, alternate
//! stacks), `admission` (FIFO queue), [`pool`] (`run`), [`lent`] (resource
//! hand-off), `highwater` (stack use), [`stats`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod admission;
pub mod alloc;
pub mod carrier;
pub mod config;
pub mod error;
mod highwater;
pub mod lent;
pub mod pool;
pub mod registry;
pub mod signal;
mod stack;
pub mod stats;

pub use alloc::{FiberSafeAlloc, ALLOC_STACK_MARGIN};
pub use config::{ConfigError, PoolConfig};
pub use error::RunError;
pub use lent::Lent;
pub use pool::FiberPool;
pub use stats::{LabelStats, PoolStats};

/// Is the caller running on a fiber of some pool?
pub fn on_fiber() -> bool {
    stack_remaining().is_some()
}

/// Bytes left on the current fiber's stack above its guard page, from the
/// stack pointer; `None` when not on a fiber.
pub fn stack_remaining() -> Option<usize> {
    let sp = stack_pointer();
    let entry = registry::StackEntry::find_running(sp)?;
    Some(sp.saturating_sub(entry.guard_end()))
}

/// Makes sure the current fiber has at least `bytes` of stack left, by
/// overflowing *now* if it has not: the job ends with
/// [`RunError::StackOverflow`] at this call, a safe point where the caller
/// holds no lock it is about to take, instead of deep inside the code that
/// was going to run out (an allocator, a critical section). With enough
/// stack it returns at once; off a fiber it does nothing.
///
/// Cost: reading the stack pointer and walking the registry, one node per
/// live pool (about three loads each) and a division: a few nanoseconds
/// (see the `bench` example). It neither locks nor allocates, so it is
/// usable from a global allocator ([`FiberSafeAlloc`] calls it).
///
/// Call it before taking a lock on a fiber, with `bytes` at least the stack
/// the critical section needs:
///
/// ```
/// # use std::sync::Mutex;
/// static COUNTS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// fiber_pool::reserve_stack(8 * 1024); // overflow here, not with the lock held
/// COUNTS.lock().unwrap().push(1);
/// ```
#[inline]
pub fn reserve_stack(bytes: usize) {
    let sp = stack_pointer();
    if let Some(entry) = registry::StackEntry::find_running(sp) {
        let guard_end = entry.guard_end();
        if sp.saturating_sub(guard_end) < bytes {
            overflow_now(guard_end);
        }
    }
}

/// Touches the guard page of the fiber we run on: the signal handler resets
/// the fiber and this never returns.
#[cold]
#[inline(never)]
fn overflow_now(guard_end: usize) -> ! {
    // SAFETY: `guard_end - 1` is the top byte of the guard page (PROT_NONE)
    // of the stack the caller runs on, found running in the registry; reading
    // it faults, and our handler turns exactly that fault into the fiber's
    // reset. Volatile so that the read is not optimised away.
    unsafe { std::ptr::read_volatile((guard_end - 1) as *const u8) };
    // The guard page was readable: the registry is wrong. No panic (we may
    // be inside the global allocator).
    std::process::abort()
}

/// The current stack pointer.
#[inline(always)]
pub(crate) fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads a register into a local; no memory, stack or flags
    // touched.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    sp
}
