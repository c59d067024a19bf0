//! Readiness (MySQL answers: the framework's `/readyz` asks [`ready`]) and `/hello`
//! (no I/O at all: what the stack itself costs).

use crate::app::AppState;
use fiber_web::{Request, Response};

/// The body of `/hello`.
pub const HELLO_BODY: &str = "Hello, World!";

/// `GET /hello`: plain text, no I/O.
pub fn hello(_state: &AppState, _req: &Request) -> Response {
    Response::text(200, HELLO_BODY)
}

/// Whether the demo can serve (`GET /readyz`): a pooled MySQL connection answers a
/// ping within a second; else why not (database down, or every connection busy).
/// `/healthz` stays 200 meanwhile: the process is alive, it just cannot serve queries.
pub fn ready(state: &AppState) -> Result<(), String> {
    let wait = fiber_mysql::pool::HEALTH_CHECK_WAIT;
    readiness(
        state
            .db
            .checkout_within(wait)
            .and_then(|mut conn| conn.ping()),
    )
}

/// The readiness of a database ping's outcome (shared with the twin).
pub fn readiness(ping: Result<(), fiber_mysql::Error>) -> Result<(), String> {
    ping.map_err(|e| format!("database unavailable: {e}"))
}
