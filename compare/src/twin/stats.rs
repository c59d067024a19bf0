//! `GET /stats`: the task limit, the MySQL pool, the HTTP client and server, uptime;
//! the same top-level shape as `app/stats.rs`, with `tasks` where fibers have `fibers`.

use axum::extract::State;
use serde::Serialize;

use crate::twin::{Reply, Shared};
use fiber_web::client::ClientStats;
use fiber_web::metrics::HandlerPool;
use fiber_web::Response;
use fiberstack::app::stats::DbStats;

/// `GET /stats` as JSON.
pub async fn stats(State(state): State<Shared>) -> Reply {
    Response::json(200, &snapshot(&state)).into()
}

/// Everything `/stats` shows.
#[derive(Serialize)]
pub struct Snapshot {
    /// Always `async`.
    pub runtime: &'static str,
    /// Seconds since the server started.
    pub uptime_secs: f64,
    /// Which process answered.
    pub worker: serde_json::Value,
    /// The task-slot limit, per route too.
    pub tasks: HandlerPool,
    /// The MySQL pool.
    pub db: DbStats,
    /// The outgoing HTTP client.
    pub http_client: ClientStats,
    /// The HTTP server's connections and responses.
    pub http_server: serde_json::Value,
}

/// The snapshot now.
pub fn snapshot(state: &Shared) -> Snapshot {
    Snapshot {
        runtime: "async",
        uptime_secs: state.http_stats.uptime_secs(),
        worker: fiber_web::worker::describe(),
        tasks: state.limit.handler_pool(),
        db: DbStats::from(&state.db.stats()),
        http_client: state.http.stats(),
        http_server: state.http_stats.to_json(),
    }
}
