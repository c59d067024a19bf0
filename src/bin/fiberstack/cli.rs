//! The command line: `fiberstack serve` and its flags (each also an environment
//! variable), turned into a [`ServeConfig`]. Bad values are refused by name.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use fiber_mysql::launcher::LaunchConfig;
use fiber_web::shutdown::StopRequests;
use fiber_web::supervisor::{self, Supervisor, SupervisorConfig, MAX_PROCESSES};
use fiberstack::config::{
    ByteSize, Options, Runtime, ServeConfig, WatchdogLimits, DEFAULT_ACCESS_LOG, DEFAULT_BIND,
    DEFAULT_DB_POOL, DEFAULT_DB_WAIT, DEFAULT_FIBERS, DEFAULT_FIBER_WAIT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_OVERFLOW_LIMIT, DEFAULT_PROCESSES, DEFAULT_QUEUE, DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_STACK_SIZE, DEFAULT_STALL_LIMIT, DEFAULT_STALL_WARN,
};
use fiberstack::start;

#[derive(Parser, Debug)]
#[command(
    name = "fiberstack",
    version,
    about = "The async-rails demo in Rust: every request on a guarded fiber"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the demo server (a private MariaDB unless --database-url is given).
    Serve(ServeArgs),
    /// Start the demo, run every route on fibers, and print each route's stack use.
    StackReport(ServeArgs),
    /// Start both runtimes in turn and measure what clients that leave cost them: the
    /// pool's connections after 20 leave, and how soon one comes back (median, p99).
    CancelReport {
        /// Rounds of one client leaving, per runtime.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        rounds: u64,
        #[command(flatten)]
        serve: ServeArgs,
    },
    /// Start a private throwaway MariaDB, print its URL, and keep it until Ctrl-C/SIGTERM.
    Mariadb {
        /// max_connections of the server.
        #[arg(long, default_value_t = LaunchConfig::default().max_connections)]
        max_connections: usize,
    },
    /// Measure fibers, the async twin and raw may_minihttp, pinned apart from ab and wrk.
    Bench(crate::bench::BenchArgs),
}

/// Most `--fibers`: each reserves address space for its stack (and a mapping: see
/// STACK_SIZES.md on `vm.max_map_count`).
const MAX_FIBERS: u64 = 100_000;
/// Most `--db-pool` connections.
const MAX_DB_POOL: u64 = 10_000;
/// Most `--workers` threads.
const MAX_WORKERS: u64 = 1024;
/// Longest `--fiber-wait`, `--db-wait` or `--shutdown-grace`: an hour.
const MAX_WAIT_SECS: f64 = 3600.0;

/// Shortest `--stall-warn`: the stall clock ticks in milliseconds (a coarse clock).
const MIN_STALL_WARN: Duration = Duration::from_millis(10);

/// The flags of `fiberstack serve`.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// fibers (every request on a guarded fiber), async (the tokio + axum twin) or
    /// minihttp (stock may_minihttp on plain may: the bench's raw baseline).
    #[arg(long, env = "FIBERSTACK_RUNTIME", default_value_t = Runtime::default())]
    pub runtime: Runtime,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "FIBERSTACK_BIND", default_value_t = DEFAULT_BIND)]
    pub bind: SocketAddr,
    /// Fibers in the pool: requests running handlers at once.
    #[arg(long, env = "FIBERSTACK_FIBERS", default_value_t = DEFAULT_FIBERS as u64, value_parser = clap::value_parser!(u64).range(1..=MAX_FIBERS))]
    pub fibers: u64,
    /// Usable stack of each fiber: 65536, 64k, 64KiB, 1MiB.
    #[arg(long, env = "FIBERSTACK_STACK_SIZE", default_value_t = ByteSize(DEFAULT_STACK_SIZE))]
    pub stack_size: ByteSize,
    /// Requests that may wait for a fiber; more get a 503.
    #[arg(long, env = "FIBERSTACK_QUEUE", default_value_t = DEFAULT_QUEUE)]
    pub queue: usize,
    /// Most /widgets/http requests at once (default: half the fibers), so that the
    /// calls they make back into this server always find a fiber.
    #[arg(long, env = "FIBERSTACK_SELF_CALL_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub self_call_limit: Option<u64>,
    /// MySQL connections in the pool.
    #[arg(long, env = "FIBERSTACK_DB_POOL", default_value_t = DEFAULT_DB_POOL as u64, value_parser = clap::value_parser!(u64).range(1..=MAX_DB_POOL))]
    pub db_pool: u64,
    /// An external server, mysql://user:pass@host:port/db; without it a private MariaDB starts.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// The mariadbd binary for the private server (default: PATH, then /usr/sbin).
    #[arg(long, env = "FIBERSTACK_MARIADBD")]
    pub mariadbd: Option<std::path::PathBuf>,
    /// MySQL driver: native (coroutine-native) or threads (the mysql crate, a thread per connection).
    #[arg(long, env = "FIBERSTACK_DB_DRIVER", default_value_t = fiber_mysql::Driver::default())]
    pub db_driver: fiber_mysql::Driver,
    /// may worker threads (default: the number of cores).
    #[arg(long, env = "FIBERSTACK_WORKERS", value_parser = clap::value_parser!(u64).range(1..=MAX_WORKERS))]
    pub workers: Option<u64>,
    /// The JSON API /twitter reads (default: this server's /upstream/search.json?q=rails+3).
    #[arg(long, env = "FIBERSTACK_UPSTREAM")]
    pub upstream: Option<String>,
    /// Seconds a request may wait for a fiber before a 503.
    #[arg(long, env = "FIBERSTACK_FIBER_WAIT", default_value_t = DEFAULT_FIBER_WAIT.as_secs_f64())]
    pub fiber_wait: f64,
    /// Seconds each request may take from its arrival: past it, its waits end (a
    /// MySQL query is killed) and it gets a 504 naming the phase (0: no deadline).
    #[arg(long, env = "FIBERSTACK_REQUEST_TIMEOUT", default_value_t = 0.0)]
    pub request_timeout: f64,
    /// Seconds a request may wait for a MySQL connection before a 503.
    #[arg(long, env = "FIBERSTACK_DB_WAIT", default_value_t = DEFAULT_DB_WAIT.as_secs_f64())]
    pub db_wait: f64,
    /// Most open client connections; more are answered 503.
    #[arg(long, env = "FIBERSTACK_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Seconds in-flight requests get to finish after SIGTERM or Ctrl-C (and in a worker
    /// being replaced).
    #[arg(long, env = "FIBERSTACK_SHUTDOWN_GRACE", default_value_t = DEFAULT_SHUTDOWN_GRACE.as_secs_f64())]
    pub shutdown_grace: f64,
    /// Seconds a request may hold its worker thread (running its own code, not
    /// waiting in may) before the watchdog logs it and counts a stall.
    #[arg(long, env = "FIBERSTACK_STALL_WARN", default_value_t = DEFAULT_STALL_WARN.as_secs_f64())]
    pub stall_warn: f64,
    /// Seconds a request may hold its worker thread before the watchdog asks for this
    /// process to be replaced.
    #[arg(long, env = "FIBERSTACK_STALL_LIMIT", default_value_t = DEFAULT_STALL_LIMIT.as_secs_f64())]
    pub stall_limit: f64,
    /// Caught stack overflows after which the watchdog asks for this process to be
    /// replaced: each leaves the heap its abandoned frames owned behind, never freed
    /// (0: never; without a supervisor the request is only logged).
    #[arg(long, env = "FIBERSTACK_OVERFLOW_LIMIT", default_value_t = DEFAULT_OVERFLOW_LIMIT)]
    pub overflow_limit: u64,
    /// Worker processes the supervisor runs behind the port.
    #[arg(long, env = "FIBERSTACK_PROCESSES", default_value_t = DEFAULT_PROCESSES as u64, value_parser = clap::value_parser!(u64).range(1..=MAX_PROCESSES as u64))]
    pub processes: u64,
    /// A supervisor binds the port once, shares one private MariaDB, replaces a worker
    /// that dies, hangs on a lock an overflow left held, or asks to go (without
    /// refusing a connection), and restarts them one by one on SIGHUP: on or off. Off,
    /// the server runs in this process alone, and a worker the watchdog finds broken
    /// can only say so in the log.
    #[arg(long, env = "FIBERSTACK_SUPERVISOR", default_value = on_off(true),
          value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub supervisor: bool,
    /// An access line per request on stderr: on or off (what it costs: BENCHMARKS.md).
    /// RUST_LOG filters it too, as target fiberstack::access.
    #[arg(long, env = "FIBERSTACK_ACCESS_LOG", default_value = on_off(DEFAULT_ACCESS_LOG),
          value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub access_log: bool,
}

/// A switch as the command line writes it.
const fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// `on` or `off` (also true/false, yes/no, 1/0), else what to write.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        other => Err(format!("'{other}' is not a switch: write on or off")),
    }
}

impl ServeArgs {
    /// The configuration these flags describe.
    pub fn to_config(&self) -> Result<ServeConfig, String> {
        let secs = |flag: &str, v: f64| {
            if v.is_finite() && (0.0..=MAX_WAIT_SECS).contains(&v) {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(format!(
                    "--{flag} must be seconds from 0 to {MAX_WAIT_SECS}, got {v}"
                ))
            }
        };
        let defaults = ServeConfig::default();
        let mut cfg = ServeConfig {
            runtime: self.runtime,
            web: Options {
                bind: self.bind,
                fibers: self.fibers as usize,
                stack_size: self.stack_size.0,
                queue: self.queue,
                fiber_wait: secs("fiber-wait", self.fiber_wait)?,
                shutdown_grace: secs("shutdown-grace", self.shutdown_grace)?,
                request_timeout: Some(secs("request-timeout", self.request_timeout)?)
                    .filter(|t| !t.is_zero()),
                access_log: self.access_log,
                processes: self.processes as usize,
                supervise: self.supervisor,
                watchdog: WatchdogLimits {
                    stall_warn: secs("stall-warn", self.stall_warn)?,
                    stall_limit: secs("stall-limit", self.stall_limit)?,
                    overflow_limit: self.overflow_limit,
                },
                ..defaults.web.clone()
            },
            db_pool: self.db_pool as usize,
            self_call_limit: self.self_call_limit.map(|n| n as usize),
            database_url: self.database_url.clone().filter(|u| !u.is_empty()),
            mariadbd: self.mariadbd.clone(),
            db_driver: self.db_driver,
            upstream: self.upstream.clone().filter(|u| !u.is_empty()),
            db_wait_timeout: secs("db-wait", self.db_wait)?,
            ..defaults
        };
        let w = cfg.web.watchdog;
        if w.stall_warn < MIN_STALL_WARN || w.stall_limit < w.stall_warn {
            return Err(format!(
                "--stall-warn must be at least {MIN_STALL_WARN:?} and --stall-limit at least \
                 --stall-warn; got --stall-warn {} and --stall-limit {}",
                self.stall_warn, self.stall_limit
            ));
        }
        if let Some(w) = self.workers {
            cfg.web.workers = w as usize;
        }
        cfg.web.http.max_connections = self.max_connections;
        Ok(cfg)
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // First, before any thread: a worker's identity and inherited socket are in the
    // environment, which this reads and cleans.
    supervisor::init();
    let cli = Cli::parse();
    fiber_web::logging::init();
    let result = match cli.command {
        Command::Serve(args) => args.to_config().and_then(|cfg| serve(&cfg)),
        Command::StackReport(args) => args
            .to_config()
            .and_then(|cfg| crate::stack_report::run(&cfg)),
        Command::CancelReport { rounds, serve } => serve
            .to_config()
            .and_then(|cfg| crate::cancel_report::run(&cfg, rounds as usize)),
        Command::Mariadb { max_connections } => mariadb(max_connections),
        Command::Bench(args) => crate::bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Why the command failed is never filtered away: with RUST_LOG=off it
            // still goes to stderr, plainly.
            if log::log_enabled!(log::Level::Error) {
                log::error!("fiberstack: {e}");
            } else {
                eprintln!("fiberstack: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Signals that stop the server; registered before anything starts, so that a signal
/// during start-up is not lost (and the private MariaDB is still cleaned up).
pub fn stop_signals() -> Result<signal_hook::iterator::Signals, String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("cannot install signal handlers: {e}"))
}

/// Run the server until it is told to stop (SIGINT or SIGTERM, or its supervisor),
/// then shut down gracefully. With `--processes` 2 or more, run the supervisor instead.
pub fn serve(cfg: &ServeConfig) -> Result<(), String> {
    if cfg.runtime == Runtime::Minihttp && cfg.web.processes > 1 {
        return Err(
            "--processes needs --runtime fibers or async: stock may_minihttp binds its own \
             socket and cannot serve an inherited one"
                .into(),
        );
    }
    if supervisor::worker().is_none() {
        match unsupervised_why(cfg) {
            None => return supervise(cfg),
            Some(why) => log::warn!(
                "fiberstack: no supervisor ({why}): a worker that hangs on a lock a stack \
                 overflow left held, or asks to be replaced, cannot be replaced; restart \
                 it from outside (systemd's Restart=, a container's restart policy)"
            ),
        }
    }
    let stops =
        supervisor::stop_requests().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let drained = match cfg.runtime {
        Runtime::Minihttp => return serve_minihttp(cfg, &stops),
        Runtime::Fibers => {
            let running = start::start(cfg).map_err(|e| e.to_string())?;
            fiber_web::logging::banner(&running.banner(cfg));
            supervisor::ready();
            stopping(
                &stops.wait(),
                running.serving.server().stop_state().in_flight(),
                cfg,
            );
            running.shutdown(cfg.web.shutdown_grace)
        }
        Runtime::Async => {
            let running = fiberstack::twin::start(cfg).map_err(|e| e.to_string())?;
            fiber_web::logging::banner(&running.banner(cfg));
            supervisor::ready();
            stopping(&stops.wait(), running.server.stop_state().in_flight(), cfg);
            running.shutdown(cfg.web.shutdown_grace)
        }
    };
    if drained.connections_left > 0 {
        log::warn!(
            "fiberstack: {} connections were still open after the grace period",
            drained.connections_left
        );
    }
    log::info!("fiberstack: stopped");
    Ok(())
}

/// Why this process serves without a supervisor, if it does: it was told to, or its
/// runtime cannot serve an inherited socket.
fn unsupervised_why(cfg: &ServeConfig) -> Option<&'static str> {
    if !cfg.web.supervise {
        Some("--supervisor off")
    } else if cfg.runtime == Runtime::Minihttp {
        Some("--runtime minihttp: stock may_minihttp binds its own socket and cannot serve an inherited one")
    } else {
        None
    }
}

/// The supervisor: bind, start the one private MariaDB the workers share (sized for
/// all their pools plus one replacement's), run the workers, and stop MariaDB last.
fn supervise(cfg: &ServeConfig) -> Result<(), String> {
    let mut sup = Supervisor::bind(SupervisorConfig {
        processes: cfg.web.processes,
        bind: cfg.web.bind,
        listen_backlog: cfg.web.http.listen_backlog,
        shutdown_grace: cfg.web.shutdown_grace,
        start_timeout: cfg.web.worker_start_timeout,
    })?;
    let all_pools = ServeConfig {
        db_pool: cfg.db_pool * (cfg.web.processes + 1),
        ..cfg.clone()
    };
    let db = fiberstack::setup::database(&all_pools).map_err(|e| e.to_string())?;
    if let Some(mariadb) = &db.mariadb {
        // The environment, not argv: the URL holds the password.
        sup.env("DATABASE_URL", mariadb.url());
        // So that each worker's start-up line says whose server this is.
        sup.env(
            fiberstack::setup::SUPERVISORS_MARIADB_ENV,
            mariadb.pid().to_string(),
        );
    }
    sup.note(format!("MySQL: {}", db.db_where));
    let result = sup.run();
    if db.mariadb.is_some() {
        log::info!("fiberstack supervisor: every worker has exited; stopping MariaDB");
    }
    drop(db);
    log::info!("fiberstack: stopped");
    result
}

/// `serve --runtime minihttp`: say which flags it ignores, serve until told to stop,
/// then stop MySQL. Open connections are cut: may_minihttp has no graceful shutdown.
fn serve_minihttp(cfg: &ServeConfig, stops: &StopRequests) -> Result<(), String> {
    for line in fiberstack::mini::ignored_flags(cfg) {
        log::warn!("fiberstack: minihttp: {line}");
    }
    let running = fiberstack::mini::start(cfg).map_err(|e| e.to_string())?;
    fiber_web::logging::banner(&running.banner(cfg));
    let why = stops.wait();
    log::info!("fiberstack: {why}; minihttp has no graceful shutdown, open connections are cut");
    running.shutdown();
    Ok(())
}

fn stopping(why: &str, in_flight: usize, cfg: &ServeConfig) {
    log::info!(
        "fiberstack: {why}, finishing {in_flight} in-flight requests (up to {:?})",
        cfg.web.shutdown_grace
    );
}

/// `fiberstack mariadb`: a private MariaDB for tests or experiments.
pub fn mariadb(max_connections: usize) -> Result<(), String> {
    let mut signals = stop_signals()?;
    let db = fiber_mysql::launcher::MariaDb::start(fiber_mysql::launcher::LaunchConfig {
        max_connections,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    println!("{}", db.url());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    signals.forever().next();
    drop(db);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag's default comes from config.rs: `serve` without flags is exactly
    /// `ServeConfig::default()`.
    #[test]
    fn serve_without_flags_is_the_default_config() {
        // Flags fall back to environment variables: a test run may have them set.
        // (No other test of this binary reads the environment.)
        for (name, _) in std::env::vars() {
            if name.starts_with("FIBERSTACK_") || name == "DATABASE_URL" {
                std::env::remove_var(name);
            }
        }
        let cli = Cli::try_parse_from(["fiberstack", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve: {:?}", cli.command)
        };
        assert_eq!(
            format!("{:?}", args.to_config().unwrap()),
            format!("{:?}", ServeConfig::default())
        );
    }

    #[test]
    fn access_log_takes_on_or_off_and_says_what_to_write() {
        let parse = |v: &str| {
            Cli::try_parse_from(["fiberstack", "serve", "--access-log", v]).map(|cli| {
                let Command::Serve(args) = cli.command else {
                    panic!("not serve")
                };
                args.access_log
            })
        };
        assert!(parse("on").unwrap());
        assert!(!parse("off").unwrap());
        assert!(!parse("OFF").unwrap());
        let e = parse("loud").unwrap_err().to_string();
        assert!(e.contains("write on or off"), "{e}");
    }

    #[test]
    fn help_shows_the_defaults_of_config_rs() {
        let help = <Cli as clap::CommandFactory>::command()
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        for shown in [
            format!("[default: {}]", ByteSize(DEFAULT_STACK_SIZE)),
            format!("[default: {DEFAULT_BIND}]"),
            format!("[default: {DEFAULT_FIBERS}]"),
            format!("[default: {DEFAULT_QUEUE}]"),
            format!("[default: {}]", DEFAULT_FIBER_WAIT.as_secs()),
            format!("[default: {DEFAULT_MAX_CONNECTIONS}]"),
            format!("[default: {}]", on_off(DEFAULT_ACCESS_LOG)),
        ] {
            assert!(help.contains(&shown), "{shown} not in:\n{help}");
        }
    }
}
