//! [`FiberSafeAlloc`]: the system allocator, entered only with enough fiber
//! stack left that an overflow never starts inside it, and the check that it is
//! the process's global allocator ([`FiberPool::new`](crate::FiberPool::new)
//! refuses to start without it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::check_stack;

/// Stack bytes a fiber must have left before it enters the system allocator
/// (malloc, free, realloc, calloc, posix_memalign).
///
/// How it was chosen: the test `alloc_margin` runs glibc 2.36's allocator on
/// a fiber through every path we could provoke (tcache and fast bins,
/// `malloc_consolidate`, mmap'ed chunks, trimming a thread arena's heap,
/// growing and shrinking `realloc` up to 8 MiB with `mremap`, `calloc`,
/// aligned allocation up to 4 KiB alignment, frees into another thread's
/// arena, contention with three allocating threads) and measures the stack
/// used below the caller with the pool's high-water marks. The deepest was
/// 408 bytes in a release build (`realloc`; `malloc`/`free` alone 136-280)
/// and 504 bytes in a debug build (which adds unoptimised `System` shims).
/// 2048 is four times that, for the paths not provoked (a thread's first
/// malloc creating an arena, `systrim` of the main arena, another libc) and
/// a signal delivered on the fiber stack meanwhile. The test fails if glibc
/// ever needs more than half the margin. Binaries are linked with `BIND_NOW`
/// (Rust's default), so no lazy symbol resolution runs on the fiber.
///
/// The price: an allocation with less than 2 KiB of stack left overflows
/// the fiber, so a job has `stack_size - 2 KiB` of stack for code that
/// allocates (2 of 4 KiB with `--stack-size 4KiB`).
pub const ALLOC_STACK_MARGIN: usize = 2048;

/// A global allocator over [`System`] that calls
/// [`check_stack`]`(`[`ALLOC_STACK_MARGIN`]`)` before every operation, so
/// that a fiber about to run out of stack overflows at the call, never with
/// malloc's arena lock held. The allocator does not know what the job holds
/// (a `Vec` grows inside critical sections too), so such an overflow counts
/// as outside a safe point.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
/// ```
///
/// It never allocates itself, takes no lock, and reads no thread-local that needs
/// initialising or dropping (only the registry's record of the thread's last look,
/// a plain value); off a fiber (any thread, signal handlers, before `main`) it costs
/// that look, or a registry walk, and forwards to `System`.
///
/// [`FiberPool::new`](crate::FiberPool::new) refuses to create a pool unless this
/// is the global allocator (or the global allocator is a wrapper that calls it):
/// every binary that creates a pool declares it, test and example files
/// included, since each is a binary of its own. A library must not declare it
/// (a process has one global allocator, chosen by its binary).
#[derive(Clone, Copy, Debug, Default)]
pub struct FiberSafeAlloc;

/// Set when [`FiberSafeAlloc`] hands out memory; cleared by [`is_global`] before
/// its probe. Only a relaxed load on the hot path: the store happens only while
/// it reads false, i.e. once after each probe, not once per allocation (a store
/// per allocation would bounce this cache line between every allocating thread).
static SERVED: AtomicBool = AtomicBool::new(false);

#[inline(always)]
fn note_served() {
    if !SERVED.load(Ordering::Relaxed) {
        SERVED.store(true, Ordering::Relaxed);
    }
}

/// One probe of [`is_global`] at a time: a probe's clear of [`SERVED`] falling
/// between another's allocation and its look made that one say no wrongly (pools
/// made on several threads at once: test `safe_alloc_check`).
static PROBE: Mutex<()> = Mutex::new(());

/// Is [`FiberSafeAlloc`] the process's global allocator (or called by it)? Clears
/// the flag, allocates through the global allocator, and looks whether
/// `FiberSafeAlloc` served that allocation. Same thread, so program order makes
/// the store visible; probes take turns ([`PROBE`]), and another thread can set the
/// flag meanwhile only by calling `FiberSafeAlloc` itself (as the global allocator,
/// which is the answer anyway, or directly, as a benchmark does: then, and only
/// then, a race can make this say yes wrongly).
pub(crate) fn is_global() -> bool {
    let _one_probe = crate::lock_anywhere(&PROBE);
    SERVED.store(false, Ordering::Relaxed);
    // Through `black_box`, so that the allocation is not optimised away.
    drop(std::hint::black_box(Box::new(0u8)));
    SERVED.load(Ordering::Relaxed)
}

// SAFETY: every method forwards its arguments unchanged to `System`, which
// implements the `GlobalAlloc` contract; `check_stack` and the flag update
// before it neither allocate, unwind, nor touch the memory involved. When it overflows the
// fiber, the allocator has not been entered yet, so no allocator state is
// left half-updated (the caller's frames are abandoned: the crate's
// documented contract).
unsafe impl GlobalAlloc for FiberSafeAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check_stack(ALLOC_STACK_MARGIN);
        note_served();
        // SAFETY: the caller's contract for `alloc`, forwarded.
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check_stack(ALLOC_STACK_MARGIN);
        note_served();
        // SAFETY: the caller's contract for `alloc_zeroed`, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        check_stack(ALLOC_STACK_MARGIN);
        // SAFETY: the caller's contract for `dealloc`, forwarded (`ptr` came
        // from this allocator, i.e. from `System`).
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check_stack(ALLOC_STACK_MARGIN);
        note_served();
        // SAFETY: the caller's contract for `realloc`, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
