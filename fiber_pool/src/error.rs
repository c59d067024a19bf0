//! [`RunError`]: why `FiberPool::run` did not return the job's value.

use std::fmt;
use std::time::Duration;

/// Why a job did not produce its value. The pool keeps serving after each.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// All fibers were busy and `queue` callers were already waiting; the job
    /// did not run. (A server answers 503.)
    Busy {
        /// The configured queue length.
        queue: usize,
    },
    /// No fiber became free within `wait_timeout`; the job did not run.
    Timeout {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The job ran past the end of its fiber's stack. Its frames were
    /// abandoned without running their destructors; resources handed to a
    /// [`Lent`](crate::Lent) were given back.
    StackOverflow {
        /// The usable stack size of the pool's fibers, in bytes.
        stack_size: usize,
        /// The job's label.
        label: &'static str,
        /// The overflow struck at a safe point: a [`reserve_stack`](crate::reserve_stack)
        /// or [`lock`](crate::lock) call, whose caller declares that the job holds
        /// nothing there. When false it struck anywhere else: in the job's own code,
        /// or in a check that cannot know what the job holds (the allocator's, the
        /// switch to the carrier's, a `Lent`'s, [`check_stack`](crate::check_stack));
        /// state the job held (a lock, a `Once`/`LazyLock` being initialised) may be
        /// left behind.
        at_safe_point: bool,
        /// The address of the instruction that touched the guard (the
        /// interrupted context's instruction pointer). In a position-independent
        /// binary, subtract the executable's load address (its first mapping in
        /// `/proc/self/maps`) before giving it to `addr2line -f -C -i -e <binary>`.
        fault_pc: usize,
    },
    /// Every fiber of the pool was retired: each overflowed once more than
    /// the pool had spare stacks for (see
    /// [`PoolConfig::spare_stacks`](crate::PoolConfig::spare_stacks)). The job
    /// did not run, and no job of this pool will; the process should be
    /// replaced.
    Retired {
        /// The pool's number of fibers, all retired.
        size: usize,
    },
    /// The job's context was cancelled, or its deadline passed, before the job got a
    /// fiber (or, for [`blocking`](crate::blocking()), while its caller waited: a closure
    /// already running runs on to its end on its thread); the job did not run, or its
    /// result was not waited for. A server answers 504 for
    /// [`CancelReason::DeadlinePassed`](crate::CancelReason::DeadlinePassed) and no
    /// answer at all for `ClientGone`.
    Cancelled {
        /// Why the context was cancelled.
        reason: crate::CancelReason,
    },
    /// A [`scope`](crate::scope()) already had
    /// [`max_children_per_scope`](crate::PoolConfig::max_children_per_scope) children:
    /// this one was not started.
    ScopeFull {
        /// The configured limit.
        max: usize,
    },
    /// A scope's child found no fiber, free or from the reserve, within
    /// [`child_wait`](crate::PoolConfig::child_wait): every fiber was busy, the
    /// reserve's with other scopes' children. The child did not run.
    NoFiberForChild {
        /// How long it waited.
        waited: Duration,
        /// The pool's [`child_reserve`](crate::PoolConfig::child_reserve).
        reserve: usize,
    },
    /// [`blocking`](crate::blocking()): every thread of the blocking pool was busy and
    /// `queue` closures were already waiting for one; this one did not run.
    BlockingQueueFull {
        /// The pool's [`BlockingConfig::queue`](crate::BlockingConfig::queue).
        queue: usize,
    },
    /// [`blocking`](crate::blocking()): the closure did not finish within the pool's
    /// [`wait`](crate::BlockingConfig::wait). If it had started it runs on to its end
    /// on its thread; its result is dropped.
    BlockingTimeout {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The job panicked; its frames were unwound normally.
    Panicked {
        /// The job's label.
        label: &'static str,
        /// The panic message.
        message: String,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Busy { queue } => write!(
                f,
                "all fibers are busy and {queue} callers are already waiting: retry later, or raise the pool's `size` or `queue`"
            ),
            RunError::Timeout { waited } => write!(
                f,
                "no fiber became free within {waited:?}: raise the pool's `size` or `wait_timeout`"
            ),
            RunError::StackOverflow {
                stack_size,
                label,
                at_safe_point,
                ..
            } => write!(
                f,
                "job `{label}` overflowed its {stack_size}-byte fiber stack ({}): raise the pool's `stack_size` (see the per-label peak_stack_bytes in the pool stats)",
                if *at_safe_point {
                    "at a safe point, holding nothing"
                } else {
                    "outside a safe point: state it held may be left behind"
                }
            ),
            RunError::Retired { size } => write!(
                f,
                "all {size} fibers of the pool were retired after stack overflows used up its spare stacks: replace the process, and raise the pool's `stack_size`"
            ),
            RunError::ScopeFull { max } => write!(
                f,
                "the scope already has {max} children: spawn fewer per scope, or raise the pool's `max_children_per_scope`"
            ),
            RunError::NoFiberForChild { waited, reserve } => write!(
                f,
                "a scope's child found no fiber within {waited:?}: every fiber was busy, and the {reserve} reserved for children too; raise the pool's `child_reserve` or `child_wait`, or fan out less"
            ),
            RunError::BlockingQueueFull { queue } => write!(
                f,
                "every blocking thread is busy and {queue} closures are already waiting: retry later, or raise the blocking pool's `threads` or `queue`"
            ),
            RunError::BlockingTimeout { waited } => write!(
                f,
                "the blocking call did not finish within {waited:?} (it runs on to its end on its thread): raise the blocking pool's `wait`, or give the call a timeout of its own"
            ),
            RunError::Cancelled { reason } => write!(f, "the job did not run to its end: {reason}"),
            RunError::Panicked { label, message } => {
                write!(f, "job `{label}` panicked: {message}")
            }
        }
    }
}

impl std::error::Error for RunError {}

pub use crate::payload::panic_message;
