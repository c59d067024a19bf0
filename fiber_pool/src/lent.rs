//! [`Lent`]: a resource that a job hands to an owner outside its fiber stack,
//! so that a stack overflow cannot lose it.
//!
//! An overflow abandons the job's frames without running destructors (see
//! the crate docs). A value wrapped in `Lent` lives in a heap cell that is
//! also registered in the *ledger* of the pool slot running the fiber. The
//! ledger lives outside the fiber stack. Dropping the `Lent` normally drops
//! the value and deregisters it; after an overflow the pool calls each
//! still-registered `on_abandon` (or tells its [`LentOwner`]) on the carrier's
//! stack, after the fiber is gone. The fiber is found by the address of a local variable in the
//! global registry. Outside a fiber a `Lent` is just a box.
//!
//! **An abandoned value is leaked, not handed over.** The overflow may have struck
//! in the middle of one of the value's own methods (std's slice sorts move elements
//! through a guard that writes them back: stopped there, the slice holds one element
//! twice, and dropping both frees it twice), and code the job started may still
//! borrow it (a `std::thread::scope` thread given `&*lent`, never joined: the
//! overflow skipped the join). Dropping, reading or moving such a value is undefined
//! behaviour for all the pool knows, so it stays where it is, untouched, for the rest
//! of the process; `on_abandon` gets an [`Abandoned`] token instead, which tells the
//! owner to account for the resource some other way (give its permit back, end its
//! server session by what it kept beside the value), and which gives the value back
//! only through an `unsafe` [`Abandoned::reclaim`] whose caller proves neither can be.
//!
//! `Lent` is neither `Send` nor `Sync`: it must stay within the job that
//! created it, so that "abandoned with the job's frames" is true of it. A
//! thread-local can still hold one past its job (thread-locals need not be
//! `Send`), and another fiber could then reach it while its own job overflows
//! and the carrier hands the value to `on_abandon`.
//! Two guards make that a panic instead of a data race: a registered `Lent`
//! checks on every access that it runs in the job that made it (same stack,
//! same job), and its value goes to whichever of its drop and `on_abandon`
//! claims it first (an atomic flag), never to both.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::ledger::{Ledger, Registered};
use crate::registry::StackEntry;

/// Stack a `Lent` operation needs on a fiber before it switches to the carrier,
/// where the ledger's lock is taken and its `Vec` grows: the cell's allocation, which
/// checks its own [`ALLOC_STACK_MARGIN`](crate::ALLOC_STACK_MARGIN) (2 KiB) with
/// [`FiberSafeAlloc`](crate::FiberSafeAlloc), and the switch, which checks
/// [`SWITCH_STACK_MARGIN`](crate::SWITCH_STACK_MARGIN). With less left, the
/// operation is treated as the overflow it would likely cause, at its start
/// ([`check_stack`](crate::check_stack)); the test `safe_alloc` creates Lents with
/// about this margin left.
pub const LENT_STACK_MARGIN: usize = 4096;

const _: () = assert!(
    LENT_STACK_MARGIN >= crate::alloc::ALLOC_STACK_MARGIN + crate::carrier::SWITCH_STACK_MARGIN
);

/// The owner of a lent value, told on the carrier when an overflow abandoned the
/// value's job: once per `Lent`, and only if its value was made (a failed `make` of
/// [`Lent::acquire_owned`] took nothing). What `acquire_owned` takes instead of a
/// closure, for an owner that already keeps shared state beside the value (a pool's
/// record of what ends a checkout's session), so that the `Lent` costs no allocation
/// for its callback. The same rules as a closure's `on_abandon` apply (see
/// [`Lent::new`]); the `Lent`'s reference to the owner is dropped on the carrier too.
pub trait LentOwner<T>: Send + Sync {
    /// The value is gone for good: account for it from what was kept beside it.
    fn abandoned(&self, token: Abandoned<T>);
}

/// Who is told of an abandoned value: a closure, or a shared owner.
enum OnAbandon<T> {
    Once(Box<dyn FnOnce(Abandoned<T>) + Send>),
    Owner(Arc<dyn LentOwner<T>>),
}

impl<T> OnAbandon<T> {
    fn tell(self, token: Abandoned<T>) {
        match self {
            OnAbandon::Once(f) => f(token),
            OnAbandon::Owner(owner) => owner.abandoned(token),
        }
    }
}

struct LentCell<T> {
    value: UnsafeCell<Option<T>>,
    on_abandon: UnsafeCell<Option<OnAbandon<T>>>,
    /// Set by the first of `abandon` and the `Lent`'s drop (or `into_inner`);
    /// only that one touches the `UnsafeCell`s afterwards.
    claimed: AtomicBool,
    /// Set by the `Lent`'s drop while unwinding: the value is left to the
    /// ledger, which drops it after the job (`release_if_unwound`).
    unwound: AtomicBool,
    /// Whether the cell ever held a value: a `Lent::acquire` whose `make` had not
    /// run (or failed) when its job overflowed had nothing to account for, and its
    /// owner is not told (it took nothing: no permit, no connection). Set on the
    /// carrier, with the value's store, so no overflow falls between the two.
    filled: AtomicBool,
}

// SAFETY: the cell is touched by its `Lent` (which is !Send and !Sync, and
// checks on every access that it runs in the job that made it, see `home`) or,
// after that job ended, by the carrier: `abandon` after an overflow abandoned
// the job, `release_if_unwound` after the `Lent`'s drop set `unwound` (its last
// touch of the cell). Never both at once: the abandoned job never runs again, a
// `Lent` reached from elsewhere panics before touching the cell, and every taker
// of the value (the `Lent`'s drop or `into_inner`, `abandon`,
// `release_if_unwound`) touches it only if it wins `claimed`. The value moves to
// the carrier's thread, so it must be `Send`.
unsafe impl<T: Send> Send for LentCell<T> {}
// SAFETY: as above; there is no concurrent access to the `UnsafeCell`s.
unsafe impl<T: Send> Sync for LentCell<T> {}

impl<T> LentCell<T> {
    /// A cell holding `value` (or none yet), not claimed by anyone.
    fn new(value: Option<T>, on_abandon: OnAbandon<T>) -> Arc<LentCell<T>> {
        let filled = value.is_some();
        Arc::new(LentCell {
            value: UnsafeCell::new(value),
            on_abandon: UnsafeCell::new(Some(on_abandon)),
            claimed: AtomicBool::new(false),
            unwound: AtomicBool::new(false),
            filled: AtomicBool::new(filled),
        })
    }
}

impl<T: Send + 'static> Registered for LentCell<T> {
    fn abandon(self: Arc<Self>) {
        if self.claimed.swap(true, Ordering::AcqRel) {
            return; // dropped meanwhile, by a `Lent` kept past its job
        }
        // SAFETY: called by the carrier after the owning fiber is gone (see the
        // `Send` impl), and we won `claimed`: nobody else accesses the cell. The value
        // is not touched.
        let f = unsafe { (*self.on_abandon.get()).take() };
        // The token holds this reference in a `ManuallyDrop`, never released unless
        // the value is reclaimed (dropping the token, here when there is no callback
        // or nothing was made, keeps it held): the cell, and the value in it, are
        // never freed, whatever becomes of the other references (a `Lent` kept in a
        // thread-local, dropped later, finds `claimed` set).
        let filled = self.filled.load(Ordering::Acquire);
        let token = Abandoned {
            cell: ManuallyDrop::new(self),
        };
        if let (Some(f), true) = (f, filled) {
            f.tell(token);
        }
    }

    fn release_if_unwound(&self) -> bool {
        if !self.unwound.load(Ordering::Acquire) {
            return false;
        }
        if !self.claimed.swap(true, Ordering::AcqRel) {
            // SAFETY: called by the carrier after the job ended (see the `Send`
            // impl: the `Lent` is gone, it set `unwound` in its drop), and we won
            // `claimed`: nobody else accesses the cell.
            drop(unsafe { (*self.value.get()).take() });
        }
        true
    }
}

/// A value owned outside the fiber stack while a job uses it; see the module
/// docs.
pub struct Lent<T: Send + 'static> {
    cell: Arc<LentCell<T>>,
    /// The slot ledger and our id in it, when created on a fiber.
    registration: Option<(Arc<Ledger>, u64)>,
    /// The job that made it, when made on a fiber: its stack's entry address and
    /// the entry's job generation.
    home: Option<(usize, u64)>,
    /// Neither `Send` nor `Sync`.
    _local: PhantomData<*const ()>,
}

impl<T: Send + 'static> Lent<T> {
    /// Wraps `value`; if the current fiber overflows while this `Lent` is alive,
    /// the value is leaked where it is (see the [module documentation](self)) and
    /// `on_abandon` runs, once, on the carrier after the fiber is gone, with the
    /// [`Abandoned`] token.
    ///
    /// The owner accounts for the resource there from what it kept beside the
    /// value: a permit given back, a counter, a server-side session ended by its id.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// # let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    /// let in_use = Arc::new(AtomicUsize::new(1)); // one buffer checked out
    /// let counted = Arc::clone(&in_use);
    /// let ran = pool.run("lends", move || {
    ///     let buf = fiber_pool::Lent::new(vec![0u8; 64], move |_abandoned| {
    ///         counted.fetch_sub(1, Ordering::SeqCst); // the buffer itself is leaked
    ///     });
    ///     buf.len()
    /// });
    /// assert_eq!(ran, Ok(64));
    /// assert_eq!(in_use.load(Ordering::SeqCst), 1, "not abandoned: dropped as usual");
    /// ```
    pub fn new(value: T, on_abandon: impl FnOnce(Abandoned<T>) + Send + 'static) -> Lent<T> {
        Lent::registered(Some(value), OnAbandon::Once(Box::new(on_abandon)))
    }

    /// A `Lent` holding `value`, registered in the ledger of the fiber we run on
    /// (if any), so that an overflow from here on hands the value to `on_abandon`.
    fn registered(value: Option<T>, on_abandon: OnAbandon<T>) -> Lent<T> {
        // Look up the ledger (and check the stack margin) before allocating.
        let (ledger, home) = match current_job() {
            Some((ledger, home)) => (Some(ledger), Some(home)),
            None => (None, None),
        };
        let cell = LentCell::new(value, on_abandon);
        // The ledger's lock and its push (which may allocate) on the carrier: an
        // overflow strikes before the switch, never with the lock held.
        let registration = ledger.map(|ledger| {
            let item = Arc::clone(&cell) as Arc<dyn Registered>;
            let id = crate::on_carrier(|| ledger.register(item));
            (ledger, id)
        });
        Lent {
            cell,
            registration,
            home,
            _local: PhantomData,
        }
    }

    /// [`Lent::registered`] of an empty cell, and `then` run on the carrier's stack
    /// right after the registration, in the same switch (what [`Lent::acquire`] makes
    /// its value in). Its own function: `registered` (every `Lent::new`) keeps its
    /// small frame, for jobs on small stacks.
    fn registered_then<R>(
        on_abandon: OnAbandon<T>,
        then: impl FnOnce(&LentCell<T>) -> R + Send,
    ) -> (Lent<T>, R) {
        let (ledger, home) = match current_job() {
            Some((ledger, home)) => (Some(ledger), Some(home)),
            None => (None, None),
        };
        let cell = LentCell::new(None, on_abandon);
        let item = ledger
            .as_ref()
            .map(|_| Arc::clone(&cell) as Arc<dyn Registered>);
        let (id, made) = {
            let (ledger, cell) = (&ledger, &*cell);
            crate::on_carrier(move || {
                let id = ledger.as_ref().zip(item).map(|(l, item)| l.register(item));
                (id, then(cell))
            })
        };
        let registration = ledger.zip(id);
        let lent = Lent {
            cell,
            registration,
            home,
            _local: PhantomData,
        };
        (lent, made)
    }

    /// Takes the value out; an overflow no longer leaks it or tells its owner.
    ///
    /// An overflow can strike until the value is in the caller's hands, and the
    /// value must be with its owner at every moment: in the ledger (an overflow
    /// hands it to `on_abandon`) or returned. So the deregistration, the take
    /// and the drop of the `Lent`'s own parts run on the carrier's stack, where
    /// no fiber overflow strikes, after the switch's own check (an overflow there
    /// still finds the value registered); the `Lent`'s `Drop`, whose checks would
    /// come after the take, does not run.
    pub fn into_inner(self) -> T {
        self.check_home();
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped and never used again: each field that
        // owns something is read out exactly once here (`home` and `_local` own
        // nothing).
        let (cell, registration) =
            unsafe { (ptr::read(&this.cell), ptr::read(&this.registration)) };
        crate::on_carrier(move || {
            if let Some((ledger, id)) = registration {
                ledger.unregister(id);
            }
            assert!(
                !cell.claimed.swap(true, Ordering::AcqRel),
                "the value of this Lent was given back after its fiber overflowed"
            );
            // SAFETY: we won `claimed`: `abandon` will not touch the cell.
            unsafe { (*cell.value.get()).take() }.expect("a Lent holds its value until dropped")
        })
    }

    /// Panics unless we run in the job that made this `Lent` (see the module docs).
    fn check_home(&self) {
        if let Some(home) = self.home {
            assert!(
                current_home() == Some(home),
                "a Lent was used outside the job that made it (kept in a thread-local?): \
                 its value may be handed to on_abandon at any time"
            );
        }
    }
}

impl<T: Send + 'static> Deref for Lent<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.check_home();
        // SAFETY: we run in the job that made this Lent (checked above), so its
        // fiber is not abandoned and `abandon` cannot run meanwhile.
        unsafe { (*self.cell.value.get()).as_ref() }
            .expect("the value of this Lent was given back after its fiber overflowed")
    }
}

impl<T: Send + 'static> DerefMut for Lent<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.check_home();
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { (*self.cell.value.get()).as_mut() }
            .expect("the value of this Lent was given back after its fiber overflowed")
    }
}

impl<T: Send + 'static> Drop for Lent<T> {
    fn drop(&mut self) {
        if self.registration.is_some() && std::thread::panicking() && current_home() == self.home {
            // Unwinding in the job that made it: no carrier, no ledger lock. The
            // value's drop (a connection's give-back) may wait, and an unwinding fiber
            // must not park (see `on_carrier`): the value stays registered, and the
            // pool drops it on the carrier once the job has ended (returned, panicked
            // or overflowed: `Ledger::finish`, `Ledger::abandon_all`), or, when the
            // job catches the panic and goes on, at its end. A `Lent` kept past its
            // job (in a thread-local) has no ledger to leave it to: it is dropped
            // below, like any.
            self.cell.unwound.store(true, Ordering::Release);
            return;
        }
        // Overflow here, while the value is still registered (an overflow then
        // hands it to on_abandon), rather than below.
        check_margin();
        let registration = self.registration.take();
        let cell = &self.cell;
        // The value's drop (a connection's give-back: locks, may calls) and the
        // ledger's lock run on the carrier's stack, never on the fiber.
        crate::on_carrier(move || {
            if let Some((ledger, id)) = registration {
                ledger.unregister(id);
            }
            if !cell.claimed.swap(true, Ordering::AcqRel) {
                // SAFETY: we won `claimed`, and nothing else touches either cell
                // without winning it (`abandon`, `release_if_unwound`; `reclaim` only
                // after `abandon` won). The
                // callback is taken first and dropped after the value, here too: the
                // `Lent`'s own reference to the cell goes on the fiber, an owner's last
                // reference may be heavy to drop (a pool's state), and should the
                // value's drop panic, the local still goes here, as this closure
                // unwinds on the carrier.
                let on_abandon = unsafe { (*cell.on_abandon.get()).take() };
                // SAFETY: as above; drop the value now rather than when the last
                // Arc goes.
                drop(unsafe { (*cell.value.get()).take() });
                drop(on_abandon);
            }
        });
    }
}

/// What `on_abandon` gets after an overflow abandoned a [`Lent`]'s job: word that the
/// value is gone for good, not the value. Dropping the token leaves the value leaked
/// where it is: never dropped, read or moved, its memory kept for the rest of the
/// process (see the [module documentation](self) for why).
pub struct Abandoned<T> {
    /// The value's cell; never freed unless the value is reclaimed.
    cell: ManuallyDrop<Arc<LentCell<T>>>,
}

impl<T: Send + 'static> Abandoned<T> {
    /// Takes the abandoned value back, as the overflow left it.
    ///
    /// # Safety
    ///
    /// Both of these must hold; the pool can check neither:
    /// - **nothing still uses the value**: the job lent no reference to it (nor to
    ///   anything inside it) to code that runs beside the job (a thread of
    ///   `std::thread::scope`, a may coroutine, a callback registered elsewhere);
    ///   the overflow skipped whatever would have ended that code;
    /// - **the value is valid wherever the overflow struck**: the job may have been
    ///   inside any method it called on the value, so every such method keeps the
    ///   value valid (droppable, and usable as the caller means to use it) at every
    ///   instruction, not only when it returns or unwinds. Plain data (integers, an
    ///   owned buffer the job only read) qualifies; a collection in the middle of an
    ///   insert or a sort does not (a slice sort stopped half-way holds one element
    ///   twice).
    pub unsafe fn reclaim(self) -> T {
        let cell = ManuallyDrop::into_inner(self.cell);
        // SAFETY: `abandon` won `claimed` before making this token, so nobody else
        // touches the cell (see the `Send` impl of `LentCell`); whether the value
        // may be used is our caller's promise.
        unsafe { (*cell.value.get()).take() }
            .expect("an abandoned Lent's cell still holds its value")
    }
}

impl<T: Send + 'static> std::fmt::Debug for Abandoned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Abandoned").finish_non_exhaustive()
    }
}

/// A raw pointer to a Lent's value slot, sent to the carrier by [`Lent::acquire`].
struct Slot<T>(*mut Option<T>);

// SAFETY: the pointer is used only by the carrier while the fiber that owns the
// `Lent` is suspended inside `on_carrier` (no concurrent access), and the value it
// writes is `Send`.
unsafe impl<T: Send> Send for Slot<T> {}

impl<T: Send + 'static> Lent<T> {
    /// Acquires a resource straight into a `Lent`: `make` runs on the carrier's stack
    /// ([`on_carrier`](crate::on_carrier)) and its value is written into the `Lent`'s
    /// cell, already registered, so the value is never a plain local on the fiber
    /// stack (where an overflow before `Lent::new` would lose it: a pool checkout
    /// never given back). `make`'s error is returned as is.
    pub fn acquire<E: Send>(
        make: impl FnOnce() -> Result<T, E> + Send,
        on_abandon: impl FnOnce(Abandoned<T>) + Send + 'static,
    ) -> Result<Lent<T>, E> {
        Lent::acquire_as(make, OnAbandon::Once(Box::new(on_abandon)))
    }

    /// [`Lent::acquire`] with a shared `owner` told of an abandon instead of a
    /// closure: no allocation for the callback.
    pub fn acquire_owned<E: Send>(
        make: impl FnOnce() -> Result<T, E> + Send,
        owner: Arc<impl LentOwner<T> + 'static>,
    ) -> Result<Lent<T>, E> {
        Lent::acquire_as(make, OnAbandon::Owner(owner))
    }

    fn acquire_as<E: Send>(
        make: impl FnOnce() -> Result<T, E> + Send,
        on_abandon: OnAbandon<T>,
    ) -> Result<Lent<T>, E> {
        // Registered first, then made, in one switch to the carrier: the value goes
        // straight into a registered cell. The error comes back boxed: what crosses
        // the switch is copied in the carrier's frames, which a connection's stack
        // keeps resident; a checkout that fails is rare.
        let (lent, made) = Lent::registered_then(on_abandon, move |cell| {
            let slot = Slot(cell.value.get());
            make()
                .map(|value| {
                    let slot = slot;
                    // SAFETY: see `Slot`: the fiber is suspended in `on_carrier`, and
                    // nothing else reaches a cell that is registered but unclaimed
                    // while its fiber runs (an abandon needs the fiber gone).
                    unsafe { *slot.0 = Some(value) };
                    cell.filled.store(true, Ordering::Release);
                })
                .map_err(Box::new)
        });
        made.map(|()| lent).map_err(|e| *e)
    }
}

/// The ledger and identity of the job we are running in, found by address.
fn current_job() -> Option<(Arc<Ledger>, (usize, u64))> {
    check_margin();
    let entry = StackEntry::find_running(crate::stack_check::stack_pointer())?;
    let ledger = entry.ledger();
    if ledger.is_null() {
        return None;
    }
    // SAFETY: the pointer comes from `Arc::as_ptr` of the slot's ledger, which
    // lives as long as the slot, and the slot outlives the fiber we run on.
    let ledger = unsafe {
        Arc::increment_strong_count(ledger);
        Arc::from_raw(ledger)
    };
    Some((ledger, home_of(entry)))
}

/// The identity of the job running on `entry`'s stack.
fn home_of(entry: &StackEntry) -> (usize, u64) {
    (entry as *const StackEntry as usize, entry.generation())
}

/// The identity of the job we run in, if on a fiber.
fn current_home() -> Option<(usize, u64)> {
    StackEntry::find_running(crate::stack_check::stack_pointer()).map(home_of)
}

/// Treats "less than LENT_STACK_MARGIN bytes left" as an overflow, before the
/// switch to the carrier that takes the ledger's lock. Not a safe point: a `Lent` is
/// made and dropped wherever its job is, critical sections included.
fn check_margin() {
    crate::check_stack(LENT_STACK_MARGIN);
}
