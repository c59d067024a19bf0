//! `/healthz` (liveness) and `/hello` (no I/O at all: what the stack itself costs);
//! compare `app/health.rs`.

use crate::app::health::HELLO_BODY;
use crate::http::Response;

/// `GET /healthz`: `ok` while the server is up.
pub async fn healthz() -> Response {
    Response::text(200, "ok")
}

/// `GET /hello`: plain text, no I/O.
pub async fn hello() -> Response {
    Response::text(200, HELLO_BODY)
}
