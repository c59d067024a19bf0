//! [`Outcome`]: what a fiber's coroutine hands back to its carrier's `resume`, from
//! the job's end or, after an overflow, from the trap handler the signal handler set up
//! (the registry's entry keeps that handler while the job runs).

/// What a fiber hands back to its carrier.
#[derive(Clone)]
pub(crate) enum Outcome {
    /// The job returned; its value was written to the carrier's slot.
    Done,
    /// The job panicked with this message.
    Panicked(String),
    /// The job overflowed its stack; the signal handler reset the fiber. The
    /// address of the instruction that touched the guard page.
    Overflow { fault_pc: usize },
}
