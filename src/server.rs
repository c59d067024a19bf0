//! The fiber server: an accept loop, one coroutine per connection, and every routed
//! handler run on a fiber of the pool.
//!
//! ```text
//! accept loop (may coroutine) --spawn--> connection coroutine (carrier, 32 KiB may stack)
//!     parse request (conn.rs) -> router -> FiberPool::run(label, handler)
//!                                              '-> handler on a guarded fiber stack:
//!                                                  db.query(..), http.get(..) yield to may
//! ```
//! Fiber errors become responses here: a full queue or a long wait is a 503 with
//! Retry-After, a stack overflow or a panic a 500 that says what happened and is logged.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fiber_pool::{FiberPool, RunError};
use may::net::TcpListener;

use crate::config::HttpLimits;
use crate::http::conn::{self, Service};
use crate::http::listener;
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
}

/// At most `max` requests of one route at once, waiting up to `wait` for a turn;
/// checked on the connection's coroutine, before the request takes a fiber.
///
/// This is what keeps `/widgets/http` from starving: every such request holds a fiber
/// while it calls `/widgets` on this same server, which needs a fiber too. If the
/// self-calling route could take every fiber, the inner calls would wait for fibers
/// that only their own callers could free. Limited to a share of the fibers, the
/// rest stay free for the inner calls, and every request finishes.
#[derive(Clone, Default)]
pub struct RouteLimits {
    limits: Vec<(&'static str, Arc<RouteLimit>)>,
}

struct RouteLimit {
    permits: may::sync::Semphore,
    max: usize,
    wait: Duration,
    why: &'static str,
}

/// A turn in a limited route; given back on drop.
pub struct Turn(Option<Arc<RouteLimit>>);

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

    /// Wait for a turn in `label` (unlimited routes pass at once), or the 503.
    pub fn enter(&self, label: &str) -> Result<Turn, Response> {
        let Some((_, limit)) = self.limits.iter().find(|(l, _)| *l == label) else {
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
        self.router.resolve(&req.method, &req.path).err()
    }

    fn call(&self, req: &Request) -> Response {
        let route = match self.router.resolve(&req.method, &req.path) {
            Ok(route) => route,
            Err(refused) => return refused,
        };
        let _turn = match self.limits.enter(route.label) {
            Ok(turn) => turn,
            Err(refused) => return refused,
        };
        let handler = route.handler;
        let state: &S = &self.state;
        let resp = match self.fibers.run(route.label, move || handler(state, req)) {
            Ok(resp) => resp,
            Err(e) => fiber_error(route.label, req, e, self.fibers.config()),
        };
        if resp.status >= 500 {
            // Logged here, on the carrier's stack, never on a fiber near its limit.
            eprintln!(
                "fiberstack: {} {} -> {}: {}",
                req.method,
                route.label,
                resp.status,
                String::from_utf8_lossy(&resp.body).trim_end()
            );
        }
        resp
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
    if req.query.is_empty() {
        req.path.clone()
    } else {
        format!("{}?{}", req.path, req.query)
    }
}

/// How long `shutdown`'s wake-up connection to the accept loop may take (loopback).
const WAKE_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A running server: its address, and the handle that stops it.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<Stop>,
    accept: Option<fiber_pool::carrier::JoinHandle<()>>,
}

/// Start serving `service` on `listener` in may coroutines; returns at once.
pub fn spawn(
    listener: TcpListener,
    service: Arc<dyn Service>,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
) -> io::Result<Server> {
    let addr = listener.local_addr()?;
    let stop = Arc::new(Stop::default());
    let accept_stop = Arc::clone(&stop);
    let accept = fiber_pool::carrier::spawn("accept", None, move || {
        accept_loop(listener, service, limits, stats, accept_stop)
    })?;
    Ok(Server {
        addr,
        stop,
        accept: Some(accept),
    })
}

fn accept_loop(
    listener: TcpListener,
    service: Arc<dyn Service>,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
    stop: Arc<Stop>,
) {
    let limits = Arc::new(limits);
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                if stop.is_stopping() {
                    break;
                }
                // Out of file descriptors and the like: say so, back off, go on.
                eprintln!("fiberstack: accept failed: {e}");
                may::coroutine::sleep(listener::ACCEPT_RETRY_PAUSE);
                continue;
            }
        };
        stats.accepted();
        if stop.connections() >= limits.max_connections {
            stats.rejected_connection();
            let max = limits.max_connections;
            fiber_pool::carrier::go(move || reject(stream, max));
        } else {
            spawn_connection(stream, &service, &limits, &stats, &stop);
        }
        if stop.is_stopping() && !pending(&listener) {
            // Stopping, and nothing else waits in the backlog: close the port. (The
            // connection just served may be `shutdown`'s wake-up call: it reads EOF.)
            break;
        }
    }
    // Dropping the listener here closes the port: new connections are refused.
}

/// Serve `stream` on a coroutine of its own, counted until it closes.
fn spawn_connection(
    stream: may::net::TcpStream,
    service: &Arc<dyn Service>,
    limits: &Arc<HttpLimits>,
    stats: &Arc<HttpStats>,
    stop: &Arc<Stop>,
) {
    let counted = stop.connection_opened();
    let (service, limits, stats, stop) = (
        Arc::clone(service),
        Arc::clone(limits),
        Arc::clone(stats),
        Arc::clone(stop),
    );
    let spawned = fiber_pool::carrier::spawn("conn", Some(limits.connection_stack), move || {
        let _counted = counted;
        conn::serve(stream, &*service, &limits, &stop, &stats);
    });
    if let Err(e) = spawned {
        eprintln!("fiberstack: cannot start a connection coroutine: {e}");
    }
}

/// Whether a connection waits in the listener's backlog. The kernel completed its
/// handshake, so its client believes it was accepted: when stopping, the accept loop
/// serves every such connection (with `Connection: close`) before it closes the port,
/// instead of letting the close reset them.
fn pending(listener: &TcpListener) -> bool {
    use fiber_pool::net::{poll_now, PollFlags};
    use std::os::fd::AsFd;
    poll_now(listener.inner().as_fd(), PollFlags::POLLIN).is_ok_and(|ready| !ready.is_empty())
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
    pub fn shutdown(mut self, grace: Duration) -> Drained {
        self.stop.begin();
        self.wake_accept();
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        Drained {
            connections_left: self.stop.wait_drained(grace),
        }
    }

    /// Block until the accept loop ends (it ends only through `shutdown`).
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }

    /// The accept loop waits in `accept`; a connection to ourselves wakes it to see
    /// the stop flag.
    fn wake_accept(&self) {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = std::net::TcpStream::connect_timeout(&addr, WAKE_CONNECT_TIMEOUT);
    }
}
