//! The demo's configuration: what `fiberstack serve` runs ([`ServeConfig`]), for
//! either runtime, so that a limit means the same thing on fibers and on the async
//! twin. The HTTP server's and the client's limits, and the defaults shared with every
//! app, are the framework's (`fiber_web::config`).

use std::time::Duration;

pub use fiber_web::config::*;
pub use fiber_web::Options;

/// The demo's name: its metrics are `fiberstack_*`, its variables `FIBERSTACK_*`, its
/// access lines' log target `fiberstack::access`.
pub const APP_NAME: &str = "fiberstack";
/// `--db-pool`: one MySQL connection per fiber, as in the original demo.
pub const DEFAULT_DB_POOL: usize = DEFAULT_FIBERS;
/// `--db-wait`: longest wait for a MySQL connection.
pub const DEFAULT_DB_WAIT: Duration = Duration::from_secs(10);
/// Longest a single query may run before it is cancelled.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(15);

/// Everything `fiberstack serve` needs to run (and the comparison rig's twin, which
/// serves the same routes): how the framework serves (`web`: bind, fibers, stacks,
/// queue, processes, HTTP limits, the watchdog), and what the demo adds (MySQL, the
/// upstream, the HTTP client).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// How the server runs: every framework limit, named once (`fiber_web::Options`).
    pub web: Options,
    /// Most `/widgets/http` requests at once (they call back into this server, and
    /// each inner call needs a fiber too); `None`: half the fibers.
    pub self_call_limit: Option<usize>,
    /// MySQL connections in the pool.
    pub db_pool: usize,
    /// Longest wait for a MySQL connection before a 503.
    pub db_wait_timeout: Duration,
    /// External MySQL/MariaDB server; `None` starts a private MariaDB.
    pub database_url: Option<String>,
    /// The `mariadbd` the private server runs; `None`: PATH, then /usr/sbin.
    pub mariadbd: Option<std::path::PathBuf>,
    /// Which MySQL driver serves the pool.
    pub db_driver: fiber_mysql::Driver,
    /// Longest a single query may run before it is cancelled.
    pub query_timeout: Duration,
    /// The JSON API `/twitter` reads; `None` means this server's own `/upstream/search.json`.
    pub upstream: Option<String>,
    /// HTTP client limits.
    pub client: ClientLimits,
    /// The pid of the private MariaDB that [`serve`](crate::start::serve) started beside
    /// the workers, whose URL is `database_url`: for the start-up line.
    pub beside_mariadb: Option<String>,
}

impl ServeConfig {
    /// The effective limit of self-calling routes: as set, else half the fibers.
    pub fn self_call_limit(&self) -> usize {
        self.self_call_limit.unwrap_or(self.web.fibers / 2).max(1)
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            web: Options {
                name: APP_NAME.into(),
                ..Options::default()
            },
            self_call_limit: None,
            db_pool: DEFAULT_DB_POOL,
            db_wait_timeout: DEFAULT_DB_WAIT,
            database_url: None,
            mariadbd: None,
            db_driver: fiber_mysql::Driver::Native,
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            upstream: None,
            client: ClientLimits::default(),
            beside_mariadb: None,
        }
    }
}
