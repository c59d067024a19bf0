//! The demo on the framework: [`serve`] is `fiberstack serve` (fiber_web's one-call
//! serve, with the private MariaDB the workers share started beside them), and
//! [`start`] the same app started in this process and returned at once (MySQL, private
//! or external, the schema, then `fiber_web::start`), for the tests and the tools. Both
//! build the app with [`build`], so what the tests prove is what `fiberstack serve`
//! runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fiber_mysql::launcher::{LaunchConfig, MariaDb, CONNECTION_HEADROOM};
use fiber_web::client::HttpClient;
use fiber_web::{worker, App, Beside, Drained, Options, Serving, Started};

use crate::app::{self, AppState};
use crate::config::{ByteSize, ServeConfig};
use crate::error::{DbStep, Error};
use crate::setup::{bound, db_failed, fiber_mysql_pool, own_urls, BESIDE_MARIADB_VAR};

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
/// go to the supervisor ([`worker::ask_for_replacement`]: without one, it logs that
/// this process should be replaced and carries on); see [`start_with`].
pub fn start(cfg: &ServeConfig) -> Result<Running, Error> {
    start_with(cfg, worker::ask_for_replacement)
}

/// Start everything `cfg` describes; the stall watchdog calls `replace` with the reason
/// when this process should be replaced (see [`fiber_web::start`]).
pub fn start_with(
    cfg: &ServeConfig,
    replace: impl Fn(&str) + Send + 'static,
) -> Result<Running, Error> {
    let mut started: Option<(Arc<AppState>, Option<MariaDb>, String)> = None;
    let serving = fiber_web::start(&cfg.web, replace, |on| {
        let (app, state, mariadb, db_where) = build(cfg, on)?;
        started = Some((state, mariadb, db_where));
        Ok::<_, Error>(app)
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

/// The demo's app on the server `on` describes: its MySQL pool (on `cfg`'s server, or a
/// private MariaDB started here when `cfg` names none), the schema, the HTTP client and
/// the routes. Also the state, the private MariaDB if one was started, and where MySQL
/// is (for the start-up line).
#[allow(clippy::type_complexity)]
pub fn build(
    cfg: &ServeConfig,
    on: &Started,
) -> Result<(App<AppState>, Arc<AppState>, Option<MariaDb>, String), Error> {
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
    let app = app::app(
        Arc::clone(&state),
        cfg.self_call_limit(),
        cfg.web.fiber_wait,
    );
    Ok((app, state, mariadb, db_where))
}

/// `fiberstack serve`: the demo through fiber_web's one-call serve (logging, the
/// supervisor, the watchdog, signals, drain), until SIGTERM or Ctrl-C. Without
/// `--database-url`, one private MariaDB is started beside the workers (sized for every
/// worker's pool and one replacement's) and stopped after the last.
pub fn serve(cfg: ServeConfig) -> Result<(), Error> {
    let web = cfg.web.clone();
    fiber_web::serve_with(
        web,
        |options| beside(&cfg, options),
        |on| {
            let mut cfg = cfg.clone();
            // The private MariaDB started beside the workers: in this process, or (in a
            // worker) by the supervisor, which passed its URL as DATABASE_URL.
            if cfg.database_url.is_none() {
                cfg.database_url = on.var("DATABASE_URL");
            }
            cfg.beside_mariadb = on.var(BESIDE_MARIADB_VAR);
            let (app, _, _, db_where) = build(&cfg, on)?;
            on.note(format!(
                "MySQL: {} pool of {} via {db_where}",
                cfg.db_driver, cfg.db_pool
            ));
            Ok::<_, Error>(app)
        },
    )
    .map_err(Error::from)
}

/// The private MariaDB the workers share, when `cfg` names no server: its URL and pid go
/// to them, and it stops when the app has stopped.
fn beside(cfg: &ServeConfig, options: &Options) -> Result<Beside, Error> {
    if cfg.database_url.is_some() {
        return Ok(Beside::new());
    }
    // Every worker's pool, and one replacement's while it starts beside the old one.
    let pools = match options.supervise {
        true => cfg.db_pool * (options.processes + 1),
        false => cfg.db_pool,
    };
    let db = MariaDb::start(LaunchConfig {
        max_connections: pools + CONNECTION_HEADROOM,
        mariadbd: cfg.mariadbd.clone(),
        ..LaunchConfig::default()
    })
    .map_err(db_failed(DbStep::PrivateServer))?;
    let mut beside = Beside::new()
        .var("DATABASE_URL", db.url())
        .var(BESIDE_MARIADB_VAR, db.pid().to_string());
    if options.supervise {
        beside = beside.note(format!(
            "MySQL: private MariaDB at {} (pid {})",
            db.opts().url_redacted(),
            db.pid()
        ));
    }
    Ok(beside.keep(StoppedLast(db)))
}

/// The private MariaDB beside the workers, stopped (and said so) when the app has
/// stopped: after every worker has exited.
struct StoppedLast(MariaDb);

impl Drop for StoppedLast {
    fn drop(&mut self) {
        log::info!(
            target: crate::config::APP_NAME,
            "every worker has exited; stopping MariaDB (pid {})",
            self.0.pid()
        );
    }
}

impl Running {
    /// The address clients use.
    pub fn addr(&self) -> SocketAddr {
        self.serving.addr()
    }

    /// Client connections open now.
    pub fn connections(&self) -> usize {
        self.serving.connections()
    }

    /// The one start-up line: effective settings and where MySQL is.
    pub fn banner(&self, cfg: &ServeConfig) -> String {
        format!(
            "fiberstack: listening on http://{} | runtime fibers, {} fibers x {} stack, queue {}, \
             {} threads | MySQL: {} pool of {} via {}",
            self.addr(),
            cfg.web.fibers,
            ByteSize(cfg.web.stack_size),
            cfg.web.queue,
            cfg.web.threads,
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
