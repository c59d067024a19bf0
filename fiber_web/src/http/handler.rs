//! The handler type: what a route of the fiber server runs.
//!
//! A handler is a plain function of the state its routes share and the request, run on
//! a guarded fiber stack. What it may and may not do there (STACK_SIZES.md has the why
//! and the figures):
//! - It may call blocking-looking may I/O (`fiber_mysql`, `http::client`): the waits
//!   yield to the scheduler. It must not call blocking std I/O or `std::thread::sleep`
//!   (they stall a whole worker thread), nor keep per-request state in a thread-local
//!   (fibers move between threads).
//! - A stack overflow abandons its frames without unwinding: the client gets a 500 and
//!   the server goes on, but locks those frames held stay held. Take MySQL connections
//!   through `app::db_conn`, locks through `fiber_pool::lock` (or `reserve_stack` first),
//!   and do not print on a fiber: return what to log (the server logs every 5xx).
//! - Keep big buffers on the heap and recursion bounded; measure with
//!   `fiberstack stack-report` or `/stats`, and keep 4x headroom.

use crate::http::{Request, Response};

/// A route handler: plain, blocking-looking code that runs on a fiber.
pub type Handler<S> = fn(&S, &Request) -> Response;
