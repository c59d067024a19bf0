//! `GET /stats`: the fiber pool, the MySQL pool, the HTTP client and server, uptime, and
//! which process answered (its pid; its worker id and generation under a supervisor).

use crate::app::AppState;
use fiber_web::http::{Request, Response};

/// `GET /stats` as JSON. The snapshot (every pool's counters, under their locks) is
/// taken and rendered on the carrier's stack (`fiber_pool::on_carrier`), so no lock is
/// held on the fiber, and an overflow cannot abandon the JSON tree half rendered (its
/// memory would leak with the frames).
pub fn stats(state: &AppState, _req: &Request) -> Response {
    fiber_pool::on_carrier(|| Response::json(200, &snapshot(state)))
}

/// Everything `/stats` shows.
pub fn snapshot(state: &AppState) -> serde_json::Value {
    serde_json::json!({
        "uptime_secs": state.http_stats.uptime_secs(),
        "worker": fiber_web::supervisor::describe(),
        "fibers": fibers_json(&state.fibers.stats()),
        "db": db_json(&state.db.stats()),
        "http_client": state.http.stats_json(),
        "http_server": state.http_stats.to_json(),
    })
}

/// The fiber pool's stats, with per-route stack peaks, overflows outside a safe point
/// and stalls (the watchdog's), and the process's overflow aftermath.
pub fn fibers_json(s: &fiber_pool::PoolStats) -> serde_json::Value {
    let stalls = fiber_web::watchdog::stalls();
    let mut labels: Vec<&'static str> = s.per_label.keys().copied().collect();
    labels.extend(stalls.keys().filter(|l| !s.per_label.contains_key(*l)));
    let routes: serde_json::Map<String, serde_json::Value> = labels
        .into_iter()
        .map(|label| {
            let l = s.per_label.get(label).copied().unwrap_or_default();
            (
                label.to_string(),
                serde_json::json!({
                    "runs": l.runs,
                    "overflows": l.overflows,
                    "unsafe_overflows": l.unsafe_overflows,
                    "panics": l.panics,
                    "stalls": stalls.get(label).copied().unwrap_or(0),
                    "measured": l.measured,
                    "peak_stack_bytes": l.peak_stack_bytes,
                }),
            )
        })
        .collect();
    let aftermath = fiber_pool::aftermath();
    serde_json::json!({
        "size": s.size,
        "stack_size": s.stack_size,
        "busy": s.busy,
        "queued": s.queued,
        "completed": s.completed,
        "rejected": s.rejected,
        "timed_out": s.timed_out,
        "overflows": s.overflows,
        "unsafe_overflows": s.unsafe_overflows,
        "panics": s.panics,
        "stalls": stalls.values().sum::<u64>(),
        "aftermath": {
            "outside_safe_point": aftermath.outside_safe_point,
            "while_panicking": aftermath.while_panicking,
            "second_faults": aftermath.second_faults,
            "abandoned": aftermath.abandoned,
        },
        "peak_stack_bytes": s.peak_stack_bytes,
        "routes": routes,
    })
}

/// The MySQL pool's stats.
pub fn db_json(s: &fiber_mysql::PoolStats) -> serde_json::Value {
    serde_json::json!({
        "size": s.size,
        "in_use": s.in_use,
        "idle": s.idle,
        "waiting": s.waiting,
        "total_waits": s.total_waits,
        "total_wait_ms": s.total_wait_time.as_secs_f64() * 1000.0,
        "replaced": s.replaced,
    })
}
