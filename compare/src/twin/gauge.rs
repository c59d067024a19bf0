//! [`Held`]: one unit of a gauge (requests waiting, in flight), given back on drop.
//!
//! A future can be dropped at any `.await`: when hyper closes a connection whose
//! client reset it, when a `timeout` around it fires, when a `select!` picks another
//! branch. A gauge incremented before an `.await` and decremented after it would then
//! keep the unit for good (`db.waiting` would stay at 1, and once `--queue` units had
//! leaked, the queue would refuse requests it had room for: `tests/abandon.rs` drops
//! such futures on purpose). Holding the unit in a guard gives it back on
//! every path, as a semaphore permit does.

use std::sync::atomic::{AtomicUsize, Ordering};

/// One unit of `gauge`, counted from [`Held::enter`] until drop.
#[must_use = "the unit is given back when the guard drops"]
pub struct Held<'a> {
    gauge: &'a AtomicUsize,
}

impl<'a> Held<'a> {
    /// Add one to `gauge`; returns the guard and the count before it.
    pub fn enter(gauge: &'a AtomicUsize) -> (Held<'a>, usize) {
        let before = gauge.fetch_add(1, Ordering::AcqRel);
        (Held { gauge }, before)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_future_gives_its_unit_back() {
        let gauge = AtomicUsize::new(0);
        let waits = async {
            let (_held, before) = Held::enter(&gauge);
            assert_eq!(before, 0);
            std::future::pending::<()>().await;
        };
        // Polled once (the unit is taken), then dropped by the timeout.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), waits).await;
        assert_eq!(gauge.load(Ordering::Acquire), 0);
    }
}
