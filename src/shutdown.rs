//! Graceful shutdown: one flag that says "stop", and counters whose reaching zero says
//! every connection and request has finished.
//!
//! The accept loop stops taking connections when the flag is set; connections finish
//! the request they are in, answer it with `Connection: close`, and idle ones close at
//! their next poll. `Server::shutdown` waits on the counters up to a deadline.

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
    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
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

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Wait (sleeping in may) until no connection is open or `deadline` passes;
    /// returns the connections still open.
    pub fn wait_drained(&self, grace: Duration) -> usize {
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
