//! A minimal server on the framework: one route, its handler on a fiber, served by one
//! call that sets up the rest (logging, a supervisor that replaces a broken worker,
//! the stall watchdog, signals, graceful drain, /healthz, /readyz, /metrics).
//!
//! Run with: cargo run --example minimal_server -- --bind 127.0.0.1:3001
//!      or:  cargo run --example minimal_server -- --bind 127.0.0.1:3001 --processes 4
//! Then:     curl -i http://127.0.0.1:3001/hello?name=fibers
#![forbid(unsafe_code)]

use fiber_web::{App, Options, Request};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

struct Greeter {
    greeting: &'static str,
}

/// Plain code that could block on may I/O; it runs on a fiber of the pool.
fn hello(state: &Greeter, req: &Request) -> String {
    let name = req.query_param("name").unwrap_or_else(|| "world".into());
    format!("{}, {name}!\n", state.greeting)
}

fn main() -> Result<(), fiber_web::Error> {
    App::new(Greeter { greeting: "Hello" })
        .get("/hello", hello)
        .serve(Options::from_env_and_args()?)
}
