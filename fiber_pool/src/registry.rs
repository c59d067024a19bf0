//! The global, lock-free registry of pool stack regions, searched by address.
//!
//! The signal handler must find the fiber that faulted without locks or
//! allocation; `Lent`, [`reserve_stack`](crate::reserve_stack) and with it
//! [`FiberSafeAlloc`](crate::FiberSafeAlloc) (so: every allocation) must find
//! the fiber they run on, cheaply. None of them uses a thread-local that is lazily
//! initialised or has a destructor: the signal handler may read no lazily initialised
//! state, and such a thread-local would allocate on first use (inside the allocator,
//! in `FiberSafeAlloc`'s case). The thread's last look below is a plain value.
//!
//! Each pool's stacks are one contiguous reservation (see `stack`), so the
//! registry holds one `Node` per *pool*: `[start, end)`, the slot stride,
//! and the pool's array of `StackEntry` (one per slot). The nodes are a
//! static table of [`MAX_POOLS`]; a lookup scans the ones ever used (as many
//! as the most pools alive at once) for the range holding the address, and
//! there computes `slot = (addr - start) / stride`: O(number of pools), two
//! independent loads per pool and a division, no locks, no allocation, no
//! thread-local.
//!
//! A node's fields change only when a pool claims or releases it, under a
//! sequence counter (a seqlock): a hit is validated, and a node whose counter
//! is odd (free or being written) or changed meanwhile is skipped. Skipping
//! never loses a running fiber: a node is written only when its pool is
//! created or dropped, and neither happens while a fiber of that pool runs.
//!
//! **The last look, per thread.** Every allocation looks its stack up (on a fiber,
//! to check the margin; off one, to find it is not), and a thread runs on the same
//! few stacks over and over, so each thread remembers its last look in a
//! thread-local that needs no initialisation and has no destructor: reading it never
//! allocates and never fails, even while the thread ends. It keeps two: the last hit,
//! one slot's range and entry, and the last miss, the aligned `MISS_WINDOW` around
//! the address when no pool's region touches it (a may coroutine's stack, a
//! thread's), since a fiber and its carrier take turns. The memory is
//! trusted only while no pool has been registered or dropped since
//! (`LAYOUT_GENERATION`). The signal handler does not use it (a signal can
//! interrupt the update of the thread's record): it scans.
//!
//! **The hull.** Before either look, an address below the lowest start or past the
//! highest end of every region ever registered is a miss after two compares. The
//! hull only widens: a dropped pool's addresses stay inside it, and are then found
//! missing by the look or the table as before.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::ptr::{self, NonNull};
use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::Arc;

use corosensei::trap::CoroutineTrapHandler;
use corosensei::Yielder;

use crate::ledger::Ledger;
use crate::outcome::Outcome;
use crate::stack::Layout;

/// One slot's stack as the signal handler, `Lent`, the context lookup and the pool
/// see it.
pub(crate) struct StackEntry {
    /// A fiber is running (or suspended inside may I/O) on this stack.
    running: AtomicBool,
    /// Lowest address of the slot (start of the guard).
    bottom: usize,
    /// Bytes of the slot, guard included: its stack is `[bottom, bottom + stride)`.
    stride: usize,
    /// First usable address (end of the guard).
    guard_end: usize,
    /// The slot's ledger of lent resources; lives as long as the pool.
    ledger: *const Ledger,
    /// How to reset the running coroutine; written only by the slot's owner
    /// while `running` is false, read by the signal handler only after it saw
    /// `running` true on a stack that contains its own stack pointer.
    trap: UnsafeCell<Option<CoroutineTrapHandler<Outcome>>>,
    /// The running job's label; written with `trap`, under the same rule.
    label: UnsafeCell<&'static str>,
    /// The running coroutine's yielder, for [`on_carrier`](crate::on_carrier): set
    /// by the fiber itself when it starts, cleared before it ends; null otherwise.
    yielder: AtomicPtr<Yielder<(), ()>>,
    /// Jobs begun on this stack: tells a `Lent` made by one job from a later one.
    generation: AtomicU64,
    /// Set by [`reserve_stack`](crate::reserve_stack) just before it overflows on
    /// purpose: the overflow then struck at a safe point. Cleared by `begin`.
    safe_point: AtomicBool,
    /// The running job's context and pool: written by the slot's owner before
    /// `begin` and taken back after `end`, and by the job itself (a context made on
    /// its first [`current`](crate::current)); read only by the job. The job and its
    /// carrier are one line of control (the carrier is suspended in `resume` while the
    /// job runs), so the two never touch it at once.
    job: UnsafeCell<Job>,
}

/// What `StackEntry::job` holds for the running job. The registry is below the
/// contexts and pools it holds (the signal handler, the allocator and the switch to
/// the carrier look entries up, and a context's locks are taken on the carrier), so it
/// holds them without naming their types: only `context` puts a context in and reads
/// it back (`context::of_job`), only `pool` the pool.
pub(crate) struct Job {
    /// Its context's state (a `context::Shared`); `None` until one is asked for, when
    /// it was run without one.
    pub(crate) context: Option<JobContext>,
    /// The pool it runs in (a `pool::Inner`, alive while it runs: `run` borrows it).
    pub(crate) pool: *const (),
}

/// A job's context as its entry keeps it (see [`Job`]).
pub(crate) type JobContext = Arc<dyn Any + Send + Sync>;

// SAFETY: `bottom`, `guard_end` and `ledger` are written before the entry is
// published and never again. `job` is touched only by the slot's owner between jobs
// and by the job running on the stack (one line of control, see the field). `trap` and `label` are written only by the slot's owner while
// `running` is false (no fiber on the stack), and read only by a signal
// handler whose stack pointer lies in this stack, i.e. by the very thread
// executing the fiber after `running` was set with release ordering; so reads
// and writes never overlap (`label` is read only by code on or carrying this
// fiber, after it saw `running`). The other fields are atomics. The ledger pointer is only dereferenced by code
// running on this slot's fiber (the pool, and so the ledger, is alive then).
unsafe impl Sync for StackEntry {}
// SAFETY: as above; the entry holds no thread-bound state.
unsafe impl Send for StackEntry {}

/// Most pools alive at once in a process (each holds one registry node).
pub const MAX_POOLS: usize = 256;

/// A pool's region in the global table; reused after its pool is dropped.
struct Node {
    /// Even while a pool's region is published here, odd while free or
    /// being (re)written (the seqlock counter).
    seq: AtomicUsize,
    /// Owned by a live pool (or being set up for one).
    claimed: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    stride: AtomicUsize,
    /// The pool's entries, `(end - start) / stride` of them.
    entries: AtomicPtr<StackEntry>,
}

impl Node {
    const fn free() -> Node {
        Node {
            seq: AtomicUsize::new(1),
            claimed: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            stride: AtomicUsize::new(1),
            entries: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

/// The table: a contiguous static array rather than a linked list, so that
/// a lookup's loads do not depend on each other (a list walk cost about
/// 2 ns per pool in pointer chasing; see the `pool_bench` example).
static NODES: [Node; MAX_POOLS] = [const { Node::free() }; MAX_POOLS];
/// Nodes `[0, USED)` have been claimed at least once; lookups scan only
/// those. Claims take the lowest free node, so USED is the most pools ever
/// alive at once.
static USED: AtomicUsize = AtomicUsize::new(0);

/// Bumped whenever a pool's region is published or withdrawn; a thread's remembered
/// look ([`LAST_HIT`], [`LAST_MISS`]) is used only while it is unchanged. Never
/// [`WRITING`]: it would take 2^64 pools.
static LAYOUT_GENERATION: AtomicU64 = AtomicU64::new(0);

/// The lowest start and the highest end of every region ever published, only ever
/// widened (a withdrawn region's addresses stay inside): an address outside them is
/// no pool's, decided without the table or a thread's last miss. may's coroutine
/// stacks, mapped after the pools, mostly lie outside, so a carrier's checks between
/// fibers rarely scan. Relaxed is enough: a thread looks up only its own stack
/// pointer, and a thread running on a region's stack got its job through a hand-off
/// (a channel, a lock) that came after the region's registration, so it sees each
/// bound at least as wide as the registration left it (each is only ever widened).
static HULL_START: AtomicUsize = AtomicUsize::new(usize::MAX);
static HULL_END: AtomicUsize = AtomicUsize::new(0);

/// A thread's last hit or miss of [`find`]: `[low, high)` is one slot's stack
/// (`entry` non-null) or a window of no pool's (`entry` null), seen in `generation`
/// of [`LAYOUT_GENERATION`]. Fields of their own, each a plain `Cell`, written in an
/// order a signal handler interrupting the write could not misread (see
/// [`Look::remember`]): no handler reads it today (the overflow handler scans), but
/// [`crate::stack_remaining`] and the checks are public.
struct Look {
    low: Cell<usize>,
    high: Cell<usize>,
    entry: Cell<*const StackEntry>,
    generation: Cell<u64>,
}

/// A [`Look::generation`] no layout has: the record is being written.
const WRITING: u64 = u64::MAX;

/// The size (a power of two) of the aligned window around an address no pool's
/// region holds that a thread remembers as such: a may coroutine's stack is at least
/// this large, so the calls a carrier makes between two fibers mostly fall in it.
pub(crate) const MISS_WINDOW: usize = 64 * 1024;

impl Look {
    const fn empty() -> Look {
        Look {
            low: Cell::new(0),
            high: Cell::new(0),
            entry: Cell::new(ptr::null()),
            generation: Cell::new(WRITING),
        }
    }

    /// The entry (null for a miss) if `addr` lies in the range seen in `generation`.
    #[inline]
    fn holds(&self, addr: usize, generation: u64) -> Option<*const StackEntry> {
        // The generation first: a write in progress shows `WRITING`, and the fields
        // are read only after a matching one (what `remember` stored last).
        let seen = self.generation.get();
        compiler_fence(Ordering::SeqCst);
        (seen == generation && addr >= self.low.get() && addr < self.high.get())
            .then(|| self.entry.get())
    }

    /// Replaces the record: marked as being written first, and valid again only once
    /// every field is in place.
    fn remember(&self, low: usize, high: usize, entry: *const StackEntry, generation: u64) {
        self.generation.set(WRITING);
        compiler_fence(Ordering::SeqCst);
        self.low.set(low);
        self.high.set(high);
        self.entry.set(entry);
        compiler_fence(Ordering::SeqCst);
        self.generation.set(generation);
    }
}

thread_local! {
    /// This thread's last hit (a [`Look`] with an entry).
    static LAST_HIT: Look = const { Look::empty() };
    /// This thread's last miss (a [`Look`] without one).
    static LAST_MISS: Look = const { Look::empty() };
}

fn nodes() -> &'static [Node] {
    let used = USED.load(Ordering::Acquire).min(MAX_POOLS);
    &NODES[..used]
}

/// More than [`MAX_POOLS`] pools alive at once.
#[derive(Debug)]
pub(crate) struct TooManyPools;

/// A pool's registration: its stacks can be found by address until this is
/// dropped. Owns the pool's entries.
pub(crate) struct Region {
    node: &'static Node,
    /// The entries, from `Box::leak` (so that the pointer published in the
    /// node and this one are the same, never invalidated by a move of a `Box`);
    /// freed in `drop`, after the node is unpublished.
    entries: NonNull<[StackEntry]>,
}

// SAFETY: `Region` owns its entries like a `Box<[StackEntry]>` would, and
// `StackEntry` is `Send` and `Sync`; the node is a `&'static` of atomics.
unsafe impl Send for Region {}
// SAFETY: as above: shared access hands out `&StackEntry` only.
unsafe impl Sync for Region {}

impl Region {
    /// Publishes a pool's stacks; `ledgers[i]` is slot i's ledger (kept
    /// alive by the pool for at least as long as this `Region`).
    pub(crate) fn register(
        layout: Layout,
        ledgers: &[*const Ledger],
    ) -> Result<Region, TooManyPools> {
        assert_eq!(ledgers.len(), layout.slots);
        let entries: Box<[StackEntry]> = ledgers
            .iter()
            .enumerate()
            .map(|(i, &ledger)| {
                let bottom = layout.start + i * layout.stride;
                StackEntry {
                    running: AtomicBool::new(false),
                    bottom,
                    stride: layout.stride,
                    guard_end: bottom + layout.guard,
                    ledger,
                    trap: UnsafeCell::new(None),
                    label: UnsafeCell::new(""),
                    yielder: AtomicPtr::new(ptr::null_mut()),
                    generation: AtomicU64::new(0),
                    safe_point: AtomicBool::new(false),
                    job: UnsafeCell::new(Job {
                        context: None,
                        pool: ptr::null(),
                    }),
                }
            })
            .collect();
        let (index, node) = NODES
            .iter()
            .enumerate()
            .find(|(_, n)| {
                n.claimed
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(TooManyPools)?;
        USED.fetch_max(index + 1, Ordering::AcqRel);
        // The node is claimed by us and its counter is odd: readers skip it.
        let seq = node.seq.load(Ordering::Relaxed);
        debug_assert!(seq % 2 == 1);
        // The writer's half of the seqlock: a reader whose field loads see the
        // stores below synchronises with this fence (through its own acquire
        // fence), so its second load of the counter sees the odd value (or
        // later) and it retries. Without it, nothing orders the previous
        // pool's odd store (made on another thread) before these stores for
        // that reader, which could then take a mix of two pools' fields for one.
        fence(Ordering::Release);
        let entries = NonNull::from(Box::leak(entries));
        HULL_START.fetch_min(layout.start, Ordering::Relaxed);
        HULL_END.fetch_max(layout.end(), Ordering::Relaxed);
        node.start.store(layout.start, Ordering::Relaxed);
        node.end.store(layout.end(), Ordering::Relaxed);
        node.stride.store(layout.stride, Ordering::Relaxed);
        node.entries
            .store(entries.as_ptr().cast::<StackEntry>(), Ordering::Relaxed);
        // Release: a reader that sees the even value sees the fields above.
        node.seq.store(seq.wrapping_add(1), Ordering::Release);
        // A thread that remembers a slot at these addresses (a pool dropped before this
        // one took its place) looks again.
        LAYOUT_GENERATION.fetch_add(1, Ordering::Release);
        Ok(Region { node, entries })
    }

    /// Slot `i`'s entry.
    pub(crate) fn entry(&self, i: usize) -> &StackEntry {
        // SAFETY: `entries` is the leaked box of `register`, alive until `drop`
        // (which needs `&mut self`), and only ever read through shared references.
        unsafe { &self.entries.as_ref()[i] }
    }

    fn entries(&self) -> &[StackEntry] {
        // SAFETY: as in `entry`.
        unsafe { self.entries.as_ref() }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        debug_assert!(self
            .entries()
            .iter()
            .all(|e| !e.running.load(Ordering::Relaxed)));
        let node = self.node;
        // Odd again: from here on readers skip the node. The fence keeps the
        // field stores below (and the free of `entries` after this function)
        // from being seen before the odd counter.
        let seq = node.seq.load(Ordering::Relaxed);
        node.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        node.start.store(0, Ordering::Relaxed);
        node.end.store(0, Ordering::Relaxed);
        node.entries.store(ptr::null_mut(), Ordering::Relaxed);
        node.claimed.store(false, Ordering::Release);
        // No thread trusts a remembered hit in this region from here on.
        LAYOUT_GENERATION.fetch_add(1, Ordering::Release);
        // A reader that validated this node before the counter went odd, and
        // found its address inside, is running on one of this pool's stacks,
        // which cannot be: the pool is being dropped, so no fiber of it runs.
        // SAFETY: `entries` came from `Box::leak` in `register` and is freed
        // once, here; the node no longer publishes it, and no reference from
        // `entry` outlives `&self`.
        drop(unsafe { Box::from_raw(self.entries.as_ptr()) });
    }
}

/// The entry of the slot whose stack (guard included) contains `addr`, the caller's
/// own stack pointer, whether or not a fiber runs on it: the thread's last look
/// first, else [`scan`]. Lock-free and allocation-free: callable from the global
/// allocator (the signal handler uses [`scan`], see the module comment).
///
/// The reference is valid while the pool lives; callers use it only while
/// running on that very stack, which keeps the pool alive (`run` borrows it).
/// Unbounded lifetime for that reason; do not keep it.
#[inline]
fn find(addr: usize) -> Option<&'static StackEntry> {
    let generation = LAYOUT_GENERATION.load(Ordering::Acquire);
    if let Some(entry) = LAST_HIT.with(|hit| hit.holds(addr, generation)) {
        // SAFETY: `scan` found this entry for this range under this generation, which
        // is still current: a region registered or dropped since would have bumped it
        // (no pool can take over the range without a registration, and a thread that
        // runs on a new pool's stacks learned of it, through the hand-off of the job,
        // after its registration). A dropped pool's memory mapped again as a new pool's
        // stack is a registration too, which the thread learns of the same way; that
        // the unmapping itself orders nothing is why the generation, not the address,
        // decides. It stays alive while used, for the reason the
        // table's own hits do: callers pass their own stack pointer, and the pool
        // owning that memory cannot be dropped while a call runs on it.
        return Some(unsafe { &*entry });
    }
    find_past_last_hit(addr, generation)
}

/// [`find`] when the thread's last hit does not hold `addr`: its last miss, else
/// [`scan`]. Out of line, so that the hit (every check of a fiber's own stack but the
/// first after a switch) is a few inlined loads and compares.
#[inline(never)]
fn find_past_last_hit(addr: usize, generation: u64) -> Option<&'static StackEntry> {
    if addr < HULL_START.load(Ordering::Relaxed) || addr >= HULL_END.load(Ordering::Relaxed) {
        return None;
    }
    if LAST_MISS
        .with(|miss| miss.holds(addr, generation))
        .is_some()
    {
        return None;
    }
    let Some(entry) = scan(addr) else {
        remember_miss(addr, generation);
        return None;
    };
    let high = entry.bottom + entry.stride;
    LAST_HIT.with(|hit| hit.remember(entry.bottom, high, entry, generation));
    Some(entry)
}

/// Remembers the [`MISS_WINDOW`] around `addr` as no fiber's, unless a pool's region
/// touches it.
fn remember_miss(addr: usize, generation: u64) {
    let low = addr & !(MISS_WINDOW - 1);
    let high = low.saturating_add(MISS_WINDOW);
    // The regions as published now; one being written (odd counter) might be about
    // to cover the window, so then nothing is remembered. A region published after
    // this look bumps the generation, which forgets the window.
    let clear = nodes().iter().all(|node| {
        let seq = node.seq.load(Ordering::Acquire);
        let (start, end) = (
            node.start.load(Ordering::Relaxed),
            node.end.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        let steady = node.seq.load(Ordering::Relaxed) == seq;
        let free = seq % 2 == 1 && !node.claimed.load(Ordering::Relaxed);
        (steady && seq % 2 == 0 && (end <= low || start >= high)) || (steady && free)
    });
    if clear {
        LAST_MISS.with(|miss| miss.remember(low, high, ptr::null(), generation));
    }
}

/// [`find`] by the table alone: what the signal handler uses (it must not read a
/// record the interrupted code may be writing), with an `addr` that is the
/// interrupted fiber's stack pointer. Lock-free and allocation-free.
#[inline]
fn scan(addr: usize) -> Option<&'static StackEntry> {
    for node in nodes() {
        // The range first, unvalidated (a miss needs no validation: a node
        // being rewritten is never the region of a running fiber)...
        let start = node.start.load(Ordering::Relaxed);
        let end = node.end.load(Ordering::Relaxed);
        if addr < start || addr >= end {
            continue;
        }
        // ...then the seqlock read of everything on a hit.
        let seq = node.seq.load(Ordering::Acquire);
        if seq % 2 == 1 {
            continue;
        }
        let start = node.start.load(Ordering::Relaxed);
        let end = node.end.load(Ordering::Relaxed);
        let stride = node.stride.load(Ordering::Relaxed);
        let entries = node.entries.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if node.seq.load(Ordering::Relaxed) != seq
            || entries.is_null()
            || addr < start
            || addr >= end
        {
            // Being rewritten: it is not the region of a running fiber.
            continue;
        }
        let slot = (addr - start) / stride;
        // SAFETY: the counter did not change while we read the fields, so
        // they describe one published region, whose `entries` array has
        // `(end - start) / stride > slot` elements and was alive at that
        // moment. `addr` (the caller's own stack, or the interrupted fiber's
        // stack pointer) lay in that region's mapping then; only a fiber of
        // that pool runs there, and the pool, and with it the array, lives
        // as long as that fiber does.
        return Some(unsafe { &*entries.add(slot) });
    }
    None
}

impl StackEntry {
    /// The running entry whose stack (guard included) contains `addr`, the caller's
    /// own stack pointer. Lock-free and allocation-free; the signal handler uses
    /// [`StackEntry::find_running_in_handler`]. See [`find`] for how long the
    /// reference may be used.
    #[inline]
    pub(crate) fn find_running(addr: usize) -> Option<&'static StackEntry> {
        find(addr).filter(|e| e.running.load(Ordering::Acquire))
    }

    /// [`StackEntry::find_running`] for the signal handler: by the table alone (see
    /// [`scan`]).
    #[inline]
    pub(crate) fn find_running_in_handler(addr: usize) -> Option<&'static StackEntry> {
        scan(addr).filter(|e| e.running.load(Ordering::Acquire))
    }

    /// Marks a fiber running job `label` on this stack, resettable through `trap`.
    pub(crate) fn begin(&self, trap: CoroutineTrapHandler<Outcome>, label: &'static str) {
        // SAFETY: only the slot's owner calls begin/end, and `running` is
        // false here, so no signal handler or fiber reads `trap` or `label`
        // (see `Sync` above).
        unsafe {
            *self.trap.get() = Some(trap);
            *self.label.get() = label;
        }
        self.safe_point.store(false, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.running.store(true, Ordering::Release);
    }

    /// Marks the stack idle again.
    pub(crate) fn end(&self) {
        self.yielder.store(ptr::null_mut(), Ordering::Relaxed);
        self.running.store(false, Ordering::Release);
    }

    /// The running job's label. Call only from code running on this stack (or
    /// carrying it), between `begin` and `end`.
    pub(crate) fn label(&self) -> &'static str {
        // SAFETY: written only by `begin`, before `running` was set (release),
        // which our caller observed (acquire) when it found this entry running.
        unsafe { *self.label.get() }
    }

    /// Records (or, with null, forgets) the yielder of the coroutine running here.
    pub(crate) fn set_yielder(&self, y: *const Yielder<(), ()>) {
        self.yielder.store(y.cast_mut(), Ordering::Relaxed);
    }

    /// The yielder recorded by the fiber running here, or null.
    pub(crate) fn yielder(&self) -> *const Yielder<(), ()> {
        self.yielder.load(Ordering::Relaxed)
    }

    /// Which job on this stack this is (see `generation`).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Notes that the coming overflow is deliberate, at a safe point.
    pub(crate) fn mark_safe_point(&self) {
        self.safe_point.store(true, Ordering::Relaxed);
    }

    /// Did the last overflow strike at a safe point? Read by the carrier after it.
    pub(crate) fn struck_at_safe_point(&self) -> bool {
        self.safe_point.load(Ordering::Relaxed)
    }

    /// Is a fault at `fault_addr`, with the stack pointer at `sp` (inside this
    /// stack), an overflow: a touch of the guard, or the stack pointer itself
    /// inside the guard?
    pub(crate) fn is_overflow(&self, fault_addr: usize, sp: usize) -> bool {
        let guard = self.bottom..self.guard_end;
        guard.contains(&fault_addr) || guard.contains(&sp)
    }

    /// The trap handler of the fiber running here.
    ///
    /// # Safety
    ///
    /// Call only from the thread executing the fiber on this stack (the
    /// signal handler, after `find_running(sp)` returned this entry), so that
    /// `begin` cannot be writing it at the same time.
    pub(crate) unsafe fn trap(&self) -> Option<CoroutineTrapHandler<Outcome>> {
        // SAFETY: per the contract, no concurrent writer exists.
        unsafe { (*self.trap.get()).clone() }
    }

    /// First usable byte of the stack (above the guard).
    #[inline]
    pub(crate) fn guard_end(&self) -> usize {
        self.guard_end
    }

    /// Hands the next job its context (if it has one) and its pool.
    ///
    /// # Safety
    ///
    /// Only the slot's owner calls it, between jobs (before `begin`), so that no job
    /// reads the cell meanwhile.
    pub(crate) unsafe fn set_job(&self, context: Option<JobContext>, pool: *const ()) {
        // SAFETY: per the contract, nobody else touches the cell now.
        unsafe { *self.job.get() = Job { context, pool } };
    }

    /// Takes the ended job's context back, to drop it on the carrier.
    ///
    /// # Safety
    ///
    /// As for [`set_job`](Self::set_job): the slot's owner, after `end`.
    pub(crate) unsafe fn take_context(&self) -> Option<JobContext> {
        // SAFETY: per the contract, nobody else touches the cell now.
        unsafe { (*self.job.get()).context.take() }
    }

    /// The running job's context, made by `make` (and kept for the rest of the job)
    /// on the first call when the job was run without one.
    ///
    /// # Safety
    ///
    /// Call only from the job running on this stack (found by its own stack pointer),
    /// or from its carrier while that job is parked in
    /// [`on_carrier`](crate::on_carrier) (the same line of control), so that neither
    /// the owner nor another call touches the cell meanwhile.
    pub(crate) unsafe fn context(&self, make: impl FnOnce() -> JobContext) -> JobContext {
        // SAFETY: per the contract, we are the only code touching the cell; nothing
        // in here reaches it again (`make` allocates a new context, which does not).
        let job = unsafe { &mut *self.job.get() };
        Arc::clone(job.context.get_or_insert_with(make))
    }

    /// The pool of the running job; valid while the job runs.
    ///
    /// # Safety
    ///
    /// As for [`context`](Self::context).
    pub(crate) unsafe fn pool(&self) -> *const () {
        // SAFETY: per the contract, no writer exists meanwhile.
        unsafe { (*self.job.get()).pool }
    }

    /// The ledger of the slot owning this stack.
    pub(crate) fn ledger(&self) -> *const Ledger {
        self.ledger
    }
}
