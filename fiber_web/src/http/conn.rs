//! The per-connection loop: read a request within limits, call the service, write the
//! response with the right connection semantics, repeat while the connection is kept.
//!
//! One may coroutine runs this per client connection. Every wait ends: `idle_timeout`
//! between requests (in slices of `IDLE_POLL`, ended by the server's sweeper rather
//! than a may timer per read, and at once when the server starts to stop: `idle.rs`),
//! `header_timeout` for a head once its first byte arrived (slowloris),
//! `body_timeout` for the whole body once the head is in (a dribbled body, whether
//! Content-Length or chunked), and `write_timeout` per write. Every timeout given to
//! may goes through [`io_timeout`] (may loses sub-millisecond timers). Pipelined
//! requests are answered in order from the buffer, which never holds more than one
//! head, one chunk-size line or trailer section, and one read past them; a body is
//! at most `max_body_bytes`. The answers to requests that were read together go out
//! in one write (up to `PIPELINE_BYTES`): a response is held back while the client's
//! next bytes are in the buffer already, and everything held is written before any
//! read that may wait and before the connection ends.
//!
//! `Expect: 100-continue`: before reading a body the client waits for, the service
//! is asked whether it would refuse the request anyway ([`Service::refuses`]: 404,
//! 405); if so that answer goes out at once and the connection closes (the client may
//! or may not send the body), else `100 Continue` goes out. A Content-Length over the
//! cap is refused by the parser (413) before any of the body is read.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::net::PollFlags;
use may::io::WaitIo;
use may::net::TcpStream;

use crate::config::HttpLimits;
use crate::counters::HttpStats;
use crate::http::chunked;
use crate::http::defaults::DefaultHeaders;
use crate::http::idle::{self, Sweeper, Watch, Watched};
use crate::http::request::{parse_head, Framing, Head, Request, RequestLine};
use crate::http::response::Response;
use crate::http::{io_timeout, HttpError};
use crate::shutdown::Stop;

/// What handles a request: routing and running handlers is the server's business.
pub(crate) trait Service: Send + Sync + 'static {
    /// The response to `req`, or `None` when `peer` has gone: before anything ran
    /// ([`Client::gone`]) or while it ran (the sweeper saw it leave). Nothing is sent,
    /// and the connection closes; the service counts it. The request is the
    /// connection's, given for the call and given back (a box, so that a job can own
    /// it by a pointer): a service may change it (the router stores the path's
    /// parameters in it, layers add headers), or give back another.
    fn call(&self, req: Box<Request>, peer: &Peer<'_>) -> (Option<Response>, Box<Request>);

    /// The answer `call` would give without running a handler (404, 405), asked
    /// before the body of an `Expect: 100-continue` request is read; `None` if the
    /// request would run.
    fn refuses(&self, _req: &Request) -> Option<Response> {
        None
    }

    /// `resp`, a problem answered to a request the connection refused before the
    /// service routed it (a malformed head, a 413, [`refuses`](Self::refuses)'s
    /// answer), rendered as the service renders its problems: `sent_id` and
    /// `wants_json` are what the request's head said.
    fn refusal(&self, resp: Response, _sent_id: Option<&str>, _wants_json: bool) -> Response {
        resp
    }

    /// Headers every response of this service carries (a `Server` header), written
    /// after the response's own unless it set one of the same name: the list is the
    /// service's, so no response copies it.
    fn default_headers(&self) -> &DefaultHeaders {
        DefaultHeaders::none()
    }

    /// The header a request's id is sent in, when the service gives ids.
    fn request_id_header(&self) -> Option<&'static str> {
        None
    }
}

/// The connected client of the request being served, to ask whether it is still
/// there, and to have its departure cancel the request's work.
#[derive(Clone, Copy)]
pub(crate) struct Peer<'a> {
    socket: BorrowedFd<'a>,
    watch: &'a Watch,
    minor_version: u8,
    /// The connection's box for a copy of a request's line ([`Socket::line`]).
    line: &'a Cell<Option<Box<RequestLine>>>,
}

impl<'a> Peer<'a> {
    /// Have the server's sweeper watch this client while the guard lives, and cancel
    /// `ctx` (`CancelReason::ClientGone`) if it goes: a reset, or a close that the
    /// probe of `departure.rs` tells from a half-close.
    pub(crate) fn watch(&self, ctx: &fiber_pool::Context) -> Watched<'a> {
        self.watch.request(self.minor_version, ctx)
    }

    /// The connection's box for a copy of the request's line, if it has one: the
    /// dispatch fills it and gives it back ([`keep_line`](Self::keep_line)).
    pub(crate) fn take_line(&self) -> Option<Box<RequestLine>> {
        self.line.take()
    }

    /// Give the box of [`take_line`](Self::take_line) back to the connection, for its
    /// next request.
    pub(crate) fn keep_line(&self, line: Option<Box<RequestLine>>) {
        self.line.set(line);
    }

    /// The client's socket, to ask whether it is still there ([`Client::gone`]) from
    /// code that runs elsewhere (the check before a job starts).
    pub(crate) fn client(&self) -> Client<'a> {
        Client(self.socket)
    }
}

/// The client of a request, by its socket.
#[derive(Clone, Copy)]
pub(crate) struct Client<'a>(BorrowedFd<'a>);

impl Client<'_> {
    /// Whether the client reset its connection, so no answer can reach it: one poll
    /// with a zero timeout, no bytes read. Worth its system call only before costly
    /// work that waited (a request that queued for a fiber).
    ///
    /// A client that only shut down its sending side (FIN) is not gone: HTTP lets it
    /// read the answer, and both runtimes give it one (hyper's `half_close` on the
    /// twin). A client that closed entirely looks the same until we write, so only a
    /// reset (POLLHUP/POLLERR: a killed client, a proxy giving up) counts as gone.
    pub(crate) fn gone(&self) -> bool {
        fiber_pool::net::poll_now(self.0, PollFlags::empty())
            .is_ok_and(|ready| ready.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
    }
}

/// The interim response to `Expect: 100-continue`.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// How often an idle connection looks at the shutdown flag.
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Bytes asked of the socket per read once a request is known to be longer.
const READ_CHUNK: usize = 8 * 1024;
/// Bytes asked of the socket for the start of a request: a typical head fits (curl's
/// and wrk's are under 100 bytes, browsers' under 1 KiB); a longer one takes more reads.
const FIRST_READ: usize = 1024;
/// After an error response on a connection we close, how long and how much we read
/// and discard so that the client sees the response instead of a reset.
const LINGER_TIME: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 256 * 1024;
/// Most bytes of responses to pipelined requests held back to go out in one write;
/// past it they are written at once (a client that pipelines 16 plaintext requests
/// gets about 2 KiB).
const PIPELINE_BYTES: usize = 64 * 1024;

/// Serve one connection until it closes, errs, or the server stops.
pub(crate) fn serve<S: Service + ?Sized>(
    stream: TcpStream,
    service: &S,
    limits: &HttpLimits,
    stop: &Stop,
    stats: &HttpStats,
    sweeper: &Arc<Sweeper>,
) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(io_timeout(limits.write_timeout)));
    let mut stream = Socket {
        watch: sweeper.watch(stream.inner().as_raw_fd(), stream.waker()),
        stream,
        armed: None,
        out: Vec::new(),
        drained: false,
        line: Cell::new(None),
    };
    // Allocated by the first read, released while the connection idles (`read_head`).
    let mut buf: Vec<u8> = Vec::new();
    // Each request's head is parsed into this one, whose buffers are reused by the
    // next request and released with `buf`.
    let mut req = Box::<Request>::default();
    let mut first = true;
    loop {
        let head = match read_head(&mut stream, &mut buf, &mut req, limits, stop, first) {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(ReadError::Http(e)) => {
                stats.protocol_error();
                if stream.write_held().is_ok() {
                    let head = RawHead(&buf);
                    send_error_and_close(&mut stream.stream, &e, stats, service, &head);
                }
                return;
            }
            Err(ReadError::Io) => return,
        };
        first = false;
        buf.drain(..head.head_len);
        // A body may take reads that wait: answers held for pipelining go out first.
        if head.framing != Framing::Length(0) && stream.write_held().is_err() {
            return;
        }
        if head.framing != Framing::Length(0) && req.expects_continue() && buf.is_empty() {
            if let Some(refused) = service.refuses(&req) {
                refuse_unread(&mut stream.stream, refused, &req, service, stats);
                return;
            }
            stream.drained = false; // may's write resets the readiness flag
            if stream.stream.write_all(CONTINUE).is_err() {
                return;
            }
        }
        // The whole body gets `body_timeout` from the end of the head, not per read.
        // (A request without a body reads no clock for it.)
        let body = match head.framing {
            Framing::Length(0) => Ok(Vec::new()),
            framing => {
                let body_deadline = Instant::now() + limits.body_timeout;
                read_body(&mut stream, &mut buf, framing, limits, body_deadline)
            }
        };
        match body {
            Ok(body) => req.body = body,
            Err(ReadError::Http(e)) => {
                stats.protocol_error();
                if stream.write_held().is_ok() {
                    send_error_and_close(&mut stream.stream, &e, stats, service, &*req);
                }
                return;
            }
            Err(ReadError::Io) => return,
        }

        let keep_alive = req.wants_keep_alive() && !stop.is_stopping();
        let _in_flight = stop.request_started();
        let peer = Peer {
            socket: stream.stream.inner().as_fd(),
            watch: &stream.watch,
            minor_version: req.minor_version,
            line: &stream.line,
        };
        let (answer, back) = service.call(req, &peer);
        req = back;
        // A stop that came while it ran (a shutdown, a suspect overflow: suspect.rs)
        // closes the connection after this answer, and the answer says so.
        let keep_alive = keep_alive && !stop.is_stopping();
        // No answer: the client has gone (the service counted it).
        let Some(resp) = answer else {
            return;
        };
        stats.response(resp.status);
        // One buffer, one write. The buffer is the connection's, reused by its next
        // response (no allocation per request) and released when the connection idles
        // (`read_head`), so an idle connection holds no response bytes. It is written
        // now unless it is held for the next answer (pipelining, below).
        let defaults = service.default_headers();
        let out = &mut stream.out;
        out.reserve(resp.wire_len() + defaults.wire_len());
        resp.write_with(
            out,
            req.minor_version,
            keep_alive,
            req.method == "HEAD",
            defaults,
        );
        // Bytes already read are the next request's, most likely whole (a pipelining
        // client sent it with this one): its answer joins this one, and `read_head`
        // writes everything held before it reads.
        let hold = keep_alive && out.len() < PIPELINE_BYTES && !buf.is_empty();
        if !hold && stream.write_held().is_err() {
            return; // the client went away mid-response: nothing left to do for it
        }
        if !keep_alive {
            let _ = stream.stream.shutdown(Shutdown::Write);
            return;
        }
    }
}

enum ReadError {
    Http(HttpError),
    Io,
}

/// The client's socket and the read timeout last given to may: re-arming it costs a
/// `setsockopt` (may sets SO_RCVTIMEO besides its own timer), so it is set only when
/// it changes, which between keep-alive requests it does not (one `IDLE_POLL` slice).
/// `out` is the buffer responses are written from, kept between requests. `watch` ends
/// the waits between requests ([`Socket::read_idle`]).
struct Socket {
    /// The sweeper's entry for `stream`, which holds its descriptor's number: declared
    /// first, so dropped before the socket closes (see `Sweeper::watch`).
    watch: Watch,
    stream: TcpStream,
    armed: Option<Duration>,
    out: Vec<u8>,
    /// The last read left nothing in the socket, and may's readiness flag has not been
    /// reset since (by a may write): whatever the client sends next sets the flag, so
    /// the wait for the next request can start without a read that would find nothing
    /// (`EAGAIN`: may_minihttp, which reads until then, makes three system calls per
    /// kept-alive request where this makes two; BENCHMARKS.md, "Where a request's time
    /// goes").
    drained: bool,
    /// A box for the copy of a request's line that the dispatch keeps while the request
    /// runs on a fiber (for an answer if the job does not come back): kept from request
    /// to request, released with the buffers while the connection idles.
    line: Cell<Option<Box<RequestLine>>>,
}

impl Socket {
    /// One read of up to `chunk` bytes appended to `buf`, through may with `timeout`; a
    /// timeout is `TimedOut`. For the rest of a head or a body ([`READ_CHUNK`]).
    ///
    /// `buf` is grown by `chunk` and the new part zeroed first (may's read takes an
    /// initialised slice); the start of a request, read on every kept-alive request,
    /// skips that with [`fiber_pool::net::recv_append`] ([`Socket::read_idle`]).
    fn read_some(
        &mut self,
        buf: &mut Vec<u8>,
        timeout: Duration,
        chunk: usize,
    ) -> io::Result<usize> {
        let timeout = Some(io_timeout(timeout));
        if self.armed != timeout {
            self.stream.set_read_timeout(timeout)?;
            self.armed = timeout;
        }
        let start = buf.len();
        buf.resize(start + chunk, 0);
        let r = self.stream.read(&mut buf[start..]);
        // may's read resets the readiness flag before it reads.
        self.drained = emptied(&r, chunk);
        buf.truncate(start + *r.as_ref().unwrap_or(&0));
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::TimedOut.into()),
            other => other,
        }
    }

    /// [`Socket::read_some`] for the start of a request (`buf` empty), with no timer:
    /// may's `wait_io` parks the coroutine until the socket is readable or the sweeper
    /// (`idle.rs`) wakes it, after `timeout` or, when `end_on_stop`, once the server
    /// stops (then `TimedOut` at once, to be seen by the caller). After a read that
    /// `drained` the socket it parks first and reads once woken: `wait_io` returns at
    /// once if the flag was set meanwhile, and resets it before the read that follows.
    /// That first park lasts one sweeper tick at most: a close (FIN or RST) that came
    /// in with the last request raised no readiness of its own, and only a read shows
    /// it, so it is seen within a tick, not at the end of the slice.
    fn read_idle(
        &mut self,
        buf: &mut Vec<u8>,
        timeout: Duration,
        end_on_stop: Option<&Stop>,
    ) -> io::Result<usize> {
        debug_assert!(buf.is_empty(), "read_idle starts a request");
        let deadline = self.watch.deadline_after(timeout);
        let mut unread = std::mem::take(&mut self.drained);
        let r = loop {
            // may made the socket non-blocking: this read never parks. It appends to
            // `buf` without zeroing it first (`recv_append`).
            if !unread {
                let socket = self.stream.inner().as_fd();
                match fiber_pool::net::recv_append(socket, buf, FIRST_READ) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            }
            if end_on_stop.is_some_and(Stop::is_stopping) || self.watch.passed(deadline) {
                break Err(io::ErrorKind::TimedOut.into());
            }
            let until = if std::mem::take(&mut unread) {
                deadline.min(self.watch.deadline_after(idle::TICK))
            } else {
                deadline
            };
            let stream = &self.stream;
            self.watch.wait_until(until, || {
                stream.wait_io();
            });
        };
        self.drained = emptied(&r, FIRST_READ);
        r
    }

    /// Write `out`, the responses held (none, one, or several pipelined) and empty
    /// it, keeping its capacity: first straight to the non-blocking socket, which
    /// leaves may's readiness flag alone (see `drained`); whatever the socket did not
    /// take then goes through may's write, which waits within `write_timeout`.
    fn write_held(&mut self) -> io::Result<()> {
        let mut written = 0;
        while written < self.out.len() {
            match self.stream.inner().write(&self.out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
            if written == 0 {
                break;
            }
        }
        if written < self.out.len() {
            self.drained = false;
            self.stream.write_all(&self.out[written..])?;
        }
        self.out.clear();
        Ok(())
    }
}

/// Whether a read of up to `asked` bytes that returned `r` took everything the socket
/// held: it returned data, but less than it could.
fn emptied(r: &io::Result<usize>, asked: usize) -> bool {
    r.as_ref().is_ok_and(|&n| n > 0 && n < asked)
}

/// Read until `buf` holds a complete head, parsed into `req`. `Ok(None)`: the client closed between
/// requests, stayed idle past `idle_timeout`, or the server is stopping. A `first`
/// request (the connection has sent nothing yet) gets one [`IDLE_POLL`] look even when
/// stopping: its client connected before the accept loop stopped and has most likely
/// sent its request already (a worker being replaced must answer it, not drop it).
fn read_head(
    stream: &mut Socket,
    buf: &mut Vec<u8>,
    req: &mut Request,
    limits: &HttpLimits,
    stop: &Stop,
    first: bool,
) -> Result<Option<Head>, ReadError> {
    // Set when a read first times out, backdated by that slice: a keep-alive client
    // usually sends its next request within the first slice, and then the clock is
    // not read for the idle time at all.
    let mut idle_since: Option<Instant> = None;
    let mut last_look = !first;
    let mut head_deadline: Option<Instant> = None;
    loop {
        if !buf.is_empty() {
            if let Some(head) = parse_head(buf, limits, req).map_err(ReadError::Http)? {
                return Ok(Some(head));
            }
            head_deadline.get_or_insert_with(|| Instant::now() + limits.header_timeout);
        }
        // Whatever answers are held go out before a read that may wait, or before the
        // connection ends.
        if stream.write_held().is_err() {
            return Err(ReadError::Io);
        }
        let (timeout, read) = match head_deadline {
            Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => (left, stream.read_some(buf, left, READ_CHUNK)),
                _ => return Err(ReadError::Http(HttpError::HeadTimeout)),
            },
            None => {
                // Between requests: a stop seen here gets its last look (a whole
                // slice), one that comes during the wait ends it.
                let stopping = stop.is_stopping();
                if stopping {
                    if last_look {
                        return Ok(None);
                    }
                    last_look = true;
                }
                let idle = idle_since.map_or(Duration::ZERO, |since| since.elapsed());
                if idle >= limits.idle_timeout {
                    return Ok(None);
                }
                let slice = (limits.idle_timeout - idle).min(IDLE_POLL);
                let end_on_stop = (!stopping).then_some(stop);
                (slice, stream.read_idle(buf, slice, end_on_stop))
            }
        };
        match read {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                idle_since.get_or_insert_with(|| {
                    let now = Instant::now();
                    now.checked_sub(timeout).unwrap_or(now)
                });
                if buf.is_empty() {
                    // Idle for a whole slice: hold no buffer while nothing comes.
                    *buf = Vec::new();
                    stream.out = Vec::new();
                    stream.line = Cell::new(None);
                    *req = Request::default();
                }
            }
            Err(_) => return Err(ReadError::Io),
        }
    }
}

/// Read the body framed by `framing` from the front of `buf` (which starts right
/// after the head) and the stream, removing it from `buf`; bytes after it stay.
#[inline(never)]
fn read_body(
    stream: &mut Socket,
    buf: &mut Vec<u8>,
    framing: Framing,
    limits: &HttpLimits,
    deadline: Instant,
) -> Result<Vec<u8>, ReadError> {
    let timed_out = |e: io::Error| match e.kind() {
        io::ErrorKind::TimedOut => ReadError::Http(HttpError::BodyTimeout),
        _ => ReadError::Io,
    };
    match framing {
        Framing::Length(len) => {
            fill(stream, buf, len, deadline).map_err(timed_out)?;
            Ok(buf.drain(..len).collect())
        }
        Framing::Chunked => {
            let mut decoder = chunked::Decoder::default();
            while !decoder.feed(buf, limits).map_err(ReadError::Http)? {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadError::Http(HttpError::BodyTimeout));
                }
                match stream.read_some(buf, left, READ_CHUNK) {
                    Ok(0) => return Err(ReadError::Io),
                    Ok(_) => {}
                    Err(e) => return Err(timed_out(e)),
                }
            }
            Ok(decoder.into_body())
        }
    }
}

/// Read until `buf` holds `total` bytes, or `deadline` passes (`TimedOut`).
fn fill(stream: &mut Socket, buf: &mut Vec<u8>, total: usize, deadline: Instant) -> io::Result<()> {
    while buf.len() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        if stream.read_some(buf, left, READ_CHUNK)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Answer a request refused before its body was read (it expected `100 Continue`)
/// and close.
#[cold]
#[inline(never)]
fn refuse_unread<S: Service + ?Sized>(
    stream: &mut TcpStream,
    refused: Response,
    req: &Request,
    service: &S,
    stats: &HttpStats,
) {
    let sent_id = service.request_id_header().and_then(|h| req.header(h));
    let refused = service.refusal(refused, sent_id, req.wants_json());
    stats.response(refused.status);
    let mut out = Vec::new();
    refused.write_with(
        &mut out,
        req.minor_version,
        false,
        req.method == "HEAD",
        service.default_headers(),
    );
    send_and_close(stream, &out);
}

/// Answer a protocol error and close, reading a little of what the client still sends
/// so that it receives our answer rather than a connection reset. Out of line, as
/// [`serve`]'s other rare paths are: its frame is on the connection's stack under
/// every request's run, so what it holds is memory every kept-alive connection keeps.
#[cold]
#[inline(never)]
fn send_error_and_close<S: Service + ?Sized>(
    stream: &mut TcpStream,
    e: &HttpError,
    stats: &HttpStats,
    service: &S,
    head: &dyn SentHead,
) {
    let sent_id = service.request_id_header().and_then(|h| head.header(h));
    let wants_json = head.wants_json();
    let resp = service.refusal(Response::from(e.problem()), sent_id, wants_json);
    stats.response(resp.status);
    let mut out = Vec::new();
    resp.write_with(&mut out, 1, false, false, service.default_headers());
    send_and_close(stream, &out);
}

/// What a refused request's head said, parsed or not: the two things its answer
/// needs (the id it sent, whether it asked for JSON).
trait SentHead {
    fn header(&self, name: &str) -> Option<&str>;
    fn wants_json(&self) -> bool;
}

impl SentHead for Request {
    fn header(&self, name: &str) -> Option<&str> {
        Request::header(self, name)
    }

    fn wants_json(&self) -> bool {
        Request::wants_json(self)
    }
}

/// The bytes of a head that did not parse: its header lines are still read, leniently
/// (what they say only picks the answer's form and id, and an id is checked before it
/// is kept).
struct RawHead<'a>(&'a [u8]);

impl SentHead for RawHead<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        let end = self
            .0
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(self.0.len());
        self.0[..end]
            .split(|&b| b == b'\n')
            .skip(1)
            .filter_map(|line| std::str::from_utf8(line).ok())
            .filter_map(|line| line.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    fn wants_json(&self) -> bool {
        self.header("accept")
            .is_some_and(crate::http::problem::accepts_json)
    }
}

/// Write `out` (a response that says `Connection: close`) and close, reading a little
/// of what the client still sends so that it receives `out` rather than a reset
/// (closing a socket with unread input makes the kernel send RST).
pub(crate) fn send_and_close(stream: &mut TcpStream, out: &[u8]) {
    if stream.write_all(out).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + LINGER_TIME;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        if left.is_zero() || stream.set_read_timeout(Some(io_timeout(left))).is_err() {
            break;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}
