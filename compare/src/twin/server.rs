//! The async server: an accept loop, one tokio task per connection speaking HTTP/1.x
//! with hyper, and the axum router behind it; compare `fiber_web/src/server.rs`.
//!
//! ```text
//! accept loop (task) --spawn--> connection task: hyper http1 (keep-alive, HTTP/1.0
//!     closes unless asked, header timeout) -> conformance::admit (Host, target)
//!     -> axum router -> limit::run -> handler
//! ```
//! The same limits as the fiber server where hyper has them: open connections (503 and
//! close past `max_connections`), header count and size, header timeout. Shutdown is a
//! watch channel: the accept loop stops, each connection finishes the request it is in
//! and closes, and [`Server::shutdown`] waits for the connection count to reach zero.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper::service::{service_fn, Service as _};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::twin::limit::RouteLabel;
use crate::twin::Reply;
use fiber_web::metrics::HttpStats;
use fiber_web::rig::{
    bind_error, look_for_departures, over_limit, Probe, Seen, Stop, ACCEPT_RETRY_PAUSE, IDLE_TICK,
    OVER_LIMIT_WRITE_TIMEOUT,
};
use fiber_web::{Drained, Response};
use fiberstack::config::HttpLimits;

/// How often `shutdown` looks whether every connection has closed.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// hyper's smallest read buffer; the head limit cannot go below it.
const MIN_BUF: usize = 8192;

/// A running server: its address, and the handle that stops it.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<Stop>,
    stopping: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

/// Bind `addr` (tokio sets no SO_REUSEPORT, so a taken port is an error) with the
/// same message as the fiber server's listener, and `backlog` connections queued in
/// the kernel (`HttpLimits::listen_backlog`, as on fibers).
pub async fn bind(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(addr, e))?;
    // tokio listens with 1024, like may: raise it to the same configured backlog as
    // the fiber server (`HttpLimits::listen_backlog`), so both meet a connection storm alike.
    socket2::SockRef::from(&listener)
        .listen(backlog)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    Ok(listener)
}

/// What every connection of one server shares.
#[derive(Clone)]
struct Serving {
    router: Router,
    limits: Arc<HttpLimits>,
    stats: Arc<HttpStats>,
    stop: Arc<Stop>,
    /// `--request-timeout`: past it a request is answered 504.
    request_timeout: Option<Duration>,
}

/// Start serving `router` on `listener` in tokio tasks; returns at once.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
    request_timeout: Option<Duration>,
) -> io::Result<Server> {
    let addr = listener.local_addr()?;
    let stop = Arc::new(Stop::default());
    let (stopping, stopped) = watch::channel(false);
    let serving = Serving {
        router,
        limits: Arc::new(limits),
        stats,
        stop: Arc::clone(&stop),
        request_timeout,
    };
    let accept = tokio::spawn(accept_loop(listener, serving, stopped));
    Ok(Server {
        addr,
        stop,
        stopping,
        accept,
    })
}

async fn accept_loop(listener: TcpListener, serving: Serving, mut stopped: watch::Receiver<bool>) {
    let Serving {
        stats,
        stop,
        limits,
        ..
    } = &serving;
    loop {
        let stream = tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: say so, back off, go on.
                    log::error!("fiberstack: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        stats.accepted();
        if stop.connections() >= limits.max_connections {
            stats.rejected_connection();
            tokio::spawn(reject(stream, limits.max_connections));
            continue;
        }
        let counted = stop.connection_opened();
        tokio::spawn(serve_connection(
            stream,
            serving.clone(),
            stopped.clone(),
            counted,
        ));
    }
    // Dropping the listener here closes the port: new connections are refused.
}

/// Serve one connection until it closes, errs, or the server stops.
async fn serve_connection(
    stream: TcpStream,
    serving: Serving,
    mut stopped: watch::Receiver<bool>,
    _counted: fiber_web::rig::Connection,
) {
    let Serving {
        router,
        limits,
        stats,
        stop,
        request_timeout,
    } = serving;
    let _ = stream.set_nodelay(true);
    // A copy of the socket, for the look at a request's client: hyper owns the stream.
    // Without one (no descriptor left) requests are not watched for their client.
    let socket = std::os::fd::AsFd::as_fd(&stream)
        .try_clone_to_owned()
        .ok()
        .map(Arc::new);
    let routed = TowerToHyperService::new(router);
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (stats, stop, socket) = (Arc::clone(&stats), Arc::clone(&stop), socket.clone());
        let started = Instant::now();
        let minor_version = u8::from(req.version() != hyper::Version::HTTP_10);
        // Copied only when an access line will be written.
        let logged = stats
            .access_log()
            .then(|| (req.method().clone(), req.uri().path().to_string()));
        let response = crate::twin::conformance::admit(req).map(|req| routed.call(req));
        async move {
            let _in_flight = stop.request_started();
            let resp = match response {
                Ok(routed) => {
                    // Dropping the handler's future cancels it (a query it runs is
                    // killed); the error closes the connection with nothing sent.
                    let deadline = deadline_of(started, request_timeout);
                    // The deadline is looked at first: a runtime polled late (a loaded
                    // machine) finds both the handler and a passed deadline ready, and
                    // the deadline's answer is the one the request is owed.
                    let resp = tokio::select! {
                        biased;
                        () = deadline => {
                            let passed = Response::error(
                                504,
                                "the request's deadline passed (--request-timeout)",
                            );
                            axum::response::IntoResponse::into_response(Reply(passed))
                        }
                        resp = routed => resp?,
                        () = client_gone(socket, minor_version) => {
                            stats.cancelled();
                            return Err(ClientGone);
                        }
                    };
                    observe(&stats, &resp, started, logged);
                    resp
                }
                Err(refused) => axum::response::IntoResponse::into_response(Reply(refused)),
            };
            stats.response(resp.status().as_u16());
            Ok::<_, ClientGone>(resp)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        // Answer a client that shut down its sending side after its request, as the
        // fiber server does (hyper's default drops the request on that EOF).
        .half_close(true)
        .header_read_timeout(limits.header_timeout)
        .max_headers(limits.max_headers)
        .max_buf_size(limits.max_header_bytes.max(MIN_BUF))
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopped.changed() => {
            // Finish the request in flight (answered with `Connection: close`), then close.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Why a request's future ended without an answer: its client went away.
#[derive(Debug)]
struct ClientGone;

impl std::fmt::Display for ClientGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client went away")
    }
}

impl std::error::Error for ClientGone {}

impl From<std::convert::Infallible> for ClientGone {
    fn from(never: std::convert::Infallible) -> ClientGone {
        match never {}
    }
}

/// Resolves at the request's deadline, `timeout` after `started`; never without one.
async fn deadline_of(started: Instant, timeout: Option<Duration>) {
    match timeout {
        Some(t) => tokio::time::sleep_until((started + t).into()).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the client of a request in flight on `socket` (a copy of its
/// connection's) has gone: the fiber server's rule (fiber_web's `http/departure.rs`),
/// looked at every tick from the request's second tick on. (The fiber server's sweeper
/// looks only at the requests whose sockets its epoll set of hang-ups names: one
/// `epoll_wait` a tick, where this is one `poll(2)` a tick for each request.) Never
/// without a socket.
async fn client_gone(socket: Option<Arc<std::os::fd::OwnedFd>>, minor_version: u8) {
    let Some(socket) = socket else {
        return std::future::pending().await;
    };
    let mut probe = Probe::new(minor_version);
    loop {
        tokio::time::sleep(IDLE_TICK).await;
        let fd = std::os::fd::AsFd::as_fd(&*socket);
        if look_for_departures(&mut [(fd, &mut probe)])[0] == Seen::Gone {
            return;
        }
    }
}

/// Count a routed request by its route (the label `limit::run` put on the response;
/// none: no route matched) and write its access line, as the fiber server does.
fn observe(
    stats: &HttpStats,
    resp: &axum::response::Response,
    started: Instant,
    logged: Option<(hyper::Method, String)>,
) {
    let status = resp.status().as_u16();
    let route = resp.extensions().get::<RouteLabel>().map(|r| r.0);
    let took = started.elapsed();
    stats.request(route, status, took);
    if let Some((method, path)) = logged {
        fiber_web::rig::access(method.as_str(), &path, status, took, route, None, None);
    }
}

/// Answer a connection over the limit with a 503 and close it.
async fn reject(mut stream: TcpStream, max: usize) {
    let out = over_limit(max);
    let _ = tokio::time::timeout(OVER_LIMIT_WRITE_TIMEOUT, stream.write_all(&out)).await;
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
    pub async fn shutdown(self, grace: Duration) -> Drained {
        self.stop.begin();
        let _ = self.stopping.send(true);
        let _ = self.accept.await;
        let deadline = Instant::now() + grace;
        while self.stop.connections() > 0 && Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        Drained {
            connections_left: self.stop.connections(),
        }
    }
}
