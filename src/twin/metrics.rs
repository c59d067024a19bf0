//! `GET /metrics` on the async twin: the shared renderer (`app/metrics.rs`) over the
//! twin's `/stats` snapshot. Served outside the task-slot limit, as on fibers it takes
//! no fiber: a scrape answers even when every slot is busy.

use axum::extract::State;

use crate::app::metrics::{render, response};
use crate::twin::limit::labelled;
use crate::twin::{Reply, Shared};

/// `GET /metrics` in the text exposition format, labelled `metrics` for the counters.
pub async fn metrics(State(state): State<Shared>) -> axum::response::Response {
    let snapshot = crate::twin::stats::snapshot(&state);
    let text = render("async", &snapshot, &state.http_stats);
    labelled(
        axum::response::IntoResponse::into_response(Reply(response(text))),
        "metrics",
    )
}
