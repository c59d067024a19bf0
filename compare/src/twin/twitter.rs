//! `/twitter`: a sub-router mounted at a prefix, as in `app/twitter.rs`, which owns the
//! decoding and the HTML rendering.

use axum::extract::State;
use axum::routing::get;
use axum::Router;

use crate::twin::{limited, Reply, Shared};
use fiberstack::app::twitter::page;

/// The sub-app's routes, written without knowing where they are mounted.
pub fn router(state: &Shared) -> Router<Shared> {
    Router::new().route("/", limited(state, "twitter", get(index)))
}

/// `GET /twitter`: the upstream's texts, HTML-escaped, joined by `</br>`.
pub async fn index(State(state): State<Shared>) -> Reply {
    page(&state.upstream, state.http.get(&state.upstream).await).into()
}
