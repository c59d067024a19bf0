//! Graceful shutdown: one flag that says "stop", and counters whose reaching zero says
//! every connection and request has finished.
//!
//! The accept loop stops taking connections when the flag is set; connections finish
//! the request they are in, answer it with `Connection: close`, and idle ones close at
//! their next poll. `Server::shutdown` waits on the counters up to a deadline. A
//! supervised worker that a stack overflow left suspect sets the flag itself
//! (`suspect.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a graceful shutdown left behind.
#[derive(Debug)]
pub struct Drained {
    /// Connections still open when the grace period ended (0 = all finished).
    pub connections_left: usize,
}

/// Shared by the accept loop, every connection, and whoever stops the server.
#[derive(Debug, Default)]
pub struct Stop {
    stopping: AtomicBool,
    connections: AtomicUsize,
    in_flight: AtomicUsize,
}

impl Stop {
    /// Whether shutdown has begun, or this supervised worker was left suspect by a
    /// stack overflow (`suspect.rs`): it then stops as if told to, from that moment.
    pub fn is_stopping(&self) -> bool {
        if self.stopping.load(Ordering::Acquire) {
            return true;
        }
        if crate::suspect::stopped() {
            if !self.stopping.swap(true, Ordering::AcqRel) {
                // The first to see it tells the supervisor at once (the watchdog's own
                // request may come a tick later, or be held up behind a log line it
                // prints first): this worker accepts no more, and the port is the
                // replacement's, or the supervisor's meanwhile. A second request is
                // ignored by the supervisor.
                crate::suspect::tell_supervisor(
                    "a stack overflow outside a safe point left this worker suspect",
                );
            }
            self.begin();
            return true;
        }
        false
    }

    /// Begin shutdown (idempotent).
    pub fn begin(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Count a connection until the guard drops; the guard can move into the
    /// connection's coroutine, so it is counted from the moment it was accepted.
    pub fn connection_opened(self: &Arc<Self>) -> Connection {
        self.connections.fetch_add(1, Ordering::AcqRel);
        Connection(Arc::clone(self))
    }

    /// Count a request being handled until the guard drops.
    pub fn request_started(&self) -> Counted<'_> {
        Counted::new(&self.in_flight)
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Wait (sleeping in may) until no connection is open or `deadline` passes;
    /// returns the connections still open.
    pub(crate) fn wait_drained(&self, grace: Duration) -> usize {
        let deadline = Instant::now() + grace;
        while self.connections() > 0 && Instant::now() < deadline {
            may::coroutine::sleep(Duration::from_millis(20));
        }
        self.connections()
    }
}

/// An open connection; uncounted on drop.
pub struct Connection(Arc<Stop>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Decrements its counter on drop.
pub struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(c: &'a AtomicUsize) -> Self {
        c.fetch_add(1, Ordering::AcqRel);
        Counted(c)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The requests to stop this process, from whichever source comes first: signals, and
/// (for a supervised worker) the supervisor (`supervisor::stop_requests` adds it).
pub struct StopRequests {
    tx: std::sync::mpsc::Sender<String>,
    rx: std::sync::mpsc::Receiver<String>,
}

impl StopRequests {
    /// Turn SIGTERM, and SIGINT when `on_sigint`, into stop requests. Registered before
    /// anything starts, a signal during start-up is not lost.
    pub(crate) fn install(on_sigint: bool) -> std::io::Result<Self> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let (tx, rx) = std::sync::mpsc::channel();
        // A supervised worker still registers SIGINT, to ignore it: Ctrl-C reaches the
        // whole process group, and its supervisor stops the workers in order.
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let signal_tx = tx.clone();
        std::thread::Builder::new()
            .name("stop-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    let name = if signal == SIGINT {
                        "SIGINT"
                    } else {
                        "SIGTERM"
                    };
                    if (signal != SIGINT || on_sigint)
                        && signal_tx.send(format!("got {name}")).is_err()
                    {
                        return;
                    }
                }
            })?;
        Ok(StopRequests { tx, rx })
    }

    /// Another source of stop requests.
    pub(crate) fn sender(&self) -> std::sync::mpsc::Sender<String> {
        self.tx.clone()
    }

    /// Block until a stop is requested; why.
    pub fn wait(&self) -> String {
        // `self.tx` lives as long as `self`: recv cannot fail.
        self.rx
            .recv()
            .unwrap_or_else(|_| "no source of stop requests is left".into())
    }
}
