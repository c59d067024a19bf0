//! When everything happens in a soak: the rows (one line each, a minute in a full run),
//! the first row without faults (the baseline of the growth figures), the fault cycles,
//! and a quiet end (the last figures are read once every fault has recovered).
//!
//! A full run (two minutes or more) repeats [`CYCLE`] once a minute from the end of the
//! first minute for as long as the quiet end allows. A shorter run (the 60 s form
//! `scripts/test` runs) has four rows, and one cycle compressed into the time between
//! the first row and the quiet end: every offset and every fault's own duration (how
//! long MariaDB stays down, the gap between the leavers' waves) shrinks in proportion.

use std::time::Duration;

/// A row of a full run.
pub const FULL_ROW: Duration = Duration::from_secs(60);
/// Rows of a run shorter than two full rows.
pub const SHORT_RUN_ROWS: u32 = 4;
/// Shortest run.
pub const MIN_TOTAL: Duration = Duration::from_secs(60);
/// One cycle of faults at full length.
pub const FULL_CYCLE: Duration = Duration::from_secs(60);
/// The quiet end of a full run: the last cycle's faults recover in it.
pub const FULL_SETTLE: Duration = Duration::from_secs(30);
/// The shortest quiet end.
pub const MIN_SETTLE: Duration = Duration::from_secs(10);
/// From the end of the first row to the first fault: the row's figures are read
/// before anything is broken.
pub const FIRST_FAULT_AFTER: Duration = Duration::from_secs(2);

/// One fault of a cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `kill -9` of a serving worker.
    KillWorker,
    /// Clients that send their head or body a byte a second, and garbage requests.
    SlowAndGarbage,
    /// SIGHUP: every worker replaced, one at a time.
    Sighup,
    /// Waves of clients (`curl -m`) that leave before their answer.
    Leavers,
    /// MariaDB killed, a worker killed while it is down (its replacement starts without
    /// a database), MariaDB started again.
    Outage,
    /// `ab` with more requests at once than the fibers and queues of every worker hold.
    Burst,
    /// SIGHUP, and `kill -9` of a worker once the first replacement accepts: in even
    /// cycles the worker the roll is about to replace, in odd ones the fresh one.
    SighupKill,
}

/// The faults of one full-length cycle, at their offsets from its start in seconds.
pub const CYCLE: [(f64, Step); 7] = [
    (0.0, Step::KillWorker),
    (4.0, Step::SlowAndGarbage),
    (8.0, Step::Sighup),
    (18.0, Step::Leavers),
    (27.0, Step::Outage),
    (40.0, Step::Burst),
    (50.0, Step::SighupKill),
];

/// A run's timetable.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub total: Duration,
    /// One line each.
    pub row: Duration,
    /// Before the first fault: the first row and [`FIRST_FAULT_AFTER`].
    pub warmup: Duration,
    /// After the last cycle's start plus its length: no new fault.
    pub settle: Duration,
    /// Time between two cycles' starts.
    pub period: Duration,
    pub cycles: u32,
    /// Each cycle's length over [`FULL_CYCLE`]: 1 in a full run.
    pub scale: f64,
}

impl Plan {
    /// The timetable of a run of `total`.
    pub fn new(total: Duration) -> Result<Plan, String> {
        if total < MIN_TOTAL {
            return Err(format!(
                "a soak runs at least {} s, not {} s",
                MIN_TOTAL.as_secs(),
                total.as_secs()
            ));
        }
        let row = if total >= 2 * FULL_ROW {
            FULL_ROW
        } else {
            total / SHORT_RUN_ROWS
        };
        let settle = (row / 2).clamp(MIN_SETTLE, FULL_SETTLE);
        let span = total - row - FIRST_FAULT_AFTER - settle;
        let (cycles, period, scale) = if span >= FULL_CYCLE {
            let cycles = (span.as_secs_f64() / FULL_CYCLE.as_secs_f64()).floor() as u32;
            (cycles, FULL_CYCLE, 1.0)
        } else {
            (1, span, span.as_secs_f64() / FULL_CYCLE.as_secs_f64())
        };
        Ok(Plan {
            total,
            row,
            warmup: row + FIRST_FAULT_AFTER,
            settle,
            period,
            cycles,
            scale,
        })
    }

    /// Rows of the run (the last one may be shorter).
    pub fn rows(&self) -> usize {
        (self.total.as_secs_f64() / self.row.as_secs_f64()).ceil() as usize
    }

    /// `d` of a full-length cycle in this run's cycles.
    pub fn scaled(&self, d: Duration) -> Duration {
        d.mul_f64(self.scale)
    }

    /// Every fault: when it starts (since the soak's start), what it is, its cycle.
    pub fn schedule(&self) -> Vec<(Duration, Step, u32)> {
        (0..self.cycles)
            .flat_map(|c| {
                let base = self.warmup + self.period * c;
                CYCLE.iter().map(move |&(at, step)| {
                    (base + Duration::from_secs_f64(at * self.scale), step, c)
                })
            })
            .collect()
    }

    /// What a row is called in its line: its minute in a full run.
    pub fn row_name(&self, i: usize) -> String {
        if self.row == FULL_ROW {
            format!("minute {}", i + 1)
        } else {
            format!(
                "row {} (+{}s)",
                i + 1,
                (self.row * (i as u32 + 1)).as_secs()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_full_run_has_a_fault_free_first_minute_a_cycle_a_minute_and_a_quiet_end() {
        let p = Plan::new(secs(600)).unwrap();
        assert_eq!((p.row, p.rows(), p.cycles, p.scale), (secs(60), 10, 8, 1.0));
        let schedule = p.schedule();
        assert_eq!(schedule.len(), 8 * CYCLE.len());
        assert_eq!(schedule[0].0, secs(60) + FIRST_FAULT_AFTER);
        let last = schedule.last().unwrap().0;
        assert!(last + secs(10) <= p.total - p.settle, "{last:?}");
        let three = Plan::new(secs(180)).unwrap();
        assert_eq!((three.rows(), three.cycles), (3, 1));
    }

    #[test]
    fn the_sixty_second_form_compresses_one_cycle_between_its_first_row_and_its_end() {
        let p = Plan::new(secs(60)).unwrap();
        assert_eq!((p.row, p.rows(), p.cycles), (secs(15), 4, 1));
        assert!(p.scale < 1.0);
        let schedule = p.schedule();
        assert_eq!(schedule.len(), CYCLE.len());
        assert!(schedule.iter().all(|(at, _, _)| *at >= p.warmup));
        assert!(schedule.iter().all(|(at, _, _)| *at < p.total - p.settle));
        assert_eq!(p.row_name(0), "row 1 (+15s)");
        assert!(Plan::new(secs(59)).is_err());
    }
}
