//! [`FiberPool`]: N guarded fiber stacks, FIFO admission, and `run`, which
//! carries a job on a fiber from the calling may coroutine.
//!
//! `run` takes a slot (waiting in FIFO order), creates a corosensei coroutine
//! on the slot's stack, marks the stack running in the registry, and resumes
//! it once. The job runs to its end on the fiber stack, including any may I/O
//! it does: may switches the *carrier's* context, and the fiber stack goes
//! with it; the carrier never changes thread, so neither does the job. The coroutine returns an
//! `Outcome`: done (the value was written into the carrier's frame),
//! panicked, or overflowed (the signal handler reset it).

use std::mem::{ManuallyDrop, MaybeUninit};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corosensei::{Coroutine, CoroutineResult, Yielder};

use crate::admission::{Admission, Denied};
use crate::config::{ConfigError, PoolConfig, TRAP_AREA};
use crate::context::Context;
use crate::error::RunError;
use crate::highwater;
use crate::ledger::Ledger;
use crate::outcome::Outcome;
use crate::payload;
use crate::registry::{Region, StackEntry};
use crate::signal;
use crate::stack::{self, page_size, FiberStack, Spares};
use crate::stats::{Counters, Ended, PoolStats};
use crate::{aftermath, stall};

/// A fixed-size pool of guarded fibers. Cheap to clone; all clones share the
/// pool.
#[derive(Clone)]
pub struct FiberPool {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The stacks' registration; dropped first, before the stacks.
    region: Region,
    cfg: PoolConfig,
    /// Usable bytes per stack (`cfg.stack_size` page-rounded).
    stack_size: usize,
    slots: Vec<Slot>,
    /// One ledger of lent resources per stack of the reservation (spares
    /// included), indexed like the registry's entries.
    ledgers: Vec<Arc<Ledger>>,
    /// Stacks not handed out yet, for fibers whose stack was quarantined.
    spares: Mutex<Spares>,
    /// Admission to the `size` fibers of jobs: slots `0..size`.
    admission: Admission,
    /// Admission to the fibers reserved for scopes' children: slot `i` here is
    /// `slots[size + i]`.
    reserve: Admission,
    counters: Counters,
    /// Jobs started, to pick every `measure_every`-th one.
    started: AtomicU64,
}

/// One fiber: its stack, absent while a job runs on it and for good once the
/// fiber is retired. The stack's registry entry and ledger are found by its
/// index ([`FiberStack::index`]).
struct Slot {
    stack: Mutex<Option<FiberStack>>,
}

/// How a job got its fiber ([`FiberPool::run_admitted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Whether every fiber was busy, so the job waited in the queue for one.
    pub queued: bool,
}

/// Which fibers a run may take.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fibers {
    /// The `size` fibers of jobs, waiting in their queue.
    Jobs,
    /// A scope's child: a free fiber of the jobs', else one of the reserve.
    Child,
}

/// Gives the slot back to the admission queue, even if `run` unwinds, or
/// retires it when it has no stack any more.
struct Release<'a> {
    admission: &'a Admission,
    /// The slot's index in `admission`.
    slot: usize,
    retire: bool,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if self.retire {
            self.admission.retire();
        } else {
            self.admission.release(self.slot);
        }
    }
}

/// Makes may create its first coroutine (which installs generator's own
/// SIGSEGV handler), and installs ours in front of it (once per process).
fn init_process() -> Result<(), ConfigError> {
    signal::install(|| {
        // may installs its overflow handler when it creates a coroutine. If this is
        // the first one, may starts its threads now, and they inherit our signal
        // mask: block the asynchronous signals for them (see `signal`), then put
        // this thread's mask back.
        let old = signal::block_async_signals();
        let _ = may::go!(|| ()).join();
        signal::restore_signal_mask(&old);
    })
    .map_err(ConfigError::Os)
}

impl FiberPool {
    /// Creates the pool: reserves `size` + `child_reserve` stacks of `stack_size`
    /// usable bytes plus a guard of [`GUARD_SIZE`](crate::config::GUARD_SIZE) each,
    /// and `spare_stacks` more, in one mapping (address space only; pages are
    /// committed when touched), registers it, and installs the overflow
    /// handler once per process.
    ///
    /// Refuses with [`ConfigError::SafeAllocMissing`] unless
    /// [`FiberSafeAlloc`](crate::FiberSafeAlloc) is the process's global
    /// allocator (one probe allocation tells). The binary declares it:
    ///
    /// ```
    /// #[global_allocator]
    /// static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
    ///
    /// let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    /// assert_eq!(pool.stats().size, 100);
    /// ```
    pub fn new(cfg: PoolConfig) -> Result<FiberPool, ConfigError> {
        if !crate::alloc::is_global() {
            return Err(ConfigError::SafeAllocMissing);
        }
        // SAFETY: FiberSafeAlloc is the global allocator (checked above), which is
        // the contract of `new_without_safe_alloc`.
        unsafe { FiberPool::new_without_safe_alloc(cfg) }
    }

    /// [`new`](Self::new) without its check of the global allocator: for a
    /// process whose allocator is made overflow-safe some other way, and for the
    /// test that shows what happens without it (`tests/without_wrapper.rs`).
    ///
    /// # Safety
    ///
    /// No job of this pool may overflow its stack inside the system allocator.
    /// That holds when [`FiberSafeAlloc`](crate::FiberSafeAlloc) (or a wrapper
    /// that calls [`check_stack`](crate::check_stack) with at least
    /// [`ALLOC_STACK_MARGIN`](crate::ALLOC_STACK_MARGIN) before entering it) is
    /// the global allocator, or when the jobs never allocate. Otherwise an
    /// overflow abandons malloc mid-update: with its arena lock held (every
    /// later allocation on it waits for ever) or with a thread cache
    /// half-updated (glibc's invariants broken: a later allocation faults or
    /// corrupts the heap).
    pub unsafe fn new_without_safe_alloc(cfg: PoolConfig) -> Result<FiberPool, ConfigError> {
        let stack_size = cfg.validate(page_size())?;
        init_process()?;
        signal::prepare_thread().map_err(ConfigError::AltStack)?;
        let (layout, stacks, spares) =
            stack::reserve(cfg.stacks(), cfg.fibers(), stack_size).map_err(ConfigError::Os)?;
        let slots: Vec<Slot> = stacks
            .into_iter()
            .map(|stack| Slot {
                stack: Mutex::new(Some(stack)),
            })
            .collect();
        let ledgers: Vec<Arc<Ledger>> = (0..layout.slots).map(|_| Arc::default()).collect();
        let ledger_ptrs: Vec<*const Ledger> = ledgers.iter().map(Arc::as_ptr).collect();
        let region =
            Region::register(layout, &ledger_ptrs).map_err(|_| ConfigError::TooManyPools {
                max: crate::registry::MAX_POOLS,
            })?;
        Ok(FiberPool {
            inner: Arc::new(Inner {
                region,
                admission: Admission::new(cfg.size, cfg.queue),
                reserve: Admission::new(cfg.child_reserve, cfg.queue),
                cfg,
                stack_size,
                slots,
                ledgers,
                spares: Mutex::new(spares),
                counters: Counters::default(),
                started: AtomicU64::new(0),
            }),
        })
    }

    /// Runs `job` on one of the pool's fibers, carried by the calling may
    /// coroutine (or thread), and returns its value.
    ///
    /// Waits in FIFO order while all fibers are busy; `Busy` at once if
    /// `queue` callers already wait, `Timeout` after `wait_timeout`. The job
    /// may do may I/O through [`on_carrier`](crate::on_carrier); it then yields
    /// the carrier like any may code. A stack overflow gives `StackOverflow`
    /// (frames abandoned, [`Lent`](crate::Lent) values leaked and their owners
    /// told), a panic gives `Panicked`.
    ///
    /// # Why `'static`
    ///
    /// An overflow abandons the job's frames without unwinding them: no destructor,
    /// no scope guard and no join of the job's runs, and `run` returns while whatever
    /// the job started goes on. A job that borrowed from its caller could have lent
    /// that borrow to a thread it meant to join (`std::thread::scope` joins in code of
    /// the job); after the overflow that thread would read the caller's frame after
    /// `run` returned. So the job owns what it uses (`Arc`s, moved values), and the
    /// compiler refuses a borrowing one:
    ///
    /// ```compile_fail,E0597
    /// # #[global_allocator]
    /// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
    /// let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    /// let words = vec!["borrowed".to_string()];
    /// let total = pool.run("borrows", || words.iter().map(String::len).sum::<usize>());
    /// # let _ = total;
    /// ```
    ///
    /// What the job keeps on its own fiber stack may be lent freely: a stack whose job
    /// was abandoned is never used again (see below). [`scope`](crate::scope())'s
    /// children may borrow the job's locals: the pool itself ends them, overflow or
    /// not. A caller that can promise more uses
    /// [`run_admitted_in_unchecked`](Self::run_admitted_in_unchecked).
    ///
    /// # What a job may hold across a wait
    ///
    /// Anything, thread-bound values included (a `thread_local!` borrow, an `Rc` into a
    /// thread-local, a lock guard, a span entered on the thread's stack). The job runs
    /// on its fiber inside the calling coroutine, and a coroutine never changes OS
    /// thread (the patched may: [`spawn`](crate::spawn)), so every such value is its own
    /// thread's when a wait ends. The job shares the thread with the other coroutines of
    /// its worker, which run during its waits: see [`spawn`](crate::spawn) for what that
    /// interleaving means for `RefCell`s and std locks.
    ///
    /// # After an overflow
    ///
    /// Something may still refer to the abandoned frames: a thread started by
    /// `std::thread::scope` borrowing a local, a pinned value linked into a structure
    /// elsewhere, a pointer sent through a channel. So the stack is never reused: it
    /// is quarantined (mapped for the rest of the process; below the pool's own
    /// [`TRAP_AREA`] at its top, where the job never ran,
    /// nothing on it is written again) and the fiber gets a spare stack
    /// ([`PoolConfig::spare_stacks`]). With none left the fiber is retired, and once
    /// all are, `run` returns [`RunError::Retired`]. A stack whose job returned or
    /// unwound (a panic) is reused: nothing can refer to its frames any more.
    ///
    /// # What a job must not do
    ///
    /// - **block its thread** (`std::thread::sleep`, `std::net`, `std::fs`,
    ///   std `Mutex`/`Condvar` waits, long CPU loops): every coroutine of that
    ///   may worker waits meanwhile ([`jobs_running_longer_than`](crate::jobs_running_longer_than)
    ///   shows it to a watchdog); this includes waiting for a `std::thread::scope`,
    ///   which also leaves its threads running after an overflow, never joined;
    /// - **lend a borrow of a `thread_local!` or `may::coroutine_local!` value to a
    ///   thread or coroutine it would join later** (`TLS.with(|v|
    ///   std::thread::scope(|s| { s.spawn(|| v.len()); .. }))`): an overflow skips
    ///   the join, and the value is freed when its thread or carrier ends while that
    ///   code still reads it. `'static` keeps the job's captures owned, but a
    ///   thread-local borrow is made inside the job, where the compiler allows it: this
    ///   is undefined behaviour reachable from safe code, which the pool cannot
    ///   detect. What such code may borrow safely is the job's own stack (quarantined,
    ///   never freed) and what it owns;
    /// - **keep a [`Lent`](crate::Lent) past its end** (in a thread-local):
    ///   using it from elsewhere panics (tested in `tests/hazards.rs`);
    /// - **hold a std lock, a `Once`/`LazyLock` initialisation or stdout across
    ///   deep code**: an overflow there leaves it held; reserve stack first
    ///   ([`lock`](crate::lock), [`reserve_stack`](crate::reserve_stack)).
    ///
    /// These are reported (stall watchdog, `unsafe_overflows`), not prevented.
    pub fn run<T, F>(&self, label: &'static str, job: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run_measured(label, job).0
    }

    /// [`run`](Self::run), and the stack bytes this job used when it was one of the
    /// measured ones (every `measure_every`-th job; `None` for the others, and for a
    /// job that overflowed or never got a fiber): for an access log line.
    pub fn run_measured<T, F>(
        &self,
        label: &'static str,
        job: F,
    ) -> (Result<T, RunError>, Option<usize>)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (ran, used) = self.run_admitted(label, |_| true, job);
        (ran.map(started), used)
    }

    /// [`run_measured`](Self::run_measured), with a check between the job's admission
    /// and its start: `start` runs on the calling coroutine's stack once the job has
    /// its fiber, told how it got it ([`Admitted`]), and the job runs only if it
    /// returns true (`Ok(None)` otherwise, the job dropped unrun). A server checks
    /// there whether a client that waited is still there, and skips the check (and its
    /// clock read) for one that did not wait. `start` never runs on a fiber, so it may
    /// borrow what it likes.
    pub fn run_admitted<T, F, S>(
        &self,
        label: &'static str,
        start: S,
        job: F,
    ) -> (Result<Option<T>, RunError>, Option<usize>)
    where
        S: FnOnce(Admitted) -> bool + Send,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run_admitted_in(label, None, start, job)
    }

    /// [`run`](Self::run) under `ctx`: the job's [`current`](crate::current) context,
    /// which every wait of ours in it sees. A context cancelled (or past its
    /// deadline) before the job gets a fiber ends the wait for one, and the job does
    /// not run: [`RunError::Cancelled`]. Once running, the job sees the cancellation
    /// at its waits ([`sleep_or_cancelled`](crate::sleep_or_cancelled), scopes,
    /// [`blocking`](crate::blocking())) and in `is_cancelled()`; it runs on until it
    /// looks (see [`context`](crate::context)).
    ///
    /// ```
    /// # #[global_allocator]
    /// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
    /// use fiber_pool::{CancelReason, Context, FiberPool, PoolConfig, RunError};
    /// let pool = FiberPool::new(PoolConfig::default()).unwrap();
    /// let ctx = Context::new();
    /// ctx.cancel(CancelReason::ClientGone);
    /// let ran = pool.run_in("late", &ctx, || 1);
    /// assert_eq!(ran, Err(RunError::Cancelled { reason: CancelReason::ClientGone }));
    /// ```
    pub fn run_in<T, F>(&self, label: &'static str, ctx: &Context, job: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run_admitted_in(label, Some(ctx), |_| true, job)
            .0
            .map(started)
    }

    /// [`run_admitted`](Self::run_admitted) under a context (see
    /// [`run_in`](Self::run_in)). With `None`, a job started from another job (on a
    /// fiber) runs under that job's context, so that cancelling a request reaches the
    /// jobs it runs; any other gets a fresh context when it first asks for one.
    pub fn run_admitted_in<T, F, S>(
        &self,
        label: &'static str,
        ctx: Option<&Context>,
        start: S,
        job: F,
    ) -> (Result<Option<T>, RunError>, Option<usize>)
    where
        S: FnOnce(Admitted) -> bool + Send,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // SAFETY: `job` and `T` are 'static: they borrow nothing of the caller's (what
        // a job borrows from a thread-local inside itself is the hazard `run`'s docs
        // name, which no signature can exclude), so
        // nothing of the caller's can be in use after `run` returns.
        unsafe { self.run_admitted_in_unchecked(label, ctx, start, job) }
    }

    /// [`run_admitted_in`](Self::run_admitted_in) for a job that borrows from its
    /// caller.
    ///
    /// # Safety
    ///
    /// No code that runs concurrently with the job may use a borrow the job holds
    /// (anything `job` captured by reference, and anything reached through it),
    /// except the children of the job's [`scope`](crate::scope())s (the pool ends
    /// them before this function returns, whatever becomes of the job), as long as
    /// they too lend such a borrow to nothing they would join later (a child that
    /// overflows skips its joins like any job, and this function still returns). Code the job
    /// waits for in [`on_carrier`](crate::on_carrier) runs while the job is parked,
    /// not concurrently. The reason: an overflow abandons the job's frames without
    /// unwinding them, so a thread, coroutine or callback given such a borrow is
    /// never joined or stopped by the job (`std::thread::scope` and
    /// `may::coroutine::scope` join in code of the job, a join handle joins in a
    /// destructor), and this function returns, letting the caller free what it lent,
    /// while that code still uses it. (Thread-bound state the job holds across its
    /// waits is no part of this contract: the job never changes thread.)
    pub unsafe fn run_admitted_in_unchecked<T, F, S>(
        &self,
        label: &'static str,
        ctx: Option<&Context>,
        start: S,
        job: F,
    ) -> (Result<Option<T>, RunError>, Option<usize>)
    where
        S: FnOnce(Admitted) -> bool + Send,
        F: FnOnce() -> T + Send,
        T: Send,
    {
        if crate::on_fiber() {
            // SAFETY: our caller's promise, passed on.
            return unsafe { self.run_nested(label, ctx, start, job) };
        }
        // SAFETY: our caller's promise, passed on.
        unsafe { self.run_here(label, ctx.cloned(), Fibers::Jobs, start, job) }
    }

    /// [`run_admitted_in_unchecked`](Self::run_admitted_in_unchecked) called on a
    /// fiber: a job that runs another job (of this pool or another). The inner run
    /// waits, parks and switches like any carrier, so it runs on the carrier's stack,
    /// never nested on this fiber's (whose overflow would abandon the inner run's
    /// admission slot and stack for good). Out of line, so that the frame of a run
    /// from a carrier (a request's, on its connection's stack) holds none of this.
    ///
    /// # Safety
    ///
    /// As for `run_admitted_in_unchecked`.
    #[inline(never)]
    unsafe fn run_nested<T, F, S>(
        &self,
        label: &'static str,
        ctx: Option<&Context>,
        start: S,
        job: F,
    ) -> (Result<Option<T>, RunError>, Option<usize>)
    where
        S: FnOnce(Admitted) -> bool + Send,
        F: FnOnce() -> T + Send,
        T: Send,
    {
        // The calling job's context is read on the carrier too (it may be made
        // there): nothing of this but the lookup on the fiber's stack.
        let caller = ctx
            .is_none()
            .then(crate::stack_check::running_entry)
            .flatten();
        crate::on_carrier(move || {
            // SAFETY: `caller` is the entry of the job that called us, parked in this
            // `on_carrier` on its carrier: the same line of control.
            let ctx = ctx
                .cloned()
                .or_else(|| caller.map(|e| unsafe { crate::context::of_job(e) }));
            // SAFETY: our caller's promise, passed on.
            unsafe { self.run_here(label, ctx, Fibers::Jobs, start, job) }
        })
    }

    /// [`run_admitted_in_unchecked`](Self::run_admitted_in_unchecked) from the carrier
    /// (off any fiber).
    ///
    /// # Safety
    ///
    /// As for `run_admitted_in_unchecked`.
    pub(crate) unsafe fn run_here<T, F, S>(
        &self,
        label: &'static str,
        ctx: Option<Context>,
        fibers: Fibers,
        start: S,
        job: F,
    ) -> (Result<Option<T>, RunError>, Option<usize>)
    where
        S: FnOnce(Admitted) -> bool,
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let inner = &*self.inner;
        if let Some(reason) = ctx.as_ref().and_then(Context::reason) {
            inner.counters.cancelled();
            return (Err(RunError::Cancelled { reason }), None);
        }
        let (admission, slot_index, queued) = match inner.admit(fibers, ctx.as_ref()) {
            Ok(admitted) => admitted,
            Err(e) => return (Err(e), None),
        };
        let mut release = Release {
            admission,
            slot: slot_index,
            retire: false,
        };
        if !start(Admitted { queued }) {
            return (Ok(None), None);
        }
        // A failure was said on stderr; the job still runs, on the alternate stack the
        // thread has (see `prepare_thread`).
        let _ = signal::prepare_thread();
        let in_slots = if std::ptr::eq(admission, &inner.reserve) {
            inner.cfg.size + slot_index
        } else {
            slot_index
        };
        let slot = &inner.slots[in_slots];
        let stack = lock(&slot.stack)
            .take()
            .expect("a slot handed out by admission holds its stack");
        let stack_index = stack.index();
        let ledger = &inner.ledgers[stack_index];

        let every = u64::from(inner.cfg.measure_every);
        let measure = every != 0
            && inner
                .started
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(every);
        if measure {
            highwater::reset(&stack);
        }

        let entry = inner.region.entry(stack_index);
        // SAFETY: we own the slot and no job runs on its stack yet (`begin` is below).
        unsafe { entry.set_job(ctx.map(Context::for_job), Arc::as_ptr(&self.inner).cast()) };
        // The job and its value stay in this frame, on the carrier's stack: the fiber
        // takes the job from here below its trap area (see `run_below_trap_area`), so
        // nothing of it is ever in the top of the fiber stack, where corosensei's trap
        // handler writes; and the coroutine's start-up copy is three pointers
        // whatever the job's size.
        let mut job = ManuallyDrop::new(job);
        let mut value: Option<T> = None;
        let taken = FromCarrier {
            job: &mut job,
            out: &mut value,
        };
        let body = move |yielder: &Yielder<(), ()>, (): ()| -> Outcome {
            // Lets `on_carrier` find this coroutine's yielder by the stack address.
            entry.set_yielder(yielder);
            // SAFETY: `taken` points into this frame of `run_here` on the carrier's
            // stack, which outlives the coroutine (resumed once, to its end, below),
            // and the job in it is taken exactly once: here.
            let outcome = unsafe { run_below_trap_area(taken) };
            entry.set_yielder(std::ptr::null());
            outcome
        };
        // SAFETY: `body` borrows `job` and `value` (through `taken`) and the slot's
        // entry, all in or behind this frame, which outlives the coroutine: it is
        // resumed to completion (it never suspends: only `on_carrier` uses its yielder,
        // and that runs a call on this stack and returns to the fiber) and turned back
        // into its stack before this function returns. What the job itself borrows is
        // our caller's promise (this function's `# Safety`).
        let mut fiber: Coroutine<(), (), Outcome, FiberStack> =
            unsafe { Coroutine::with_stack_unchecked(stack, body) };
        let mut run = || {
            entry.begin(fiber.trap_handler(), label);
            stall::enter(label);
            let outcome = match fiber.resume(()) {
                CoroutineResult::Return(outcome) => outcome,
                CoroutineResult::Yield(()) => unreachable!("a job cannot suspend its fiber"),
            };
            stall::leave();
            entry.end();
            // SAFETY: we own the slot and its job has ended (`end` above). Dropped
            // here, on the carrier: its last drop may take the deadline thread's lock.
            drop(unsafe { entry.take_context() });
            outcome
        };
        // A may thread blocks the asynchronous signals for good (`prepare_thread`);
        // any other thread only while its fiber runs (see `signal`).
        let outcome = if may::coroutine::is_coroutine() {
            run()
        } else {
            signal::masked_while(run)
        };
        let stack = fiber.into_stack();

        // Measure and give the slot its stack back before anything that could
        // panic (an `on_abandon` callback), so the slot stays whole. After an
        // overflow the stack is quarantined and the slot gets a spare, or is
        // retired when none is left (see `run`).
        let used = match outcome {
            Outcome::Overflow { .. } => None,
            _ if measure => Some(highwater::measure(&stack)),
            _ => None,
        };
        let next = match outcome {
            Outcome::Overflow { .. } => inner.replace(stack),
            _ => Some(stack),
        };
        release.retire = next.is_none();
        *lock(&slot.stack) = next;

        let (ended, result) = match outcome {
            Outcome::Done => {
                aftermath::second_faults(ledger.finish());
                let value = value.expect("a finished job wrote its value");
                (Ended::Completed, Ok(Some(value)))
            }
            failed => {
                let (ended, err) = inner.failed(failed, label, entry, ledger);
                (ended, Err(err))
            }
        };
        inner.counters.ran(label, ended, used);
        (result, used)
    }
    /// The pool of the job running on `entry`'s stack.
    ///
    /// # Safety
    ///
    /// `pool` is the pool pointer of a job that is running now (from the registry
    /// entry of the fiber we run on, or of the job parked in our `on_carrier`): its
    /// `run` borrows the pool, which is alive.
    pub(crate) unsafe fn of_running_job(pool: *const ()) -> FiberPool {
        // The registry keeps it untyped; `run_here` stored an `Inner`'s.
        let pool = pool.cast::<Inner>();
        // SAFETY: the pointer is `Arc::as_ptr` of a live pool's `Inner` (`run_here`
        // stores it), whose strong count is at least one while the job runs (its
        // `run` holds `&self`); one more count makes an owned handle of it.
        let inner = unsafe {
            Arc::increment_strong_count(pool);
            Arc::from_raw(pool)
        };
        FiberPool { inner }
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        let inner = &*self.inner;
        let (busy, queued, retired) = inner.admission.counts();
        let (reserve_busy, reserve_queued, _) = inner.reserve.counts();
        // `stats` runs on fibers too (a /stats route): an overflow must not strike
        // with the spares' lock held (the next overflow's carrier would wait on it
        // for ever). `counts` above checks far more already; this lock keeps its
        // own check so that it does not depend on that order. The caller may hold
        // anything: an overflow here is not at a safe point.
        let spare_stacks = crate::lock_anywhere(&inner.spares).left();
        let mut stats = PoolStats {
            size: inner.cfg.size,
            stack_size: inner.stack_size,
            busy,
            queued,
            retired,
            spare_stacks,
            child_reserve: inner.cfg.child_reserve,
            reserve_busy,
            reserve_queued,
            ..PoolStats::default()
        };
        inner.counters.snapshot(&mut stats);
        stats
    }

    /// The configuration the pool was built with (`stack_size` as given; the
    /// rounded size is in `stats().stack_size`).
    pub fn config(&self) -> &PoolConfig {
        &self.inner.cfg
    }
}

/// The value of a run whose `start` check always says yes.
pub(crate) fn started<T>(ran: Option<T>) -> T {
    ran.expect("a job whose start check says yes runs")
}

/// Where a job's fiber finds the job and puts its value: in `run_here`'s frame on
/// the carrier's stack.
struct FromCarrier<F, T> {
    job: *mut ManuallyDrop<F>,
    out: *mut Option<T>,
}

/// Runs the job of `taken` below the fiber's [`TRAP_AREA`], and says how it ended.
///
/// The area is a reserved, never written stretch of this function's frame, which is
/// the coroutine's first below corosensei's start-up frame: everything the job's
/// code ever puts on the stack (the job itself, moved here by `run_job`, its
/// captures, its locals) lies below it. When an overflow resets the fiber,
/// corosensei's trap handler writes its own frames from the top of the stack down,
/// over our start-up frames only (test `trap_area` measures how far it writes); so
/// what the job's frames held stays as it was for anything that still borrows it
/// (see `stack::quarantine`).
///
/// # Safety
///
/// `taken` points to a job not taken yet and to a value slot nobody else uses, both
/// alive until this returns; called once per job, at the start of its coroutine.
#[inline(never)]
unsafe fn run_below_trap_area<F: FnOnce() -> T, T>(taken: FromCarrier<F, T>) -> Outcome {
    let mut area = MaybeUninit::<[u8; TRAP_AREA]>::uninit();
    keep_in_frame(area.as_mut_ptr().cast());
    // SAFETY: our caller's contract, passed on.
    let outcome = unsafe { run_job(taken) };
    // The area is in use across the call, so it is part of this frame while the job
    // runs (the call is not a tail call either).
    keep_in_frame(area.as_mut_ptr().cast());
    outcome
}

/// Tells the compiler that `place` escapes here, without touching it: the stack
/// slot it points to must exist, and cannot be shrunk, merged or moved.
#[inline(always)]
fn keep_in_frame(place: *mut u8) {
    // SAFETY: an empty instruction sequence that only receives a pointer; it reads
    // and writes nothing (the compiler must assume it might, which is the point).
    unsafe { std::arch::asm!("/* {0} */", in(reg) place, options(nostack, preserves_flags)) };
}

/// Takes the job out of the carrier's frame into this one (below the trap area),
/// runs it, catching a panic, and writes its value to the carrier's slot.
///
/// # Safety
///
/// As for [`run_below_trap_area`].
// Never inlined: inlined, the job could be laid out above the trap area in one frame.
// That the trap handler's frames fit in corosensei's start-up frames plus TRAP_AREA
// is a measurement (`tests/trap_area.rs`), not a guarantee of corosensei's.
#[inline(never)]
unsafe fn run_job<F: FnOnce() -> T, T>(taken: FromCarrier<F, T>) -> Outcome {
    // SAFETY: the job is taken once (our contract); from here on the carrier's copy
    // is never used or dropped.
    let job = unsafe { ManuallyDrop::take(&mut *taken.job) };
    match panic::catch_unwind(AssertUnwindSafe(job)) {
        Ok(v) => {
            // SAFETY: `out` points into `run_here`'s frame on the carrier's stack,
            // which outlives the coroutine; nothing else accesses it meanwhile.
            unsafe { taken.out.write(Some(v)) };
            Outcome::Done
        }
        Err(payload) => {
            let message = payload::panic_message(&*payload);
            payload::drop_payload(payload);
            Outcome::Panicked(message)
        }
    }
}

impl Inner {
    /// Does the aftermath of a job that did not return (`outcome` is a panic or an
    /// overflow), and says how it ended and its error. Out of line and cold: a request's run
    /// (`run_here`, on its connection's stack) keeps none of this in its frame.
    #[cold]
    #[inline(never)]
    fn failed(
        &self,
        outcome: Outcome,
        label: &'static str,
        entry: &StackEntry,
        ledger: &Ledger,
    ) -> (Ended, RunError) {
        match outcome {
            Outcome::Done => unreachable!("a job that returned did not fail"),
            Outcome::Panicked(message) => {
                aftermath::second_faults(ledger.finish());
                (Ended::Panicked, RunError::Panicked { label, message })
            }
            Outcome::Overflow { fault_pc } => {
                // Here, on the carrier's stack, after the fiber is gone, on the
                // thread it overflowed on (no yield since): std's panic count
                // still shows a panic the fiber was in.
                // A safe point holds nothing, unless the job was panicking: then std's
                // panic state (and its hook lock, in the hook) is held whatever struck.
                let at_safe_point = entry.struck_at_safe_point() && !std::thread::panicking();
                aftermath::overflowed(at_safe_point, std::thread::panicking());
                let (_, failed) = ledger.abandon_all();
                aftermath::second_faults(failed);
                let err = RunError::StackOverflow {
                    stack_size: self.stack_size,
                    label,
                    at_safe_point,
                    fault_pc,
                };
                (Ended::Overflowed { at_safe_point }, err)
            }
        }
    }

    /// A fiber for a run of `fibers`: the admission it came from, its slot there,
    /// and whether the run waited. Counts the refusals. Out of line: its waits stay
    /// out of the frame of `run_here`.
    #[inline(never)]
    fn admit(
        &self,
        fibers: Fibers,
        ctx: Option<&Context>,
    ) -> Result<(&Admission, usize, bool), RunError> {
        let (admission, timeout) = match fibers {
            Fibers::Jobs => (&self.admission, self.cfg.wait_timeout),
            Fibers::Child => {
                if let Some(slot) = self.admission.try_acquire() {
                    return Ok((&self.admission, slot, false));
                }
                if self.cfg.child_reserve == 0 {
                    self.counters.timed_out();
                    return Err(RunError::NoFiberForChild {
                        waited: Duration::ZERO,
                        reserve: 0,
                    });
                }
                (&self.reserve, Some(self.cfg.child_wait))
            }
        };
        match admission.acquire(timeout, ctx) {
            Ok((slot, queued)) => Ok((admission, slot, queued)),
            Err(Denied::Busy) => {
                self.counters.rejected();
                Err(RunError::Busy {
                    queue: self.cfg.queue,
                })
            }
            Err(Denied::Timeout(waited)) => {
                self.counters.timed_out();
                Err(match fibers {
                    Fibers::Jobs => RunError::Timeout { waited },
                    Fibers::Child => RunError::NoFiberForChild {
                        waited,
                        reserve: self.cfg.child_reserve,
                    },
                })
            }
            Err(Denied::Retired) => {
                self.counters.rejected();
                let size = match fibers {
                    Fibers::Jobs => self.cfg.size,
                    Fibers::Child => self.cfg.child_reserve,
                };
                Err(RunError::Retired { size })
            }
            Err(Denied::Cancelled(reason)) => {
                self.counters.cancelled();
                Err(RunError::Cancelled { reason })
            }
        }
    }

    /// Quarantines `stack`, which overflowed, and returns a spare for its
    /// slot, or `None` when none is left (or the OS refused to make its
    /// guard): the slot is then retired.
    #[cold]
    #[inline(never)]
    fn replace(&self, stack: FiberStack) -> Option<FiberStack> {
        stack::quarantine(stack);
        aftermath::quarantined();
        let spare = lock(&self.spares).take().and_then(Result::ok);
        if spare.is_none() {
            aftermath::retired();
        }
        spare
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Held only for a take or a put: never poisoned half-way.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
