//! Starting the whole demo in-process: fibers, MySQL (private or external), the schema,
//! the listener (bound here, or inherited from a supervisor or systemd) and the server. The binary and the integration tests both call
//! [`start`], so what the tests prove is what `fiberstack serve` runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fiber_mysql::launcher::MariaDb;
use fiber_pool::FiberPool;

use crate::app::{self, AppState};
use crate::config::{ByteSize, ServeConfig};
use crate::setup::{bound, fail, fiber_mysql_pool, own_address, own_urls, StartError};
use fiber_web::counters::HttpStats;
use fiber_web::http::client::HttpClient;
use fiber_web::http::listener;
use fiber_web::server::{self, App, RouteLimits, Server};
use fiber_web::shutdown::Drained;
use fiber_web::supervisor;
use fiber_web::watchdog::{self, ReplaceHook, Watchdog};

/// A running demo.
pub struct Running {
    pub server: Server,
    pub state: Arc<AppState>,
    /// The private MariaDB, when no database URL was given; stopped on drop.
    pub mariadb: Option<MariaDb>,
    /// Where MySQL is, for the start-up line (password redacted).
    pub db_where: String,
    /// The stall watchdog; stopped on drop.
    pub watchdog: Watchdog,
}

/// Start everything `cfg` describes, with a stall watchdog whose replacement requests
/// go to the supervisor ([`supervisor::ask_for_replacement`]: without one, it logs that
/// this process should be replaced and carries on); see [`start_with`].
pub fn start(cfg: &ServeConfig) -> Result<Running, StartError> {
    start_with(cfg, Box::new(supervisor::ask_for_replacement))
}

/// Start everything `cfg` describes; the stall watchdog calls `replace` with the reason
/// when this process should be replaced (see [`fiber_web::watchdog`]). Set may's worker
/// count and coroutine cache first: may reads them once, when the first coroutine starts.
pub fn start_with(cfg: &ServeConfig, replace: ReplaceHook) -> Result<Running, StartError> {
    may::config()
        .set_workers(cfg.workers)
        .set_pool_capacity(crate::config::COROUTINE_CACHE);
    let fibers = FiberPool::new(fiber_pool::PoolConfig {
        size: cfg.fibers,
        stack_size: cfg.stack_size,
        queue: cfg.queue,
        wait_timeout: Some(cfg.fiber_wait_timeout),
        ..fiber_pool::PoolConfig::default()
    })
    .map_err(|e| fail(format!("bad --fibers, --stack-size or --queue: {e}")))?;

    let (db, mariadb, db_where) = fiber_mysql_pool(cfg)?;

    let listener = match supervisor::take_listener().map_err(|e| fail(e.to_string()))? {
        // A worker's, or systemd's socket activation: the socket is bound already.
        Some(inherited) => listener::adopt(inherited),
        None => listener::bind_with_backlog(cfg.bind, cfg.http.listen_backlog).map(Into::into),
    }
    .map_err(|e| fail(e.to_string()))?;
    let addr = bound(listener.socket.local_addr())?;
    let (self_widgets, upstream) = own_urls(cfg, addr)?;
    let http_stats = Arc::new(HttpStats::new(app::route_labels(), cfg.access_log));
    let state = Arc::new(AppState {
        db,
        http: HttpClient::new(cfg.client.clone()),
        self_widgets,
        upstream,
        fibers: fibers.clone(),
        http_stats: Arc::clone(&http_stats),
    });
    let limits = RouteLimits::default().limit(
        "widgets_http",
        cfg.self_call_limit(),
        cfg.fiber_wait_timeout,
        "it calls back into this server, so the other fibers stay free for those calls",
    );
    let limits = app::CARRIER_ROUTES
        .iter()
        .fold(limits, |limits, label| limits.on_carrier(label));
    let service = Arc::new(App {
        router: app::router(),
        state: Arc::clone(&state),
        fibers,
        limits,
        stats: Arc::clone(&http_stats),
    });
    let watchdog = watchdog::spawn(cfg.watchdog, replace)
        .map_err(|e| fail(format!("cannot start the stall watchdog: {e}")))?;
    let server = server::spawn(listener, service, cfg.http.clone(), http_stats)
        .map_err(|e| fail(format!("cannot start the server: {e}")))?;
    Ok(Running {
        server,
        state,
        mariadb,
        db_where,
        watchdog,
    })
}

impl Running {
    /// The address clients use.
    pub fn addr(&self) -> SocketAddr {
        own_address(self.server.addr())
    }

    /// The one start-up line: effective settings and where MySQL is.
    pub fn banner(&self, cfg: &ServeConfig) -> String {
        format!(
            "fiberstack: listening on http://{} | runtime fibers, {} fibers x {} stack, queue {}, \
             {} may workers | MySQL: {} pool of {} via {}",
            self.addr(),
            cfg.fibers,
            ByteSize(cfg.stack_size),
            cfg.queue,
            cfg.workers,
            cfg.db_driver,
            cfg.db_pool,
            self.db_where,
        )
    }

    /// Stop accepting, finish in-flight requests for up to `grace`, close the MySQL
    /// pool and stop the private MariaDB.
    pub fn shutdown(self, grace: Duration) -> Drained {
        let drained = self.server.shutdown(grace);
        drop(self.watchdog);
        drop(self.state);
        drop(self.mariadb);
        drained
    }
}
