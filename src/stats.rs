//! Counters of the HTTP server, cheap to bump from any coroutine and read as JSON.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Requests and connections seen by the server since it started.
#[derive(Debug)]
pub struct HttpStats {
    started: Instant,
    accepted: AtomicU64,
    rejected_connections: AtomicU64,
    protocol_errors: AtomicU64,
    abandoned: AtomicU64,
    by_class: [AtomicU64; 6],
}

impl Default for HttpStats {
    fn default() -> Self {
        HttpStats {
            started: Instant::now(),
            accepted: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            by_class: Default::default(),
        }
    }
}

impl HttpStats {
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }
    pub fn rejected_connection(&self) {
        self.rejected_connections.fetch_add(1, Ordering::Relaxed);
    }
    pub fn protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }
    /// Count a request not run because its client had gone (reset) while it waited.
    pub fn abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }
    /// Count a response by its status class (1xx..5xx).
    pub fn response(&self, status: u16) {
        let class = (status / 100).min(5) as usize;
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
    }

    /// Seconds since the server started.
    pub fn uptime_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The counters as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "accepted_connections": get(&self.accepted),
            "rejected_connections": get(&self.rejected_connections),
            "protocol_errors": get(&self.protocol_errors),
            "abandoned": get(&self.abandoned),
            "responses": {
                "2xx": get(&self.by_class[2]),
                "3xx": get(&self.by_class[3]),
                "4xx": get(&self.by_class[4]),
                "5xx": get(&self.by_class[5]),
            },
        })
    }
}
