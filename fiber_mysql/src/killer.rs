//! A pool's side channel for `KILL QUERY` and `KILL CONNECTION` ([`Killer`]): the
//! connections the kills go through, which port they use, and the order kills go out.
//!
//! ## Connections opened ahead, on the server's `extra_port` when it has one
//! A pool's killer keeps up to [`KILL_CONNECTIONS`] connections, opened on a thread of
//! its own when the pool is made ([`Killer::open_ahead`]), so that a storm of cancels
//! waits for no connect. They go to the server's `extra_port` when it has one: the
//! pool asks the server for `@@extra_port` when it starts ([`extra_port`]), and
//! [`Opts::kill_port`] overrides what it says (a port mapped elsewhere, as a container
//! does). That port is served one thread per connection whatever the server's
//! `thread_handling`, so a KILL is answered even while every thread of a busy
//! `pool-of-threads` runs a statement (a busy thread group gets another thread only
//! after `thread_pool_stall_limit`, 500 ms by default, and thread-creation
//! throttling). A server without one (MySQL, or MariaDB without `extra_port`), or a
//! kill port that refuses (its `extra_max_connections` full), gets the kills on its
//! own port, where the pool keeps room for them ([`KILL_HEADROOM`]). A connection
//! that died is opened again by the kill that finds it dead.
//!
//! ## One kill at a time, unless one is slow
//! Kills take turns: a kill goes out once the one before it was answered and its
//! statement ended, or [`KILL_TURN`] after it was sent, whichever comes first. So a
//! slow KILL holds back the kills behind it by [`KILL_TURN`] at most (they go on the
//! other connections), and otherwise kills never reach MariaDB together. Measured on
//! MariaDB 10.11 (`fiber_mysql/tests/cancel.rs`, and BENCHMARKS.md, "Clients that
//! leave"): twenty `KILL QUERY`s sent at once, each to a `SELECT SLEEP(30)` of its
//! own, were each answered about 2.006 s later (median and largest, in both thread
//! modes, on the server's port and on its `extra_port`), where the same twenty in
//! turn took 0.14 ms each (median; now and then one took 2 s). The same twenty at
//! once against `GET_LOCK` waits took under 3 ms. A thread dump of the server in
//! those 2 s shows why: a woken sleeper holds the mutex every `SLEEP` in the server
//! shares (`LOCK_item_func_sleep`) while it waits for its own session's kill lock,
//! which its killer holds while it retries that shared mutex, 50 ms apart, for up to
//! 2 s (`THD::abort_current_cond_wait`). The killer's first try fails only when
//! another thread holds the shared mutex at that moment, which kills sent together
//! make likely. What a slow KILL still costs its own request is bounded by the
//! checkout (`cancel.rs`, `KILL_PATIENCE`).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use may::sync::Semphore;

use crate::conn::{Conn, QueryKiller};
use crate::error::{Error, Result};
use crate::headroom::KILL_HEADROOM;
use crate::opts::Opts;

/// Connections a pool's side channel keeps at most: the server connections the pool
/// leaves free beyond its size (kills on the server's own port need them). Four, so
/// that three KILLs stuck for MariaDB's 2 s at once still leave one for the rest.
pub const KILL_CONNECTIONS: usize = KILL_HEADROOM;
/// Connect timeout of a side-channel connection.
pub const KILL_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for the answer to one KILL: above the 2 s a MariaDB KILL may take
/// (see the module comment), so that a slow answer is read, not taken for a dead
/// connection.
pub const KILL_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a free side-channel connection and the turn together.
pub const KILL_WAIT: Duration = Duration::from_secs(10);
/// Longest one kill holds the turn (see the module comment): a kill is answered and
/// its statement ends in about a millisecond here, far longer on a loaded machine.
pub const KILL_TURN: Duration = Duration::from_millis(20);
/// Stack of the thread a kill runs on when asked from a may coroutine.
pub const KILL_THREAD_STACK: usize = 256 * 1024;
/// How often a kill that holds the turn looks whether its statement ended.
const TURN_POLL: Duration = Duration::from_millis(1);

/// What a kill stops: the running statement, or the whole session.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kill {
    Query,
    Connection,
}

/// The turn kills take (see the module comment): when the kill that holds it took it.
#[derive(Default)]
struct Turn {
    taken: Option<Instant>,
    /// Counts the turns taken, so that a kill gives back only its own.
    ticket: u64,
}

/// A pool's side channel for `KILL QUERY` and `KILL CONNECTION`; see the module comment.
pub(crate) struct Killer {
    /// The pool's options, for the server's own port.
    opts: Opts,
    /// The same at the kill port, tried first, when there is one.
    kill_opts: Option<Opts>,
    /// At most this many connections are kept.
    connections: usize,
    permits: Semphore,
    idle: Mutex<Vec<Conn>>,
    turn: Mutex<Turn>,
    turn_free: Condvar,
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

/// The server's `extra_port`, asked on `probe` (`None`: it has none, or the server is
/// not a MariaDB that knows the variable).
pub(crate) fn extra_port(probe: &mut Conn) -> Option<u16> {
    let port = probe
        .query("SELECT @@global.extra_port")
        .ok()?
        .scalar::<u64>()
        .ok()??;
    u16::try_from(port).ok().filter(|&p| p != 0)
}

impl Killer {
    /// A side channel to the server of `opts`, at most `connections` wide. Its kills go
    /// to [`Opts::kill_port`] when set, else to `extra_port` when given (the server's,
    /// see [`extra_port`]), else to the server's own port.
    pub(crate) fn new(opts: &Opts, connections: usize) -> Killer {
        Killer::with_extra_port(opts, connections, None)
    }

    /// [`Killer::new`], with the server's `extra_port` if it has one.
    pub(crate) fn with_extra_port(
        opts: &Opts,
        connections: usize,
        extra_port: Option<u16>,
    ) -> Killer {
        let mut opts = opts.clone();
        opts.query_timeout = None;
        opts.connect_timeout = opts.connect_timeout.min(KILL_CONNECT_TIMEOUT);
        opts.read_timeout = KILL_ANSWER_TIMEOUT;
        let kill_port = opts.kill_port.take().or(extra_port);
        let kill_opts = kill_port
            .filter(|&port| port != opts.port)
            .map(|port| Opts {
                port,
                ..opts.clone()
            });
        let connections = connections.max(1);
        Killer {
            opts,
            kill_opts,
            connections,
            permits: Semphore::new(connections),
            idle: Mutex::new(Vec::with_capacity(connections)),
            turn: Mutex::new(Turn::default()),
            turn_free: Condvar::new(),
        }
    }

    /// Opens the side channel's connections before any kill needs them, on a thread
    /// of its own (the caller goes on at once): a storm of cancels then finds them
    /// open, not one connect after another (on a server whose thread pool is busy, a
    /// connect waits as long as a KILL would). Each is opened under a permit, as a
    /// kill's is; a connect that fails ends the warm-up, and the first kill that
    /// finds no connection opens one.
    pub(crate) fn open_ahead(self: &Arc<Self>) {
        let killer = Arc::clone(self);
        let warm = move || {
            while killer.kept() < killer.connections && killer.permits.try_wait() {
                let opened = killer.connect();
                killer.permits.post();
                match opened {
                    Ok(conn) => killer.keep(conn),
                    Err(_) => break,
                }
            }
        };
        // Without the thread, kills open their own connections, as they can anyway.
        let _ = std::thread::Builder::new()
            .name("kill-channel".into())
            .stack_size(KILL_THREAD_STACK)
            .spawn(warm);
    }

    /// Sends `KILL QUERY connection_id` and waits for its answer. In a may coroutine
    /// (a fiber's carrier among them) the kill runs on a thread of its own
    /// ([`KILL_THREAD_STACK`]) while the coroutine parks on a may channel: opening a
    /// side-channel connection authenticates (SHA-1 in mysql_common), which in a
    /// debug build is more stack than a connection coroutine's 32 KiB, and the turn
    /// is waited for on a std `Condvar`. On a plain thread it runs here.
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
            return self.kill_on_thread(what, connection_id, &|| true);
        }
        let killer = Arc::clone(self);
        fiber_pool::on_carrier(move || {
            let (tx, rx) = may::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("kill-query".into())
                .stack_size(KILL_THREAD_STACK)
                .spawn(move || {
                    let _ = tx.send(killer.kill_on_thread(what, connection_id, &|| true));
                })
                .map_err(Error::Io)?;
            // The thread's every wait is bounded: the permit and the turn, the
            // connect, the answer (twice: a dead kept connection is replaced once).
            let bound = KILL_WAIT + KILL_CONNECT_TIMEOUT + 2 * KILL_ANSWER_TIMEOUT;
            rx.recv_timeout(bound)
                .unwrap_or(Err(Error::PoolTimeout { waited: bound }))
        })
    }

    /// Sends the kill from this plain thread (never a coroutine: it waits on a std
    /// `Condvar`) and waits for its answer; then holds the turn until `ended` says the
    /// killed statement ended, or [`KILL_TURN`] after it was sent.
    pub(crate) fn kill_on_thread(
        &self,
        what: Kill,
        connection_id: u32,
        ended: &dyn Fn() -> bool,
    ) -> Result<()> {
        let until = Instant::now() + KILL_WAIT;
        if !self.permits.wait_timeout(KILL_WAIT) {
            return Err(Error::PoolTimeout { waited: KILL_WAIT });
        }
        let Some(ticket) = self.take_turn(until) else {
            self.permits.post();
            return Err(Error::PoolTimeout { waited: KILL_WAIT });
        };
        let sent = Instant::now();
        let sql = match what {
            Kill::Query => format!("KILL QUERY {connection_id}"),
            Kill::Connection => format!("KILL CONNECTION {connection_id}"),
        };
        // A kept connection may have died (server restart): one more try on a new one.
        let result = match self.take_idle() {
            Some(mut conn) => match conn.query(&sql) {
                Err(e) if e.poisons_connection() => self.on_new_connection(&sql),
                // An answer, an error among them (1094: the session had ended already,
                // common in a storm): the connection is fine, and kept.
                other => {
                    self.keep(conn);
                    other.map(drop)
                }
            },
            None => self.on_new_connection(&sql),
        };
        self.permits.post();
        while result.is_ok() && !ended() && sent.elapsed() < KILL_TURN {
            std::thread::sleep(TURN_POLL);
        }
        self.give_turn(ticket);
        result
    }

    /// Takes the turn once it is free or its holder has had it for [`KILL_TURN`];
    /// `None` past `until`.
    fn take_turn(&self, until: Instant) -> Option<u64> {
        let mut turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            let free_at = turn.taken.map_or(now, |taken| taken + KILL_TURN);
            if free_at <= now {
                turn.taken = Some(now);
                turn.ticket += 1;
                return Some(turn.ticket);
            }
            if now >= until {
                return None;
            }
            let wait = free_at.min(until) - now;
            turn = self
                .turn_free
                .wait_timeout(turn, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Gives the turn back, if it is still `ticket`'s.
    fn give_turn(&self, ticket: u64) {
        let mut turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        if turn.ticket == ticket {
            turn.taken = None;
            self.turn_free.notify_one();
        }
    }

    /// A new side-channel connection: to the kill port when there is one, else (or
    /// when it refuses: its own `extra_max_connections` is full, say) to the server's
    /// port, where the pool's headroom keeps room for it.
    fn connect(&self) -> Result<Conn> {
        match &self.kill_opts {
            Some(kill) => Conn::connect(kill).or_else(|_| Conn::connect(&self.opts)),
            None => Conn::connect(&self.opts),
        }
    }

    fn on_new_connection(&self, sql: &str) -> Result<()> {
        let mut conn = self.connect()?;
        let answer = conn.query(sql).map(drop);
        if !conn.is_broken() {
            self.keep(conn);
        }
        answer
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

    /// Keeps `conn` for the next kill, or closes it when [`Self::connections`] are
    /// kept already (a kill that opened its own while the warm-up still ran).
    fn keep(&self, conn: Conn) {
        let surplus = {
            let mut idle = self.idle();
            if idle.len() < self.connections {
                idle.push(conn);
                None
            } else {
                Some(conn)
            }
        };
        // Closed outside the lock: a close writes to the socket.
        drop(surplus);
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Conn>> {
        // Read on fibers too (`kept`, for a /stats route): the stack is checked before
        // locking (`fiber_pool::lock_anywhere`), so an overflow never strikes with it
        // held. Nothing panics while holding it; a poisoned lock is recovered.
        fiber_pool::lock_anywhere(&self.idle)
    }
}
