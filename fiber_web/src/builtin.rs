//! The routes every built app answers besides its own: `GET /healthz` (liveness),
//! `GET /readyz` (readiness: the app's own check) and `GET /metrics` (Prometheus).
//!
//! Each is added only when the app does not route its path itself. None runs the
//! app's layers: probes and scrapers carry no app credentials, and each must answer
//! while every request fiber is busy and the queue is full. So `/healthz` and
//! `/metrics` run on the connection's coroutine (their code is the server's own:
//! counter reads, no I/O), and `/readyz`, which runs the app's check (I/O, say a
//! MySQL ping), on one of the monitoring fibers (`--monitor-fibers`), a pool of its
//! own off the request limit.
//!
//! An app whose metrics are not for everyone puts `/metrics` behind its layers
//! (`App::metrics_behind_layers`): then the scrape runs on a monitoring fiber through
//! them, and an auth layer guards it.

use std::sync::Arc;

use fiber_pool::FiberPool;

use crate::app::{MetricsHook, Readiness};
use crate::counters::HttpStats;
use crate::dispatch::Endpoint;
use crate::http::router::Router;
use crate::http::{Problem, Request, Response};
use crate::metrics::{self, Exposition, HandlerPool, ServerSnapshot, HEALTHZ, METRICS, READYZ};

/// `router` with the built-in routes it does not have.
pub(crate) fn add<S: Send + Sync + 'static>(
    router: Router<Endpoint<S>>,
    readiness: Option<Readiness<S>>,
    hook: Option<MetricsHook<S>>,
    fibers: &FiberPool,
    stats: &Arc<HttpStats>,
    behind_layers: bool,
) -> Router<Endpoint<S>> {
    let router = probes(router, readiness);
    let (fibers, stats) = (fibers.clone(), Arc::clone(stats));
    let mode = if behind_layers {
        Mode::FiberWithLayers
    } else {
        Mode::Carrier
    };
    builtin(
        router,
        "/metrics",
        METRICS,
        mode,
        Endpoint::new(move |state: &S, _: &Request| {
            let pool = HandlerPool::of_fibers(&fibers);
            let mut out = Exposition::new();
            out.server(&ServerSnapshot {
                runtime: "fibers",
                pool: &pool,
                http: &stats,
            });
            if let Some(hook) = &hook {
                hook(state, &mut out);
            }
            metrics::response(out.into_text())
        }),
    )
}

/// Where a built-in route runs.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// On the connection's coroutine, without layers.
    Carrier,
    /// On a monitoring fiber, without layers.
    Fiber,
    /// On a monitoring fiber, through the app's layers.
    FiberWithLayers,
}

/// `router` with route `path`, labelled `label`, when it has none for `GET path`.
fn builtin<S: Send + Sync + 'static>(
    router: Router<Endpoint<S>>,
    path: &str,
    label: &'static str,
    mode: Mode,
    ep: Endpoint<S>,
) -> Router<Endpoint<S>> {
    if router.has_literal("GET", path) {
        return router;
    }
    let ep = Endpoint {
        on_carrier: mode == Mode::Carrier,
        without_layers: mode != Mode::FiberWithLayers,
        monitoring: mode != Mode::Carrier,
        ..ep
    };
    router.route("GET", path, label, ep)
}

/// `router` with the probes it does not have: `/healthz` and `/readyz`, which need
/// nothing of the running server.
pub(crate) fn probes<S: Send + Sync + 'static>(
    mut router: Router<Endpoint<S>>,
    readiness: Option<Readiness<S>>,
) -> Router<Endpoint<S>> {
    router = builtin(
        router,
        "/healthz",
        HEALTHZ,
        Mode::Carrier,
        Endpoint::new(|_: &S, _: &Request| Response::text(200, "ok")),
    );
    builtin(
        router,
        "/readyz",
        READYZ,
        Mode::Fiber,
        Endpoint::new(move |state: &S, _: &Request| {
            readiness_response(readiness.as_ref().map_or(Ok(()), |check| check(state)))
        }),
    )
}

/// The answer of `GET /readyz` to a readiness check's outcome: `ready`, or a 503
/// `not-ready` problem with `Retry-After` (for a server that serves `/readyz` itself,
/// like an async twin of an app, to answer the same). The check's reason is the
/// problem's internal part, for the 5xx log: it is what the app found (a database's
/// error text, an address), which a prober on the same port must not read.
pub fn readiness_response(ready: Result<(), String>) -> Response {
    match ready {
        Ok(()) => Response::text(200, "ready"),
        Err(why) => Response::from(
            Problem::new(
                503,
                "not-ready",
                "the server is not ready; try again shortly",
            )
            .with_internal(format!("not ready: {why}")),
        )
        .header("Retry-After", "1"),
    }
}
