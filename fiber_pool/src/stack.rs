//! One fiber's stack: corosensei's `DefaultStack` (an `mmap` with a guard
//! page at the bottom), made `Send` so that a pool can hand it to whichever
//! thread carries the next job.
//!
//! ```text
//!  base()  ─┬─ high address: the fiber starts here and grows down
//!           │   usable part: `stack_size` bytes, page-rounded,
//!           │   committed only where touched
//! guard_end ┼─
//!           │   guard page (PROT_NONE): touching it is an overflow
//!  limit() ─┴─ low address
//! ```

use std::io;

use corosensei::stack::{DefaultStack, Stack, StackPointer};

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A guard-paged stack owned by one pool slot. Dropping it unmaps it.
pub(crate) struct FiberStack {
    inner: DefaultStack,
}

// SAFETY: `DefaultStack` is a pointer to an mmap'ed region that it owns
// exclusively and unmaps on drop; nothing in it is tied to the thread that
// created it (no thread-local state, no thread id). It is `!Send` only because
// it holds raw pointers. The pool moves a stack between threads only while no
// fiber runs on it, or together with the single carrier that drives it.
unsafe impl Send for FiberStack {}

impl FiberStack {
    /// Maps `usable` bytes (a whole number of pages) plus one guard page.
    pub(crate) fn new(usable: usize) -> io::Result<FiberStack> {
        let stack = FiberStack {
            inner: DefaultStack::new(usable)?,
        };
        debug_assert_eq!(stack.usable(), usable);
        Ok(stack)
    }

    /// Highest address (exclusive): where the fiber starts.
    pub(crate) fn top(&self) -> usize {
        self.inner.base().get()
    }

    /// Lowest address of the mapping: the start of the guard page.
    pub(crate) fn bottom(&self) -> usize {
        self.inner.limit().get()
    }

    /// First address above the guard page: the lowest usable byte.
    pub(crate) fn guard_end(&self) -> usize {
        self.bottom() + page_size()
    }

    /// Usable bytes (without the guard page).
    pub(crate) fn usable(&self) -> usize {
        self.top() - self.guard_end()
    }
}

// SAFETY: delegates to `DefaultStack`, which upholds the trait's contract
// (aligned base and limit, a guard page, at least MIN_STACK_SIZE bytes).
unsafe impl Stack for FiberStack {
    #[inline]
    fn base(&self) -> StackPointer {
        self.inner.base()
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        self.inner.limit()
    }
}
