//! `GET /`: the live dashboard, one self-contained HTML page (`dashboard.html`: inline
//! CSS and JS, no CDN, no build step) that polls `/stats` once a second. Both runtimes
//! serve these same bytes; the page reads either `/stats` shape (`fibers` or `tasks`).

use crate::app::AppState;
use fiber_web::{Request, Response};

/// The page, compiled into the binary.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// `GET /`: the dashboard page.
pub fn dashboard(_state: &AppState, _req: &Request) -> Response {
    page()
}

/// The dashboard response (shared with the twin).
pub fn page() -> Response {
    Response::html(200, DASHBOARD_HTML).header("Cache-Control", "no-cache")
}
