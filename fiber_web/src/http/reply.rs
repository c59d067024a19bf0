//! What a handler may return: anything that turns into a [`Response`].
//!
//! A handler returns a `Response`, a text (`&'static str`, `String`: 200,
//! `text/plain`), [`Json`] of any serializable value (200, `application/json`), a
//! status paired with any of these (`(201, Json(todo))`), or a `Result` whose both
//! sides are any of these. The usual form is `Result<T, Response>`: everything a
//! handler calls that can refuse a request (`Request::param`, `Request::json`,
//! `Request::query`, a MySQL call with the `mysql` feature: `mysql.rs`) fails with
//! the `Response` that says why, so `?` passes it on.

use std::borrow::Cow;

use crate::http::{Problem, Response};

/// A value that becomes the response to a request.
pub trait IntoResponse {
    /// The response.
    fn into_response(self) -> Response;
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl IntoResponse for &'static str {
    fn into_response(self) -> Response {
        Response::text(200, self)
    }
}

impl IntoResponse for String {
    fn into_response(self) -> Response {
        Response::text(200, self)
    }
}

impl IntoResponse for Cow<'static, str> {
    fn into_response(self) -> Response {
        Response::text(200, self)
    }
}

/// A value answered as JSON (200, `application/json`), or read as JSON from a body
/// (`Request::json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        Response::json(200, &self.0)
    }
}

/// A response with its status set: `(201, Json(todo))`.
impl<T: IntoResponse> IntoResponse for (u16, T) {
    fn into_response(self) -> Response {
        self.1.into_response().with_status(self.0)
    }
}

impl<T: IntoResponse, E: IntoResponse> IntoResponse for Result<T, E> {
    fn into_response(self) -> Response {
        match self {
            Ok(ok) => ok.into_response(),
            Err(e) => e.into_response(),
        }
    }
}

/// What a handler answers for a job of its own that did not finish (a
/// [`scope`](fiber_pool::scope())'s child, a [`blocking`](fiber_pool::blocking())
/// call), so that `child.join()?` passes it on: 504 when the request's deadline
/// passed or a blocking call ran past its wait; 503 (with `Retry-After`) when there
/// was no room (the scope, the fibers, the blocking queue) or the request was
/// cancelled; 500 for a child's panic or stack overflow. The message names the limit
/// to raise.
impl From<fiber_pool::RunError> for Response {
    fn from(e: fiber_pool::RunError) -> Response {
        use fiber_pool::{CancelReason, RunError};
        match &e {
            RunError::Cancelled {
                reason: CancelReason::DeadlinePassed,
            } => Problem::new(
                504,
                "deadline-exceeded",
                "the request's deadline passed before its work finished",
            )
            .into(),
            RunError::BlockingTimeout { .. } => Problem::new(
                504,
                "deadline-exceeded",
                "the request's work ran past its time limit",
            )
            .with_internal(e.to_string())
            .into(),
            RunError::StackOverflow { .. } | RunError::Panicked { .. } => Problem::new(
                500,
                "handler-failed",
                "part of the request's work failed: the request could not be handled",
            )
            .with_internal(e.to_string())
            .into(),
            // The limits a server sets through its options: named by their flags, for
            // the operator.
            RunError::ScopeFull { max } => busy(format!(
                "a fan-out asked for more than {max} children, the most one scope may \
                 have: spawn fewer, or raise --scope-children"
            )),
            RunError::NoFiberForChild { waited, reserve } => busy(format!(
                "a fan-out's child found no fiber within {waited:?}: every fiber and the \
                 {reserve} kept for children were busy; raise --child-reserve or --fibers, \
                 or fan out less"
            )),
            RunError::BlockingQueueFull { queue } => busy(format!(
                "every blocking thread is busy and {queue} calls already wait for one: \
                 retry later, or raise --blocking-threads or --blocking-queue"
            )),
            _ => busy(e.to_string()),
        }
    }
}

/// A 503 with `Retry-After`: the client reads that the server is busy, the log `why`.
fn busy(why: String) -> Response {
    Response::from(
        Problem::new(503, "server-busy", "the server is busy; try again shortly")
            .with_internal(why),
    )
    .header("Retry-After", "1")
}

impl IntoResponse for fiber_pool::RunError {
    fn into_response(self) -> Response {
        Response::from(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_becomes_its_response() {
        assert_eq!("hi".into_response(), Response::text(200, "hi"));
        assert_eq!(String::from("hi").into_response().status, 200);
        let created = (201, Json(serde_json::json!({"id": 1}))).into_response();
        assert_eq!(created.status, 201);
        assert_eq!(
            &created.headers[..],
            &[("Content-Type", "application/json".into())]
        );
        let ok: Result<&'static str, Response> = Ok("fine");
        assert_eq!(ok.into_response().body.as_ref(), b"fine");
        let refused: Result<&'static str, Response> = Err(Response::error(409, "taken"));
        assert_eq!(refused.into_response().status, 409);
    }

    #[test]
    fn a_job_that_did_not_finish_is_its_gateway_or_server_error() {
        use fiber_pool::{CancelReason, RunError};
        let status = |e: RunError| Response::from(e).status;
        let deadline = RunError::Cancelled {
            reason: CancelReason::DeadlinePassed,
        };
        assert_eq!(status(deadline), 504);
        assert_eq!(status(RunError::ScopeFull { max: 8 }), 503);
        let full = Response::from(RunError::BlockingQueueFull { queue: 256 });
        // The client reads that the server is busy; the operator reads which flag.
        assert!(!String::from_utf8_lossy(&full.body).contains("--blocking"));
        let internal = full.problem().and_then(|p| p.internal()).unwrap();
        assert!(internal.contains("--blocking-queue"), "{internal}");
        let panicked = RunError::Panicked {
            label: "child",
            message: "boom".into(),
        };
        assert_eq!(status(panicked), 500);
    }
}
