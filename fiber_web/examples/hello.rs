//! The smallest app: `GET /hello` answers `Hello, World!`, with `--layers N` no-op
//! layers around it (default 0), to measure what routing and a layer cost per request
//! (`scripts/dispatch-cost` runs it).
//!
//! Run with: cargo run --release -p fiber_web --example hello -- --bind 127.0.0.1:3006 --layers 1
//! Then:     curl -i localhost:3006/hello
#![forbid(unsafe_code)]

use fiber_web::http::Request;
use fiber_web::{App, Error, Options};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

fn main() -> Result<(), Error> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let layers = match args.iter().position(|a| a == "--layers") {
        Some(at) => {
            let n = args.get(at + 1).and_then(|n| n.parse::<usize>().ok());
            let n = n.ok_or_else(|| Error::Option {
                name: "--layers".into(),
                why: "needs a whole number: --layers N".into(),
            })?;
            args.drain(at..at + 2);
            n
        }
        None => 0,
    };
    let mut options = Options::from_env(|name| std::env::var(name).ok())?;
    options.apply_args(args)?;
    let mut app = App::new(()).get("/hello", |_: &(), _: &Request| "Hello, World!");
    for _ in 0..layers {
        app = app.layer_fn(|state, req, next| next.run(state, req));
    }
    app.serve(options)
}
