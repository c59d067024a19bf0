//! `/sleep?secs=S`: the async counterpart of `app/sleep.rs`, which owns the bounds and
//! the body: a timer, no I/O.

use axum::extract::RawQuery;

use crate::twin::Reply;
use fiber_web::rig::query_param;
use fiber_web::Response;
use fiberstack::app::sleep::SLEPT_BODY;
use fiberstack::app::widgets::parse_seconds;

/// `GET /sleep?secs=S`.
pub async fn sleep(RawQuery(query): RawQuery) -> Reply {
    let raw = query_param(query.as_deref().unwrap_or_default(), "secs");
    let secs = match parse_seconds("secs", raw.as_deref()) {
        Ok(s) => s,
        Err(why) => return Response::error(400, why).into(),
    };
    tokio::time::sleep(std::time::Duration::from_secs_f64(secs)).await;
    Response::text(200, SLEPT_BODY).into()
}
