//! `/healthz` (liveness), `/readyz` (MySQL answers) and `/hello` (no I/O at all:
//! what the stack itself costs); compare `app/health.rs`.

use axum::extract::State;

use crate::app::health::{readiness, HELLO_BODY};
use crate::twin::{Reply, Shared};
use fiber_web::http::Response;

/// `GET /healthz`: `ok` while the server is up.
pub async fn healthz() -> Reply {
    Response::text(200, "ok").into()
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
    readiness(ping.map(drop)).into()
}

/// `GET /hello`: plain text, no I/O.
pub async fn hello() -> Reply {
    Response::text(200, HELLO_BODY).into()
}
