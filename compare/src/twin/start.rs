//! Starting the async twin in-process: the tokio runtime, MySQL (private or external),
//! the schema, the listener (bound, or inherited as in `src/start.rs`) and the server;
//! compare `src/start.rs`. The binary (`serve --runtime async`) and the tests both call
//! [`start`].

use std::sync::Arc;
use std::time::Duration;

use fiber_mysql::launcher::MariaDb;
use mysql_async::prelude::Queryable;

use crate::twin::{client, db, limit, router, server, TwinState};
use fiber_web::metrics::HttpStats;
use fiber_web::Drained;
use fiberstack::app;
use fiberstack::config::ServeConfig;
use fiberstack::error::{DbStep, Error};
use fiberstack::setup::{bound, database, db_failed, own_address, own_urls, Database};

/// Longest wait for the MySQL pool to close at shutdown.
const DB_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the runtime's tasks to end once the server has drained.
const RUNTIME_STOP_TIMEOUT: Duration = Duration::from_secs(1);

/// A running twin. Dropping it without [`Running::shutdown`] stops the runtime abruptly.
pub struct Running {
    pub server: server::Server,
    pub state: Arc<TwinState>,
    /// The private MariaDB, when no database URL was given; stopped on drop.
    pub mariadb: Option<MariaDb>,
    /// Where MySQL is, for the start-up line (password redacted).
    pub db_where: String,
    runtime: tokio::runtime::Runtime,
}

/// Start everything `cfg` describes, on a runtime of `cfg.web.threads` tokio worker threads.
pub fn start(cfg: &ServeConfig) -> Result<Running, Error> {
    // Its metrics and log lines carry the demo's name, as the fiber server's do.
    fiber_web::rig::set_app_name(&cfg.web.name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.web.threads)
        .thread_name("fiberstack-async")
        .enable_all()
        .build()
        .map_err(|e| Error::io("start the tokio runtime (--threads)", e))?;

    let inherited = fiber_web::rig::take_listener()
        .map_err(|e| Error::io("take the inherited listening socket", e))?;
    // The launcher blocks while MariaDB starts: do it before the runtime is busy.
    let Database {
        mariadb,
        opts,
        db_where,
    } = database(cfg)?;

    let (server, state) = runtime.block_on(async {
        let db = db::Pool::open(&opts, cfg.db_pool, cfg.db_wait_timeout, cfg.query_timeout)
            .await
            .map_err(db_failed(DbStep::open_pool(cfg)))?;
        {
            let mut conn = db.get().await.map_err(db_failed(DbStep::Reach))?;
            for sql in app::schema::init_sql() {
                conn.query_drop(sql)
                    .await
                    .map_err(|e| db_failed(DbStep::Schema)(db::to_error(e)))?;
            }
        }

        let listener = match inherited {
            // A worker's, or systemd's socket activation: the socket is bound already.
            Some(std_listener) => std_listener
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(std_listener)),
            None => server::bind(cfg.web.bind, cfg.web.http.listen_backlog).await,
        }
        .map_err(|e| Error::io(format!("listen on {} (--bind)", cfg.web.bind), e))?;
        let addr = bound(listener.local_addr())?;
        let (self_widgets, upstream) = own_urls(cfg, addr)?;
        let http_stats = Arc::new(HttpStats::new(
            app::ROUTE_LABELS.iter().copied(),
            cfg.web.access_log,
        ));
        let state = Arc::new(TwinState {
            db,
            http: client::Client::new(cfg.client.clone()),
            self_widgets,
            upstream,
            limit: Arc::new(limit::Limit::new(
                cfg.web.fibers,
                cfg.web.queue,
                cfg.web.fiber_wait,
            )),
            monitor: Arc::new(limit::Limit::new(
                cfg.web.monitor_fibers,
                cfg.web.monitor_fibers * fiber_web::config::MONITOR_QUEUE_PER_FIBER,
                cfg.web.fiber_wait,
            )),
            http_stats: Arc::clone(&http_stats),
        });
        let server = server::spawn(
            listener,
            router(Arc::clone(&state)),
            cfg.web.http.clone(),
            http_stats,
            cfg.web.request_timeout,
        )
        .map_err(|e| Error::io("start the server", e))?;
        Ok::<_, Error>((server, state))
    })?;
    Ok(Running {
        server,
        state,
        mariadb,
        db_where,
        runtime,
    })
}

impl Running {
    /// The address clients use.
    pub fn addr(&self) -> std::net::SocketAddr {
        own_address(self.server.addr())
    }

    /// The one start-up line, in the fiber server's format.
    pub fn banner(&self, cfg: &ServeConfig) -> String {
        format!(
            "fiberstack: listening on http://{} | runtime async, {} tasks at once (--fibers), \
             queue {}, {} tokio threads | MySQL: mysql_async pool of {} via {}",
            self.addr(),
            cfg.web.fibers,
            cfg.web.queue,
            cfg.web.threads,
            cfg.db_pool,
            self.db_where,
        )
    }

    /// Stop accepting, finish in-flight requests for up to `grace`, close the MySQL
    /// pool, stop the runtime and the private MariaDB.
    pub fn shutdown(self, grace: Duration) -> Drained {
        let Running {
            server,
            state,
            mariadb,
            runtime,
            ..
        } = self;
        let drained = runtime.block_on(async {
            let drained = server.shutdown(grace).await;
            let _ = tokio::time::timeout(DB_CLOSE_TIMEOUT, state.db.disconnect()).await;
            drained
        });
        drop(state);
        runtime.shutdown_timeout(RUNTIME_STOP_TIMEOUT);
        drop(mariadb);
        drained
    }
}
