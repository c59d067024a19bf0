//! The pool's permits: a FIFO counting semaphore whose waits end by their deadline
//! without a timer each.
//!
//! may's `Semphore::wait_timeout` arms a timer on may's timer thread for every wait
//! that parks, and deletes it when the wait ends: about 1,000 instructions per waiting
//! checkout, the timer thread's share included. A busy pool (more requests at once
//! than connections, the usual shape) makes nearly every checkout wait. Here a waiter
//! parks with no timeout (`may::sync::Blocker`: its coroutine's park, or its thread's
//! off may), and one sweeper thread per pool ends each wait whose deadline has
//! passed, never before it. The sweeper sleeps until the earliest deadline of those
//! in line when it last looked; a waiter wakes it only when its own deadline comes
//! earlier than that (the first in an empty line, or a shorter wait than those ahead):
//! with one timeout for every checkout, a steady line of waiters wakes it about once
//! per timeout, not once per wait.
//!
//! A permit given back goes to the longest waiter, and a timeout takes its waiter out
//! of the queue, under the same lock: every wait ends once, granted or timed out, and
//! a permit is never lost to a waiter that already gave up. A permit is taken without
//! waiting only when nobody waits (`free` is 0 while the queue is not empty), so a
//! newcomer never overtakes a waiter.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use may::sync::Blocker;

/// The longest the sweeper sleeps between looks (a waiter whose deadline comes
/// sooner wakes it at once).
const LONGEST_SLEEP: Duration = Duration::from_secs(1);

/// Where a wait stands.
const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const TIMED_OUT: u8 = 2;

/// A pool's permits; see the module comment.
pub(crate) struct Permits {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Wakes the sweeper: a first waiter while it idles, or the pool's end.
    wake_sweeper: Condvar,
}

struct State {
    /// Permits nobody holds; 0 whenever someone waits.
    free: usize,
    /// Who waits, longest first.
    waiters: VecDeque<Arc<Waiter>>,
    /// When the sweeper looks next: the earliest deadline in line at its last look,
    /// or an earlier one a waiter brought since (`None`: nobody waited then).
    next_look: Option<Instant>,
    /// The pool is gone: the sweeper ends.
    closed: bool,
    /// The sweeper's wake-ups so far (the tests wait for one).
    looks: u64,
}

struct Waiter {
    blocker: Blocker,
    deadline: Instant,
    /// [`WAITING`], then [`GRANTED`] or [`TIMED_OUT`], set under the state's lock by
    /// whoever takes the waiter out of the queue, before it unparks it.
    outcome: AtomicU8,
}

impl Permits {
    /// `size` permits, and the pool's sweeper thread.
    pub(crate) fn new(size: usize) -> std::io::Result<Permits> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                free: size,
                waiters: VecDeque::new(),
                next_look: None,
                looks: 0,
                closed: false,
            }),
            wake_sweeper: Condvar::new(),
        });
        let swept = Arc::clone(&inner);
        std::thread::Builder::new()
            .name("fiber_mysql-pool-waits".into())
            .spawn(move || swept.sweep())?;
        Ok(Permits { inner })
    }

    /// A permit if one is free now (and nobody waits for one).
    pub(crate) fn try_take(&self) -> bool {
        self.inner.lock().take_free()
    }

    /// A permit, waiting in line up to `wait` for one (parking the coroutine, or the
    /// thread off may); `false` when none came in time.
    pub(crate) fn take_within(&self, wait: Duration) -> bool {
        let now = Instant::now();
        // A wait too long for the clock is a wait with no end worth naming.
        let deadline = now
            .checked_add(wait)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let waiter = {
            let mut state = self.inner.lock();
            if state.take_free() {
                return true;
            }
            if wait.is_zero() {
                return false;
            }
            let waiter = Arc::new(Waiter {
                // Not stopped by may's own coroutine cancel: the wait ends by its
                // deadline or with a permit, and nothing of ours cancels coroutines.
                blocker: Blocker::new(true),
                deadline,
                outcome: AtomicU8::new(WAITING),
            });
            state.waiters.push_back(Arc::clone(&waiter));
            if state.next_look.is_none_or(|look| deadline < look) {
                state.next_look = Some(deadline);
                self.inner.wake_sweeper.notify_one();
            }
            waiter
        };
        loop {
            match waiter.outcome.load(Ordering::Acquire) {
                GRANTED => return true,
                TIMED_OUT => return false,
                // An unpark that came first is kept by the blocker: this park then
                // returns at once.
                _ => {
                    let _ = waiter.blocker.park(None);
                }
            }
        }
    }

    /// Gives a permit back: to the longest waiter, else to the free ones.
    pub(crate) fn give(&self) {
        let next = {
            let mut state = self.inner.lock();
            match state.waiters.pop_front() {
                Some(waiter) => {
                    waiter.outcome.store(GRANTED, Ordering::Release);
                    waiter
                }
                None => {
                    state.free += 1;
                    return;
                }
            }
        };
        next.blocker.unpark();
    }
}

impl State {
    /// A free permit, if there is one (there is none while anyone waits).
    fn take_free(&mut self) -> bool {
        let free = self.free > 0;
        if free {
            self.free -= 1;
        }
        free
    }
}

impl Drop for Permits {
    /// Ends the sweeper. Nobody waits: a waiter borrows the pool.
    fn drop(&mut self) {
        self.inner.lock().closed = true;
        self.inner.wake_sweeper.notify_one();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sweeper thread: at each look it ends the waits whose deadline has passed
    /// and sleeps until the earliest deadline left, or until a waiter with an earlier
    /// one wakes it.
    fn sweep(&self) {
        let mut due = Vec::new();
        let mut state = self.lock();
        loop {
            if state.closed {
                return;
            }
            state.looks += 1;
            let now = Instant::now();
            if state.next_look.is_some_and(|look| look <= now) {
                state.waiters.retain(|waiter| {
                    if waiter.deadline > now {
                        return true;
                    }
                    waiter.outcome.store(TIMED_OUT, Ordering::Release);
                    due.push(Arc::clone(waiter));
                    false
                });
                state.next_look = state.waiters.iter().map(|w| w.deadline).min();
                if !due.is_empty() {
                    // Unparked with the lock free; a waiter that came meanwhile set
                    // its own look, read below.
                    drop(state);
                    due.drain(..).for_each(|waiter| waiter.blocker.unpark());
                    state = self.lock();
                }
            }
            if state.closed {
                return; // said while the lock was free above: its notify is gone
            }
            let sleep = state
                .next_look
                .map_or(LONGEST_SLEEP, |look| {
                    look.saturating_duration_since(Instant::now())
                })
                .min(LONGEST_SLEEP);
            state = self
                .wake_sweeper
                .wait_timeout(state, sleep)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` on a thread of its own and fails if it has not ended within
    /// `limit`: a wait the sweeper never ends hangs, and must fail instead.
    fn within(limit: Duration, body: impl FnOnce() + Send + 'static) {
        let (done, ended) = std::sync::mpsc::channel();
        let runner = std::thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        match ended.recv_timeout(limit) {
            Ok(()) => runner.join().unwrap(),
            // The body panicked: its panic is the failure.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                std::panic::resume_unwind(runner.join().unwrap_err())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("still waiting after {limit:?}")
            }
        }
    }

    /// Polls until `done`, failing after 10 s with `what`.
    fn poll_until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn free_permits_are_taken_without_waiting_and_given_back() {
        let permits = Permits::new(2).unwrap();
        assert!(permits.try_take());
        assert!(permits.take_within(Duration::ZERO));
        assert!(!permits.try_take());
        permits.give();
        assert!(permits.try_take());
    }

    #[test]
    fn a_wait_ends_at_its_deadline_not_before_and_not_much_after() {
        within(Duration::from_secs(30), waits_end_at_their_deadline);
    }

    fn waits_end_at_their_deadline() {
        let permits = Permits::new(1).unwrap();
        assert!(permits.try_take());
        for wait in [Duration::from_millis(1), Duration::from_millis(60)] {
            let started = Instant::now();
            assert!(!permits.take_within(wait));
            let took = started.elapsed();
            assert!(took >= wait, "{took:?} < {wait:?}");
            // Late by the sweeper's wake-up at most, with a wide margin for a
            // loaded machine.
            assert!(took < wait + Duration::from_secs(2), "{took:?}");
        }
        // The permit is still there for whoever gives it back and takes it.
        permits.give();
        assert!(permits.try_take());
    }

    #[test]
    fn coroutines_wait_in_line_and_are_woken_by_a_give_or_their_deadline() {
        within(Duration::from_secs(30), || {
            let permits = Arc::new(Permits::new(1).unwrap());
            assert!(permits.try_take());
            let line = Arc::clone(&permits);
            let timed = fiber_pool::spawn::go(move || line.take_within(Duration::from_millis(30)));
            assert!(!timed.join().unwrap(), "the sweeper ended its wait");
            let line = Arc::clone(&permits);
            let granted = fiber_pool::spawn::go(move || line.take_within(Duration::from_secs(30)));
            poll_until("the coroutine queued", || {
                !permits.inner.lock().waiters.is_empty()
            });
            permits.give();
            assert!(granted.join().unwrap(), "the give woke it with the permit");
        });
    }

    #[test]
    fn a_short_wait_behind_a_long_one_ends_on_time() {
        let permits = Arc::new(Permits::new(1).unwrap());
        assert!(permits.try_take());
        let long = {
            let permits = Arc::clone(&permits);
            std::thread::spawn(move || permits.take_within(Duration::from_secs(30)))
        };
        poll_until("the long waiter queued", || {
            !permits.inner.lock().waiters.is_empty()
        });
        // A look with the long waiter in line: the sweeper then sleeps until its
        // deadline or for its longest sleep, and the short waiter must wake it.
        let seen = permits.inner.lock().looks;
        poll_until("the sweeper looked", || permits.inner.lock().looks != seen);
        let started = Instant::now();
        assert!(!permits.take_within(Duration::from_millis(50)));
        let took = started.elapsed();
        assert!(took < LONGEST_SLEEP * 8 / 10, "{took:?}");
        permits.give();
        assert!(long.join().unwrap(), "the long waiter got the permit");
    }

    #[test]
    fn a_permit_given_back_goes_to_the_longest_waiter() {
        let permits = Arc::new(Permits::new(1).unwrap());
        assert!(permits.try_take());
        let (sent, got) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for i in 0..3 {
            let (line, sent) = (Arc::clone(&permits), sent.clone());
            threads.push(std::thread::spawn(move || {
                let ok = line.take_within(Duration::from_secs(30));
                sent.send((i, ok)).unwrap();
                line.give();
            }));
            // Each in line before the next.
            poll_until(&format!("waiter {i} queued"), || {
                permits.inner.lock().waiters.len() > i
            });
        }
        permits.give();
        let order: Vec<(usize, bool)> = (0..3)
            .map(|_| got.recv_timeout(Duration::from_secs(30)).unwrap())
            .collect();
        assert_eq!(order, [(0, true), (1, true), (2, true)]);
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(permits.try_take(), "the permit came back after the last");
    }

    #[test]
    fn a_timed_out_waiter_leaves_the_line_and_never_takes_a_permit() {
        let permits = Arc::new(Permits::new(1).unwrap());
        assert!(permits.try_take());
        let early = {
            let permits = Arc::clone(&permits);
            std::thread::spawn(move || permits.take_within(Duration::from_millis(20)))
        };
        assert!(!early.join().unwrap());
        assert!(permits.inner.lock().waiters.is_empty());
        permits.give();
        assert!(permits.try_take(), "the permit went to nobody who left");
    }

    #[test]
    fn the_sweeper_ends_with_its_pool() {
        let permits = Permits::new(1).unwrap();
        let inner = Arc::downgrade(&permits.inner);
        drop(permits);
        poll_until("the sweeper let the pool's state go", || {
            inner.upgrade().is_none()
        });
    }
}
