//! FIFO admission to the pool's N fiber slots: a free list, a bounded queue of
//! waiting callers, and direct hand-off from a finishing job to the oldest
//! waiter (so a newcomer cannot overtake the queue). A slot whose fiber was
//! retired (no spare stack left after an overflow) is never handed out again;
//! once every slot is retired, callers are told so at once.
//!
//! The lock is a std `Mutex` held only for a few pushes and pops, never across
//! a yield; waiting parks the calling may coroutine (or thread) on a may
//! `Blocker`, so other coroutines keep running on the worker.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use may::coroutine::ParkError;
use may::sync::Blocker;

use crate::context::{CancelReason, Context};

const NO_SLOT: usize = usize::MAX;
/// Handed to waiters when the last slot was retired.
const RETIRED: usize = usize::MAX - 1;

/// Why a caller got no slot.
pub(crate) enum Denied {
    /// The queue was full.
    Busy,
    /// The wait timed out after this long.
    Timeout(Duration),
    /// Every slot was retired: none will ever be free.
    Retired,
    /// The caller's context was cancelled (or its deadline passed) while it waited.
    Cancelled(CancelReason),
}

struct Waiter {
    blocker: Blocker,
    /// The slot handed over by `release`, or `NO_SLOT`.
    slot: AtomicUsize,
}

struct State {
    free: Vec<usize>,
    waiters: VecDeque<Arc<Waiter>>,
    /// Slots taken out of use for good.
    retired: usize,
}

pub(crate) struct Admission {
    state: Mutex<State>,
    size: usize,
    queue: usize,
}

impl Admission {
    pub(crate) fn new(size: usize, queue: usize) -> Admission {
        Admission {
            state: Mutex::new(State {
                // Reversed so that slot 0 is handed out first.
                free: (0..size).rev().collect(),
                waiters: VecDeque::new(),
                retired: 0,
            }),
            size,
            queue,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // `stats()` reads the counts from fibers (a /stats route), from code that
        // may hold anything: never let an overflow strike with this lock held, and
        // claim no safe point. The critical sections cannot panic half-way
        // (push/pop only), so a poisoned lock is consistent.
        crate::lock_anywhere(&self.state)
    }

    /// Takes a free slot, or waits for one in FIFO order: the slot, and whether the
    /// caller had to wait for it.
    ///
    /// The wait ends early when `ctx` is cancelled or its deadline passes; the hook
    /// that wakes it is registered only once the caller queues, so a caller that
    /// finds a free slot pays nothing for its context.
    pub(crate) fn acquire(
        &self,
        timeout: Option<Duration>,
        ctx: Option<&Context>,
    ) -> Result<(usize, bool), Denied> {
        let waiter = {
            let mut state = self.lock();
            if let Some(slot) = state.free.pop() {
                return Ok((slot, false));
            }
            if state.retired == self.size {
                return Err(Denied::Retired);
            }
            if state.waiters.len() >= self.queue {
                return Err(Denied::Busy);
            }
            let waiter = Arc::new(Waiter {
                blocker: Blocker::new(false),
                slot: AtomicUsize::new(NO_SLOT),
            });
            state.waiters.push_back(Arc::clone(&waiter));
            waiter
        };
        let start = Instant::now();
        let _wake = ctx.map(|ctx| {
            let waiter = Arc::clone(&waiter);
            ctx.wake_on_cancel(move |_| waiter.blocker.unpark())
        });
        loop {
            let deadline = ctx.and_then(Context::remaining);
            let remaining = match (timeout.map(|t| t.saturating_sub(start.elapsed())), deadline) {
                (Some(t), Some(d)) => Some(t.min(d)),
                (t, d) => t.or(d),
            };
            // may reads a zero timeout as "for ever": never park with one.
            // Its timer may also fire a little early: then we park again.
            let give_up = match remaining {
                Some(r) if r.is_zero() => true,
                Some(r) => matches!(
                    waiter.blocker.park(Some(r.max(Duration::from_millis(1)))),
                    Err(ParkError::Canceled)
                ),
                None => waiter.blocker.park(None).is_err(),
            };
            match waiter.slot.load(Ordering::Acquire) {
                NO_SLOT => {}
                RETIRED => return Err(Denied::Retired),
                slot => return Ok((slot, true)),
            }
            let cancelled = ctx.and_then(Context::reason);
            if give_up || cancelled.is_some() {
                let mut state = self.lock();
                // `release` and `retire` hand over under the lock: check once more.
                match waiter.slot.load(Ordering::Acquire) {
                    NO_SLOT => {}
                    RETIRED => return Err(Denied::Retired),
                    slot => return Ok((slot, true)),
                }
                state.waiters.retain(|w| !Arc::ptr_eq(w, &waiter));
                // A deadline that bounded the wait ends it as a cancellation.
                return Err(match cancelled.or_else(|| ctx.and_then(Context::reason)) {
                    Some(reason) => Denied::Cancelled(reason),
                    None => Denied::Timeout(start.elapsed()),
                });
            }
        }
    }

    /// A free slot if there is one now, without waiting.
    pub(crate) fn try_acquire(&self) -> Option<usize> {
        self.lock().free.pop()
    }

    /// Gives `slot` to the oldest waiter, or back to the free list.
    pub(crate) fn release(&self, slot: usize) {
        let mut state = self.lock();
        match state.waiters.pop_front() {
            Some(waiter) => {
                waiter.slot.store(slot, Ordering::Release);
                drop(state);
                waiter.blocker.unpark();
            }
            None => state.free.push(slot),
        }
    }

    /// Takes a slot handed out to the caller out of use for good. When it was
    /// the last one, every waiter is told that no slot will come.
    pub(crate) fn retire(&self) {
        let mut state = self.lock();
        state.retired += 1;
        if state.retired == self.size {
            let waiters = std::mem::take(&mut state.waiters);
            drop(state);
            for waiter in waiters {
                waiter.slot.store(RETIRED, Ordering::Release);
                waiter.blocker.unpark();
            }
        }
    }

    /// (busy slots, waiting callers, retired slots).
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let state = self.lock();
        let busy = self.size - state.retired - state.free.len();
        (busy, state.waiters.len(), state.retired)
    }
}
