//! The minihttp routes as one `may_minihttp::HttpService`: each request is handled on
//! its connection's may coroutine, straight through (no pool, no queue, no limit).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use may_minihttp::{HttpService, Request, Response};

use fiber_web::rig::query_param;
use fiberstack::app::{deep, health::HELLO_BODY, widgets};

/// What the connections share: the MySQL pool and the counters `/stats` shows.
pub struct MiniState {
    db: fiber_mysql::Pool,
    db_wait: Duration,
    started: Instant,
    requests: AtomicU64,
    served_2xx: AtomicU64,
}

impl MiniState {
    pub fn new(db: fiber_mysql::Pool, db_wait: Duration) -> MiniState {
        MiniState {
            db,
            db_wait,
            started: Instant::now(),
            requests: AtomicU64::new(0),
            served_2xx: AtomicU64::new(0),
        }
    }

    /// `/stats`: what the bench needs (pid, uptime, served, MySQL in use).
    pub fn to_json(&self) -> serde_json::Value {
        let db = self.db.stats();
        serde_json::json!({
            "runtime": "minihttp",
            "pid": std::process::id(),
            "uptime_secs": self.started.elapsed().as_secs_f64(),
            "requests": self.requests.load(Ordering::Relaxed),
            "served_2xx": self.served_2xx.load(Ordering::Relaxed),
            "db": { "size": db.size, "in_use": db.in_use },
        })
    }
}

/// The service may_minihttp clones for each connection.
#[derive(Clone)]
pub struct MiniService {
    state: Arc<MiniState>,
}

impl MiniService {
    pub fn new(state: Arc<MiniState>) -> MiniService {
        MiniService { state }
    }
}

/// A route picked from the request line, before the request is consumed.
enum Route {
    Hello,
    Widgets(Result<f64, String>),
    Stats,
    Deep(Result<(usize, usize), String>),
    NotFound,
}

fn route(target: &str) -> Route {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let param = |name| query_param(query, name);
    match path {
        "/hello" => Route::Hello,
        "/widgets" => Route::Widgets(widgets::parse_sleep(param("sleep").as_deref())),
        "/stats" => Route::Stats,
        "/deep" => Route::Deep(deep::parse(
            param("depth").as_deref(),
            param("frame").as_deref(),
        )),
        _ => Route::NotFound,
    }
}

const TEXT: &str = "Content-Type: text/plain; charset=utf-8";

fn text(rsp: &mut Response, code: usize, reason: &'static str, body: String) {
    rsp.status_code(code, reason)
        .header(TEXT)
        .body_vec(body.into_bytes());
}

impl HttpService for MiniService {
    fn call(&mut self, req: Request, rsp: &mut Response) -> io::Result<()> {
        let route = route(req.path());
        // Read the body, as any handler that takes one must before the next request:
        // this is where may_minihttp parses Content-Length with `unwrap()`.
        drop(req.body());
        let state = &self.state;
        state.requests.fetch_add(1, Ordering::Relaxed);
        let code = match route {
            Route::Hello => {
                rsp.header(TEXT).body(HELLO_BODY);
                200
            }
            Route::Widgets(Err(why)) | Route::Deep(Err(why)) => {
                text(rsp, 400, "Bad Request", why);
                400
            }
            Route::Widgets(Ok(secs)) => {
                let done = state
                    .db
                    .get_timeout(state.db_wait)
                    .and_then(|mut conn| conn.exec("select sleep(?)", (secs,)));
                match done {
                    Ok(_) => {
                        rsp.header(TEXT).body(widgets::WIDGETS_BODY);
                        200
                    }
                    Err(e) => {
                        text(rsp, 503, "Service Unavailable", format!("database: {e}"));
                        503
                    }
                }
            }
            Route::Stats => {
                rsp.header("Content-Type: application/json")
                    .body_vec(state.to_json().to_string().into_bytes());
                200
            }
            Route::Deep(Ok((depth, frame))) => {
                // On this coroutine's may stack: past its end, the process dies.
                let sum = deep::level(depth, frame);
                text(
                    rsp,
                    200,
                    "OK",
                    format!("depth {depth} frame {frame} checksum {sum}"),
                );
                200
            }
            Route::NotFound => {
                text(rsp, 404, "Not Found", "no such route\n".into());
                404
            }
        };
        if code / 100 == 2 {
            state.served_2xx.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
