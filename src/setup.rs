//! What the start-up of both runtimes shares (`start.rs` for fibers, `twin/start.rs`
//! for the async twin): the error that says which flag to change, the MySQL server to
//! use (external, or a private MariaDB sized for the pool), and the server's own URLs.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};

use fiber_mysql::launcher::{LaunchConfig, MariaDb, CONNECTION_HEADROOM};

use crate::config::ServeConfig;
use fiber_web::http::client::Url;

/// Why the demo could not start; each says which flag to change.
#[derive(Debug)]
pub struct StartError(pub String);

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// A [`StartError`] that says `msg`.
pub fn fail(msg: impl Into<String>) -> StartError {
    StartError(msg.into())
}

/// Where MySQL start-up failed, each step worded once for both runtimes.
#[derive(Clone, Copy, Debug)]
pub enum DbStep {
    /// Opening the pool's `--db-pool` connections.
    OpenPool,
    /// Taking a connection to create the schema.
    Reach,
    /// Creating the demo schema.
    Schema,
}

/// The [`StartError`] for a MySQL failure at `step`.
pub fn db_failed(step: DbStep, cfg: &ServeConfig, e: impl fmt::Display) -> StartError {
    fail(match step {
        DbStep::OpenPool => format!(
            "cannot open the MySQL pool (--db-pool {}): {e}",
            cfg.db_pool
        ),
        DbStep::Reach => format!("cannot reach MySQL: {e}"),
        DbStep::Schema => format!("cannot create the demo schema: {e}"),
    })
}

/// Where MySQL is: an external server named by the URL, or a private MariaDB started
/// here (sized for the pool). Shared by both runtimes.
pub struct Database {
    /// The private server, stopped when dropped; `None` for an external one.
    pub mariadb: Option<MariaDb>,
    pub opts: fiber_mysql::Opts,
    /// For the start-up line, password redacted.
    pub db_where: String,
}

/// Connect options for `--database-url`, or start the private MariaDB. The launcher
/// blocks while MariaDB starts: call it at start-up.
pub fn database(cfg: &ServeConfig) -> Result<Database, StartError> {
    if let Some(url) = &cfg.database_url {
        let opts = fiber_mysql::Opts::from_url(url)
            .map_err(|e| fail(format!("bad --database-url / DATABASE_URL: {e}")))?;
        let db_where = format!("external {}", opts.url_redacted());
        return Ok(Database {
            mariadb: None,
            opts,
            db_where,
        });
    }
    let db = MariaDb::start(LaunchConfig {
        max_connections: cfg.db_pool + CONNECTION_HEADROOM,
        mariadbd: cfg.mariadbd.clone(),
        ..LaunchConfig::default()
    })
    .map_err(|e| {
        fail(format!(
            "cannot start the private MariaDB (--mariadbd): {e}"
        ))
    })?;
    Ok(Database {
        opts: db.opts(),
        db_where: format!(
            "private MariaDB at {} (pid {})",
            db.opts().url_redacted(),
            db.pid()
        ),
        mariadb: Some(db),
    })
}

/// The fiber_mysql pool both may runtimes use (fibers and minihttp), on the MySQL
/// server [`database`] picks, with the demo schema created: the pool, the private
/// MariaDB if one was started, and where MySQL is (for the start-up line).
pub fn fiber_mysql_pool(
    cfg: &ServeConfig,
) -> Result<(fiber_mysql::Pool, Option<MariaDb>, String), StartError> {
    let Database {
        mariadb,
        mut opts,
        db_where,
    } = database(cfg)?;
    opts.query_timeout = Some(cfg.query_timeout);
    let db = fiber_mysql::Pool::new(fiber_mysql::PoolConfig {
        wait_timeout: cfg.db_wait_timeout,
        driver: cfg.db_driver,
        ..fiber_mysql::PoolConfig::new(opts, cfg.db_pool)
    })
    .map_err(|e| db_failed(DbStep::OpenPool, cfg, e))?;
    {
        let mut conn = db.get().map_err(|e| db_failed(DbStep::Reach, cfg, e))?;
        for sql in crate::app::schema::init_sql() {
            conn.query(&sql)
                .map_err(|e| db_failed(DbStep::Schema, cfg, e))?;
        }
    }
    Ok((db, mariadb, db_where))
}

/// The address the listener is bound to (`local_addr()`), with one warning in the log
/// when it is reachable from other machines (see [`exposure_warning`]).
pub fn bound(local_addr: std::io::Result<SocketAddr>) -> Result<SocketAddr, StartError> {
    let addr = local_addr.map_err(|e| fail(format!("cannot read the bound address: {e}")))?;
    if let Some(warning) = exposure_warning(addr) {
        log::warn!("{warning}");
    }
    Ok(addr)
}

/// The warning for a listener bound to `addr`, if it is not loopback.
pub fn exposure_warning(addr: SocketAddr) -> Option<String> {
    (!addr.ip().is_loopback()).then(|| {
        format!(
            "fiberstack: warning: listening on {addr}, not loopback: /deep and /stats are \
             diagnostic routes (stack overflows on demand, internals) reachable by anyone who \
             can reach this port"
        )
    })
}

/// `/widgets` at this server's own address (for `/widgets/http`), and the upstream of
/// `/twitter`: `--upstream`, resolved once here, or this server's own search API.
pub fn own_urls(cfg: &ServeConfig, bound: SocketAddr) -> Result<(Url, Url), StartError> {
    let own = own_address(bound);
    let self_widgets =
        Url::parse(&format!("http://{own}/widgets")).map_err(|e| fail(e.to_string()))?;
    let upstream = match &cfg.upstream {
        Some(u) => Url::parse_resolving(u).map_err(|e| fail(format!("bad --upstream: {e}")))?,
        None => Url::parse(&format!("http://{own}/upstream/search.json?q=rails+3"))
            .map_err(|e| fail(e.to_string()))?,
    };
    Ok((self_widgets, upstream))
}

/// An address this machine can connect to for a listener bound at `addr`.
pub fn own_address(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    }
}
