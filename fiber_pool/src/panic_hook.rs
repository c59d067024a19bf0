//! [`run_panic_hook_off_fiber`]: the process's panic hook runs on a stack of its own
//! when a job panics on a fiber.
//!
//! std calls the hook before unwinding, on the stack of the code that panicked, under
//! its hook lock; its own hook takes stderr's lock to print and, with
//! `RUST_BACKTRACE`, walks and symbolises the stack (tens of KiB). On a fiber near its
//! limit that overflowed with those locks held (every later print and `set_hook`
//! waits for ever) and left the thread's panic state behind. Neither the fiber nor the
//! carrier (a may stack of 32 KiB, where an overflow ends the process) is the place:
//! each thread that runs fibers gets a [`HOOK_STACK_SIZE`] stack with a guard page for
//! the hook, made when a fiber first runs there (`prepare_thread`), and the hook runs
//! on it with corosensei's `on_stack`, a plain call on another stack.
//!
//! **A hook that waits.** std runs the hook with its thread marked as inside its panic
//! hook and the panic counted (`std::thread::panicking()` is true there). A hook that
//! parks its coroutine (may I/O, a `may::sync` wait, a may sleep) resumes on the
//! thread it started on, as every coroutine does ([`mod@crate::spawn`]), and gives
//! that thread's hook stack back there: the next panic's hook runs on it again (test
//! `panic_hook_waits`). While it is parked, the other coroutines of its thread run,
//! each with a panic in progress as far as std can tell, and a panic of any of them
//! aborts the process ("thread panicked while processing panic": std allows no panic
//! on a thread inside its panic hook, and aborts before any hook runs). No wrapper of
//! the hook can prevent that, so a hook that must wait calls
//! [`sleep`](crate::sleep), which, while the thread is panicking, sleeps the thread
//! instead of parking: the worker's other coroutines wait for it, and none can panic
//! meanwhile.

use std::cell::{OnceCell, RefCell};
use std::panic::PanicHookInfo;

use corosensei::stack::DefaultStack;

/// Size of each thread's panic-hook stack: room for std's hook printing a full
/// backtrace in a debug build. Resident memory is only the pages a hook touched.
pub const HOOK_STACK_SIZE: usize = 256 * 1024;

thread_local! {
    /// This thread's hook stack, once a fiber ran here (`None` if it could not be made).
    static HOOK_STACK: OnceCell<Option<RefCell<DefaultStack>>> = const { OnceCell::new() };
}

/// Makes the thread ready to run the panic hook off a fiber: called once per thread,
/// with the alternate signal stack's set-up (`signal::prepare_thread`).
pub(crate) fn prepare_thread() {
    HOOK_STACK.with(|cell| {
        cell.get_or_init(|| DefaultStack::new(HOOK_STACK_SIZE).ok().map(RefCell::new));
    });
}

/// Makes the process's panic hook (the one installed when this is called, std's
/// printer by default) run on its own stack when a job panics on a fiber; elsewhere
/// it is called as before. Call it once at start-up, off fibers, after any hook of
/// your own is set (later calls, and calls on a fiber, do nothing). A hook that waits
/// does it with [`sleep`](crate::sleep), never by parking in may (see the module
/// documentation).
pub fn run_panic_hook_off_fiber() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if crate::on_fiber() {
        return;
    }
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| off_fiber(&*previous, info)));
    });
}

/// Calls `hook` on this thread's hook stack when on a fiber, else where it is.
fn off_fiber(hook: &(dyn Fn(&PanicHookInfo<'_>) + Send + Sync), info: &PanicHookInfo<'_>) {
    if !crate::on_fiber() {
        return hook(info);
    }
    // The switch's own frames are on the fiber: overflow here rather than inside it
    // (while panicking that is still an overflow with the hook lock held, and the
    // aftermath counts it as broken).
    crate::check_stack(crate::SWITCH_STACK_MARGIN);
    HOOK_STACK.with(|cell| {
        match cell
            .get()
            .and_then(Option::as_ref)
            .map(RefCell::try_borrow_mut)
        {
            Some(Ok(mut stack)) => corosensei::on_stack(&mut *stack, || hook(info)),
            // No hook stack on this thread (it could not be made): where it is. It is
            // never found borrowed: std runs one hook at a time on a thread, and
            // aborts at a panic while one runs, parked or not.
            _ => hook(info),
        }
    })
}
