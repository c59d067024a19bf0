//! One call to serve an app: [`serve`] (and [`App::serve`]) set up everything a
//! production server needs, in the right order, from [`Options`].
//!
//! ```text
//! serve_with(options, beside, build)      (serve: with nothing beside)
//!   supervisor::init     what this process inherited (a worker's identity, a socket)
//!   logging::init        RUST_LOG, one line per record, the access lines, the app's name
//!   supervised, not a worker yet?  -> this process is the supervisor: bind the port
//!                                     once, run `beside` (what the workers share: a
//!                                     database), run `processes` workers (this same
//!                                     program, told what `beside` set), replace any
//!                                     that dies, hangs or asks; return on SIGTERM /
//!                                     Ctrl-C after they have drained, then drop what
//!                                     `beside` kept
//!   (unsupervised: `beside` runs here, first)
//!   stop requests        SIGTERM, Ctrl-C, the supervisor's word
//!   watchdog             stalls and overflows; asks the supervisor for a fresh process
//!   fiber pool, counters, listener (inherited from the supervisor or systemd's socket
//!                        activation, else bound here)
//!   build(&Started)      the app, made in the process that serves it
//!   server               accept loop, connections, each request on a fiber
//!   ready                the supervisor may stop the worker this one replaces
//!   wait, then drain     in-flight requests finish for up to --shutdown-grace
//! ```
//!
//! The app is built inside the worker, by the closure: the supervisor opens no
//! database pool it would never use, and the app can know the address it serves on.
//! [`App::serve`] is the same for an app whose state is cheap to make twice.
//!
//! Every piece stays available on its own (`supervisor`, `watchdog`, `server::spawn`,
//! `logging`) for an app that must arrange them otherwise.

use std::any::Any;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fiber_pool::FiberPool;

use crate::config::COROUTINE_CACHE;
use crate::counters::HttpStats;
use crate::dispatch::Pools;
use crate::server::Server;
use crate::shutdown::Drained;
use crate::supervisor::{self, Supervisor, SupervisorConfig};
use crate::watchdog::{ReplaceHook, Watchdog};
use crate::{App, Error, Options};

/// What an app starts once for all its worker processes, beside them (a private
/// database they share), and what it tells them: given to [`serve_with`]. In a
/// supervised app it is made in the supervisor, before the first worker starts, and
/// kept until the last has stopped; without a supervisor, in the one process, before
/// the app is built.
#[derive(Default)]
pub struct Beside {
    vars: BTreeMap<String, String>,
    notes: Vec<String>,
    kept: Vec<Box<dyn Any + Send>>,
}

impl Beside {
    /// Nothing yet.
    pub fn new() -> Beside {
        Beside::default()
    }

    /// Tell the app `name` = `value` ([`Started::var`]): a worker gets it in its
    /// environment (not its arguments: a URL may hold a password).
    pub fn var(mut self, name: impl Into<String>, value: impl Into<String>) -> Beside {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// Add `text` to the start-up line.
    pub fn note(mut self, text: impl Into<String>) -> Beside {
        self.notes.push(text.into());
        self
    }

    /// Keep `value` until the app has stopped, then drop it (a database's handle, whose
    /// drop stops it).
    pub fn keep(mut self, value: impl Any + Send) -> Beside {
        self.kept.push(Box::new(value));
        self
    }
}

/// What the app's builder gets: where the server listens, and the pieces of the
/// server a handler may want to show (`/stats`-like routes).
pub struct Started {
    addr: SocketAddr,
    fibers: FiberPool,
    stats: Arc<HttpStats>,
    options: Options,
    /// What `beside` set, when it ran in this process.
    vars: BTreeMap<String, String>,
    /// What the app adds to the start-up line.
    notes: Mutex<Vec<String>>,
}

impl Started {
    /// The value [`Beside::var`] gave `name`, in this process or (in a worker) through
    /// its environment; else the environment's own.
    pub fn var(&self, name: &str) -> Option<String> {
        self.vars
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    }

    /// Add `text` to the start-up line (`NAME: listening on http://ADDR | ... | text`).
    pub fn note(&self, text: impl Into<String>) {
        self.notes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(text.into());
    }

    /// The address clients reach this server at (the real port when bound to port 0;
    /// `127.0.0.1` when bound to every address).
    pub fn addr(&self) -> SocketAddr {
        client_address(self.addr)
    }

    /// The address the listener is bound to, as bound (`0.0.0.0:3000` stays so).
    pub fn bound_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fiber pool the handlers run on.
    pub fn fibers(&self) -> &FiberPool {
        &self.fibers
    }

    /// The server's counters.
    pub fn stats(&self) -> &Arc<HttpStats> {
        &self.stats
    }

    /// The options being served with.
    pub fn options(&self) -> &Options {
        &self.options
    }
}

/// The address a client on this machine uses for a server bound to `bound`: an
/// unspecified address (`0.0.0.0`, `::`) becomes loopback.
pub(crate) fn client_address(bound: SocketAddr) -> SocketAddr {
    let mut addr = bound;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr
}

impl<S: Send + Sync + 'static> App<S> {
    /// Serve this app with `options` until SIGTERM or Ctrl-C, then drain: [`serve`]
    /// with an app that is already built. Under the supervisor (the default) the
    /// state is made in the supervisor process too, and dropped there unused; an app
    /// whose state holds connections or threads uses [`serve`] and builds it in its
    /// closure instead.
    pub fn serve(self, options: Options) -> Result<(), Error> {
        serve(options, move |_| Ok::<_, Infallible>(self))
    }
}

/// Serve the app `build` makes, with `options`, until SIGTERM or Ctrl-C; then let
/// in-flight requests finish (up to `options.shutdown_grace`) and return. Call it
/// first in `main`, before starting threads: it reads (and clears) what a supervisor
/// or systemd passed this process in its environment. It prints one line to stdout
/// once the port is open: `listening on http://ADDR`.
pub fn serve<S, E, F>(options: Options, build: F) -> Result<(), Error>
where
    S: Send + Sync + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
    F: FnOnce(&Started) -> Result<App<S>, E>,
{
    serve_with(options, |_| Ok::<_, Infallible>(Beside::new()), build)
}

/// [`serve`], with what `beside` starts once for every worker process (see
/// [`Beside`]): in the supervisor before the first worker, or in this process when
/// there is no supervisor. What it sets reaches the app as [`Started::var`].
pub fn serve_with<S, E, EB, B, F>(options: Options, beside: B, build: F) -> Result<(), Error>
where
    S: Send + Sync + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
    EB: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: FnOnce(&Options) -> Result<Beside, EB>,
    F: FnOnce(&Started) -> Result<App<S>, E>,
{
    supervisor::init();
    // Named first: the logger's own warnings already carry the name.
    crate::logging::set_app_name(&options.name);
    crate::logging::init();
    if options.supervise && supervisor::worker().is_none() {
        return supervise(&options, beside);
    }
    if supervisor::worker().is_none() && !options.supervise {
        log::warn!(
            target: crate::logging::app_name(),
            "no supervisor (--supervisor off): a worker that hangs on a lock a stack \
             overflow left held, or asks to be replaced, cannot be replaced; restart it \
             from outside (systemd's Restart=, a container's restart policy)"
        );
    }
    let stops = supervisor::stop_requests().map_err(|e| Error::io("install signal handlers", e))?;
    // A worker's `beside` ran in its supervisor: what it set is in the environment.
    let here = match supervisor::worker() {
        Some(_) => Beside::new(),
        None => beside(&options).map_err(|e| Error::App(e.into()))?,
    };
    let Beside { vars, notes, kept } = here;
    let serving = start_with_vars(
        &options,
        Box::new(supervisor::ask_for_replacement),
        vars,
        build,
    )?;
    let mut line = format!(
        "{}: listening on http://{} | {} fibers x {} stack, {} threads",
        options.name,
        serving.addr(),
        options.fibers,
        crate::config::ByteSize(options.stack_size),
        options.threads,
    );
    for note in notes.iter().chain(&serving.notes) {
        line.push_str(" | ");
        line.push_str(note);
    }
    crate::logging::banner(&line);
    supervisor::ready();
    let why = stops.wait();
    log::info!(
        target: crate::logging::app_name(),
        "{why}: finishing {} in-flight requests (up to {:?})",
        serving.server.stop_state().in_flight(),
        options.shutdown_grace
    );
    let drained = serving.shutdown(options.shutdown_grace);
    drop(kept);
    // Requests on a thread a lock left held by an overflow blocks never finish: say
    // how many connections were left when the grace ended.
    log::info!(
        target: crate::logging::app_name(),
        "pid {} stopped; {} connections unfinished after the grace period",
        std::process::id(),
        drained.connections_left
    );
    Ok(())
}

/// An app being served, in this process: what [`start`] returns.
pub struct Serving {
    server: Server,
    addr: SocketAddr,
    fibers: FiberPool,
    stats: Arc<HttpStats>,
    /// What the app added to the start-up line while it was built.
    notes: Vec<String>,
    _watchdog: Watchdog,
}

impl Serving {
    /// The address clients reach this server at.
    pub fn addr(&self) -> SocketAddr {
        client_address(self.addr)
    }

    /// The fiber pool the handlers run on.
    pub fn fibers(&self) -> &FiberPool {
        &self.fibers
    }

    /// The server's counters.
    pub fn stats(&self) -> &Arc<HttpStats> {
        &self.stats
    }

    /// Client connections open now.
    pub fn connections(&self) -> usize {
        self.server.stop_state().connections()
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> usize {
        self.server.stop_state().in_flight()
    }

    /// What the app added to the start-up line while it was built ([`Started::note`]).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Stop accepting, let in-flight requests finish for up to `grace`, stop the
    /// watchdog, and report what was left.
    pub fn shutdown(self, grace: Duration) -> Drained {
        self.server.shutdown(grace)
    }
}

/// Start serving the app `build` makes, in this process, and return at once: the
/// non-blocking half of [`serve`], without its logger, supervisor and signals, for a
/// test or an app that arranges those itself. The watchdog calls `replace` with a
/// reason when this process should be replaced
/// ([`worker::ask_for_replacement`](crate::worker::ask_for_replacement) in a
/// supervised worker; a test passes `|_| {}`).
pub fn start<S, E, F>(
    options: &Options,
    replace: impl Fn(&str) + Send + 'static,
    build: F,
) -> Result<Serving, Error>
where
    S: Send + Sync + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
    F: FnOnce(&Started) -> Result<App<S>, E>,
{
    crate::logging::set_app_name(&options.name);
    start_with_vars(options, Box::new(replace), BTreeMap::new(), build)
}

fn start_with_vars<S, E, F>(
    options: &Options,
    replace: ReplaceHook,
    vars: BTreeMap<String, String>,
    build: F,
) -> Result<Serving, Error>
where
    S: Send + Sync + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
    F: FnOnce(&Started) -> Result<App<S>, E>,
{
    // may reads these once, when its first coroutine starts.
    may::config()
        .set_workers(options.threads)
        .set_pool_capacity(COROUTINE_CACHE);
    let fibers = FiberPool::new(options.pool_config())?;
    size_blocking(&options.blocking)?;
    let watchdog = crate::watchdog::spawn(options.watchdog, replace)
        .map_err(|e| Error::io("start the stall watchdog", e))?;
    let stats = Arc::new(HttpStats::unrouted(options.access_log));
    let listener = supervisor::listener_with_backlog(options.bind, options.http.listen_backlog)
        .map_err(|e| Error::io(format!("listen on {} (--bind)", options.bind), e))?;
    let addr = listener
        .socket
        .local_addr()
        .map_err(|e| Error::io("read the bound address", e))?;
    let started = Started {
        addr,
        fibers: fibers.clone(),
        stats: Arc::clone(&stats),
        options: options.clone(),
        vars,
        notes: Mutex::new(Vec::new()),
    };
    let mut app = build(&started).map_err(|e| Error::App(e.into()))?;
    // A supervisor can replace this worker: a suspect overflow stops it taking work.
    if supervisor::worker().is_some() {
        crate::suspect::arm(supervisor::ask_for_replacement);
        app = app.outermost_layer(crate::suspect::Refusing);
    }
    let notes = started
        .notes
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let pools = Pools {
        fibers: fibers.clone(),
        monitor: FiberPool::new(options.monitor_pool_config())?,
    };
    let routed = app.build(pools, Arc::clone(&stats), options.request_timeout)?;
    let server = crate::server::spawn(
        listener,
        Arc::new(routed),
        options.http.clone(),
        Arc::clone(&stats),
    )
    .map_err(|e| Error::io("start the server", e))?;
    Ok(Serving {
        server,
        addr,
        fibers,
        stats,
        notes,
        _watchdog: watchdog,
    })
}

/// This process is the supervisor: bind, start what `beside` starts, run the workers
/// until told to stop, then drop what `beside` kept.
fn supervise<EB, B>(options: &Options, beside: B) -> Result<(), Error>
where
    EB: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: FnOnce(&Options) -> Result<Beside, EB>,
{
    let mut sup = Supervisor::bind(SupervisorConfig {
        processes: options.processes,
        bind: options.bind,
        listen_backlog: options.http.listen_backlog,
        shutdown_grace: options.shutdown_grace,
        start_timeout: options.worker_start_timeout,
    })?;
    let Beside { vars, notes, kept } = beside(options).map_err(|e| Error::App(e.into()))?;
    for (name, value) in vars {
        sup.env(name, value);
    }
    for note in notes {
        sup.note(note);
    }
    let ran = sup.run();
    drop(kept);
    ran
}

/// Sizes the process's pool for [`fiber_pool::blocking`]. A second server in the same
/// process (tests start several) shares the first one's pool: the same sizes are
/// fine, and other sizes are said once in the log, not an error.
fn size_blocking(cfg: &fiber_pool::BlockingConfig) -> Result<(), Error> {
    match fiber_pool::blocking::set_default(cfg.clone()) {
        Ok(()) => Ok(()),
        Err(fiber_pool::ConfigError::BlockingStarted) => {
            let running = fiber_pool::blocking::default_pool().config();
            if running != cfg {
                log::warn!(
                    target: crate::logging::app_name(),
                    "this process's blocking pool already runs with {} threads \
                     and a queue of {}; --blocking-threads and --blocking-queue apply to \
                     the first server of a process only",
                    running.threads,
                    running.queue
                );
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
