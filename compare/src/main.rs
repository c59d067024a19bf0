//! The `compare` binary: the demo's routes on the async twin or raw may_minihttp
//! (`serve --runtime`), the tools that measure them against the fiber server
//! (`bench`, `cancel-report`), and the soak of the fiber server (`soak`). It parses the
//! command line and calls the library.

#![forbid(unsafe_code)]

/// The fiber server's allocator (the demo's routes run on fibers in `cancel-report`, and
/// may_minihttp's coroutines allocate too): an overflow never strikes inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod bench;
mod cancel_report;
mod serve;
mod soak;
mod tfb_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "compare",
    version,
    about = "The demo's twin and raw may_minihttp, and the tools that measure them against fibers",
    after_help = "compare serve --runtime async|minihttp [the flags of fiberstack serve]: \
                  the demo's routes on the async twin or raw may_minihttp \
                  (compare serve --help lists the flags)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure fibers, the async twin and raw may_minihttp, pinned apart from ab and wrk.
    Bench(bench::BenchArgs),
    /// Start both runtimes in turn, against a private MariaDB in each thread mode, and
    /// measure what clients that leave cost them: the pool's connections after 20
    /// leave, and how soon one, or twenty at once, come back (median, p99).
    CancelReport {
        /// Rounds of one client leaving, and as many of 20 leaving at once, per runtime
        /// and server.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        rounds: u64,
        /// The private MariaDB's thread mode: both (one server each, in turn),
        /// pool-of-threads or one-thread-per-connection; ignored with --database-url.
        #[arg(long, default_value = "both")]
        thread_handling: cancel_report::Modes,
        /// Flags of `fiberstack serve` for both servers (after `--`).
        #[arg(last = true)]
        serve: Vec<String>,
    },
    /// The demo as a user starts it, every fault at once for minutes: nothing lost that
    /// a fault does not explain, nothing growing (scripts/soak runs it).
    Soak(soak::SoakArgs),
    /// TechEmpower's six tests on axum + mysql_async or raw may_minihttp + fiber_mysql,
    /// on the database DATABASE_URL names (the fiber_web one is examples/techempower).
    Tfb(tfb_cmd::TfbArgs),
}

fn main() -> ExitCode {
    // First, before any thread: a worker's identity and inherited socket are in the
    // environment, which this reads and cleans.
    fiber_web::rig::init_supervisor();
    let mut args: Vec<String> = std::env::args().collect();
    let result = if args.get(1).map(String::as_str) == Some("serve") {
        serve::run(args.split_off(2))
    } else {
        let cli = Cli::parse_from(args);
        fiber_web::rig::set_app_name(fiberstack::config::APP_NAME);
        fiber_web::rig::init_logging();
        match cli.command {
            Command::Bench(args) => bench::run(&args).map_err(compare::Error::from),
            Command::CancelReport {
                rounds,
                thread_handling,
                serve,
            } => fiberstack::flags::parse(serve)
                .map_err(compare::Error::from)
                .and_then(|cfg| cancel_report::run(&cfg, rounds as usize, thread_handling)),
            Command::Soak(args) => soak::run(&args),
            Command::Tfb(args) => tfb_cmd::run(&args).map_err(compare::Error::from),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Why the command failed is never filtered away: with RUST_LOG=off it
            // still goes to stderr, plainly.
            if log::log_enabled!(log::Level::Error) {
                log::error!(target: fiber_web::rig::app_name(), "{e}");
            } else {
                eprintln!("{}: {e}", fiber_web::rig::app_name());
            }
            ExitCode::FAILURE
        }
    }
}
