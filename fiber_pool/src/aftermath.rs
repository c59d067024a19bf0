//! What caught overflows may have left behind, process-wide: the counters a watchdog
//! reads to decide that this process should be replaced rather than trusted.
//!
//! An overflow is caught at a *safe point* when it struck in
//! [`reserve_stack`](crate::reserve_stack) or [`lock`](crate::lock), whose caller
//! declares that its job holds nothing there. Anywhere else (in the job's own code,
//! or in a check that cannot know what the job holds: the allocator's, the switch to
//! the carrier's, a `Lent`'s, [`check_stack`](crate::check_stack)), whatever the job
//! held (a `std::sync` lock, a `Once`/`LazyLock` being initialised, stdout's lock)
//! may stay held. Those are counted here, with the states that are known to be
//! broken:
//! - the thread was *panicking* when the overflow struck: std's panic count on that
//!   thread never goes back to zero, so the next panic there aborts the process;
//! - a *second fault*: a resource's abandon callback (or the drop of a value a
//!   `Lent` left to the pool while unwinding) panicked while the pool was cleaning
//!   up after the job.
//!
//! Every caught overflow also abandons the heap its frames owned (a body being
//! built, parsed rows): it is never freed. [`Aftermath::abandoned`] counts them, so a
//! watchdog can replace a process that has survived many overflows before that heap
//! adds up. The overflowed stack itself is quarantined (never reused, its touched
//! pages stay resident: [`Aftermath::quarantined`]), and a fiber with no spare
//! stack left is retired ([`Aftermath::retired`], which makes the process broken).

use std::sync::atomic::{AtomicU64, Ordering};

static OUTSIDE_SAFE_POINT: AtomicU64 = AtomicU64::new(0);
static WHILE_PANICKING: AtomicU64 = AtomicU64::new(0);
static SECOND_FAULTS: AtomicU64 = AtomicU64::new(0);
static ABANDONED: AtomicU64 = AtomicU64::new(0);
static QUARANTINED: AtomicU64 = AtomicU64::new(0);
static RETIRED: AtomicU64 = AtomicU64::new(0);

/// A snapshot of the process-wide aftermath counters (all pools).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aftermath {
    /// Overflows that struck outside a safe point: state the job held may be left
    /// behind (a lock, a `Once`), or may not; nothing declared otherwise.
    pub outside_safe_point: u64,
    /// Overflows that struck while the job was panicking: the thread's panic state is
    /// left behind and a later panic on it aborts. Known broken.
    pub while_panicking: u64,
    /// Faults while cleaning up after a job: an abandon callback panicked after
    /// an overflow, or a value left to the pool by a `Lent` dropped while
    /// unwinding panicked in its drop. Known broken.
    pub second_faults: u64,
    /// Every caught overflow: jobs whose frames were abandoned, with the heap they
    /// owned (never freed).
    pub abandoned: u64,
    /// Stacks taken out of use after an overflow, for the rest of the process:
    /// each keeps the pages its job touched resident (about a stack's size).
    pub quarantined: u64,
    /// Fibers retired (no spare stack was left for them): their pools run with
    /// fewer fibers, and a pool with none left runs nothing. Known broken.
    pub retired: u64,
}

impl Aftermath {
    /// Is the process known to be in a broken state (not merely suspect)?
    pub fn is_broken(&self) -> bool {
        self.while_panicking > 0 || self.second_faults > 0 || self.retired > 0
    }
}

/// The counters now.
pub fn aftermath() -> Aftermath {
    Aftermath {
        outside_safe_point: OUTSIDE_SAFE_POINT.load(Ordering::Relaxed),
        while_panicking: WHILE_PANICKING.load(Ordering::Relaxed),
        second_faults: SECOND_FAULTS.load(Ordering::Relaxed),
        abandoned: ABANDONED.load(Ordering::Relaxed),
        quarantined: QUARANTINED.load(Ordering::Relaxed),
        retired: RETIRED.load(Ordering::Relaxed),
    }
}

/// Records a caught overflow, as seen from the carrier right after it.
pub(crate) fn overflowed(at_safe_point: bool, panicking: bool) {
    ABANDONED.fetch_add(1, Ordering::Relaxed);
    if !at_safe_point {
        OUTSIDE_SAFE_POINT.fetch_add(1, Ordering::Relaxed);
    }
    if panicking {
        WHILE_PANICKING.fetch_add(1, Ordering::Relaxed);
    }
}

/// Records faults while cleaning up after an overflow.
pub(crate) fn second_faults(n: usize) {
    if n > 0 {
        SECOND_FAULTS.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Records a stack quarantined after an overflow.
pub(crate) fn quarantined() {
    QUARANTINED.fetch_add(1, Ordering::Relaxed);
}

/// Records a fiber retired for want of a spare stack.
pub(crate) fn retired() {
    RETIRED.fetch_add(1, Ordering::Relaxed);
}
