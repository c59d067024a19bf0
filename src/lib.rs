//! fiberstack: the async-rails demo in Rust. Every request runs on a guarded fiber
//! (`fiber_pool`), and plain blocking-looking code (`db.exec("select sleep(?)")`,
//! `http.get(url)`) yields to the may scheduler instead of blocking a thread.
//!
//! Layout, each layer using only those below it:
//! ```text
//! cli.rs (flags -> ServeConfig)  ->  start.rs (fibers, MySQL, schema, listener)
//!   -> server.rs (accept loop, routing, handlers on fibers; fiber errors -> 5xx)
//!   -> app/ (one file per route group: widgets, twitter sub-app, upstream, deep, stats, health)
//!   -> http/ (request parsing, responses, router, connection loop, listener, client)
//!   -> fiber_mysql (MySQL client, pool, private MariaDB)  ->  fiber_pool (guarded fibers)  ->  may
//! ```
//! `config.rs` names every limit; `shutdown.rs` and `stats.rs` are shared by the layers.

#![forbid(unsafe_code)]

/// Every allocation first makes sure the fiber it runs on (if any) has stack left for
/// the allocator: an overflow then strikes before malloc takes its arena lock, never
/// inside it (a lock held by abandoned frames would deadlock the worker; see
/// STACK_SIZES.md). Declared here so that the binary, the tests and the examples all
/// get it.
#[global_allocator]
static ALLOCATOR: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

pub mod app;
pub mod config;
pub mod http;
pub mod server;
pub mod setup;
pub mod shutdown;
pub mod stack_use;
pub mod start;
pub mod stats;
pub mod twin;
