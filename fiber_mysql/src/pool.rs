//! The pool: `size` connections opened in parallel at start, handed to
//! fibers in FIFO order, returned by a guard's Drop.
//!
//! ## Waiting
//! `size` permits are the throttle (`permits.rs`). Their waiters queue in a FIFO
//! list and park their coroutine (never the worker thread, unlike a std `Condvar`),
//! with no timer each: the pool's sweeper thread ends a wait past its deadline, which
//! gives [`Error::PoolTimeout`]. The idle
//! connections themselves sit in a short-held std `Mutex<Vec>` (never held
//! across a yield). The newest idle connection is handed out first.
//!
//! ## Replacing
//! A connection whose command failed at the I/O or protocol level is closed
//! on return, and its slot is refilled lazily: the next checkout that finds no
//! idle connection opens one at its first command (so a server outage costs no
//! reconnect storm, and a checkout itself never does a handshake).
//! Before an idle native connection is handed out, a non-blocking peek checks
//! that the server has not closed it (e.g. after a restart): dead ones are
//! replaced at once, so the first query after a restart does not fail.
//!
//! ## Giving back
//! A connection whose session may have changed is reset before it goes back to
//! the idle list (`session.rs` has the rule); a clean one keeps its statement
//! cache. A reset that fails closes the connection. A cancelled checkout waits for
//! its KILLs to be answered first (`cancel.rs`).
//!
//! ## Abandoned checkouts
//! A fiber that dies without unwinding (stack overflow caught by a trap
//! handler) never runs `PooledConn`'s Drop. The guard owns its connection
//! for the whole checkout, and [`Pool::checkout`] puts the guard in a
//! `fiber_pool::Lent` (registered before the checkout lands in it), which keeps
//! it off the fiber stack. After an overflow the guard is leaked, not dropped
//! (`fiber_pool::Abandoned`: the overflow may have struck in the middle of one of
//! its commands, or a thread the job started may still use it), so the pool
//! accounts for it from what the checkout's gate, the `Lent`'s owner, noted: a second
//! descriptor of the socket, made at the connect, which it shuts down (the server
//! ends the session, rolls back the transaction and frees the locks, whatever stage
//! the session was at), or for the threads driver the session's id, which it ends
//! with `KILL CONNECTION` over the side channel; then it gives the permit back. The
//! socket's descriptors stay open on our side for the rest of the process (two fds
//! per such overflow): the leaked guard still owns them, and closing an fd that
//! something may still use lets its number be reused under it.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mysql_common::params::Params;

use crate::cancel::{self, CancelHandle, Gate, Killer, KILL_CONNECTIONS};
use crate::conn::{Conn, QueryKiller};
use crate::error::{Error, Phase, Result};
use crate::opts::Opts;
use crate::permits::Permits;
use crate::query::QueryResult;
use crate::session::ResetReason;
#[cfg(feature = "threads")]
use crate::threads::ThreadConn;

pub use crate::headroom::KILL_HEADROOM;
/// MariaDB's ER_QUERY_INTERRUPTED: the answer of a statement stopped by `KILL QUERY`.
const ER_QUERY_INTERRUPTED: u16 = 1317;
/// How long [`Pool::healthy`] waits for a connection before saying no.
pub const HEALTH_CHECK_WAIT: Duration = Duration::from_secs(1);
/// Stack a [`Pool::checkout`] needs left on the fiber: `fiber_pool::Lent::acquire`'s own
/// margin. The checkout itself runs on the carrier's stack (`fiber_pool::on_carrier`:
/// its may semaphore wait and its lock are never on a fiber) and lands in the `Lent`
/// directly, so nothing deeper runs on the fiber. With less left, the checkout
/// overflows at its start, holding nothing.
pub const CHECKOUT_STACK_MARGIN: usize = fiber_pool::lent::LENT_STACK_MARGIN;

/// Which client runs the queries.
///
/// `Threads` exists only with the crate feature `threads` (which builds the `mysql`
/// crate). The enum is `#[non_exhaustive]` because features are unified across a
/// build: another crate turning `threads` on must not break a `match` written here
/// without it. Parsing `"threads"` without the feature is an error that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Driver {
    /// Our may-native client: a waiting query parks only its fiber.
    #[default]
    Native,
    /// The `mysql` crate, one OS thread per connection (for comparison; feature `threads`).
    #[cfg(feature = "threads")]
    Threads,
}

impl FromStr for Driver {
    type Err = Error;
    fn from_str(s: &str) -> Result<Driver> {
        match s {
            "native" => Ok(Driver::Native),
            #[cfg(feature = "threads")]
            "threads" => Ok(Driver::Threads),
            #[cfg(not(feature = "threads"))]
            "threads" => Err(Error::Url(
                "the `threads` driver is not built in: enable the `threads` feature of \
                 fiber_mysql (it builds the `mysql` crate), or use `native`"
                    .into(),
            )),
            other => Err(Error::Url(format!(
                "unknown driver `{other}`: use `native` or `threads`"
            ))),
        }
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Driver::Native => "native",
            #[cfg(feature = "threads")]
            Driver::Threads => "threads",
        })
    }
}

/// How to build a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Where to connect.
    pub opts: Opts,
    /// Number of connections: the most queries in flight at once.
    pub size: usize,
    /// Longest wait for a free connection before [`Error::PoolTimeout`].
    pub wait_timeout: Duration,
    /// Native or threads.
    pub driver: Driver,
    /// Connections opened at once at start (MariaDB's `back_log` overflows
    /// if hundreds arrive together).
    pub connect_parallelism: usize,
}

/// Connections opened at once at start: MariaDB's `back_log` overflows when hundreds
/// of connects arrive together. The async twin's mysql_async pool uses it too.
pub const CONNECT_PARALLELISM: usize = 32;

impl PoolConfig {
    /// `size` native connections, 5 s wait timeout, [`CONNECT_PARALLELISM`] parallel opens.
    pub fn new(opts: Opts, size: usize) -> PoolConfig {
        PoolConfig {
            opts,
            size,
            wait_timeout: Duration::from_secs(5),
            driver: Driver::Native,
            connect_parallelism: CONNECT_PARALLELISM,
        }
    }
}

/// A snapshot of the pool's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Configured size.
    pub size: usize,
    /// Checked out right now.
    pub in_use: usize,
    /// Open and waiting in the pool.
    pub idle: usize,
    /// Callers waiting for a connection right now.
    pub waiting: usize,
    /// Checkouts that had to wait.
    pub total_waits: u64,
    /// Summed waiting time of those checkouts.
    pub total_wait_time: Duration,
    /// Checkouts that gave up with [`Error::PoolTimeout`].
    pub timeouts: u64,
    /// Connections closed after an error (or found dead) and replaced.
    pub replaced: u64,
    /// Checkouts given up through [`PooledConn::discard`], or leaked by a fiber's
    /// overflow (their sessions ended by the pool).
    pub abandoned: u64,
    /// Connections reset at give-back because their session may have changed
    /// (see [`ResetReason`]); a clean give-back is not counted.
    pub resets: u64,
    /// Resets that failed: those connections were closed (and count in `replaced`).
    pub reset_failures: u64,
    /// Connections opened since start.
    pub opened: u64,
    /// Side-channel connections kept open for `KILL QUERY` (at most
    /// [`KILL_CONNECTIONS`]): server connections of
    /// this pool beyond `idle` and `in_use`.
    pub kill_connections: usize,
}

/// One connection of either driver, boxed: a checkout moves it through several
/// frames on the carrier's stack (the idle list, `on_carrier`'s result, the guard),
/// and unboxed each move would take a frame of its size. Boxed, a
/// connection coroutine waiting on a query stays within the one stack page a
/// `/hello` uses (`scripts/profile-hello stack`: BENCHMARKS.md, "Where a request's
/// time goes"): a page less per request in flight, for one allocation per
/// connection opened.
#[derive(Debug)]
enum Backend {
    Native(Box<Conn>),
    #[cfg(feature = "threads")]
    Threads(Box<ThreadConn>),
}

impl Backend {
    fn open(driver: Driver, opts: &Opts) -> Result<Backend> {
        match driver {
            Driver::Native => Conn::connect(opts).map(|c| Backend::Native(Box::new(c))),
            #[cfg(feature = "threads")]
            Driver::Threads => ThreadConn::connect(opts).map(|c| Backend::Threads(Box::new(c))),
        }
    }

    fn is_broken(&self) -> bool {
        match self {
            Backend::Native(c) => c.is_broken(),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.is_broken(),
        }
    }

    fn looks_alive(&self) -> bool {
        match self {
            Backend::Native(c) => c.looks_alive(),
            // The mysql crate hides its socket: a dead one fails its next query.
            #[cfg(feature = "threads")]
            Backend::Threads(c) => !c.is_broken(),
        }
    }

    fn query(&mut self, sql: &str) -> Result<QueryResult> {
        match self {
            Backend::Native(c) => c.query(sql),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.query(sql),
        }
    }

    fn exec(&mut self, sql: &str, params: Params) -> Result<QueryResult> {
        match self {
            Backend::Native(c) => c.exec(sql, params),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.exec(sql, params),
        }
    }

    fn exec_many(&mut self, sql: &str, params: Vec<Params>) -> Result<Vec<QueryResult>> {
        match self {
            Backend::Native(c) => c.exec_many(sql, params),
            // The mysql crate has no pipelining: one execution after another, stopping
            // at the first failure (the native driver reads every answer of a round
            // before it reports one).
            #[cfg(feature = "threads")]
            Backend::Threads(c) => params.into_iter().map(|p| c.exec(sql, p)).collect(),
        }
    }

    fn ping(&mut self) -> Result<()> {
        match self {
            Backend::Native(c) => c.ping(),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.ping(),
        }
    }

    /// No COM_QUIT on drop: the stream may be in the middle of a command.
    fn mark_broken(&mut self) {
        match self {
            Backend::Native(c) => c.mark_broken(),
            // Dropping it ends its thread, which closes the mysql crate's connection.
            #[cfg(feature = "threads")]
            Backend::Threads(_) => {}
        }
    }

    /// Its kills go through the pool's side channel.
    fn attach(&mut self, killer: &Arc<Killer>) {
        match self {
            Backend::Native(c) => c.killer = Some(Arc::clone(killer) as Arc<dyn QueryKiller>),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.killer = Arc::clone(killer),
        }
    }

    /// Its queries end by `deadline`.
    fn set_deadline(&mut self, deadline: Option<Instant>) {
        match self {
            Backend::Native(c) => c.set_deadline(deadline),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.deadline = deadline,
        }
    }

    fn reset_reason(&self) -> Option<ResetReason> {
        match self {
            Backend::Native(c) => c.reset_reason(),
            #[cfg(feature = "threads")]
            Backend::Threads(_) => Some(ResetReason::NotTracked),
        }
    }

    fn mark_session_dirty(&mut self) {
        match self {
            Backend::Native(c) => c.mark_session_dirty(),
            // Reset at every give-back anyway.
            #[cfg(feature = "threads")]
            Backend::Threads(_) => {}
        }
    }

    fn reset(&mut self) -> Result<()> {
        match self {
            Backend::Native(c) => c.reset(),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.reset(),
        }
    }

    fn connection_id(&self) -> u32 {
        match self {
            Backend::Native(c) => c.connection_id(),
            #[cfg(feature = "threads")]
            Backend::Threads(c) => c.connection_id(),
        }
    }

    /// A second handle on the socket, to end the session without the connection.
    fn shutdown_handle(&self) -> Option<Arc<std::net::TcpStream>> {
        match self {
            Backend::Native(c) => c.shutdown_handle(),
            // Its socket lives on its own thread: ended by id instead.
            #[cfg(feature = "threads")]
            Backend::Threads(_) => None,
        }
    }
}

/// A lent checkout's gate is the `Lent`'s owner: told of an overflow that leaked the
/// checkout, it ends the session from what it noted and gives the permit back.
impl fiber_pool::LentOwner<PooledConn> for Gate {
    fn abandoned(&self, _leaked: fiber_pool::Abandoned<PooledConn>) {
        Gate::abandoned(self);
    }
}

struct Shared {
    cfg: PoolConfig,
    /// `KILL QUERY` for every connection of the pool (cancel.rs).
    killer: Arc<Killer>,
    permits: Permits,
    idle: Mutex<Vec<Backend>>,
    in_use: AtomicUsize,
    waiting: AtomicUsize,
    total_waits: AtomicU64,
    total_wait_nanos: AtomicU64,
    timeouts: AtomicU64,
    replaced: AtomicU64,
    abandoned: AtomicU64,
    resets: AtomicU64,
    reset_failures: AtomicU64,
    opened: AtomicU64,
}

/// Accounts for a checkout that a fiber's overflow leaked (see "Abandoned checkouts"
/// above), once its gate has ended the session: gives its permit back. Runs on the
/// carrier, after the fiber is gone.
impl cancel::Owner for Shared {
    fn abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
        self.in_use.fetch_sub(1, Ordering::Relaxed);
        self.permits.give();
    }
}

impl Shared {
    fn open(&self) -> Result<Backend> {
        let mut conn = Backend::open(self.cfg.driver, &self.cfg.opts)?;
        conn.attach(&self.killer);
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(conn)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Backend>> {
        // Checkout and give-back lock it on the carrier; `stats` on the fiber of a
        // /stats route, from code that may hold anything: so the stack is checked
        // before locking (`fiber_pool::lock_anywhere`, no safe point claimed), and the
        // critical sections never allocate (the Vec has `size` capacity from the
        // start), so no overflow strikes with the lock held. Nothing panics while
        // holding it; a poisoned lock is recovered.
        fiber_pool::lock_anywhere(&self.idle)
    }

    /// Gives a checkout's permit back, with its connection if still good. On a
    /// fiber this runs on the carrier's stack (`fiber_pool::on_carrier`): the idle
    /// list's lock, its allocation and the semaphore's post are never on a fiber.
    fn give_back(&self, conn: Option<Backend>, gate: Option<Arc<Gate>>) {
        fiber_pool::on_carrier(|| self.give_back_here(conn, gate));
    }

    /// The connection with its session as the connect left it: reset if its session
    /// may have changed (see [`ResetReason`] and `session.rs`), else as it is, with its
    /// statement cache. `None` when the reset failed (the connection is closed).
    fn clean(&self, mut conn: Backend) -> Option<Backend> {
        conn.set_deadline(None);
        if conn.reset_reason().is_none() {
            return Some(conn);
        }
        self.resets.fetch_add(1, Ordering::Relaxed);
        match conn.reset() {
            Ok(()) => Some(conn),
            Err(_) => {
                self.reset_failures.fetch_add(1, Ordering::Relaxed);
                self.replaced.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn give_back_here(&self, mut conn: Option<Backend>, gate: Option<Arc<Gate>>) {
        // A cancelled checkout: no KILL of it may reach the connection's next user
        // (cancel.rs), and what the killed statement did is unknown (session.rs).
        if let Some(gate) = gate {
            // A connection closed anyway (cut off, or broken) waits for no KILL.
            let kept = conn.as_ref().is_some_and(|c| !c.is_broken());
            let (cancelled, settled) = gate.close(kept);
            if !settled {
                conn = conn.map(|mut c| {
                    c.mark_broken();
                    c
                });
            } else if cancelled {
                if let Some(c) = conn.as_mut() {
                    c.mark_session_dirty();
                }
            }
        }
        match conn {
            Some(conn) if !conn.is_broken() => {
                if let Some(conn) = self.clean(conn) {
                    self.idle().push(conn);
                }
            }
            Some(_broken) => {
                self.replaced.fetch_add(1, Ordering::Relaxed);
            }
            // Never opened, or discarded (counted as abandoned): the slot is
            // refilled by a later checkout.
            None => {}
        }
        self.in_use.fetch_sub(1, Ordering::Relaxed);
        self.permits.give();
    }
}

/// A pool of connections; cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("url", &self.shared.cfg.opts.url_redacted())
            .field("driver", &self.shared.cfg.driver)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Pool {
    /// Checks that the pool fits the server's `max_connections`, then opens
    /// all `size` connections, `connect_parallelism` at a time (on plain
    /// threads: this is start-up code and may run outside any coroutine).
    pub fn new(cfg: PoolConfig) -> Result<Pool> {
        if cfg.size == 0 {
            return Err(Error::Params("pool size must be at least 1".into()));
        }
        let mut probe = Conn::connect(&cfg.opts)?;
        let max_connections = probe
            .query("SELECT @@max_connections")?
            .scalar::<u64>()?
            .unwrap_or(0) as usize;
        let extra_port = crate::killer::extra_port(&mut probe);
        drop(probe);
        if cfg.size + KILL_HEADROOM > max_connections {
            return Err(Error::PoolTooBig {
                pool: cfg.size,
                max_connections,
            });
        }
        let killer = Killer::with_extra_port(&cfg.opts, KILL_CONNECTIONS, extra_port);
        let shared = Pool::empty(cfg, killer)?;
        open_all(&shared)?;
        shared.killer.open_ahead();
        Ok(Pool { shared })
    }

    /// A pool that opens no connection now: each checkout opens its slot's connection
    /// when it finds none, as after a connection broke. For a server that must start
    /// while its database is unreachable (a worker replaced during an outage): it
    /// answers, not ready, and its checkouts fail as unavailable until the database is
    /// back. What [`Pool::new`] checks at once is not checked: a pool larger than the
    /// server's `max_connections` shows as connects refused with error 1040 ("too many
    /// connections") under load. Its KILLs go to the server's own port (the
    /// `kill_port` URL option names another): the server could not be asked for its
    /// `extra_port`, and its side channel opens on first use.
    pub fn new_lazy(cfg: PoolConfig) -> Result<Pool> {
        if cfg.size == 0 {
            return Err(Error::Params("pool size must be at least 1".into()));
        }
        let killer = Killer::with_extra_port(&cfg.opts, KILL_CONNECTIONS, None);
        Ok(Pool {
            shared: Pool::empty(cfg, killer)?,
        })
    }

    /// The pool's shared state, with no connection open.
    fn empty(cfg: PoolConfig, killer: Killer) -> Result<Arc<Shared>> {
        Ok(Arc::new(Shared {
            killer: Arc::new(killer),
            permits: Permits::new(cfg.size)?,
            idle: Mutex::new(Vec::with_capacity(cfg.size)),
            in_use: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            total_waits: AtomicU64::new(0),
            total_wait_nanos: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            reset_failures: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            cfg,
        }))
    }

    /// How a handler on a fiber gets a connection: waits (FIFO, parking the fiber) up
    /// to `wait_timeout`, and returns the checkout inside a `fiber_pool::Lent`, owned
    /// outside the fiber stack. If the fiber overflows while it holds the connection
    /// (its frames are abandoned, never dropped), the checkout is leaked with them, and
    /// the pool ends its server session (its socket shut down: the server rolls back
    /// whatever was open) and frees its slot, instead of both staying taken (see the
    /// [module documentation](self), "Abandoned checkouts").
    ///
    /// The checkout is never a plain value on the fiber stack: it runs on the carrier
    /// and is written straight into the `Lent`'s cell, registered beforehand. Needs
    /// [`CHECKOUT_STACK_MARGIN`] of stack. Off a fiber the `Lent` is just a box.
    ///
    /// ```no_run
    /// # fn handler(pool: &fiber_mysql::Pool) -> fiber_mysql::Result<()> {
    /// let mut conn = pool.checkout()?;
    /// let name: Option<String> = conn.exec("SELECT name FROM widgets WHERE id = ?", (7,))?.scalar()?;
    /// # Ok(()) }
    /// ```
    pub fn checkout(&self) -> Result<fiber_pool::Lent<PooledConn>> {
        self.checkout_within(self.shared.cfg.wait_timeout)
    }

    /// [`Pool::checkout`] waiting at most `wait` for a connection.
    ///
    /// On a job of `fiber_pool` the checkout follows the job's context
    /// ([`fiber_pool::current`]): its deadline bounds the wait, the connect and every
    /// query (as [`Pool::checkout_until`]'s does), and its cancellation (the request's
    /// client went away) stops the running query with `KILL QUERY`; the connection then
    /// goes back to the pool clean (reset).
    pub fn checkout_within(&self, wait: Duration) -> Result<fiber_pool::Lent<PooledConn>> {
        fiber_pool::check_stack(CHECKOUT_STACK_MARGIN);
        let ctx = fiber_pool::current();
        if let Some(ctx) = &ctx {
            ctx.check().map_err(|reason| match reason {
                fiber_pool::CancelReason::DeadlinePassed => Error::DeadlineExceeded {
                    phase: Phase::CheckoutWait,
                },
                _ => Error::Cancelled,
            })?;
        }
        // The checkout follows the context in the same switch to the carrier that
        // makes it (`follow` registers its hook there).
        let ctx = ctx.as_ref();
        match ctx.and_then(fiber_pool::Context::deadline) {
            Some(deadline) => self.lend(|| self.get_until_or(deadline, wait), ctx),
            None => self.lend(|| self.get_timeout(wait), ctx),
        }
    }

    /// [`Pool::checkout`] for a request that must end by `deadline`: the wait for a
    /// connection ends by then too ([`Error::DeadlineExceeded`] with phase
    /// `CheckoutWait`; still at most `wait_timeout`, which gives
    /// [`Error::PoolTimeout`]), and the checkout carries the deadline for its connect
    /// and its queries ([`PooledConn::set_deadline`]).
    pub fn checkout_until(&self, deadline: Instant) -> Result<fiber_pool::Lent<PooledConn>> {
        fiber_pool::check_stack(CHECKOUT_STACK_MARGIN);
        self.lend(|| self.get_until(deadline), None)
    }

    /// The checkout `get` makes, in a `Lent` whose owner is the checkout's gate, which
    /// notes what ends the server session should an overflow leak the checkout; then
    /// following `ctx`, if any.
    fn lend(
        &self,
        get: impl FnOnce() -> Result<PooledConn> + Send,
        ctx: Option<&fiber_pool::Context>,
    ) -> Result<fiber_pool::Lent<PooledConn>> {
        let owner: Weak<Shared> = Arc::downgrade(&self.shared);
        let owner: Weak<dyn cancel::Owner> = owner;
        let gate = Arc::new(Gate::lent(Arc::clone(&self.shared.killer), owner));
        let kept = Arc::clone(&gate);
        let made = move || {
            get().map(|conn| {
                let mut conn = conn.tracked(kept);
                if let Some(ctx) = ctx {
                    conn.follow(ctx);
                }
                conn
            })
        };
        fiber_pool::Lent::acquire_owned(made, gate)
    }

    /// [`Pool::checkout_until`] as a plain guard (see [`Pool::get`]).
    pub fn get_until(&self, deadline: Instant) -> Result<PooledConn> {
        self.get_until_or(deadline, self.shared.cfg.wait_timeout)
    }

    /// [`Pool::get_until`], waiting at most `wait_timeout` however late `deadline` is.
    fn get_until_or(&self, deadline: Instant, wait_timeout: Duration) -> Result<PooledConn> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.get_timeout(left.min(wait_timeout)) {
            Err(Error::PoolTimeout { .. }) if left < wait_timeout => Err(Error::DeadlineExceeded {
                phase: Phase::CheckoutWait,
            }),
            Err(e) => Err(e),
            Ok(mut conn) => {
                conn.deadline = Some(deadline);
                Ok(conn)
            }
        }
    }

    /// A connection, waiting (FIFO, parking the fiber) up to `wait_timeout`, as a
    /// plain guard. On a fiber of `fiber_pool` use [`Pool::checkout`] instead: a
    /// plain guard on the fiber stack is lost if the fiber overflows.
    pub fn get(&self) -> Result<PooledConn> {
        self.get_timeout(self.shared.cfg.wait_timeout)
    }

    /// Like [`Pool::get`] with an explicit wait limit. On a fiber the whole checkout
    /// (the semaphore wait, the idle list's lock) runs on the carrier's stack
    /// (`fiber_pool::on_carrier`), so no may frame and no pool lock is ever on a fiber.
    pub fn get_timeout(&self, wait: Duration) -> Result<PooledConn> {
        fiber_pool::on_carrier(|| self.get_here(wait))
    }

    fn get_here(&self, wait: Duration) -> Result<PooledConn> {
        let s = &self.shared;
        if !s.permits.try_take() {
            let started = Instant::now();
            s.waiting.fetch_add(1, Ordering::Relaxed);
            let got = s.permits.take_within(wait);
            s.waiting.fetch_sub(1, Ordering::Relaxed);
            let waited = started.elapsed();
            s.total_waits.fetch_add(1, Ordering::Relaxed);
            s.total_wait_nanos
                .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
            if !got {
                s.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err(Error::PoolTimeout { waited });
            }
        }
        s.in_use.fetch_add(1, Ordering::Relaxed);
        // We hold a permit: take a live idle connection if there is one. An empty
        // slot is refilled on first use, inside the guard (see `with`): checkout
        // stays shallow, so a fiber can hand the guard to a `fiber_pool::Lent`
        // before the deep work of a handshake starts.
        let conn = loop {
            match s.idle().pop() {
                Some(conn) if conn.looks_alive() => break Some(conn),
                Some(_dead) => {
                    s.replaced.fetch_add(1, Ordering::Relaxed);
                }
                None => break None,
            }
        };
        Ok(PooledConn {
            conn,
            pool: self.shared.clone(),
            gate: None,
            deadline: None,
            following: None,
        })
    }

    /// Counters for `/stats` and the tests.
    pub fn stats(&self) -> PoolStats {
        let s = &self.shared;
        PoolStats {
            size: s.cfg.size,
            in_use: s.in_use.load(Ordering::Relaxed),
            idle: s.idle().len(),
            waiting: s.waiting.load(Ordering::Relaxed),
            total_waits: s.total_waits.load(Ordering::Relaxed),
            total_wait_time: Duration::from_nanos(s.total_wait_nanos.load(Ordering::Relaxed)),
            timeouts: s.timeouts.load(Ordering::Relaxed),
            replaced: s.replaced.load(Ordering::Relaxed),
            abandoned: s.abandoned.load(Ordering::Relaxed),
            resets: s.resets.load(Ordering::Relaxed),
            reset_failures: s.reset_failures.load(Ordering::Relaxed),
            opened: s.opened.load(Ordering::Relaxed),
            kill_connections: s.killer.kept(),
        }
    }

    /// Readiness: a connection within [`HEALTH_CHECK_WAIT`] answers COM_PING.
    /// (A pool saturated for longer than that also reports `false`.)
    pub fn ping(&self) -> Result<()> {
        self.get_timeout(HEALTH_CHECK_WAIT)?.ping()
    }

    /// `ping().is_ok()`.
    pub fn healthy(&self) -> bool {
        self.ping().is_ok()
    }

    /// The configuration the pool was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.shared.cfg
    }
}

/// Opens `size` connections with bounded parallelism into the idle list.
fn open_all(shared: &Arc<Shared>) -> Result<()> {
    let size = shared.cfg.size;
    let workers = shared.cfg.connect_parallelism.clamp(1, size);
    let next = AtomicUsize::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < size {
                    match shared.open() {
                        Ok(conn) => shared.idle().push(conn),
                        Err(e) => {
                            let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                            slot.get_or_insert(e);
                            next.store(size, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A checked-out connection; goes back to the pool on Drop.
///
/// The connection lives inside this guard for the whole checkout, commands
/// included (nothing is moved to a stack local across a yield), so whoever
/// owns the guard owns the socket. On a fiber get it from [`Pool::checkout`]: the
/// guard then lives in a `fiber_pool::Lent` outside the fiber stack; if the fiber
/// dies without unwinding the guard is leaked and the pool ends its server session
/// and frees its slot ([`Pool::checkout`]).
///
/// What a handler may do with it: run statements ([`PooledConn::query`],
/// [`PooledConn::exec`]), a [`PooledConn::transaction`], bound its waits
/// ([`PooledConn::set_deadline`]), and hand a [`CancelHandle`] to whatever watches
/// the client. Whatever it changes in the session is undone before the next checkout
/// (see [`ResetReason`]); a change that no rule sees needs
/// [`PooledConn::mark_session_dirty`].
pub struct PooledConn {
    /// `None` until first use when the pool had no idle connection (or after
    /// `discard`); opened lazily by `with`.
    conn: Option<Backend>,
    pool: Arc<Shared>,
    /// The checkout's cancellation state: a lent checkout's from the start, else made
    /// on first use (`cancel_handle` or `follow`).
    gate: Option<Arc<Gate>>,
    /// Every wait of this checkout ends by then ([`PooledConn::set_deadline`]).
    deadline: Option<Instant>,
    /// The hook that cancels this checkout when the job's context is cancelled
    /// ([`PooledConn::follow`]); unregistered when the connection goes back.
    following: Option<fiber_pool::Registration>,
}

impl std::fmt::Debug for PooledConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledConn").finish_non_exhaustive()
    }
}

impl PooledConn {
    /// Runs one command: opens the connection if the slot is empty, applies the
    /// checkout's deadline, and marks the command running for a [`CancelHandle`].
    fn with<T>(&mut self, command: impl FnOnce(&mut Backend) -> Result<T>) -> Result<T> {
        self.with_as(false, command)
    }

    /// [`PooledConn::with`]; `pipeline`: the command is `exec_many`'s, which a cancel
    /// stops by killing the whole session (see `Gate::begin_pipeline`).
    fn with_as<T>(
        &mut self,
        pipeline: bool,
        command: impl FnOnce(&mut Backend) -> Result<T>,
    ) -> Result<T> {
        if self.conn.is_none() {
            // A cancelled checkout opens no connection. One that has its connection
            // is refused by the gate's `begin` below, under the same lock.
            if self.gate.as_ref().is_some_and(|g| g.cancelled()) {
                return Err(Error::Cancelled);
            }
            self.open_in_place()?;
        }
        let conn = self.conn.as_mut().ok_or(Error::WorkerGone)?;
        conn.set_deadline(self.deadline);
        let Some(gate) = &self.gate else {
            return command(conn);
        };
        if pipeline {
            gate.begin_pipeline(conn.connection_id(), conn.shutdown_handle())?;
        } else {
            gate.begin(conn.connection_id(), conn.shutdown_handle())?;
        }
        let result = command(conn);
        let ended = gate.end();
        if ended.cut {
            conn.mark_broken();
        }
        // Cancelled while it ran: the KILL either interrupted the statement (an error)
        // or cut it short with a result that is not the statement's (a killed
        // `SLEEP(10)` returns 1 at once), or the command was cut off (cancel.rs), so
        // none is the answer; as in Go's database/sql, the caller gets the
        // cancellation. A failure of another kind (the connection broke) stays what
        // it was.
        match result {
            _ if ended.cut => Err(Error::Cancelled),
            Ok(_) if ended.cancelled => Err(Error::Cancelled),
            // A cancelled pipeline's session was killed: whatever failed, it was that.
            Err(_) if ended.cancelled && pipeline => Err(Error::Cancelled),
            Err(Error::Server { code, .. }) if ended.cancelled && code == ER_QUERY_INTERRUPTED => {
                Err(Error::Cancelled)
            }
            other => other,
        }
    }

    /// Fill an empty slot (first use, or its last connection broke). A native
    /// connection is stored in the guard as soon as its socket exists, before
    /// the handshake: if the holder dies mid-handshake (a fiber abandoned by a
    /// stack overflow), the socket is still owned here and closed by `discard`.
    fn open_in_place(&mut self) -> Result<()> {
        let pool = Arc::clone(&self.pool);
        let result = match self.deadline {
            None => self.open_with(&pool, &pool.cfg.opts),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::DeadlineExceeded {
                        phase: Phase::Connect,
                    });
                }
                let mut opts = pool.cfg.opts.clone();
                let bounded = left < opts.connect_timeout;
                opts.connect_timeout = opts.connect_timeout.min(left);
                match self.open_with(&pool, &opts) {
                    Err(Error::ConnectTimeout) if bounded => Err(Error::DeadlineExceeded {
                        phase: Phase::Connect,
                    }),
                    other => other,
                }
            }
        };
        result?;
        if let Some(conn) = self.conn.as_mut() {
            conn.attach(&pool.killer);
        }
        pool.opened.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `make` on the carrier's stack and stores the connection in the slot and
    /// notes its session in the gate there, in one go: as a plain value on a fiber, a
    /// new connection could be abandoned by an overflow before either, its socket and
    /// its server-side session then never ended.
    fn store_made(&mut self, make: impl FnOnce() -> Result<Backend> + Send) -> Result<()> {
        let (slot, gate) = (&mut self.conn, &self.gate);
        fiber_pool::on_carrier(|| -> Result<()> {
            *slot = Some(make()?);
            if let Some(gate) = gate {
                note_session(gate, slot.as_ref());
            }
            Ok(())
        })
    }

    fn open_with(&mut self, pool: &Shared, opts: &Opts) -> Result<()> {
        match pool.cfg.driver {
            Driver::Native => {
                // The socket only: the handshake, deep work, runs on the fiber below,
                // with the connection already where `discard` finds it (tests/stack.rs's
                // sweep caught an fd and a server-side connection stuck in its
                // handshake when it was not).
                self.store_made(|| Ok(Backend::Native(Box::new(Conn::open_socket(opts)?))))?;
                let Some(Backend::Native(conn)) = self.conn.as_mut() else {
                    unreachable!("just stored a native connection")
                };
                if let Err(e) = conn.finish_connect() {
                    self.conn = None;
                    if let Some(gate) = &self.gate {
                        note_session(gate, None);
                    }
                    return Err(e);
                }
            }
            // The handshake runs on the connection's own thread; the carrier waits on
            // a channel.
            #[cfg(feature = "threads")]
            Driver::Threads => {
                self.store_made(|| Ok(Backend::Threads(Box::new(ThreadConn::connect(opts)?))))?;
            }
        }
        Ok(())
    }

    /// See [`Conn::query`].
    pub fn query(&mut self, sql: &str) -> Result<QueryResult> {
        self.with(|c| c.query(sql))
    }

    /// See [`Conn::exec`].
    pub fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        let params = params.into();
        self.with(|c| c.exec(sql, params))
    }

    /// See [`Conn::exec_many`]: the executions pipelined, one cancellation and
    /// deadline for them all.
    pub fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>> {
        let params: Vec<Params> = params.into_iter().map(Into::into).collect();
        self.with_as(true, |c| c.exec_many(sql, params))
    }

    /// COM_PING.
    pub fn ping(&mut self) -> Result<()> {
        self.with(|c| c.ping())
    }

    /// A handle that cancels this checkout's running and later commands from another
    /// coroutine or thread (see [`CancelHandle`]; the guarantees are in `cancel.rs`).
    pub fn cancel_handle(&mut self) -> CancelHandle {
        CancelHandle::new(Arc::clone(self.gate()))
    }

    /// This checkout's cancellation state: a lent checkout's, or one made on first use.
    fn gate(&mut self) -> &Arc<Gate> {
        let killer = &self.pool.killer;
        self.gate
            .get_or_insert_with(|| Arc::new(Gate::new(Arc::clone(killer))))
    }

    /// Cancel this checkout's running and later commands when `ctx` is cancelled (a
    /// request's client went away, or its deadline passed), and end its waits by
    /// `ctx`'s deadline. [`Pool::checkout`] does it for the job it runs in. The kill
    /// itself (`KILL QUERY` over the pool's side channel) runs on a thread of its own:
    /// a context's hooks must not block. The checkout's cancellation state is the
    /// hook, so the registration allocates nothing for it.
    pub fn follow(&mut self, ctx: &fiber_pool::Context) {
        if let Some(deadline) = ctx.deadline() {
            self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
        }
        let gate = Arc::clone(self.gate());
        self.following = Some(ctx.on_cancel_shared(gate));
    }

    /// Every later wait of this checkout ends by `deadline` (`None`: no deadline):
    /// opening its connection ([`Error::DeadlineExceeded`] with phase `Connect`) and
    /// each query (phase `Query`; a running query is stopped with `KILL QUERY` and the
    /// connection stays usable). [`Pool::checkout_until`] sets it at checkout.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// The deadline set by [`PooledConn::set_deadline`] or [`Pool::checkout_until`].
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Why this connection will be reset when it goes back to the pool, if it will
    /// (see [`ResetReason`]); `None` also before its first command.
    pub fn reset_reason(&self) -> Option<ResetReason> {
        self.conn.as_ref().and_then(Backend::reset_reason)
    }

    /// Makes the give-back reset this connection: for session changes that neither the
    /// server reports nor the statement rules see (`session.rs`), e.g. a stored
    /// function, called from a plain `SELECT`, that takes a named lock.
    pub fn mark_session_dirty(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            conn.mark_session_dirty();
        }
    }

    /// The server's connection id (for `KILL`, `SHOW PROCESSLIST`).
    pub fn connection_id(&self) -> Option<u32> {
        self.conn.as_ref().map(Backend::connection_id)
    }

    /// Makes `gate`, a lent checkout's, this checkout's, with its session noted.
    fn tracked(mut self, gate: Arc<Gate>) -> PooledConn {
        debug_assert!(self.gate.is_none(), "a checkout is lent before it follows");
        note_session(&gate, self.conn.as_ref());
        self.gate = Some(gate);
        self
    }

    /// Close the connection instead of returning it (its stream may be in the
    /// middle of a command) and give the slot back, to be refilled by the next
    /// checkout. For a holder that knows the connection's state is lost (a command
    /// it gave up on half-way).
    pub fn discard(mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.mark_broken();
            drop(conn);
        }
        self.pool.abandoned.fetch_add(1, Ordering::Relaxed);
        // Drop runs next and gives the permit back with no connection (and closes the
        // gate, with nothing to wait for: the connection is gone).
    }
}

/// Notes in `gate` what ends `conn`'s session (`None`: the checkout has no connection).
fn note_session(gate: &Gate, conn: Option<&Backend>) {
    gate.note_session(
        conn.and_then(Backend::shutdown_handle),
        conn.map_or(0, Backend::connection_id),
    );
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        self.pool.give_back(self.conn.take(), self.gate.take());
    }
}
