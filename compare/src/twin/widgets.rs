//! `/widgets` (a one-second MySQL query), `/widgets/parallel` (N of them at once) and
//! `/widgets/http` (an HTTP call back to `/widgets` on this same server): the async
//! counterparts of `app/widgets.rs`, which owns the parsing, the body and the limits.

use std::time::Instant;

use axum::extract::{RawQuery, State};
use tokio::task::JoinSet;

use crate::twin::{Reply, Shared};
use fiber_web::rig::query_param;
use fiber_web::Response;
use fiberstack::app::db_error;
use fiberstack::app::widgets::{
    parallel_answer, parse_parallel, parse_sleep, self_call_response, WIDGETS_BODY,
};

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

/// `GET /widgets/parallel[?n=N][&sleep=S][&deadline=D]`: N `select sleep(S)` at once,
/// each a task of one `JoinSet`, answered once all have returned; past the deadline
/// the set is dropped (its tasks aborted, their queries killed: `db.rs`) and the
/// answer is a 504.
pub async fn widgets_parallel(State(state): State<Shared>, RawQuery(query): RawQuery) -> Reply {
    let query = query.unwrap_or_default();
    let param = |name| query_param(&query, name);
    let ask = match parse_parallel(
        param("n").as_deref(),
        param("sleep").as_deref(),
        param("deadline").as_deref(),
    ) {
        Ok(ask) => ask,
        Err(why) => return Response::error(400, why).into(),
    };
    let started = Instant::now();
    let mut queries = JoinSet::new();
    for _ in 0..ask.n {
        let state = Shared::clone(&state);
        queries.spawn(async move {
            state
                .db
                .exec::<mysql_async::Row, _>("select sleep(?)", (ask.sleep,))
                .await
        });
    }
    let all = async {
        while let Some(joined) = queries.join_next().await {
            match joined {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(db_error(&e)),
                Err(e) => return Err(Response::error(500, format!("a query's task failed: {e}"))),
            }
        }
        Ok(())
    };
    let done = match ask.deadline {
        Some(d) => tokio::time::timeout_at((started + d).into(), all)
            .await
            .unwrap_or_else(|_| {
                Err(Response::error(
                    504,
                    "the request's deadline passed while waiting for the queries",
                ))
            }),
        None => all.await,
    };
    match done {
        Ok(()) => parallel_answer(ask.n, started.elapsed()),
        Err(resp) => resp,
    }
    .into()
}

/// `GET /widgets/http`: GET this server's own `/widgets` and return its body.
pub async fn widgets_http(State(state): State<Shared>) -> Reply {
    self_call_response(
        &state.self_widgets,
        state.http.get(&state.self_widgets).await,
    )
    .into()
}
