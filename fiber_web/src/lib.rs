//! fiber_web: an HTTP/1.x framework on which every request runs on a guarded fiber
//! (`fiber_pool`), so handlers are plain, blocking-looking code (`db.exec(..)`,
//! `http.get(..)`) whose waits yield to the may scheduler instead of blocking a thread.
//! A handler's stack overflow is a 500 for that request, not the end of the process,
//! and a handler that blocks its thread is named in the log.
//!
//! ```no_run
//! use fiber_web::{App, Json, Options, Request, Response};
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
//! What an app uses is at the root ([`App`], [`Routes`], [`Request`], [`Response`],
//! [`Json`], [`IntoResponse`], [`Problem`], [`Extensions`], [`RequestId`], [`serve`],
//! [`Options`], [`Error`], ...) and in a few
//! modules: [`client`] (outgoing HTTP), [`layers`] ([`layers::Layer`] and the ones that
//! ship), [`fan_out`] (a handler's children, `?` without annotations),
//! [`config`] (every limit, named), [`status`] (status codes by name, as plain
//! `u16`s), [`metrics`] (what `/metrics` and a `/stats` route show, and an app's own
//! families), [`test`](mod@test) (requests without a socket) and [`worker`] (this
//! worker process; asking for a fresh one). Everything else is the
//! crate's own; the comparison rig reuses some of it through `rig`, which is not API.
//!
//! Layout, each layer using only those below it:
//! ```text
//! serve.rs, options.rs   one call: logging, supervisor, watchdog, signals, drain
//! app.rs, layer.rs       the app builder: routes, layers, readiness, metrics
//!   layers/              CORS, bearer tokens
//!   test.rs              an app's requests on real fibers, without a socket
//! dispatch.rs            a request: router, route limit, layers + handler on a fiber
//! fan_out.rs             a handler's children, their errors responses
//! problems.rs            the app's answers: problems rendered, request ids, default headers
//!   -> request_id.rs (ids kept from the client or made here)
//! builtin.rs             /healthz, /readyz, /metrics
//! server.rs              accept loop, one coroutine per connection
//!   -> supervisor/ (worker processes behind one port; worker.rs is this one's face),
//!      watchdog.rs (stalls, overflows), suspect.rs (a supervised worker an overflow
//!      left suspect takes no more work)
//!   -> logging.rs (the logger: RUST_LOG, line format; the access and 5xx lines)
//!   -> metrics.rs (Prometheus text from typed snapshots)
//!   -> http/ (request, response, router, connection loop, listener, client)
//!   -> config.rs (every limit, named), shutdown.rs, counters.rs (per-route counters)
//!   -> mysql.rs (MySQL errors as responses, the pool in /metrics: the `mysql` feature)
//!   -> fiber_mysql (MySQL on fibers)  ->  fiber_pool (guarded fibers)  ->  may
//! flags.rs               an app's own flags, in the framework's table and parser
//! error.rs               the crate's one error type
//! rig.rs                 re-exports for the comparison rig and the demo's tools
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The unit tests' binary runs fibers too; an app declares its own (see above).
#[cfg(test)]
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod app;
mod builtin;
pub mod config;
mod counters;
mod dispatch;
mod error;
pub mod fan_out;
mod flags;
mod http;
mod layer;
pub mod layers;
mod logging;
pub mod metrics;
#[cfg(feature = "mysql")]
mod mysql;
mod options;
mod problems;
mod request_id;
#[doc(hidden)]
pub mod rig;
mod serve;
mod server;
mod shutdown;
mod supervisor;
mod suspect;
pub mod test;
mod watchdog;
pub mod worker;

pub use app::{App, Routes};
pub use error::Error;
pub use flags::{AppArgs, AppFlags};
pub use http::client;
pub use http::html;
pub use http::status;
pub use http::{
    Extensions, Handler, Headers, IntoResponse, Json, Location, Problem, Request, Response,
};
pub use options::Options;
pub use request_id::RequestId;
pub use serve::{serve, serve_with, start, Beside, Serving, Started};
pub use shutdown::Drained;
