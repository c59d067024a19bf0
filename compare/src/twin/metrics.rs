//! `GET /metrics` on the async twin: the framework's renderer (`fiber_web::metrics`)
//! over the twin's typed snapshot, with the same families as the fiber server's. Served
//! outside the task-slot limit, as on fibers it takes no fiber: a scrape answers even
//! when every slot is busy.

use axum::extract::State;

use crate::twin::limit::labelled;
use crate::twin::{Reply, Shared};
use fiber_web::metrics::{response, Exposition, ServerSnapshot};

/// `GET /metrics` in the text exposition format, labelled `metrics` for the counters.
pub async fn metrics(State(state): State<Shared>) -> axum::response::Response {
    let pool = state.limit.handler_pool();
    let mut out = Exposition::new();
    out.server(&ServerSnapshot {
        runtime: "async",
        pool: &pool,
        http: &state.http_stats,
    });
    out.db_pool(&state.db.stats());
    out.http_client(&state.http.stats());
    labelled(
        axum::response::IntoResponse::into_response(Reply(response(out.into_text()))),
        "metrics",
    )
}
