//! Whether the client of a request in flight has gone, so that its work can be
//! cancelled: one rule for both runtimes (the fiber server's sweeper and the async
//! twin's watcher both call [`look`]).
//!
//! A client that resets its connection (a killed process, a proxy giving up) is gone:
//! the socket reports `POLLHUP` or `POLLERR`. A client that closes its end sends a FIN,
//! and so does one that only shuts down its sending side and still waits for the
//! answer (HTTP allows it): the socket reports `POLLRDHUP` for both, and nothing
//! tells them apart until something is sent. So, once, an HTTP/1.1 client is sent an
//! interim `103 Early Hints` response with no hints, which RFC 9110 (section 15.2)
//! requires every HTTP/1.1 client to accept and skip: a client still reading ignores
//! it, and the kernel of one that has closed answers it with a reset, which the next
//! look sees. An HTTP/1.0 client cannot be sent an interim response (RFC 9110 section
//! 15.2): its FIN is taken as a half-close, and it is cancelled only on a reset.
//!
//! A look is one `poll(2)` with a zero timeout for any number of sockets; a socket it
//! finds readable is peeked at (`recv(2)` with `MSG_PEEK`: 0 bytes is the FIN, bytes
//! are a pipelined request, which says nothing), and the one probe a request gets at
//! most is one `send(2)`.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use fiber_pool::net::{PollFlags, RawPoll};
use nix::errno::Errno;
use nix::sys::socket::{recv, send, MsgFlags};

/// The interim response that tells a client still reading from one that has closed.
pub(crate) const PROBE: &[u8] = b"HTTP/1.1 103 Early Hints\r\n\r\n";

/// What is known about one request's client, kept between looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// The request's minor version (0: HTTP/1.0, which gets no interim response).
    pub(crate) minor_version: u8,
    /// Whether the probe was sent.
    pub(crate) sent: bool,
}

impl Probe {
    /// The state for a request of HTTP/1.`minor_version`.
    pub fn new(minor_version: u8) -> Probe {
        Probe {
            minor_version,
            sent: false,
        }
    }
}

/// What a look found about one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Nothing says it left (it may have half-closed: it waits for the answer).
    Here,
    /// It reset the connection, or its kernel answered the probe with a reset: no
    /// answer can reach it.
    Gone,
}

/// Look at each of `clients` once (one `poll`), sending the probe where a FIN came
/// first; what was seen of each, in order. Each socket is borrowed for the look, so it
/// stays open meanwhile. A socket the look cannot use is `Here`: its connection's own
/// read or write will fail and end it.
///
/// A descriptor's number is refused: the look writes to the socket, which must be the
/// caller's.
///
/// ```compile_fail,E0308
/// use fiber_web::rig::{look_for_departures as look, Probe};
/// let mut probe = Probe::new(1);
/// look(&mut [(3, &mut probe)]);
/// ```
pub fn look(clients: &mut [(BorrowedFd<'_>, &mut Probe)]) -> Vec<Seen> {
    let mut raw: Vec<(RawFd, &mut Probe)> = clients
        .iter_mut()
        .map(|(fd, probe)| (fd.as_raw_fd(), &mut **probe))
        .collect();
    look_raw(&mut raw)
}

/// [`look`] at descriptors by number, for the server's sweeper, which holds no borrow
/// of its connections' sockets: the caller keeps each socket open for the look (the
/// sweeper looks under the lock a connection takes before it closes, see `idle.rs`).
/// Not public: a number that is not the caller's socket would be written to.
pub(crate) fn look_raw(clients: &mut [(RawFd, &mut Probe)]) -> Vec<Seen> {
    let mut fds: Vec<RawPoll> = clients
        .iter()
        .map(|(fd, _)| RawPoll {
            fd: *fd,
            events: PollFlags::POLLIN,
            revents: PollFlags::empty(),
        })
        .collect();
    if fiber_pool::net::poll_raw(&mut fds).is_err() {
        return vec![Seen::Here; clients.len()];
    }
    fds.iter()
        .zip(clients.iter_mut())
        .map(|(polled, (fd, probe))| {
            let ready = polled.revents;
            if ready.intersects(PollFlags::POLLHUP | PollFlags::POLLERR) {
                return Seen::Gone;
            }
            if !ready.contains(PollFlags::POLLIN) {
                return Seen::Here;
            }
            let mut byte = [0u8; 1];
            let peek = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
            match recv(*fd, &mut byte, peek) {
                // The FIN: closed, or only half-closed.
                Ok(0) => {}
                Err(Errno::ECONNRESET) => return Seen::Gone,
                _ => return Seen::Here,
            }
            if probe.sent || probe.minor_version == 0 {
                return Seen::Here;
            }
            probe.sent = true;
            // Non-blocking; MSG_NOSIGNAL: a closed peer is an EPIPE here, not a SIGPIPE.
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            match send(*fd, PROBE, flags) {
                Err(Errno::EPIPE | Errno::ECONNRESET) => Seen::Gone,
                _ => Seen::Here,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::fd::{AsFd, AsRawFd};
    use std::time::{Duration, Instant};

    /// A connected pair: (the server's side, the client's side).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (server, client)
    }

    /// Look at `server` until `until` says so or a second passes; the last look.
    fn look_until(server: &TcpStream, probe: &mut Probe, until: impl Fn(Seen) -> bool) -> Seen {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let seen = look(&mut [(server.as_fd(), &mut *probe)])[0];
            if until(seen) || Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_client_that_closes_is_gone_after_the_probe() {
        let (server, client) = pair();
        let mut probe = Probe::new(1);
        assert_eq!(look(&mut [(server.as_fd(), &mut probe)]), [Seen::Here]);
        drop(client);
        assert_eq!(
            look_until(&server, &mut probe, |s| s == Seen::Gone),
            Seen::Gone
        );
        assert!(probe.sent);
    }

    #[test]
    fn a_client_that_half_closes_stays_and_reads_the_probe_then_the_answer() {
        let (mut server, mut client) = pair();
        client.shutdown(Shutdown::Write).unwrap();
        let mut probe = Probe::new(1);
        // The probe goes out once the FIN is seen; the client is still there after it.
        look_until(&server, &mut probe, |_| probe_sent(&server));
        for _ in 0..20 {
            assert_eq!(look(&mut [(server.as_fd(), &mut probe)]), [Seen::Here]);
        }
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .unwrap();
        drop(server);
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert!(
            got.starts_with("HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK"),
            "{got:?}"
        );
    }

    /// Whether the FIN is visible on `server` (a peek reads 0 bytes).
    fn probe_sent(server: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        let peek = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        matches!(recv(server.as_raw_fd(), &mut byte, peek), Ok(0))
    }

    #[test]
    fn an_http_1_0_client_that_half_closes_is_never_probed() {
        let (server, client) = pair();
        client.shutdown(Shutdown::Write).unwrap();
        let mut probe = Probe::new(0);
        look_until(&server, &mut probe, |_| probe_sent(&server));
        assert_eq!(look(&mut [(server.as_fd(), &mut probe)]), [Seen::Here]);
        assert!(!probe.sent);
    }

    #[test]
    fn a_reset_is_gone_at_once() {
        let (server, client) = pair();
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(client);
        let mut probe = Probe::new(0);
        assert_eq!(
            look_until(&server, &mut probe, |s| s == Seen::Gone),
            Seen::Gone
        );
        assert!(!probe.sent, "a reset needs no probe");
    }
}
