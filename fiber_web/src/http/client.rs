//! A coroutine-native HTTP/1.1 client on `may::net`: keep-alive connections per
//! upstream address, a timeout for every phase, and a cap on response size.
//!
//! Called from a fiber, `get` looks blocking and yields to may while it waits; every
//! may call (connect, read, write, a socket's drop) runs on the carrier's stack
//! through `fiber_pool::net::CarrierStream`. URLs
//! name IP addresses (or `localhost`): may's connect resolves names with blocking DNS,
//! so names are resolved once, at start-up, by [`Url::parse_resolving`].

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fiber_pool::net::CarrierStream;
use fiber_pool::Lent;

use crate::config::ClientLimits;

/// Most response headers accepted from an upstream.
const MAX_RESPONSE_HEADERS: usize = 64;
const READ_CHUNK: usize = 16 * 1024;

/// An `http://` URL whose host is already an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// The host as written (sent as the Host header).
    pub host: String,
    /// The address connected to (resolved when the URL was parsed).
    pub addr: SocketAddr,
    /// Path and query, starting with `/`.
    pub target: String,
}

impl Url {
    /// Parse without any DNS: the host must be an IP address or `localhost`.
    pub fn parse(s: &str) -> Result<Url, ClientError> {
        Self::parse_with(s, |host, port| {
            let ip = if host.eq_ignore_ascii_case("localhost") {
                "127.0.0.1".parse().ok()
            } else {
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse()
                    .ok()
            };
            ip.map(|ip| SocketAddr::new(ip, port)).ok_or_else(|| {
                format!(
                    "host '{host}' is not an IP address: use an address, or resolve it at start-up"
                )
            })
        })
    }

    /// Parse, resolving a host name with the system resolver. This blocks the thread:
    /// call it at start-up, never from a fiber.
    pub fn parse_resolving(s: &str) -> Result<Url, ClientError> {
        Self::parse_with(s, |host, port| {
            (host.trim_start_matches('[').trim_end_matches(']'), port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve '{host}': {e}"))?
                .next()
                .ok_or_else(|| format!("'{host}' has no address"))
        })
    }

    fn parse_with(
        s: &str,
        resolve: impl FnOnce(&str, u16) -> Result<SocketAddr, String>,
    ) -> Result<Url, ClientError> {
        let bad = |why: String| ClientError::BadUrl(format!("'{s}': {why}"));
        let shape = || bad("expected http://host[:port]/path".into());
        // The `url` crate (WHATWG) parses; what it accepts beyond what an upstream
        // address should be (another scheme, credentials, `http:///x` read as host `x`)
        // is refused here, each with what to change.
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// URLs are supported".into()))?;
        if rest.is_empty() || rest.starts_with(['/', '?', '#']) {
            return Err(shape());
        }
        let url = url::Url::parse(s).map_err(|e| match e {
            url::ParseError::InvalidPort => bad("the port is not a number from 0 to 65535".into()),
            url::ParseError::EmptyHost => shape(),
            other => bad(format!("{other}")),
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(shape());
        }
        let host = url.host_str().ok_or_else(shape)?;
        let port = url.port().unwrap_or(80);
        let addr = resolve(host, port).map_err(bad)?;
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        Ok(Url {
            host: match url.port() {
                Some(p) => format!("{host}:{p}"),
                None => host.to_string(),
            },
            addr,
            target,
        })
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.host, self.target)
    }
}

/// A whole response.
#[derive(Debug)]
pub struct ClientResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

/// Why a request failed; each maps to the status a gateway answers with.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL cannot be used.
    BadUrl(String),
    /// The TCP connection could not be opened (refused, unreachable).
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// A phase took longer than its limit: "connect", "response" or "total".
    Timeout {
        /// Which phase.
        phase: &'static str,
        /// Its limit.
        limit: Duration,
    },
    /// The response was larger than `max_response_bytes`.
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The upstream sent something that is not an HTTP/1.x response.
    BadResponse(String),
    /// The connection broke mid-exchange.
    Io(io::Error),
}

impl ClientError {
    /// The status a server answers with when this error comes from its upstream.
    pub fn gateway_status(&self) -> u16 {
        match self {
            ClientError::Timeout { .. } => 504,
            _ => 502,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::BadUrl(why) => write!(f, "bad URL {why}"),
            ClientError::Connect { addr, source } => {
                write!(f, "cannot connect to {addr}: {source}")
            }
            ClientError::Timeout { phase, limit } => {
                write!(
                    f,
                    "upstream {phase} timed out after {} ms",
                    limit.as_millis()
                )
            }
            ClientError::TooLarge { limit } => {
                write!(f, "upstream response larger than the {limit}-byte limit")
            }
            ClientError::BadResponse(why) => write!(f, "upstream sent a bad response: {why}"),
            ClientError::Io(e) => write!(f, "upstream connection failed: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// Counters of the client.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    errors: AtomicU64,
    connects: AtomicU64,
    reused: AtomicU64,
    in_flight: AtomicU64,
}

/// The client: share one per process.
pub struct HttpClient {
    limits: ClientLimits,
    idle: Mutex<HashMap<SocketAddr, Vec<CarrierStream>>>,
    counters: Arc<Counters>,
}

impl HttpClient {
    /// A client with `limits`, and no connection open yet.
    pub fn new(limits: ClientLimits) -> HttpClient {
        HttpClient {
            limits,
            idle: Mutex::new(HashMap::new()),
            counters: Arc::default(),
        }
    }

    /// GET `url` and read the whole response, within the limits.
    pub fn get(&self, url: &Url) -> Result<ClientResponse, ClientError> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        // If the fiber overflows inside, this frame is abandoned: the Lent gives the
        // count back then (tests/stack.rs's overflow sweep checks it). Made before the
        // count is taken: making it can overflow (it checks its stack margin).
        let counters = Arc::clone(&self.counters);
        let in_flight = Lent::new((), move |()| {
            counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        self.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = self.get_inner(url);
        drop(in_flight);
        self.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        if result.is_err() {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn get_inner(&self, url: &Url) -> Result<ClientResponse, ClientError> {
        let deadline = Instant::now() + self.limits.total_timeout;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: fiberstack\r\nAccept: */*\r\n\r\n",
            url.target, url.host
        );
        // A kept-alive connection may have been closed by the server meanwhile: if it
        // fails before any response byte, the GET is retried once on a new connection.
        if let Ok(stream) = self.take_idle(url.addr) {
            self.counters.reused.fetch_add(1, Ordering::Relaxed);
            match self.exchange(stream, url, &request, deadline) {
                Err(Exchange::Stale) => {}
                Err(Exchange::Failed(e)) => return Err(e),
                Ok(resp) => return Ok(resp),
            }
        }
        let stream = self.connect(url.addr, deadline)?;
        match self.exchange(stream, url, &request, deadline) {
            Ok(resp) => Ok(resp),
            Err(Exchange::Stale) => Err(ClientError::BadResponse(
                "the connection closed before any response".into(),
            )),
            Err(Exchange::Failed(e)) => Err(e),
        }
    }

    // The idle map is locked for a map operation only, never across a yield, and on
    // the carrier's stack (`fiber_pool::on_carrier`): an overflow cannot strike with
    // the lock held (an abandoned guard never unlocks), and a fiber needs no stack
    // reserved for it. A stream dropped there (the list is full) closes there too.
    //
    // A stream a fiber uses lives in a `Lent` (taken straight into it, on the carrier):
    // if the fiber overflows mid-exchange, its abandoned frames cannot keep the socket
    // open for ever; the pool closes it (tests/stack.rs's overflow sweep counts fds).
    fn take_idle(&self, addr: SocketAddr) -> Result<Lent<CarrierStream>, ()> {
        Lent::acquire(
            || {
                fiber_pool::lock(&self.idle)
                    .get_mut(&addr)
                    .and_then(Vec::pop)
                    .ok_or(())
            },
            drop,
        )
    }

    fn put_idle(&self, addr: SocketAddr, stream: Lent<CarrierStream>) {
        // Stack for the few frames between taking the stream out and the carrier.
        fiber_pool::check_stack(fiber_pool::lent::LENT_STACK_MARGIN);
        let stream = stream.into_inner();
        fiber_pool::on_carrier(move || {
            let mut idle = fiber_pool::lock(&self.idle);
            let list = idle.entry(addr).or_default();
            if list.len() < self.limits.max_idle_per_host {
                list.push(stream);
            }
        });
    }

    fn connect(
        &self,
        addr: SocketAddr,
        deadline: Instant,
    ) -> Result<Lent<CarrierStream>, ClientError> {
        self.counters.connects.fetch_add(1, Ordering::Relaxed);
        let limit = self.limits.connect_timeout.min(left(deadline));
        // Not may's TcpStream::connect_timeout: it races (see fiber_pool::net). This one
        // runs on the carrier's stack, like every may call of a CarrierStream.
        let stream =
            Lent::acquire(|| fiber_pool::net::connect(&addr, limit), drop).map_err(|e| {
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) {
                    ClientError::Timeout {
                        phase: "connect",
                        limit,
                    }
                } else {
                    ClientError::Connect { addr, source: e }
                }
            })?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    fn exchange(
        &self,
        mut stream: Lent<CarrierStream>,
        url: &Url,
        request: &str,
        deadline: Instant,
    ) -> Result<ClientResponse, Exchange> {
        stream
            .set_write_timeout(Some(crate::http::io_timeout(
                self.limits.read_timeout.min(left(deadline)),
            )))
            .map_err(io_failed)?;
        if let Err(e) = stream.write_all(request.as_bytes()) {
            return Err(if is_stale(&e) {
                Exchange::Stale
            } else {
                io_failed(e)
            });
        }
        let mut reader = Reader {
            stream: &mut stream,
            // In a Lent like the stream: if the fiber overflows mid-read, the buffer
            // (up to the whole response) is freed instead of leaking with the frames.
            buf: Lent::new(Vec::with_capacity(READ_CHUNK), drop),
            read_timeout: self.limits.read_timeout,
            total_timeout: self.limits.total_timeout,
            deadline,
            limit: self.limits.max_response_bytes,
            total: 0,
        };
        // The head.
        let (status, headers, head_len, minor) = loop {
            let mut hs = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
            let mut resp = httparse::Response::new(&mut hs);
            match resp.parse(&reader.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let headers = resp
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).trim().to_string(),
                            )
                        })
                        .collect::<Vec<_>>();
                    break (
                        resp.code.unwrap_or(0),
                        headers,
                        n,
                        resp.version.unwrap_or(1),
                    );
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(Exchange::Failed(ClientError::BadResponse(e.to_string()))),
            }
            match reader.more() {
                Ok(0) if reader.buf.is_empty() => return Err(Exchange::Stale),
                Ok(0) => {
                    return Err(Exchange::Failed(ClientError::BadResponse(
                        "the connection closed inside the response head".into(),
                    )))
                }
                Ok(_) => {}
                Err(e) if reader.buf.is_empty() && is_stale_client(&e) => {
                    return Err(Exchange::Stale)
                }
                Err(e) => return Err(Exchange::Failed(e)),
            }
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let chunked = header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        let length = header("content-length").map(|v| {
            v.parse::<usize>().map_err(|_| {
                ClientError::BadResponse(format!("Content-Length '{v}' is not a number"))
            })
        });
        reader.buf.drain(..head_len);
        let (body, framed) = if chunked {
            (reader.chunked().map_err(Exchange::Failed)?, true)
        } else if let Some(length) = length {
            let length = length.map_err(Exchange::Failed)?;
            if length > self.limits.max_response_bytes {
                return Err(Exchange::Failed(ClientError::TooLarge {
                    limit: self.limits.max_response_bytes,
                }));
            }
            (reader.exactly(length).map_err(Exchange::Failed)?, true)
        } else {
            (reader.until_close().map_err(Exchange::Failed)?, false)
        };
        let close = header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let leftover = !reader.buf.is_empty();
        if framed && !close && minor >= 1 && !leftover {
            self.put_idle(url.addr, stream);
        }
        Ok(ClientResponse {
            status,
            headers,
            body,
        })
    }

    /// The counters now.
    pub fn stats(&self) -> ClientStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let idle: usize = fiber_pool::lock(&self.idle).values().map(Vec::len).sum();
        ClientStats {
            requests: get(&c.requests),
            errors: get(&c.errors),
            in_flight: get(&c.in_flight),
            connects: get(&c.connects),
            reused_connections: get(&c.reused),
            idle_connections: idle as u64,
        }
    }
}

/// The outgoing client's counters at one moment, as `/stats` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClientStats {
    /// Requests sent.
    pub requests: u64,
    /// Requests that failed (connect, timeout, a bad response).
    pub errors: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// TCP connections opened.
    pub connects: u64,
    /// Requests sent on a kept-alive connection.
    pub reused_connections: u64,
    /// Kept-alive connections idle now.
    pub idle_connections: u64,
}

enum Exchange {
    /// A reused connection was already closed: retry on a new one.
    Stale,
    Failed(ClientError),
}

fn io_failed(e: io::Error) -> Exchange {
    Exchange::Failed(ClientError::Io(e))
}

fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

fn is_stale_client(e: &ClientError) -> bool {
    matches!(e, ClientError::Io(e) if is_stale(e))
}

/// Time left until `deadline`, as a timeout may honours (never under a millisecond).
fn left(deadline: Instant) -> Duration {
    crate::http::io_timeout(deadline.saturating_duration_since(Instant::now()))
}

/// Reads a response within the per-read timeout, the total deadline and the size cap.
struct Reader<'a> {
    stream: &'a mut CarrierStream,
    buf: Lent<Vec<u8>>,
    read_timeout: Duration,
    /// The limit `deadline` enforces, for the error message.
    total_timeout: Duration,
    deadline: Instant,
    limit: usize,
    total: usize,
}

impl Reader<'_> {
    /// Read some bytes into `buf`; 0 at end of stream.
    fn more(&mut self) -> Result<usize, ClientError> {
        let total = ClientError::Timeout {
            phase: "total",
            limit: self.total_timeout,
        };
        if Instant::now() >= self.deadline {
            return Err(total);
        }
        // A wait cut short by the total deadline is the total's timeout, not the
        // read's: the message names the limit that really ran out.
        let left = left(self.deadline);
        let (wait, timeout) = if left < self.read_timeout {
            (left, total)
        } else {
            let phase = ClientError::Timeout {
                phase: "response",
                limit: self.read_timeout,
            };
            (self.read_timeout, phase)
        };
        self.stream
            .set_read_timeout(Some(crate::http::io_timeout(wait)))
            .map_err(ClientError::Io)?;
        let start = self.buf.len();
        self.buf.resize(start + READ_CHUNK, 0);
        let r = self.stream.read(&mut self.buf[start..]);
        self.buf.truncate(start + *r.as_ref().unwrap_or(&0));
        let n = r.map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timeout,
            _ => ClientError::Io(e),
        })?;
        self.total += n;
        if self.total > self.limit {
            return Err(ClientError::TooLarge { limit: self.limit });
        }
        Ok(n)
    }

    fn exactly(&mut self, len: usize) -> Result<Vec<u8>, ClientError> {
        while self.buf.len() < len {
            if self.more()? == 0 {
                return Err(ClientError::BadResponse("the body ended early".into()));
            }
        }
        Ok(self.buf.drain(..len).collect())
    }

    fn until_close(&mut self) -> Result<Vec<u8>, ClientError> {
        while self.more()? > 0 {}
        Ok(std::mem::take(&mut self.buf))
    }

    fn chunked(&mut self) -> Result<Vec<u8>, ClientError> {
        let mut body = Vec::new();
        loop {
            let (size_len, size) = loop {
                match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete((n, size))) => break (n, size),
                    Ok(httparse::Status::Partial) => {
                        if self.more()? == 0 {
                            return Err(ClientError::BadResponse(
                                "the chunked body ended early".into(),
                            ));
                        }
                    }
                    Err(_) => return Err(ClientError::BadResponse("bad chunk size".into())),
                }
            };
            let size = usize::try_from(size)
                .ok()
                .filter(|s| *s <= self.limit)
                .ok_or(ClientError::TooLarge { limit: self.limit })?;
            self.buf.drain(..size_len);
            if size == 0 {
                // Trailers, if any, end with an empty line; we need only that line.
                loop {
                    if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        if end == 0 {
                            self.buf.drain(..2);
                            return Ok(body);
                        }
                        self.buf.drain(..end + 2);
                        continue;
                    }
                    if self.more()? == 0 {
                        return Err(ClientError::BadResponse(
                            "the chunked body ended early".into(),
                        ));
                    }
                }
            }
            let chunk = self.exactly(size + 2)?;
            if &chunk[size..] != b"\r\n" {
                return Err(ClientError::BadResponse(
                    "a chunk does not end with CRLF".into(),
                ));
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_without_dns() {
        let u = Url::parse("http://127.0.0.1:3000/upstream/search.json?q=rails+3").unwrap();
        assert_eq!(u.addr, "127.0.0.1:3000".parse().unwrap());
        assert_eq!(u.target, "/upstream/search.json?q=rails+3");
        assert_eq!(u.host, "127.0.0.1:3000");
        let u = Url::parse("http://localhost").unwrap();
        assert_eq!((u.addr.port(), u.target.as_str()), (80, "/"));
        let u = Url::parse("http://[::1]:8080?x=1").unwrap();
        assert_eq!((u.addr.port(), u.target.as_str()), (8080, "/?x=1"));
    }

    #[test]
    fn unusable_urls_say_why() {
        for (s, why) in [
            ("https://x/", "only http://"),
            ("http://example.com/", "not an IP address"),
            ("http://127.0.0.1:http/", "not a number"),
            ("http:///x", "expected"),
            ("http://u:secret@127.0.0.1/", "expected"),
            ("http://127.0.0.1:99999/", "not a number"),
        ] {
            let e = Url::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
