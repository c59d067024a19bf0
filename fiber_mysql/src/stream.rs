//! The socket under a connection: may's `TcpStream`, with a stack check before every
//! read, write and connect, and a connect that avoids may's racy one.
//!
//! On a fiber of `fiber_pool`, a stack overflow is caught and the fiber's frames are
//! abandoned. If it struck inside may's I/O machinery (registering the wait with the
//! event loop and the timer list, under may's own locks), those locks would stay held
//! and the whole scheduler would stop. `fiber_pool::reserve_stack` makes the overflow
//! strike before the call instead, where nothing is held. Off a fiber it is a no-op
//! costing a few nanoseconds.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use may::net::TcpStream;

/// A connected socket whose I/O never starts without stack to finish it.
#[derive(Debug)]
pub(crate) struct Stream(TcpStream);

impl Stream {
    /// Connect within `timeout` through `fiber_pool::net::connect` (which does the same
    /// stack check), not may's `TcpStream::connect_timeout`, which races when the
    /// connect's event arrives on another I/O thread (see that module).
    pub(crate) fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<Stream> {
        fiber_pool::net::connect(addr, timeout).map(Stream)
    }
}

impl Deref for Stream {
    type Target = TcpStream;

    fn deref(&self) -> &TcpStream {
        &self.0
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        fiber_pool::reserve_stack(fiber_pool::IO_STACK_MARGIN);
        self.0.read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        fiber_pool::reserve_stack(fiber_pool::IO_STACK_MARGIN);
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
