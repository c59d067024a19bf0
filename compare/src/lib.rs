//! The comparison rig: the demo's routes on two other runtimes, and the tools that
//! measure all three side by side. Nothing here is part of the framework or the demo:
//! `fiberstack` builds none of tokio, axum, hyper or may_minihttp (tests/deps.rs).
//!
//! Layout, each layer using only those below it:
//! ```text
//! binary: src/main.rs    serve.rs (serve --runtime async|minihttp), tfb_cmd.rs (tfb),
//!                        bench/, cancel_report.rs, soak/ (the demo as a user runs it,
//!                        under every fault at once: scripts/soak)
//!   -> twin/ (tokio + axum + mysql_async: server, limit, db, client, one file per
//!            route group, beside the demo's fiberstack::app file by file)
//!   -> mini/ (stock may_minihttp on may: the bench's raw baseline)
//!   -> tfb/ (TechEmpower's six tests on axum and on raw may_minihttp)
//!   -> runtime.rs (which server)
//!   -> fiberstack (the demo: its config, flags, app's pure pieces, set-up)
//! ```

#![forbid(unsafe_code)]

pub mod mini;
pub mod runtime;
pub mod tfb;
pub mod twin;

pub use runtime::Runtime;

/// The rig's error: whatever failed (the framework's, the demo's, MySQL's, an I/O
/// error), kept with its `source()` chain until `main` prints it.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
