//! `/deep?depth=N&frame=B`: the same recursion as `app/deep.rs`, which owns the bounds.
//!
//! It runs on tokio's blocking pool (`spawn_blocking`), not on a worker thread, so a
//! deep request does not stall the other tasks of its worker. Those threads have
//! tokio's default 2 MiB stack, and `--stack-size` does not apply to them. Unlike a
//! fiber, a thread has no way to recover from running past its stack: Rust reports
//! "thread has overflowed its stack" and the whole process aborts. That is the
//! failure mode the fiber pool exists to contain (see STACK_SIZES.md).

use axum::extract::{RawQuery, State};

use crate::twin::{Reply, Shared};
use fiber_web::rig::query_param;
use fiber_web::Response;
use fiberstack::app::deep::{level, parse};

/// `GET /deep?depth=N&frame=B`.
pub async fn deep(State(_state): State<Shared>, RawQuery(query): RawQuery) -> Reply {
    let q = query.as_deref().unwrap_or_default();
    let (depth, frame) = match parse(
        query_param(q, "depth").as_deref(),
        query_param(q, "frame").as_deref(),
    ) {
        Ok(v) => v,
        Err(why) => return Response::error(400, why).into(),
    };
    let resp = match tokio::task::spawn_blocking(move || level(depth, frame)).await {
        Ok(sum) => Response::text(200, format!("depth {depth} frame {frame} checksum {sum}")),
        Err(e) => Response::error(500, format!("route deep failed: {e}")),
    };
    resp.into()
}
