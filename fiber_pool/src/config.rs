//! Pool configuration ([`PoolConfig`]) and its validation ([`ConfigError`]).
//!
//! Every limit of the pool is a named field here; `FiberPool::new` refuses
//! values that cannot work and says which field to change.

use std::fmt;
use std::time::Duration;

/// The largest number of fibers a pool may have.
pub const MAX_FIBERS: usize = 1_000_000;
/// The largest usable stack per fiber (1 GiB).
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// The most address space all stacks of one pool may reserve together (1 TiB).
/// Only touched pages cost memory, but reserving more than this is a typo.
pub const MAX_TOTAL_STACK: usize = 1 << 40;
/// The longest admission queue.
pub const MAX_QUEUE: usize = 1 << 24;
/// The most threads a [`BlockingPool`](crate::BlockingPool) may have.
pub const MAX_BLOCKING_THREADS: usize = 4096;
/// Bytes of `PROT_NONE` guard below each fiber stack (a whole number of pages).
///
/// A guard only catches a frame whose first access lands inside it. Rust code
/// touches every page of a frame larger than one page (stack probes), so for
/// Rust one page would do. C code need not: `alloca`, a variable-length array,
/// or a big frame compiled without `-fstack-clash-protection` moves the stack
/// pointer down by the whole amount before it writes, and would skip a small
/// guard and write into the neighbouring slot's live frames. glibc caps its own
/// stack allocations at 64 KiB (`__MAX_ALLOCA_CUTOFF`); twice that leaves room for
/// the rest of such a frame. A jump larger than this (C code of the job's own
/// with an unbounded VLA) is not caught: keep such code off fibers.
///
/// Cost: address space only (the guard is never touched, so it is neither
/// committed nor resident), and no extra mapping: one `mprotect` per slot
/// whatever its size.
pub const GUARD_SIZE: usize = 128 * 1024;

/// Bytes at the top of every fiber stack that jobs never use: the first frame of
/// every fiber reserves them, untouched, above the job's own frames.
///
/// After an overflow corosensei's trap handler resets the fiber and runs its own
/// frames from the top of the stack down (its closure, a return address, then
/// `trap_handler` and what it calls: a few hundred bytes, test `trap_area`
/// measures them). Those frames land on the pool's start-up frames and this area,
/// never on the job's, so a quarantined stack keeps what the job's frames held
/// exactly as they held it, for whatever still borrows it.
///
/// Cost: this much less usable stack per fiber; the area is never written, so it
/// is not committed memory either (it shares the stack's top page).
pub const TRAP_AREA: usize = 1024;

/// Size of the alternate signal stack given to each thread that runs fibers, where
/// the kernel delivers an overflow's SIGSEGV (the fiber stack is exhausted then).
/// std gives threads about 8 KiB (SIGSTKSZ); the kernel's signal frame alone
/// can take 3 KiB with AVX-512 state, and the chained handlers (may's prints a
/// backtrace) need more.
pub const ALT_STACK_SIZE: usize = 64 * 1024;

/// How a [`FiberPool`](crate::FiberPool) is sized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of fibers (N): at most this many jobs run at once.
    pub size: usize,
    /// Usable stack bytes per fiber, rounded up to whole pages. A guard of
    /// [`GUARD_SIZE`] is added below it.
    pub stack_size: usize,
    /// How many callers may wait for a fiber; one more gets `RunError::Busy`.
    pub queue: usize,
    /// How long a caller waits for a fiber before `RunError::Timeout`;
    /// `None` waits for ever.
    pub wait_timeout: Option<Duration>,
    /// Measure the stack high-water mark of every n-th job: 0 = never,
    /// 1 = every job. Measuring costs a `madvise` before and a `mincore` plus
    /// a scan of one page after the job, and re-faults the pages it uses.
    pub measure_every: u32,
    /// How many overflows the pool absorbs. A stack that overflowed is never
    /// used again (see [`FiberPool::run`](crate::FiberPool::run): something may
    /// still refer to its abandoned frames): it is quarantined, mapped and
    /// untouched for the rest of the process, and its fiber gets one of these
    /// spare stacks. With no spare left, the fiber is retired: the pool runs
    /// with one fiber fewer (`PoolStats::retired`), and the process should be
    /// replaced ([`Aftermath::is_broken`](crate::Aftermath::is_broken)).
    ///
    /// Cost: a spare is address space only (`stack_size` plus the guard) until
    /// it is used; a quarantined stack keeps the pages its job touched resident
    /// (an overflowed job touched nearly all of them: about `stack_size` each).
    pub spare_stacks: usize,
    /// Fibers, besides `size`, that only the children of [`scope`](crate::scope())s
    /// take: the rule that keeps fan-out from starving the pool. A parent holds its
    /// fiber while it waits for its children, so a pool full of parents would leave
    /// their children no fiber at all; with a reserve they always find one (or the
    /// next to come free). A child takes a free fiber of the `size` first, and one of
    /// these when there is none; parents never take these. 0 leaves children only the
    /// free fibers of `size`, and at full load only `child_wait` ends their wait.
    ///
    /// Cost: address space only until used, like any fiber (`stack_size` plus the
    /// guard each).
    pub child_reserve: usize,
    /// The most children one scope may spawn; one more fails at once with
    /// [`RunError::ScopeFull`](crate::RunError::ScopeFull). It keeps one request's
    /// fan-out from taking the whole reserve from the others'.
    pub max_children_per_scope: usize,
    /// How long a child waits for a fiber (free or from the reserve) before it fails
    /// with [`RunError::NoFiberForChild`](crate::RunError::NoFiberForChild); its
    /// context's deadline or cancellation ends the wait sooner.
    pub child_wait: Duration,
}

impl Default for PoolConfig {
    /// 100 fibers of 64 KiB: fiberstack's deepest route peaks at 3.9 KiB in a
    /// release build and 17 KiB in a debug build (STACK_SIZES.md, measured with
    /// `fiberstack stack-report`), so 17x and 3.8x headroom; the server asks
    /// for 128 KiB to keep 4x in debug too. 1024 waiting callers, 30 s wait,
    /// high-water measured on every
    /// 64th job: measuring costs about 4 us per job against 0.15 us for an
    /// unmeasured empty job (`pool_bench` example). Every 16th cost a server
    /// 0.25 us of a 7-8 us `/hello` (3%, BENCHMARKS.md, "Where a request's time
    /// goes"); every 64th costs 0.06 us and still takes hundreds of samples a
    /// second under load.
    /// 256 spare stacks: 256 overflows keep at most 16 MiB of quarantined
    /// 64 KiB stacks resident (`pool_bench -- quarantine` measures it), and
    /// overflows are bugs to fix long before that many.
    /// 16 reserve fibers for children and at most 8 children per scope: at full
    /// load two requests' fan-outs run at once on the reserve, the others' wait up
    /// to 5 s for a reserve fiber (a request's fan-out is a handful of queries or
    /// calls; its deadline ends the wait sooner).
    fn default() -> Self {
        PoolConfig {
            size: 100,
            stack_size: 64 * 1024,
            queue: 1024,
            wait_timeout: Some(Duration::from_secs(30)),
            measure_every: 64,
            spare_stacks: 256,
            child_reserve: 16,
            max_children_per_scope: 8,
            child_wait: Duration::from_secs(5),
        }
    }
}

/// A configuration that `FiberPool::new` refuses, or an OS failure while
/// creating the pool.
#[non_exhaustive]
#[derive(Debug)]
pub enum ConfigError {
    /// `size` is 0: a pool needs at least one fiber.
    ZeroSize,
    /// `size` is above [`MAX_FIBERS`].
    TooManyFibers {
        /// The requested size.
        size: usize,
    },
    /// `child_reserve` is above [`MAX_FIBERS`].
    ReserveTooLarge {
        /// The requested reserve.
        child_reserve: usize,
    },
    /// `stack_size` is below one page.
    StackTooSmall {
        /// The requested size in bytes.
        stack_size: usize,
        /// The page size, the smallest stack accepted.
        min: usize,
    },
    /// `stack_size` is above [`MAX_STACK_SIZE`].
    StackTooLarge {
        /// The requested size in bytes.
        stack_size: usize,
    },
    /// (`size` + `child_reserve` + `spare_stacks`) x (`stack_size` +
    /// [`GUARD_SIZE`]) is above [`MAX_TOTAL_STACK`].
    TooMuchAddressSpace {
        /// Bytes of address space the pool would reserve.
        total: usize,
    },
    /// `queue` is above [`MAX_QUEUE`].
    QueueTooLong {
        /// The requested queue length.
        queue: usize,
    },
    /// More than this many pools would be alive at once in the process.
    TooManyPools {
        /// [`MAX_POOLS`](crate::registry::MAX_POOLS).
        max: usize,
    },
    /// [`FiberSafeAlloc`](crate::FiberSafeAlloc) is not the process's global
    /// allocator: an overflow could strike inside the system allocator, with its
    /// lock held (the process hangs) or its thread cache half-updated. The
    /// binary (each test and example file is one) must declare
    /// [`SAFE_ALLOC_DECLARATION`].
    SafeAllocMissing,
    /// A [`BlockingConfig`](crate::BlockingConfig)'s `threads` is 0 or above
    /// [`MAX_BLOCKING_THREADS`].
    BlockingThreads {
        /// The requested thread count.
        threads: usize,
    },
    /// [`blocking::set_default`](crate::blocking::set_default) came after the
    /// process-wide blocking pool was made (by an earlier `set_default` or the first
    /// [`blocking`](crate::blocking()) call).
    BlockingStarted,
    /// The OS refused the calling thread the alternate signal stack of
    /// [`ALT_STACK_SIZE`] bytes that an overflow is
    /// caught on.
    AltStack(std::io::Error),
    /// The OS refused to map the stacks or install the signal handler.
    Os(std::io::Error),
}

/// The declaration [`ConfigError::SafeAllocMissing`] asks for, as it is written in
/// the binary's main file.
pub const SAFE_ALLOC_DECLARATION: &str =
    "#[global_allocator] static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;";

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroSize => write!(f, "fiber pool size is 0: set `size` to at least 1"),
            ConfigError::TooManyFibers { size } => write!(
                f,
                "fiber pool size {size} is absurd: set `size` to at most {MAX_FIBERS}"
            ),
            ConfigError::ReserveTooLarge { child_reserve } => write!(
                f,
                "a reserve of {child_reserve} fibers for scopes' children is absurd: set `child_reserve` to at most {MAX_FIBERS}"
            ),
            ConfigError::StackTooSmall { stack_size, min } => write!(
                f,
                "fiber stack of {stack_size} bytes is smaller than one page: set `stack_size` to at least {min}"
            ),
            ConfigError::StackTooLarge { stack_size } => write!(
                f,
                "fiber stack of {stack_size} bytes is absurd: set `stack_size` to at most {MAX_STACK_SIZE}"
            ),
            ConfigError::TooMuchAddressSpace { total } => write!(
                f,
                "the pool would reserve {total} bytes of stacks: lower `size`, `spare_stacks` or `stack_size` (or `child_reserve`) so that (size + child_reserve + spare_stacks) x (stack_size + GUARD_SIZE) is at most {MAX_TOTAL_STACK}"
            ),
            ConfigError::QueueTooLong { queue } => write!(
                f,
                "admission queue of {queue} is absurd: set `queue` to at most {MAX_QUEUE}"
            ),
            ConfigError::TooManyPools { max } => write!(
                f,
                "more than {max} fiber pools alive at once: share pools instead of creating one per task"
            ),
            ConfigError::SafeAllocMissing => write!(
                f,
                "fiber_pool::FiberSafeAlloc is not the global allocator, so a stack overflow \
                 could strike inside malloc and hang or corrupt the heap: add this line to the \
                 binary's main file (each test and example file that creates a pool is a binary \
                 of its own): {SAFE_ALLOC_DECLARATION}"
            ),
            ConfigError::BlockingThreads { threads } => write!(
                f,
                "a blocking pool of {threads} threads cannot work: set `threads` to 1 ..= {}",
                MAX_BLOCKING_THREADS
            ),
            ConfigError::BlockingStarted => write!(
                f,
                "the process-wide blocking pool already exists: call fiber_pool::blocking::set_default once, at start-up, before the first fiber_pool::blocking"
            ),
            ConfigError::AltStack(e) => write!(
                f,
                "creating the fiber pool failed: no {ALT_STACK_SIZE}-byte alternate signal stack for this thread, where a fiber's overflow is caught: {e}"
            ),
            ConfigError::Os(e) => write!(f, "creating the fiber pool failed: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Os(e) | ConfigError::AltStack(e) => Some(e),
            _ => None,
        }
    }
}

impl PoolConfig {
    /// Fibers the pool has: `size` for jobs, the reserve for scopes' children.
    pub(crate) fn fibers(&self) -> usize {
        self.size.saturating_add(self.child_reserve)
    }

    /// Stacks the pool reserves: one per fiber, plus the spares.
    pub(crate) fn stacks(&self) -> usize {
        self.fibers().saturating_add(self.spare_stacks)
    }

    /// Checks the configuration; returns the usable stack size rounded up to
    /// whole pages.
    pub(crate) fn validate(&self, page: usize) -> Result<usize, ConfigError> {
        if self.size == 0 {
            return Err(ConfigError::ZeroSize);
        }
        if self.size > MAX_FIBERS {
            return Err(ConfigError::TooManyFibers { size: self.size });
        }
        if self.child_reserve > MAX_FIBERS {
            return Err(ConfigError::ReserveTooLarge {
                child_reserve: self.child_reserve,
            });
        }
        if self.stack_size < page {
            return Err(ConfigError::StackTooSmall {
                stack_size: self.stack_size,
                min: page,
            });
        }
        if self.stack_size > MAX_STACK_SIZE {
            return Err(ConfigError::StackTooLarge {
                stack_size: self.stack_size,
            });
        }
        let rounded = self.stack_size.div_ceil(page) * page;
        let total = (rounded + GUARD_SIZE).saturating_mul(self.stacks());
        if total > MAX_TOTAL_STACK {
            return Err(ConfigError::TooMuchAddressSpace { total });
        }
        if self.queue > MAX_QUEUE {
            return Err(ConfigError::QueueTooLong { queue: self.queue });
        }
        Ok(rounded)
    }
}
