//! The socket under a connection: over TCP, `fiber_pool::net::CarrierStream`, a may
//! socket whose reads, writes, connect and drop run on the carrier's stack, never on a
//! fiber's; over a Unix socket, a plain blocking std socket for the launcher's
//! administrator (start-up code, never on a fiber).
//!
//! On a fiber of `fiber_pool`, a stack overflow is caught and the fiber's frames are
//! abandoned. If it struck inside may's I/O machinery (registering the wait with the
//! event loop and the timer list, under may's own locks), those locks would stay held
//! and the whole scheduler would stop. Running may's code on the carrier
//! (`fiber_pool::on_carrier`) keeps every may frame off the fiber stack, so no
//! overflow can strike there. Off a fiber it is a direct call.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use fiber_pool::net::CarrierStream;

use crate::framing::Exchange;

/// A connected socket.
#[derive(Debug)]
pub(crate) enum Stream {
    /// TCP through may, every may call on the carrier's stack.
    Tcp(CarrierStream),
    /// A blocking Unix socket: only [`crate::launcher`]'s administrator uses it, from
    /// start-up code that blocks its thread anyway (see that module).
    Unix(UnixStream),
}

impl Stream {
    /// Connect within `timeout` through `fiber_pool::net::connect` (on the carrier's
    /// stack), not may's `TcpStream::connect_timeout`, which races when the connect's
    /// event arrives on another I/O thread (see that module).
    pub(crate) fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<Stream> {
        fiber_pool::net::connect(addr, timeout).map(Stream::Tcp)
    }

    /// A blocking connection to the Unix socket at `path` (a local connect: no timeout).
    pub(crate) fn connect_unix(path: &Path) -> io::Result<Stream> {
        UnixStream::connect(path).map(Stream::Unix)
    }

    /// A second descriptor of a TCP socket, whose `shutdown` ends the connection
    /// without touching this stream (`None` for a Unix socket).
    pub(crate) fn shutdown_handle(&self) -> Option<std::net::TcpStream> {
        match self {
            Stream::Tcp(s) => s.shutdown_handle().ok(),
            Stream::Unix(_) => None,
        }
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// `TCP_NODELAY`; nothing to do on a Unix socket.
    pub(crate) fn set_nodelay(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nodelay(true),
            Stream::Unix(_) => Ok(()),
        }
    }

    /// A read that neither consumes nor waits: `WouldBlock` when nothing has arrived.
    /// The blocking Unix socket cannot peek without waiting, and is never pooled: it
    /// answers `WouldBlock`, "nothing to read".
    pub(crate) fn peek_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.peek_now(buf),
            Stream::Unix(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Exchange for Stream {
    /// Over TCP in one switch to the carrier (`CarrierStream::write_all_then_read`).
    fn write_all_then_read(&mut self, out: &[u8], buf: &mut [u8]) -> io::Result<io::Result<usize>> {
        match self {
            Stream::Tcp(s) => s.write_all_then_read(out, buf),
            Stream::Unix(s) => {
                s.write_all(out)?;
                Ok(s.read(buf))
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}
