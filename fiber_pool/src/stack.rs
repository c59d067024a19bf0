//! A pool's fiber stacks: ONE contiguous reservation per pool, cut into
//! equal slots, each with its own guard of [`GUARD_SIZE`] at the bottom.
//!
//! ```text
//!  start + n*stride ─┬─ end of the reservation
//!                    │  slot n-1 usable part
//!                    ├─ slot n-1 guard (PROT_NONE)
//!                    ┆  …
//!  start + 2*stride ─┼─
//!                    │  slot 1 usable part: `usable` bytes (page-rounded),
//!                    │  committed only where touched; its fiber starts at
//!                    │  the top (= slot 2's guard) and grows down
//!  guard_end(1)     ─┼─
//!                    │  slot 1 guard (PROT_NONE, GUARD_SIZE bytes)
//!  start + stride   ─┼─ = bottom(1) = top(0)
//!                    │  slot 0 usable part
//!  guard_end(0)     ─┼─
//!                    │  slot 0 guard (PROT_NONE)
//!  start            ─┴─ = bottom(0)
//! ```
//!
//! `stride = GUARD_SIZE + usable`. Every usable part has a guard directly
//! below it, so an overflow of slot i faults before it can reach slot i-1,
//! even a frame that moves the stack pointer down by up to `GUARD_SIZE`
//! before touching anything (see [`GUARD_SIZE`]: the top of slot i-1 holds
//! that fiber's outermost, live frames). Because the layout is regular, the
//! slot of an address is `(addr - start) / stride`: the
//! [registry](crate::registry) finds a running fiber in O(number of pools),
//! not O(number of fibers).
//!
//! The reservation is `mmap(PROT_READ|PROT_WRITE, MAP_PRIVATE |
//! MAP_ANONYMOUS | MAP_NORESERVE)`: address space only; a page costs memory
//! when a fiber first touches it, and `highwater::reset` gives it back with
//! `madvise(MADV_DONTNEED)`. Each guard is an `mprotect` that splits the
//! mapping, so a pool of N fibers uses 2N+1 kernel VMAs (the same as N
//! separate guarded stacks); `vm.max_map_count` (65530 by default) limits a
//! process to about 32,000 fibers in all pools.

use std::io;
use std::ptr;
use std::sync::Arc;

use corosensei::stack::{Stack, StackPointer, MIN_STACK_SIZE, STACK_ALIGNMENT};

use crate::config::GUARD_SIZE;

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Where a pool's stacks are: plain numbers, for the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Lowest address of the reservation (slot 0's guard).
    pub(crate) start: usize,
    /// Bytes per slot: the guard plus the usable part.
    pub(crate) stride: usize,
    /// Number of slots.
    pub(crate) slots: usize,
    /// Guard size ([`GUARD_SIZE`]).
    pub(crate) guard: usize,
}

impl Layout {
    /// One past the reservation's highest address.
    pub(crate) fn end(&self) -> usize {
        self.start + self.stride * self.slots
    }
}

/// The mapping itself; unmapped when the last [`FiberStack`] of the pool is
/// dropped.
struct Reservation {
    start: usize,
    len: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours (made in `reserve`), and the last
        // `FiberStack` on it is gone, so no coroutine can be using it.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

/// One slot of a reservation, owned by one pool slot. Dropping the last
/// slot of a reservation unmaps it.
pub(crate) struct FiberStack {
    /// Start of this slot's guard.
    bottom: usize,
    /// One past its highest byte.
    top: usize,
    /// Keeps the memory mapped as long as this stack exists.
    _map: Arc<Reservation>,
}

/// Reserves `slots` stacks of `usable` bytes (a whole number of pages, at
/// least one page) plus a guard of [`GUARD_SIZE`] each, in one mapping.
/// Returns where they are and one owning handle per slot, in address order.
pub(crate) fn reserve(slots: usize, usable: usize) -> io::Result<(Layout, Vec<FiberStack>)> {
    let page = page_size();
    let guard = GUARD_SIZE;
    assert!(slots > 0 && usable >= page && usable.is_multiple_of(page));
    assert!(guard >= page && guard.is_multiple_of(page));
    let stride = guard + usable;
    let len = stride
        .checked_mul(slots)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
    // SAFETY: a fresh private anonymous mapping at an address of the
    // kernel's choosing; nothing else refers to it. Checked below.
    let map = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let reservation = Arc::new(Reservation {
        start: map as usize,
        len,
    });
    let layout = Layout {
        start: map as usize,
        stride,
        slots,
        guard,
    };
    let mut stacks = Vec::with_capacity(slots);
    for i in 0..slots {
        let bottom = layout.start + i * stride;
        // SAFETY: `[bottom, bottom + guard)` lies inside our fresh mapping, and
        // no code uses it yet; making it inaccessible is what a guard is.
        // On error `reservation` is dropped, which unmaps everything.
        if unsafe { libc::mprotect(bottom as *mut libc::c_void, guard, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        stacks.push(FiberStack {
            bottom,
            top: bottom + stride,
            _map: Arc::clone(&reservation),
        });
    }
    Ok((layout, stacks))
}

impl FiberStack {
    /// Highest address (exclusive): where the fiber starts.
    pub(crate) fn top(&self) -> usize {
        self.top
    }

    /// First address above the guard: the lowest usable byte.
    pub(crate) fn guard_end(&self) -> usize {
        self.bottom + GUARD_SIZE
    }

    /// Usable bytes (without the guard).
    pub(crate) fn usable(&self) -> usize {
        self.top - self.guard_end()
    }
}

// SAFETY: corosensei runs a coroutine on `[limit(), base())` and relies on:
// - both addresses aligned to STACK_ALIGNMENT: they are page boundaries of
//   our mapping (`reserve` asserts page-multiple sizes; mmap returns
//   page-aligned memory), and a page is a multiple of 16;
// - at least MIN_STACK_SIZE usable bytes: `usable >= page >= 4096`;
// - a guard at the bottom that faults on access: `reserve` mprotects
//   `[bottom, bottom + GUARD_SIZE)` PROT_NONE before any handle exists, and
//   nothing in this crate changes it back;
// - the memory staying mapped and used by nobody else while the coroutine
//   exists: the handle keeps the reservation mapped (`_map`), and `reserve`
//   makes exactly one handle per slot, so a slot's memory is only used by
//   whoever holds that handle (the pool moves it into one coroutine at a
//   time). Slots are disjoint: each is `[start + i*stride, +stride)`.
unsafe impl Stack for FiberStack {
    #[inline]
    fn base(&self) -> StackPointer {
        debug_assert!(self.top.is_multiple_of(STACK_ALIGNMENT));
        debug_assert!(self.usable() >= MIN_STACK_SIZE);
        StackPointer::new(self.top).expect("a mapped stack is not at address 0")
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        StackPointer::new(self.bottom).expect("a mapped stack is not at address 0")
    }
}
