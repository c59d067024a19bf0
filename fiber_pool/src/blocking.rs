//! [`blocking`]: a bridge for code that blocks its thread (std I/O, `std::fs`, a
//! synchronous client, a long computation): the closure runs on a bounded pool of OS
//! threads, and only the caller waits, parked on its carrier.
//!
//! ```text
//!   job (fiber) ── blocking(f) ──► queue (≤ `queue`) ──► one of ≤ `threads` OS threads
//!     parked on its carrier                                  runs f to its end
//!     (its worker runs other coroutines)   ◄── result ───────┘
//!     ends early at `wait`, or at its context's cancel or deadline
//! ```
//!
//! Such code on a fiber would hold its may worker for as long as it blocks, and every
//! coroutine of that worker would wait (the stall watchdog,
//! [`jobs_running_longer_than`](crate::jobs_running_longer_than), reports the job).
//! Through `blocking` the job is parked on its carrier meanwhile, not running: not a
//! stall, and its worker runs the other coroutines.
//!
//! **Limits** ([`BlockingConfig`]): at most `threads` threads (started on demand, each
//! ending after [`BLOCKING_IDLE_EXIT`] without work), at most `queue` closures waiting
//! for one (one more fails at once with
//! [`RunError::BlockingQueueFull`]), and each
//! caller waits at most `wait` (then
//! [`RunError::BlockingTimeout`]).
//!
//! **When the caller stops waiting** (its `wait`, or its context cancelled or past its
//! deadline: [`RunError::Cancelled`]), a closure not
//! started yet is dropped unrun; one already running runs to its end on its thread
//! (nothing can stop a blocking call from outside), and its result is dropped there.
//! So the closure owns what it uses (`'static`): its caller may be long gone.
//!
//! **Panics and overflows**: a panic in the closure is caught on its thread and is
//! the caller's [`RunError::Panicked`] (label
//! [`BLOCKING_LABEL`]). The threads are plain threads with a `stack_size` stack and
//! std's guard page, not guarded fibers: a stack overflow there ends the process, as
//! on any thread. Keep deep recursion on fibers.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use may::sync::Blocker;

use crate::config::ConfigError;
use crate::context::{park, Context, Waited};
use crate::error::RunError;

/// The label of a panicking closure's [`RunError::Panicked`].
pub const BLOCKING_LABEL: &str = "blocking";

/// How long an idle thread of a blocking pool waits for work before it ends (the
/// pool starts another when work comes).
pub const BLOCKING_IDLE_EXIT: Duration = Duration::from_secs(60);

/// The most threads a blocking pool may have (a limit of [`config`](crate::config),
/// where [`ConfigError`] names it too).
pub use crate::config::MAX_BLOCKING_THREADS;

/// How a [`BlockingPool`] is sized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockingConfig {
    /// At most this many closures run at once, each on an OS thread of its own.
    pub threads: usize,
    /// How many closures may wait for a thread; one more fails at once.
    pub queue: usize,
    /// How long a caller waits for its closure's result (queued and running);
    /// `None` waits for as long as the closure runs (its context still ends the
    /// wait).
    pub wait: Option<Duration>,
    /// Stack bytes of each thread (a plain thread's: an overflow there ends the
    /// process).
    pub stack_size: usize,
}

impl Default for BlockingConfig {
    /// 16 threads, 256 waiting closures, 30 s wait (the pool's own `wait_timeout`),
    /// 2 MiB stacks (std's default for spawned threads). Sixteen blocking calls at
    /// once is a lot for a 2-core server whose I/O is otherwise on may; a burst
    /// beyond it queues, and beyond 256 is refused rather than piling up threads.
    fn default() -> Self {
        BlockingConfig {
            threads: 16,
            queue: 256,
            wait: Some(Duration::from_secs(30)),
            stack_size: 2 * 1024 * 1024,
        }
    }
}

impl BlockingConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.threads == 0 || self.threads > MAX_BLOCKING_THREADS {
            return Err(ConfigError::BlockingThreads {
                threads: self.threads,
            });
        }
        if self.queue > crate::config::MAX_QUEUE {
            return Err(ConfigError::QueueTooLong { queue: self.queue });
        }
        Ok(())
    }
}

/// A closure handed to the threads, with its caller's side.
struct Task {
    run: Box<dyn FnOnce() + Send>,
    /// Set by a caller that stopped waiting before a thread took the task.
    state: Arc<Mutex<TaskState>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Queued,
    Running,
    /// Its caller stopped waiting while it was queued: dropped unrun.
    Abandoned,
}

struct Shared {
    cfg: BlockingConfig,
    /// Taken on carriers and the pool's threads only, never on a fiber, never across
    /// a wait or a closure.
    state: Mutex<State>,
    work: Condvar,
}

struct State {
    queue: VecDeque<Task>,
    threads: usize,
    idle: usize,
}

/// A bounded pool of OS threads for blocking closures; see the module documentation.
/// Cheap to clone; [`blocking`] uses a process-wide one ([`set_default`]).
#[derive(Clone)]
pub struct BlockingPool {
    shared: Arc<Shared>,
}

/// A snapshot of a [`BlockingPool`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockingStats {
    /// Threads alive (running a closure or idle).
    pub threads: usize,
    /// Of those, waiting for work.
    pub idle: usize,
    /// Closures waiting for a thread.
    pub queued: usize,
}

impl BlockingPool {
    /// A pool with no thread yet: threads start on demand, up to `cfg.threads`.
    pub fn new(cfg: BlockingConfig) -> Result<BlockingPool, ConfigError> {
        cfg.validate()?;
        Ok(BlockingPool {
            shared: Arc::new(Shared {
                cfg,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                }),
                work: Condvar::new(),
            }),
        })
    }

    /// Runs `f` on one of the pool's threads and returns its value; the caller (a
    /// job: its fiber, parked on the carrier; a coroutine; a thread) waits for it,
    /// under the current job's context. See the module documentation for the errors.
    pub fn run<T, F>(&self, f: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let ctx = crate::current();
        crate::on_carrier(move || self.run_here(ctx.as_ref(), f))
    }

    /// [`run`](Self::run) under `ctx` instead of the current job's context.
    pub fn run_in<T, F>(&self, ctx: &Context, f: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        crate::on_carrier(move || self.run_here(Some(ctx), f))
    }

    /// The pool's configuration.
    pub fn config(&self) -> &BlockingConfig {
        &self.shared.cfg
    }

    /// Threads and queue now.
    pub fn stats(&self) -> BlockingStats {
        let shared = &self.shared;
        crate::on_carrier(|| {
            let state = shared.lock();
            BlockingStats {
                threads: state.threads,
                idle: state.idle,
                queued: state.queue.len(),
            }
        })
    }

    /// `run` on the carrier's stack (or off fibers).
    fn run_here<T, F>(&self, ctx: Option<&Context>, f: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if let Some(reason) = ctx.and_then(Context::reason) {
            return Err(RunError::Cancelled { reason });
        }
        let start = Instant::now();
        let blocker = Arc::new(Blocker::new(false));
        let result: Arc<Mutex<Option<std::thread::Result<T>>>> = Arc::default();
        let state = Arc::new(Mutex::new(TaskState::Queued));
        let (waker, out) = (Arc::clone(&blocker), Arc::clone(&result));
        let run = Box::new(move || {
            let value = catch_unwind(AssertUnwindSafe(f));
            *lock(&out) = Some(value);
            waker.unpark();
        });
        self.submit(Task {
            run,
            state: Arc::clone(&state),
        })?;
        let _wake = ctx.map(|ctx| {
            let waker = Arc::clone(&blocker);
            ctx.wake_on_cancel(move |_| waker.unpark())
        });
        let until = self.shared.cfg.wait.and_then(|w| start.checked_add(w));
        let waited = park(&blocker, ctx, until, || lock(&result).is_some());
        let taken = lock(&result).take();
        if let Some(value) = taken {
            // Finished, whatever ended the wait: the value is here.
            return value.map_err(|payload| {
                let message = crate::payload::panic_message(&*payload);
                crate::payload::drop_payload(payload);
                RunError::Panicked {
                    label: BLOCKING_LABEL,
                    message,
                }
            });
        }
        {
            // Not started yet: it never will be.
            let mut state = lock(&state);
            if *state == TaskState::Queued {
                *state = TaskState::Abandoned;
            }
        }
        Err(match waited {
            Waited::Cancelled(reason) => RunError::Cancelled { reason },
            Waited::TimedOut | Waited::Done => RunError::BlockingTimeout {
                waited: start.elapsed(),
            },
        })
    }

    /// Queues `task`, starting a thread for it when none is idle and fewer than
    /// `threads` exist.
    fn submit(&self, task: Task) -> Result<(), RunError> {
        let shared = &self.shared;
        let mut state = shared.lock();
        // Closures queued that no thread, idle or still to be started, will take at
        // once: those wait, at most `queue` of them.
        let takers = state.idle + (shared.cfg.threads - state.threads);
        if state.queue.len() >= takers + shared.cfg.queue {
            return Err(RunError::BlockingQueueFull {
                queue: shared.cfg.queue,
            });
        }
        state.queue.push_back(task);
        if state.idle >= state.queue.len() {
            drop(state);
            shared.work.notify_one();
            return Ok(());
        }
        if state.threads == shared.cfg.threads {
            return Ok(()); // waits for a thread to finish its closure
        }
        state.threads += 1;
        drop(state);
        let for_thread = Arc::clone(shared);
        let started = std::thread::Builder::new()
            .name("fiber-blocking".into())
            .stack_size(shared.cfg.stack_size)
            .spawn(move || work(&for_thread));
        if started.is_err() {
            // The OS refused a thread: the task waits for one of the others, or its
            // caller's wait ends it. With no other thread at all, say so now.
            let mut state = shared.lock();
            state.threads -= 1;
            if state.threads == 0 {
                let task = state.queue.pop_back();
                drop(state);
                drop(task);
                return Err(RunError::BlockingQueueFull { queue: 0 });
            }
        }
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Pushes, pops and counts: never half done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Stores and takes of whole values: never half done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A thread of the pool: runs queued closures, ends after `BLOCKING_IDLE_EXIT` idle.
fn work(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if let Some(task) = state.queue.pop_front() {
            drop(state);
            let start = {
                let mut s = lock(&task.state);
                let queued = *s == TaskState::Queued;
                if queued {
                    *s = TaskState::Running;
                }
                queued
            };
            if start {
                // Panics are caught inside `run`.
                (task.run)();
            }
            state = shared.lock();
            continue;
        }
        state.idle += 1;
        let (next, timeout) = shared
            .work
            .wait_timeout(state, BLOCKING_IDLE_EXIT)
            .unwrap_or_else(|e| e.into_inner());
        state = next;
        state.idle -= 1;
        if timeout.timed_out() && state.queue.is_empty() {
            state.threads -= 1;
            return;
        }
    }
}

/// The process-wide pool [`blocking`] uses.
static DEFAULT: OnceLock<BlockingPool> = OnceLock::new();

/// Sizes the process-wide pool of [`blocking`]; call it at start-up, before the
/// first `blocking`. Refused once that pool exists
/// ([`ConfigError::BlockingStarted`]), and for a configuration that cannot work.
pub fn set_default(cfg: BlockingConfig) -> Result<(), ConfigError> {
    let pool = BlockingPool::new(cfg)?;
    DEFAULT.set(pool).map_err(|_| ConfigError::BlockingStarted)
}

/// The process-wide pool, made with [`BlockingConfig::default`] unless
/// [`set_default`] came first.
pub fn default_pool() -> &'static BlockingPool {
    DEFAULT.get_or_init(|| {
        BlockingPool::new(BlockingConfig::default()).expect("the default configuration is valid")
    })
}

/// Runs `f`, which may block its thread, on the process-wide [`BlockingPool`] and
/// returns its value; only the caller waits (a job: parked on its carrier, not a
/// stall), for at most its `wait`, or until its job's context is cancelled. See the
/// module documentation.
///
/// ```
/// # #[global_allocator]
/// # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
/// let pool = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
/// let read = pool.run("config", || fiber_pool::blocking(|| std::fs::read_to_string("/proc/self/stat")));
/// assert!(read.unwrap().unwrap().unwrap().contains(' '));
/// ```
pub fn blocking<T, F>(f: F) -> Result<T, RunError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    default_pool().run(f)
}
