//! The demo application: its shared state and its routes, one file per route group.
//!
//! Every handler is plain, blocking-looking code (`db.exec(..)`, `http.get(..)`) that
//! runs on a fiber; the waits yield to may. The app is [`app`]; labels are the names
//! used in `/stats`, `/metrics` and the stack report.

pub mod dashboard;
pub mod deep;
pub mod health;
pub mod schema;
pub mod sleep;
pub mod stats;
pub mod twitter;
pub mod upstream;
pub mod widgets;

use std::sync::Arc;
use std::time::Duration;

use fiber_pool::FiberPool;
use fiber_web::client::{HttpClient, Url};
use fiber_web::metrics::HttpStats;
use fiber_web::{App, Response};

/// What the handlers share.
pub struct AppState {
    /// The MySQL pool: at most `--db-pool` queries at once.
    pub db: fiber_mysql::Pool,
    /// The outgoing HTTP client.
    pub http: HttpClient,
    /// `/widgets` at this server's own address, for `/widgets/http`.
    pub self_widgets: Url,
    /// The JSON API `/twitter` reads.
    pub upstream: Url,
    /// The fiber pool the handlers run on (for `/stats`).
    pub fibers: FiberPool,
    /// The HTTP server's counters (for `/stats`).
    pub http_stats: Arc<HttpStats>,
}

/// Every route label of the demo, in the route table's order, the framework's
/// built-in routes last: the rows of the per-route request counters on both runtimes
/// (the twin builds its table from this list).
pub const ROUTE_LABELS: &[&str] = &[
    "dashboard",
    "widgets",
    "widgets_parallel",
    "widgets_http",
    "upstream_search",
    "deep",
    "stats",
    "hello",
    "sleep",
    "twitter",
    fiber_web::metrics::HEALTHZ,
    fiber_web::metrics::READYZ,
    fiber_web::metrics::METRICS,
];

/// The routes that run on the monitoring fibers (the twin: its monitoring slots), off
/// the request limit, so its per-route counters do not show them.
pub const MONITORING_LABELS: &[&str] = &["stats", fiber_web::metrics::READYZ];

/// The whole demo on the framework: its routes (`/twitter` a nested sub-app), the
/// self-call limit of `/widgets/http`, readiness (MySQL answers), and the pool and
/// client families in `/metrics`. `self_calls` requests of `/widgets/http` run at
/// once, each waiting up to `wait` for its turn.
pub fn app(state: Arc<AppState>, self_calls: usize, wait: Duration) -> App<AppState> {
    App::with_shared(state)
        .get("/", dashboard::dashboard)
        .named("dashboard")
        .get("/widgets", widgets::widgets)
        .named("widgets")
        .get("/widgets/parallel", widgets::widgets_parallel)
        .named("widgets_parallel")
        .get("/widgets/http", widgets::widgets_http)
        .named("widgets_http")
        .limit(
            self_calls,
            wait,
            "it calls back into this server, so the other fibers stay free for those calls",
        )
        .get("/upstream/search.json", upstream::search)
        .named("upstream_search")
        .get("/deep", deep::deep)
        .named("deep")
        .get("/stats", stats::stats)
        .named("stats")
        .monitoring()
        .get("/hello", health::hello)
        .named("hello")
        .get("/sleep", sleep::sleep)
        .named("sleep")
        .nest("/twitter", twitter::routes())
        .readiness(health::ready)
        .metrics(|state, out| {
            out.db_pool(&state.db.stats());
            out.http_client(&state.http.stats());
        })
}

/// The response for a MySQL failure (the framework's: 503 when the database is
/// unavailable, else 500 with the server's message), for the twin's handlers too.
pub fn db_error(e: &fiber_mysql::Error) -> Response {
    Response::from(e)
}

/// The response for an upstream HTTP failure: 504 on a timeout, else 502.
pub fn upstream_error(url: &Url, e: &fiber_web::Error) -> Response {
    Response::error(e.gateway_status(), format!("GET {url} failed: {e}"))
}
