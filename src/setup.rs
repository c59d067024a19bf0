//! What the start-up of every runtime shares (`start.rs` for fibers, `twin/start.rs`
//! for the async twin, `mini/` for raw may_minihttp): the MySQL server to use
//! (external, or a private MariaDB sized for the pool), and the server's own URLs.

use std::net::{Ipv4Addr, SocketAddr};

use fiber_mysql::launcher::{LaunchConfig, MariaDb, CONNECTION_HEADROOM};

use crate::config::ServeConfig;
use crate::error::{DbStep, Error};
use fiber_web::client::Url;

/// The [`Error`] for a MySQL failure at `step`.
pub fn db_failed(step: DbStep) -> impl FnOnce(fiber_mysql::Error) -> Error {
    move |source| Error::Database { step, source }
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

/// Set beside `DATABASE_URL` when that URL is the private MariaDB
/// [`serve`](crate::start::serve) started beside the workers: the server's pid, for
/// the start-up line.
pub const BESIDE_MARIADB_VAR: &str = "FIBERSTACK_PRIVATE_MARIADB";

/// Connect options for `--database-url`, or start the private MariaDB. The launcher
/// blocks while MariaDB starts: call it at start-up.
pub fn database(cfg: &ServeConfig) -> Result<Database, Error> {
    if let Some(url) = &cfg.database_url {
        let opts = fiber_mysql::Opts::from_url(url).map_err(|e| Error::Flag {
            flag: "--database-url / DATABASE_URL",
            source: e.into(),
        })?;
        let whose = match fiber_web::worker::current() {
            Some(_) => ", the supervisor's",
            None => "",
        };
        let db_where = match &cfg.beside_mariadb {
            Some(pid) => format!(
                "private MariaDB at {} (pid {pid}){whose}",
                opts.url_redacted()
            ),
            None => format!("external {}", opts.url_redacted()),
        };
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
    .map_err(db_failed(DbStep::PrivateServer))?;
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
) -> Result<(fiber_mysql::Pool, Option<MariaDb>, String), Error> {
    let Database {
        mariadb,
        mut opts,
        db_where,
    } = database(cfg)?;
    opts.query_timeout = Some(cfg.query_timeout);
    let pool_config = fiber_mysql::PoolConfig {
        wait_timeout: cfg.db_wait_timeout,
        driver: cfg.db_driver,
        ..fiber_mysql::PoolConfig::new(opts, cfg.db_pool)
    };
    let db = match fiber_mysql::Pool::new(pool_config.clone()) {
        Ok(db) => db,
        // A worker that replaces another while MySQL is down (killed during an outage)
        // starts anyway, not ready until MySQL is back: refusing to start would leave
        // its slot, and with one process the whole port, unanswered for the outage.
        // Its slot's first worker created the schema. A first start still fails: an
        // unreachable server there is as likely a wrong URL as an outage.
        Err(e) if e.is_unavailable() && replacing() => {
            log::warn!(
                "fiberstack: MySQL is unavailable ({e}): this replacement worker serves,                  not ready (/readyz 503), until it is back"
            );
            let db = fiber_mysql::Pool::new_lazy(pool_config)
                .map_err(db_failed(DbStep::open_pool(cfg)))?;
            return Ok((db, mariadb, db_where));
        }
        Err(e) => return Err(db_failed(DbStep::open_pool(cfg))(e)),
    };
    {
        let mut conn = db.get().map_err(db_failed(DbStep::Reach))?;
        for sql in crate::app::schema::init_sql() {
            conn.query(&sql).map_err(db_failed(DbStep::Schema))?;
        }
    }
    Ok((db, mariadb, db_where))
}

/// Whether this process is a supervised worker that replaces an earlier one.
fn replacing() -> bool {
    fiber_web::worker::current().is_some_and(|w| w.is_replacement())
}

/// The address the listener is bound to (`local_addr()`), with one warning in the log
/// when it is reachable from other machines (see [`exposure_warning`]).
pub fn bound(local_addr: std::io::Result<SocketAddr>) -> Result<SocketAddr, Error> {
    let addr = local_addr.map_err(|e| Error::io("read the bound address", e))?;
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
pub fn own_urls(cfg: &ServeConfig, bound: SocketAddr) -> Result<(Url, Url), Error> {
    let own = own_address(bound);
    let flag = |flag: &'static str| {
        move |e: fiber_web::Error| Error::Flag {
            flag,
            source: e.into(),
        }
    };
    let self_widgets = Url::parse(&format!("http://{own}/widgets")).map_err(flag("--bind"))?;
    let upstream = match &cfg.upstream {
        Some(u) => Url::parse_resolving(u).map_err(flag("--upstream"))?,
        None => Url::parse(&format!("http://{own}/upstream/search.json?q=rails+3"))
            .map_err(flag("--bind"))?,
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
