//! [`Context`]: a job's cancellation and deadline, which every wait of this crate
//! sees, and the hooks that run when it is cancelled.
//!
//! A context is a cancel flag (holding *why*: [`CancelReason`]), an optional
//! deadline, and a list of hooks. It lives on the heap (an `Arc`), never on a fiber
//! stack, and the running job's is found through its fiber's registry entry
//! ([`current`]), the way `Lent` finds its ledger: by the stack pointer, never a
//! thread-local, so that finding it costs no thread-local registration (which may
//! allocate) and works on any thread that runs a fiber.
//!
//! ```text
//!   canceller (any thread or coroutine)          the job (on its fiber)
//!   ctx.cancel(ClientGone) ──► reason set ─────► is_cancelled(), every wait of ours
//!        └─ runs the hooks, on its own side:      (sleep_or_cancelled, admission,
//!           wake-ups of parked waits, children,     scope joins, blocking) ends
//!           the application's on_cancel hooks       with the reason
//!   deadline passes ──► the deadline thread cancels it (DeadlinePassed), if hooks
//!                       wait for it; waits bound their own parking by the deadline
//! ```
//!
//! **Deadlines cost nothing until someone needs them to fire.** A context whose
//! deadline passed answers `is_cancelled() == true` by comparing the clock (one
//! `Instant::now`), and the crate's own waits park no longer than the deadline, so
//! neither needs a timer. Only [`Context::on_cancel`] on a context with a deadline
//! arms one: an entry in the process's one deadline thread (`deadline`), which
//! cancels the context when the deadline passes so that its hooks run then.
//!
//! Cancelling is cooperative: it ends the crate's waits, and a job sees it in
//! `is_cancelled()`, but a job running its own code (a CPU loop, a blocking std
//! call) goes on until it looks.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use may::sync::Blocker;

use crate::deadline::Due;
use crate::registry::{JobContext, StackEntry};

/// Why a [`Context`] was cancelled: what a server answers depends on it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// The client went away: nobody will read the answer, so a server drops it
    /// (and stops the work that would have produced it).
    ClientGone,
    /// The context's deadline passed (its own or an enclosing one's): a server
    /// answers 504, naming the phase the job was in.
    DeadlinePassed,
    /// The process is shutting down and will not wait for the job.
    Shutdown,
    /// The job that opened a [`scope`](crate::scope()) panicked or overflowed its
    /// stack: its children's results will never be read.
    ParentFailed,
    /// The application cancelled it for a reason of its own (a sibling's result
    /// made the others moot, say).
    Requested,
}

impl CancelReason {
    fn code(self) -> u8 {
        match self {
            CancelReason::ClientGone => 1,
            CancelReason::DeadlinePassed => 2,
            CancelReason::Shutdown => 3,
            CancelReason::ParentFailed => 4,
            CancelReason::Requested => 5,
        }
    }

    fn from_code(code: u8) -> Option<CancelReason> {
        Some(match code {
            1 => CancelReason::ClientGone,
            2 => CancelReason::DeadlinePassed,
            3 => CancelReason::Shutdown,
            4 => CancelReason::ParentFailed,
            5 => CancelReason::Requested,
            _ => return None,
        })
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CancelReason::ClientGone => "cancelled: the client went away",
            CancelReason::DeadlinePassed => "cancelled: the deadline passed",
            CancelReason::Shutdown => "cancelled: the process is shutting down",
            CancelReason::ParentFailed => {
                "cancelled: the job that opened the scope panicked or overflowed"
            }
            CancelReason::Requested => "cancelled by the application",
        })
    }
}

impl std::error::Error for CancelReason {}

/// What [`Context::on_cancel_shared`] registers instead of a closure: an object its
/// owner already shares (a checkout's cancellation state), so that registering costs
/// no allocation for the hook. Told at most once per registration, with the
/// reason; the rules of [`Context::on_cancel`]'s hook apply (short, non-blocking, no
/// lock its job may hold).
pub trait CancelHook: Send + Sync {
    /// The context was cancelled for `reason`.
    fn cancelled(self: Arc<Self>, reason: CancelReason);
}

/// A hook given to [`Context::on_cancel`] or [`Context::on_cancel_shared`].
enum Hook {
    Once(Box<dyn FnOnce(CancelReason) + Send>),
    Shared(Arc<dyn CancelHook>),
}

/// A context's hooks; `fired` once they were taken to run.
struct Hooks {
    fired: bool,
    next_id: u64,
    list: Vec<(u64, Hook)>,
    /// The most room asked of [`Context::reserve_hooks`]: what a context made to
    /// replace this one is given (the list itself is out while its hooks run).
    room: usize,
}

pub(crate) struct Shared {
    /// 0 while live, else the [`CancelReason`]'s code; set once.
    reason: AtomicU8,
    /// When the context cancels itself; a child's is at most its parent's.
    deadline: Option<Instant>,
    /// Taken only on a carrier's stack or a plain thread (never on a fiber, where an
    /// overflow could leave it held), for a push, a removal or a take: never across
    /// a wait, never while a hook runs.
    hooks: Mutex<Hooks>,
    /// This context's entry in the deadline thread, 0 while not armed.
    timer: AtomicU64,
    /// The hook that passes the parent's cancellation on to this child, held for its
    /// drop: a child dropped (or renewed) first unregisters it.
    parent: Option<Registration>,
}

impl Shared {
    fn live(deadline: Option<Instant>, parent: Option<Registration>) -> Shared {
        Shared {
            reason: AtomicU8::new(0),
            deadline,
            hooks: Mutex::new(Hooks {
                fired: false,
                next_id: 1,
                list: Vec::new(),
                room: 0,
            }),
            timer: AtomicU64::new(0),
            parent,
        }
    }

    /// Live again without a deadline, in place, as `live(None, None)` would make it
    /// but for the hooks' list, which keeps its capacity, and the room asked for
    /// (`room`), which a context made to replace it is given. Only for a context
    /// nobody else holds: no registration is left, and no deadline entry.
    fn renew(&mut self) {
        // A backstop: `renewed` disarmed an armed entry before it could get here.
        self.disarm_owned();
        *self.reason.get_mut() = 0;
        self.deadline = None;
        self.parent = None;
        let hooks = self.hooks.get_mut().unwrap_or_else(|e| e.into_inner());
        hooks.fired = false;
        hooks.list.clear();
    }

    /// Forgets the deadline thread's entry for this context, if armed. Call off fibers.
    fn disarm(&self) {
        let key = self.timer.swap(0, Ordering::AcqRel);
        if let (Some(at), true) = (self.deadline, key != 0) {
            crate::deadline::disarm(at, key);
        }
    }

    /// [`disarm`](Self::disarm) for an owner, which may be on a fiber: the deadline
    /// thread's lock is taken on the carrier, and only when the entry is armed.
    fn disarm_owned(&mut self) {
        if *self.timer.get_mut() != 0 {
            let this = &*self;
            crate::on_carrier(move || this.disarm());
        }
    }

    fn hooks(&self) -> MutexGuard<'_, Hooks> {
        // The critical sections are pushes, removals and a take: never half done.
        self.hooks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reason(&self) -> Option<CancelReason> {
        if let Some(reason) = CancelReason::from_code(self.reason.load(Ordering::Acquire)) {
            return Some(reason);
        }
        let deadline = self.deadline?;
        if Instant::now() < deadline {
            return None;
        }
        // Passed: record it, unless a cancel came first. The hooks are the
        // deadline thread's to run (it was armed if there are any to run then).
        self.set_reason(CancelReason::DeadlinePassed);
        CancelReason::from_code(self.reason.load(Ordering::Acquire))
    }

    /// Sets the reason unless one is set; tells whether this call set it.
    fn set_reason(&self, reason: CancelReason) -> bool {
        self.reason
            .compare_exchange(0, reason.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Cancels with `reason` (unless already cancelled: a deadline that has passed
    /// counts first) and runs the hooks not run yet, here. Call off fibers. Returns
    /// whether this call set the reason.
    pub(crate) fn cancel_here(&self, reason: CancelReason) -> bool {
        let won = self.reason().is_none() && self.set_reason(reason);
        let mut taken = {
            let mut hooks = self.hooks();
            if hooks.fired {
                return won;
            }
            hooks.fired = true;
            std::mem::take(&mut hooks.list)
        };
        let holds = self.reason().unwrap_or(reason);
        for (_, hook) in taken.drain(..) {
            run_hook(hook, holds);
        }
        // The emptied list goes back (a fired context pushes nothing more), so that
        // a context renewed after a cancel keeps its room for hooks.
        let mut hooks = self.hooks();
        if hooks.list.capacity() == 0 {
            hooks.list = taken;
        }
        won
    }

    /// Adds `hook`; runs it at once (here) when the context is cancelled already.
    fn register(self: &Arc<Self>, hook: Hook) -> Registration {
        let hook = {
            let mut hooks = self.hooks();
            if !hooks.fired && self.reason().is_none() {
                let id = hooks.next_id;
                hooks.next_id += 1;
                hooks.list.push((id, hook));
                return Registration {
                    shared: Some(Arc::clone(self)),
                    id,
                };
            }
            hook
        };
        run_hook(hook, self.reason().unwrap_or(CancelReason::Requested));
        Registration {
            shared: None,
            id: 0,
        }
    }

    fn unregister(&self, id: u64) {
        let removed = {
            let mut hooks = self.hooks();
            let at = hooks.list.iter().position(|(i, _)| *i == id);
            at.map(|at| hooks.list.swap_remove(at))
        };
        // The hook (and what it captured) is dropped outside the lock.
        drop(removed);
    }

    /// Arms the deadline thread for this context, once, if it has a deadline.
    fn arm(self: &Arc<Self>) {
        let Some(at) = self.deadline else { return };
        if self.timer.load(Ordering::Relaxed) != 0 {
            return;
        }
        let key = crate::deadline::arm(at, Arc::downgrade(self) as Weak<dyn Due>);
        if self
            .timer
            .compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            crate::deadline::disarm(at, key); // armed by another caller meanwhile
        }
    }
}

impl Due for Shared {
    /// Called by the deadline thread when this context's deadline has passed.
    fn deadline_passed(&self) {
        self.cancel_here(CancelReason::DeadlinePassed);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.disarm_owned();
    }
}

/// Runs one hook, here; a panic in it is caught, so that the other hooks still run
/// and the canceller carries on.
fn run_hook(hook: Hook, reason: CancelReason) {
    let run = move || match hook {
        Hook::Once(f) => f(reason),
        Hook::Shared(hook) => hook.cancelled(reason),
    };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(run)) {
        crate::payload::drop_payload(payload);
    }
}

/// A job's cancellation and deadline (see the module documentation). Cheap to
/// clone (an `Arc`); `Send + Sync`: hand a clone to whatever watches the client or
/// the clock.
///
/// ```
/// use fiber_pool::{CancelReason, Context};
/// let ctx = Context::new();
/// let watcher = ctx.clone();
/// std::thread::spawn(move || watcher.cancel(CancelReason::ClientGone)).join().unwrap();
/// assert_eq!(ctx.reason(), Some(CancelReason::ClientGone));
/// ```
#[derive(Clone)]
pub struct Context {
    shared: Arc<Shared>,
}

impl Default for Context {
    fn default() -> Self {
        Context::new()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("reason", &self.reason())
            .field("deadline", &self.shared.deadline)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A live context without a deadline: cancelled only by [`cancel`](Self::cancel).
    /// One allocation, no timer.
    pub fn new() -> Context {
        Context {
            shared: Arc::new(Shared::live(None, None)),
        }
    }

    /// A live context without a deadline, made of this one in place when nobody else
    /// holds it (no clone, no registration; an armed deadline is disarmed): then no
    /// allocation, and the room for hooks it had ([`reserve_hooks`](Self::reserve_hooks))
    /// is kept, which lets a server keep one context per connection for its requests
    /// in turn. Otherwise a new one with the same room, and this one is left to its
    /// other holders as it was.
    ///
    /// ```
    /// let ctx = fiber_pool::Context::new();
    /// ctx.cancel(fiber_pool::CancelReason::Requested);
    /// assert!(!ctx.renewed().is_cancelled());
    /// ```
    pub fn renewed(mut self) -> Context {
        // An armed deadline's entry holds a `Weak`, which `get_mut` counts: with no
        // other holder, disarming it (as the context's drop would) frees it for reuse.
        if self.shared.timer.load(Ordering::Relaxed) != 0 && Arc::strong_count(&self.shared) == 1 {
            let shared = &self.shared;
            crate::on_carrier(move || shared.disarm());
        }
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => {
                shared.renew();
                self
            }
            // Its room for hooks goes with it, made on the carrier's stack as
            // `reserve_hooks` makes it.
            None => {
                let shared = &self.shared;
                let room = crate::on_carrier(move || shared.hooks().room);
                let ctx = Context::new();
                ctx.reserve_hooks(room);
                ctx
            }
        }
    }

    /// This context with a deadline: cancelled by itself, with
    /// [`CancelReason::DeadlinePassed`], at `at` or at its own deadline if that is
    /// earlier. A context nobody else holds yet gets it in place; one already shared
    /// becomes the parent of the result ([`child`](Self::child)), so its other
    /// holders keep the deadline they had.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let ctx = fiber_pool::Context::new().with_deadline(Instant::now() + Duration::from_secs(2));
    /// assert!(!ctx.is_cancelled() && ctx.deadline().is_some());
    /// ```
    pub fn with_deadline(mut self, at: Instant) -> Context {
        let at = self.shared.deadline.map_or(at, |own| own.min(at));
        match Arc::get_mut(&mut self.shared) {
            // Unshared: no registration (each holds an Arc) and no timer yet.
            Some(shared) => {
                shared.deadline = Some(at);
                self
            }
            None => self.child_until(Some(at)),
        }
    }

    /// [`with_deadline`](Self::with_deadline)`(now + timeout)`; a timeout too large
    /// to add to the clock leaves the deadline as it was.
    pub fn with_timeout(self, timeout: Duration) -> Context {
        match Instant::now().checked_add(timeout) {
            Some(at) => self.with_deadline(at),
            None => self,
        }
    }

    /// A context cancelled when this one is (with its reason), which can also be
    /// cancelled, or given a tighter deadline, on its own without touching this one:
    /// what a [`scope`](crate::scope()) gives its children.
    pub fn child(&self) -> Context {
        self.child_until(self.shared.deadline)
    }

    fn child_until(&self, deadline: Option<Instant>) -> Context {
        let parent = &self.shared;
        let shared = Arc::new_cyclic(|child: &Weak<Shared>| {
            let child = child.clone();
            let pass_on = Hook::Once(Box::new(move |reason| {
                if let Some(child) = child.upgrade() {
                    child.cancel_here(reason);
                }
            }));
            let registration = crate::on_carrier(|| parent.register(pass_on));
            Shared::live(deadline, Some(registration))
        });
        let child = Context { shared };
        // A parent cancelled while the child was being made ran the hook at once,
        // before the child could be reached: pass its reason on now.
        if let Some(reason) = CancelReason::from_code(parent.reason.load(Ordering::Acquire)) {
            child.cancel(reason);
        }
        child
    }

    /// Cancels the context with `reason`, from any thread, coroutine or fiber; every
    /// wait of ours that it governs ends, and its hooks run, here (on a fiber: on the
    /// carrier's stack, see [`on_cancel`](Self::on_cancel)). Idempotent: the first
    /// reason holds and the hooks run once. Returns whether this call cancelled it.
    pub fn cancel(&self, reason: CancelReason) -> bool {
        let shared = &self.shared;
        crate::on_carrier(|| shared.cancel_here(reason))
    }

    /// Has the context been cancelled, or its deadline passed? An atomic load, and a
    /// clock read when it has a deadline.
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// Why the context was cancelled, or `None` while it is live. A deadline that
    /// has passed counts even before the deadline thread has fired it.
    pub fn reason(&self) -> Option<CancelReason> {
        self.shared.reason()
    }

    /// `Err(reason)` once cancelled: for `?` between the steps of a job.
    pub fn check(&self) -> Result<(), CancelReason> {
        self.reason().map_or(Ok(()), Err)
    }

    /// When the context cancels itself, if it has a deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.shared.deadline
    }

    /// Time left until the deadline (zero once passed); `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.shared
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Registers `hook` to run once when the context is cancelled, or at once if it
    /// already is; dropping the returned [`Registration`] unregisters it (a hook
    /// already running is not waited for).
    ///
    /// **Where it runs:** never on a fiber. On the canceller's side: the thread or
    /// coroutine that called [`cancel`](Self::cancel) (on the carrier's stack when
    /// that was a job), the deadline thread when the deadline passed (registering a
    /// hook on a context with a deadline is what arms that thread for it), or the
    /// caller of `on_cancel` (on the carrier's stack, for a job) when already
    /// cancelled.
    ///
    /// **What it may do:** short, non-blocking work: set a flag, unpark or notify a
    /// waiter, send on a channel, ask a connection to be killed by handing that to a
    /// coroutine or thread of its own. It must not block or wait on may (it may run on
    /// the deadline thread, which every other deadline waits behind, or on a
    /// canceller that must not park), and must not take a lock its context's job may
    /// hold. A panic in a hook is caught and dropped; the other hooks still run.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// let (ctx, seen) = (fiber_pool::Context::new(), Arc::new(AtomicBool::new(false)));
    /// let s = seen.clone();
    /// let _hook = ctx.on_cancel(move |_reason| s.store(true, Ordering::Relaxed));
    /// ctx.cancel(fiber_pool::CancelReason::Requested);
    /// assert!(seen.load(Ordering::Relaxed));
    /// ```
    pub fn on_cancel(&self, hook: impl FnOnce(CancelReason) + Send + 'static) -> Registration {
        self.register_hook(Hook::Once(Box::new(hook)))
    }

    /// [`Context::on_cancel`] with a shared `hook` told instead of a closure, which
    /// allocates nothing for the hook. Everything else is `on_cancel`'s: where the
    /// hook is told (never on a fiber), told at once when the context is cancelled
    /// already, the deadline thread armed, and the [`Registration`] that unregisters
    /// it when dropped.
    pub fn on_cancel_shared(&self, hook: Arc<impl CancelHook + 'static>) -> Registration {
        self.register_hook(Hook::Shared(hook))
    }

    /// Room for `n` hooks more, so that registering them allocates nothing: for a
    /// context kept for a connection's requests in turn ([`renewed`](Self::renewed)
    /// keeps the room), reserved where the caller's stack is shallow, rather than
    /// grown by a request's first hook deep in its path (a MySQL checkout's, on the
    /// carrier's stack, whose every page a kept-alive connection keeps resident).
    /// Taken on the carrier's stack, as every use of the hooks' lock (an allocation
    /// with it held must not be abandoned by a fiber's overflow); a no-op with the
    /// room there already.
    pub fn reserve_hooks(&self, n: usize) {
        let shared = &self.shared;
        crate::on_carrier(move || {
            let mut hooks = shared.hooks();
            hooks.room = hooks.room.max(n);
            hooks.list.reserve(n);
        });
    }

    fn register_hook(&self, hook: Hook) -> Registration {
        let shared = &self.shared;
        crate::on_carrier(move || {
            shared.arm();
            shared.register(hook)
        })
    }

    /// This context as a job's registry entry keeps it (read back by [`of_job`]).
    pub(crate) fn for_job(self) -> JobContext {
        self.shared
    }

    /// Registers a wake-up for one of the crate's own waits, which bound their
    /// parking by the deadline themselves: no timer is armed. Call off fibers.
    pub(crate) fn wake_on_cancel(
        &self,
        hook: impl FnOnce(CancelReason) + Send + 'static,
    ) -> Registration {
        self.shared.register(Hook::Once(Box::new(hook)))
    }

    /// Sleeps for `d` unless the context is cancelled first, or its deadline comes
    /// first: `Err(reason)` then, within about a millisecond of the cancel (see
    /// [`sleep_or_cancelled`]). On a fiber it parks on the carrier's stack.
    pub fn sleep(&self, d: Duration) -> Result<(), CancelReason> {
        let until = Instant::now().checked_add(d);
        crate::on_carrier(|| {
            if std::thread::panicking() {
                // No parking while unwinding (see `on_carrier`): a thread sleep.
                let left = [until, self.deadline()]
                    .into_iter()
                    .flatten()
                    .min()
                    .map(|end| end.saturating_duration_since(Instant::now()));
                std::thread::sleep(left.unwrap_or(d));
                return self.check();
            }
            let blocker = Arc::new(Blocker::new(false));
            let waker = Arc::clone(&blocker);
            let _wake = self.wake_on_cancel(move |_| waker.unpark());
            match park(&blocker, Some(self), until, || false) {
                Waited::Cancelled(reason) => Err(reason),
                Waited::Done | Waited::TimedOut => Ok(()),
            }
        })
    }
}

/// A hook given to [`Context::on_cancel`] or [`Context::on_cancel_shared`]; dropping it
/// unregisters the hook (a no-op once the hook has run).
#[must_use = "dropping a Registration unregisters its hook at once"]
pub struct Registration {
    /// `None` when the hook ran at registration.
    shared: Option<Arc<Shared>>,
    id: u64,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("pending", &self.shared.is_some())
            .finish()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let id = self.id;
            // The hooks' lock, and possibly the context's last drop, on the carrier.
            crate::on_carrier(move || shared.unregister(id));
        }
    }
}

/// The context of the job running on this fiber; `None` off fibers (on a plain
/// thread, a coroutine, or inside [`on_carrier`](crate::on_carrier)'s closure, which
/// runs on the carrier's stack: take the context before). A job run without one
/// gets a fresh live context on the first call, kept for the rest of the job.
///
/// ```
/// # #[global_allocator]
/// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
/// let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
/// let ctx = fiber_pool::Context::new();
/// let seen = pool.run_in("job", &ctx, || fiber_pool::current().unwrap().is_cancelled());
/// assert_eq!(seen, Ok(false));
/// assert!(fiber_pool::current().is_none());
/// ```
pub fn current() -> Option<Context> {
    let entry = StackEntry::find_running(crate::stack_check::stack_pointer())?;
    // SAFETY: we run on this entry's stack, so we are the job running there.
    Some(unsafe { of_job(entry) })
}

/// The context of the job running on `entry`, made (and kept for the rest of the job)
/// on the first call when the job was run without one.
///
/// # Safety
///
/// As for [`StackEntry::context`]: call only from that job, or from its carrier while
/// the job is parked in [`on_carrier`](crate::on_carrier).
pub(crate) unsafe fn of_job(entry: &StackEntry) -> Context {
    let make = || Arc::new(Shared::live(None, None)) as JobContext;
    // SAFETY: our caller's promise, passed on.
    let kept = unsafe { entry.context(make) };
    let shared = kept
        .downcast::<Shared>()
        .expect("a job's entry holds the context's state that `for_job` or `make` put there");
    Context { shared }
}

/// Sleeps for `d` on the carrier's stack, unless the current job's context is
/// cancelled (or its deadline passes) first: then it returns `Err(reason)` early.
/// Off fibers, or for a job whose context nobody can cancel, it is
/// [`sleep`](crate::sleep).
///
/// [`sleep`](crate::sleep) itself keeps its meaning, the full duration whatever
/// the context: polling loops with deadlines of their own (a `KILL QUERY`'s settle
/// poll) would spin through their remaining time if it ended early.
pub fn sleep_or_cancelled(d: Duration) -> Result<(), CancelReason> {
    match current() {
        Some(ctx) => ctx.sleep(d),
        None => {
            crate::sleep(d);
            Ok(())
        }
    }
}

/// How a [`park`] ended.
pub(crate) enum Waited {
    /// `done()` said so.
    Done,
    /// `until` passed.
    TimedOut,
    /// The context was cancelled, or its deadline passed.
    Cancelled(CancelReason),
}

/// The shortest park: may reads a zero timeout as "for ever".
const MIN_PARK: Duration = Duration::from_millis(1);

/// Parks on `blocker` (made on this side: a coroutine's or a thread's) until
/// `done()`, `until`, or the context's cancellation or deadline, whichever is
/// first; whoever makes `done()` true, and the context's cancel (through a
/// [`Context::wake_on_cancel`] the caller registered), unparks it. With neither
/// `until` nor a deadline it waits for `done()` or a cancel. Call off fibers.
pub(crate) fn park(
    blocker: &Blocker,
    ctx: Option<&Context>,
    until: Option<Instant>,
    mut done: impl FnMut() -> bool,
) -> Waited {
    loop {
        if done() {
            return Waited::Done;
        }
        if let Some(reason) = ctx.and_then(Context::reason) {
            return Waited::Cancelled(reason);
        }
        let now = Instant::now();
        if until.is_some_and(|u| now >= u) {
            return Waited::TimedOut;
        }
        let end = [until, ctx.and_then(Context::deadline)]
            .into_iter()
            .flatten()
            .min();
        // may's timer may fire a little early: the loop parks again then.
        let timeout = end.map(|end| end.saturating_duration_since(now).max(MIN_PARK));
        let _ = blocker.park(timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the hooks' list holds without growing.
    fn room(ctx: &Context) -> usize {
        ctx.shared.hooks().list.capacity()
    }

    /// A server reserves room for a connection's hooks once: every way its context
    /// is renewed keeps it, and only a context nobody else holds is reused.
    #[test]
    fn a_renewed_context_keeps_its_room_for_hooks() {
        let hook = || |_: CancelReason| {};

        // Alone, after a request whose hook came and went.
        let ctx = Context::new();
        ctx.reserve_hooks(4);
        drop(ctx.on_cancel(hook()));
        let before = Arc::as_ptr(&ctx.shared);
        let ctx = ctx.renewed();
        assert_eq!(Arc::as_ptr(&ctx.shared), before, "renewed in place");
        assert!(room(&ctx) >= 4, "room {} after a renewal", room(&ctx));

        // Cancelled with a hook registered: its hooks ran, the list came back.
        let registered = ctx.on_cancel(hook());
        ctx.cancel(CancelReason::ClientGone);
        drop(registered);
        let ctx = ctx.renewed();
        assert_eq!(Arc::as_ptr(&ctx.shared), before, "renewed in place");
        assert!(room(&ctx) >= 4, "room {} after a cancel", room(&ctx));
        assert_eq!(ctx.reason(), None);
        // Its hooks wait for its next cancel, as a new context's would.
        let told = Arc::new(AtomicU64::new(0));
        let t = Arc::clone(&told);
        let registered = ctx.on_cancel(move |_| {
            t.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(told.load(Ordering::SeqCst), 0, "a hook ran at registration");
        ctx.cancel(CancelReason::Requested);
        assert_eq!(told.load(Ordering::SeqCst), 1);
        drop(registered);
        let ctx = ctx.renewed();

        // A deadline armed by a hook: its entry is disarmed, and the context reused.
        let ctx = ctx.with_deadline(Instant::now() + Duration::from_secs(60));
        drop(ctx.on_cancel(hook()));
        assert_ne!(ctx.shared.timer.load(Ordering::Relaxed), 0, "armed");
        let ctx = ctx.renewed();
        assert_eq!(Arc::as_ptr(&ctx.shared), before, "renewed in place");
        assert_eq!(ctx.shared.timer.load(Ordering::Relaxed), 0, "disarmed");
        assert_eq!(ctx.deadline(), None);
        assert!(room(&ctx) >= 4, "room {} after a deadline", room(&ctx));

        // Held elsewhere: a new context, with the room asked for, even while the
        // other holder's list is out (its hooks running).
        let other = ctx.clone();
        let out = std::mem::take(&mut other.shared.hooks().list);
        let ctx = ctx.renewed();
        assert_ne!(Arc::as_ptr(&ctx.shared), Arc::as_ptr(&other.shared));
        assert!(room(&ctx) >= 4, "room {} in a new context", room(&ctx));
        drop(out);
    }
}
