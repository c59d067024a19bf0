//! The fiber server: an accept loop, one coroutine per connection, and every routed
//! handler run on a fiber of the pool.
//!
//! ```text
//! accept loop (may coroutine) --spawn--> connection coroutine (carrier, 16 KiB may stack)
//!     parse request (conn.rs) -> router -> FiberPool::run(label, handler)
//!                                              '-> handler on a guarded fiber stack:
//!                                                  db.query(..), http.get(..) yield to may
//! ```
//! Fiber errors become responses here: a full queue or a long wait is a 503 with
//! Retry-After, a stack overflow or a panic a 500 that says what happened and is logged.
//! Every routed request is counted (route, status, latency: `stats.rs`) and, with
//! `--access-log on`, gets its access line; both happen here, on the connection's
//! coroutine after the fiber has finished, never on the fiber (a locking logger there
//! could be abandoned mid-write by an overflow: STACK_SIZES.md).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::{same_label, Admitted, FiberPool, RunError};
use may::io::WaitIo;
use may::io::WaitIoWaker;

use crate::config::HttpLimits;
use crate::http::conn::{self, Client, Service};
use crate::http::idle::Sweeper;
use crate::http::listener::{self, Listener};
use crate::http::refusal::{over_limit, queue_full, wait_timed_out, OVER_LIMIT_WRITE_TIMEOUT};
use crate::http::router::Router;
use crate::http::{Handler, Request, Response};
use crate::shutdown::{Drained, Stop};
use crate::stats::HttpStats;

/// Routes, the state their handlers share, and the fibers they run on.
pub struct App<S> {
    pub router: Router<Handler<S>>,
    pub state: Arc<S>,
    pub fibers: FiberPool,
    /// Admission limits of single routes, checked before a fiber is taken.
    pub limits: RouteLimits,
    /// The server's counters: each routed request is recorded here (the same handle
    /// [`spawn`] is given), and its `access_log` says whether requests are logged.
    pub stats: Arc<HttpStats>,
}

/// At most `max` requests of one route at once, waiting up to `wait` for a turn;
/// checked on the connection's coroutine, before the request takes a fiber.
///
/// This is what keeps `/widgets/http` from starving: every such request holds a fiber
/// while it calls `/widgets` on this same server, which needs a fiber too. If the
/// self-calling route could take every fiber, the inner calls would wait for fibers
/// that only their own callers could free. Limited to a share of the fibers, the
/// rest stay free for the inner calls, and every request finishes.
///
/// A route may also take no fiber at all ([`RouteLimits::on_carrier`]).
#[derive(Clone, Default)]
pub struct RouteLimits {
    limits: Vec<(&'static str, Arc<RouteLimit>)>,
    on_carrier: Vec<&'static str>,
}

struct RouteLimit {
    permits: may::sync::Semphore,
    max: usize,
    wait: Duration,
    why: &'static str,
}

/// A turn in a limited route; given back on drop.
pub struct Turn(Option<Arc<RouteLimit>>);

impl Turn {
    /// Whether this turn was given by a route limit (it may have waited for it).
    fn is_limited(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(limit) = &self.0 {
            limit.permits.post();
        }
    }
}

impl RouteLimits {
    /// Allow at most `max` (at least 1) requests of route `label` at once; `why` ends
    /// the 503 message a refused request gets.
    pub fn limit(
        mut self,
        label: &'static str,
        max: usize,
        wait: Duration,
        why: &'static str,
    ) -> Self {
        let max = max.max(1);
        self.limits.push((
            label,
            Arc::new(RouteLimit {
                permits: may::sync::Semphore::new(max),
                max,
                wait,
                why,
            }),
        ));
        self
    }

    /// Run route `label`'s handler on the connection's coroutine (the carrier), not on
    /// a fiber: for short, bounded handlers that take std locks (a fiber must not) and
    /// must answer even when every fiber is busy, like `/metrics`. Such a handler has
    /// the carrier's stack (`HttpLimits::connection_stack`) and no overflow recovery.
    pub fn on_carrier(mut self, label: &'static str) -> Self {
        self.on_carrier.push(label);
        self
    }

    /// Whether route `label` runs on the carrier ([`RouteLimits::on_carrier`]).
    pub fn runs_on_carrier(&self, label: &str) -> bool {
        self.on_carrier.iter().any(|l| same_label(l, label))
    }

    /// Wait for a turn in `label` (unlimited routes pass at once), or the 503.
    pub fn enter(&self, label: &str) -> Result<Turn, Response> {
        let Some((_, limit)) = self.limits.iter().find(|(l, _)| same_label(l, label)) else {
            return Ok(Turn(None));
        };
        if limit.permits.wait_timeout(limit.wait) {
            Ok(Turn(Some(Arc::clone(limit))))
        } else {
            Err(Response::error(
                503,
                format!(
                    "{} requests of route {label} are already running, its limit ({}); \
                     waited {} ms for a turn; try again shortly",
                    limit.max,
                    limit.why,
                    limit.wait.as_millis()
                ),
            )
            .header("Retry-After", "1"))
        }
    }
}

impl<S: Send + Sync + 'static> Service for App<S> {
    fn refuses(&self, req: &Request) -> Option<Response> {
        self.router.resolve(&req.method, req.path()).err()
    }

    fn call(&self, req: &Request, client: &Client<'_>) -> Option<Response> {
        // One clock read starts the request: its latency, and the wait that decides
        // whether its client is checked before it runs (`route`).
        let started = Instant::now();
        let (resp, label, stack_used) = self.route(req, client, started)?;
        let took = started.elapsed();
        // Recorded and logged here, on the carrier's stack, never on a fiber.
        self.stats.request(label, resp.status, took);
        if let Some(label) = label.filter(|_| resp.status >= 500) {
            crate::logging::server_error(&req.method, label, resp.status, &resp.body);
        }
        if self.stats.access_log() {
            crate::logging::access(
                &req.method,
                req.path(),
                resp.status,
                took,
                label,
                stack_used,
            );
        }
        Some(resp)
    }
}

/// How long a request must have waited for its turn and fiber before its client is
/// checked ([`Client::gone`]); shorter waits are the client's own round trip.
const WAITED: Duration = Duration::from_millis(1);

/// How often [`Server::shutdown`] looks whether the accept loop has ended.
const ACCEPT_EXIT_POLL: Duration = Duration::from_millis(10);

/// What [`App::route`] gives back: the response, its route's label (`None`: no route
/// matched) and, when this run was measured, the stack its fiber used.
type Routed = (Response, Option<&'static str>, Option<usize>);

impl<S: Send + Sync + 'static> App<S> {
    /// The response to `req`, or `None` when its client left while it waited for its
    /// turn or fiber since `asked` (then it is not run).
    fn route(&self, req: &Request, client: &Client<'_>, asked: Instant) -> Option<Routed> {
        let route = match self.router.resolve(&req.method, req.path()) {
            Ok(route) => route,
            Err(refused) => return Some((refused, None, None)),
        };
        let label = Some(route.label);
        let turn = match self.limits.enter(route.label) {
            Ok(turn) => turn,
            Err(refused) => return Some((refused, label, None)),
        };
        let handler = route.handler;
        let state: &S = &self.state;
        if self.limits.runs_on_carrier(route.label) {
            return Some((handler(state, req), label, None));
        }
        // A request that waited for its turn or its fiber may have lost its client
        // meanwhile: then it is not run (the check costs a system call, so a request
        // that did not wait skips it, and one that could not have waited, on an
        // unlimited route with a fiber free at once, does not even read the clock).
        let limited = turn.is_limited();
        let job = move |admitted: Admitted| {
            let could_wait = admitted.queued || limited;
            if could_wait && asked.elapsed() >= WAITED && client.gone() {
                return None;
            }
            Some(handler(state, req))
        };
        let (ran, stack_used) = self.fibers.run_admitted(route.label, job);
        let resp = match ran {
            Ok(Some(resp)) => resp,
            Ok(None) => return None,
            Err(e) => fiber_error(route.label, req, e, self.fibers.config()),
        };
        Some((resp, label, stack_used))
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
                "The overflow struck inside the handler's own code: state it held (a lock, \
                 a Once/LazyLock being initialised) may be left behind; the stall \
                 watchdog reports any thread that hangs on it"
            };
            Response::error(
                500,
                format!(
                    "fiber stack overflow in route {label} ({} {}): its {stack_size}-byte stack \
                     was too small. {aftermath}. Restart with a larger --stack-size (see \
                     STACK_SIZES.md)",
                    req.method,
                    target(req),
                ),
            )
        }
        other => Response::error(500, format!("route {label} failed: {other}")),
    }
}

/// The request target as sent: path and query.
fn target(req: &Request) -> String {
    if req.query().is_empty() {
        req.path().to_string()
    } else {
        format!("{}?{}", req.path(), req.query())
    }
}

/// A running server: its address, and the handle that stops it.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<Stop>,
    /// Wakes the accept loop from its wait for a connection, to see the stop flag.
    wake_accept: WaitIoWaker,
    accept: Option<fiber_pool::carrier::JoinHandle<()>>,
}

/// Start serving `service` on `listener` (bound here, or inherited: see
/// [`listener::Listener`]) in may coroutines; returns at once. From here on the panic
/// hook set so far runs on a stack of its own when a handler panics on a fiber
/// (`fiber_pool::run_panic_hook_off_fiber`: printing on a fiber near its limit could
/// overflow with stderr's lock held).
#[allow(unsafe_code)]
pub fn spawn(
    listener: impl Into<Listener>,
    service: Arc<dyn Service>,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
) -> io::Result<Server> {
    fiber_pool::run_panic_hook_off_fiber();
    let listener = listener.into();
    let addr = listener.socket.local_addr()?;
    let stop = Arc::new(Stop::default());
    let accept_stop = Arc::clone(&stop);
    let wake_accept = listener.socket.waker();
    let sweeper = Sweeper::start(Arc::clone(&stop))?;
    // Without an accept loop no connection comes: the sweeper may end at once.
    let unless_accepting = Arc::clone(&sweeper);
    let accept = move || accept_loop(listener, service, limits, stats, accept_stop, sweeper);
    // SAFETY: the accept loop and the connection loops it spawns use no
    // thread-local and hold no std lock guard or stdio lock across a wait (their
    // waits are may I/O and sleeps between statements; logging locks stderr within
    // one call); the handlers they run on fibers keep `fiber_pool::lock`'s guards
    // off their waits too.
    let accept = unsafe { fiber_pool::carrier::spawn("accept", None, accept) }
        .inspect_err(|_| unless_accepting.close())?;
    Ok(Server {
        addr,
        stop,
        wake_accept,
        accept: Some(accept),
    })
}

/// Accept with std's non-blocking `accept(2)` and wait in may between connections
/// (`wait_io`), instead of may's `accept`: a coroutine parked in may's `accept` cannot
/// be woken without a connection, and on a listening socket shared with other workers
/// that connection may go to any of them. The waker ([`Server::shutdown`]) ends the
/// wait at once, so a stopping worker takes no connection after it was told to stop.
#[allow(unsafe_code)]
fn accept_loop(
    listener: Listener,
    service: Arc<dyn Service>,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
    stop: Arc<Stop>,
    sweeper: Arc<Sweeper>,
) {
    let limits = Arc::new(limits);
    loop {
        if stop.is_stopping() && listener.shared {
            break; // the backlog is the other workers' to serve
        }
        let stream = match listener.socket.inner().accept() {
            Ok((stream, _)) => fiber_pool::net::adopt_stream(stream),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stop.is_stopping() {
                    // Stopping, and nothing else waits in the backlog: close the port.
                    break;
                }
                listener.socket.wait_io();
                continue;
            }
            Err(e) => Err(e),
        };
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                if stop.is_stopping() {
                    break;
                }
                // Out of file descriptors and the like: say so, back off, go on.
                log::error!("fiberstack: accept failed: {e}");
                may::coroutine::sleep(listener::ACCEPT_RETRY_PAUSE);
                continue;
            }
        };
        // When stopping, a connection still taken here waited in our own backlog: the
        // kernel completed its handshake, so its client believes it was accepted. It is
        // served (with `Connection: close`) instead of reset by the port's closing.
        stats.accepted();
        if stop.connections() >= limits.max_connections {
            stats.rejected_connection();
            let max = limits.max_connections;
            let refuse = move || reject(stream, max);
            // SAFETY: one write and a close: no thread-bound state across a wait.
            unsafe { fiber_pool::carrier::go(refuse) };
        } else {
            spawn_connection(stream, &service, &limits, &stats, &stop, &sweeper);
        }
    }
    sweeper.close();
    // Dropping the listener here closes the port (or, when shared, our copy of it).
}

/// Serve `stream` on a coroutine of its own, counted until it closes.
#[allow(unsafe_code)]
fn spawn_connection(
    stream: may::net::TcpStream,
    service: &Arc<dyn Service>,
    limits: &Arc<HttpLimits>,
    stats: &Arc<HttpStats>,
    stop: &Arc<Stop>,
    sweeper: &Arc<Sweeper>,
) {
    let counted = (stop.connection_opened(), stats.connection_open());
    let (service, limits, stats, stop, sweeper) = (
        Arc::clone(service),
        Arc::clone(limits),
        Arc::clone(stats),
        Arc::clone(stop),
        Arc::clone(sweeper),
    );
    let stack = Some(limits.connection_stack);
    let serve = move || {
        let _counted = counted;
        conn::serve(stream, &*service, &limits, &stop, &stats, &sweeper);
    };
    // SAFETY: as for the accept loop in `spawn`: the connection loop and its
    // handlers hold no thread-bound state across a wait.
    let spawned = unsafe { fiber_pool::carrier::spawn("conn", stack, serve) };
    if let Err(e) = spawned {
        log::error!("fiberstack: cannot start a connection coroutine: {e}");
    }
}

/// Answer a connection over the limit with a 503 and close it.
fn reject(mut stream: may::net::TcpStream, max: usize) {
    let _ = stream.set_write_timeout(Some(OVER_LIMIT_WRITE_TIMEOUT));
    conn::send_and_close(&mut stream, &over_limit(max));
}

impl Server {
    /// The address the server listens on (with the real port when bound to port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared shutdown state (connections and requests in flight).
    pub fn stop_state(&self) -> &Arc<Stop> {
        &self.stop
    }

    /// Stop accepting, let in-flight requests finish for up to `grace`, and report.
    /// The accept loop is waited for within `grace` too: it is a coroutine, and one of
    /// may's threads may be held for ever (a handler blocked on a lock an overflow
    /// left behind; tests/adversarial.rs), with the accept loop queued behind it.
    pub fn shutdown(mut self, grace: Duration) -> Drained {
        let deadline = Instant::now() + grace;
        self.stop.begin();
        self.wake_accept.wakeup();
        if let Some(accept) = self.accept.take() {
            while !accept.is_done() && Instant::now() < deadline {
                std::thread::sleep(ACCEPT_EXIT_POLL);
            }
            if accept.is_done() {
                let _ = accept.join();
            }
        }
        Drained {
            connections_left: self
                .stop
                .wait_drained(deadline.saturating_duration_since(Instant::now())),
        }
    }

    /// Block until the accept loop ends (it ends only through `shutdown`).
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}
