//! [`Conn`]: one upstream connection, plain or TLS, with its read buffer, and the
//! reads and writes of an exchange, each bounded by a [`Deadline`].
//!
//! The socket is a [`CarrierStream`]: every may call (read, write, timeouts, drop)
//! runs on the carrier's stack. TLS is rustls' `ClientConnection` driven by hand over
//! that socket: rustls only encrypts, decrypts and keeps state (on the fiber, where an
//! overflow is caught, and with its buffers on the heap); whenever it wants bytes moved
//! ([`rustls::ClientConnection::read_tls`] / `write_tls`) they go through the
//! `CarrierStream`, so a wait parks the carrier in may like any socket wait and never
//! blocks the scheduler thread. A `Conn` always lives in a [`fiber_pool::Lent`] while a
//! fiber uses it, so an overflow mid-exchange closes it instead of leaking it.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::net::CarrierStream;

use super::deadline::Deadline;

/// The read buffer a connection starts with, and keeps while it is idle in the pool: a
/// response head and a small body fit in one read, and a hundred idle connections hold
/// 400 KiB.
const FIRST_READ: usize = 4 * 1024;
/// The largest single read: a large body is read in reads that double up to this.
const MAX_READ: usize = 64 * 1024;

/// Why a read or write did not complete.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Its deadline passed.
    TimedOut,
    /// The socket failed (or, over TLS, the peer closed without close_notify:
    /// `UnexpectedEof`).
    Io(io::Error),
    /// rustls refused what arrived (a certificate, a record).
    Tls(rustls::Error),
}

impl Failure {
    /// Whether this is how a kept-alive connection that the server had closed fails
    /// on its first use: a reset, a broken pipe, or an end without any response.
    pub(crate) fn is_closed_connection(&self) -> bool {
        matches!(self, Failure::Io(e) if matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
        ))
    }
}

/// A read buffer that is zeroed once, when it grows, not before every read: `filled`
/// is `data[start..end]`, `data[end..]` the room for the next read. Reads start at
/// [`FIRST_READ`] bytes and double, up to [`MAX_READ`], while each fills the room it
/// was given.
struct Buf {
    data: Vec<u8>,
    start: usize,
    end: usize,
    /// Room the next read gets at least.
    want: usize,
}

impl Buf {
    fn new() -> Buf {
        Buf {
            data: vec![0; FIRST_READ],
            start: 0,
            end: 0,
            want: FIRST_READ,
        }
    }

    /// Room for at least `want` more bytes after the filled part.
    fn spare(&mut self) -> &mut [u8] {
        let want = self.want;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.data.len() - self.end < want && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.data.len() - self.end < want {
            let grown = (self.end + want).max(2 * self.data.len());
            self.data.resize(grown, 0);
        }
        &mut self.data[self.end..]
    }

    /// `n` bytes arrived in the room [`Buf::spare`] gave.
    fn commit(&mut self, n: usize) {
        self.end += n;
        if n >= self.want {
            self.want = (2 * self.want).min(MAX_READ);
        }
    }

    /// Empty, and back to its first size if a large response grew it.
    fn reset(&mut self) {
        (self.start, self.end, self.want) = (0, 0, FIRST_READ);
        if self.data.len() > FIRST_READ {
            self.data.truncate(FIRST_READ);
            self.data.shrink_to_fit();
        }
    }
}

/// An open connection to one origin.
pub(crate) struct Conn {
    tcp: CarrierStream,
    /// Boxed: rustls' state is a few KiB, kept off the fiber's stack.
    tls: Option<Box<rustls::ClientConnection>>,
    buf: Buf,
    /// The body being read: here, inside the connection's `Lent`, so that an overflow
    /// mid-body frees it (up to `max_response_bytes`) with the connection.
    pub(crate) body: Vec<u8>,
    /// The socket timeouts set now, so that an unchanged one is not set again (each
    /// is a setsockopt and may's own copy).
    read_armed: Option<Duration>,
    write_armed: Option<Duration>,
    /// When it went back to the pool.
    pub(crate) idle_since: Instant,
    /// The cancel hook of the call using it (`follow.rs`), with the gate that keeps it
    /// off the connection once the call has given it back: here, inside the
    /// connection's `Lent`, with the connection.
    pub(crate) following: Option<super::follow::Following>,
}

impl Conn {
    /// A connected TCP socket, plain for now.
    pub(crate) fn new(tcp: CarrierStream) -> Conn {
        Conn {
            tcp,
            tls: None,
            buf: Buf::new(),
            body: Vec::new(),
            read_armed: None,
            write_armed: None,
            idle_since: Instant::now(),
            following: None,
        }
    }

    /// Start TLS on this socket and complete the handshake (certificate checks
    /// included) within `deadline`.
    pub(crate) fn handshake(
        &mut self,
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        deadline: Deadline,
    ) -> Result<(), Failure> {
        let tls = rustls::ClientConnection::new(config, name).map_err(Failure::Tls)?;
        let tls = self.tls.insert(Box::new(tls));
        let mut io = Io {
            tcp: &mut self.tcp,
            read_armed: &mut self.read_armed,
            write_armed: &mut self.write_armed,
        };
        while tls.is_handshaking() {
            io.flush_tls(tls, deadline)?;
            if !tls.is_handshaking() {
                break;
            }
            if !tls.wants_read() {
                return Err(Failure::Tls(rustls::Error::General(
                    "the handshake stalled: rustls wants neither to read nor to write".into(),
                )));
            }
            io.read_tls(tls, deadline)?;
            if let Err(e) = tls.process_new_packets() {
                // Tell the server why (rustls queued an alert); the error is ours either way.
                let _ = io.flush_tls(tls, deadline);
                return Err(Failure::Tls(e));
            }
        }
        // What rustls still has to send (TLS 1.3's client Finished) goes out with the
        // request's first write.
        Ok(())
    }

    /// Whether this connection is TLS.
    pub(crate) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Write all of `data` within `deadline`.
    pub(crate) fn write_all(&mut self, data: &[u8], deadline: Deadline) -> Result<(), Failure> {
        let mut io = Io {
            tcp: &mut self.tcp,
            read_armed: &mut self.read_armed,
            write_armed: &mut self.write_armed,
        };
        let Some(tls) = self.tls.as_deref_mut() else {
            io.arm_write(deadline)?;
            return io.tcp.write_all(data).map_err(io_failure);
        };
        let mut sent = 0;
        while sent < data.len() {
            // rustls takes what fits its send buffer, then we drain it to the socket.
            let n = tls.writer().write(&data[sent..]).map_err(Failure::Io)?;
            sent += n;
            if n == 0 && !tls.wants_write() {
                return Err(Failure::Io(io::ErrorKind::WriteZero.into()));
            }
            io.flush_tls(tls, deadline)?;
        }
        io.flush_tls(tls, deadline)
    }

    /// The bytes read and not yet consumed.
    pub(crate) fn filled(&self) -> &[u8] {
        &self.buf.data[self.buf.start..self.buf.end]
    }

    /// Mark `n` filled bytes as used.
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.buf.end - self.buf.start);
        self.buf.start += n;
    }

    /// Move `n` filled bytes to the end of the body.
    pub(crate) fn consume_into_body(&mut self, n: usize) {
        let (start, end) = (self.buf.start, self.buf.start + n);
        self.body.extend_from_slice(&self.buf.data[start..end]);
        self.buf.start = end;
    }

    /// Read more bytes within `deadline`: how many arrived, 0 at the end of the stream
    /// (over TLS: after the server's close_notify; an end without it is
    /// `UnexpectedEof`).
    pub(crate) fn fill(&mut self, deadline: Deadline) -> Result<usize, Failure> {
        let mut io = Io {
            tcp: &mut self.tcp,
            read_armed: &mut self.read_armed,
            write_armed: &mut self.write_armed,
        };
        let buf = &mut self.buf;
        let Some(tls) = self.tls.as_deref_mut() else {
            io.arm_read(deadline)?;
            let n = io.tcp.read(buf.spare()).map_err(io_failure)?;
            buf.commit(n);
            return Ok(n);
        };
        loop {
            match tls.reader().read(buf.spare()) {
                Ok(n) => {
                    buf.commit(n);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Failure::Io(e)),
            }
            // No plaintext buffered: more records from the socket. At its end rustls
            // remembers the end, and the next `reader().read` says how it ended.
            io.read_tls(tls, deadline)?;
            tls.process_new_packets().map_err(Failure::Tls)?;
            // A key update or an alert to answer.
            io.flush_tls(tls, deadline)?;
        }
    }

    /// Ready to go back to the pool: no bytes left over, the buffer cut back if a
    /// large response grew it.
    pub(crate) fn park(&mut self) {
        self.buf.reset();
        self.body = Vec::new();
        self.idle_since = Instant::now();
    }

    /// A copy of the socket with which a cancel ends this connection's waits
    /// ([`CarrierStream::shutdown_handle`]).
    pub(crate) fn shutdown_handle(&self) -> io::Result<std::net::TcpStream> {
        self.tcp.shutdown_handle()
    }

    /// `TCP_NODELAY`: requests are written whole, nothing to wait for.
    pub(crate) fn set_nodelay(&self) {
        // Only latency depends on it: a failure is not the call's.
        let _ = self.tcp.set_nodelay(true);
    }

    /// Has the server sent anything (an end, a reset, unexpected bytes) on this idle
    /// connection? One non-blocking peek, no may call.
    pub(crate) fn has_news(&self) -> bool {
        let mut byte = [0u8; 1];
        !matches!(self.tcp.peek_now(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// The socket and its armed timeouts, borrowed apart from the TLS state.
struct Io<'a> {
    tcp: &'a mut CarrierStream,
    read_armed: &'a mut Option<Duration>,
    write_armed: &'a mut Option<Duration>,
}

impl Io<'_> {
    fn arm_read(&mut self, deadline: Deadline) -> Result<(), Failure> {
        let wait = deadline.wait().ok_or(Failure::TimedOut)?;
        if *self.read_armed != Some(wait) {
            self.tcp.set_read_timeout(Some(wait)).map_err(Failure::Io)?;
            *self.read_armed = Some(wait);
        }
        Ok(())
    }

    fn arm_write(&mut self, deadline: Deadline) -> Result<(), Failure> {
        let wait = deadline.wait().ok_or(Failure::TimedOut)?;
        if *self.write_armed != Some(wait) {
            self.tcp
                .set_write_timeout(Some(wait))
                .map_err(Failure::Io)?;
            *self.write_armed = Some(wait);
        }
        Ok(())
    }

    /// Send what rustls has queued.
    fn flush_tls(
        &mut self,
        tls: &mut rustls::ClientConnection,
        deadline: Deadline,
    ) -> Result<(), Failure> {
        while tls.wants_write() {
            self.arm_write(deadline)?;
            tls.write_tls(self.tcp).map_err(io_failure)?;
        }
        Ok(())
    }

    /// Move one read's worth of records from the socket into rustls (0 at the end).
    fn read_tls(
        &mut self,
        tls: &mut rustls::ClientConnection,
        deadline: Deadline,
    ) -> Result<usize, Failure> {
        self.arm_read(deadline)?;
        tls.read_tls(self.tcp).map_err(io_failure)
    }
}

/// A socket error, with may's timeouts (`TimedOut`, or `WouldBlock` from a read
/// whose timeout ran out) as [`Failure::TimedOut`].
fn io_failure(e: io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Failure::TimedOut,
        _ => Failure::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{Buf, FIRST_READ, MAX_READ};

    #[test]
    fn the_buffer_compacts_before_it_grows_and_keeps_what_is_filled() {
        let mut b = Buf::new();
        b.spare()[3990..4000].copy_from_slice(b"0123456789");
        b.commit(4000);
        b.start = 3998;
        // A whole first read's room does not fit beside what is filled, even
        // compacted: the buffer grows, with the filled bytes moved to its start.
        assert!(b.spare().len() >= FIRST_READ);
        assert_eq!(b.data.len(), 2 * FIRST_READ);
        assert_eq!((b.start, &b.data[b.start..b.end]), (0, &b"89"[..]));
        // Consumed to the last byte but two, a smaller room fits by compacting alone.
        let len = b.data.len();
        b.end = len - 2;
        b.start = len - 4;
        assert!(b.spare().len() >= FIRST_READ);
        assert_eq!(
            (b.data.len(), b.start, b.end),
            (len, 0, 2),
            "compacted, not grown"
        );
    }

    #[test]
    fn reads_that_fill_their_room_double_it_and_a_reset_gives_the_memory_back() {
        let mut b = Buf::new();
        for _ in 0..8 {
            let room = b.spare().len();
            b.commit(room);
            b.start = b.end;
        }
        assert_eq!(b.want, MAX_READ);
        b.spare();
        assert!(b.data.len() >= MAX_READ);
        b.reset();
        assert_eq!(
            (b.data.len(), b.want, b.start, b.end),
            (FIRST_READ, FIRST_READ, 0, 0)
        );
        assert!(b.data.capacity() < 2 * FIRST_READ);
    }
}
