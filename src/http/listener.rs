//! Binding the listening socket so that a taken port is an error, not shared traffic.
//!
//! may's `TcpListener::bind` sets SO_REUSEPORT, so a second server on a taken port
//! would start silently and split the traffic with the first. Before may binds, we
//! bind the address once with std (which sets no SO_REUSEPORT): Linux refuses that
//! while any socket listens there, so a taken port is reported with the flag to change.

use std::io;
use std::net::SocketAddr;

/// Bind `addr` for may, refusing a port another process already listens on.
pub fn bind(addr: SocketAddr) -> io::Result<may::net::TcpListener> {
    if addr.port() != 0 {
        std::net::TcpListener::bind(addr).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{addr} is already in use: stop the other server or pass another --bind"
                    ),
                )
            } else {
                io::Error::new(e.kind(), format!("cannot bind {addr}: {e}"))
            }
        })?;
    }
    may::net::TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {addr}: {e}")))
}
