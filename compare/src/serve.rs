//! `compare serve --runtime async|minihttp`: the demo's routes on the async twin or raw
//! may_minihttp, with the demo's flags (`fiberstack::flags`, one table with the
//! framework's) and one more, `--runtime`. The twin runs under fiber_web's supervisor
//! as the fiber server does, sharing one private MariaDB; may_minihttp binds its own
//! socket and serves alone.

use fiber_web::rig::{self, StopRequests, Supervisor, SupervisorConfig};
use fiber_web::{AppFlags, Options};
use fiberstack::config::ServeConfig;
use fiberstack::setup::BESIDE_MARIADB_VAR;

use compare::Runtime;

/// The demo's flags and `--runtime`.
fn flags() -> AppFlags {
    fiberstack::flags::flags().flag(
        "runtime",
        "async|minihttp",
        "async (the tokio + axum twin) or minihttp (stock may_minihttp on plain may: the \
         bench's raw baseline); the fiber server is `fiberstack serve`",
        Some("async"),
    )
}

/// Parse `args` (after `serve`) and serve until told to stop.
pub fn run(args: Vec<String>) -> Result<(), compare::Error> {
    let flags = flags();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "Usage: compare serve [OPTIONS]\n\n{}",
            Options::help_with(&flags)
        );
        return Ok(());
    }
    let (web, values) = Options::parse(&flags, args, |name| std::env::var(name).ok())?;
    fiber_web::rig::set_app_name(&web.name);
    fiber_web::rig::init_logging();
    let runtime: Runtime = values.get("runtime")?;
    let mut cfg = fiberstack::flags::config(web, &values)?;
    if fiber_web::worker::current().is_some() {
        cfg.beside_mariadb = std::env::var(BESIDE_MARIADB_VAR).ok();
    }
    serve(runtime, &cfg)
}

fn serve(runtime: Runtime, cfg: &ServeConfig) -> Result<(), compare::Error> {
    if runtime == Runtime::Fibers {
        return Err(
            "the fiber server is `fiberstack serve`: use --runtime async or minihttp".into(),
        );
    }
    if runtime == Runtime::Minihttp && cfg.web.processes > 1 {
        return Err(
            "--processes needs --runtime async: stock may_minihttp binds its own socket and \
             cannot serve an inherited one"
                .into(),
        );
    }
    if fiber_web::worker::current().is_none() {
        match unsupervised_why(runtime, cfg) {
            None => return supervise(cfg),
            Some(why) => log::warn!(
                target: fiber_web::rig::app_name(),
                "no supervisor ({why}): a worker that hangs on a lock a stack overflow left \
                 held, or asks to be replaced, cannot be replaced; restart it from outside"
            ),
        }
    }
    let stops =
        rig::stop_requests().map_err(|e| fiberstack::Error::io("install signal handlers", e))?;
    let drained = match runtime {
        Runtime::Minihttp => return serve_minihttp(cfg, &stops),
        _ => {
            let running = compare::twin::start(cfg)?;
            fiber_web::rig::banner(&running.banner(cfg));
            rig::ready();
            stopping(&stops.wait(), running.server.stop_state().in_flight(), cfg);
            running.shutdown(cfg.web.shutdown_grace)
        }
    };
    if drained.connections_left > 0 {
        log::warn!(
            target: fiber_web::rig::app_name(),
            "{} connections were still open after the grace period",
            drained.connections_left
        );
    }
    log::info!(target: fiber_web::rig::app_name(), "stopped");
    Ok(())
}

/// Why this process serves without a supervisor, if it does: it was told to, or its
/// runtime cannot serve an inherited socket.
fn unsupervised_why(runtime: Runtime, cfg: &ServeConfig) -> Option<&'static str> {
    if !cfg.web.supervise {
        Some("--supervisor off")
    } else if runtime == Runtime::Minihttp {
        Some("--runtime minihttp: stock may_minihttp binds its own socket and cannot serve an inherited one")
    } else {
        None
    }
}

/// The supervisor: bind, start the one private MariaDB the workers share (sized for
/// all their pools plus one replacement's), run the workers, and stop MariaDB last.
fn supervise(cfg: &ServeConfig) -> Result<(), compare::Error> {
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
    let db = fiberstack::setup::database(&all_pools)?;
    if let Some(mariadb) = &db.mariadb {
        // The environment, not argv: the URL holds the password.
        sup.env("DATABASE_URL", mariadb.url());
        sup.env(BESIDE_MARIADB_VAR, mariadb.pid().to_string());
    }
    sup.note(format!("MySQL: {}", db.db_where));
    let result = sup.run();
    drop(db);
    log::info!(target: fiber_web::rig::app_name(), "stopped");
    Ok(result?)
}

/// `serve --runtime minihttp`: say which flags it ignores, serve until told to stop,
/// then stop MySQL. Open connections are cut: may_minihttp has no graceful shutdown.
fn serve_minihttp(cfg: &ServeConfig, stops: &StopRequests) -> Result<(), compare::Error> {
    for line in compare::mini::ignored_flags(cfg) {
        log::warn!(target: fiber_web::rig::app_name(), "minihttp: {line}");
    }
    let running = compare::mini::start(cfg)?;
    fiber_web::rig::banner(&running.banner(cfg));
    let why = stops.wait();
    log::info!(
        target: fiber_web::rig::app_name(),
        "{why}; minihttp has no graceful shutdown, open connections are cut"
    );
    running.shutdown();
    Ok(())
}

fn stopping(why: &str, in_flight: usize, cfg: &ServeConfig) {
    log::info!(
        target: fiber_web::rig::app_name(),
        "{why}: finishing {in_flight} in-flight requests (up to {:?})",
        cfg.web.shutdown_grace
    );
}
