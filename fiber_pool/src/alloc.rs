//! [`FiberSafeAlloc`]: the system allocator, entered only with enough fiber
//! stack left that an overflow never starts inside it.

use std::alloc::{GlobalAlloc, Layout, System};

use crate::reserve_stack;

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
/// [`reserve_stack`]`(`[`ALLOC_STACK_MARGIN`]`)` before every operation, so
/// that a fiber about to run out of stack overflows at the call, never with
/// malloc's arena lock held.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
/// ```
///
/// It never allocates itself, takes no lock, uses no thread-local, and off a
/// fiber (any thread, signal handlers, before `main`) it costs a registry
/// walk and forwards to `System`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FiberSafeAlloc;

// SAFETY: every method forwards its arguments unchanged to `System`, which
// implements the `GlobalAlloc` contract; `reserve_stack` before it neither
// allocates, unwinds, nor touches the memory involved. When it overflows the
// fiber, the allocator has not been entered yet, so no allocator state is
// left half-updated (the caller's frames are abandoned: the crate's
// documented contract).
unsafe impl GlobalAlloc for FiberSafeAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        reserve_stack(ALLOC_STACK_MARGIN);
        // SAFETY: the caller's contract for `alloc`, forwarded.
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        reserve_stack(ALLOC_STACK_MARGIN);
        // SAFETY: the caller's contract for `alloc_zeroed`, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        reserve_stack(ALLOC_STACK_MARGIN);
        // SAFETY: the caller's contract for `dealloc`, forwarded (`ptr` came
        // from this allocator, i.e. from `System`).
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        reserve_stack(ALLOC_STACK_MARGIN);
        // SAFETY: the caller's contract for `realloc`, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
