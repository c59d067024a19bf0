//! `/twitter`: a sub-router mounted at a prefix, as in `app/twitter.rs`, which owns the
//! decoding and the HTML rendering.

use axum::extract::State;
use axum::routing::get;
use axum::Router;

use crate::app::twitter::render;
use crate::app::upstream_error;
use crate::http::Response;
use crate::twin::{limited, Shared};

/// The sub-app's routes, written without knowing where they are mounted.
pub fn router(state: &Shared) -> Router<Shared> {
    Router::new().route("/", limited(state, "twitter", get(index)))
}

/// `GET /twitter`: the upstream's texts, HTML-escaped, joined by `</br>`.
pub async fn index(State(state): State<Shared>) -> Response {
    let resp = match state.http.get(&state.upstream).await {
        Ok(resp) => resp,
        Err(e) => return upstream_error(&state.upstream, &e),
    };
    if resp.status != 200 {
        return Response::error(
            502,
            format!("GET {} answered {}, not 200", state.upstream, resp.status),
        );
    }
    match render(&resp.body) {
        Ok(html) => Response::html(200, html),
        Err(why) => Response::error(502, format!("GET {} returned {why}", state.upstream)),
    }
}
