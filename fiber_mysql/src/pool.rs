//! The pool: `size` connections opened in parallel at start, handed to
//! fibers in FIFO order, returned by a guard's Drop.
//!
//! ## Waiting
//! A `may::sync::Semphore` with `size` permits is the throttle. Its waiters
//! queue in a FIFO list and park their fiber (never the worker thread, unlike
//! a std `Condvar`); `wait_timeout` gives [`Error::PoolTimeout`]. The idle
//! connections themselves sit in a short-held std `Mutex<Vec>` (never held
//! across a yield). The newest idle connection is handed out first.
//!
//! ## Replacing
//! A connection whose command failed at the I/O or protocol level is closed
//! on return, and its slot is refilled lazily by the next checkout, which
//! opens a new connection (so a server outage costs no reconnect storm).
//! Before an idle native connection is handed out, a non-blocking peek checks
//! that the server has not closed it (e.g. after a restart): dead ones are
//! replaced at once, so the first query after a restart does not fail.
//!
//! ## Abandoned checkouts
//! A fiber that dies without unwinding (stack overflow caught by a trap
//! handler) never runs `PooledConn`'s Drop. [`PooledConn::abandon_hook`]
//! gives a `Send + 'static` handle that returns the slot to the pool from
//! elsewhere. HOOK: wire it to `fiber_pool::Lent::new(conn, on_abandon)`.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use may::sync::Semphore;
use mysql_common::params::Params;

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::opts::Opts;
use crate::query::QueryResult;
use crate::threads::ThreadConn;

/// Connections kept free on the server beyond the pool (for `KILL QUERY`).
pub const KILL_HEADROOM: usize = 1;
/// How long [`Pool::healthy`] waits for a connection before saying no.
pub const HEALTH_CHECK_WAIT: Duration = Duration::from_secs(1);

/// Which client runs the queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Driver {
    /// Our may-native client: a waiting query parks only its fiber.
    #[default]
    Native,
    /// The `mysql` crate, one OS thread per connection (for comparison).
    Threads,
}

impl FromStr for Driver {
    type Err = Error;
    fn from_str(s: &str) -> Result<Driver> {
        match s {
            "native" => Ok(Driver::Native),
            "threads" => Ok(Driver::Threads),
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

impl PoolConfig {
    /// `size` native connections, 5 s wait timeout, 32 parallel opens.
    pub fn new(opts: Opts, size: usize) -> PoolConfig {
        PoolConfig {
            opts,
            size,
            wait_timeout: Duration::from_secs(5),
            driver: Driver::Native,
            connect_parallelism: 32,
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
    /// Checkouts reclaimed through [`AbandonHook::reclaim`].
    pub abandoned: u64,
    /// Connections opened since start.
    pub opened: u64,
}

/// One connection of either driver.
// Moved only at checkout and per command; boxing would cost an allocation per connection for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Backend {
    Native(Conn),
    Threads(ThreadConn),
}

impl Backend {
    fn open(driver: Driver, opts: &Opts) -> Result<Backend> {
        match driver {
            Driver::Native => Conn::connect(opts).map(Backend::Native),
            Driver::Threads => ThreadConn::connect(opts).map(Backend::Threads),
        }
    }

    fn is_broken(&self) -> bool {
        match self {
            Backend::Native(c) => c.is_broken(),
            Backend::Threads(c) => c.is_broken(),
        }
    }

    fn looks_alive(&self) -> bool {
        match self {
            Backend::Native(c) => c.looks_alive(),
            // The mysql crate hides its socket: a dead one fails its next query.
            Backend::Threads(c) => !c.is_broken(),
        }
    }
}

struct Shared {
    cfg: PoolConfig,
    permits: Semphore,
    idle: Mutex<Vec<Backend>>,
    in_use: AtomicUsize,
    waiting: AtomicUsize,
    total_waits: AtomicU64,
    total_wait_nanos: AtomicU64,
    timeouts: AtomicU64,
    replaced: AtomicU64,
    abandoned: AtomicU64,
    opened: AtomicU64,
}

impl Shared {
    fn open(&self) -> Result<Backend> {
        let conn = Backend::open(self.cfg.driver, &self.cfg.opts)?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(conn)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Backend>> {
        // Nothing panics while holding this lock, so poisoning cannot happen;
        // recover the data anyway rather than propagate a panic.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives a checkout's permit back, with its connection if still good.
    fn give_back(&self, conn: Option<Backend>) {
        match conn {
            Some(conn) if !conn.is_broken() => self.idle().push(conn),
            Some(_broken) => {
                self.replaced.fetch_add(1, Ordering::Relaxed);
            }
            // Abandoned mid-query: the connection is lost with the fiber.
            None => {
                self.replaced.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.in_use.fetch_sub(1, Ordering::Relaxed);
        self.permits.post();
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
        drop(probe);
        if cfg.size + KILL_HEADROOM > max_connections {
            return Err(Error::PoolTooBig {
                pool: cfg.size,
                max_connections,
            });
        }
        let shared = Arc::new(Shared {
            permits: Semphore::new(cfg.size),
            idle: Mutex::new(Vec::with_capacity(cfg.size)),
            in_use: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            total_waits: AtomicU64::new(0),
            total_wait_nanos: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            cfg,
        });
        open_all(&shared)?;
        Ok(Pool { shared })
    }

    /// A connection, waiting (FIFO, parking the fiber) up to `wait_timeout`.
    pub fn get(&self) -> Result<PooledConn> {
        self.get_timeout(self.shared.cfg.wait_timeout)
    }

    /// Like [`Pool::get`] with an explicit wait limit.
    pub fn get_timeout(&self, wait: Duration) -> Result<PooledConn> {
        let s = &self.shared;
        if !s.permits.try_wait() {
            let started = Instant::now();
            s.waiting.fetch_add(1, Ordering::Relaxed);
            let got = s.permits.wait_timeout(wait);
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
        // We hold a permit: take an idle connection or refill an empty slot.
        let conn = loop {
            let candidate = s.idle().pop();
            match candidate {
                Some(conn) if conn.looks_alive() => break conn,
                Some(_dead) => {
                    s.replaced.fetch_add(1, Ordering::Relaxed);
                }
                None => match s.open() {
                    Ok(conn) => break conn,
                    Err(e) => {
                        s.in_use.fetch_sub(1, Ordering::Relaxed);
                        s.permits.post();
                        return Err(e);
                    }
                },
            }
        };
        Ok(PooledConn {
            slot: Arc::new(Slot {
                conn: Mutex::new(Some(conn)),
                returned: AtomicBool::new(false),
                pool: self.shared.clone(),
            }),
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
            opened: s.opened.load(Ordering::Relaxed),
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

/// The checkout state shared by a [`PooledConn`] and its [`AbandonHook`]s.
struct Slot {
    /// The connection; `None` while a command runs on it (taken out so that
    /// no lock is held across a yield) or after it was given back.
    conn: Mutex<Option<Backend>>,
    /// Set once the permit went back to the pool (by Drop or by reclaim).
    returned: AtomicBool,
    pool: Arc<Shared>,
}

impl Slot {
    fn take(&self) -> Option<Backend> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn put(&self, conn: Backend) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn);
    }
}

/// A checked-out connection; goes back to the pool on Drop.
pub struct PooledConn {
    slot: Arc<Slot>,
}

impl std::fmt::Debug for PooledConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledConn").finish_non_exhaustive()
    }
}

impl PooledConn {
    fn with<T>(
        &mut self,
        native: impl FnOnce(&mut Conn) -> Result<T>,
        threads: impl FnOnce(&mut ThreadConn) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.slot.take().ok_or(Error::WorkerGone)?;
        let result = match &mut conn {
            Backend::Native(c) => native(c),
            Backend::Threads(c) => threads(c),
        };
        self.slot.put(conn);
        result
    }

    /// See [`Conn::query`].
    pub fn query(&mut self, sql: &str) -> Result<QueryResult> {
        self.with(|c| c.query(sql), |c| c.query(sql))
    }

    /// See [`Conn::exec`].
    pub fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        let params = params.into();
        let copy = params.clone();
        self.with(|c| c.exec(sql, params), |c| c.exec(sql, copy))
    }

    /// COM_PING.
    pub fn ping(&mut self) -> Result<()> {
        self.with(|c| c.ping(), |c| c.ping())
    }

    /// The server's connection id (for `KILL`, `SHOW PROCESSLIST`).
    pub fn connection_id(&self) -> Option<u32> {
        let guard = self.slot.conn.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map(|c| match c {
            Backend::Native(c) => c.connection_id(),
            Backend::Threads(c) => c.connection_id(),
        })
    }

    /// HOOK for fiber_pool: a handle that gives this checkout back to the
    /// pool if the fiber holding it dies without running Drop, e.g.
    /// `let hook = conn.abandon_hook(); fiber_pool::Lent::new(conn, move || hook.reclaim())`.
    pub fn abandon_hook(&self) -> AbandonHook {
        AbandonHook {
            slot: self.slot.clone(),
        }
    }
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        if !self.slot.returned.swap(true, Ordering::AcqRel) {
            let conn = self.slot.take();
            self.slot.pool.give_back(conn);
        }
    }
}

/// Returns an abandoned checkout's slot to the pool; see [`PooledConn::abandon_hook`].
#[derive(Clone)]
pub struct AbandonHook {
    slot: Arc<Slot>,
}

impl AbandonHook {
    /// Gives the slot back, closing the connection (its stream may be in the
    /// middle of a command). Does nothing if the checkout was already returned.
    pub fn reclaim(&self) {
        if !self.slot.returned.swap(true, Ordering::AcqRel) {
            // The stream may be in the middle of a command: close, never reuse.
            if let Some(mut conn) = self.slot.take() {
                if let Backend::Native(c) = &mut conn {
                    c.mark_broken();
                }
                drop(conn);
            }
            self.slot.pool.abandoned.fetch_add(1, Ordering::Relaxed);
            self.slot.pool.give_back(None);
        }
    }
}
