//! fiber_web: an HTTP/1.x framework on which every request runs on a guarded fiber
//! (`fiber_pool`), so handlers are plain, blocking-looking code (`db.exec(..)`,
//! `http.get(..)`) whose waits yield to the may scheduler instead of blocking a thread.
//! A handler's stack overflow is a 500 for that request, not the end of the process,
//! and a handler that blocks its thread is named in the log.
//!
//! ```no_run
//! use fiber_web::http::{Json, Request, Response};
//! use fiber_web::{App, Options};
//!
//! fn show(_: &(), req: &Request) -> Result<Json<u64>, Response> {
//!     Ok(Json(req.param("id")?))
//! }
//!
//! fn main() -> Result<(), fiber_web::Error> {
//!     App::new(()).get("/things/{id}", show).serve(Options::from_env_and_args()?)
//! }
//! ```
//!
//! An app installs the allocator the fiber pool needs, once, in its binary:
//! `#[global_allocator] static ALLOC: fiber_pool::FiberSafeAlloc =
//! fiber_pool::FiberSafeAlloc;` (an overflow then never strikes inside malloc).
//!
//! Layout, each layer using only those below it:
//! ```text
//! serve.rs, options.rs   one call: logging, supervisor, watchdog, signals, drain
//! app.rs, layer.rs       the app builder: routes, layers, readiness, metrics
//!   layers/              CORS, request ids, bearer tokens
//!   test_client.rs       an app's requests on real fibers, without a socket
//! dispatch.rs            a request: router, route limit, layers + handler on a fiber
//! builtin.rs             /healthz, /readyz, /metrics
//! server.rs              accept loop, one coroutine per connection
//!   -> supervisor/ (worker processes behind one port), watchdog.rs (stalls, overflows)
//!   -> logging.rs (the logger: RUST_LOG, line format; the access and 5xx lines)
//!   -> metrics.rs (Prometheus text from typed snapshots)
//!   -> http/ (request, response, router, connection loop, listener, client)
//!   -> config.rs (every limit, named), shutdown.rs, counters.rs (per-route counters)
//!   -> fiber_mysql (MySQL on fibers)  ->  fiber_pool (guarded fibers)  ->  may
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The unit tests' binary runs fibers too; an app declares its own (see above).
#[cfg(test)]
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

pub mod app;
mod builtin;
pub mod config;
pub mod counters;
mod dispatch;
mod error;
mod flags;
pub mod http;
pub mod layer;
pub mod layers;
pub mod logging;
pub mod metrics;
pub mod options;
mod serve;
pub mod server;
pub mod shutdown;
pub mod supervisor;
pub mod test_client;
pub mod watchdog;

pub use app::{App, Routes};
pub use builtin::{readiness_response, HEALTHZ, METRICS, READYZ};
pub use error::Error;
pub use flags::{AppArgs, AppFlags};
pub use layer::{Layer, Next};
pub use options::Options;
pub use serve::{client_address, serve, serve_with, start, Beside, Serving, Started};
pub use test_client::{TestClient, TestResponse};
