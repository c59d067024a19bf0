//! fiber_web: an HTTP/1.x framework on which every request runs on a guarded fiber
//! (`fiber_pool`), so handlers are plain, blocking-looking code (`db.exec(..)`,
//! `http.get(..)`) whose waits yield to the may scheduler instead of blocking a thread.
//!
//! Layout, each layer using only those below it:
//! ```text
//! server.rs      accept loop, route limits, each handler on a fiber; fiber errors -> 5xx
//!   -> supervisor/ (worker processes behind one port), watchdog.rs (stalls, overflows)
//!   -> logging.rs (the logger: RUST_LOG, line format; the access and 5xx lines)
//!   -> http/ (request, response, router, connection loop, listener, client)
//!   -> config.rs (every limit, named), shutdown.rs, counters.rs (per-route counters)
//!   -> fiber_mysql (MySQL on fibers)  ->  fiber_pool (guarded fibers)  ->  may
//! ```

#![forbid(unsafe_code)]

pub mod config;
pub mod counters;
pub mod http;
pub mod logging;
pub mod server;
pub mod shutdown;
pub mod supervisor;
pub mod watchdog;
