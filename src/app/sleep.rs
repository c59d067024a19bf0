//! `/sleep?secs=S`: answers after S seconds of waiting without any I/O (default 1, 0 to
//! 10): a sleeping route that needs no MySQL connection, for loads of more requests in
//! flight than a database takes (the bench's 10,000-in-flight row).

use crate::app::widgets::parse_seconds;
use crate::app::AppState;
use fiber_web::{Request, Response};

/// The body of `/sleep`.
pub const SLEPT_BODY: &str = "slept";

/// `GET /sleep?secs=S`: `fiber_pool::sleep_or_cancelled(S)` (on the carrier: the fiber
/// parks), then `slept`; a 504 when the request's deadline comes first.
pub fn sleep(_state: &AppState, req: &Request) -> Response {
    let secs = match parse_seconds("secs", req.query_param("secs").as_deref()) {
        Ok(s) => s,
        Err(why) => return Response::error(400, why),
    };
    match fiber_pool::sleep_or_cancelled(std::time::Duration::from_secs_f64(secs)) {
        Ok(()) => Response::text(200, SLEPT_BODY),
        Err(reason) => Response::error(504, format!("{reason} while the request slept")),
    }
}
