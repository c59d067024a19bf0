//! Stopping a running query from outside: [`CancelHandle`], one checkout's side of a
//! cancel. The kills themselves go through the pool's side channel (`killer.rs`).
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
//! - A command still running [`KILL_PATIENCE`] after the cancel (its KILL is slow:
//!   MariaDB may take 2 s over one, `killer.rs` says when) is cut off: its socket is
//!   shut down, so the command fails at once and the checkout ends; the connection is
//!   closed, not reused, and its pool slot is free for a new one. The KILL still goes
//!   out and ends the statement on the server. So a slow KILL delays no request, its
//!   own included, by more than [`KILL_PATIENCE`]; what it costs is a reconnect.
//! - It never touches another checkout, even of the same connection. The handle's
//!   state (the gate) belongs to one checkout, and a KILL is sent only while that
//!   checkout's command is marked running, decided under the gate's lock. A KILL
//!   that lands after its command ended hits an idle session, and MariaDB drops a
//!   `KILL QUERY` that an idle session receives when the next command starts
//!   (`tests/cancel.rs` checks it): so the next command of *this* connection is safe
//!   once every KILL sent has been answered, and the give-back of a connection that
//!   is kept waits for that (at most [`KILL_SETTLE_TIMEOUT`], else the connection is
//!   closed instead of reused). A connection that was cut off is never reused.
//! - A command that had been marked running but had not reached the server when its
//!   KILL arrived would run on (the KILL was dropped as above): while the same
//!   command still runs, or was cut off while its last KILL had been answered, the
//!   KILL is sent again, up to [`KILL_ATTEMPTS`] times, [`KILL_RETRY_AFTER`] apart.
//! - A cancelled checkout is reset at give-back (`session.rs`): a killed statement
//!   may have done part of its work.
//!
//! Query timeouts and deadlines kill through the side channel too, and so does the
//! pool for a threads-driver checkout that a fiber's overflow leaked: `KILL
//! CONNECTION`, the whole session (`pool.rs`, "Abandoned checkouts").

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
pub(crate) use crate::killer::Killer;
use crate::killer::{Kill, KILL_THREAD_STACK};
pub use crate::killer::{
    KILL_ANSWER_TIMEOUT, KILL_CONNECTIONS, KILL_CONNECT_TIMEOUT, KILL_TURN, KILL_WAIT,
};

/// How often a kill is sent while the same command still runs (see the module comment).
pub const KILL_ATTEMPTS: usize = 3;
/// How long a canceller waits for the killed command to end before sending again:
/// long enough that a busy machine's slow wake-up of the killed command does not
/// send a second KILL for nothing (and hold the side channel from other cancels).
pub const KILL_RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long a cancelled command may run on before it is cut off (see the module
/// comment): a KILL is answered and its statement ends in about a millisecond here,
/// and kills queued behind others wait [`KILL_TURN`] at most each.
pub const KILL_PATIENCE: Duration = Duration::from_millis(100);
/// Longest a give-back waits for the KILLs of a cancelled checkout to be answered; a
/// connection whose KILLs are still out after it is closed, not reused.
pub const KILL_SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a give-back, or a canceller, looks whether those KILLs were answered.
const KILL_SETTLE_POLL: Duration = Duration::from_millis(1);

/// One checkout's cancellation state, shared by its [`CancelHandle`]s, with the
/// pool's side channel its kills go through. It is also the cancel hook a checkout
/// registers with its request's context (`PooledConn::follow`), and, for a checkout
/// in a `fiber_pool::Lent`, the `Lent`'s owner, told when an overflow leaked the
/// checkout (`pool.rs`, "Abandoned checkouts"): one allocation for the three.
pub(crate) struct Gate {
    state: Mutex<GateState>,
    killer: Arc<Killer>,
    /// The pool to give a leaked checkout's permit back to: a lent checkout's only.
    /// Weak, so that a handle kept past its checkout keeps no pool alive.
    owner: Option<Weak<dyn Owner>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The pool of a lent checkout, as its gate sees it.
pub(crate) trait Owner: Send + Sync {
    /// A checkout of the pool was leaked by an overflow, and its session ended: its
    /// permit is free again.
    fn abandoned(&self);
}

/// What ends a lent checkout's server session should an overflow leak it, noted
/// whenever the checkout gets a connection and forgotten when it ends.
#[derive(Debug, Default)]
struct Session {
    /// A second handle on the connection's socket, whose shutdown ends the session
    /// whatever stage it was at (the server rolls back and frees its locks; a
    /// handshake half done ends too).
    socket: Option<Arc<std::net::TcpStream>>,
    /// The session's id, for a connection with no such handle (the threads driver:
    /// `KILL CONNECTION`); 0 for none.
    id: u32,
}

#[derive(Debug, Default)]
struct GateState {
    /// The checkout has ended: handles do nothing any more.
    closed: bool,
    cancelled: bool,
    running: Option<Running>,
    commands: u64,
    kills_in_flight: usize,
    /// The command whose kills are out (one sender of kills per command).
    killing: Option<u64>,
    /// The command that was cut off, and when.
    cut: Option<(u64, Instant)>,
    /// Noted for a lent checkout only.
    session: Session,
}

/// The command in flight.
#[derive(Debug)]
struct Running {
    /// Its number within the checkout.
    command: u64,
    /// Its connection's server id.
    connection_id: u32,
    /// A second handle on its connection's socket, whose shutdown cuts the command
    /// off; `None` for a connection without one (the threads driver).
    socket: Option<Arc<std::net::TcpStream>>,
    /// It is a pipeline (`exec_many`): its kill is `KILL CONNECTION`, since `KILL
    /// QUERY` would stop only the statement running and leave the ones queued behind
    /// it to run (so would a cut-off: the server goes on reading what was sent).
    whole_session: bool,
}

/// How a command ended, for its checkout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    /// The checkout was cancelled while it ran.
    pub(crate) cancelled: bool,
    /// It was cut off: its connection must not be used again.
    pub(crate) cut: bool,
}

impl GateState {
    /// Whether `command` still runs and was not cut off.
    fn runs(&self, command: u64) -> bool {
        self.running.as_ref().is_some_and(|r| r.command == command) && !self.was_cut(command)
    }

    fn was_cut(&self, command: u64) -> bool {
        self.cut.is_some_and(|(c, _)| c == command)
    }
}

impl Gate {
    pub(crate) fn new(killer: Arc<Killer>) -> Gate {
        Gate {
            state: Mutex::default(),
            killer,
            owner: None,
        }
    }

    /// The gate of a checkout lent to a job, whose pool `owner` is told if an
    /// overflow leaks it.
    pub(crate) fn lent(killer: Arc<Killer>, owner: Weak<dyn Owner>) -> Gate {
        Gate {
            owner: Some(owner),
            ..Gate::new(killer)
        }
    }

    /// The checkout got a connection (`None`: it has none now): what ends its session
    /// is `socket`, else the session's `id`.
    /// Only a lent checkout's gate keeps it: another's session ends with its guard.
    pub(crate) fn note_session(&self, socket: Option<Arc<std::net::TcpStream>>, id: u32) {
        if self.owner.is_none() {
            return;
        }
        // The handle it replaces is dropped after the lock (it may be the last).
        let old = std::mem::replace(&mut self.state().session, Session { socket, id });
        drop(old);
    }

    /// An overflow leaked the checkout: ends its server session (shuts its socket
    /// down, or kills the session by id, waiting for the answer on a thread of the
    /// side channel's, bounded), then tells the pool. A kill that fails (the server
    /// unreachable) still tells it: the pool stays whole, and such a session ends with
    /// the server's own timeouts.
    /// The gate closes too: the leaked checkout's hook and handles do nothing more
    /// (its session is ended already).
    pub(crate) fn abandoned(&self) {
        let (session, running) = {
            let mut s = self.state();
            s.closed = true;
            (std::mem::take(&mut s.session), s.running.take())
        };
        drop(running);
        match session {
            Session {
                socket: Some(socket),
                ..
            } => {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
            Session { id: 0, .. } => {}
            Session { id, .. } => {
                let _ = self.killer.kill_connection(id);
            }
        }
        // The leaked checkout holds its pool, so the upgrade succeeds whenever a
        // `Lent` tells an abandon (only of a checkout it holds).
        let owner = self.owner.as_ref().and_then(Weak::upgrade);
        debug_assert!(owner.is_some(), "a lent checkout's pool outlives it");
        if let Some(owner) = owner {
            owner.abandoned();
        }
    }

    fn state(&self) -> MutexGuard<'_, GateState> {
        // Taken on fibers too, inside a handler that may hold anything:
        // `fiber_pool::lock_anywhere` overflows before locking, never inside, and
        // claims no safe point (and recovers a poisoned lock; nothing panics while
        // holding it).
        fiber_pool::lock_anywhere(&self.state)
    }

    /// A command of the checkout starts on connection `connection_id`, whose socket
    /// `socket` is a second handle on (to cut the command off); refused with
    /// [`Error::Cancelled`] once the checkout was cancelled.
    pub(crate) fn begin(
        &self,
        connection_id: u32,
        socket: Option<Arc<std::net::TcpStream>>,
    ) -> Result<()> {
        self.begin_as(connection_id, socket, false)
    }

    /// [`Gate::begin`] for a pipeline: a cancel meanwhile kills the whole session.
    pub(crate) fn begin_pipeline(
        &self,
        connection_id: u32,
        socket: Option<Arc<std::net::TcpStream>>,
    ) -> Result<()> {
        self.begin_as(connection_id, socket, true)
    }

    fn begin_as(
        &self,
        connection_id: u32,
        socket: Option<Arc<std::net::TcpStream>>,
        whole_session: bool,
    ) -> Result<()> {
        let mut s = self.state();
        if s.cancelled {
            return Err(Error::Cancelled);
        }
        s.commands += 1;
        s.running = Some(Running {
            command: s.commands,
            connection_id,
            socket,
            whole_session,
        });
        Ok(())
    }

    /// Whether the checkout was cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// The command ended: whether the checkout was cancelled meanwhile, and whether
    /// the command was cut off.
    pub(crate) fn end(&self) -> Ended {
        let mut s = self.state();
        let cut = s
            .running
            .take()
            .is_some_and(|r| s.cut.is_some_and(|(c, _)| c == r.command));
        Ended {
            cancelled: s.cancelled,
            cut,
        }
    }

    /// Cuts `command` off if it still runs: shuts its socket down, so that it fails
    /// at once. False when it runs and cannot be cut (no socket).
    fn cut(&self, command: u64) -> bool {
        let mut s = self.state();
        if !s.runs(command) {
            return true;
        }
        let Some(socket) = s.running.as_ref().and_then(|r| r.socket.clone()) else {
            return false;
        };
        s.cut = Some((command, Instant::now()));
        drop(s);
        let _ = socket.shutdown(std::net::Shutdown::Both);
        true
    }

    /// Whether `command` needs no more kills, its last answered at `answered`: it
    /// ended by itself, or it was cut off before that answer came (the KILL was slow,
    /// not dropped, and has landed).
    fn needs_no_kill(&self, command: u64, answered: Instant) -> bool {
        let s = self.state();
        match s.cut {
            Some((c, at)) if c == command => at <= answered,
            _ => !s.runs(command),
        }
    }

    /// The checkout ends: handles stop acting. Waits until every KILL already sent is
    /// answered (see the module comment) if `settle`; returns `(cancelled, settled)`.
    pub(crate) fn close(&self, settle: bool) -> (bool, bool) {
        let (cancelled, in_flight, session, running) = {
            let mut s = self.state();
            s.closed = true;
            (
                s.cancelled,
                s.kills_in_flight,
                std::mem::take(&mut s.session),
                // A command whose end never came (it panicked).
                s.running.take(),
            )
        };
        // A handle kept past the checkout keeps no socket open.
        drop((session, running));
        // Closed, no kill starts any more: none in flight now means none later.
        if !settle || in_flight == 0 {
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

/// A request's context cancelled: its checkout's running and later commands are
/// cancelled, on a thread of its own (a context's hooks must not block). Not for a
/// passed deadline: the checkout carries the deadline already, so its query kills
/// itself then and fails as `DeadlineExceeded` naming the phase, not as `Cancelled`.
impl fiber_pool::CancelHook for Gate {
    fn cancelled(self: Arc<Self>, reason: fiber_pool::CancelReason) {
        if reason == fiber_pool::CancelReason::DeadlinePassed {
            return;
        }
        let handle = CancelHandle::new(self);
        let spawned = std::thread::Builder::new()
            .name("fiber_mysql-cancel".into())
            .spawn(move || {
                let _ = handle.cancel();
            });
        // Without a thread the query still ends at its own timeout.
        drop(spawned);
    }
}

/// Cancels one checkout's running and later commands; see the module comment.
/// Cheap to clone, `Send + Sync`: hand it to whatever watches the client or the clock.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    gate: Arc<Gate>,
}

/// The answer to a command's first KILL, from the thread that sends its kills.
type FirstAnswer = may::sync::mpsc::Receiver<Result<()>>;

impl CancelHandle {
    pub(crate) fn new(gate: Arc<Gate>) -> CancelHandle {
        CancelHandle { gate }
    }

    /// Cancels the checkout: its running command, if any, is killed (and returns
    /// [`Error::Cancelled`]), or cut off after [`KILL_PATIENCE`], and its later
    /// commands fail with `Error::Cancelled` unsent. After the checkout ended it does
    /// nothing. Returns once the running command has ended or was cut off (on a
    /// fiber, the waits park it). An error means the KILL could not be sent (side
    /// channel busy past [`KILL_WAIT`], or the server unreachable) and the command
    /// could not be cut off (the threads driver): it then runs on, but the later
    /// ones still fail.
    pub fn cancel(&self) -> Result<()> {
        let (command, connection_id, kill, first) = {
            let mut s = self.gate.state();
            if s.closed {
                return Ok(());
            }
            s.cancelled = true;
            let Some(running) = &s.running else {
                return Ok(());
            };
            let (command, connection_id) = (running.command, running.connection_id);
            let kill = match running.whole_session {
                true => Kill::Connection,
                false => Kill::Query,
            };
            // The first cancel of a command sends its kills; a later one waits alike.
            let first = s.killing != Some(command);
            if first {
                s.killing = Some(command);
                s.kills_in_flight += 1;
            }
            (command, connection_id, kill, first)
        };
        let answer = match first {
            true => match self.send_kills(command, connection_id, kill) {
                Ok(answer) => Some(answer),
                // No thread for the kills: the command is cut off at once instead.
                Err(e) if self.gate.cut(command) => {
                    drop(e);
                    return Ok(());
                }
                Err(e) => return Err(e),
            },
            false => None,
        };
        self.wait_or_cut(command, answer)
    }

    /// Starts the thread that sends `command`'s kills (see the module comment); the
    /// first one's answer comes on the receiver.
    fn send_kills(&self, command: u64, connection_id: u32, kill: Kill) -> Result<FirstAnswer> {
        let gate = Arc::clone(&self.gate);
        let spawned = fiber_pool::on_carrier(move || {
            let (tx, rx) = may::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("kill-query".into())
                .stack_size(KILL_THREAD_STACK)
                .spawn(move || send_kills(&gate, command, connection_id, kill, &tx))
                .map(|_| rx)
        });
        spawned.map_err(|e| {
            self.gate.state().kills_in_flight -= 1;
            Error::Io(e)
        })
    }

    /// Waits until `command` ends, or cuts it off once [`KILL_PATIENCE`] has passed or
    /// its KILL failed.
    fn wait_or_cut(&self, command: u64, answer: Option<FirstAnswer>) -> Result<()> {
        let until = Instant::now() + KILL_PATIENCE;
        loop {
            if !self.gate.state().runs(command) {
                return Ok(());
            }
            let failed = match answer.as_ref().map(|a| a.try_recv()) {
                Some(Ok(Err(e))) => Some(e),
                _ => None,
            };
            if failed.is_some() || Instant::now() >= until {
                if self.gate.cut(command) {
                    return Ok(());
                }
                return match failed {
                    Some(e) => Err(e),
                    None => self.wait_uncut(command, answer),
                };
            }
            fiber_pool::sleep(KILL_SETTLE_POLL);
        }
    }

    /// For a command that cannot be cut off: waits for its first KILL's answer, then
    /// for it to end while its kills are sent again.
    fn wait_uncut(&self, command: u64, answer: Option<FirstAnswer>) -> Result<()> {
        if let Some(answer) = answer {
            let bound = KILL_WAIT + KILL_CONNECT_TIMEOUT + 2 * KILL_ANSWER_TIMEOUT;
            answer
                .recv_timeout(bound)
                .unwrap_or(Err(Error::PoolTimeout { waited: bound }))?;
        }
        let until = Instant::now() + KILL_RETRY_AFTER * KILL_ATTEMPTS as u32;
        while self.gate.state().runs(command) && Instant::now() < until {
            fiber_pool::sleep(KILL_SETTLE_POLL);
        }
        Ok(())
    }

    /// True once [`CancelHandle::cancel`] was called on this checkout.
    pub fn is_cancelled(&self) -> bool {
        self.gate.cancelled()
    }
}

/// Sends `command`'s kills, on a thread of its own: the first (its answer goes to
/// `first`), then again while the command runs on (see the module comment).
fn send_kills(
    gate: &Gate,
    command: u64,
    connection_id: u32,
    kill: Kill,
    first: &may::sync::mpsc::Sender<Result<()>>,
) {
    // The turn is held until the statement ended here, or was cut off.
    let ended = || !gate.state().runs(command);
    let killer = &gate.killer;
    let sent = killer.kill_on_thread(kill, connection_id, &ended);
    let mut answered = sent.is_ok().then(Instant::now);
    let _ = first.send(sent);
    for _ in 1..KILL_ATTEMPTS {
        let Some(at) = answered else { break };
        let until = at + KILL_RETRY_AFTER;
        while !gate.needs_no_kill(command, at) && Instant::now() < until {
            std::thread::sleep(KILL_SETTLE_POLL);
        }
        if gate.needs_no_kill(command, at) {
            break;
        }
        answered = killer
            .kill_on_thread(kill, connection_id, &ended)
            .is_ok()
            .then(Instant::now);
    }
    gate.state().kills_in_flight -= 1;
}
