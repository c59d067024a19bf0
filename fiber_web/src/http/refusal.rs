//! The 503s both runtimes give when they refuse work, worded once: a full queue, a wait
//! for a worker that ran out, a connection over the limit. The fiber server (`server.rs`)
//! and the async twin (`twin/limit.rs`, `twin/server.rs`) both answer with these, so a
//! client sees the same status, Retry-After and advice from either.

use std::time::Duration;

use crate::http::{Problem, Response};

/// Time the 503 to a connection over the limit gets to be written before the
/// connection is closed anyway (it is small: one write, or a client not reading).
pub const OVER_LIMIT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// The 503 for a request refused at once: every worker busy, the queue full.
/// `workers` names them: "fibers", or the twin's "task slots".
pub fn queue_full(workers: &str, size: usize, queue: usize) -> Response {
    Response::from(
        Problem::new(
            503,
            "queue-full",
            "the server is busy: every worker is taken and the queue is full; try again \
             shortly",
        )
        .with_internal(format!(
            "all {size} {workers} are busy and the queue of {queue} waiting requests is full \
             (--fibers, --queue)"
        )),
    )
    .header("Retry-After", "1")
}

/// The 503 for a request that waited `wait` for a worker in vain.
pub fn wait_timed_out(worker: &str, wait: Duration) -> Response {
    Response::from(
        Problem::new(
            503,
            "queue-timeout",
            "the server is busy: the request waited for a worker in vain; try again shortly",
        )
        .with_internal(format!(
            "no {worker} became free within {} ms (--fiber-wait; --fibers sets how many run \
             at once)",
            wait.as_millis()
        )),
    )
    .header("Retry-After", "1")
}

/// The bytes a connection over `max` open connections gets.
pub fn over_limit(max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    Response::error(
        503,
        format!("the server has {max} open connections, its limit; try again shortly"),
    )
    .header("Retry-After", "1")
    .write_to(&mut out, 1, false, false);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_tells_the_client_to_retry_and_the_operator_what_to_raise() {
        for (resp, flag) in [
            (queue_full("fibers", 8, 16), "--queue"),
            (
                wait_timed_out("fiber", Duration::from_millis(300)),
                "--fiber-wait",
            ),
        ] {
            let body = String::from_utf8_lossy(&resp.body).into_owned();
            assert!(
                body.contains("try again shortly") && !body.contains(flag),
                "{body}"
            );
            let internal = resp.problem().and_then(|p| p.internal()).unwrap();
            assert!(internal.contains(flag), "{internal}");
            assert_eq!(
                resp.headers
                    .iter()
                    .find(|(n, _)| *n == "Retry-After")
                    .map(|h| &*h.1),
                Some("1")
            );
        }
    }
}
