//! `/widgets` (a one-second MySQL query) and `/widgets/http` (an HTTP call back to
//! `/widgets` on this same server): the original demo's two routes; and
//! `/widgets/parallel`, N of those queries at once from one handler (a fan-out on
//! `fiber_web::fan_out`).

use std::time::{Duration, Instant};

use crate::app::{db_error, upstream_error, AppState};
use fiber_web::client::{ClientResponse, Url};
use fiber_web::{fan_out, Request, Response};

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

/// Queries `/widgets/parallel` runs without `?n=`.
pub const DEFAULT_PARALLEL: usize = 3;
/// Most queries `/widgets/parallel` runs (`?n=`); within fiber_web's default
/// `--scope-children`.
pub const MAX_PARALLEL: usize = 10;
/// Longest `?deadline=` of `/widgets/parallel`, in seconds.
pub const MAX_DEADLINE_SECS: f64 = 60.0;

/// What `/widgets/parallel` was asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Parallel {
    /// Queries at once.
    pub n: usize,
    /// Seconds each query sleeps.
    pub sleep: f64,
    /// The fan-out's deadline, from the handler's start.
    pub deadline: Option<Duration>,
}

/// Parse `/widgets/parallel`'s `?n=` (1 to [`MAX_PARALLEL`], default
/// [`DEFAULT_PARALLEL`]), `?sleep=` (as `/widgets`) and `?deadline=` (seconds above 0,
/// at most [`MAX_DEADLINE_SECS`]; none by default).
pub fn parse_parallel(
    n: Option<&str>,
    sleep: Option<&str>,
    deadline: Option<&str>,
) -> Result<Parallel, String> {
    let n = match n {
        None => DEFAULT_PARALLEL,
        Some(raw) => match raw.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_PARALLEL).contains(&n) => n,
            _ => {
                return Err(format!(
                    "n must be a whole number of queries from 1 to {MAX_PARALLEL}, like ?n=3; \
                     got '{raw}'"
                ))
            }
        },
    };
    let deadline = match deadline {
        None => None,
        Some(raw) => match raw.trim().parse::<f64>() {
            Ok(d) if d > 0.0 && d <= MAX_DEADLINE_SECS => Some(Duration::from_secs_f64(d)),
            _ => {
                return Err(format!(
                    "deadline must be a number of seconds above 0 and at most \
                     {MAX_DEADLINE_SECS}, like ?deadline=0.5; got '{raw}'"
                ))
            }
        },
    };
    Ok(Parallel {
        n,
        sleep: parse_sleep(sleep)?,
        deadline,
    })
}

/// What `/widgets/parallel` answers when every query returned (shared with the twin).
pub fn parallel_answer(n: usize, took: Duration) -> Response {
    Response::json(
        200,
        &serde_json::json!({ "queries": n, "took_ms": took.as_millis() as u64 }),
    )
}

/// `GET /widgets/parallel[?n=N][&sleep=S][&deadline=D]`: N `select sleep(S)` at once,
/// each on a child fiber of one scope (with the deadline, if given, on all of them),
/// answered once all have returned: in about S seconds, not N x S. Past the deadline
/// the queries are killed and the answer is a 504 naming the phase.
pub fn widgets_parallel(state: &AppState, req: &Request) -> Result<Response, Response> {
    let ask = parse_parallel(
        req.query_param("n").as_deref(),
        req.query_param("sleep").as_deref(),
        req.query_param("deadline").as_deref(),
    )
    .map_err(|why| Response::error(400, why))?;
    let started = Instant::now();
    let results = match ask.deadline {
        Some(d) => fan_out::scope_with_deadline(started + d, |s| queries(s, state, ask)),
        None => fan_out::scope(|s| queries(s, state, ask)),
    };
    for result in results {
        // A child that did not finish, or a query that failed, is its response.
        result?;
    }
    Ok(parallel_answer(ask.n, started.elapsed()))
}

/// `ask.n` children, each running one query; their outcomes, in order.
fn queries<'scope>(
    s: fan_out::Scope<'scope, '_>,
    state: &'scope AppState,
    ask: Parallel,
) -> Vec<Result<(), Response>> {
    let children: Vec<_> = (0..ask.n)
        .map(|_| {
            s.spawn(move || {
                let mut conn = state.db.checkout()?;
                conn.exec("select sleep(?)", (ask.sleep,))?;
                Ok(())
            })
        })
        .collect();
    children.into_iter().map(|child| child.join()).collect()
}

/// `GET /widgets/http`: GET this server's own `/widgets` and return its body.
pub fn widgets_http(state: &AppState, _req: &Request) -> Response {
    self_call_response(&state.self_widgets, state.http.get(&state.self_widgets))
}

/// What `/widgets/http` answers for the outcome of its call (shared with the twin):
/// the body on a 200, else a 502 (504 on a timeout) naming the URL.
pub fn self_call_response(url: &Url, got: Result<ClientResponse, fiber_web::Error>) -> Response {
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
