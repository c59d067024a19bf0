//! `/healthz` (liveness) and `/hello` (no I/O at all: what the stack itself costs).

use crate::app::AppState;
use crate::http::{Request, Response};

/// The body of `/hello`.
pub const HELLO_BODY: &str = "Hello, World!";

/// `GET /healthz`: `ok` while the server is up.
pub fn healthz(_state: &AppState, _req: &Request) -> Response {
    Response::text(200, "ok")
}

/// `GET /hello`: plain text, no I/O.
pub fn hello(_state: &AppState, _req: &Request) -> Response {
    Response::text(200, HELLO_BODY)
}
