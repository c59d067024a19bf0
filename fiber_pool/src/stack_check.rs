//! The stack checks of code running on a fiber: how much stack is left
//! ([`stack_remaining`]), overflowing on purpose before a deep call when too little
//! is ([`reserve_stack`], a declared safe point, and [`check_stack`], which claims
//! none), and the locks that check first ([`lock`], [`lock_anywhere`]). Each finds
//! the fiber by the stack pointer in the [`registry`] (the thread's last look, else
//! the table): no lock, no allocation, and no thread-local that needs initialising
//! or dropping, so the global allocator can call them.

use crate::registry;

/// Is the caller running on a fiber of some pool?
pub fn on_fiber() -> bool {
    stack_remaining().is_some()
}

/// The registry entry of the fiber we run on, if any.
#[inline]
pub(crate) fn running_entry() -> Option<&'static registry::StackEntry> {
    registry::StackEntry::find_running(stack_pointer())
}

/// Bytes left on the current fiber's stack above its guard, from the
/// stack pointer; `None` when not on a fiber.
pub fn stack_remaining() -> Option<usize> {
    let sp = stack_pointer();
    let entry = registry::StackEntry::find_running(sp)?;
    Some(sp.saturating_sub(entry.guard_end()))
}

/// Makes sure the current fiber has at least `bytes` of stack left, by
/// overflowing *now* if it has not, and declares this call a **safe point**:
/// the job ends with [`RunError::StackOverflow`](crate::RunError::StackOverflow) at this call, reported
/// `at_safe_point`, instead of deep inside the code that was going to run out
/// (an allocator, a critical section). With enough stack it returns at once;
/// off a fiber it does nothing.
///
/// The declaration is the caller's: call it where the job holds nothing that an
/// overflow would leave behind (no lock, no `RefCell` borrow, no
/// `Once`/`LazyLock` initialisation, no stdout or stderr lock), typically just
/// before taking a lock. Code that cannot know what its callers hold (a logger,
/// a library's internals) calls [`check_stack`] instead, which overflows the same
/// way but claims nothing.
///
/// Cost: reading the stack pointer and the thread's last look in the registry (a
/// handful of loads and compares), or, after a switch to another stack, a walk of
/// the registry, one node per live pool (about three loads each) and a division: a
/// few nanoseconds either way (see the `pool_bench` example). It neither locks nor
/// allocates, so it is usable from a global allocator ([`FiberSafeAlloc`](crate::FiberSafeAlloc) calls [`check_stack`]).
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
        reserve_on(entry, sp, bytes, SafePoint::Declared);
    }
}

/// [`reserve_stack`] without the declaration: overflows now if fewer than
/// `bytes` are left, and such an overflow counts as outside a safe point
/// (`at_safe_point: false`, [`PoolStats::unsafe_overflows`](crate::PoolStats::unsafe_overflows),
/// [`Aftermath::outside_safe_point`](crate::Aftermath::outside_safe_point)), since the caller does not know what the job
/// holds. [`FiberSafeAlloc`](crate::FiberSafeAlloc), [`on_carrier`](crate::on_carrier) and [`Lent`](crate::Lent) check this way: an
/// allocation, a may call or a `Lent`'s drop happen anywhere, critical sections
/// included.
#[inline]
pub fn check_stack(bytes: usize) {
    let sp = stack_pointer();
    if let Some(entry) = registry::StackEntry::find_running(sp) {
        reserve_on(entry, sp, bytes, SafePoint::Unknown);
    }
}

/// Whether a stack check's caller declared a safe point ([`reserve_stack`]) or
/// does not know ([`check_stack`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SafePoint {
    /// The caller's job holds nothing an overflow would leave behind.
    Declared,
    /// The caller cannot tell.
    Unknown,
}

/// [`reserve_stack`] or [`check_stack`] for a caller that found the fiber's entry
/// (at stack pointer `sp`) already.
#[inline]
pub(crate) fn reserve_on(entry: &registry::StackEntry, sp: usize, bytes: usize, at: SafePoint) {
    let guard_end = entry.guard_end();
    if sp.saturating_sub(guard_end) < bytes {
        if at == SafePoint::Declared {
            entry.mark_safe_point();
        }
        overflow_now(guard_end);
    }
}

/// Stack a short critical section gets before [`lock`] or [`lock_anywhere`] takes
/// its mutex: the allocator's own margin ([`ALLOC_STACK_MARGIN`](crate::ALLOC_STACK_MARGIN)) for the allocations
/// a section makes (a map entry, a clone of a small table), and the section's
/// frames, which are several times larger in a debug build. The server's
/// `tests/stack.rs` sweeps every route over many stack sizes to check it.
pub const LOCK_STACK_MARGIN: usize = 8 * 1024;

/// Locks `m` from a job's own code on a fiber: first [`reserve_stack`]s
/// [`LOCK_STACK_MARGIN`], so that an overflow strikes here and never inside the
/// critical section (abandoned frames are not unwound, so a guard they hold
/// would never unlock, and every later locker would wait for ever). Like
/// `reserve_stack`, the call declares a safe point, so only code that knows
/// everything the job holds at the call may make it: a handler or a job of the
/// application, holding nothing else (no other lock: nested, an overflow here
/// leaves the outer one held and is still reported at a safe point). A library's
/// internals, called from code they cannot see, use [`lock_anywhere`]. A poisoned
/// mutex is recovered: our critical sections keep their data consistent at every
/// step.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    reserve_stack(LOCK_STACK_MARGIN);
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`lock`] for code that does not know what its caller holds (a library's
/// internals: `FiberPool::stats`, a client's connection pool, a logger): first
/// [`check_stack`]s [`LOCK_STACK_MARGIN`], so that an overflow strikes here and never
/// inside the critical section, and such an overflow counts as outside a safe point
/// (`at_safe_point: false`, [`PoolStats::unsafe_overflows`](crate::PoolStats::unsafe_overflows),
/// [`Aftermath::outside_safe_point`](crate::Aftermath::outside_safe_point)): the caller may hold a lock of its own, which
/// the overflow leaves held. Off a fiber it is a plain lock. A poisoned mutex is
/// recovered, as by `lock`.
pub fn lock_anywhere<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    check_stack(LOCK_STACK_MARGIN);
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Touches the guard of the fiber we run on: the signal handler resets
/// the fiber and this never returns.
#[cold]
#[inline(never)]
pub(crate) fn overflow_now(guard_end: usize) -> ! {
    // SAFETY: `guard_end - 1` is the top byte of the guard (PROT_NONE)
    // of the stack the caller runs on, found running in the registry; reading
    // it faults, and our handler turns exactly that fault into the fiber's
    // reset. An asm read (not `read_volatile`, a separate function in debug
    // builds) so that the faulting instruction is this function's own.
    unsafe {
        std::arch::asm!(
            "mov {byte}, byte ptr [{addr}]",
            addr = in(reg) guard_end - 1,
            byte = out(reg_byte) _,
            options(nostack, readonly, preserves_flags),
        );
    }
    // The guard was readable: the registry is wrong. No panic (we may
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
