//! fiberstack: the async-rails demo in Rust. Every request runs on a guarded fiber
//! (`fiber_pool`), and plain blocking-looking code (`db.exec("select sleep(?)")`,
//! `http.get(url)`) yields to the may scheduler instead of blocking a thread.
//!
//! The demo is an ordinary app on the framework (`fiber_web`): its routes, its flags,
//! its start-up. The binary (`src/bin/fiberstack/`) only reads the command and calls
//! this library; the comparison rig (the async twin, raw may_minihttp, the bench) is
//! the `compare` crate, which uses this library's pure pieces.
//!
//! Layout, each layer using only those below it (`tests/source_rules.rs` checks that
//! every module named here exists and that every module is named):
//! ```text
//! binary: src/bin/fiberstack/   main.rs (the commands), stack_report.rs
//!   -> start.rs    serve (fiber_web::serve_with, the private MariaDB beside the
//!                  workers), start (the same app in this process), build (the app)
//!   -> flags.rs    the demo's flags beside the framework's -> config.rs
//!   -> setup.rs    what every start-up shares: the MySQL server, own URLs
//!   -> stack_use.rs  each route's fiber stack use (stack-report, tests/stack.rs)
//!   -> app/        the routes, one file per route group
//!   -> config.rs, error.rs
//!   -> fiber_web (the framework) -> fiber_mysql -> fiber_pool -> may
//! ```

#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod error;
pub mod flags;
pub mod setup;
pub mod stack_use;
pub mod start;

pub use error::Error;
