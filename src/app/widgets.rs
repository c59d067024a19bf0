//! `/widgets` (a one-second MySQL query) and `/widgets/http` (an HTTP call back to
//! `/widgets` on this same server): the original demo's two routes.

use crate::app::{db_error, upstream_error, AppState};
use fiber_web::http::client::{ClientError, ClientResponse, Url};
use fiber_web::http::{Request, Response};

/// The body of `/widgets`, as in the original.
pub const WIDGETS_BODY: &str = "Oh hai";
/// Longest `?sleep=` accepted, in seconds.
pub const MAX_SLEEP_SECS: f64 = 10.0;

/// Parse `?sleep=`: seconds from 0 to [`MAX_SLEEP_SECS`], default 1.
pub fn parse_sleep(raw: Option<&str>) -> Result<f64, String> {
    parse_seconds("sleep", raw)
}

/// Parse query parameter `name`: seconds from 0 to [`MAX_SLEEP_SECS`], default 1.
pub fn parse_seconds(name: &str, raw: Option<&str>) -> Result<f64, String> {
    let Some(raw) = raw else { return Ok(1.0) };
    match raw.trim().parse::<f64>() {
        Ok(s) if (0.0..=MAX_SLEEP_SECS).contains(&s) => Ok(s),
        _ => Err(format!(
            "{name} must be a number of seconds from 0 to {MAX_SLEEP_SECS}, like ?{name}=0.25; got '{raw}'"
        )),
    }
}

/// `GET /widgets[?sleep=S]`: `select sleep(S)` on a pooled connection, then `Oh hai`.
pub fn widgets(state: &AppState, req: &Request) -> Response {
    let secs = match parse_sleep(req.query_param("sleep").as_deref()) {
        Ok(s) => s,
        Err(why) => return Response::error(400, why),
    };
    let result = state
        .db
        .checkout()
        .and_then(|mut conn| conn.exec("select sleep(?)", (secs,)));
    match result {
        Ok(_) => Response::text(200, WIDGETS_BODY),
        Err(e) => db_error(&e),
    }
}

/// `GET /widgets/http`: GET this server's own `/widgets` and return its body.
pub fn widgets_http(state: &AppState, _req: &Request) -> Response {
    self_call_response(&state.self_widgets, state.http.get(&state.self_widgets))
}

/// What `/widgets/http` answers for the outcome of its call (shared with the twin):
/// the body on a 200, else a 502 (504 on a timeout) naming the URL.
pub fn self_call_response(url: &Url, got: Result<ClientResponse, ClientError>) -> Response {
    match got {
        Ok(resp) if resp.status == 200 => {
            Response::text(200, String::from_utf8_lossy(&resp.body).into_owned())
        }
        Ok(resp) => Response::error(
            502,
            format!(
                "GET {url} answered {}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body).trim_end()
            ),
        ),
        Err(e) => upstream_error(url, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_sleep;

    #[test]
    fn sleep_is_bounded_and_defaults_to_one_second() {
        assert_eq!(parse_sleep(None), Ok(1.0));
        assert_eq!(parse_sleep(Some("0.25")), Ok(0.25));
        assert_eq!(parse_sleep(Some("0")), Ok(0.0));
        assert_eq!(parse_sleep(Some("10")), Ok(10.0));
        for bad in ["-1", "10.5", "abc", "", "NaN", "inf", "1;drop table tweets"] {
            let e = parse_sleep(Some(bad)).unwrap_err();
            assert!(e.contains("from 0 to 10"), "{bad}: {e}");
        }
    }
}
