//! The smallest app: `GET /hello` answers `Hello, World!`, with `--layers N` no-op
//! layers around it (default 0), to measure what routing and a layer cost per request
//! (`scripts/dispatch-cost` runs it).
//!
//! Run with: cargo run --release -p fiber_web --example hello -- --bind 127.0.0.1:3006 --layers 1
//! Then:     curl -i localhost:3006/hello
#![forbid(unsafe_code)]

use fiber_web::{App, AppFlags, Error, Options, Request};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

fn main() -> Result<(), Error> {
    let flags = AppFlags::new().flag("layers", "N", "no-op layers around /hello", Some("0"));
    let (options, args) = Options::from_env_and_args_with(&flags)?;
    let mut app = App::new(()).get("/hello", |_: &(), _: &Request| "Hello, World!");
    for _ in 0..args.get::<usize>("layers")? {
        app = app.layer_fn(|state, req, next| next.run(state, req));
    }
    app.serve(options)
}
