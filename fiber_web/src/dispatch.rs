//! Running a request: route it, wait for its route's turn, run its layers and handler
//! on a fiber of the pool, turn what the fiber reports into a response, and count and
//! log it.
//!
//! ```text
//! connection coroutine (conn.rs)  --Service::call-->  Routed::route
//!     router (pattern, params) -> route limit (a turn) -> FiberPool::run_admitted
//!                                    '-> on a guarded fiber: layers, then the handler
//!                                        (a monitoring route's: of its own few fibers)
//!     fiber errors -> 503 (queue full, waited too long) or 500 (overflow, panic)
//!     counters and access line, on the connection's coroutine, never on the fiber
//! ```
//! Counting and logging happen after the fiber has finished: a locking logger on a
//! fiber could be abandoned mid-write by an overflow (STACK_SIZES.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::{Admitted, CancelReason, Context, FiberPool, RunError};

use crate::counters::{HttpStats, UNMATCHED};
use crate::http::conn::{Peer, Service};
use crate::http::defaults::DefaultHeaders;
use crate::http::refusal::{queue_full, wait_timed_out};
use crate::http::request::RequestLine;
use crate::http::router::Router;
use crate::http::{Handler, Problem, Request, Response};
use crate::layer::{End, Layer, Next};
use crate::problems::Answers;

/// What a route runs, and how.
pub(crate) struct Endpoint<S> {
    pub(crate) handler: Arc<dyn Handler<S>>,
    /// At most this many requests of the route at once ([`RouteLimit`]).
    pub(crate) limit: Option<Arc<RouteLimit>>,
    /// Run on the connection's coroutine, without layers, instead of on a fiber.
    pub(crate) on_carrier: bool,
    /// Run without the app's layers (the built-in probes and the metrics scrape).
    pub(crate) without_layers: bool,
    /// Run on the monitoring fibers, off the request limit (`App::monitoring`,
    /// `/readyz`).
    pub(crate) monitoring: bool,
    /// The route's own deadline for a request, from its arrival (`App::timeout`);
    /// the earlier of it and the server's `--request-timeout` applies.
    pub(crate) timeout: Option<Duration>,
    /// The route's own layers and its groups', outermost first, inside the app's
    /// (`Routes::layer`, `route_layer`).
    pub(crate) layers: Vec<Arc<dyn Layer<S>>>,
    /// The app's layers, then `layers`: what the route's requests run through, made
    /// when the app is built; `None` when the route has no layers of its own (its
    /// requests run through the app's).
    pub(crate) chain: Option<Arc<[Arc<dyn Layer<S>>]>>,
}

impl<S> Clone for Endpoint<S> {
    fn clone(&self) -> Self {
        Endpoint {
            handler: Arc::clone(&self.handler),
            limit: self.limit.clone(),
            on_carrier: self.on_carrier,
            without_layers: self.without_layers,
            monitoring: self.monitoring,
            timeout: self.timeout,
            layers: self.layers.clone(),
            chain: self.chain.clone(),
        }
    }
}

impl<S> Endpoint<S> {
    pub(crate) fn new(handler: impl Handler<S> + 'static) -> Self {
        Endpoint {
            handler: Arc::new(handler),
            limit: None,
            on_carrier: false,
            without_layers: false,
            monitoring: false,
            timeout: None,
            layers: Vec::new(),
            chain: None,
        }
    }
}

/// At most `max` requests of one route at once, waiting up to `wait` for a turn;
/// checked on the connection's coroutine, before the request takes a fiber.
///
/// This is what keeps a route that calls back into its own server from starving:
/// every such request holds a fiber while it calls this same server, whose handler
/// needs a fiber too. If the calling route could take every fiber, the inner calls
/// would wait for fibers only their own callers could free. Limited to a share of the
/// fibers, the rest stay free for the inner calls, and every request finishes.
pub(crate) struct RouteLimit {
    permits: may::sync::Semphore,
    max: usize,
    wait: Duration,
    why: &'static str,
}

impl RouteLimit {
    pub(crate) fn new(max: usize, wait: Duration, why: &'static str) -> Self {
        let max = max.max(1);
        RouteLimit {
            permits: may::sync::Semphore::new(max),
            max,
            wait,
            why,
        }
    }

    /// Wait for a turn, or the 503 that says why there was none; a 504 when the
    /// request's `deadline` comes first.
    fn enter(self: &Arc<Self>, label: &str, deadline: Option<Instant>) -> Result<Turn, Response> {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let wait = left.map_or(self.wait, |left| left.min(self.wait));
        if self.permits.wait_timeout(wait) {
            Ok(Turn(Arc::clone(self)))
        } else if wait < self.wait {
            Err(Problem::new(
                504,
                "deadline-exceeded",
                format!(
                    "the request's deadline passed while it waited for a turn of route \
                     {label} ({} at once: {})",
                    self.max, self.why
                ),
            )
            .into())
        } else {
            Err(Response::from(Problem::new(
                503,
                "route-busy",
                format!(
                    "{} requests of route {label} are already running, its limit ({}); \
                     waited {} ms for a turn; try again shortly",
                    self.max,
                    self.why,
                    self.wait.as_millis()
                ),
            ))
            .header("Retry-After", "1"))
        }
    }
}

/// A turn in a limited route; given back on drop.
struct Turn(Arc<RouteLimit>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.permits.post();
    }
}

/// Cancel hooks a request's context has room for before its job runs: its MySQL
/// checkouts and HTTP calls register one each, deep in its path on the connection's
/// stack, where growing the list (an allocation) would reach past the stack's first
/// page (`Context::reserve_hooks`).
const HOOKS_RESERVED: usize = 4;

/// How long a request must have waited for its turn and fiber before its client is
/// checked ([`Client::gone`](crate::http::conn::Client::gone)); shorter waits are the
/// client's own round trip.
const WAITED: Duration = Duration::from_millis(1);

/// What [`Routed::route`] gives back: the response, its route's label (`None`: no
/// route matched) and, when this run was measured, the stack its fiber used.
pub(crate) type Outcome = (Response, Option<&'static str>, Option<usize>);

/// The fibers a built app runs on.
pub(crate) struct Pools {
    /// The requests' (`--fibers`, `--queue`).
    pub(crate) fibers: FiberPool,
    /// The monitoring routes' own few, off the request limit (`--monitor-fibers`).
    pub(crate) monitor: FiberPool,
}

/// A built app: what the server (and the test client) runs.
pub(crate) struct Routed<S> {
    router: Router<Endpoint<S>>,
    state: Arc<S>,
    /// Shared with every request's job, which owns what it uses (`FiberPool::run`).
    layers: Arc<[Arc<dyn Layer<S>>]>,
    fibers: FiberPool,
    /// The monitoring routes' own few fibers (`--monitor-fibers`).
    monitor: FiberPool,
    stats: Arc<HttpStats>,
    /// Every request's deadline, from its arrival (`--request-timeout`).
    request_timeout: Option<Duration>,
    /// Problems rendered, request ids given (`App::render_problems`, `App::request_ids`).
    answers: Answers,
}

impl<S: Send + Sync + 'static> Routed<S> {
    pub(crate) fn new(
        mut router: Router<Endpoint<S>>,
        state: Arc<S>,
        layers: Vec<Arc<dyn Layer<S>>>,
        pools: Pools,
        stats: Arc<HttpStats>,
        request_timeout: Option<Duration>,
        answers: Answers,
    ) -> Self {
        let Pools { fibers, monitor } = pools;
        let layers: Arc<[Arc<dyn Layer<S>>]> = layers.into();
        for route in router.routes_mut() {
            let ep = &mut route.handler;
            if !ep.layers.is_empty() {
                let chain: Vec<_> = layers.iter().chain(&ep.layers).cloned().collect();
                ep.chain = Some(chain.into());
            }
        }
        Routed {
            router,
            state,
            layers,
            fibers,
            monitor,
            stats,
            request_timeout,
            answers,
        }
    }

    pub(crate) fn stats(&self) -> &Arc<HttpStats> {
        &self.stats
    }

    pub(crate) fn state(&self) -> &Arc<S> {
        &self.state
    }

    /// The response to `req`, or `None` when its client (`peer`, when there is one)
    /// left while it waited for its turn or fiber since `asked`
    /// ([`fiber_pool::monotonic_nanos`]; then it is not run).
    ///
    /// The request comes back with the outcome: the same box, or, when its job did
    /// not give it back, a new one holding its line.
    pub(crate) fn route(
        &self,
        mut req: Box<Request>,
        peer: Option<&Peer<'_>>,
        asked: u64,
    ) -> (Option<Outcome>, Box<Request>) {
        let kept = req.context.take();
        self.answers.begin(&mut req);
        let (mut outcome, mut req, ctx) = self.route_in(kept, req, peer, asked);
        req.context = ctx;
        // Counted, logged and sent (or seen by the test client) as it goes out.
        if let Some((resp, _, _)) = &mut outcome {
            resp.status = crate::http::status::on_the_wire(resp.status);
            self.answers.finish(resp, &req);
        }
        (outcome, req)
    }

    /// [`route`](Self::route) in the context the connection `kept` from its last
    /// request that needed one, renewed here if this one does (a request answered
    /// on the carrier without a limit needs none), and given back (with the
    /// deadline it got) for the connection's next request.
    fn route_in(
        &self,
        kept: Option<Context>,
        mut req: Box<Request>,
        peer: Option<&Peer<'_>>,
        asked: u64,
    ) -> (Option<Outcome>, Box<Request>, Option<Context>) {
        let mut params = std::mem::take(&mut req.params);
        let found = self.router.resolve(&req.method, req.path(), &mut params);
        req.params = params;
        let (route, end) = match found {
            Ok(route) => (
                Some(route),
                JobEnd::Handler(Arc::clone(&route.handler.handler)),
            ),
            // With no layer to see it, a refusal needs no fiber.
            Err(refused) if self.layers.is_empty() => {
                return (Some((refused, None, None)), req, kept)
            }
            Err(refused) => (None, JobEnd::Refused(Box::new(refused))),
        };
        let label = route.map(|r| r.label);
        let ep = route.map(|r| &r.handler);
        let on_carrier = ep.is_some_and(|ep| ep.on_carrier);
        if on_carrier && ep.is_some_and(|ep| ep.limit.is_none()) {
            let resp = end.run(&[], &self.state, &mut req);
            return (Some((resp, label, None)), req, kept);
        }
        // A connection's first such request makes its context with room for the
        // hooks; its later ones renew it, room and all.
        let ctx = kept.map_or_else(
            || {
                let ctx = Context::new();
                ctx.reserve_hooks(HOOKS_RESERVED);
                ctx
            },
            Context::renewed,
        );
        let with_layers = !ep.is_some_and(|ep| ep.without_layers || on_carrier);
        // The request's context: its deadline (the earlier of the server's and the
        // route's), and its cancellation when its client goes (the sweeper watches
        // the client while the job runs: `peer.watch`). Every wait of the job sees
        // it: the fiber queue, a MySQL checkout and query, an HTTP call, a sleep.
        let timeout = match (self.request_timeout, ep.and_then(|ep| ep.timeout)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let ctx = match timeout {
            Some(t) => ctx.with_timeout(t.saturating_sub(since(asked))),
            None => ctx,
        };
        let turn = match ep.and_then(|ep| ep.limit.as_ref()) {
            Some(limit) => match limit.enter(label.unwrap_or(UNMATCHED), ctx.deadline()) {
                Ok(turn) => Some(turn),
                Err(refused) => return (Some((refused, label, None)), req, Some(ctx)),
            },
            None => None,
        };
        if on_carrier {
            let resp = end.run(&[], &self.state, &mut req);
            return (Some((resp, label, None)), req, Some(ctx));
        }
        let watched = peer.map(|p| p.watch(&ctx));
        // A request that waited for its turn or its fiber may have lost its client
        // meanwhile: then it is not run (the check costs a system call, so a request
        // that did not wait skips it, and one that could not have waited, on an
        // unlimited route with a fiber free at once, does not even read the clock).
        let limited = turn.is_some();
        let fiber_label = label.unwrap_or(UNMATCHED);
        let client = peer.map(Peer::client);
        let start = |admitted: Admitted| {
            let could_wait = admitted.queued || limited;
            !(could_wait && since(asked) >= WAITED && client.is_some_and(|c| c.gone()))
        };
        // The job owns what it uses (an overflow abandons its frames, and what they
        // borrowed could still be in use after `run` returns): the request's box
        // moves in and comes back with the response, a pointer each way. A job that
        // does not come back (refused, overflowed, panicked) takes it along, so its
        // line is copied first for the error and the log line, into the connection's
        // box for it (`Peer::take_line`).
        let mut kept = peer.and_then(Peer::take_line);
        let line = req.line_into(&mut kept);
        let chain = ep.and_then(|ep| ep.chain.as_ref()).unwrap_or(&self.layers);
        let (state, layers) = (Arc::clone(&self.state), Arc::clone(chain));
        let mut owned = req;
        let job = move || {
            let layers: &[Arc<dyn Layer<S>>] = if with_layers { &layers } else { &[] };
            let resp = end.run(layers, &state, &mut owned);
            (resp, owned)
        };
        let fibers = if ep.is_some_and(|ep| ep.monitoring) {
            &self.monitor
        } else {
            &self.fibers
        };
        let (ran, stack_used) = fibers.run_admitted_in(fiber_label, Some(&ctx), start, job);
        drop(turn);
        drop(watched);
        let (resp, req) = self.ran(ran, line, fiber_label, fibers.config(), &ctx);
        if let Some(peer) = peer {
            peer.keep_line(kept);
        }
        (resp.map(|resp| (resp, label, stack_used)), req, Some(ctx))
    }

    /// The response of a request's run, and its request: the box the job gave back,
    /// or one rebuilt from `line`. `None` when its client has gone. Out of line: the
    /// responses made here are in no frame while the job runs (the run's caller is
    /// on the connection's stack, which every kept-alive connection keeps whole).
    #[inline(never)]
    fn ran(
        &self,
        ran: Result<Option<(Response, Box<Request>)>, RunError>,
        line: &RequestLine,
        fiber_label: &'static str,
        fibers: &fiber_pool::PoolConfig,
        ctx: &Context,
    ) -> (Option<Response>, Box<Request>) {
        let (ran, req) = match ran {
            Ok(Some((resp, back))) => (Ok(Some(resp)), back),
            Ok(None) => (Ok(None), line.to_request()),
            Err(e) => (Err(e), line.to_request()),
        };
        // A client gone: nobody reads the answer, so nothing is sent and the
        // connection closes. Counted as abandoned when no handler ran (its client
        // left while it waited for a fiber), as cancelled when one was stopped.
        let gone = ctx.reason() == Some(CancelReason::ClientGone);
        let resp = match ran {
            Ok(None) => {
                self.stats.abandoned();
                None
            }
            Err(RunError::Cancelled { .. }) if gone => {
                self.stats.abandoned();
                None
            }
            _ if gone => {
                self.stats.cancelled();
                None
            }
            Ok(Some(resp)) => Some(resp),
            Err(e) => Some(fiber_error(fiber_label, &req, e, fibers)),
        };
        (resp, req)
    }
}

impl<S: Send + Sync + 'static> Service for Routed<S> {
    fn default_headers(&self) -> &DefaultHeaders {
        &self.answers.default_headers
    }

    fn request_id_header(&self) -> Option<&'static str> {
        self.answers.id_header()
    }

    fn refusal(&self, resp: Response, sent_id: Option<&str>, wants_json: bool) -> Response {
        self.answers.refusal(resp, sent_id, wants_json)
    }

    fn refuses(&self, req: &Request) -> Option<Response> {
        if !self.layers.is_empty() {
            return None; // a layer may answer it (a CORS preflight): read the body
        }
        let mut params = Default::default();
        self.router
            .resolve(&req.method, req.path(), &mut params)
            .err()
    }

    fn call(&self, req: Box<Request>, peer: &Peer<'_>) -> (Option<Response>, Box<Request>) {
        // One clock read starts the request: its latency, and the wait that decides
        // whether its client is checked before it runs (`route`).
        let started = fiber_pool::monotonic_nanos();
        let (outcome, req) = self.route(req, Some(peer), started);
        let took = since(started);
        let Some((resp, label, stack_used)) = outcome else {
            // Its client left: no answer, but an access line, so a log shows every
            // request.
            if self.stats.access_log() {
                let status = crate::logging::CLIENT_GONE;
                let id = req.request_id();
                crate::logging::access(&req.method, req.path(), status, took, None, None, id);
            }
            return (None, req);
        };
        // Recorded and logged here, on the carrier's stack, never on a fiber.
        self.stats.request(label, resp.status, took);
        let id = req.request_id();
        if resp.status >= 500 {
            let label = label.unwrap_or(UNMATCHED);
            let said = resp
                .problem()
                .and_then(|p| p.internal())
                .map_or(&resp.body[..], str::as_bytes);
            crate::logging::server_error(&req.method, label, resp.status, said, id);
        }
        if self.stats.access_log() {
            crate::logging::access(
                &req.method,
                req.path(),
                resp.status,
                took,
                label,
                stack_used,
                id,
            );
        }
        (Some(resp), req)
    }
}

/// The time since `then`, a [`fiber_pool::monotonic_nanos`] reading.
pub(crate) fn since(then: u64) -> Duration {
    Duration::from_nanos(fiber_pool::monotonic_nanos().saturating_sub(then))
}

/// What a request's job ends in, owned by the job: the route's handler, or the
/// router's refusal (for the layers to see). The refusal is boxed: the job is in the
/// frame of its run, on the connection's stack, and a handler's is two words.
enum JobEnd<S> {
    Handler(Arc<dyn Handler<S>>),
    Refused(Box<Response>),
}

impl<S> JobEnd<S> {
    /// `layers`, then this end, for `req`.
    fn run(self, layers: &[Arc<dyn Layer<S>>], state: &S, req: &mut Request) -> Response {
        match self {
            JobEnd::Handler(handler) => Next::new(layers, End::Handler(&*handler)).run(state, req),
            JobEnd::Refused(resp) => Next::new(layers, End::Refused(*resp)).run(state, req),
        }
    }
}

/// The response for a request whose fiber could not run or did not finish.
fn fiber_error(
    label: &str,
    req: &Request,
    e: RunError,
    fibers: &fiber_pool::PoolConfig,
) -> Response {
    match e {
        RunError::Busy { queue } => queue_full("fibers", fibers.size, queue),
        RunError::Timeout { .. } => {
            wait_timed_out("fiber", fibers.wait_timeout.unwrap_or_default())
        }
        RunError::Cancelled { reason } => Problem::new(
            504,
            "deadline-exceeded",
            format!("the request was {reason} while it waited for a fiber"),
        )
        .with_internal(format!(
            "route {label} ({} {}): {reason} while the request waited for a fiber",
            req.method,
            target(req)
        ))
        .into(),
        RunError::StackOverflow {
            stack_size,
            at_safe_point,
            ..
        } => {
            // Say only what is known: at a safe point the fiber held nothing; anywhere
            // else it may have held a lock or been initialising a Once/LazyLock.
            let aftermath = if at_safe_point {
                "The server is fine and kept serving: the overflow struck at a safe point, \
                 holding nothing"
            } else {
                "The overflow struck outside a safe point: state the handler held (a lock, \
                 a Once/LazyLock being initialised) may be left behind, so this process \
                 asks to be replaced, and the stall watchdog reports any thread that hangs \
                 on it meanwhile"
            };
            Problem::new(
                500,
                "handler-failed",
                format!("fiber stack overflow in route {label}: the request could not be handled"),
            )
            .with_internal(format!(
                "fiber stack overflow in route {label} ({} {}): its {stack_size}-byte stack \
                 was too small. {aftermath}. Restart with a larger --stack-size (see \
                 STACK_SIZES.md)",
                req.method,
                target(req),
            ))
            .into()
        }
        other => Problem::new(
            500,
            "handler-failed",
            format!("route {label} failed: the request could not be handled"),
        )
        .with_internal(format!("route {label} failed: {other}"))
        .into(),
    }
}

/// The request target as sent: path and query.
fn target(req: &Request) -> String {
    if req.query_string().is_empty() {
        req.path().to_string()
    } else {
        format!("{}?{}", req.path(), req.query_string())
    }
}
