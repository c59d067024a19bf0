//! The app builder: its state, its routes, its layers; built into what the server runs
//! ([`App`]'s own docs are the guide).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::dispatch::{Endpoint, RouteLimit, Routed};
use crate::http::router::{PatternError, Router};
use crate::http::{Handler, Problem, Request, Response};
use crate::layer::{Layer, Next};
use crate::metrics::Exposition;
use crate::problems::Answers;
use crate::request_id::RequestId;
use crate::Error;

/// A readiness check: `Err` with the reason while the app cannot serve.
pub(crate) type Readiness<S> = Arc<dyn Fn(&S) -> Result<(), String> + Send + Sync>;
/// Families an app adds to `/metrics`.
pub(crate) type MetricsHook<S> = Arc<dyn Fn(&S, &mut Exposition) + Send + Sync>;

/// Routes that share a state type, to be nested into an [`App`] at a prefix
/// ([`App::nest`]): a sub-app written without knowing where it is mounted.
pub struct Routes<S> {
    router: Router<Endpoint<S>>,
    /// The group's layers ([`Routes::layer`]), outermost first.
    layers: Vec<Arc<dyn Layer<S>>>,
}

impl<S: Send + Sync + 'static> Default for Routes<S> {
    fn default() -> Self {
        Routes {
            router: Router::new(),
            layers: Vec::new(),
        }
    }
}

/// The route methods shared by [`App`] and [`Routes`]: each adds a route and returns
/// the builder; `named`, `limit` and `on_carrier` change the route added last.
macro_rules! route_methods {
    ($($field:ident).+) => {
        /// Add a route for `method` (`GET`, `POST`, ..., any token) and `pattern`.
        /// A `GET` route serves `HEAD` too.
        pub fn route(mut self, method: &'static str, pattern: &str, handler: impl Handler<S> + 'static) -> Self {
            let label = default_label(method, pattern);
            self.$($field).+ = self.$($field).+.route(method, pattern, label, Endpoint::new(handler));
            self
        }

        /// A `GET` (and `HEAD`) route.
        pub fn get(self, pattern: &str, handler: impl Handler<S> + 'static) -> Self {
            self.route("GET", pattern, handler)
        }

        /// A `POST` route.
        pub fn post(self, pattern: &str, handler: impl Handler<S> + 'static) -> Self {
            self.route("POST", pattern, handler)
        }

        /// A `PUT` route.
        pub fn put(self, pattern: &str, handler: impl Handler<S> + 'static) -> Self {
            self.route("PUT", pattern, handler)
        }

        /// A `PATCH` route.
        pub fn patch(self, pattern: &str, handler: impl Handler<S> + 'static) -> Self {
            self.route("PATCH", pattern, handler)
        }

        /// A `DELETE` route.
        pub fn delete(self, pattern: &str, handler: impl Handler<S> + 'static) -> Self {
            self.route("DELETE", pattern, handler)
        }

        /// Name the route added last: its label in the counters, `/metrics`, the
        /// access log and the stall log (else `METHOD pattern`).
        pub fn named(mut self, label: &'static str) -> Self {
            if let Some(last) = self.$($field).+.last_mut() {
                last.label = label;
            }
            self
        }

        /// Let at most `max` (at least 1) requests of the route added last run at
        /// once, each waiting up to `wait` for a turn, before it takes a fiber; a
        /// request that waited longer gets a 503 whose message ends with `why`. For
        /// a route that calls back into this same server (its callers must leave
        /// fibers free for the calls), or one that guards a scarce resource.
        pub fn limit(mut self, max: usize, wait: Duration, why: &'static str) -> Self {
            if let Some(last) = self.$($field).+.last_mut() {
                last.handler.limit = Some(Arc::new(RouteLimit::new(max, wait, why)));
            }
            self
        }

        /// Give each request of the route added last `timeout` from its arrival: past
        /// it, every wait of the request ends (the fiber queue, a MySQL checkout or
        /// query, which is killed, an HTTP call, a sleep) and the client gets a 504
        /// naming the phase. The earlier of this and the server's
        /// `--request-timeout` applies.
        pub fn timeout(mut self, timeout: Duration) -> Self {
            if let Some(last) = self.$($field).+.last_mut() {
                last.handler.timeout = Some(timeout);
            }
            self
        }

        /// Run the route added last on the connection's coroutine instead of a fiber,
        /// without the app's layers: for short, bounded handlers that never wait,
        /// such as one that must answer while every fiber is busy (a monitor's) or
        /// one that answers a constant (`examples/techempower.rs`'s `/json` and
        /// `/plaintext`, which save the switch to a fiber and back: about 1,700
        /// instructions a request, by callgrind). Such a handler has the
        /// connection's stack (`HttpLimits::connection_stack`, 32 KiB), no overflow
        /// recovery, no deadline and no cancellation: keep it to reading counters
        /// and rendering small values. A wait in it (a MySQL checkout, a sleep)
        /// holds up every request of its connection.
        pub fn on_carrier(mut self) -> Self {
            if let Some(last) = self.$($field).+.last_mut() {
                last.handler.on_carrier = true;
            }
            self
        }

        /// Run the route added last on the monitoring fibers (`--monitor-fibers`, 2
        /// by default), a pool of their own off the request limit, so that it answers
        /// while every request fiber is busy and the queue is full: for a status
        /// page, a deep health check, a route an operator reads under load. It runs
        /// through the app's layers on a guarded fiber like any route; what it waits
        /// for (a MySQL checkout) it still shares with the requests.
        pub fn monitoring(mut self) -> Self {
            if let Some(last) = self.$($field).+.last_mut() {
                last.handler.monitoring = true;
            }
            self
        }

        /// Run `layer` around the handler of the route added last, inside the app's
        /// layers and its group's ([`Routes::layer`]); several run in the order added,
        /// the first outermost. Such a layer runs on the request's fiber like the
        /// app's, so its overflow or panic is that request's 500. A request no route
        /// serves (404, 405) meets only the app's layers.
        pub fn route_layer(mut self, layer: impl Layer<S> + 'static) -> Self {
            if let Some(last) = self.$($field).+.last_mut() {
                last.handler.layers.push(Arc::new(layer));
            }
            self
        }

        /// Every route of `routes` under `prefix`; its `/` becomes `prefix` itself.
        /// The group's layers ([`Routes::layer`]) run around each of its routes, inside
        /// the layers of what it is nested in.
        pub fn nest(mut self, prefix: &str, routes: Routes<S>) -> Self {
            self.$($field).+ = self.$($field).+.nest(prefix, routes.into_router());
            self
        }
    };
}

impl<S: Send + Sync + 'static> Routes<S> {
    /// No routes yet.
    pub fn new() -> Self {
        Self::default()
    }

    route_methods!(router);

    /// Run `layer` around every route of this group, those added before and after,
    /// inside the app's layers and outside each route's own ([`Routes::route_layer`]);
    /// several run in the order added, the first outermost. An auth layer on an
    /// `/admin` group guards only it; a request no route serves meets only the app's
    /// layers.
    pub fn layer(mut self, layer: impl Layer<S> + 'static) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// A layer written as a closure, for the group ([`Routes::layer`]).
    pub fn layer_fn<F>(self, layer: F) -> Self
    where
        F: Fn(&S, &mut Request, Next<'_, S>) -> Response + Send + Sync + 'static,
    {
        self.layer(layer)
    }

    /// The routes, each with the group's layers around its own.
    fn into_router(self) -> Router<Endpoint<S>> {
        let Routes { mut router, layers } = self;
        if !layers.is_empty() {
            for route in router.routes_mut() {
                let own = std::mem::take(&mut route.handler.layers);
                route.handler.layers = layers.iter().cloned().chain(own).collect();
            }
        }
        router
    }
}

/// An app: the state its handlers share, its routes and its layers, built into what
/// the server runs.
///
///
/// ```no_run
/// use fiber_web::{App, Json, Options, Request, Response};
///
/// struct Greeter { greeting: &'static str }
///
/// fn hello(g: &Greeter, req: &Request) -> String {
///     let name = req.query_param("name").unwrap_or_else(|| "world".into());
///     format!("{}, {name}!\n", g.greeting)
/// }
///
/// fn show(_: &Greeter, req: &Request) -> Result<Json<u64>, Response> {
///     Ok(Json(req.param("id")?))
/// }
///
/// fn main() -> Result<(), fiber_web::Error> {
///     App::new(Greeter { greeting: "Hello" })
///         .get("/hello", hello)
///         .get("/things/{id}", show)
///         .serve(Options::from_env_and_args()?)
/// }
/// ```
///
/// Routes are checked when the app is built (by [`App::serve`], [`crate::serve()`] or
/// [`App::test_client`]): a pattern that does not parse, or two routes for the same
/// method and pattern, is an [`Error::Routes`] naming them. Each route has a label,
/// its name in the counters, the metrics, the access log and the stall log: `GET
/// /todos/{id}` unless [`App::named`] gives it another.
///
/// Besides the app's own routes, a built app answers `GET /healthz` (200 while the
/// process serves), `GET /readyz` (200, or 503 while [`App::readiness`] says no) and
/// `GET /metrics` (Prometheus text), unless the app routes those paths itself.
pub struct App<S> {
    state: Arc<S>,
    routes: Routes<S>,
    layers: Vec<Arc<dyn Layer<S>>>,
    readiness: Option<Readiness<S>>,
    metrics: Option<MetricsHook<S>>,
    answers: Answers,
    metrics_behind_layers: bool,
}

impl<S: Send + Sync + 'static> App<S> {
    /// An app over `state`, with no routes yet.
    pub fn new(state: S) -> Self {
        App::with_shared(Arc::new(state))
    }

    /// An app over a state shared with something else (a background job).
    pub fn with_shared(state: Arc<S>) -> Self {
        App {
            state,
            routes: Routes::new(),
            layers: Vec::new(),
            readiness: None,
            metrics: None,
            answers: Answers::default(),
            metrics_behind_layers: false,
        }
    }

    /// The state the handlers get.
    pub fn state(&self) -> &Arc<S> {
        &self.state
    }

    route_methods!(routes.router);

    /// Run `layer` around every handler (see [`Layer`]); the first added is
    /// the outermost.
    pub fn layer(mut self, layer: impl Layer<S> + 'static) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// A layer written as a closure: `|state, req, next| next.run(state, req)`.
    pub fn layer_fn<F>(self, layer: F) -> Self
    where
        F: Fn(&S, &mut Request, Next<'_, S>) -> Response + Send + Sync + 'static,
    {
        self.layer(layer)
    }

    /// A header on every response the server sends (`Server: my-app`), the built-in
    /// routes' and the framework's own errors included, unless a response set one of
    /// that name itself. The server writes it from this one list: no response copies
    /// it, so it costs no allocation per request.
    pub fn default_header(
        mut self,
        name: &'static str,
        value: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.answers.default_headers.push(name, value.into());
        self
    }

    /// Give every request an id ([`RequestId`]): the client's own in that header when
    /// it sent a usable one, else one made here. The handler reads it
    /// ([`Request::request_id`]); the response carries it in the same header, every
    /// problem the framework answers carries it (the early refusals and a handler's
    /// overflow included), and the access and 5xx log lines print it.
    pub fn request_ids(mut self, ids: RequestId) -> Self {
        self.answers.ids = Some(Arc::new(ids));
        self
    }

    /// Render the framework's own answers ([`Problem`]: a 404, a 413, a bad
    /// parameter, a full pool, a deadline, a panic) the app's way. By default they are
    /// `application/problem+json` (RFC 9457) when the request's `Accept` asks for JSON
    /// and text otherwise ([`Problem::to_response`], which a renderer may call for the
    /// cases it leaves alone). The headers the framework set (`Allow`, `Retry-After`,
    /// the request id) are added to what `render` returns unless it set them. It runs on
    /// the connection's coroutine, not on a fiber: keep it to formatting.
    pub fn render_problems<F>(mut self, render: F) -> Self
    where
        F: Fn(&Problem) -> Response + Send + Sync + 'static,
    {
        self.answers.render = Some(Arc::new(render));
        self
    }

    /// What `GET /readyz` asks: `Ok` when the app can serve (its database answers),
    /// else `Err` with the reason, which the 503 shows. It runs on a fiber, so it may
    /// do I/O; keep it under a second (a load balancer's check has a timeout).
    pub fn readiness<F>(mut self, check: F) -> Self
    where
        F: Fn(&S) -> Result<(), String> + Send + Sync + 'static,
    {
        self.readiness = Some(Arc::new(check));
        self
    }

    /// Families the app adds to `GET /metrics`, after the server's own:
    /// `|state, out| out.db_pool(&state.db.stats())`. It runs on the connection's
    /// coroutine (the scrape answers while every fiber is busy), so keep it to
    /// reading counters.
    pub fn metrics<F>(mut self, families: F) -> Self
    where
        F: Fn(&S, &mut Exposition) + Send + Sync + 'static,
    {
        self.metrics = Some(Arc::new(families));
        self
    }

    /// Run `GET /metrics` through the app's layers, so that an auth layer guards it
    /// (its route labels and pool figures are not for everyone). It then runs on a
    /// fiber like any route, and under full load waits for one; by default it runs on
    /// the connection's coroutine, before the layers, and answers while every fiber is
    /// busy. A scrape from another address is the other way to keep it private: bind
    /// the server to a private interface, or put a proxy's rule on the path.
    pub fn metrics_behind_layers(mut self) -> Self {
        self.metrics_behind_layers = true;
        self
    }

    /// Check the routes and add the built-in ones: what the server and the test
    /// client run.
    /// `layer` outside every other: the framework's own, which must run first.
    pub(crate) fn outermost_layer(mut self, layer: impl Layer<S> + 'static) -> Self {
        self.layers.insert(0, Arc::new(layer));
        self
    }

    pub(crate) fn build(
        self,
        pools: crate::dispatch::Pools,
        stats: Arc<crate::counters::HttpStats>,
        request_timeout: Option<Duration>,
    ) -> Result<Routed<S>, Error> {
        let App {
            state,
            routes,
            layers,
            readiness,
            metrics,
            answers,
            metrics_behind_layers,
        } = self;
        let router = crate::builtin::add(
            routes.router,
            readiness,
            metrics,
            &pools.fibers,
            &stats,
            metrics_behind_layers,
        );
        router.check().map_err(refused)?;
        stats.set_routes(router.routes().iter().map(|r| r.label));
        Ok(Routed::new(
            router,
            state,
            layers,
            pools,
            stats,
            request_timeout,
            answers,
        ))
    }

    /// The handler a request for `req`'s method and path reaches, with its route's
    /// label, and the route's parameters stored in `req`; `None` when no route serves
    /// it. For tools that run handlers on a fiber pool of their own (a stack report):
    /// the app's routes and the built-in `/healthz` and `/readyz`, without the layers.
    pub fn handler_for(&self, req: &mut Request) -> Option<(&'static str, Arc<dyn Handler<S>>)> {
        let router = crate::builtin::probes(self.routes.router.clone(), self.readiness.clone());
        let mut params = std::mem::take(&mut req.params);
        let found = match router.find(&req.method, req.path(), &mut params) {
            crate::http::router::Found::Route(route) => {
                Some((route.label, Arc::clone(&route.handler.handler)))
            }
            _ => None,
        };
        req.params = params;
        found
    }

    /// Check the routes now, as building the app does: [`Error::Routes`] names every
    /// pattern that does not parse and every pair of routes that clash.
    pub fn check(&self) -> Result<(), Error> {
        self.routes.router.check().map_err(refused)
    }
}

/// The router's refusals as the app's error: one [`Error::Route`] each.
fn refused(patterns: Vec<PatternError>) -> Error {
    Error::Routes(patterns.into_iter().map(Error::from).collect())
}

/// `METHOD pattern`, for as long as the process lives (labels are `&'static str`:
/// the counters and the fiber pool key by them without copying).
fn default_label(method: &str, pattern: &str) -> &'static str {
    Box::leak(format!("{method} {pattern}").into_boxed_str())
}
