//! The layer trait and the chain that runs layers around a handler ([`Layer`]'s own
//! docs are the guide).

use std::sync::Arc;

use crate::http::{Handler, Request, Response};

/// Code that runs around every handler, in order, on the handler's fiber.
///
/// A layer sees the request first and the response last, and may answer by itself
/// (a refused token, a CORS preflight) without calling the rest. Layers run on the
/// request's fiber with the handler, so a layer's stack overflow or panic is a 500
/// like a handler's, and its own answers go through the server's counters and the
/// access line like any other. They run for every request the app routes or refuses
/// (404, 405), so an auth layer also covers unknown paths and a CORS layer can answer
/// a preflight `OPTIONS` that no route serves; the built-in `/healthz`, `/readyz` and
/// `/metrics` are answered before them (probes and scrapers send no app tokens), but
/// for `/metrics` when the app puts it behind them (`App::metrics_behind_layers`).
/// A group's and a route's own layers (`Routes::layer`, `route_layer`) run inside the
/// app's, for that group's or route's requests only.
///
/// The first layer added is the outermost: `.layer(a).layer(b)` runs `a`, then `b`,
/// then the handler, and the response goes back through `b`, then `a`.
///
/// ```
/// use fiber_web::layers::{Layer, Next};
/// use fiber_web::{Request, Response};
///
/// /// Adds `Server-Timing` with the handler's time.
/// struct Timing;
///
/// impl<S> Layer<S> for Timing {
///     fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
///         let started = std::time::Instant::now();
///         let resp = next.run(state, req);
///         let ms = started.elapsed().as_secs_f64() * 1000.0;
///         resp.header("Server-Timing", format!("app;dur={ms:.3}"))
///     }
/// }
/// ```
pub trait Layer<S>: Send + Sync {
    /// The response to `req`: usually `next.run(state, req)`, changed or not; or an
    /// answer of the layer's own.
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response;
}

/// A closure is a layer: `|state, req, next| next.run(state, req)` (`App::layer_fn`
/// names the argument types for inference).
impl<S, F> Layer<S> for F
where
    F: Fn(&S, &mut Request, Next<'_, S>) -> Response + Send + Sync + 'static,
{
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
        self(state, req, next)
    }
}

/// The layers after this one, then the handler (or, for a request no route serves,
/// the router's 404 or 405).
pub struct Next<'a, S> {
    layers: &'a [Arc<dyn Layer<S>>],
    end: End<'a, S>,
}

/// What the last layer's `next` runs.
pub(crate) enum End<'a, S> {
    /// The route's handler.
    Handler(&'a dyn Handler<S>),
    /// The router's answer for a request no route serves.
    Refused(Response),
}

impl<'a, S> Next<'a, S> {
    pub(crate) fn new(layers: &'a [Arc<dyn Layer<S>>], end: End<'a, S>) -> Self {
        Next { layers, end }
    }

    /// Run the rest: the next layer, or the handler.
    pub fn run(self, state: &S, req: &mut Request) -> Response {
        match self.layers.split_first() {
            Some((layer, rest)) => layer.call(
                state,
                req,
                Next {
                    layers: rest,
                    end: self.end,
                },
            ),
            None => match self.end {
                End::Handler(handler) => handler.call(state, req),
                End::Refused(resp) => resp,
            },
        }
    }
}
