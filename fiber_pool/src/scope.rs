//! Structured fan-out: [`scope`] runs children on guarded fibers of the pool, each a
//! job of its own, and returns only when every child has ended.
//!
//! ```text
//!   parent job (fiber A)                  children (fibers B, C: own carriers)
//!   scope(|s| {
//!       let b = s.spawn(|| query(1)); ──► carrier coroutine ─► pool: a free fiber,
//!       let c = s.spawn(|| query(2)); ──►   else the reserve (`child_reserve`)
//!       (b.join(), c.join())  ◄─────────── result, or RunError (overflow, panic,
//!   })  // waits for every child here        no fiber, cancelled) for that child
//! ```
//!
//! **No child outlives its scope**, whatever the parent does: [`scope`] waits for
//! every child after the closure returns, after it panics (the panic is caught, the
//! children joined, and the panic resumed, as `std::thread::scope` does), and after
//! the parent overflows its stack. That last one cannot run code on the parent's
//! fiber, so each scope is registered, while open, in the parent's ledger (the one
//! `Lent` uses, outside the fiber stack): the carrier, after the overflow and before
//! `run` returns, cancels the scope's context
//! ([`CancelReason::ParentFailed`]) and waits for
//! its children. So children may borrow the parent's locals, as with
//! `std::thread::scope`. These joins have no timeout, by design: returning earlier
//! would leave a child reading freed memory. What bounds them is the children's own
//! waits: each ends at its context's cancellation or deadline, and a child waits at
//! most `child_wait` for a fiber.
//!
//! **A child's overflow ends its parent too, once the scope has ended.** The child's
//! frames are abandoned without unwinding, so whatever it started with a borrow of the
//! parent's data (a `std::thread::scope` thread, joined in code of the child that never
//! runs) may go on using that data. The scope still waits for its other children and
//! `join` still gives the overflow as that child's `RunError`, but when the scope ends
//! it abandons the parent, as if the parent had overflowed there (outside a safe point):
//! the parent's frames, and everything they own, are never dropped or reused, and the
//! parent's `run` returns [`RunError::StackOverflow`].
//! The parent is a job, which owns what it uses (`FiberPool::run` is `'static`), so
//! nothing of its caller is borrowed. This is why a scope is opened from a job only:
//! code off a fiber could not be abandoned.
//!
//! **Cancellation**: a scope's context is a [child](crate::Context::child) of the
//! parent job's, with the scope's own deadline if tighter
//! ([`scope_with_deadline`]); every child runs under it. Cancelling the parent's
//! context cancels the children's; [`Scope::cancel`] cancels only the scope's.
//!
//! **Starvation**: a child asks for a fiber like any job, and its parent keeps its
//! own while it waits, so a pool full of parents would leave no fiber for any child.
//! The rule is a reserve plus a budget: [`PoolConfig::child_reserve`] fibers that only
//! children take (a child takes a free fiber of the pool first), and at most
//! [`PoolConfig::max_children_per_scope`] children per scope. A child that finds no
//! fiber within [`PoolConfig::child_wait`] fails with
//! [`RunError::NoFiberForChild`] rather than wait for ever.
//!
//! **Carriers**: each child runs in a carrier of its own. When the parent's carrier
//! is a may coroutine, the children's are may coroutines too, each on the thread it
//! starts on for good, as every coroutine ([`mod@crate::spawn`]). When the parent is
//! carried by a plain thread, each child is carried by a plain thread of its own too:
//! its waits block only that thread. `may::join!` and may's own scoped spawns are not used: they would
//! run the children's code on the parent's stack, outside any guarded fiber.
//!
//! **Stalls and overflows**: a parent waiting in [`Child::join`] or at the end of its
//! scope is parked on its carrier, so the stall watchdog
//! ([`jobs_running_longer_than`](crate::jobs_running_longer_than)) does not count it;
//! each child is a job of its own there, under its label. A child's panic is that
//! child's error only, and so is its overflow until the scope ends (its stack
//! quarantined like any job's; the parent's then too, see above); the others' results
//! are untouched.
//!
//! [`PoolConfig::child_reserve`]: crate::PoolConfig::child_reserve
//! [`PoolConfig::max_children_per_scope`]: crate::PoolConfig::max_children_per_scope
//! [`PoolConfig::child_wait`]: crate::PoolConfig::child_wait
//! [`RunError::NoFiberForChild`]: crate::RunError::NoFiberForChild

use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use may::sync::Blocker;

use crate::context::{park, CancelReason, Context};
use crate::error::RunError;
use crate::ledger::{Ledger, Registered};
use crate::pool::{FiberPool, Fibers};

/// The label of a child spawned with [`Scope::spawn`] (in the pool's per-label
/// stats and the stall watchdog's reports).
pub const CHILD_LABEL: &str = "scope child";

/// What a scope shares with its children's carriers and the parent's ledger.
struct ScopeShared {
    ctx: Context,
    max: usize,
    /// A child's frames were abandoned by an overflow: what it borrowed may still be
    /// in use (by a thread it started), so the scope abandons its parent too.
    child_abandoned: AtomicBool,
    /// Taken on carriers only (never on a fiber), never across a wait.
    state: Mutex<ScopeState>,
}

struct ScopeState {
    /// Children spawned so far (against `max`).
    spawned: usize,
    /// Children whose carrier has not finished with them (not yet run, running,
    /// or handing their result over).
    running: usize,
    /// The parent waiting for `running` to reach 0.
    waiter: Option<Arc<Blocker>>,
}

impl ScopeShared {
    fn state(&self) -> MutexGuard<'_, ScopeState> {
        // Counts and a take: never half done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A child's carrier is done with it, and with everything it borrowed.
    fn child_done(&self) {
        let waiter = {
            let mut state = self.state();
            state.running -= 1;
            if state.running > 0 {
                return;
            }
            state.waiter.take()
        };
        if let Some(waiter) = waiter {
            waiter.unpark();
        }
    }

    /// Waits until every child has ended. Off fibers (on the parent's carrier).
    ///
    /// No timeout: returning while a child runs would let it use borrows of frames
    /// that are gone (see the module documentation). Each child's own waits are
    /// bounded, and the scope's context cancels them.
    fn join_all(&self) {
        let blocker = Arc::new(Blocker::new(false));
        {
            let mut state = self.state();
            if state.running == 0 {
                return;
            }
            state.waiter = Some(Arc::clone(&blocker));
        }
        park(&blocker, None, None, || self.state().running == 0);
    }
}

impl Registered for ScopeShared {
    /// The parent overflowed with the scope open: its children are no longer wanted,
    /// and must end before the parent's carrier goes on.
    fn abandon(self: Arc<Self>) {
        self.ctx.cancel(CancelReason::ParentFailed);
        self.join_all();
    }

    fn release_if_unwound(&self) -> bool {
        false
    }
}

/// A scope's handle for spawning children; see [`scope`].
pub struct Scope<'scope, 'env: 'scope> {
    shared: Arc<ScopeShared>,
    pool: FiberPool,
    /// The children's carriers are may coroutines (else plain threads).
    on_coroutines: bool,
    /// Invariant over 'scope, as `std::thread::Scope`.
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

impl<'scope> Scope<'scope, '_> {
    /// Runs `f` as a child: a job of the pool on a fiber of its own (a free one, else
    /// one of the reserve), under the scope's context, labelled [`CHILD_LABEL`].
    /// Returns at once; the child's result comes from [`Child::join`].
    ///
    /// ```
    /// # #[global_allocator]
    /// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
    /// let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    /// let lens = pool.run("fan-out", || {
    ///     let words = [String::from("a"), String::from("bc")];
    ///     // The children borrow the job's local.
    ///     fiber_pool::scope(|s| words.each_ref().map(|w| s.spawn(|| w.len())).map(|c| c.join()))
    /// });
    /// assert_eq!(lens, Ok([Ok(1), Ok(2)]));
    /// ```
    pub fn spawn<F, T>(&'scope self, f: F) -> Child<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        self.spawn_labeled(CHILD_LABEL, f)
    }

    /// [`spawn`](Self::spawn) with a label of its own (per-label stats, the stall
    /// watchdog's reports, `RunError`s).
    pub fn spawn_labeled<F, T>(&'scope self, label: &'static str, f: F) -> Child<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let packet = Arc::new(Packet::new());
        let handle = Child {
            packet: Arc::clone(&packet),
            scope: PhantomData,
        };
        crate::on_carrier(move || self.start(label, f, packet));
        handle
    }

    /// Counts the child in and starts its carrier. On the carrier's stack.
    fn start<F, T>(&self, label: &'static str, f: F, packet: Arc<Packet<T>>)
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        {
            let mut state = self.shared.state();
            if state.spawned >= self.shared.max {
                drop(state);
                drop(f);
                packet.finish(Err(RunError::ScopeFull {
                    max: self.shared.max,
                }));
                return;
            }
            state.spawned += 1;
            state.running += 1;
        }
        let carrier = ChildCarrier {
            f: Some(f),
            packet: Some(packet),
            ctx: self.shared.ctx.clone(),
            pool: self.pool.clone(),
            label,
            done: Done(Arc::clone(&self.shared)),
        };
        let main: Box<dyn FnOnce() + Send + '_> = Box::new(move || carrier.run());
        // SAFETY: only the lifetime changes. `main` borrows what the child borrows
        // ('scope, which outlives every wait of the scope): it is dropped, run or not,
        // before `Done` (its last field) counts the child out, and the scope does not
        // return (`scope`'s join, or the ledger's after an overflow of the parent)
        // while a child is counted in. So nothing it borrows ends while it may use it.
        let main: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(main) };
        if self.on_coroutines {
            let spawned = crate::spawn::spawn("scope child", None, main);
            // may fails only when the OS refuses a stack mapping (out of memory); the
            // child was dropped unrun and counted out, and this panic reaches the
            // parent as a panic of its own.
            spawned.expect("may could not allocate a coroutine stack for a scope child");
        } else {
            std::thread::Builder::new()
                .name("scope child".into())
                .spawn(main)
                .expect("the OS refused a thread for a scope child");
        }
    }

    /// The scope's context: the children's. Cancelling it cancels every child's
    /// waits, not the parent's.
    pub fn context(&self) -> &Context {
        &self.shared.ctx
    }

    /// Cancels the scope's children (see [`context`](Self::context)).
    pub fn cancel(&self, reason: CancelReason) {
        self.shared.ctx.cancel(reason);
    }
}

/// Aborts the process when dropped: armed around a scope's final join, which must
/// never unwind (see `open`), and forgotten once the join returned.
struct AbortIfUnwound;

impl Drop for AbortIfUnwound {
    fn drop(&mut self) {
        eprintln!(
            "fiber_pool: a scope's join unwound while its children may still borrow the \
             job's frames: aborting"
        );
        std::process::abort();
    }
}

/// Counts a child out of its scope when dropped: the last thing a child's carrier
/// does (or, if the carrier never ran it, the last part of it dropped).
struct Done(Arc<ScopeShared>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.child_done();
    }
}

/// Everything a child's carrier owns. Its fields drop in declaration order, so
/// `done` (which lets the scope return) goes after the child's closure and result.
struct ChildCarrier<F, T> {
    f: Option<F>,
    packet: Option<Arc<Packet<T>>>,
    ctx: Context,
    pool: FiberPool,
    label: &'static str,
    /// Counts the child out when dropped, which must come last.
    done: Done,
}

impl<F, T> ChildCarrier<F, T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    fn run(mut self) {
        let f = self.f.take().expect("a child runs once");
        // SAFETY: what the child borrows outlives 'scope, and stays untouched after
        // the child's end whatever that end: a child that returned or unwound joined
        // what it started; one abandoned by an overflow makes the scope abandon its
        // parent (`open`), whose frames (and through them everything 'scope borrows,
        // the parent being a job that owns what it uses) are then never dropped or
        // reused.
        let (result, _) = unsafe {
            self.pool.run_here(
                self.label,
                Some(self.ctx.clone()),
                Fibers::Child,
                |_| true,
                f,
            )
        };
        let result = result.map(crate::pool::started);
        if matches!(result, Err(RunError::StackOverflow { .. })) {
            self.done.0.child_abandoned.store(true, Ordering::Release);
        }
        if let Some(packet) = self.packet.take() {
            packet.finish(result);
        }
        // `self` drops here: `done` last.
    }
}

/// One child's result, shared by its carrier and its [`Child`] handle.
struct Packet<T> {
    state: Mutex<PacketState<T>>,
}

struct PacketState<T> {
    result: Option<Result<T, RunError>>,
    done: bool,
    /// False once the handle was dropped: the carrier then drops the result itself.
    handle_alive: bool,
    waiter: Option<Arc<Blocker>>,
}

impl<T> Packet<T> {
    fn new() -> Packet<T> {
        Packet {
            state: Mutex::new(PacketState {
                result: None,
                done: false,
                handle_alive: true,
                waiter: None,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, PacketState<T>> {
        // Stores and takes: never half done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The child ended: hands its result to the handle (or drops it, outside the lock,
    /// when nobody will read it) and wakes a joiner. On the child's carrier.
    fn finish(&self, result: Result<T, RunError>) {
        let (unread, waiter) = {
            let mut state = self.state();
            state.done = true;
            let unread = if state.handle_alive {
                state.result = Some(result);
                None
            } else {
                Some(result)
            };
            (unread, state.waiter.take())
        };
        drop(unread);
        if let Some(waiter) = waiter {
            waiter.unpark();
        }
    }
}

/// A child of a [`scope`]: [`join`](Self::join) waits for its result. Dropping it
/// does not stop the child (the scope still waits for it); its result is dropped.
pub struct Child<'scope, T: Send> {
    packet: Arc<Packet<T>>,
    scope: PhantomData<&'scope ()>,
}

impl<T: Send> Child<'_, T> {
    /// Waits for the child to end (parked on the carrier, not a stall) and returns
    /// its value, or why there is none: its overflow, its panic, no fiber for it
    /// (`NoFiberForChild`, `ScopeFull`), or its context cancelled before it started.
    pub fn join(self) -> Result<T, RunError> {
        let packet = &self.packet;
        let taken = crate::on_carrier(|| {
            let blocker = Arc::new(Blocker::new(false));
            {
                let mut state = packet.state();
                if !state.done {
                    state.waiter = Some(Arc::clone(&blocker));
                }
            }
            // No timeout, as the scope's own join: the child's waits are bounded.
            park(&blocker, None, None, || packet.state().done);
            packet.state().result.take()
        });
        taken.expect("a finished child left its result for its handle")
    }

    /// Has the child ended (its result is ready for [`join`](Self::join))?
    pub fn is_finished(&self) -> bool {
        let packet = &self.packet;
        crate::on_carrier(|| packet.state().done)
    }
}

impl<T: Send> Drop for Child<'_, T> {
    fn drop(&mut self) {
        let packet = &self.packet;
        let unread = crate::on_carrier(|| {
            let mut state = packet.state();
            state.handle_alive = false;
            state.result.take()
        });
        drop(unread);
    }
}

/// Opens a scope on the pool of the job that calls it: `f` spawns children
/// ([`Scope::spawn`]), and `scope` returns `f`'s value once every child has ended,
/// even when `f` returns early or panics (the panic then resumes after the join).
/// Under the calling job's context (a child of it). See the module documentation for
/// the rules.
///
/// ```
/// # #[global_allocator]
/// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
/// let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
/// let sum = pool.run("fan-out", || {
///     fiber_pool::scope(|s| {
///         let a = s.spawn(|| 40);
///         let b = s.spawn(|| 2);
///         a.join().unwrap() + b.join().unwrap()
///     })
/// });
/// assert_eq!(sum, Ok(42));
/// ```
///
/// # Panics
///
/// When not called from a job: use [`FiberPool::scope`] there.
pub fn scope<'env, F, R>(f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    open(None, None, f)
}

/// [`scope`] with a deadline of its own: its children's context is cancelled at
/// `deadline`, or at the parent's if that is earlier.
///
/// # Panics
///
/// When not called from a job: use [`FiberPool::scope_with_deadline`] there.
pub fn scope_with_deadline<'env, F, R>(deadline: Instant, f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    open(None, Some(deadline), f)
}

impl FiberPool {
    /// [`scope`](crate::scope()) whose children run on this pool, from a job of any
    /// pool, under the calling job's context.
    ///
    /// # Panics
    ///
    /// When not called from a job: a child's overflow abandons the scope's caller (see
    /// the [module documentation](mod@crate::scope)), which only a job can be. Run the
    /// scope in a job (`pool.run("fan-out", move || pool2.scope(..))`).
    pub fn scope<'env, F, R>(&self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        open(Some(self.clone()), None, f)
    }

    /// [`scope_with_deadline`] on this pool.
    ///
    /// # Panics
    ///
    /// As [`FiberPool::scope`].
    pub fn scope_with_deadline<'env, F, R>(&self, deadline: Instant, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        open(Some(self.clone()), Some(deadline), f)
    }
}

/// Opens a scope on `pool` (the calling job's when `None`), from a job.
fn open<'env, F, R>(pool: Option<FiberPool>, deadline: Option<Instant>, f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    let entry = crate::stack_check::running_entry().expect(
        "a scope is opened from a job (FiberPool::run): only a job can be abandoned when \
         one of its children overflows, which keeps what the children borrow valid",
    );
    let setup = move || {
        let pool = pool.unwrap_or_else(|| {
            // SAFETY: `entry` is the entry of the job that called us, parked in this
            // `on_carrier` (the same line of control): its pool pointer is its `run`'s,
            // alive while the job runs.
            unsafe { FiberPool::of_running_job(entry.pool()) }
        });
        // SAFETY: as above, the calling job's entry, read from its carrier.
        let parent = unsafe { crate::context::of_job(entry) };
        let ctx = match deadline {
            Some(at) => parent.child().with_deadline(at),
            None => parent.child(),
        };
        let shared = Arc::new(ScopeShared {
            ctx,
            max: pool.config().max_children_per_scope,
            child_abandoned: AtomicBool::new(false),
            state: Mutex::new(ScopeState {
                spawned: 0,
                running: 0,
                waiter: None,
            }),
        });
        // While open, the scope is in the job's ledger: an overflow of the job joins
        // its children before the carrier goes on (see `Registered for ScopeShared`).
        let ledger = entry.ledger();
        // SAFETY: the pointer is `Arc::as_ptr` of the slot's ledger, which lives as
        // long as the pool, which outlives the job we run for.
        let ledger: Arc<Ledger> = unsafe {
            Arc::increment_strong_count(ledger);
            Arc::from_raw(ledger)
        };
        let id = ledger.register(Arc::clone(&shared) as Arc<dyn Registered>);
        let on_coroutines = may::coroutine::is_coroutine();
        (pool, shared, (ledger, id), on_coroutines)
    };
    let (pool, shared, (ledger, id), on_coroutines) = crate::on_carrier(setup);
    let scope = Scope {
        shared,
        pool,
        on_coroutines,
        scope: PhantomData,
        env: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    if result.is_err() {
        scope.shared.ctx.cancel(CancelReason::ParentFailed);
    }
    let shared = &scope.shared;
    crate::on_carrier(move || {
        // Children may still run here, borrowing this job's frames: a panic out of the
        // join (a may cancel of the carrier panics in its park) would unwind and free
        // those frames under them. Nothing can wait for them any more then, so the
        // process ends instead.
        let unwound = AbortIfUnwound;
        shared.join_all();
        ledger.unregister(id);
        std::mem::forget(unwound);
    });
    if scope.shared.child_abandoned.load(Ordering::Acquire) {
        // A child was abandoned by an overflow: a thread it started may still use
        // what it borrowed from this job (its locals, what they own), and nothing
        // will ever join that thread. So this job must never drop or reuse any of
        // it: it is abandoned too, its frames left as they are (the value or panic
        // of `f` with them) and its stack quarantined, as after an overflow of its
        // own (reported as one, outside a safe point).
        std::mem::forget(result);
        crate::stack_check::overflow_now(entry.guard_end());
    }
    match result {
        Ok(value) => value,
        Err(payload) => resume_unwind(payload),
    }
}
