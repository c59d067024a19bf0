//! Starting the whole demo in-process on the framework: MySQL (private or external),
//! the schema, then `fiber_web::start` with the demo's app (the fiber pool, the
//! listener, bound here or inherited from a supervisor or systemd, the watchdog and the
//! server). The binary and the integration tests both call [`start`], so what the
//! tests prove is what `fiberstack serve` runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fiber_mysql::launcher::MariaDb;
use fiber_web::shutdown::Drained;
use fiber_web::watchdog::ReplaceHook;
use fiber_web::{supervisor, Serving};

use crate::app::{self, AppState};
use crate::config::{ByteSize, ServeConfig};
use crate::error::Error;
use crate::setup::{bound, fiber_mysql_pool, own_urls};
use fiber_web::http::client::HttpClient;

/// A running demo.
pub struct Running {
    /// The server, its fibers and counters, and the watchdog (stopped on drop).
    pub serving: Serving,
    pub state: Arc<AppState>,
    /// The private MariaDB, when no database URL was given; stopped on drop.
    pub mariadb: Option<MariaDb>,
    /// Where MySQL is, for the start-up line (password redacted).
    pub db_where: String,
}

/// Start everything `cfg` describes, with a stall watchdog whose replacement requests
/// go to the supervisor ([`supervisor::ask_for_replacement`]: without one, it logs that
/// this process should be replaced and carries on); see [`start_with`].
pub fn start(cfg: &ServeConfig) -> Result<Running, Error> {
    start_with(cfg, Box::new(supervisor::ask_for_replacement))
}

/// Start everything `cfg` describes; the stall watchdog calls `replace` with the reason
/// when this process should be replaced (see `fiber_web::watchdog`).
pub fn start_with(cfg: &ServeConfig, replace: ReplaceHook) -> Result<Running, Error> {
    let mut started: Option<(Arc<AppState>, Option<MariaDb>, String)> = None;
    let serving = fiber_web::start(&cfg.web, replace, |on| {
        let addr = bound(Ok(on.bound_addr()))?;
        let (db, mariadb, db_where) = fiber_mysql_pool(cfg)?;
        let (self_widgets, upstream) = own_urls(cfg, addr)?;
        let state = Arc::new(AppState {
            db,
            http: HttpClient::new(cfg.client.clone()),
            self_widgets,
            upstream,
            fibers: on.fibers().clone(),
            http_stats: Arc::clone(on.stats()),
        });
        started = Some((Arc::clone(&state), mariadb, db_where));
        Ok::<_, Error>(app::app(state, cfg.self_call_limit(), cfg.web.fiber_wait))
    })
    .map_err(Error::from)?;
    // fiber_web::start returns only once the builder ran and succeeded.
    let Some((state, mariadb, db_where)) = started else {
        unreachable!("fiber_web::start returned Ok without building the app");
    };
    Ok(Running {
        serving,
        state,
        mariadb,
        db_where,
    })
}

impl Running {
    /// The address clients use.
    pub fn addr(&self) -> SocketAddr {
        self.serving.addr()
    }

    /// The server: its shutdown state (connections and requests in flight).
    pub fn server(&self) -> &fiber_web::server::Server {
        self.serving.server()
    }

    /// The one start-up line: effective settings and where MySQL is.
    pub fn banner(&self, cfg: &ServeConfig) -> String {
        format!(
            "fiberstack: listening on http://{} | runtime fibers, {} fibers x {} stack, queue {}, \
             {} may workers | MySQL: {} pool of {} via {}",
            self.addr(),
            cfg.web.fibers,
            ByteSize(cfg.web.stack_size),
            cfg.web.queue,
            cfg.web.workers,
            cfg.db_driver,
            cfg.db_pool,
            self.db_where,
        )
    }

    /// Stop accepting, finish in-flight requests for up to `grace`, close the MySQL
    /// pool and stop the private MariaDB.
    pub fn shutdown(self, grace: Duration) -> Drained {
        let drained = self.serving.shutdown(grace);
        drop(self.state);
        drop(self.mariadb);
        drained
    }
}
