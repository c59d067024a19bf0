//! The global, lock-free registry of fiber stacks, searched by address.
//!
//! A signal handler must find the fiber that faulted without locks or
//! allocation, and `Lent` must find the fiber it is created on. Neither may use
//! a thread-local: may moves the carrying coroutine (and with it the fiber)
//! between worker threads whenever it yields. So every pool slot owns one
//! [`StackEntry`] in a global singly linked list that only grows; entries of
//! dropped pools are unclaimed and reused by later pools. Readers walk the
//! list with acquire loads and never block.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use corosensei::trap::CoroutineTrapHandler;

use crate::lent::Ledger;
use crate::signal::Outcome;
use crate::stack::FiberStack;

/// One slot's stack as the signal handler and `Lent` see it.
/// (Internal; public only so the docs can link it.)
pub struct StackEntry {
    /// Owned by a live pool slot.
    claimed: AtomicBool,
    /// A fiber is running (or suspended inside may I/O) on this stack.
    running: AtomicBool,
    /// Lowest address of the mapping (start of the guard page).
    bottom: AtomicUsize,
    /// First usable address (end of the guard page).
    guard_end: AtomicUsize,
    /// One past the highest address.
    top: AtomicUsize,
    /// The slot's ledger of lent resources; valid while `claimed`.
    ledger: AtomicPtr<Ledger>,
    /// How to reset the running coroutine; written only by the slot's owner
    /// while `running` is false, read by the signal handler only after it saw
    /// `running` true on a stack that contains its own stack pointer.
    trap: UnsafeCell<Option<CoroutineTrapHandler<Outcome>>>,
    /// Next entry; immutable once the entry is published.
    next: *const StackEntry,
}

// SAFETY: all shared fields are atomics except `trap` and `next`. `next` is
// written before the entry is published (release CAS on HEAD) and never again.
// `trap` is written only by the claiming slot's owner while `running` is false
// (no fiber on the stack), and read only by a signal handler whose stack
// pointer lies in this stack, i.e. by the very thread executing the fiber
// after `running` was set with release ordering; so reads and writes never
// overlap.
unsafe impl Sync for StackEntry {}

static HEAD: AtomicPtr<StackEntry> = AtomicPtr::new(ptr::null_mut());

fn entries() -> impl Iterator<Item = &'static StackEntry> {
    let mut cur = HEAD.load(Ordering::Acquire) as *const StackEntry;
    std::iter::from_fn(move || {
        // SAFETY: entries are leaked (never freed) and fully initialised
        // before being published with a release store, so every non-null
        // pointer reachable from HEAD is a valid `&'static StackEntry`.
        let entry = unsafe { cur.as_ref() }?;
        cur = entry.next;
        Some(entry)
    })
}

impl StackEntry {
    /// Registers `stack` (owned by a pool slot whose ledger is `ledger`).
    pub(crate) fn claim(stack: &FiberStack, ledger: *const Ledger) -> &'static StackEntry {
        let entry = entries()
            .find(|e| {
                e.claimed
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .unwrap_or_else(|| {
                let entry: &'static mut StackEntry = Box::leak(Box::new(StackEntry {
                    claimed: AtomicBool::new(true),
                    running: AtomicBool::new(false),
                    bottom: AtomicUsize::new(0),
                    guard_end: AtomicUsize::new(0),
                    top: AtomicUsize::new(0),
                    ledger: AtomicPtr::new(ptr::null_mut()),
                    trap: UnsafeCell::new(None),
                    next: ptr::null(),
                }));
                let mut head = HEAD.load(Ordering::Acquire);
                loop {
                    entry.next = head;
                    match HEAD.compare_exchange_weak(
                        head,
                        entry,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(now) => head = now,
                    }
                }
                entry
            });
        entry.bottom.store(stack.bottom(), Ordering::Relaxed);
        entry.guard_end.store(stack.guard_end(), Ordering::Relaxed);
        entry.top.store(stack.top(), Ordering::Relaxed);
        entry.ledger.store(ledger.cast_mut(), Ordering::Release);
        entry
    }

    /// Gives the entry back for reuse (the slot's stack is being unmapped).
    pub(crate) fn unclaim(&self) {
        debug_assert!(!self.running.load(Ordering::Relaxed));
        self.top.store(0, Ordering::Relaxed);
        self.ledger.store(ptr::null_mut(), Ordering::Relaxed);
        self.claimed.store(false, Ordering::Release);
    }

    /// Marks a fiber as running on this stack, resettable through `trap`.
    pub(crate) fn begin(&self, trap: CoroutineTrapHandler<Outcome>) {
        // SAFETY: only the slot's owner calls begin/end, and `running` is
        // false here, so no signal handler reads `trap` (see `Sync` above).
        unsafe { *self.trap.get() = Some(trap) };
        self.running.store(true, Ordering::Release);
    }

    /// Marks the stack idle again.
    pub(crate) fn end(&self) {
        self.running.store(false, Ordering::Release);
    }

    /// The running entry whose stack (guard page included) contains `addr`.
    /// Lock-free and allocation-free: callable from a signal handler.
    pub(crate) fn find_running(addr: usize) -> Option<&'static StackEntry> {
        entries().find(|e| {
            e.running.load(Ordering::Acquire)
                && e.bottom.load(Ordering::Relaxed) <= addr
                && addr < e.top.load(Ordering::Relaxed)
        })
    }

    /// Is a fault at `fault_addr`, with the stack pointer at `sp` (inside this
    /// stack), an overflow: a touch of the guard page, or the stack pointer
    /// itself inside the guard page?
    pub(crate) fn is_overflow(&self, fault_addr: usize, sp: usize) -> bool {
        let bottom = self.bottom.load(Ordering::Relaxed);
        let guard_end = self.guard_end.load(Ordering::Relaxed);
        (bottom..guard_end).contains(&fault_addr) || (bottom..guard_end).contains(&sp)
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

    /// First usable byte of the stack (above the guard page).
    pub(crate) fn guard_end(&self) -> usize {
        self.guard_end.load(Ordering::Relaxed)
    }

    /// The ledger of the slot owning this stack.
    pub(crate) fn ledger(&self) -> *const Ledger {
        self.ledger.load(Ordering::Acquire)
    }
}
