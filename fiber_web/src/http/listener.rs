//! Binding the listening socket so that a taken port is an error, not shared traffic.
//!
//! may's `TcpListener::bind` sets SO_REUSEPORT, so a second server on a taken port
//! would start silently and split the traffic with the first. Before may binds, we
//! bind the address once with std (which sets no SO_REUSEPORT): Linux refuses that
//! while any socket listens there, so a taken port is reported with the flag to change.
//!
//! A listening socket can also be inherited (from `fiberstack`'s supervisor, or from
//! systemd's socket activation: see `supervisor/inherit.rs`): [`adopt`] hands it to may
//! as a [`Listener`] marked shared, whose backlog other processes serve too.
//!
//! may also hard-codes a listen backlog of 1024; we raise it to
//! `HttpLimits::listen_backlog` so that a burst of connects (ab -c 2000) waits in the
//! kernel instead of being dropped.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::config::HttpLimits;

/// The pause after a failed accept (out of file descriptors and the like) before the
/// accept loop tries again: long enough not to spin, short enough to go unnoticed.
pub const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(10);

/// A listening socket for the server, and whether it is shared with other processes.
#[derive(Debug)]
pub(crate) struct Listener {
    /// The listening socket, registered with may.
    pub(crate) socket: may::net::TcpListener,
    /// Inherited: a supervisor and its other workers hold the same socket. A stopping
    /// server then stops accepting at once and leaves the backlog to them; a server
    /// that owns its socket serves the backlog before it closes the port.
    pub(crate) shared: bool,
}

impl From<may::net::TcpListener> for Listener {
    fn from(socket: may::net::TcpListener) -> Self {
        Listener {
            socket,
            shared: false,
        }
    }
}

/// Serve an inherited listening socket (from a supervisor or systemd), shared with the
/// processes that hold it too.
pub(crate) fn adopt(inherited: std::net::TcpListener) -> io::Result<Listener> {
    Ok(Listener {
        socket: fiber_pool::net::adopt_listener(inherited)?,
        shared: true,
    })
}

/// Bind `addr` for may with the default backlog, refusing a taken port.
pub fn bind(addr: SocketAddr) -> io::Result<may::net::TcpListener> {
    bind_with_backlog(addr, HttpLimits::default().listen_backlog)
}

/// Bind `addr` for may, refusing a port another process already listens on, with
/// `backlog` connections queued in the kernel.
pub(crate) fn bind_with_backlog(
    addr: SocketAddr,
    backlog: i32,
) -> io::Result<may::net::TcpListener> {
    if addr.port() != 0 {
        std::net::TcpListener::bind(addr).map_err(|e| bind_error(addr, e))?;
    }
    let listener = may::net::TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {addr}: {e}")))?;
    // Calling listen again on a listening socket only changes its backlog.
    socket2::SockRef::from(listener.inner())
        .listen(backlog)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    Ok(listener)
}

/// A failed bind of `addr` as the user reads it: a taken port names the flag to change
/// (shared with the twin's listener).
pub fn bind_error(addr: SocketAddr, e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::AddrInUse {
        io::Error::new(
            e.kind(),
            format!("{addr} is already in use: stop the other server or pass another --bind"),
        )
    } else {
        io::Error::new(e.kind(), format!("cannot bind {addr}: {e}"))
    }
}
