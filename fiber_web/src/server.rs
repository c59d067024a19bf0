//! The fiber server: an accept loop and one coroutine per connection, each serving
//! its requests through a [`Service`] (a built app: `dispatch.rs`).
//!
//! ```text
//! accept loop (may coroutine) --spawn--> connection coroutine (carrier, 32 KiB may stack)
//!     parse request (conn.rs) -> Service::call (dispatch.rs: router, layers, handler
//!                                on a guarded fiber: db.query(..), http.get(..) yield)
//! ```

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use may::io::WaitIo;
use may::io::WaitIoWaker;

use crate::config::HttpLimits;
use crate::counters::HttpStats;
use crate::http::conn::{self, Service};
use crate::http::idle::Sweeper;
use crate::http::listener::{self, Listener};
use crate::http::refusal::{over_limit, OVER_LIMIT_WRITE_TIMEOUT};
use crate::shutdown::{Drained, Stop};

/// How often [`Server::shutdown`] looks whether the accept loop has ended.
const ACCEPT_EXIT_POLL: Duration = Duration::from_millis(10);

/// A running server: the handle that stops it.
pub(crate) struct Server {
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
pub(crate) fn spawn(
    listener: impl Into<Listener>,
    service: Arc<dyn Service>,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
) -> io::Result<Server> {
    fiber_pool::run_panic_hook_off_fiber();
    let listener = listener.into();
    let stop = Arc::new(Stop::default());
    let wake_accept = listener.socket.waker();
    let sweeper = Sweeper::start(Arc::clone(&stop))?;
    // Without an accept loop no connection comes: the sweeper may end at once.
    let unless_accepting = Arc::clone(&sweeper);
    let parts = Arc::new(Parts {
        service,
        limits,
        stats,
        stop: Arc::clone(&stop),
        sweeper,
    });
    let accept = move || accept_loop(listener, parts);
    let accept = fiber_pool::carrier::spawn("accept", None, accept)
        .inspect_err(|_| unless_accepting.close())?;
    Ok(Server {
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
fn accept_loop(listener: Listener, parts: Arc<Parts>) {
    let Parts {
        limits,
        stats,
        stop,
        sweeper,
        ..
    } = &*parts;
    loop {
        if stop.is_stopping() && listener.shared && !crate::supervisor::every_worker_stops() {
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
                log::error!(target: crate::logging::app_name(), "accept failed: {e}");
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
            fiber_pool::carrier::go(refuse);
        } else {
            spawn_connection(stream, &parts);
        }
    }
    sweeper.close();
    // Dropping the listener here closes the port (or, when shared, our copy of it).
}

/// What every connection coroutine uses of the server, shared by one pointer.
struct Parts {
    service: Arc<dyn Service>,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
    stop: Arc<Stop>,
    sweeper: Arc<Sweeper>,
}

/// Serve `stream` on a coroutine of its own, counted until it closes.
fn spawn_connection(stream: may::net::TcpStream, parts: &Arc<Parts>) {
    let counted = (
        parts.stop.connection_opened(),
        parts.stats.connection_open(),
    );
    let stack = Some(parts.limits.connection_stack);
    // Homed on the worker whose event loop waits for this socket: its reads and
    // writes wake it on its own thread, where it (and every request's fiber on it)
    // runs from start to end.
    let fd = stream.as_raw_fd();
    // What the coroutine needs, in one box that lives as long as the connection: the
    // closure may keeps at the top of the coroutine's stack, and the frame that calls
    // `serve`, each hold a pointer, where the values themselves would take a resident
    // page's worth of a connection's stack past its first page (BENCHMARKS.md, "The
    // headline rows"). Kept, not emptied and freed as `serve` begins: a box freed
    // there left a hole in the heap that the next connection did not always fill.
    let conn = Box::new(Conn {
        stream,
        parts: Arc::clone(parts),
        _counted: counted,
    });
    let serve = move || conn.serve();
    let spawned = fiber_pool::spawn::spawn_for_socket("conn", stack, &fd, serve);
    if let Err(e) = spawned {
        log::error!(target: crate::logging::app_name(), "cannot start a connection coroutine: {e}");
    }
}

/// A connection's coroutine's start: its socket and the server's parts it uses.
struct Conn<C> {
    stream: may::net::TcpStream,
    parts: Arc<Parts>,
    /// Counts the connection as open until it ends.
    _counted: C,
}

impl<C> Conn<C> {
    #[expect(
        clippy::boxed_local,
        reason = "the box is the point: the coroutine's closure holds a pointer (see spawn_connection)"
    )]
    fn serve(self: Box<Self>) {
        // The socket moves out; the rest stays in the box until the connection ends.
        let stream = self.stream;
        let Parts {
            service,
            limits,
            stats,
            stop,
            sweeper,
        } = &*self.parts;
        conn::serve(stream, &**service, limits, stop, stats, sweeper);
    }
}

/// Answer a connection over the limit with a 503 and close it.
fn reject(mut stream: may::net::TcpStream, max: usize) {
    let _ = stream.set_write_timeout(Some(OVER_LIMIT_WRITE_TIMEOUT));
    conn::send_and_close(&mut stream, &over_limit(max));
}

impl Server {
    /// The shared shutdown state (connections and requests in flight).
    pub(crate) fn stop_state(&self) -> &Arc<Stop> {
        &self.stop
    }

    /// Stop accepting, let in-flight requests finish for up to `grace`, and report.
    /// The accept loop is waited for within `grace` too: it is a coroutine, and one of
    /// may's threads may be held for ever (a handler blocked on a lock an overflow
    /// left behind; tests/adversarial.rs), with the accept loop queued behind it.
    pub(crate) fn shutdown(mut self, grace: Duration) -> Drained {
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
}
