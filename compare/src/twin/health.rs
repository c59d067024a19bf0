//! `/healthz` (liveness), `/readyz` (MySQL answers) and `/hello` (no I/O at all:
//! what the stack itself costs); compare `app/health.rs`.

use axum::extract::State;

use crate::twin::{Reply, Shared};
use fiber_web::Response;
use fiberstack::app::health::{readiness, HELLO_BODY};

/// `GET /healthz`: `ok` while the server is up; outside the task-slot limit (as the
/// fiber server answers it on the connection's coroutine), labelled for the counters.
pub async fn healthz() -> axum::response::Response {
    let resp = axum::response::IntoResponse::into_response(Reply(Response::text(200, "ok")));
    crate::twin::limit::labelled(resp, fiber_web::metrics::HEALTHZ)
}

/// `GET /readyz`: 200 when MySQL answers `select 1` within a second, else 503.
pub async fn readyz(State(state): State<Shared>) -> Reply {
    let ping = tokio::time::timeout(
        fiber_mysql::pool::HEALTH_CHECK_WAIT,
        state.db.exec::<u8, _>("select 1", ()),
    )
    .await
    .unwrap_or(Err(fiber_mysql::Error::PoolTimeout {
        waited: fiber_mysql::pool::HEALTH_CHECK_WAIT,
    }));
    fiber_web::rig::readiness_response(readiness(ping.map(drop))).into()
}

/// `GET /hello`: plain text, no I/O.
pub async fn hello() -> Reply {
    Response::text(200, HELLO_BODY).into()
}
