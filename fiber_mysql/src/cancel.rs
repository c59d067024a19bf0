//! Stopping a running query from outside: [`CancelHandle`], and the pool's side
//! channel that sends `KILL QUERY` ([`Killer`]).
//!
//! A handle comes from a checkout ([`PooledConn::cancel_handle`](crate::PooledConn::cancel_handle))
//! and is `Send + Sync + Clone`: another coroutine or thread calls
//! [`CancelHandle::cancel`] when the client went away or the request's deadline
//! passed. What it does, and what it never does:
//! - It cancels *the checkout* it came from: the command running now, if any, is
//!   stopped with `KILL QUERY <connection id>` sent over the side channel, and fails
//!   with [`Error::Cancelled`]; every later command of that checkout fails with
//!   `Error::Cancelled` at once, without being sent. A command that ended before the
//!   cancel keeps its result; one that was running when it came fails with
//!   `Error::Cancelled` even if an answer arrived (a killed `SLEEP` answers 1, not an
//!   error: whatever came is not the statement's result).
//! - It never touches another checkout, even of the same connection. The handle's
//!   state (the gate) belongs to one checkout, and a KILL is sent only while that
//!   checkout's command is marked running, decided under the gate's lock. A KILL
//!   that lands after its command ended hits an idle session, and MariaDB drops a
//!   `KILL QUERY` that an idle session receives when the next command starts
//!   (`tests/cancel.rs` checks it): so the next command of *this* connection is safe
//!   once every KILL sent has been answered, and the give-back waits for that (at
//!   most [`KILL_SETTLE_TIMEOUT`], else the connection is closed instead of reused).
//! - A command that had been marked running but had not reached the server when its
//!   KILL arrived would run on (the KILL was dropped as above): while the same
//!   command still runs, the KILL is sent again, up to [`KILL_ATTEMPTS`] times,
//!   [`KILL_RETRY_AFTER`] apart.
//! - A cancelled checkout is reset at give-back (`session.rs`): a killed statement
//!   may have done part of its work.
//!
//! ## The side channel
//! Each pool has one [`Killer`]: at most [`KILL_CONNECTIONS`] connections (the
//! headroom the pool keeps free on the server, [`KILL_HEADROOM`]), opened on first
//! use with the pool's options and [`KILL_CONNECT_TIMEOUT`], and kept for the next
//! kill. A storm of cancels queues for them ([`KILL_WAIT`] at most) instead of
//! opening a connection each. Query timeouts and deadlines kill through it too, and
//! so does the pool for a threads-driver checkout that a fiber's overflow leaked:
//! `KILL CONNECTION`, the whole session (`pool.rs`, "Abandoned checkouts").

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use may::sync::Semphore;

use crate::conn::{Conn, QueryKiller};
use crate::error::{Error, Result};
use crate::headroom::KILL_HEADROOM;
use crate::opts::Opts;

/// Connections a pool's side channel opens at most: the server connections the pool
/// leaves free beyond its size.
pub const KILL_CONNECTIONS: usize = KILL_HEADROOM;
/// Connect timeout of a side-channel connection.
pub const KILL_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for the answer to one `KILL QUERY`.
pub const KILL_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a free side-channel connection. Kills queue for the side
/// channel one round trip each: 30 at once took 8-18 ms here idle, and a loaded
/// machine (the whole test suite beside it) was seen to pass 2 s.
pub const KILL_WAIT: Duration = Duration::from_secs(10);
/// How often a kill is sent while the same command still runs (see the module comment).
pub const KILL_ATTEMPTS: usize = 3;
/// How long a canceller waits for the killed command to end before sending again:
/// long enough that a busy machine's slow wake-up of the killed command does not
/// send a second KILL for nothing (and hold the side channel from other cancels).
pub const KILL_RETRY_AFTER: Duration = Duration::from_millis(200);
/// Longest a give-back waits for the KILLs of a cancelled checkout to be answered; a
/// connection whose KILLs are still out after it is closed, not reused.
pub const KILL_SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Stack of the thread a kill runs on when asked from a may coroutine.
pub const KILL_THREAD_STACK: usize = 256 * 1024;
/// How often a give-back looks whether those KILLs were answered.
const KILL_SETTLE_POLL: Duration = Duration::from_millis(1);

/// What a kill stops: the running statement, or the whole session.
#[derive(Clone, Copy, Debug)]
enum Kill {
    Query,
    Connection,
}

/// A pool's side channel for `KILL QUERY`; see the module comment.
pub(crate) struct Killer {
    opts: Opts,
    permits: Semphore,
    idle: Mutex<Vec<Conn>>,
}

impl QueryKiller for Killer {
    fn kill_query_of(self: Arc<Self>, connection_id: u32) -> Result<()> {
        self.kill_query(connection_id)
    }

    fn kill_session_of(self: Arc<Self>, connection_id: u32) -> Result<()> {
        self.kill_connection(connection_id)
    }
}

impl std::fmt::Debug for Killer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Killer").finish_non_exhaustive()
    }
}

impl Killer {
    /// A side channel to the server of `opts`, at most `connections` wide.
    pub(crate) fn new(opts: &Opts, connections: usize) -> Killer {
        let mut opts = opts.clone();
        opts.query_timeout = None;
        opts.connect_timeout = opts.connect_timeout.min(KILL_CONNECT_TIMEOUT);
        opts.read_timeout = opts.read_timeout.min(KILL_ANSWER_TIMEOUT);
        Killer {
            opts,
            permits: Semphore::new(connections.max(1)),
            idle: Mutex::new(Vec::with_capacity(connections)),
        }
    }

    /// Sends `KILL QUERY connection_id` and waits for its answer. In a may coroutine
    /// (a fiber's carrier among them) the kill runs on a thread of its own
    /// ([`KILL_THREAD_STACK`]) while the coroutine parks on a may channel: opening a
    /// side-channel connection authenticates (SHA-1 in mysql_common), which in a
    /// debug build is more stack than a connection coroutine's 32 KiB, and a kill
    /// is rare enough that a thread's start (tens of microseconds) is nothing beside
    /// its round trip. On a plain thread it runs here.
    pub(crate) fn kill_query(self: &Arc<Self>, connection_id: u32) -> Result<()> {
        self.kill(Kill::Query, connection_id)
    }

    /// Sends `KILL CONNECTION connection_id` and waits for its answer (see
    /// [`Killer::kill_query`] for where it runs): the server ends that session, rolls
    /// back its transaction and frees its locks, whatever our side of its socket
    /// does. For a checkout whose connection an overflow leaked (`pool.rs`,
    /// "Abandoned checkouts").
    pub(crate) fn kill_connection(self: &Arc<Self>, connection_id: u32) -> Result<()> {
        self.kill(Kill::Connection, connection_id)
    }

    fn kill(self: &Arc<Self>, what: Kill, connection_id: u32) -> Result<()> {
        if !may::coroutine::is_coroutine() {
            return self.kill_here(what, connection_id);
        }
        let killer = Arc::clone(self);
        fiber_pool::on_carrier(move || {
            let (tx, rx) = may::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("kill-query".into())
                .stack_size(KILL_THREAD_STACK)
                .spawn(move || {
                    let _ = tx.send(killer.kill_here(what, connection_id));
                })
                .map_err(Error::Io)?;
            // The thread's every wait is bounded: the permit, the connect, the answer.
            let bound = KILL_WAIT + KILL_CONNECT_TIMEOUT + 2 * KILL_ANSWER_TIMEOUT;
            rx.recv_timeout(bound)
                .unwrap_or(Err(Error::PoolTimeout { waited: bound }))
        })
    }

    fn kill_here(&self, what: Kill, connection_id: u32) -> Result<()> {
        if !self.permits.wait_timeout(KILL_WAIT) {
            return Err(Error::PoolTimeout { waited: KILL_WAIT });
        }
        let sql = match what {
            Kill::Query => format!("KILL QUERY {connection_id}"),
            Kill::Connection => format!("KILL CONNECTION {connection_id}"),
        };
        // A kept connection may have died (server restart): one more try on a new one.
        let result = match self.take_idle() {
            Some(mut conn) => match conn.query(&sql) {
                Err(e) if e.poisons_connection() => self.on_new_connection(&sql),
                other => other.map(|_| self.keep(conn)),
            },
            None => self.on_new_connection(&sql),
        };
        self.permits.post();
        result
    }

    fn on_new_connection(&self, sql: &str) -> Result<()> {
        let mut conn = Conn::connect(&self.opts)?;
        conn.query(sql)?;
        self.keep(conn);
        Ok(())
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle();
        while let Some(conn) = idle.pop() {
            if conn.looks_alive() {
                return Some(conn);
            }
        }
        None
    }

    /// Connections kept open for the next kill.
    pub(crate) fn kept(&self) -> usize {
        self.idle().len()
    }

    fn keep(&self, conn: Conn) {
        self.idle().push(conn);
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Conn>> {
        // Read on fibers too (`kept`, for a /stats route): the stack is checked before
        // locking (`fiber_pool::lock_anywhere`), so an overflow never strikes with it
        // held. Nothing panics while holding it; a poisoned lock is recovered.
        fiber_pool::lock_anywhere(&self.idle)
    }
}

/// One checkout's cancellation state, shared by its [`CancelHandle`]s.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// The checkout has ended: handles do nothing any more.
    closed: bool,
    cancelled: bool,
    /// The command in flight: its number and its connection's server id.
    running: Option<(u64, u32)>,
    /// The command in flight is a pipeline (`exec_many`): a cancel kills the whole
    /// session, since `KILL QUERY` would stop only the statement running and leave
    /// the ones queued behind it to run.
    whole_session: bool,
    commands: u64,
    kills_in_flight: usize,
}

impl Gate {
    fn state(&self) -> MutexGuard<'_, GateState> {
        // Taken on fibers too, inside a handler that may hold anything:
        // `fiber_pool::lock_anywhere` overflows before locking, never inside, and
        // claims no safe point (and recovers a poisoned lock; nothing panics while
        // holding it).
        fiber_pool::lock_anywhere(&self.state)
    }

    /// A command of the checkout starts on connection `connection_id`; refused with
    /// [`Error::Cancelled`] once the checkout was cancelled.
    pub(crate) fn begin(&self, connection_id: u32) -> Result<()> {
        self.begin_as(connection_id, false)
    }

    /// [`Gate::begin`] for a pipeline: a cancel meanwhile kills the whole session.
    pub(crate) fn begin_pipeline(&self, connection_id: u32) -> Result<()> {
        self.begin_as(connection_id, true)
    }

    fn begin_as(&self, connection_id: u32, whole_session: bool) -> Result<()> {
        let mut s = self.state();
        if s.cancelled {
            return Err(Error::Cancelled);
        }
        s.commands += 1;
        s.running = Some((s.commands, connection_id));
        s.whole_session = whole_session;
        Ok(())
    }

    /// Whether the checkout was cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// The command ended; returns whether the checkout was cancelled meanwhile.
    pub(crate) fn end(&self) -> bool {
        let mut s = self.state();
        s.running = None;
        s.cancelled
    }

    /// The checkout ends: handles stop acting. Waits until every KILL already sent is
    /// answered (see the module comment) if `settle`; returns `(cancelled, settled)`.
    pub(crate) fn close(&self, settle: bool) -> (bool, bool) {
        let cancelled = {
            let mut s = self.state();
            s.closed = true;
            s.cancelled
        };
        if !settle || self.state().kills_in_flight == 0 {
            // Nothing to wait for (the usual case): no clock read.
            return (cancelled, true);
        }
        let until = Instant::now() + KILL_SETTLE_TIMEOUT;
        while self.state().kills_in_flight > 0 {
            if Instant::now() >= until {
                return (cancelled, false);
            }
            fiber_pool::sleep(KILL_SETTLE_POLL);
        }
        (cancelled, true)
    }
}

/// Cancels one checkout's running and later commands; see the module comment.
/// Cheap to clone, `Send + Sync`: hand it to whatever watches the client or the clock.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    gate: Arc<Gate>,
    killer: Arc<Killer>,
}

impl CancelHandle {
    pub(crate) fn new(gate: Arc<Gate>, killer: Arc<Killer>) -> CancelHandle {
        CancelHandle { gate, killer }
    }

    /// Cancels the checkout: its running command, if any, is killed (and returns
    /// [`Error::Cancelled`]), and its later commands fail with `Error::Cancelled`
    /// unsent. After the checkout ended it does nothing. Waits for the `KILL QUERY`
    /// answers (on a fiber, the waits park it). An error means the KILL could not be
    /// sent (side channel busy past [`KILL_WAIT`], or the server unreachable): the
    /// running command then runs on, but the later ones still fail.
    pub fn cancel(&self) -> Result<()> {
        let target = {
            let mut s = self.gate.state();
            if s.closed {
                return Ok(());
            }
            s.cancelled = true;
            match s.running {
                Some(running) => {
                    s.kills_in_flight += 1;
                    (running, s.whole_session)
                }
                None => return Ok(()),
            }
        };
        let result = match target {
            // The connection dies with its session: one kill, nothing to retry.
            ((_, connection_id), true) => self.killer.kill_connection(connection_id),
            (running, false) => self.kill_while_running(running),
        };
        self.gate.state().kills_in_flight -= 1;
        result
    }

    fn kill_while_running(&self, (command, connection_id): (u64, u32)) -> Result<()> {
        for _ in 0..KILL_ATTEMPTS {
            self.killer.kill_query(connection_id)?;
            let until = Instant::now() + KILL_RETRY_AFTER;
            loop {
                if self.gate.state().running.map(|(c, _)| c) != Some(command) {
                    return Ok(());
                }
                if Instant::now() >= until {
                    break;
                }
                fiber_pool::sleep(KILL_SETTLE_POLL);
            }
        }
        Ok(())
    }

    /// True once [`CancelHandle::cancel`] was called on this checkout.
    pub fn is_cancelled(&self) -> bool {
        self.gate.cancelled()
    }
}
