//! A minimal server on our HTTP layer: one route, its handler on a fiber, the stall
//! watchdog (a handler that blocks its thread is logged with its route; a stall past
//! its limit, a broken state after an overflow or too many overflows ask for a fresh
//! process), and (when asked for 2 or more processes) a supervisor that runs that many
//! copies of it behind one port, replaces one that dies or asks, and restarts them one
//! by one on SIGHUP.
//!
//! Run with: cargo run --example minimal_server            (or `-- 127.0.0.1:0` for any free port)
//!      or:  cargo run --example minimal_server -- 127.0.0.1:3001 4     (4 worker processes)
//! Then:     curl -i http://127.0.0.1:3001/hello?name=fibers
#![forbid(unsafe_code)]

use std::io;
use std::sync::Arc;
use std::time::Duration;

use fiber_web::counters::HttpStats;
use fiber_web::http::{Handler, Request, Response, Router};
use fiber_web::server::{self, App};
use fiber_web::supervisor::{self, SupervisorConfig};
use fiberstack::config::HttpLimits;

struct Greeter {
    greeting: &'static str,
}

/// Plain code that could block on may I/O; it runs on a fiber of the pool.
fn hello(state: &Greeter, req: &Request) -> Response {
    let name = req.query_param("name").unwrap_or_else(|| "world".into());
    Response::text(200, format!("{}, {name}!\n", state.greeting))
}

fn main() -> io::Result<()> {
    // First: a worker finds its supervisor and its listening socket here.
    supervisor::init();
    // Logs through `log` (RUST_LOG filters them): the supervisor's, the server's, the
    // access lines. Without a logger they are dropped.
    fiber_web::logging::init();
    // The address to listen on (else 127.0.0.1:3001), and how many processes (else 1).
    let mut args = std::env::args().skip(1);
    let addr = match args.next() {
        Some(arg) => arg.parse().map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("address {arg}: {e}"))
        })?,
        None => std::net::SocketAddr::from(([127, 0, 0, 1], 3001)),
    };
    let processes = args.next().map_or(Ok(1), |n| {
        n.parse::<usize>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("processes {n}: {e}")))
    })?;
    if let Some(done) = supervisor::supervise(SupervisorConfig::new(processes, addr)) {
        return done.map_err(io::Error::other); // this process was the supervisor
    }

    let stops = supervisor::stop_requests()?;
    // The watchdog, with the default limits (`WatchdogLimits`: --stall-warn 100 ms,
    // --stall-limit 10 s, --overflow-limit 1000); its replacement requests go to the
    // supervisor, or to the log when there is none.
    let _watchdog = fiber_web::watchdog::spawn(
        Default::default(),
        Box::new(supervisor::ask_for_replacement),
    )?;
    let fibers = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    let stats: Arc<HttpStats> = Default::default();
    let app = App {
        router: Router::<Handler<Greeter>>::new().get("/hello", "hello", hello),
        state: Arc::new(Greeter { greeting: "Hello" }),
        fibers,
        limits: Default::default(),
        stats: Arc::clone(&stats),
    };
    let server = server::spawn(
        supervisor::listener(addr)?,
        Arc::new(app),
        HttpLimits::default(),
        stats,
    )?;
    println!("listening on http://{}/hello", server.addr());
    supervisor::ready();
    stops.wait();
    server.shutdown(Duration::from_secs(5));
    Ok(())
}
