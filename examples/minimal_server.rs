//! A minimal server on our HTTP layer: one route, its handler on a fiber.
//!
//! Run with: cargo run --example minimal_server            (or `-- 127.0.0.1:0` for any free port)
//! Then:     curl -i http://127.0.0.1:3001/hello?name=fibers
#![forbid(unsafe_code)]

use std::sync::Arc;

use fiberstack::config::HttpLimits;
use fiberstack::http::{Handler, Request, Response, Router};
use fiberstack::server::{self, App};
use fiberstack::stats::HttpStats;

struct Greeter {
    greeting: &'static str,
}

/// Plain code that could block on may I/O; it runs on a fiber of the pool.
fn hello(state: &Greeter, req: &Request) -> Response {
    let name = req.query_param("name").unwrap_or_else(|| "world".into());
    Response::text(200, format!("{}, {name}!\n", state.greeting))
}

fn main() -> std::io::Result<()> {
    let fibers = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    let stats: Arc<HttpStats> = Default::default();
    let app = App {
        router: Router::<Handler<Greeter>>::new().get("/hello", "hello", hello),
        state: Arc::new(Greeter { greeting: "Hello" }),
        fibers,
        limits: Default::default(),
        stats: Arc::clone(&stats),
    };
    // The address to listen on: the first argument, else 127.0.0.1:3001.
    let addr = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("address {arg}: {e}"),
            )
        })?,
        None => std::net::SocketAddr::from(([127, 0, 0, 1], 3001)),
    };
    let listener = fiberstack::http::listener::bind(addr)?;
    let server = server::spawn(listener, Arc::new(app), HttpLimits::default(), stats)?;
    println!("listening on http://{}/hello", server.addr());
    server.wait();
    Ok(())
}
