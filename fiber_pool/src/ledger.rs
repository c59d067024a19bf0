//! A pool slot's ledger: what its running job registered outside its fiber stack (a
//! [`Lent`](crate::Lent)'s cell, an open [`scope`](crate::scope())), so that after an
//! overflow the carrier can tell each owner, and after an unwinding end drop what the
//! job's `Lent`s left to it. The registry's entry for the slot points to it; it lives
//! as long as the pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a ledger holds for its job: a registered `Lent`'s cell, or an open
/// [`scope`](crate::scope()) (whose children must end before the job's carrier goes on).
pub(crate) trait Registered: Send + Sync {
    /// After an overflow: tells the value's owner ([`Lent`](crate::Lent)), or ends the
    /// scope's children.
    fn abandon(self: Arc<Self>);
    /// Drops the value if its `Lent` was dropped while unwinding (and left the
    /// value to the pool); tells whether it was.
    fn release_if_unwound(&self) -> bool;
}

impl Ledger {
    /// Registers `item` (call on the carrier's stack: the lock and the push must not
    /// be abandoned by an overflow); returns its id for [`unregister`](Self::unregister).
    pub(crate) fn register(&self, item: Arc<dyn Registered>) -> u64 {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.lock().push((id, item));
        id
    }

    /// Forgets the registration `id` (on the carrier's stack, as `register`).
    pub(crate) fn unregister(&self, id: u64) {
        let removed = {
            let mut entries = self.lock();
            let at = entries.iter().position(|(i, _)| *i == id);
            at.map(|at| entries.remove(at))
        };
        drop(removed);
    }
}

/// A pool slot's register of lent values; lives beside the slot, outside the
/// fiber stack.
#[derive(Default)]
pub(crate) struct Ledger {
    entries: Mutex<Vec<(u64, Arc<dyn Registered>)>>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Arc<dyn Registered>)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After the job ended (returned or panicked), on the carrier: drops the
    /// values that `Lent`s dropped while unwinding left here, newest first, and
    /// forgets the other registrations (a `Lent` still alive, e.g. forgotten,
    /// keeps its value). Returns how many of those drops panicked.
    pub(crate) fn finish(&self) -> usize {
        let entries = {
            let mut entries = self.lock();
            // The usual end: every `Lent` was dropped in the job. The list keeps its
            // capacity, so the slot's next job registers without allocating.
            if entries.is_empty() {
                return 0;
            }
            std::mem::take(&mut *entries)
        };
        let mut failed = 0;
        for (_, cell) in entries.into_iter().rev() {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cell.release_if_unwound();
            }));
            failed += usize::from(r.is_err());
        }
        failed
    }

    /// After an overflow: tell the owner of every registered value, newest first
    /// (a value that a `Lent` dropped while unwinding left here is dropped instead,
    /// as that `Lent` meant: the `Lent` is gone, so nothing borrows it, and unwinding
    /// left it valid). A panicking callback does not keep the others from running.
    /// Returns how many there were, and how many callbacks panicked.
    pub(crate) fn abandon_all(&self) -> (usize, usize) {
        let entries = std::mem::take(&mut *self.lock());
        let n = entries.len();
        let mut failed = 0;
        for (_, cell) in entries.into_iter().rev() {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                if !cell.release_if_unwound() {
                    cell.abandon();
                }
            }));
            failed += usize::from(r.is_err());
        }
        (n, failed)
    }
}
