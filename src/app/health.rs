//! `/healthz` (liveness), `/readyz` (readiness: MySQL answers) and `/hello` (no I/O
//! at all: what the stack itself costs).

use crate::app::{db_conn_within, AppState};
use fiber_web::http::{Request, Response};

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

/// `GET /readyz`: 200 `ready` when a pooled MySQL connection answers a ping within
/// a second, else 503 with the reason (database down, or every connection busy).
/// `/healthz` stays 200 meanwhile: the process is alive, it just cannot serve queries.
pub fn readyz(state: &AppState, _req: &Request) -> Response {
    let wait = fiber_mysql::pool::HEALTH_CHECK_WAIT;
    readiness(db_conn_within(&state.db, wait).and_then(|mut conn| conn.ping()))
}

/// The `/readyz` response for the outcome of a database ping (shared with the twin).
pub fn readiness(ping: Result<(), fiber_mysql::Error>) -> Response {
    match ping {
        Ok(()) => Response::text(200, "ready"),
        Err(e) => Response::error(503, format!("not ready: database unavailable: {e}"))
            .header("Retry-After", "1"),
    }
}
