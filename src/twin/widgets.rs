//! `/widgets` (a one-second MySQL query) and `/widgets/http` (an HTTP call back to
//! `/widgets` on this same server): the async counterparts of `app/widgets.rs`, which
//! owns the parsing, the body and the limits.

use axum::extract::{RawQuery, State};

use crate::app::db_error;
use crate::app::widgets::{parse_sleep, self_call_response, WIDGETS_BODY};
use crate::http::query::query_param;
use crate::http::Response;
use crate::twin::Shared;

/// `GET /widgets[?sleep=S]`: `select sleep(S)` on a pooled connection, then `Oh hai`.
pub async fn widgets(State(state): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let secs =
        match parse_sleep(query_param(query.as_deref().unwrap_or_default(), "sleep").as_deref()) {
            Ok(s) => s,
            Err(why) => return Response::error(400, why),
        };
    let result = state
        .db
        .exec::<mysql_async::Row, _>("select sleep(?)", (secs,))
        .await;
    match result {
        Ok(_) => Response::text(200, WIDGETS_BODY),
        Err(e) => db_error(&e),
    }
}

/// `GET /widgets/http`: GET this server's own `/widgets` and return its body.
pub async fn widgets_http(State(state): State<Shared>) -> Response {
    self_call_response(
        &state.self_widgets,
        state.http.get(&state.self_widgets).await,
    )
}
