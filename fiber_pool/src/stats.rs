//! What the pool counts ([`PoolStats`], [`LabelStats`]) and the internal
//! counters behind them. Plain data: the application renders it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A snapshot of a pool's counters, from `FiberPool::stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Number of fibers (N).
    pub size: usize,
    /// Usable bytes per fiber stack.
    pub stack_size: usize,
    /// Fibers running a job now.
    pub busy: usize,
    /// Callers waiting for a fiber now.
    pub queued: usize,
    /// Fibers reserved for scopes' children
    /// ([`PoolConfig::child_reserve`](crate::PoolConfig::child_reserve)).
    pub child_reserve: usize,
    /// Of those, running a child now.
    pub reserve_busy: usize,
    /// Children waiting for a reserve fiber now.
    pub reserve_queued: usize,
    /// Fibers retired: one of their stacks overflowed when no spare stack was
    /// left to replace it. `size - retired` fibers still run jobs.
    pub retired: usize,
    /// Spare stacks left to replace stacks quarantined after overflows
    /// ([`PoolConfig::spare_stacks`](crate::PoolConfig::spare_stacks) at first).
    pub spare_stacks: usize,
    /// Jobs that returned a value.
    pub completed: u64,
    /// Calls refused with `Busy` (or `Retired`).
    pub rejected: u64,
    /// Calls that gave up waiting (`Timeout`).
    pub timed_out: u64,
    /// Calls whose context was cancelled (or whose deadline passed) before they got
    /// a fiber (`Cancelled`).
    pub cancelled: u64,
    /// Jobs that overflowed their stack.
    pub overflows: u64,
    /// Of those, overflows that struck outside a safe point (see
    /// [`RunError::StackOverflow`](crate::RunError::StackOverflow)).
    pub unsafe_overflows: u64,
    /// Jobs that panicked.
    pub panics: u64,
    /// The most stack bytes a measured job used (overflows not included).
    pub peak_stack_bytes: usize,
    /// The same counters per job label.
    pub per_label: BTreeMap<&'static str, LabelStats>,
}

/// Counters for one job label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabelStats {
    /// Jobs that got a fiber (completed, panicked or overflowed).
    pub runs: u64,
    /// Of those, overflows.
    pub overflows: u64,
    /// Of the overflows, those outside a safe point.
    pub unsafe_overflows: u64,
    /// Of those, panics.
    pub panics: u64,
    /// The most stack bytes a measured job with this label used.
    pub peak_stack_bytes: usize,
    /// How many jobs with this label were measured.
    pub measured: u64,
}

/// How a job that got a fiber ended, for the counters.
pub(crate) enum Ended {
    Completed,
    Panicked,
    Overflowed { at_safe_point: bool },
}

#[derive(Default)]
pub(crate) struct Counters {
    completed: AtomicU64,
    rejected: AtomicU64,
    timed_out: AtomicU64,
    cancelled: AtomicU64,
    overflows: AtomicU64,
    unsafe_overflows: AtomicU64,
    panics: AtomicU64,
    peak: AtomicUsize,
    per_label: Mutex<BTreeMap<&'static str, LabelStats>>,
    /// The runs of jobs that completed and were not measured (63 in 64 by default),
    /// counted per label without `per_label`'s lock; added in by `snapshot`.
    plain_runs: PlainRuns,
}

/// Whether job labels `a` and `b` are the same: usually the very same `&'static str`
/// (one pointer comparison), else compared as text.
pub fn same_label(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Labels whose plain runs have a counter of their own: a pool serves a dozen.
/// Past them, runs go through the lock.
const PLAIN_LABELS: usize = 32;

/// One counter per label, claimed by the label's first plain run.
struct PlainRuns([(OnceLock<&'static str>, AtomicU64); PLAIN_LABELS]);

impl Default for PlainRuns {
    fn default() -> Self {
        PlainRuns(std::array::from_fn(|_| Default::default()))
    }
}

impl PlainRuns {
    /// The counter of `label`, claiming a free one for a new label.
    fn of(&self, label: &'static str) -> Option<&AtomicU64> {
        for (claimed, runs) in &self.0 {
            // The first free slot is claimed; one lost to a race holds the winner's.
            let holder = *claimed.get_or_init(|| label);
            if same_label(holder, label) {
                return Some(runs);
            }
        }
        None
    }
}

impl Counters {
    pub(crate) fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn timed_out(&self) {
        self.timed_out.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a job that ran; `used` is its measured stack use, if measured.
    pub(crate) fn ran(&self, label: &'static str, ended: Ended, used: Option<usize>) {
        let counter = match ended {
            Ended::Completed => &self.completed,
            Ended::Panicked => &self.panics,
            Ended::Overflowed { .. } => &self.overflows,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let unsafe_overflow = matches!(
            ended,
            Ended::Overflowed {
                at_safe_point: false
            }
        );
        if unsafe_overflow {
            self.unsafe_overflows.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(used) = used {
            self.peak.fetch_max(used, Ordering::Relaxed);
        }
        if matches!(ended, Ended::Completed) && used.is_none() {
            if let Some(runs) = self.plain_runs.of(label) {
                runs.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut per_label = crate::lock_anywhere(&self.per_label);
        let entry = per_label.entry(label).or_default();
        entry.runs += 1;
        match ended {
            Ended::Completed => {}
            Ended::Panicked => entry.panics += 1,
            Ended::Overflowed { .. } => entry.overflows += 1,
        }
        entry.unsafe_overflows += u64::from(unsafe_overflow);
        if let Some(used) = used {
            entry.measured += 1;
            entry.peak_stack_bytes = entry.peak_stack_bytes.max(used);
        }
    }

    /// Fills the counter fields of a snapshot.
    pub(crate) fn snapshot(&self, stats: &mut PoolStats) {
        stats.completed = self.completed.load(Ordering::Relaxed);
        stats.rejected = self.rejected.load(Ordering::Relaxed);
        stats.timed_out = self.timed_out.load(Ordering::Relaxed);
        stats.cancelled = self.cancelled.load(Ordering::Relaxed);
        stats.overflows = self.overflows.load(Ordering::Relaxed);
        stats.unsafe_overflows = self.unsafe_overflows.load(Ordering::Relaxed);
        stats.panics = self.panics.load(Ordering::Relaxed);
        stats.peak_stack_bytes = self.peak.load(Ordering::Relaxed);
        // Called on fibers too (a /stats route): the clone allocates, and an
        // overflow inside it with the lock held would hang every later job.
        stats.per_label = crate::lock_anywhere(&self.per_label).clone();
        for (label, runs) in &self.plain_runs.0 {
            if let Some(label) = label.get() {
                stats.per_label.entry(label).or_default().runs += runs.load(Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_is_counted_once_per_label_whichever_way_it_went() {
        let counters = Counters::default();
        // More labels than plain counters: the rest go through the lock.
        let labels: Vec<&'static str> = (0..PLAIN_LABELS + 8)
            .map(|i| &*Box::leak(format!("label{i}").into_boxed_str()))
            .collect();
        for (i, label) in labels.iter().enumerate() {
            for _ in 0..=i {
                counters.ran(label, Ended::Completed, None);
            }
            counters.ran(label, Ended::Completed, Some(100 + i));
            counters.ran(label, Ended::Panicked, None);
        }
        // The same text from another allocation is the same label.
        counters.ran(
            Box::leak("label0".to_string().into_boxed_str()),
            Ended::Completed,
            None,
        );
        let mut stats = PoolStats::default();
        counters.snapshot(&mut stats);
        assert_eq!(stats.per_label.len(), labels.len());
        for (i, label) in labels.iter().enumerate() {
            let l = stats.per_label[label];
            let extra = u64::from(i == 0);
            assert_eq!(l.runs, i as u64 + 3 + extra, "{label}");
            assert_eq!((l.measured, l.panics, l.peak_stack_bytes), (1, 1, 100 + i));
        }
        let plain: u64 = (0..labels.len() as u64).map(|i| i + 2).sum::<u64>() + 1;
        assert_eq!(stats.completed, plain);
        assert_eq!(stats.panics, labels.len() as u64);
    }
}
