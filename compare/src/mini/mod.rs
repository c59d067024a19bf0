//! `compare serve --runtime minihttp`: the raw baseline the bench measures the fiber
//! server against. Stock may_minihttp 0.1.11 on plain may coroutines: no fiber pool, no
//! guard pages of ours, no HTTP care. What it costs is what raw may costs; what it gets
//! wrong is why fiber_web owns its HTTP layer (see `fiber_web/src/http/mod.rs`, and
//! `compare/tests/minihttp.rs`, which provokes each defect on the real crate).
//!
//! Routes (`service.rs`): `/hello`, `/widgets[?sleep=S]` (fiber_mysql straight on the
//! connection's coroutine), `/stats` (what the bench reads) and `/deep` (recursion on
//! the coroutine's own may stack: an overflow kills the whole process).

pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;

use fiber_mysql::launcher::MariaDb;
use may_minihttp::HttpServer;

use fiberstack::config::{ByteSize, ServeConfig};
use fiberstack::error::Error;
use fiberstack::setup::{bound, fiber_mysql_pool, own_address};

pub use service::{MiniService, MiniState};

/// The listen backlog may 0.3.51's `TcpListener::bind` fixes (`listener.listen(1024)`
/// in its `net/tcp.rs`), which may_minihttp uses with no way to change it: loads that
/// open more connections at once than this wait for SYN retries.
pub const LISTEN_BACKLOG: usize = 1024;

/// A running minihttp server. There is no graceful shutdown: may_minihttp's accept
/// loop and connections live until the process exits.
pub struct Running {
    pub addr: SocketAddr,
    pub state: Arc<MiniState>,
    /// The private MariaDB, when no database URL was given; stopped on drop.
    pub mariadb: Option<MariaDb>,
    /// Where MySQL is, for the start-up line (password redacted).
    pub db_where: String,
    /// The accept loop's coroutine (may_minihttp offers no safe way to stop it).
    _accept: may::coroutine::JoinHandle<()>,
}

/// The flags of `cfg` this runtime cannot honour, each with the reason: those set to
/// something other than their default (a default is ignored silently too, but nobody
/// asked for it).
pub fn ignored_flags(cfg: &ServeConfig) -> Vec<String> {
    let d = ServeConfig::default();
    let no_pool = "there is no fiber pool";
    [
        (
            cfg.web.stack_size != d.web.stack_size,
            "stack-size",
            "handlers run on the connection's may coroutine, whose stack is may's default",
        ),
        (
            cfg.web.fibers != d.web.fibers,
            "fibers",
            "there is no fiber pool: every connection runs its handler at once",
        ),
        (cfg.web.queue != d.web.queue, "queue", no_pool),
        (
            cfg.web.fiber_wait != d.web.fiber_wait,
            "fiber-wait",
            no_pool,
        ),
        (
            cfg.self_call_limit.is_some(),
            "self-call-limit",
            "there is no /widgets/http route",
        ),
        (
            cfg.upstream.is_some(),
            "upstream",
            "there is no /twitter route",
        ),
        (
            cfg.web.http.max_connections != d.web.http.max_connections,
            "max-connections",
            "may_minihttp accepts every connection",
        ),
        (
            cfg.web.shutdown_grace != d.web.shutdown_grace,
            "shutdown-grace",
            "may_minihttp has no graceful shutdown",
        ),
    ]
    .into_iter()
    .filter(|(set, _, _)| *set)
    .map(|(_, flag, why)| format!("--{flag} ignored: {why}"))
    .collect()
}

/// Start MySQL (private or external), the schema and may_minihttp on `cfg.web.bind`.
pub fn start(cfg: &ServeConfig) -> Result<Running, Error> {
    may::config().set_workers(cfg.web.threads);
    let (db, mariadb, db_where) = fiber_mysql_pool(cfg)?;
    let state = Arc::new(MiniState::new(db, cfg.db_wait_timeout));
    let (addr, accept) = listen(cfg.web.bind, MiniService::new(Arc::clone(&state)))?;
    Ok(Running {
        addr,
        state,
        mariadb,
        db_where,
        _accept: accept,
    })
}

/// may_minihttp binds its own listener and does not say where: for port 0, a free port
/// is first reserved by a bound, not listening, socket with SO_REUSEPORT (which may's
/// bind also sets, so both may hold it), and released once the server listens there.
/// A bound socket that never listens receives no connections.
pub(crate) fn listen<S>(
    bind: SocketAddr,
    service: S,
) -> Result<(SocketAddr, may::coroutine::JoinHandle<()>), Error>
where
    S: may_minihttp::HttpService + Clone + Send + Sync + 'static,
{
    use socket2::{Domain, Socket, Type};
    let reserve = Socket::new(Domain::for_address(bind), Type::STREAM, None)
        .and_then(|s| {
            s.set_reuse_address(true)?;
            s.set_reuse_port(true)?;
            s.bind(&bind.into())?;
            Ok(s)
        })
        .map_err(|e| Error::io(format!("bind {bind} (--bind)"), e))?;
    let addr = bound(
        reserve
            .local_addr()
            .and_then(|a| a.as_socket().ok_or(std::io::ErrorKind::Unsupported.into())),
    )?;
    let accept = HttpServer(service)
        .start(addr)
        .map_err(|e| Error::io(format!("start may_minihttp on {addr}"), e))?;
    drop(reserve);
    Ok((own_address(addr), accept))
}

impl Running {
    /// The one start-up line, in the shape the bench reads.
    pub fn banner(&self, cfg: &ServeConfig) -> String {
        format!(
            "fiberstack: listening on http://{} | runtime minihttp (stock may_minihttp 0.1.11: \
             no fiber pool, no guard pages, no HTTP care), {} may threads x {} coroutine stack \
             | MySQL: {} pool of {} via {}",
            self.addr,
            cfg.web.threads,
            ByteSize(may::config().get_stack_size() * std::mem::size_of::<usize>()),
            cfg.db_driver,
            cfg.db_pool,
            self.db_where,
        )
    }

    /// Close the MySQL pool and stop the private MariaDB; open connections are cut when
    /// the process exits (may_minihttp has no graceful shutdown).
    pub fn shutdown(self) {
        drop(self.state);
        drop(self.mariadb);
    }
}
