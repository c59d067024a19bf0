//! Waiting for a keep-alive connection's next request without a timer per read: the
//! server's watch list and the sweeper that ends overdue waits.
//!
//! A read given to may with a timeout arms one of may's timers each time it parks
//! (`Selector::add_io_timer`: an allocation, a clock read and a list insert, then a
//! removal when the data comes first), for every request whose connection had to wait
//! for it, and pinned under load every kept-alive read waits (BENCHMARKS.md, "Where a
//! request's time goes"). Between requests the
//! connection coroutine instead parks with may's `wait_io`, which arms nothing, and
//! publishes when its wait ends in its [`Watch`]: one atomic store. The sweeper (one
//! coroutine per server) looks at every watch each [`TICK`] and wakes a connection
//! whose deadline has passed, and, once, every waiting connection when the server
//! starts to stop. A woken connection decides for itself on the real clock, as it did
//! when may's timer woke it: the sweeper only ends waits, at most a tick late.
//!
//! Only the wait for the first byte of a request goes this way. A head or a body that
//! is being read keeps may's timed reads (`header_timeout`, `body_timeout`): they are
//! rare on a kept-alive connection, and their deadlines are what the slow-client tests
//! time to the millisecond.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use may::io::WaitIoWaker;

use crate::shutdown::Stop;

/// How often the sweeper looks at the watches: how late, at most, an idle wait ends.
pub const TICK: Duration = Duration::from_millis(20);

/// The server's waiting connections and its coarse clock.
pub struct Sweeper {
    /// The clock's zero; `now_ms` counts from it.
    epoch: Instant,
    /// Milliseconds since `epoch` at the sweeper's last look: the clock connections
    /// set their deadlines by, with no clock read of their own.
    now_ms: AtomicU64,
    /// One slot per open connection; freed slots are reused.
    slots: Mutex<Slots>,
    /// Set when the accept loop has ended: no connection comes any more.
    closed: AtomicBool,
}

#[derive(Default)]
struct Slots {
    watches: Vec<Option<Arc<Shared>>>,
    free: Vec<usize>,
}

/// What a connection and the sweeper share.
struct Shared {
    waker: WaitIoWaker,
    /// When the connection's wait ends, in the sweeper's milliseconds; 0 while it is
    /// not waiting.
    deadline: AtomicU64,
    /// Whether the sweeper has woken it for the server's stop already.
    stop_woken: AtomicBool,
}

/// A connection's entry in the watch list, removed on drop.
pub struct Watch {
    sweeper: Arc<Sweeper>,
    shared: Arc<Shared>,
    slot: usize,
}

impl Sweeper {
    /// A sweeper for a server stopping through `stop`, its coroutine started: it ends
    /// once the accept loop has ended ([`Sweeper::close`]) and no connection is left.
    /// (A stopping server still serves what waited in its backlog: those connections
    /// need the sweeper too.)
    #[allow(unsafe_code)]
    pub fn start(stop: Arc<Stop>) -> std::io::Result<Arc<Sweeper>> {
        let sweeper = Arc::new(Sweeper {
            epoch: Instant::now(),
            now_ms: AtomicU64::new(0),
            slots: Mutex::new(Slots::default()),
            closed: AtomicBool::new(false),
        });
        let sweeping = Arc::clone(&sweeper);
        let sweep = move || loop {
            may::coroutine::sleep(TICK);
            sweeping.sweep(stop.is_stopping());
            if sweeping.closed.load(Ordering::Acquire) && stop.connections() == 0 {
                break;
            }
        };
        // SAFETY: its only wait is the sleep, and `sweep` takes and drops its lock
        // between two sleeps; no thread-local.
        unsafe { fiber_pool::carrier::spawn("idle-sweeper", None, sweep) }?;
        Ok(sweeper)
    }

    /// Say that the accept loop has ended: the sweeper ends with the last connection.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Put a connection, woken through `waker`, on the list.
    pub fn watch(self: &Arc<Self>, waker: WaitIoWaker) -> Watch {
        let shared = Arc::new(Shared {
            waker,
            deadline: AtomicU64::new(0),
            stop_woken: AtomicBool::new(false),
        });
        let mut slots = self.lock();
        let slot = match slots.free.pop() {
            Some(slot) => {
                slots.watches[slot] = Some(Arc::clone(&shared));
                slot
            }
            None => {
                slots.watches.push(Some(Arc::clone(&shared)));
                slots.watches.len() - 1
            }
        };
        Watch {
            sweeper: Arc::clone(self),
            shared,
            slot,
        }
    }

    /// The coarse clock: milliseconds since the sweeper started, as of its last look.
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    /// One look: advance the clock, wake each waiting connection whose deadline has
    /// passed and, when `stopping`, each one not yet woken for the stop.
    fn sweep(&self, stopping: bool) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.now_ms.store(now, Ordering::Relaxed);
        let slots = self.lock();
        for shared in slots.watches.iter().flatten() {
            let deadline = shared.deadline.load(Ordering::Acquire);
            if deadline == 0 {
                continue;
            }
            if now >= deadline || (stopping && !shared.stop_woken.swap(true, Ordering::AcqRel)) {
                shared.waker.wakeup();
            }
        }
    }

    /// The list, also after a panic elsewhere (nothing panics while it is held).
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Watch {
    /// The deadline, on the sweeper's clock, of a wait of `wait` from now.
    pub fn deadline_after(&self, wait: Duration) -> u64 {
        let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX / 2);
        // At least one tick of the coarse clock, and never 0 ("not waiting").
        self.sweeper.now_ms().saturating_add(wait.max(1))
    }

    /// Whether `deadline` has passed on the sweeper's clock.
    pub fn passed(&self, deadline: u64) -> bool {
        self.sweeper.now_ms() >= deadline
    }

    /// Run `wait` (a `wait_io`) with the sweeper watching for `deadline`.
    pub fn wait_until(&self, deadline: u64, wait: impl FnOnce()) {
        self.shared.deadline.store(deadline, Ordering::Release);
        wait();
        self.shared.deadline.store(0, Ordering::Release);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut slots = self.sweeper.lock();
        slots.watches[self.slot] = None;
        slots.free.push(self.slot);
    }
}
