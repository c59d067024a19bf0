//! The demo's configuration: what `fiberstack serve` runs ([`ServeConfig`]), for
//! either runtime, so that a limit means the same thing on fibers and on the async
//! twin. The HTTP server's and the client's limits, and the defaults shared with every
//! app, are the framework's (`fiber_web::config`).

use std::fmt;
use std::str::FromStr;
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

/// Which server runs the demo: one binary, two runtimes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// Every request on a guarded fiber (`server.rs`, `app/`).
    #[default]
    Fibers,
    /// The async/await twin on tokio (`twin/`).
    Async,
    /// The raw baseline: stock may_minihttp 0.1.11 on plain may coroutines, with no
    /// fiber pool, no guard pages and no HTTP care (`mini/`; for the bench).
    Minihttp,
}

impl FromStr for Runtime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fibers" | "fiber" => Ok(Runtime::Fibers),
            "async" | "tokio" => Ok(Runtime::Async),
            "minihttp" | "may_minihttp" => Ok(Runtime::Minihttp),
            other => Err(format!(
                "unknown runtime '{other}': use fibers, async or minihttp"
            )),
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Fibers => "fibers",
            Runtime::Async => "async",
            Runtime::Minihttp => "minihttp",
        })
    }
}

/// Everything `fiberstack serve` needs to run, for either runtime: how the framework
/// serves (`web`: bind, fibers, stacks, queue, processes, HTTP limits, the watchdog),
/// and what the demo adds (MySQL, the upstream, the HTTP client, the runtime).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Fibers (the default), the async twin, or raw may_minihttp.
    pub runtime: Runtime,
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
            runtime: Runtime::default(),
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
        }
    }
}
