//! Which job holds each thread that carries fibers, and since when: the data a stall
//! watchdog reads ([`jobs_running_longer_than`]).
//!
//! A fiber runs *user code* from the moment its carrier resumes it until it goes back
//! to the carrier: at [`on_carrier`](crate::on_carrier) (every may call of ours), at
//! its end, or at an overflow. While it does, it holds its worker thread: no other
//! coroutine of that thread runs. A job that stays there long is blocking the thread
//! (a blocking std call, a CPU loop, a lock left behind by an abandoned fiber).
//!
//! Each thread that carries fibers claims one `ThreadSlot` of a static table on its
//! first resume (on the carrier's stack, where the thread-local's registration may
//! allocate) and gives it back when the thread ends. The slot is written only by its
//! thread, at every switch: the label and a coarse monotonic timestamp when a fiber is
//! resumed, zero when it comes back. Writes are a few relaxed stores under a
//! single-writer sequence counter; readers (the watchdog thread) retry on a torn read.
//! No lock, no allocation: about 10 ns per switch, mostly the coarse clock read.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::clock::coarse_nanos;

/// Most threads carrying fibers at once (may workers, plus threads calling `run`
/// directly). A thread beyond it is simply not tracked.
pub const MAX_CARRIER_THREADS: usize = 1024;

/// One thread's record.
struct ThreadSlot {
    claimed: AtomicBool,
    /// Odd while the owner writes `label_*` and `since`.
    seq: AtomicU64,
    label_ptr: AtomicUsize,
    label_len: AtomicUsize,
    /// When the running fiber was resumed (coarse nanoseconds, `clock.rs`); 0 while
    /// the thread is not running fiber code.
    since: AtomicU64,
    /// Resumes so far on this slot: tells one holding from the next.
    resumes: AtomicU64,
}

impl ThreadSlot {
    const fn free() -> ThreadSlot {
        ThreadSlot {
            claimed: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            label_ptr: AtomicUsize::new(0),
            label_len: AtomicUsize::new(0),
            since: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
        }
    }
}

static SLOTS: [ThreadSlot; MAX_CARRIER_THREADS] =
    [const { ThreadSlot::free() }; MAX_CARRIER_THREADS];
/// Slots `[0, USED)` have been claimed at least once.
static USED: AtomicUsize = AtomicUsize::new(0);

/// "No slot yet" in [`MINE`].
const NONE: usize = usize::MAX;
/// "No slot to be had" (table full) in [`MINE`].
const FULL: usize = usize::MAX - 1;

thread_local! {
    /// This thread's slot index: a const thread-local without a destructor, so
    /// reading it never allocates (it is read on fibers too).
    static MINE: Cell<usize> = const { Cell::new(NONE) };
    /// Gives the slot back when the thread ends.
    static OWNER: RefCell<Option<Owner>> = const { RefCell::new(None) };
}

struct Owner(usize);

impl Drop for Owner {
    fn drop(&mut self) {
        let slot = &SLOTS[self.0];
        slot.since.store(0, Ordering::Relaxed);
        slot.claimed.store(false, Ordering::Release);
        let _ = MINE.try_with(|m| m.set(FULL));
    }
}

/// This thread's slot, claimed on first use. Call on a carrier's stack (the first
/// call registers a thread-local destructor, which may allocate).
fn mine() -> Option<&'static ThreadSlot> {
    let i = MINE.with(Cell::get);
    match i {
        FULL => None,
        NONE => {
            let claimed = SLOTS.iter().position(|s| {
                s.claimed
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            });
            match claimed {
                Some(i) => {
                    USED.fetch_max(i + 1, Ordering::AcqRel);
                    MINE.with(|m| m.set(i));
                    let _ = OWNER.try_with(|o| *o.borrow_mut() = Some(Owner(i)));
                    Some(&SLOTS[i])
                }
                None => {
                    MINE.with(|m| m.set(FULL));
                    None
                }
            }
        }
        i => Some(&SLOTS[i]),
    }
}

/// A fiber running job `label` is about to be resumed on this thread.
pub(crate) fn enter(label: &'static str) {
    let Some(slot) = mine() else { return };
    let seq = slot.seq.load(Ordering::Relaxed);
    slot.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    slot.label_ptr
        .store(label.as_ptr() as usize, Ordering::Relaxed);
    slot.label_len.store(label.len(), Ordering::Relaxed);
    slot.since.store(coarse_nanos(), Ordering::Relaxed);
    slot.resumes.fetch_add(1, Ordering::Relaxed);
    slot.seq.store(seq.wrapping_add(2), Ordering::Release);
}

/// The fiber on this thread went back to its carrier.
pub(crate) fn leave() {
    let i = MINE.with(Cell::get);
    if i < FULL {
        SLOTS[i].since.store(0, Ordering::Relaxed);
    }
}

/// A job that has held its thread, running its own code, for a while.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningJob {
    /// The job's label (the route, in the server).
    pub label: &'static str,
    /// How long it has been running since it last came back to its carrier.
    pub running_for: Duration,
    /// Which tracked thread it holds (an index into the table, stable for the
    /// thread's life).
    pub thread: usize,
    /// Which resume of that thread this is: a watchdog that reports each holding
    /// once keys on `(thread, resume)`.
    pub resume: u64,
}

/// Every job that has been running its own code on a fiber, without going back to
/// its carrier, for at least `min`. Lock-free and allocation-free except for the
/// returned `Vec`; call from any thread (a watchdog's).
pub fn jobs_running_longer_than(min: Duration) -> Vec<RunningJob> {
    let now = coarse_nanos();
    let used = USED.load(Ordering::Acquire).min(MAX_CARRIER_THREADS);
    let mut out = Vec::new();
    for (thread, slot) in SLOTS[..used].iter().enumerate() {
        if slot.since.load(Ordering::Relaxed) == 0 {
            continue;
        }
        // A consistent read of one resume's fields; the owner may rewrite them at any
        // moment, so retry a few times, then give up on this slot for this look.
        for _ in 0..4 {
            let seq = slot.seq.load(Ordering::Acquire);
            if seq % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let ptr = slot.label_ptr.load(Ordering::Relaxed);
            let len = slot.label_len.load(Ordering::Relaxed);
            let since = slot.since.load(Ordering::Relaxed);
            let resume = slot.resumes.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != seq {
                continue;
            }
            if since == 0 || ptr == 0 {
                break;
            }
            let running_for = Duration::from_nanos(now.saturating_sub(since));
            if running_for >= min {
                // SAFETY: `ptr` and `len` were stored together by `enter`, from one
                // `&'static str`, and the unchanged even sequence number shows we read
                // both from the same `enter`: they describe a valid static string.
                let label = unsafe {
                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr as *const u8, len))
                };
                out.push(RunningJob {
                    label,
                    running_for,
                    thread,
                    resume,
                });
            }
            break;
        }
    }
    out
}
