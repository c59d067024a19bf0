//! The socket under a connection: `fiber_pool::net::CarrierStream`, a may socket whose
//! reads, writes, connect and drop run on the carrier's stack, never on a fiber's.
//!
//! On a fiber of `fiber_pool`, a stack overflow is caught and the fiber's frames are
//! abandoned. If it struck inside may's I/O machinery (registering the wait with the
//! event loop and the timer list, under may's own locks), those locks would stay held
//! and the whole scheduler would stop. Running may's code on the carrier
//! (`fiber_pool::on_carrier`) keeps every may frame off the fiber stack, so no
//! overflow can strike there. Off a fiber it is a direct call.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use fiber_pool::net::CarrierStream;

/// A connected socket whose may calls run on the carrier's stack.
#[derive(Debug)]
pub(crate) struct Stream(CarrierStream);

impl Stream {
    /// Connect within `timeout` through `fiber_pool::net::connect` (on the carrier's
    /// stack), not may's `TcpStream::connect_timeout`, which races when the connect's
    /// event arrives on another I/O thread (see that module).
    pub(crate) fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<Stream> {
        fiber_pool::net::connect(addr, timeout).map(Stream)
    }
}

// To the CarrierStream, not the may socket under it: its timeouts are set on the
// carrier (may keeps its own copy of them).
impl Deref for Stream {
    type Target = CarrierStream;

    fn deref(&self) -> &CarrierStream {
        &self.0
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
