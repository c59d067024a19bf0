//! fiberstack: the async-rails demo in Rust. Every request runs on a guarded fiber
//! (`fiber_pool`), and plain blocking-looking code (`db.exec("select sleep(?)")`,
//! `http.get(url)`) yields to the may scheduler instead of blocking a thread.
//!
//! The library is the framework and the demo built on it; the tools (`stack-report`,
//! `bench`) and the command line live in the binary, `src/bin/fiberstack/`.
//!
//! Layout, each layer using only those below it (`tests/source_rules.rs` keeps the
//! directories to it):
//! ```text
//! binary: src/bin/fiberstack/  cli.rs (flags -> ServeConfig), stack_report.rs, bench/
//!   -> start.rs (fibers, MySQL, schema, listener)  |  twin/start.rs (the async twin's)
//!        -> setup.rs (what every start-up shares: the MySQL server, own URLs)
//!   -> server.rs (accept loop, route limits,    |  twin/ (tokio + axum: server, limit, db,
//!      handlers on fibers; fiber errors -> 5xx) |  client, one file per route group)
//!   -> mini/ (`--runtime minihttp`: stock may_minihttp, the bench's raw baseline)
//!   -> stack_use.rs (each route's fiber stack use: for stack-report and tests/stack.rs)
//!   -> logging.rs (the logger: RUST_LOG, line format; the access and 5xx lines)
//!   -> app/ (one file per route group; the twin shares its pure pieces)
//!   -> supervisor/ (worker processes behind one port: the supervisor, the worker's
//!                   side, the inherited listening socket)
//!   -> http/ (request, response, router, the handler type, the refusal 503s, query
//!            strings, HTML escaping, connection loop, listener, client)
//!   -> config.rs (every limit, named), shutdown.rs, stats.rs, watchdog.rs (stalls)
//!   -> fiber_mysql (MySQL client, pool, private MariaDB)  ->  fiber_pool (guarded fibers)  ->  may
//! ```

#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod error;
pub mod mini;
pub mod setup;
pub mod stack_use;
pub mod start;
pub mod twin;

pub use error::Error;
