//! `/widgets` (a one-second MySQL query) and `/widgets/http` (an HTTP call back to
//! `/widgets` on this same server): the async counterparts of `app/widgets.rs`, which
//! owns the parsing, the body and the limits.

use axum::extract::{RawQuery, State};

use crate::app::db_error;
use crate::app::widgets::{parse_sleep, self_call_response, WIDGETS_BODY};
use crate::twin::{Reply, Shared};
use fiber_web::http::query::query_param;
use fiber_web::http::Response;

/// `GET /widgets[?sleep=S]`: `select sleep(S)` on a pooled connection, then `Oh hai`.
pub async fn widgets(State(state): State<Shared>, RawQuery(query): RawQuery) -> Reply {
    let secs =
        match parse_sleep(query_param(query.as_deref().unwrap_or_default(), "sleep").as_deref()) {
            Ok(s) => s,
            Err(why) => return Response::error(400, why).into(),
        };
    let result = state
        .db
        .exec::<mysql_async::Row, _>("select sleep(?)", (secs,))
        .await;
    let resp = match result {
        Ok(_) => Response::text(200, WIDGETS_BODY),
        Err(e) => db_error(&e),
    };
    resp.into()
}

/// `GET /widgets/http`: GET this server's own `/widgets` and return its body.
pub async fn widgets_http(State(state): State<Shared>) -> Reply {
    self_call_response(
        &state.self_widgets,
        state.http.get(&state.self_widgets).await,
    )
    .into()
}
