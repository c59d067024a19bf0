//! `GET /stats`: the task limit, the MySQL pool, the HTTP client and server, uptime;
//! the same top-level shape as `app/stats.rs`, with `tasks` where fibers have `fibers`.

use axum::extract::State;

use crate::twin::{Reply, Shared};
use fiber_web::http::Response;

/// `GET /stats` as JSON.
pub async fn stats(State(state): State<Shared>) -> Reply {
    Response::json(200, &snapshot(&state)).into()
}

/// Everything `/stats` shows.
pub fn snapshot(state: &Shared) -> serde_json::Value {
    serde_json::json!({
        "runtime": "async",
        "uptime_secs": state.http_stats.uptime_secs(),
        "worker": fiber_web::supervisor::describe(),
        "tasks": state.limit.to_json(),
        "db": state.db.to_json(),
        "http_client": state.http.to_json(),
        "http_server": state.http_stats.to_json(),
    })
}
