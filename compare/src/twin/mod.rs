//! The async twin: the same demo written with async/await on tokio, so that users can
//! read the two side by side and `compare bench` can measure them in one run.
//!
//! Each file here mirrors one of the fiber server's, and the handlers share every pure
//! piece with `app/` (parameter parsing, bodies, SQL, rendering, error messages):
//!
//! ```text
//! src/start.rs              <->  twin/start.rs    runtime, MySQL (private or external), schema, listener
//! fiber_web/src/server.rs   <->  twin/server.rs   accept loop, connection limit, graceful shutdown (hyper 1)
//! fiber_pool                <->  twin/limit.rs    at most --fibers handlers at once, --queue waiting, 503s;
//!                                                 a second limit of --monitor-fibers for /stats, /readyz
//! fiber_mysql               <->  twin/db.rs       mysql_async pool of --db-pool, wait and query timeouts
//! fiber_web/src/http/client/ <->  twin/client.rs  hyper-util client, per-phase timeouts, size cap
//! app/mod.rs                <->  twin/mod.rs      shared state, the route table (axum), error responses
//! app/widgets.rs            <->  twin/widgets.rs  ... and one file per route group, name for name:
//!                                twin/sleep.rs, deep.rs, stats.rs, health.rs,
//!                                twitter.rs, upstream.rs
//! fiber_web/src/http/target.rs <-> twin/conformance.rs  HTTP/1.1 rules hyper leaves to the app
//! fiber_pool's counters      <->  twin/gauge.rs    a gauge's unit held in a guard (futures drop)
//! fiber_web/src/metrics.rs  <->  twin/metrics.rs  one renderer (the framework's), the twin's snapshot
//! ```
//!
//! Route labels, status codes, bodies and error messages are the fiber server's; where
//! a message names a runtime part (a fiber, a task) it says which. `--threads` is the
//! number of tokio worker threads.

pub mod client;
pub mod conformance;
pub mod db;
pub mod deep;
pub mod gauge;
pub mod health;
pub mod limit;
pub mod metrics;
pub mod server;
pub mod sleep;
pub mod start;
pub mod stats;
pub mod twitter;
pub mod upstream;
pub mod widgets;

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::routing::{get, MethodRouter};
use axum::Router;

use fiber_web::client::Url;
use fiber_web::metrics::HttpStats;
use fiber_web::Response;

pub use start::{start, Running};

/// What the handlers share: the async counterpart of [`fiberstack::app::AppState`].
pub struct TwinState {
    /// The MySQL pool: at most `--db-pool` queries at once.
    pub db: db::Pool,
    /// The outgoing HTTP client.
    pub http: client::Client,
    /// `/widgets` at this server's own address, for `/widgets/http`.
    pub self_widgets: Url,
    /// The JSON API `/twitter` reads.
    pub upstream: Url,
    /// At most `--fibers` handlers at once.
    pub limit: Arc<limit::Limit>,
    /// The monitoring routes' own few slots (`--monitor-fibers`), off `limit`, as
    /// their own fibers on the fiber server: `/stats` and `/readyz`.
    pub monitor: Arc<limit::Limit>,
    /// The HTTP server's counters (for `/stats`).
    pub http_stats: Arc<HttpStats>,
}

/// The state as handlers receive it.
pub type Shared = Arc<TwinState>;

/// The methods every route of the demo answers (HEAD is served by GET, as on fibers,
/// and `Allow` names both).
const ALLOWED: &str = "GET, HEAD";

/// The whole route table, with `/twitter` nested as a sub-router; compare
/// [`fiberstack::app::app`]. Each route runs inside [`limit::run`] under its label.
pub fn router(state: Shared) -> Router {
    let on = |label: &'static str, route: MethodRouter<Shared>| limited(&state, label, route);
    let monitoring =
        |label: &'static str, route: MethodRouter<Shared>| within(&state.monitor, label, route);
    Router::new()
        .route("/", on("dashboard", get(dashboard)))
        .route("/widgets", on("widgets", get(widgets::widgets)))
        .route(
            "/widgets/parallel",
            on("widgets_parallel", get(widgets::widgets_parallel)),
        )
        .route(
            "/widgets/http",
            on("widgets_http", get(widgets::widgets_http)),
        )
        .route(
            "/upstream/search.json",
            on("upstream_search", get(upstream::search)),
        )
        .route("/deep", on("deep", get(deep::deep)))
        .route("/stats", monitoring("stats", get(stats::stats)))
        // Outside the task-slot limit, as on fibers it takes no fiber.
        .route("/healthz", get(health::healthz))
        .route("/readyz", monitoring("readyz", get(health::readyz)))
        .route("/hello", on("hello", get(health::hello)))
        .route("/sleep", on("sleep", get(sleep::sleep)))
        // Outside the task-slot limit, as on fibers it takes no fiber (fiber_web's builtin.rs).
        .route("/metrics", get(metrics::metrics))
        .nest("/twitter", twitter::router(&state))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(state)
}

/// `route` run under `label` within the concurrency limit. `route_layer` on a
/// `MethodRouter` wraps its handlers only: a 405 takes no slot, as it takes no fiber.
pub fn limited(
    state: &Shared,
    label: &'static str,
    route: MethodRouter<Shared>,
) -> MethodRouter<Shared> {
    within(&state.limit, label, route)
}

/// `route` run under `label` within `limit`.
fn within(
    limit: &Arc<limit::Limit>,
    label: &'static str,
    route: MethodRouter<Shared>,
) -> MethodRouter<Shared> {
    route.route_layer(axum::middleware::from_fn_with_state(
        (Arc::clone(limit), limit.route(label)),
        limit::run,
    ))
}

/// `GET /`: the same page as the fiber server's (`app/dashboard.rs`).
async fn dashboard() -> Reply {
    fiberstack::app::dashboard::page().into()
}

async fn not_found(method: Method, uri: Uri) -> Reply {
    Response::error(404, format!("no route for {method} {}", uri.path())).into()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Reply {
    Response::error(
        405,
        format!("{method} is not allowed on {}: use {ALLOWED}", uri.path()),
    )
    .header("Allow", ALLOWED)
    .into()
}

/// A problem's text for the operator, carried from a [`Reply`] to the 5xx log line.
#[derive(Clone)]
pub struct Internal(pub String);

/// Handlers build the fiber server's [`Response`], so bodies, content types and error
/// texts are the same by construction; a `Reply` is one on its way to axum.
pub struct Reply(pub Response);

impl From<Response> for Reply {
    fn from(resp: Response) -> Reply {
        Reply(resp)
    }
}

impl axum::response::IntoResponse for Reply {
    fn into_response(self) -> axum::response::Response {
        let Reply(ours) = self;
        // What the fiber server's 5xx line prints (a problem's internal text) rides
        // along for this server's own (`limit.rs`).
        let internal = ours
            .problem()
            .and_then(|p| p.internal())
            .map(|text| Internal(text.to_string()));
        let mut resp = axum::response::Response::new(axum::body::Body::from(ours.body));
        if let Some(internal) = internal {
            resp.extensions_mut().insert(internal);
        }
        *resp.status_mut() =
            StatusCode::from_u16(ours.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        for (name, value) in ours.headers.iter() {
            // Our names are static ASCII (`Content-Type`, `Retry-After`, `Allow`; hyper
            // lower-cases them) and the values are ours: neither ever fails to convert.
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(*name),
                HeaderValue::try_from(value.as_ref()),
            ) {
                headers.append(name, value);
            }
        }
        resp
    }
}
