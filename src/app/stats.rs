//! `GET /stats`: the fiber pool, the MySQL pool, the HTTP client and server, uptime, and
//! which process answered (its pid; its worker id and generation under a supervisor).
//!
//! The snapshot is typed: the fiber pool's part is the framework's
//! [`fiber_web::metrics::HandlerPool`], the same value `/metrics` renders, so the
//! two cannot disagree and a renamed counter is a compile error.

use serde::Serialize;

use crate::app::AppState;
use fiber_web::client::ClientStats;
use fiber_web::metrics::HandlerPool;
use fiber_web::{Request, Response};

/// `GET /stats` as JSON. The snapshot (every pool's counters, under their locks) is
/// taken and rendered on the carrier's stack (`fiber_pool::on_carrier`), so no lock is
/// held on the fiber, and an overflow cannot abandon the JSON tree half rendered (its
/// memory would leak with the frames).
pub fn stats(state: &AppState, _req: &Request) -> Response {
    fiber_pool::on_carrier(|| Response::json(200, &snapshot(state)))
}

/// Everything `/stats` shows.
#[derive(Serialize)]
pub struct Snapshot {
    /// Seconds since the server started.
    pub uptime_secs: f64,
    /// Which process answered.
    pub worker: serde_json::Value,
    /// The fiber pool, per route too.
    pub fibers: HandlerPool,
    /// The MySQL pool.
    pub db: DbStats,
    /// The outgoing HTTP client.
    pub http_client: ClientStats,
    /// The HTTP server's connections and responses.
    pub http_server: serde_json::Value,
}

/// The MySQL pool's counters, as `/stats` shows them.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct DbStats {
    /// Connections in the pool (`--db-pool`).
    pub size: usize,
    /// Checked out now.
    pub in_use: usize,
    /// Open and idle now.
    pub idle: usize,
    /// Handlers waiting for a connection now.
    pub waiting: usize,
    /// Checkouts that had to wait.
    pub total_waits: u64,
    /// Milliseconds they waited, summed.
    pub total_wait_ms: f64,
    /// Connections closed after an error and replaced.
    pub replaced: u64,
}

impl From<&fiber_mysql::PoolStats> for DbStats {
    fn from(s: &fiber_mysql::PoolStats) -> DbStats {
        DbStats {
            size: s.size,
            in_use: s.in_use,
            idle: s.idle,
            waiting: s.waiting,
            total_waits: s.total_waits,
            total_wait_ms: s.total_wait_time.as_secs_f64() * 1000.0,
            replaced: s.replaced,
        }
    }
}

/// The snapshot now.
pub fn snapshot(state: &AppState) -> Snapshot {
    Snapshot {
        uptime_secs: state.http_stats.uptime_secs(),
        worker: fiber_web::worker::describe(),
        fibers: HandlerPool::of_fibers(&state.fibers),
        db: DbStats::from(&state.db.stats()),
        http_client: state.http.stats(),
        http_server: state.http_stats.to_json(),
    }
}
