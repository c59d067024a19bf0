//! The `fiberstack` binary: the demo server and the tools around it. It reads the
//! command, parses the flags (the framework's and the demo's, one table:
//! `fiberstack::flags`) and runs the library: `serve` (`fiberstack::start::serve`),
//! `stack-report` (`stack_report.rs`), `mariadb`.

#![forbid(unsafe_code)]

/// Every allocation first makes sure the fiber it runs on (if any) has stack left for
/// the allocator: an overflow then strikes before malloc takes its arena lock, never
/// inside it (STACK_SIZES.md). An app declares it once, in its binary.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod stack_report;

use std::process::ExitCode;

use fiber_mysql::launcher::{LaunchConfig, MariaDb};
use fiber_web::Options;
use fiberstack::Error;

const USAGE: &str = "\
The async-rails demo in Rust: every request on a guarded fiber

Usage: fiberstack <COMMAND> [OPTIONS]

Commands:
  serve          Run the demo server (a private MariaDB unless --database-url is given)
  stack-report   Start the demo, run every route on fibers, and print each route's stack use
  mariadb        Start a private throwaway MariaDB, print its URL, and keep it until
                 Ctrl-C/SIGTERM (--max-connections N; --control: also take `kill` and
                 `start` lines on stdin, and stop at its end)

`fiberstack serve --help` lists the flags of serve and stack-report. The comparison rig
(the async twin, raw may_minihttp, the bench) is the `compare` binary.";

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let command = if args.is_empty() {
        String::new()
    } else {
        args.remove(0)
    };
    let wants_help = args.iter().any(|a| a == "--help" || a == "-h");
    let result = match command.as_str() {
        "serve" | "stack-report" if wants_help => {
            println!(
                "Usage: fiberstack {command} [OPTIONS]\n\n{}",
                Options::help_with(&fiberstack::flags::flags())
            );
            Ok(())
        }
        "serve" => fiberstack::flags::parse(args)
            .map_err(Error::from)
            .and_then(fiberstack::start::serve),
        "stack-report" => fiberstack::flags::parse(args)
            .map_err(Error::from)
            .and_then(|cfg| stack_report::run(&cfg)),
        "mariadb" => mariadb(&args),
        "--version" | "-V" => {
            println!("fiberstack {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        "" | "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(Error::Usage(format!(
            "unknown command '{other}': use serve, stack-report or mariadb (fiberstack --help)"
        ))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Why the command failed is never filtered away: with RUST_LOG=off (or
            // before the logger is installed) it still goes to stderr, plainly.
            if log::log_enabled!(log::Level::Error) {
                log::error!(target: fiberstack::config::APP_NAME, "{e}");
            } else {
                eprintln!("fiberstack: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `fiberstack mariadb [--max-connections N] [--control]`: a private MariaDB for tests
/// or experiments, its URL on stdout, stopped on Ctrl-C or SIGTERM. With `--control`
/// it also obeys stdin, a line at a time, for outage drills (`scripts/soak`): `kill`
/// SIGKILLs `mariadbd` as a crash would (answered `stopped`), `start` starts it again on
/// the same port and data and waits until it answers (answered `started PID`), and the
/// end of stdin stops it like SIGTERM, so that it never outlives whoever drives it.
fn mariadb(args: &[String]) -> Result<(), Error> {
    let mut cfg = LaunchConfig::default();
    let mut control = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match (arg.as_str(), rest.as_slice().first()) {
            ("--max-connections", Some(n)) => {
                cfg.max_connections = n.parse().map_err(|_| {
                    Error::Usage(format!("--max-connections: '{n}' is not a whole number"))
                })?;
                rest.next();
            }
            ("--control", _) => control = true,
            _ => {
                return Err(Error::Usage(
                    "mariadb takes only --max-connections N and --control".into(),
                ))
            }
        }
    }
    let stops =
        fiber_web::rig::stop_requests().map_err(|e| Error::io("install signal handlers", e))?;
    let mut db = MariaDb::start(cfg).map_err(fiberstack::setup::db_failed(
        fiberstack::error::DbStep::PrivateServer,
    ))?;
    println!("{}", db.url());
    if !control {
        stops.wait();
        return Ok(());
    }
    // Stdin's lines and the stop signals, in the order they come, on one channel.
    let (tx, commands) = std::sync::mpsc::channel::<Option<String>>();
    let stdin_tx = tx.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if stdin_tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = stdin_tx.send(None);
    });
    std::thread::spawn(move || {
        stops.wait();
        let _ = tx.send(None);
    });
    while let Ok(Some(command)) = commands.recv() {
        let done = match command.trim() {
            "kill" => db.kill_server().map(|()| "stopped".to_string()),
            "start" => db.start_server().map(|()| format!("started {}", db.pid())),
            other => {
                println!("unknown command '{other}': use kill or start");
                continue;
            }
        };
        println!(
            "{}",
            done.map_err(fiberstack::setup::db_failed(
                fiberstack::error::DbStep::PrivateServer,
            ))?
        );
    }
    Ok(())
}
