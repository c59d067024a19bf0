//! `/upstream/search.json?q=...`: the default upstream of `/twitter`; compare
//! `app/upstream.rs`, which owns the statement, the LIKE escaping and the bound on `q`.

use axum::extract::{RawQuery, State};

use crate::twin::{Reply, Shared};
use fiber_web::rig::query_param;
use fiber_web::Response;
use fiberstack::app::db_error;
use fiberstack::app::upstream::{like_pattern, parse_query, SEARCH_SQL};

/// `GET /upstream/search.json?q=rails+3`.
pub async fn search(State(state): State<Shared>, RawQuery(query): RawQuery) -> Reply {
    let q = match parse_query(query_param(query.as_deref().unwrap_or_default(), "q")) {
        Ok(q) => q,
        Err(why) => return Response::error(400, why).into(),
    };
    let rows = state
        .db
        .exec::<Option<String>, _>(SEARCH_SQL, (like_pattern(&q),))
        .await;
    let resp = match rows {
        Ok(texts) => {
            let texts: Vec<serde_json::Value> = texts
                .into_iter()
                .map(|text| serde_json::json!({ "text": text.unwrap_or_default() }))
                .collect();
            Response::json(200, &serde_json::json!({ "results": texts }))
        }
        Err(e) => db_error(&e),
    };
    resp.into()
}
