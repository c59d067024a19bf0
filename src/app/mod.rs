//! The demo application: its shared state and its routes, one file per route group.
//!
//! Every handler is plain, blocking-looking code (`db.exec(..)`, `http.get(..)`) that
//! runs on a fiber; the waits yield to may. The route table is [`router`]; labels are
//! the names used in `/stats` and the stack report.

pub mod dashboard;
pub mod deep;
pub mod health;
pub mod metrics;
pub mod schema;
pub mod stats;
pub mod twitter;
pub mod upstream;
pub mod widgets;

use std::sync::Arc;

use fiber_mysql::PooledConn;
use fiber_pool::{FiberPool, Lent};

use fiber_web::counters::HttpStats;
use fiber_web::http::client::{ClientError, HttpClient, Url};
use fiber_web::http::{Handler, Response, Router};

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

/// The whole route table, with `/twitter` mounted as a sub-app.
pub fn router() -> Router<Handler<AppState>> {
    Router::<Handler<AppState>>::new()
        .get("/", "dashboard", dashboard::dashboard)
        .get("/widgets", "widgets", widgets::widgets)
        .get("/widgets/http", "widgets_http", widgets::widgets_http)
        .get("/upstream/search.json", "upstream_search", upstream::search)
        .get("/deep", "deep", deep::deep)
        .get("/stats", "stats", stats::stats)
        .get("/healthz", "healthz", health::healthz)
        .get("/readyz", "readyz", health::readyz)
        .get("/hello", "hello", health::hello)
        .get("/metrics", "metrics", metrics::metrics)
        .mount("/twitter", twitter::router())
}

/// Routes whose handlers run on the connection's coroutine instead of a fiber
/// (`server::RouteLimits::on_carrier`): `/metrics` reads tables under std locks and
/// must answer while every fiber is busy.
pub const CARRIER_ROUTES: &[&str] = &["metrics"];

/// Every route label, in the route table's order: the rows of the per-route request
/// counters ([`HttpStats::new`]) on both runtimes.
pub fn route_labels() -> Vec<&'static str> {
    router().routes().iter().map(|r| r.label).collect()
}

/// A pooled MySQL connection held safely on a fiber: the checkout lives in a
/// `fiber_pool::Lent`, outside the fiber stack, so if the fiber overflows mid-query
/// (its frames are abandoned, not dropped) the connection is closed and its pool slot
/// freed instead of leaking. Handlers get connections only through this.
pub fn db_conn(db: &fiber_mysql::Pool) -> Result<Lent<PooledConn>, fiber_mysql::Error> {
    db_conn_within(db, db.config().wait_timeout)
}

/// [`db_conn`] waiting at most `wait` for a connection.
pub fn db_conn_within(
    db: &fiber_mysql::Pool,
    wait: std::time::Duration,
) -> Result<Lent<PooledConn>, fiber_mysql::Error> {
    // The checkout runs on the carrier's stack (a permit wait and an idle pop) and goes
    // straight into the Lent's cell, registered beforehand: it is never a plain value
    // on this stack, where an overflow would lose it. A handshake, if one is needed,
    // happens later, inside the Lent.
    fiber_pool::reserve_stack(CHECKOUT_STACK_MARGIN);
    Lent::acquire(|| db.get_timeout(wait), PooledConn::discard)
}

/// Stack a MySQL checkout needs on the fiber: `Lent::acquire`'s own margin. The
/// checkout itself runs on the carrier's stack (`fiber_pool::on_carrier`: its may
/// semaphore wait and its lock are never on a fiber) and lands in the Lent directly.
/// `tests/stack.rs` sweeps overflows through every point of the DB routes to check it.
pub const CHECKOUT_STACK_MARGIN: usize = fiber_pool::lent::LENT_STACK_MARGIN;

/// The response for a MySQL failure: 503 when the database is unavailable (down,
/// refusing, pool exhausted), else 500 with the server's message. Handlers do not log
/// (a fiber near its stack limit is no place for stderr's lock); the server logs every
/// 5xx body on the carrier's stack.
pub fn db_error(e: &fiber_mysql::Error) -> Response {
    if e.is_unavailable() {
        Response::error(503, format!("database unavailable: {e}")).header("Retry-After", "1")
    } else {
        Response::error(500, format!("database error: {e}"))
    }
}

/// The response for an upstream HTTP failure: 504 on a timeout, else 502.
pub fn upstream_error(url: &Url, e: &ClientError) -> Response {
    Response::error(e.gateway_status(), format!("GET {url} failed: {e}"))
}
