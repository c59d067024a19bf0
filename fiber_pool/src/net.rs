//! A toolkit for sockets on fibers and may coroutines: what a client or a server
//! needs beyond may's own sockets, each piece there for a reason may's API does not
//! cover.
//!
//! | piece | what it is for |
//! |---|---|
//! | [`connect`] | a TCP connect that avoids a race in may's (below), returning a [`CarrierStream`] |
//! | [`CarrierStream`] | a may socket whose every may call (read, write, timeouts, drop) runs on the carrier's stack, so none is ever on a fiber stack, and whose timeouts may honours ([`io_timeout`]) |
//! | [`io_timeout`] | a wait as a socket timeout may honours: whole milliseconds, at least one |
//! | [`HangupSet`] | which of many sockets their peers closed or reset, named by one `epoll_wait` instead of a look at each: a server watching the clients of its requests in flight |
//! | [`poll_now`] | readiness *now* (`poll(2)`, zero timeout): has the peer closed, is there data, did a connect finish; never parks, never blocks |
//! | [`recv_append`] | one `recv(2)` into a `Vec`'s spare capacity, without zeroing it first: the cheap read a request loop makes per kept-alive request |
//! | [`adopt_stream`] | a socket accepted with std (an accept loop that must stop at once, which may's parked `accept` cannot) handed to may |
//! | [`adopt_listener`] | a listening socket inherited as a std listener (a supervisor, systemd's `LISTEN_FDS`) handed to may |
//!
//! None of them waits on may's event machinery except through `CarrierStream`'s
//! calls, which run on the carrier. fiber_web's HTTP layer is built on them; so can
//! any other protocol on fibers.
//!
//! **Why our own connect.** may 0.3.51 parks a connecting coroutine on an event source
//! that lives on that coroutine's stack, and reads the source again *after* publishing
//! the coroutine to the event loop (`TcpStreamConnect::subscribe`: `co.store(co)`, then
//! `io_flag.load`). When the connection's event arrives on another I/O thread in that
//! gap, the coroutine runs there, returns from `connect` and reuses its stack, and the
//! first thread reads whatever is there now: "RefCell already borrowed" in
//! `EventData::fast_schedule`, then an abort or a SIGSEGV. Many refused connects in a
//! row make it likely: the server's MySQL-outage test died this way in about 1 run in
//! 12 on a loaded 2-core machine (debug build, three copies at once).
//!
//! [`connect`] starts a non-blocking connect itself and watches it with `poll(2)` at
//! zero timeout, yielding between looks (first to other ready coroutines, then sleeping
//! 1, 2, 4 … up to [`CONNECT_POLL_MAX`]), and hands the socket to may only once it is
//! connected. No may event source ever waits on a connect, so the race has nothing to
//! hit. The price: a connect that does not finish at once is noticed up to
//! `CONNECT_POLL_MAX` late, on a path (a new pooled connection) that is rare by design.
//! Loopback and LAN connects usually finish before the first look.

use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use nix::errno::Errno;
pub use nix::poll::PollFlags;

pub use crate::hangups::{HangupSet, READY_MOST};
use nix::poll::{poll, PollFd, PollTimeout};
use socket2::{Domain, Protocol, Socket, Type};

/// The longest sleep between two looks at a connect in progress.
pub const CONNECT_POLL_MAX: Duration = Duration::from_millis(8);

/// How many times a connect in progress yields to other ready coroutines before it
/// starts sleeping between looks.
const CONNECT_POLL_YIELDS: u32 = 4;

/// Connect to `addr` within `timeout`, from a may coroutine or a fiber (off them it
/// still works, sleeping the thread between looks). On a fiber the whole connect runs
/// on the carrier's stack ([`on_carrier`](crate::on_carrier)), and so does every
/// read, write and the drop of the [`CarrierStream`] it returns. Errors: the
/// connect's own (refused, unreachable), or `ErrorKind::TimedOut` after `timeout`.
pub fn connect(addr: &SocketAddr, timeout: Duration) -> io::Result<CarrierStream> {
    crate::on_carrier(|| connect_here(addr, timeout)).map(CarrierStream::new)
}

/// [`connect`] on the current stack.
fn connect_here(addr: &SocketAddr, timeout: Duration) -> io::Result<may::net::TcpStream> {
    let deadline = Instant::now() + timeout;
    // socket2 opens sockets close-on-exec.
    let socket = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_nonblocking(true)?;
    match socket.connect(&(*addr).into()) {
        Ok(()) => {}
        Err(e) if in_progress(&e) => wait_connected(&socket, deadline, timeout)?,
        Err(e) => return Err(e),
    }
    into_may(socket)
}

fn in_progress(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINPROGRESS | libc::EALREADY | libc::EINTR)
    )
}

/// Look at the connect until it succeeds, fails or passes `deadline`.
fn wait_connected(socket: &Socket, deadline: Instant, timeout: Duration) -> io::Result<()> {
    let mut looks = 0u32;
    let mut nap = Duration::from_millis(1);
    loop {
        if writable(socket)? {
            if let Some(e) = socket.take_error()? {
                return Err(e);
            }
            // Writable without an error: connected (peer_addr fails if it is not).
            return socket.peer_addr().map(drop);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connect timed out after {timeout:?}"),
            ));
        }
        looks += 1;
        if looks <= CONNECT_POLL_YIELDS {
            may::coroutine::yield_now();
        } else {
            may::coroutine::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(CONNECT_POLL_MAX);
        }
    }
}

/// Has the connect finished (either way)?
fn writable(socket: &Socket) -> io::Result<bool> {
    let finished = PollFlags::POLLOUT | PollFlags::POLLERR | PollFlags::POLLHUP;
    Ok(poll_now(socket.as_fd(), PollFlags::POLLOUT)?.intersects(finished))
}

/// The events of `events` (plus POLLERR, POLLHUP) that `fd` has now, by `poll(2)` with a
/// zero timeout: it never blocks and never parks, so it is safe on may workers and
/// fibers, and costs one system call. Empty when none, or when a signal interrupted
/// the call.
///
/// For questions about a socket's state that must not wait: has a client that queued
/// for a fiber gone away (`POLLHUP`/`POLLRDHUP`, or readable at its end), is a
/// non-blocking connect finished ([`connect`] uses it), is a kept-alive connection
/// readable before a read is worth starting. may's own sockets only answer such
/// questions by parking the coroutine in a read or write.
pub fn poll_now(fd: BorrowedFd<'_>, events: PollFlags) -> io::Result<PollFlags> {
    let mut fds = [PollFd::new(fd, events)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(0) | Err(Errno::EINTR) => Ok(PollFlags::empty()),
        Ok(_) => Ok(fds[0].revents().unwrap_or(PollFlags::empty())),
        Err(e) => Err(e.into()),
    }
}

/// One descriptor of [`poll_raw`]: its number, the events asked for, and (after the
/// call) the events it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPoll {
    /// The descriptor's number.
    pub fd: RawFd,
    /// What to look for (`POLLIN`, ...).
    pub events: PollFlags,
    /// What it has: any of `events`, and `POLLERR`, `POLLHUP`, `POLLNVAL` (not open).
    pub revents: PollFlags,
}

/// `poll(2)` with a zero timeout over descriptors known by number, for a watcher that
/// holds no borrow of the sockets it looks at (a server's sweeper looking at the
/// sockets of requests in flight on other coroutines). It never blocks. A number
/// that is not open reports `POLLNVAL`; a number that was closed and reused reports on
/// the new descriptor, so the caller polls only descriptors it knows are still open
/// (the server removes a request's entry, under the lock the sweeper holds while it
/// looks, before its connection can close). Returns how many have events; 0 when a
/// signal interrupted the call.
pub fn poll_raw(fds: &mut [RawPoll]) -> io::Result<usize> {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|p| libc::pollfd {
            fd: p.fd,
            events: p.events.bits(),
            revents: 0,
        })
        .collect();
    let count = libc::nfds_t::try_from(raw.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `raw` is a live, writable array of `count` `pollfd`s, which `poll` only
    // reads and writes within; with a zero timeout it returns at once. Descriptor
    // numbers that are not open are reported (POLLNVAL), not dereferenced.
    let got = unsafe { libc::poll(raw.as_mut_ptr(), count, 0) };
    if got < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    for (p, r) in fds.iter_mut().zip(&raw) {
        p.revents = PollFlags::from_bits_retain(r.revents);
    }
    Ok(got as usize)
}

/// One `recv(2)` of at most `max` bytes from `fd`, appended to `buf` without zeroing
/// them first. For a read loop that grows one buffer per connection (an HTTP
/// server's, a protocol client's): `Read::read` takes initialised bytes only, and
/// zeroing the buffer's spare capacity for every kept-alive request cost more than
/// parsing the request's head (BENCHMARKS.md, "Where a request's time goes"). No
/// may call: on a non-blocking socket (every may socket is one) it returns at once,
/// so the caller decides how to wait (park on may's socket, [`poll_now`]). It does
/// what a read does: `WouldBlock` on a non-blocking socket with
/// nothing to read, `Interrupted` when a signal came first, `Ok(0)` at the end (and,
/// as for any read, when `max` is 0). `buf` grows by what arrived only.
pub fn recv_append(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare = &mut buf.spare_capacity_mut()[..max];
    // SAFETY: `spare` is `max` bytes of `buf`'s allocation past its length, writable and
    // borrowed mutably here, so `recv` writes nothing that anyone reads meanwhile;
    // `fd` is an open descriptor for the duration of the borrow.
    let got = unsafe { libc::recv(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), 0) };
    let got = usize::try_from(got).map_err(|_| io::Error::last_os_error())?;
    let len = buf.len() + got;
    // SAFETY: `recv` initialised the first `got` bytes after the old length (it returns
    // how many it wrote, at most `spare.len()`), and `len` is within the capacity that
    // `reserve` made.
    unsafe { buf.set_len(len) };
    Ok(got)
}

/// Give a connected socket to may (registers it with may's event loop).
fn into_may(socket: Socket) -> io::Result<may::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let fd = socket.into_raw_fd();
    // may's from_raw_fd panics when its event loop refuses the descriptor (epoll_ctl
    // fails: out of memory or of max_user_watches): make that an error.
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `fd` is an open, connected TCP socket that nothing else owns:
        // `into_raw_fd` gave up socket2's ownership, and may's TcpStream takes it
        // (closing it on drop, or while unwinding if registration fails).
        unsafe { may::net::TcpStream::from_raw_fd(fd) }
    }))
    .map_err(|_| io::Error::other("may's event loop refused the new connection"))
}

/// Gives an accepted connection to may: what may's own `accept` does after
/// `accept(2)` (non-blocking, registered with the event loop). For an accept loop that
/// accepts with std (or `accept4` directly) so that it can stop waiting at once on
/// shutdown (fiber_web's waits on readiness with a waker it can fire), which may's
/// parked `accept` cannot. Errors: may's event loop refusing the socket (out of
/// memory, or of `max_user_watches`).
pub fn adopt_stream(stream: std::net::TcpStream) -> io::Result<may::net::TcpStream> {
    into_may(Socket::from(stream))
}

/// Gives a listening socket to may. A socket inherited from a supervisor or from
/// systemd's socket activation (`LISTEN_FDS`), or one set up with options may's
/// `bind` does not offer (a larger backlog), arrives as a std listener; may can only
/// take it over from its raw descriptor, which is `unsafe`: this does it once, here.
/// Errors: may's event loop refusing the socket.
pub fn adopt_listener(listener: std::net::TcpListener) -> io::Result<may::net::TcpListener> {
    use std::os::fd::FromRawFd;
    let fd = listener.into_raw_fd();
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `fd` is an open listening TCP socket that nothing else owns:
        // `into_raw_fd` gave up the std listener's ownership, and may's TcpListener
        // takes it (closing it on drop, or while unwinding if registration fails).
        unsafe { may::net::TcpListener::from_raw_fd(fd) }
    }))
    .map_err(|_| io::Error::other("may's event loop refused the listening socket"))
}

/// A may socket whose every may call runs on the carrier's stack
/// ([`on_carrier`](crate::on_carrier)): reads, writes, flushes, timeouts and its drop
/// (which deregisters it from may's event loop). It does not deref to the may socket,
/// so no may method can be called on a fiber by accident; the plain syscalls a
/// client needs besides (`set_nodelay`, a non-blocking `peek`) are methods here.
#[derive(Debug)]
pub struct CarrierStream(ManuallyDrop<may::net::TcpStream>);

/// The shortest socket timeout [`io_timeout`] gives may. may 0.3.51 keeps a socket's
/// timeouts in whole milliseconds, truncated, and takes 0 for none: a read given 340 µs
/// waits until the peer writes or closes (an idle keep-alive connection outlived its
/// idle timeout that way, and a MySQL read with under a millisecond of its deadline
/// left waited for a `sleep(1)` to end), and 1.9 ms fires after 1.
pub const MIN_IO_TIMEOUT: Duration = Duration::from_millis(1);

/// A socket timeout may honours for a wait of `left`: rounded up to whole
/// milliseconds, at least [`MIN_IO_TIMEOUT`], so it fires at or after `left`, never
/// before and never not at all. (Whole milliseconds also keep may's per-interval timer
/// lists few: it keeps one list per distinct duration.)
pub fn io_timeout(left: Duration) -> Duration {
    let ms = left.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)).max(MIN_IO_TIMEOUT)
}

impl CarrierStream {
    /// Takes over a may socket.
    pub fn new(stream: may::net::TcpStream) -> CarrierStream {
        CarrierStream(ManuallyDrop::new(stream))
    }

    /// may's `set_read_timeout`, on the carrier: besides the socket option it stores
    /// may's own copy (an overflow sweep caught a fault inside it on a fiber). The
    /// timeout goes through [`io_timeout`]: whole milliseconds, at least one.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let stream = &*self.0;
        let timeout = timeout.map(io_timeout);
        crate::on_carrier(|| stream.set_read_timeout(timeout))
    }

    /// may's `set_write_timeout`, on the carrier (see [`Self::set_read_timeout`]).
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let stream = &*self.0;
        let timeout = timeout.map(io_timeout);
        crate::on_carrier(|| stream.set_write_timeout(timeout))
    }

    /// `TCP_NODELAY` (a plain socket option; may keeps no copy of it).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.0.set_nodelay(nodelay)
    }

    /// Reads without consuming and without waiting (`recv` with `MSG_PEEK` on the
    /// non-blocking socket, no may call): `WouldBlock` when nothing has arrived.
    pub fn peek_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.inner().peek(buf)
    }

    /// Writes all of `out`, then reads once into `buf`, in one switch to the carrier:
    /// a client's request and the first bytes of its answer, where a `write_all` and a
    /// `read` would switch twice. The outer error is the write's (then nothing was
    /// read); the inner result is the read's, as [`Read::read`] gives it.
    pub fn write_all_then_read(
        &mut self,
        out: &[u8],
        buf: &mut [u8],
    ) -> io::Result<io::Result<usize>> {
        let stream = &mut *self.0;
        crate::on_carrier(|| {
            stream.write_all(out)?;
            Ok(stream.read(buf))
        })
    }

    /// A second descriptor of this socket (`dup`), with which another thread can end
    /// this stream's waits: its `shutdown(Both)` shuts the socket itself down, so a
    /// read or write waiting here returns at once. A copy, not the number: the socket
    /// stays open while the copy lives, so its number cannot be reused for another
    /// socket that a late shutdown would hit.
    pub fn shutdown_handle(&self) -> io::Result<std::net::TcpStream> {
        self.0.inner().try_clone()
    }
}

impl Read for CarrierStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let stream = &mut *self.0;
        crate::on_carrier(|| stream.read(buf))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let stream = &mut *self.0;
        crate::on_carrier(|| stream.read_exact(buf))
    }
}

impl Write for CarrierStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let stream = &mut *self.0;
        crate::on_carrier(|| stream.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let stream = &mut *self.0;
        crate::on_carrier(|| stream.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        let stream = &mut *self.0;
        crate::on_carrier(|| stream.flush())
    }
}

impl Drop for CarrierStream {
    fn drop(&mut self) {
        // SAFETY: `self.0` is taken exactly once, here, and `self` is never used
        // again (this is its drop).
        let stream = unsafe { ManuallyDrop::take(&mut self.0) };
        crate::drop_on_carrier(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` in a coroutine and waits for it.
    fn in_coroutine<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        crate::spawn::go(f).join().unwrap()
    }

    #[test]
    fn recv_append_adds_what_arrived_after_the_bytes_already_there() {
        use std::io::Write;
        use std::os::unix::net::UnixStream;
        let (mut peer, ours) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut buf = b"GET".to_vec();
        let nothing = recv_append(ours.as_fd(), &mut buf, 16).unwrap_err();
        assert_eq!(nothing.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(buf, b"GET", "an empty socket leaves the buffer as it was");
        peer.write_all(b" /hello HTTP/1.1\r\n").unwrap();
        // At most `max` bytes; the rest stays in the socket for the next read.
        assert_eq!(recv_append(ours.as_fd(), &mut buf, 7).unwrap(), 7);
        assert_eq!(buf, b"GET /hello");
        assert_eq!(recv_append(ours.as_fd(), &mut buf, 1024).unwrap(), 11);
        assert_eq!(buf, b"GET /hello HTTP/1.1\r\n");
        drop(peer);
        assert_eq!(
            recv_append(ours.as_fd(), &mut buf, 1024).unwrap(),
            0,
            "the end"
        );
        assert_eq!(buf.len(), 21);
    }

    /// A listener on a free loopback port whose first connection `peer` serves, on a
    /// thread of its own.
    fn one_peer(
        peer: impl FnOnce(std::net::TcpStream) + Send + 'static,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || peer(listener.accept().unwrap().0));
        (addr, server)
    }

    #[test]
    fn connects_and_the_stream_works_under_may() {
        let (addr, server) = one_peer(|mut s| s.write_all(b"hello").unwrap());
        let carrier = move || {
            use std::io::Read;
            let mut s = connect(&addr, Duration::from_secs(2)).unwrap();
            let mut buf = String::new();
            s.read_to_string(&mut buf).unwrap();
            buf
        };
        let got = in_coroutine(carrier);
        server.join().unwrap();
        assert_eq!(got, "hello");
    }

    #[test]
    fn a_request_and_the_first_read_of_its_answer_go_in_one_call() {
        let (addr, server) = one_peer(|mut s| {
            let mut asked = [0u8; 4];
            s.read_exact(&mut asked).unwrap();
            s.write_all(if &asked == b"ping" { b"pong" } else { b"what" })
                .unwrap();
        });
        let got = in_coroutine(move || {
            let mut s = connect(&addr, Duration::from_secs(2)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 16];
            let n = s.write_all_then_read(b"ping", &mut buf).unwrap().unwrap();
            buf[..n].to_vec()
        });
        server.join().unwrap();
        assert_eq!(got, b"pong");
    }

    #[test]
    fn io_timeouts_are_whole_milliseconds_never_under_one() {
        let ms = Duration::from_millis;
        assert_eq!(io_timeout(Duration::ZERO), ms(1));
        assert_eq!(io_timeout(Duration::from_micros(340)), ms(1));
        assert_eq!(io_timeout(Duration::from_micros(1001)), ms(2));
        assert_eq!(io_timeout(ms(200)), ms(200));
        assert_eq!(io_timeout(Duration::MAX), Duration::from_millis(u64::MAX));
    }

    /// A read given less than a millisecond times out: may alone would wait until the
    /// peer writes or closes (here 5 s later), and fire 1.9 ms after 1.
    #[test]
    fn a_read_timeout_under_a_millisecond_fires() {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let (addr, peer) = one_peer(move |s| {
            let _ = wait.recv_timeout(Duration::from_secs(5));
            drop(s);
        });
        let (err, took) = in_coroutine(move || {
            use std::io::Read;
            let mut s = connect(&addr, Duration::from_secs(2)).unwrap();
            let mut byte = [0u8; 1];
            let started = Instant::now();
            s.set_read_timeout(Some(Duration::from_micros(340)))
                .unwrap();
            let short = s.read(&mut byte).unwrap_err();
            let took = started.elapsed();
            s.set_read_timeout(Some(Duration::from_micros(1900)))
                .unwrap();
            let started = Instant::now();
            let rounded = s.read(&mut byte).unwrap_err();
            assert!(started.elapsed() >= Duration::from_micros(1900));
            assert_eq!(rounded.kind(), io::ErrorKind::TimedOut, "{rounded}");
            (short, took)
        });
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        done.send(()).unwrap();
        peer.join().unwrap();
    }

    #[test]
    fn a_closed_port_is_refused() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let err = in_coroutine(move || connect(&addr, Duration::from_secs(2)).unwrap_err());
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    }

    #[test]
    fn a_connect_that_never_finishes_times_out() {
        // Further SYNs are dropped, so the connect stays in progress.
        let silent = crate::testing::UnansweringListener::new().unwrap();
        let addr = silent.addr;
        let started = Instant::now();
        let carrier = move || connect(&addr, Duration::from_millis(300)).unwrap_err();
        let err = in_coroutine(carrier);
        let took = started.elapsed();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("300ms"), "{err}");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn many_refused_connects_at_once_do_not_crash_the_scheduler() {
        // The pattern that crashed may's own connect: a burst of refused connects from
        // many coroutines on several workers.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let carrier = move || {
                    (0..40)
                        .filter(|_| connect(&addr, Duration::from_secs(2)).is_err())
                        .count()
                };
                crate::spawn::go(carrier)
            })
            .collect();
        let refused: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(refused, 50 * 40);
    }
}
