//! A fixed-size pool of guarded fibers on [may], where a stack overflow in a
//! job is an error, not the end of the process.
//!
//! [`FiberPool::run`] is called from a may coroutine (an HTTP connection's,
//! say). It waits for one of N fibers (FIFO, bounded queue, timeout) and runs
//! the job on that fiber's stack, carried by the calling coroutine. may calls
//! do not run on the fiber: [`on_carrier`] runs them on the carrier's stack
//! (corosensei's `Yielder::on_parent_stack`), where may suspends the carrier
//! with the fiber parked inside it and other coroutines run. Our sockets
//! ([`net::CarrierStream`]), [`sleep`] and fiber_mysql's pool do it for every
//! call, so no may or generator frame is ever on a fiber stack: an overflow can
//! never strike inside may's own locks and queues. The round trip costs about
//! 20-30 ns in a release build (`examples/on_carrier_bench.rs`). Stack
//! high-water marks measure what the job itself uses.
//!
//! # A pool's stacks
//!
//! All N stacks of a pool are ONE reservation (`mmap` with `MAP_NORESERVE`:
//! address space only), cut into slots of
//! `stride = `[`GUARD_SIZE`](config::GUARD_SIZE)` + stack_size`:
//!
//! ```text
//!   high addresses
//!  ┌──────────────────────┐ ◄─ start + N*stride
//!  ┆ slots 1 .. N-1       ┆
//!  ├──────────────────────┤ ◄─ top of slot 0 = bottom of slot 1
//!  │ slot 0, used by the  │    its fiber starts here, the stack grows down
//!  │ job (frames, may I/O)│
//!  ├──────────────────────┤ ◄─ high-water mark: lowest non-zero word since the
//!  │                      │    last madvise(DONTNEED) (see `highwater`)
//!  │ never touched: not   │
//!  │ committed, costs no  │    usable part: `stack_size` bytes, page-rounded
//!  │ memory               │
//!  ├──────────────────────┤ ◄─ guard_end; `reserve_stack(n)` overflows when
//!  │ guard, PROT_NONE,    │    fewer than n bytes are left above it
//!  │ GUARD_SIZE (128 KiB) │
//!  └──────────────────────┘ ◄─ start = bottom of slot 0 (touching the guard
//!   low addresses               raises SIGSEGV → StackOverflow)
//! ```
//!
//! Because the layout is regular, "which fiber owns this address" is
//! `(addr - start) / stride` in the one pool whose range holds it: the
//! [`registry`] is a static table of pools (not of fibers), so a lookup is
//! O(number of live pools), lock-free and allocation-free. That makes it
//! cheap enough for every allocation (see [`FiberSafeAlloc`]).
//!
//! # Overflow recovery
//!
//! The SIGSEGV/SIGBUS handler ([`signal`], installed once after may's own)
//! looks the faulting thread's stack pointer up in the registry; if it is a
//! running fiber and the fault is on its guard, it resets the fiber with
//! corosensei's `CoroutineTrapHandler` and `run` returns
//! [`RunError::StackOverflow`]. Any other fault goes to the previous handler,
//! so real crashes still crash (a SIGSEGV or SIGBUS *sent* with `kill` is no fault:
//! it is said on stderr and ignored, so the handler stays in place); may's own handler (generator's) is skipped,
//! since it allocates, prints and locks inside the signal handler and hangs
//! when the fault struck with one of those locks held (see [`signal`]). A job's
//! start readies its thread once: a 64 KiB alternate signal stack. The job never
//! leaves that thread (a coroutine never changes thread: [`mod@spawn`]), so the
//! stack is there for every fault of the job.
//!
//! # What is and is not safe after a caught overflow
//!
//! The abandoned frames are **not unwound**: their destructors never run.
//! Memory they owned leaks; locks they held stay held; `RefCell` borrows stay
//! borrowed. An overflow therefore must not start inside a critical section
//! of anything the process uses later. The stack itself is **never reused**:
//! something may still point into the abandoned frames (a thread of
//! `std::thread::scope` borrowing a local, a pinned value linked in elsewhere,
//! a pointer sent through a channel), so it is quarantined, mapped and
//! untouched for the rest of the process, and the fiber gets a spare stack
//! ([`PoolConfig::spare_stacks`]; with none left the fiber is retired). Each
//! quarantined stack keeps the pages its job touched resident: about
//! `stack_size` (`pool_bench -- quarantine`: 64 KiB per 64 KiB stack). With
//! this crate:
//!
//! * **The allocator: safe with [`FiberSafeAlloc`]** as the global allocator.
//!   It calls [`check_stack`]`(`[`ALLOC_STACK_MARGIN`]`)` before malloc,
//!   free and realloc, so the overflow happens at the call, never with
//!   glibc's arena lock held (without it, test `without_wrapper` hangs a
//!   child in `__lll_lock_wait_private` in `__libc_malloc`);
//!   [`FiberPool::new`] refuses to start without it. Not covered: libc
//!   functions that call malloc themselves (`getaddrinfo`, so std's DNS
//!   lookups; the `printf`/`fopen` family, `dlopen`, the first use of a
//!   thread-local with a destructor on a thread): an overflow inside them
//!   abandons malloc mid-update as if there were no wrapper. Keep them off
//!   fibers.
//! * **Resources** (database connections): hand them to a [`Lent`]; they are
//!   given back through its `on_abandon` (not lost; not necessarily
//!   consistent: see [`Lent::new`]). `Lent` checks
//!   [`LENT_STACK_MARGIN`](lent::LENT_STACK_MARGIN) before it switches to the
//!   carrier, where it takes its ledger's lock.
//! * **A std `Mutex`/`RwLock` in your code: call
//!   [`reserve_stack`]`(n)` before locking**, with `n` at least the stack the
//!   critical section uses (measure it: `peak_stack_bytes`). An overflow
//!   inside the critical section leaves the lock held for ever. A
//!   `may::sync::Mutex` is no cure for that: an abandoned guard keeps it
//!   locked too; the difference is only that later lockers park their
//!   coroutine instead of blocking a worker thread (one hung request instead
//!   of a hung worker). Prefer may::sync on fibers for that reason, and still
//!   reserve stack before locking.
//! * **stdout/stderr (`println!`, `eprintln!`, logging that locks) on a
//!   fiber: avoid.** An overflow inside them leaves std's stream lock held.
//!   Return what to log and log from the carrier after `run`.
//! * **Panics** on a fiber run the panic hook (which locks stderr) on the
//!   fiber stack: a panic near the stack limit can overflow inside it. Keep
//!   panics for bugs. Unwinding runs the job's destructors on the fiber, and
//!   none should wait on may meanwhile: std's panic count is per thread, so a
//!   parked unwinding fiber shows a panic in progress to every coroutine of its
//!   worker (`std::thread::panicking()` is true for them, and a panic of theirs
//!   then aborts the process). [`sleep`] sleeps the thread instead while
//!   panicking, and a [`Lent`] dropped while unwinding leaves its value to the
//!   pool (dropped on the carrier after the job).
//! * **may calls: through [`on_carrier`]** (our sockets, [`sleep`] and the
//!   MySQL pool do it). A may call made directly on a fiber still works, but
//!   puts may's frames, and its locks, on the fiber stack.
//! * **What is left behind is counted.** An overflow at a safe point
//!   ([`reserve_stack`] or [`lock`], whose caller declares that the job holds
//!   nothing there) held nothing; one anywhere else may have held something
//!   and is counted apart (`RunError::StackOverflow::at_safe_point`,
//!   `PoolStats::unsafe_overflows`, [`aftermath()`]). That includes the checks
//!   that cannot know what the job holds: the allocator's, the switch to the
//!   carrier's, a `Lent`'s, [`check_stack`], [`lock_anywhere`] (which this crate's
//!   own locks and those of the workspace's libraries use). The states known to be broken
//!   are counted too ([`Aftermath::is_broken`]: an overflow while panicking, a
//!   panicking `on_abandon`, a retired fiber, an unwinding fiber moved to
//!   another thread). [`jobs_running_longer_than`] shows a thread held by a
//!   job (for a stall watchdog).
//! * **Signals**: every signal but the synchronous ones (SIGSEGV, SIGBUS, SIGILL,
//!   SIGFPE, SIGTRAP, SIGSYS, which are unblocked there even if the thread had them
//!   blocked), real-time signals included, is blocked on may's threads, and on any
//!   other thread while its fiber runs (see [`signal`]; glibc keeps its own two,
//!   SIGCANCEL and SIGSETXID, unblocked; test `rt_signal`), so
//!   that a process-directed one goes to a thread of the application's own and none
//!   is delivered on a fiber stack near its guard; every thread gets a 64 KiB
//!   alternate signal stack before a fiber runs on it.
//! * **Thread-bound values across waits are sound** ([`mod@spawn`]): the workspace
//!   builds the patched may of `patches/may`, under which a coroutine never changes OS
//!   thread, so a job (which runs inside its carrier) and the children of its scopes
//!   (each inside a carrier of its own) find a thread-local borrow, an `Rc` into a
//!   thread-local or a lock guard held across a wait on the thread they took it on.
//!   Spawning a carrier is a safe function.
//!
//! This is the limit of trap-based recovery (corosensei's
//! `setup_trap_handler` contract asks that a trapping coroutine touch no
//! outside memory): `reserve_stack` moves the overflow to safe points we
//! choose, it does not make every point safe.
//!
//! # Cancellation and deadlines
//!
//! Every job runs under a [`Context`]: the one given to [`FiberPool::run_in`] (or
//! `run_admitted_in`), its calling job's when run from a job, else a fresh one made
//! when first asked for. It lives on the heap and is found by the fiber's registry
//! entry ([`current`]), never a thread-local. [`Context::cancel`] (any thread,
//! idempotent, a [`CancelReason`]: the client went away, the deadline passed, ...)
//! and a passing deadline end every wait of this crate that the job is in or starts:
//! the wait for a fiber ([`RunError::Cancelled`], the job then does not run),
//! [`sleep_or_cancelled`], a scope's children's waits, [`blocking()`]'s. A deadline
//! costs a clock read (`pool_bench -- context`); only a hook ([`Context::on_cancel`],
//! [`Context::on_cancel_shared`]) arms the one deadline thread for it.
//!
//! **What a job may do once cancelled**: everything it could before; nothing is
//! torn down under it. Its cancellable waits return at once (`Err(reason)`), so it
//! should stop its work and return soon: drop what it would have answered for
//! `ClientGone`, return what the server turns into a 504 (naming the phase it was
//! in) for `DeadlinePassed`. Clean-up that must wait (a connection given back, a
//! `KILL QUERY` settling) uses waits that do not look at the context:
//! [`sleep`] (which sleeps its full duration whatever the context), a `Lent`'s
//! drop, [`FiberPool::run_in`] or [`BlockingPool::run_in`] with a fresh
//! `Context::new()`. Code that never reaches a wait (a CPU loop) sees the
//! cancellation only if it asks (`is_cancelled`, [`Context::check`]).
//!
//! # Fan-out and blocking calls
//!
//! [`scope()`] runs children on guarded fibers of the pool, each a job of its own
//! (a child's overflow or panic is its own `RunError`), under a child of the
//! parent's context, and returns only once every child has ended: after the
//! closure returns, after it panics, and, through the parent's ledger, after the
//! parent overflows (the carrier cancels and joins the children before `run`
//! returns). So children may borrow the parent's locals. Children take a free
//! fiber, else one of [`PoolConfig::child_reserve`] that parents never take, at most
//! [`PoolConfig::max_children_per_scope`] per scope, waiting at most
//! [`PoolConfig::child_wait`] ([`RunError::NoFiberForChild`]): a pool whose every
//! fiber runs a parent that fans out still finishes.
//!
//! [`blocking()`] runs a closure that blocks its thread (std I/O, `std::fs`, a
//! synchronous client) on a bounded pool of OS threads ([`BlockingConfig`]) and
//! parks only the caller. Its threads are plain threads: an overflow there is not
//! caught, and ends the process.
//!
//! Neither is a stall for the watchdog: a parent waiting for its children, and a
//! caller waiting in `blocking`, are parked on their carriers
//! ([`jobs_running_longer_than`] does not list them); each child is a job of its
//! own there, under its label.
//!
//! # Example
//!
//! ```
//! use fiber_pool::{FiberPool, PoolConfig};
//!
//! // Every binary that creates a pool declares it (`FiberPool::new` checks).
//! #[global_allocator]
//! static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
//!
//! let pool = FiberPool::new(PoolConfig { size: 4, ..PoolConfig::default() }).unwrap();
//! let p = pool.clone();
//! // The caller: a may coroutine, as an HTTP connection's would be.
//! let caller = move || p.run("answer", || {
//!     fiber_pool::sleep(std::time::Duration::from_millis(1)); // may, on the carrier
//!     40 + 2
//! });
//! let answer = fiber_pool::spawn::go(caller).join().unwrap();
//! assert_eq!(answer.unwrap(), 42);
//! assert_eq!(pool.stats().completed, 1);
//! ```
//!
//! # Layout
//!
//! One idea per module, from the bottom up: a module imports only modules of the
//! lines above its own (the workspace's `tests/source_rules.rs` fails on an import
//! cycle), and this file only declares them and re-exports.
//!
//! - Importing nothing of the crate: [`config`] (limits), [`mod@spawn`] (spawning the
//!   may coroutines that carry fibers: `unsafe`, the spawner's promise), [`stall`]
//!   (which job holds each thread), [`mod@aftermath`] (what overflows left behind),
//!   `deadline` (the deadline thread), `ledger` (what a job registered outside its
//!   stack), `outcome` (what a fiber hands back to its carrier), `payload` (a caught
//!   panic's payload), `hangups` (an epoll set of sockets watched for their peers'
//!   hang-ups: [`net::HangupSet`]).
//! - `stack` (one reservation of guarded stacks per pool).
//! - [`registry`] (pools by address), `highwater` (stack use).
//! - `stack_check` (the stack left on a fiber: [`reserve_stack`], [`check_stack`],
//!   [`lock`]).
//! - [`carrier`] ([`on_carrier`]: calls on the carrier's stack, [`sleep`]), [`alloc`]
//!   ([`FiberSafeAlloc`]), [`stats`].
//! - [`context`] (cancellation, deadlines), [`lent`] (resource hand-off),
//!   [`panic_hook`] (panic hooks off the fiber).
//! - [`signal`] (trap handler, alternate stacks), `admission` (FIFO queue), [`error`].
//! - [`pool`] (`run`), [`mod@blocking`] (blocking calls on OS threads), `testing`
//!   (feature `testing`: test support).
//! - [`mod@scope`] (fan-out), [`net`] (a socket toolkit for fibers).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod admission;
pub mod aftermath;
pub mod alloc;
pub mod blocking;
pub mod carrier;
mod clock;
pub mod config;
pub mod context;
mod deadline;
pub mod error;
mod hangups;
mod highwater;
mod ledger;
pub mod lent;
pub mod net;
mod outcome;
pub mod panic_hook;
mod payload;
pub mod pool;
pub mod registry;
pub mod scope;
pub mod signal;
pub mod spawn;
mod stack;
mod stack_check;
pub mod stall;
pub mod stats;
#[cfg(feature = "testing")]
pub mod testing;

pub use aftermath::{aftermath, Aftermath};
pub use alloc::{FiberSafeAlloc, ALLOC_STACK_MARGIN};
pub use blocking::{blocking, BlockingConfig, BlockingPool};
pub use carrier::{drop_on_carrier, on_carrier, sleep, SWITCH_STACK_MARGIN};
pub use clock::monotonic_nanos;
pub use config::{ConfigError, PoolConfig};
pub use context::{current, sleep_or_cancelled, CancelHook, CancelReason, Context, Registration};
pub use error::RunError;
pub use lent::{Abandoned, Lent, LentOwner};
pub use panic_hook::run_panic_hook_off_fiber;
pub use pool::{Admitted, FiberPool};
pub use scope::{scope, scope_with_deadline, Child, Scope};
pub use stack_check::{
    check_stack, lock, lock_anywhere, on_fiber, reserve_stack, stack_remaining, LOCK_STACK_MARGIN,
};
pub use stall::{jobs_running_longer_than, RunningJob};
pub use stats::{same_label, LabelStats, PoolStats};
