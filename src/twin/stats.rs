//! `GET /stats`: the task limit, the MySQL pool, the HTTP client and server, uptime;
//! the same top-level shape as `app/stats.rs`, with `tasks` where fibers have `fibers`.

use axum::extract::State;

use crate::http::Response;
use crate::twin::Shared;

/// `GET /stats` as JSON.
pub async fn stats(State(state): State<Shared>) -> Response {
    Response::json(200, &snapshot(&state))
}

/// Everything `/stats` shows.
pub fn snapshot(state: &Shared) -> serde_json::Value {
    serde_json::json!({
        "runtime": "async",
        "uptime_secs": state.http_stats.uptime_secs(),
        "worker": crate::supervisor::describe(),
        "tasks": state.limit.to_json(),
        "db": state.db.to_json(),
        "http_client": state.http.to_json(),
        "http_server": state.http_stats.to_json(),
    })
}
