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
//! The sweeper also watches the clients of requests in flight ([`Watch::request`]),
//! and cancels the context of a request whose client has gone (`departure.rs` says
//! how a departure is told from a half-close): the handler's waits end (a MySQL query
//! is killed) and nothing is sent. The first time a connection's request has run for
//! a tick, the sweeper adds its socket to an epoll set that reports only hang-ups
//! (`fiber_pool::net::HangupSet`), where it stays until the connection ends. Each
//! tick, one `epoll_wait` names the sockets with news, and only the requests of those,
//! a tick old or more, are looked at (one `poll(2)` for all of them, then
//! `departure.rs`'s rule). A tick's system calls so grow with the clients that hung
//! up, not with the requests in flight, of which it reads two atomics each: a
//! `poll(2)` of every request in flight each tick was about a sixth of the server's
//! CPU at 5000 in flight (BENCHMARKS.md, "The headline rows"). A socket the set
//! refuses is looked at every tick instead.
//!
//! Only the wait for the first byte of a request goes this way. A head or a body that
//! is being read keeps may's timed reads (`header_timeout`, `body_timeout`): they are
//! rare on a kept-alive connection, and their deadlines are what the slow-client tests
//! time to the millisecond.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fiber_pool::net::HangupSet;
use fiber_pool::{CancelReason, Context};
use may::io::WaitIoWaker;

use crate::http::departure::{self, Probe, Seen};
use crate::shutdown::Stop;

/// How often the sweeper looks at the watches: how late, at most, an idle wait ends.
pub const TICK: Duration = Duration::from_millis(20);

/// The server's waiting connections and its coarse clock. Connections are put on its
/// list by the server only (the sweeper is the crate's own, not the rig's:
/// `Sweeper::watch` takes a descriptor's number, which the sweeper writes to).
pub(crate) struct Sweeper {
    /// The clock's zero; `now_ms` counts from it.
    epoch: Instant,
    /// Milliseconds since `epoch` at the sweeper's last look: the clock connections
    /// set their deadlines by, with no clock read of their own.
    now_ms: AtomicU64,
    /// One slot per open connection; freed slots are reused.
    slots: Mutex<Slots>,
    /// Set when the accept loop has ended: no connection comes any more.
    closed: AtomicBool,
    /// The sockets of connections whose requests are watched for a departure, each
    /// reported by its slot's index.
    hangups: HangupSet,
}

/// How many hang-ups one tick takes from the set at most; the rest stay reported
/// (the set is level-triggered, and names its ready sockets in turn) and come on the
/// next ticks.
const HANGUPS_A_TICK: usize = fiber_pool::net::READY_MOST;

/// A connection's socket is not in the hang-up set (no request of it has run a tick).
const OUT_OF_SET: u8 = 0;
/// A connection's socket is in the hang-up set, until the connection ends.
const IN_SET: u8 = 1;
/// The set refused a connection's socket: its requests are looked at every tick.
const REFUSED: u8 = 2;

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
    /// The connection's socket, for the look at a request's client and the hang-up
    /// set.
    fd: RawFd,
    /// Whether a request is in flight and watched (so the sweeper skips the lock of
    /// every connection that has none).
    busy: AtomicBool,
    /// Where the socket stands with the hang-up set: [`OUT_OF_SET`], [`IN_SET`],
    /// [`REFUSED`]. Written by the sweeper only, with `in_flight` locked; read by the
    /// connection's end with it locked, to take the socket out of the set.
    in_set: AtomicU8,
    /// The request in flight, while [`Watch::request`]'s guard lives.
    in_flight: Mutex<Option<InFlight>>,
}

/// A request in flight, as the sweeper watches it.
struct InFlight {
    /// Its connection's socket.
    fd: RawFd,
    ctx: Context,
    probe: Probe,
    /// When it started, on the sweeper's clock: it is looked at once it has run a tick.
    since: u64,
}

/// A connection's entry in the watch list, removed on drop.
pub(crate) struct Watch {
    sweeper: Arc<Sweeper>,
    shared: Arc<Shared>,
    slot: usize,
}

impl Sweeper {
    /// A sweeper for a server stopping through `stop`, its coroutine started: it ends
    /// once the accept loop has ended ([`Sweeper::close`]) and no connection is left.
    /// (A stopping server still serves what waited in its backlog: those connections
    /// need the sweeper too.)
    pub(crate) fn start(stop: Arc<Stop>) -> std::io::Result<Arc<Sweeper>> {
        let sweeper = Arc::new(Sweeper {
            epoch: Instant::now(),
            now_ms: AtomicU64::new(0),
            slots: Mutex::new(Slots::default()),
            closed: AtomicBool::new(false),
            hangups: HangupSet::new()?,
        });
        let sweeping = Arc::clone(&sweeper);
        let sweep = move || loop {
            may::coroutine::sleep(TICK);
            sweeping.sweep(stop.is_stopping());
            if sweeping.closed.load(Ordering::Acquire) && stop.connections() == 0 {
                break;
            }
        };
        fiber_pool::carrier::spawn("idle-sweeper", None, sweep)?;
        Ok(sweeper)
    }

    /// Say that the accept loop has ended: the sweeper ends with the last connection.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Put a connection on socket `fd`, woken through `waker`, on the list. The sweeper
    /// looks at `fd`, and may write to it (the probe of `departure.rs`), while a
    /// request of the connection is watched ([`Watch::request`]'s guard lives): the
    /// caller keeps the socket open until the `Watch` is dropped (`conn.rs` declares
    /// it before the socket). Not public: a number that is not the caller's socket
    /// would be written to.
    pub(crate) fn watch(self: &Arc<Self>, fd: RawFd, waker: WaitIoWaker) -> Watch {
        let shared = Arc::new(Shared {
            waker,
            deadline: AtomicU64::new(0),
            stop_woken: AtomicBool::new(false),
            fd,
            busy: AtomicBool::new(false),
            in_set: AtomicU8::new(OUT_OF_SET),
            in_flight: Mutex::new(None),
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
    /// passed and, when `stopping`, each one not yet woken for the stop; put the
    /// sockets of requests a tick old in the hang-up set, and look at the clients of
    /// those it names (and of those it refused).
    fn sweep(&self, stopping: bool) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.now_ms.store(now, Ordering::Relaxed);
        let slots = self.lock();
        // Each connection's entry is locked once at most: the loop locks only those
        // out of the set or refused, the hang-ups only those in it.
        let mut looked: Vec<MutexGuard<'_, Option<InFlight>>> = Vec::new();
        for (slot, shared) in slots.watches.iter().enumerate() {
            let Some(shared) = shared else { continue };
            if shared.busy.load(Ordering::Acquire) {
                if shared.in_set.load(Ordering::Relaxed) != IN_SET {
                    let entry = lock(&shared.in_flight);
                    if entry.as_ref().is_some_and(|r| r.since + TICK_MS <= now)
                        && !self.put_in_set(shared, slot)
                    {
                        looked.push(entry);
                    }
                }
                continue;
            }
            let deadline = shared.deadline.load(Ordering::Acquire);
            if deadline == 0 {
                continue;
            }
            if now >= deadline || (stopping && !shared.stop_woken.swap(true, Ordering::AcqRel)) {
                shared.waker.wakeup();
            }
        }
        let mut hung_up = Vec::new();
        // A failed `epoll_wait` (a set of ours, a buffer of its own: nothing but a
        // signal, which is no failure, is expected) leaves the requests in the set
        // unlooked-at for this tick; the next tick asks again.
        let _ = self.hangups.ready(&mut hung_up, HANGUPS_A_TICK);
        hung_up.sort_unstable();
        hung_up.dedup();
        for slot in hung_up {
            let Some(Some(shared)) = usize::try_from(slot)
                .ok()
                .and_then(|s| slots.watches.get(s))
            else {
                continue;
            };
            if shared.in_set.load(Ordering::Relaxed) != IN_SET {
                continue;
            }
            let entry = lock(&shared.in_flight);
            if entry.as_ref().is_some_and(|r| r.since + TICK_MS <= now) {
                looked.push(entry);
            }
        }
        if !looked.is_empty() {
            look_at_clients(&mut looked);
        }
    }

    /// Put the socket of `shared` (in `slot`), whose entry the caller has locked with a
    /// request in it, in the hang-up set, unless the set refused it before; whether it
    /// is in. Once in, it stays until the connection ends ([`Watch`]'s drop).
    fn put_in_set(&self, shared: &Shared, slot: usize) -> bool {
        if shared.in_set.load(Ordering::Relaxed) == REFUSED {
            return false;
        }
        // A socket the set refuses (no memory, the user's `max_user_watches` reached)
        // is looked at every tick instead: slower, never blind.
        let state = match self.hangups.add(shared.fd, slot as u64) {
            Ok(()) => IN_SET,
            Err(_) => REFUSED,
        };
        shared.in_set.store(state, Ordering::Relaxed);
        state == IN_SET
    }

    /// The list, also after a panic elsewhere (nothing panics while it is held).
    fn lock(&self) -> MutexGuard<'_, Slots> {
        lock(&self.slots)
    }
}

/// [`TICK`] in the sweeper's milliseconds.
const TICK_MS: u64 = TICK.as_millis() as u64;

/// `m`, also after a panic elsewhere (nothing panics while one of ours is held).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Look at the clients of the requests in `looked` (their entries locked, so that no
/// connection ends and closes its socket meanwhile: see [`Watch::request`]), and cancel
/// each whose client has gone.
fn look_at_clients(looked: &mut [MutexGuard<'_, Option<InFlight>>]) {
    let mut requests: Vec<&mut InFlight> = looked.iter_mut().filter_map(|e| e.as_mut()).collect();
    let mut clients: Vec<(RawFd, &mut Probe)> = Vec::with_capacity(requests.len());
    let mut contexts: Vec<&Context> = Vec::with_capacity(requests.len());
    for r in requests.iter_mut() {
        let InFlight { fd, ctx, probe, .. } = &mut **r;
        clients.push((*fd, probe));
        contexts.push(ctx);
    }
    for (seen, ctx) in departure::look_raw(&mut clients).into_iter().zip(contexts) {
        if seen == Seen::Gone {
            // Its hooks run here, on the sweeper: each hands its work on (a MySQL
            // `KILL QUERY` goes to a thread of its own).
            ctx.cancel(CancelReason::ClientGone);
        }
    }
}

/// A request in flight, watched by the sweeper until dropped.
pub(crate) struct Watched<'w> {
    shared: &'w Shared,
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        // Under the entry's lock: once this returns, the sweeper is not looking at
        // this connection's socket, which may then close.
        let mut entry = lock(&self.shared.in_flight);
        *entry = None;
        self.shared.busy.store(false, Ordering::Release);
    }
}

impl Watch {
    /// The deadline, on the sweeper's clock, of a wait of `wait` from now.
    pub(crate) fn deadline_after(&self, wait: Duration) -> u64 {
        let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX / 2);
        // At least one tick of the coarse clock, and never 0 ("not waiting").
        self.sweeper.now_ms().saturating_add(wait.max(1))
    }

    /// Whether `deadline` has passed on the sweeper's clock.
    pub(crate) fn passed(&self, deadline: u64) -> bool {
        self.sweeper.now_ms() >= deadline
    }

    /// Watch the client of this connection's request in flight, an HTTP/1.`minor`
    /// one, until the guard drops: when it goes (see `departure.rs`), `ctx` is
    /// cancelled with [`CancelReason::ClientGone`]. Looked at from its second tick on:
    /// a request that ends sooner costs no system call.
    pub(crate) fn request(&self, minor_version: u8, ctx: &Context) -> Watched<'_> {
        let mut entry = lock(&self.shared.in_flight);
        *entry = Some(InFlight {
            fd: self.shared.fd,
            ctx: ctx.clone(),
            probe: Probe::new(minor_version),
            since: self.sweeper.now_ms(),
        });
        self.shared.busy.store(true, Ordering::Release);
        Watched {
            shared: &self.shared,
        }
    }

    /// Run `wait` (a `wait_io`) with the sweeper watching for `deadline`.
    pub(crate) fn wait_until(&self, deadline: u64, wait: impl FnOnce()) {
        self.shared.deadline.store(deadline, Ordering::Release);
        wait();
        self.shared.deadline.store(0, Ordering::Release);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        {
            // Under the entry's lock, so that the sweeper is not adding it meanwhile,
            // and before the socket closes (conn.rs drops the `Watch` first), so that
            // the number removed is still this connection's.
            let _entry = lock(&self.shared.in_flight);
            if self.shared.in_set.load(Ordering::Relaxed) == IN_SET {
                // It cannot fail on a socket in the set; were it to, the socket's close
                // right after would drop it from the set all the same (a copy of it
                // lives no longer than a child process's start).
                let _ = self.sweeper.hangups.remove(self.shared.fd);
            }
        }
        let mut slots = self.sweeper.lock();
        slots.watches[self.slot] = None;
        slots.free.push(self.slot);
    }
}
