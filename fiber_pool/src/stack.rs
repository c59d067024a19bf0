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
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// One past the reservation's highest address. No overflow: the kernel mapped
    /// `stride * slots` bytes from `start` (`reserve`), and it never maps the top page.
    pub(crate) fn end(&self) -> usize {
        self.start + self.stride * self.slots
    }
}

/// The mapping itself; unmapped when the last [`FiberStack`] of the pool is
/// dropped, which never happens once one of them was [quarantined](quarantine).
struct Reservation {
    start: usize,
    len: usize,
    /// A stack of this reservation was quarantined: the mapping stays for the
    /// rest of the process, so dropped stacks give their pages back by hand.
    quarantined: AtomicBool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours (made in `reserve`), and the last
        // `FiberStack` on it is gone (none was quarantined: a quarantined one
        // is never dropped), so no coroutine uses it and no abandoned frame on
        // it can still be referenced.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

/// One stack of a reservation, owned by one pool slot at a time. Dropping the
/// last stack of a reservation unmaps it.
pub(crate) struct FiberStack {
    /// Which stack of the reservation this is (its registry entry's index).
    index: usize,
    /// Start of this stack's guard.
    bottom: usize,
    /// One past its highest byte.
    top: usize,
    /// Keeps the memory mapped as long as this stack exists.
    map: Arc<Reservation>,
}

/// The stacks of a reservation not handed out yet: replacements for stacks
/// quarantined after an overflow. Their memory is plain untouched address
/// space until one is taken (its guard is made then), so spares cost neither
/// memory nor mappings.
pub(crate) struct Spares {
    map: Arc<Reservation>,
    layout: Layout,
    /// The next spare's index; `layout.slots` when none is left.
    next: usize,
}

impl Spares {
    /// A fresh stack, or `None` when every spare has been taken.
    pub(crate) fn take(&mut self) -> Option<io::Result<FiberStack>> {
        if self.next == self.layout.slots {
            return None;
        }
        let stack = hand_out(&self.map, &self.layout, self.next);
        if stack.is_ok() {
            self.next += 1;
        }
        Some(stack)
    }

    /// How many spares are left.
    pub(crate) fn left(&self) -> usize {
        self.layout.slots - self.next
    }
}

/// Reserves `stacks` stacks of `usable` bytes (a whole number of pages, at
/// least one page) plus a guard of [`GUARD_SIZE`] each, in one mapping, and
/// hands out the first `in_use`. Returns where they are, one owning handle per
/// stack handed out (in address order), and the rest as spares.
pub(crate) fn reserve(
    stacks: usize,
    in_use: usize,
    usable: usize,
) -> io::Result<(Layout, Vec<FiberStack>, Spares)> {
    let page = page_size();
    let guard = GUARD_SIZE;
    assert!(in_use > 0 && in_use <= stacks);
    assert!(usable >= page && usable.is_multiple_of(page));
    assert!(guard >= page && guard.is_multiple_of(page));
    let stride = guard + usable;
    let len = stride
        .checked_mul(stacks)
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
    let map = Arc::new(Reservation {
        start: map as usize,
        len,
        quarantined: AtomicBool::new(false),
    });
    let layout = Layout {
        start: map.start,
        stride,
        slots: stacks,
        guard,
    };
    // On error `map` is dropped with the stacks made so far, which unmaps
    // everything.
    let handed = (0..in_use)
        .map(|i| hand_out(&map, &layout, i))
        .collect::<io::Result<Vec<_>>>()?;
    let spares = Spares {
        map,
        layout,
        next: in_use,
    };
    Ok((layout, handed, spares))
}

/// Makes stack `index`'s guard and the handle that owns the stack.
fn hand_out(map: &Arc<Reservation>, layout: &Layout, index: usize) -> io::Result<FiberStack> {
    let bottom = layout.start + index * layout.stride;
    // SAFETY: `[bottom, bottom + guard)` lies inside our mapping (`index <
    // layout.slots`), in a stack no handle exists for yet, so no code uses it;
    // making it inaccessible is what a guard is.
    if unsafe { libc::mprotect(bottom as *mut libc::c_void, layout.guard, libc::PROT_NONE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FiberStack {
        index,
        bottom,
        top: bottom + layout.stride,
        map: Arc::clone(map),
    })
}

/// Takes `stack` out of use for the rest of the process: its memory stays
/// mapped and untouched, and its reservation is never unmapped, even after
/// its pool is dropped. An overflow abandons the frames on it without
/// running their destructors, and something may still refer to them: a
/// thread started by `std::thread::scope` that borrows a local, a pinned value
/// linked into a structure elsewhere, a pointer sent through a channel.
/// Reusing the stack would turn each such reference into a use-after-free;
/// leaking it keeps them pointing at the memory they borrowed (the abandoned
/// frames are leaked, which is memory-safe).
pub(crate) fn quarantine(stack: FiberStack) {
    stack.map.quarantined.store(true, Ordering::Relaxed);
    std::mem::forget(stack);
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        if self.map.quarantined.load(Ordering::Relaxed) {
            // The reservation stays mapped: give this stack's pages back.
            // SAFETY: this handle owns the stack, and it is being dropped, so no
            // coroutine runs on it; it was never quarantined (that forgets the
            // handle), so no abandoned frame on it can be referenced. DONTNEED
            // on private anonymous memory only zeroes it.
            unsafe {
                libc::madvise(
                    self.guard_end() as *mut libc::c_void,
                    self.usable(),
                    libc::MADV_DONTNEED,
                );
            }
        }
    }
}

impl FiberStack {
    /// Which stack of its reservation this is: its registry entry's index.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

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
//   exists: the handle keeps the reservation mapped (`map`), and `hand_out`
//   makes exactly one handle per stack (`reserve` for the first ones, `Spares`
//   for the rest, each index once), so a stack's memory is only used by
//   whoever holds that handle (the pool moves it into one coroutine at a
//   time), and a quarantined stack's handle is forgotten, never handed out
//   again. Stacks are disjoint: each is `[start + i*stride, +stride)`.
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
