//! The deadline thread: one plain thread per process that cancels armed contexts
//! when their deadlines pass, so that their [`on_cancel`](crate::Context::on_cancel)
//! hooks run then.
//!
//! Only contexts with a deadline *and* an application hook are armed (see
//! [`context`](crate::context)): a deadline alone is seen by comparing the clock, and
//! the crate's own waits bound their parking by it. So the usual request (a deadline,
//! no hook) never comes here. An armed context is one entry of an ordered map keyed
//! by (deadline, id): arming and disarming (when the context is dropped first) are a
//! lock and a `BTreeMap` insert or removal, and the thread is woken only when the new
//! entry is due before it would wake by itself (at the earliest entry, or after
//! `DEADLINE_THREAD_IDLE`): requests with the same timeout arrive in deadline order,
//! so almost none wakes it.
//!
//! Why a thread and not may's timers: a may timer needs a coroutine to sleep in, and
//! a coroutine per context costs a spawn (tens of microseconds); a thread of our own
//! costs nothing per context and runs hooks off every fiber and carrier. Hooks run on
//! it one after another, so each must be short (see `on_cancel`).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// What an armed entry fires: a context, which cancels itself (and runs its hooks) on
/// this thread when told its deadline passed.
pub(crate) trait Due: Send + Sync {
    /// The deadline passed.
    fn deadline_passed(&self);
}

/// Longest the thread sleeps without looking at its map again. Arming the earliest
/// entry wakes it at once; this only bounds a wait that nothing else bounds.
pub(crate) const DEADLINE_THREAD_IDLE: Duration = Duration::from_secs(1);

struct Timers {
    state: Mutex<State>,
    /// Notified when an entry is armed that is due before the thread wakes by itself.
    earliest_changed: Condvar,
}

struct State {
    armed: BTreeMap<(Instant, u64), Weak<dyn Due>>,
    next_id: u64,
    /// When the thread wakes by itself next: an entry due after it needs no wake-up.
    wakes_at: Instant,
}

fn timers() -> &'static Timers {
    static TIMERS: OnceLock<Arc<Timers>> = OnceLock::new();
    TIMERS.get_or_init(|| {
        let timers = Arc::new(Timers {
            state: Mutex::new(State {
                armed: BTreeMap::new(),
                next_id: 1,
                wakes_at: Instant::now(),
            }),
            earliest_changed: Condvar::new(),
        });
        let for_thread = Arc::clone(&timers);
        std::thread::Builder::new()
            .name("fiber-deadlines".into())
            .spawn(move || run(&for_thread))
            // Without a thread no armed hook would ever run at its deadline: the OS
            // refusing one thread at this point is running out of resources.
            .expect("the OS refused to start fiber_pool's deadline thread");
        timers
    })
}

impl Timers {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Inserts, removals and pops only: never half done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Arms `ctx` to be cancelled at `at`; returns its key for [`disarm`]. Call off
/// fibers (it locks and allocates).
pub(crate) fn arm(at: Instant, ctx: Weak<dyn Due>) -> u64 {
    let timers = timers();
    let mut state = timers.lock();
    let id = state.next_id;
    state.next_id += 1;
    state.armed.insert((at, id), ctx);
    let sooner = at < state.wakes_at;
    drop(state);
    if sooner {
        timers.earliest_changed.notify_one();
    }
    id
}

/// Forgets an armed context (dropped before its deadline). Call off fibers.
pub(crate) fn disarm(at: Instant, id: u64) {
    let removed = timers().lock().armed.remove(&(at, id));
    drop(removed);
}

/// The thread: fires every entry whose deadline has passed, outside the lock, then
/// sleeps until the earliest one left.
fn run(timers: &Timers) {
    let mut state = timers.lock();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(entry) = state.armed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        if !due.is_empty() {
            drop(state);
            for ctx in due {
                if let Some(ctx) = ctx.upgrade() {
                    ctx.deadline_passed();
                }
            }
            state = timers.lock();
            continue;
        }
        let sleep = state
            .armed
            .first_key_value()
            .map_or(DEADLINE_THREAD_IDLE, |((at, _), _)| {
                at.saturating_duration_since(now).min(DEADLINE_THREAD_IDLE)
            });
        state.wakes_at = now + sleep;
        state = timers
            .earliest_changed
            .wait_timeout(state, sleep)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
