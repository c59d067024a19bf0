//! The framework's MySQL integration, behind the default cargo feature `mysql`: a
//! [`fiber_mysql::Error`] passed on with `?` becomes the response that says why, and
//! [`Exposition::db_pool`] renders a [`fiber_mysql::Pool`]'s counters in `/metrics`.
//! Without the feature fiber_web builds neither fiber_mysql nor mysql_common (an app
//! that talks to no MySQL, or to it otherwise, depends on
//! `fiber_web = { default-features = false }`).

use crate::http::{IntoResponse, Problem, Response};
use crate::metrics::Exposition;
use crate::metrics::Kind::{self, Counter, Gauge};

/// A MySQL failure as the client sees it: 504 when the request's deadline passed
/// (naming the phase), 503 with `Retry-After` when the database is unavailable (down,
/// refusing, its pool exhausted), else 500. The client reads a generic sentence and
/// the request id; the database's own text (a table's name, a column's, a value) and
/// the operator's advice (a pool size to raise) are the problem's `internal` part,
/// which the 5xx log line prints. Handlers do not log (a fiber near its stack limit is
/// no place for stderr's lock): the server logs every 5xx after the fiber has finished.
impl From<fiber_mysql::Error> for Response {
    fn from(e: fiber_mysql::Error) -> Response {
        Response::from(&e)
    }
}

impl From<&fiber_mysql::Error> for Response {
    fn from(e: &fiber_mysql::Error) -> Response {
        if let fiber_mysql::Error::DeadlineExceeded { phase } = e {
            // The request's deadline (or the checkout's): a gateway timeout, naming
            // what was being waited for; a query is killed by then.
            return Problem::new(
                504,
                "deadline-exceeded",
                format!("the request's deadline passed while {phase}"),
            )
            .into();
        }
        if matches!(e, fiber_mysql::Error::Cancelled) {
            // The request was cancelled (its client left: nobody reads this).
            return Problem::new(503, "cancelled", "the request was cancelled").into();
        }
        if e.is_unavailable() {
            Response::from(
                Problem::new(
                    503,
                    "database-unavailable",
                    "database unavailable: try again shortly",
                )
                .with_internal(e.to_string()),
            )
            .header("Retry-After", "1")
        } else {
            Problem::new(
                500,
                "database-error",
                "the request failed on a database error",
            )
            .with_internal(e.to_string())
            .into()
        }
    }
}

impl IntoResponse for fiber_mysql::Error {
    fn into_response(self) -> Response {
        Response::from(self)
    }
}

impl Exposition {
    /// The MySQL pool's families (`NAME_db_pool_*`).
    pub fn db_pool(&mut self, s: &fiber_mysql::PoolStats) {
        let families: [(&str, Kind, &str, f64); 9] = [
            (
                "db_pool_connections",
                Gauge,
                "MySQL connections in the pool.",
                s.size as f64,
            ),
            (
                "db_pool_in_use",
                Gauge,
                "MySQL connections checked out now.",
                s.in_use as f64,
            ),
            (
                "db_pool_idle",
                Gauge,
                "MySQL connections open and idle in the pool now.",
                s.idle as f64,
            ),
            (
                "db_pool_waiting",
                Gauge,
                "Handlers waiting for a MySQL connection now.",
                s.waiting as f64,
            ),
            (
                "db_pool_waits_total",
                Counter,
                "Checkouts that had to wait for a MySQL connection.",
                s.total_waits as f64,
            ),
            (
                "db_pool_wait_seconds_total",
                Counter,
                "Seconds checkouts spent waiting for a MySQL connection.",
                s.total_wait_time.as_secs_f64(),
            ),
            (
                "db_pool_replaced_total",
                Counter,
                "MySQL connections closed after an error and replaced.",
                s.replaced as f64,
            ),
            (
                "db_pool_resets_total",
                Counter,
                "MySQL connections reset at give-back because their session changed.",
                s.resets as f64,
            ),
            (
                "db_pool_kill_connections",
                Gauge,
                "Side-channel MySQL connections kept open for KILL QUERY.",
                s.kill_connections as f64,
            ),
        ];
        for (name, kind, help, value) in families {
            self.own_single(name, kind, help, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_exhausted_pool_is_a_503_to_retry() {
        let down = Response::from(fiber_mysql::Error::PoolTimeout {
            waited: Duration::from_secs(1),
        });
        assert_eq!(down.status, 503);
        assert!(
            down.headers
                .iter()
                .any(|(n, v)| *n == "Retry-After" && v == "1"),
            "{:?}",
            down.headers
        );
    }

    #[test]
    fn the_pools_families_are_named_after_the_app_in_base_units() {
        let mut out = Exposition::for_app("fiberstack");
        out.db_pool(&fiber_mysql::PoolStats {
            size: 2,
            idle: 2,
            total_waits: 3,
            total_wait_time: Duration::from_millis(1500),
            ..Default::default()
        });
        let text = out.into_text();
        assert!(
            text.contains(
                "# TYPE fiberstack_db_pool_connections gauge\nfiberstack_db_pool_connections 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("fiberstack_db_pool_wait_seconds_total 1.5\n"),
            "{text}"
        );
    }
}
