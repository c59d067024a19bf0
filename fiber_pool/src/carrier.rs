//! Running a call on the *carrier's* stack (the may coroutine that carries a fiber)
//! instead of the fiber's: [`on_carrier`], and the calls built on it ([`sleep`],
//! [`drop_on_carrier`]), so that no may (or generator) frame is ever on a fiber stack.
//! Spawning carriers is [`spawn`]'s; its two functions are re-exported
//! here too ([`go`], [`spawn()`]), the paths the workspace's callers use.
//!
//! may's I/O, timers and `may::sync` take may's own locks and update its queues on
//! whatever stack calls them. On a fiber, an overflow inside them would abandon those
//! frames mid-update: a queue left marked, a mutex owned for ever, the scheduler
//! stopped (see STACK_SIZES.md). corosensei's `Yielder::on_parent_stack` runs a
//! closure on the stack that resumed the coroutine, below the frames of
//! [`FiberPool::run`](crate::FiberPool::run): the carrier's may stack, which is sized
//! for may and never overflows into a fiber's guard. The fiber is parked there
//! meanwhile, exactly as if it had called a function.
//!
//! Measured (release, `fiber_pool/examples/on_carrier_bench.rs`): the round trip costs
//! a few dozen nanoseconds (two context switches of a handful of registers each, the
//! registry lookup and the stall bookkeeping), against the microseconds of the
//! syscall it wraps.

use std::time::Duration;

use crate::registry::StackEntry;
use crate::stall;

pub use crate::spawn::{go, spawn, JoinHandle};

/// Fiber stack the switch to the carrier needs besides the closure and the result it
/// moves: the frames of corosensei's `on_parent_stack`, `on_stack` and its arch
/// helpers (saved registers, return addresses). In a debug build they took more
/// than 512 bytes (the overflow sweep of `tests/stack.rs` caught a fault inside
/// them); the sweep passes with this.
pub const SWITCH_STACK_MARGIN: usize = 1024;

/// Runs `f` on the carrier's stack when called on a fiber (and simply calls it
/// otherwise), and returns its value. A panic in `f` propagates to the caller.
///
/// Every may call that a job makes should go through here: sockets (use
/// [`net::CarrierStream`](crate::net::CarrierStream), which does it for every read,
/// write and drop), sleeps ([`sleep`]), `may::sync` waits and posts, channel
/// operations. While `f` runs the job does not count as holding its thread (see
/// [`stall`]), and [`reserve_stack`](crate::reserve_stack) inside `f`
/// does nothing: `f` is not on a fiber.
///
/// `f` must be `Send` (corosensei's rule: it keeps a fiber's references out of the
/// carrier's code); capture `&mut` to sockets and buffers, not fiber-only types.
///
/// **While the thread is panicking `f` should not wait** (may I/O, `may::sync`, a
/// may sleep: use [`sleep`], which does not park then). std's panic count is per
/// thread: parked, the unwinding fiber shows a panic in progress to every
/// coroutine of its worker, and a panic of theirs meanwhile aborts the process. (It
/// resumes on its own thread, as every coroutine does, so the count is right again
/// once it has unwound.) The pool's own destructors keep this: a
/// [`Lent`](crate::Lent) dropped while unwinding leaves its value to the pool, which
/// drops it after the job; a [`CarrierStream`](crate::net::CarrierStream)'s drop does
/// not wait.
#[inline]
pub fn on_carrier<R, F>(f: F) -> R
where
    F: FnOnce() -> R + Send,
{
    let sp = crate::stack_check::stack_pointer();
    let Some(entry) = StackEntry::find_running(sp) else {
        return f();
    };
    let yielder = entry.yielder();
    if yielder.is_null() {
        return f();
    }
    // The switch itself runs on the fiber (corosensei's `on_stack` saves registers
    // and moves `f` there before it changes stacks): overflow here, at a safe point,
    // rather than inside it.
    // Unoptimised builds copy the closure and the result through each frame.
    let copies = if cfg!(debug_assertions) { 3 } else { 1 };
    let moved = copies * (std::mem::size_of::<F>() + std::mem::size_of::<R>());
    // Not a safe point: may calls are made with locks held too.
    crate::stack_check::reserve_on(
        entry,
        sp,
        SWITCH_STACK_MARGIN + moved,
        crate::stack_check::SafePoint::Unknown,
    );
    let label = entry.label();
    // SAFETY: the yielder was recorded by the coroutine whose stack we are running on
    // (our stack pointer is in that entry's stack and the entry is running), at its
    // start, and is cleared before that coroutine ends; the coroutine is alive and
    // running (it is us), so the yielder it was passed is valid for this call.
    let yielder = unsafe { &*yielder };
    yielder.on_parent_stack(move || {
        stall::leave();
        // Back to the fiber, even if `f` panics: the thread holds the job again
        // (the same thread: a carrier never changes thread, so the thread was
        // readied for fibers, alternate signal stack and all, when the job began).
        struct Back(&'static str);
        impl Drop for Back {
            fn drop(&mut self) {
                stall::enter(self.0);
            }
        }
        let _back = Back(label);
        f()
    })
}

/// `may::coroutine::sleep` on the carrier's stack (a plain thread sleep off may), for
/// the full duration whatever the job's [`Context`](crate::Context): a polling loop
/// with a deadline of its own would spin through it if the sleep ended early. To end
/// early when the job is cancelled, use [`sleep_or_cancelled`](crate::sleep_or_cancelled).
///
/// While the thread is panicking (a destructor that sleeps, run by unwinding, or a
/// panic hook that waits) it sleeps the thread instead, without parking the carrier:
/// std's panic count is per thread, so every coroutine that ran on this worker
/// meanwhile would see a panic in progress, and a panic of one of them while a panic
/// hook is parked aborts the process ([`panic_hook`](crate::panic_hook)). The
/// worker's other coroutines wait for the sleep.
pub fn sleep(d: Duration) {
    if std::thread::panicking() {
        return on_carrier(|| std::thread::sleep(d));
    }
    on_carrier(|| may::coroutine::sleep(d));
}

/// Drops `value` on the carrier's stack: for may objects whose drop does may work
/// (a socket's drop deregisters it from may's event loop).
pub fn drop_on_carrier<T: Send>(value: T) {
    on_carrier(move || drop(value));
}
