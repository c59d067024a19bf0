//! The stall watchdog: one thread per worker process that notices a request holding
//! its thread (running its own code instead of going back to may), logs it
//! once with its route, counts it per route for `/stats`, and asks for this process
//! to be replaced when a stall passes `--stall-limit`, when any caught overflow
//! struck outside a safe point (what it held is unknown: the replacement is asked for
//! on suspicion, before anything hangs), when one left the process in a known-broken
//! state, or when `--overflow-limit` overflows have abandoned their frames' heap
//! (never freed: only a fresh process gives it back).
//!
//! A fiber holds its scheduler thread from the moment it is resumed until it goes
//! back to its carrier (every may call of ours does, through `fiber_pool::on_carrier`).
//! While it holds it, every other coroutine of that thread waits. `fiber_pool`
//! records, per thread, which job runs and since when
//! ([`fiber_pool::jobs_running_longer_than`]); this thread reads that table every
//! quarter of `--stall-warn`. A request that waits in may (a MySQL query, an HTTP call,
//! `fiber_pool::sleep`) is not running its own code and is never a stall.
//!
//! The replacement itself is not ours: [`spawn`] takes a hook ([`ReplaceHook`]) that
//! the process's owner gives (a supervisor's "replace me" request; a log line when
//! there is no supervisor), called with the reason, at most once per reason kind.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fiber_pool::{Aftermath, RunningJob};

use crate::config::WatchdogLimits;

/// Called with the reason when the watchdog decides this process should be replaced.
pub(crate) type ReplaceHook = Box<dyn Fn(&str) + Send>;

/// The shortest interval between two looks, whatever `--stall-warn` is.
const MIN_TICK: Duration = Duration::from_millis(5);

/// Stalls seen per route since the process started (every watchdog of the process
/// counts here; there is one per worker process).
static STALLS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Stalls per route so far, for `/stats`.
pub(crate) fn stalls() -> BTreeMap<&'static str, u64> {
    lock(&STALLS).clone()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Held for an increment or a clone: never poisoned half-way. Read from fibers
    // (`/stats`), by a caller that may hold anything: the stack is checked first,
    // claiming no safe point.
    fiber_pool::lock_anywhere(m)
}

/// A running watchdog; stopped (and its thread joined) when dropped.
pub(crate) struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Start the watchdog thread: a stall is a job holding its thread for
/// `limits.stall_warn`; past `stall_limit`, when the overflow aftermath says the
/// process is broken, or after `overflow_limit` caught overflows, `replace` is called
/// with the reason.
pub(crate) fn spawn(limits: WatchdogLimits, replace: ReplaceHook) -> io::Result<Watchdog> {
    let stop = Arc::new(AtomicBool::new(false));
    let warn = limits.stall_warn;
    let tick = (warn / 4).max(MIN_TICK);
    let thread = std::thread::Builder::new().name("watchdog".into()).spawn({
        let stop = Arc::clone(&stop);
        move || {
            let mut watch = Watch::new(limits, replace);
            while !stop.load(Ordering::Relaxed) {
                watch.look(
                    &fiber_pool::jobs_running_longer_than(warn),
                    fiber_pool::aftermath(),
                );
                std::thread::park_timeout(tick);
            }
        }
    })?;
    Ok(Watchdog {
        stop,
        thread: Some(thread),
    })
}

/// The log line for a stall: the route, how long, and the likely causes.
fn stall_line(job: &RunningJob, warn: Duration, aftermath: Aftermath) -> String {
    format!(
        "{}: stall: route {} has held its thread for {} ms without going \
         back to may (--stall-warn {} ms); every other request on that thread waits. \
         Likely causes: a blocking std call (std::thread::sleep, std::net, std::fs, a std \
         Mutex or Condvar wait), a CPU loop, or a lock left held by a fiber abandoned \
         after a stack overflow ({} so far outside a safe point). See STACK_SIZES.md, \
         \"What a handler may do\".",
        crate::logging::app_name(),
        job.label,
        job.running_for.as_millis(),
        warn.as_millis(),
        aftermath.outside_safe_point,
    )
}

/// The watchdog's memory between looks.
struct Watch {
    limits: WatchdogLimits,
    replace: ReplaceHook,
    /// Holdings already reported: `(thread, resume)`.
    reported: HashSet<(usize, u64)>,
    /// Holdings already past the limit.
    over_limit: HashSet<(usize, u64)>,
    /// Reasons already handed to `replace` (one per kind).
    asked: HashSet<&'static str>,
}

impl Watch {
    fn new(limits: WatchdogLimits, replace: ReplaceHook) -> Watch {
        Watch {
            limits,
            replace,
            reported: HashSet::new(),
            over_limit: HashSet::new(),
            asked: HashSet::new(),
        }
    }

    /// One look at the jobs running past `warn` and at the overflow aftermath.
    fn look(&mut self, stalled: &[RunningJob], aftermath: Aftermath) {
        let now: HashSet<(usize, u64)> = stalled.iter().map(|j| (j.thread, j.resume)).collect();
        self.reported.retain(|k| now.contains(k));
        self.over_limit.retain(|k| now.contains(k));
        for job in stalled {
            let key = (job.thread, job.resume);
            if self.reported.insert(key) {
                *lock(&STALLS).entry(job.label).or_default() += 1;
                // Asked before anything is printed: an overflow may have left stderr's
                // lock held, and then the print below blocks this thread for good.
                let line = stall_line(job, self.limits.stall_warn, aftermath);
                if aftermath.outside_safe_point > 0 {
                    self.ask(
                        "stall-after-overflow",
                        &format!(
                            "route {} stalls its thread after {} stack overflow(s) \
                             outside a safe point: a lock or Once they held is likely left behind",
                            job.label, aftermath.outside_safe_point
                        ),
                    );
                }
                eprintln!("{line}");
            }
            if job.running_for >= self.limits.stall_limit && self.over_limit.insert(key) {
                self.ask(
                    "stall-limit",
                    &format!(
                        "route {} has held a thread for {:.1} s (--stall-limit {:.1} s)",
                        job.label,
                        job.running_for.as_secs_f64(),
                        self.limits.stall_limit.as_secs_f64()
                    ),
                );
            }
        }
        if aftermath.outside_safe_point > 0 {
            // On suspicion, before anything hangs: what such an overflow held (a lock,
            // a Once) is unknown, and a fresh process starts clean. The supervisor
            // starts the replacement first, so no connection is refused.
            self.ask(
                "unsafe-overflow",
                &format!(
                    "{} stack overflow(s) struck outside a safe point: what they held (a \
                     lock, a Once/LazyLock being initialised) may be left behind",
                    aftermath.outside_safe_point
                ),
            );
        }
        if aftermath.is_broken() {
            self.ask(
                "broken",
                &format!(
                    "a caught stack overflow left the process broken: {} struck while a \
                     panic was being handled (the next panic on that thread aborts), {} \
                     faults while cleaning up after one",
                    aftermath.while_panicking, aftermath.second_faults
                ),
            );
        }
        let overflow_limit = self.limits.overflow_limit;
        if overflow_limit > 0 && aftermath.abandoned >= overflow_limit {
            self.ask(
                "overflow-limit",
                &format!(
                    "{} stack overflows were caught (--overflow-limit {overflow_limit}); \
                     each left the heap its abandoned frames owned behind, never freed, \
                     and a fresh process gives it back",
                    aftermath.abandoned
                ),
            );
        }
    }

    /// Hands `reason` to the hook, once per `kind`.
    fn ask(&mut self, kind: &'static str, reason: &str) {
        if self.asked.insert(kind) {
            // The request first, the line after it (see the stall loop).
            (self.replace)(reason);
            eprintln!(
                "{}: watchdog: this process should be replaced: {reason}",
                crate::logging::app_name()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(label: &'static str, ms: u64, resume: u64) -> RunningJob {
        RunningJob {
            label,
            running_for: Duration::from_millis(ms),
            thread: 0,
            resume,
        }
    }

    fn watch() -> (Watch, Arc<Mutex<Vec<String>>>) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let a = Arc::clone(&asked);
        let hook: ReplaceHook = Box::new(move |r| a.lock().unwrap().push(r.to_string()));
        let w = Watch::new(
            WatchdogLimits {
                stall_warn: Duration::from_millis(100),
                stall_limit: Duration::from_secs(1),
                overflow_limit: 3,
            },
            hook,
        );
        (w, asked)
    }

    #[test]
    fn a_stall_is_counted_once_and_the_limit_asks_once() {
        let (mut w, asked) = watch();
        let before = stalls().get("unit_stall").copied().unwrap_or(0);
        w.look(&[job("unit_stall", 150, 7)], Aftermath::default());
        w.look(&[job("unit_stall", 400, 7)], Aftermath::default());
        assert_eq!(stalls()["unit_stall"], before + 1);
        assert!(asked.lock().unwrap().is_empty());
        w.look(&[job("unit_stall", 1200, 7)], Aftermath::default());
        w.look(&[job("unit_stall", 1500, 7)], Aftermath::default());
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].contains("route unit_stall"), "{asked:?}");
        // The next resume of the same thread is a new stall.
        drop(asked);
        w.look(&[job("unit_stall", 150, 8)], Aftermath::default());
        assert_eq!(stalls()["unit_stall"], before + 2);
    }

    #[test]
    fn the_log_line_names_the_route_how_long_and_the_likely_causes() {
        let line = stall_line(
            &job("blocking_route", 512, 1),
            Duration::from_millis(100),
            Aftermath::default(),
        );
        for says in [
            "route blocking_route",
            "512 ms",
            "blocking std call",
            "CPU loop",
            "lock left held",
        ] {
            assert!(line.contains(says), "{says}: {line}");
        }
    }

    #[test]
    fn a_broken_aftermath_asks_for_a_replacement_once() {
        let (mut w, asked) = watch();
        let broken = Aftermath {
            second_faults: 1,
            ..Aftermath::default()
        };
        w.look(&[], broken);
        w.look(&[], broken);
        assert_eq!(asked.lock().unwrap().len(), 1);
        // An overflow outside a safe point is a reason at once, before any stall; a
        // stall after it is one more (once each).
        let (mut w, asked) = watch();
        let suspect = Aftermath {
            outside_safe_point: 1,
            ..Aftermath::default()
        };
        w.look(&[], suspect);
        w.look(&[], suspect);
        {
            let asked = asked.lock().unwrap();
            assert_eq!(asked.len(), 1, "{asked:?}");
            assert!(asked[0].contains("outside a safe point"), "{asked:?}");
        }
        w.look(&[job("unit_after", 150, 1)], suspect);
        w.look(&[job("unit_after", 150, 1)], suspect);
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2, "{asked:?}");
        assert!(asked[1].contains("route unit_after stalls"), "{asked:?}");
    }

    #[test]
    fn overflows_past_the_limit_ask_for_a_replacement_once_and_zero_means_never() {
        let (mut w, asked) = watch();
        let after = |abandoned| Aftermath {
            abandoned,
            ..Aftermath::default()
        };
        w.look(&[], after(2));
        assert!(asked.lock().unwrap().is_empty(), "under the limit of 3");
        w.look(&[], after(3));
        w.look(&[], after(7));
        let asked_now = asked.lock().unwrap().clone();
        assert_eq!(asked_now.len(), 1, "{asked_now:?}");
        assert!(asked_now[0].contains("--overflow-limit 3"), "{asked_now:?}");
        let (mut w, asked) = watch();
        w.limits.overflow_limit = 0;
        w.look(&[], after(1_000_000));
        assert!(asked.lock().unwrap().is_empty(), "0 turns the limit off");
    }
}
