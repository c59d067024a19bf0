//! One HTTP/1.1 exchange on an open [`Conn`]: send the request, wait for the first
//! byte, read the head (skipping 1xx interim responses), then the body as the
//! response frames it (RFC 9112 section 6.3: none for HEAD, 204 and 304; chunked;
//! Content-Length; else until the connection closes), each phase within its deadline
//! and the whole within the size cap. It says whether the connection can carry the next
//! request.

use super::conn::{Conn, Failure};
use super::deadline::Deadline;
use super::phase;
use super::request::Method;
use super::response::ClientResponse;
use crate::config::ClientLimits;
use crate::Error;

/// What one exchange needs besides the connection.
pub(crate) struct Exchange<'a> {
    pub(crate) limits: &'a ClientLimits,
    /// The call's own deadline, which bounds every phase.
    pub(crate) call: Deadline,
    pub(crate) method: Method,
    /// The TLS server name, for errors.
    pub(crate) host: &'a str,
    /// The caller asked for `Connection: close`.
    pub(crate) close: bool,
}

/// Why an exchange failed.
pub(crate) enum Failed {
    /// The connection turned out closed before a single response byte arrived: a
    /// kept-alive connection the server had closed meanwhile. What to tell the caller
    /// if the request is not sent again.
    Closed(Error),
    /// Anything else.
    Error(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Failed {
        Failed::Error(e)
    }
}

/// How the response's body is delimited.
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

impl Exchange<'_> {
    /// The error for `failure` in `phase`, whose wait ended at `deadline`.
    fn error(&self, failure: Failure, phase: &'static str, deadline: &Deadline) -> Error {
        match failure {
            Failure::TimedOut => deadline.expired(),
            Failure::Io(source) => Error::Broken { phase, source },
            Failure::Tls(source) => Error::Tls {
                host: self.host.to_string(),
                phase,
                source,
            },
        }
    }

    /// A deadline for one read in `phase`: the read timeout, cut short by `outer`.
    fn read_deadline(&self, phase: &'static str, outer: Deadline) -> Deadline {
        outer.phase(phase, self.limits.read_timeout)
    }

    /// Send `request` on `conn` and read the whole response. `Ok` holds the response
    /// and whether `conn` may be reused. Each phase is a function of its own: in a
    /// debug build every temporary has its own stack slot, and one function for all of
    /// them made the deepest frame of a call.
    pub(crate) fn run(
        &self,
        conn: &mut Conn,
        request: &[u8],
    ) -> Result<(ClientResponse, bool), Failed> {
        self.send(conn, request)?;
        let mut received = self.first_byte(conn)?;
        let head = self.head(conn, &mut received)?;
        let framed = self.body(conn, &head, &mut received)?;
        let reusable = framed
            && !self.close
            && head.keep_alive
            && !head.conflicting
            && conn.filled().is_empty();
        let response = ClientResponse {
            status: head.status,
            headers: head.headers,
            body: std::mem::take(&mut conn.body),
        };
        Ok((response, reusable))
    }

    fn send(&self, conn: &mut Conn, request: &[u8]) -> Result<(), Failed> {
        let send = self.call.phase(phase::SEND, self.limits.send_timeout);
        conn.write_all(request, send).map_err(|f| {
            let closed = f.is_closed_connection();
            let e = self.error(f, phase::SEND, &send);
            if closed {
                Failed::Closed(e)
            } else {
                Failed::Error(e)
            }
        })
    }

    /// Wait for the response to start: how many bytes came.
    fn first_byte(&self, conn: &mut Conn) -> Result<usize, Failed> {
        let first = self.read_deadline(phase::FIRST_BYTE, self.call);
        let received = match conn.fill(first) {
            Ok(0) => {
                return Err(Failed::Closed(Error::BadResponse(
                    "the connection closed before any response".into(),
                )))
            }
            Ok(n) => n,
            Err(f) if f.is_closed_connection() => {
                let e = self.error(f, phase::FIRST_BYTE, &first);
                return Err(Failed::Closed(e));
            }
            Err(f) => return Err(self.error(f, phase::FIRST_BYTE, &first).into()),
        };
        self.within_cap(received)?;
        Ok(received)
    }

    fn within_cap(&self, received: usize) -> Result<(), Error> {
        let limit = self.limits.max_response_bytes;
        if received > limit {
            return Err(Error::TooLarge { limit });
        }
        Ok(())
    }

    /// Read more of the response in `phase` (0 at its end), counted against the cap.
    fn more(
        &self,
        conn: &mut Conn,
        received: &mut usize,
        phase: &'static str,
        deadline: Deadline,
    ) -> Result<usize, Error> {
        let n = conn
            .fill(deadline)
            .map_err(|f| self.error(f, phase, &deadline))?;
        *received += n;
        self.within_cap(*received)?;
        Ok(n)
    }

    /// The final response's head (interim 1xx responses skipped), consumed.
    fn head(&self, conn: &mut Conn, received: &mut usize) -> Result<Head, Error> {
        let limits = self.limits;
        let too_large = || {
            Error::BadResponse(format!(
                "the response head is larger than the {}-byte limit",
                limits.max_head_bytes
            ))
        };
        let head = loop {
            match parse_head(conn.filled(), limits)? {
                Some(head) if head.len > limits.max_head_bytes => return Err(too_large()),
                Some(head) if (100..200).contains(&head.status) && head.status != 101 => {
                    // An interim response (100 Continue, 103 Early Hints): the final
                    // one follows.
                    conn.consume(head.len);
                    continue;
                }
                Some(head) => break head,
                None => {}
            }
            if conn.filled().len() > limits.max_head_bytes {
                return Err(too_large());
            }
            let d = self.read_deadline(phase::HEAD, self.call);
            if self.more(conn, received, phase::HEAD, d)? == 0 {
                return Err(Error::BadResponse(
                    "the connection closed inside the response head".into(),
                ));
            }
        };
        conn.consume(head.len);
        if head.status == 101 {
            return Err(Error::BadResponse(
                "101 Switching Protocols, but no upgrade was asked for".into(),
            ));
        }
        Ok(head)
    }

    /// The body into `conn.body`, as the head frames it; whether it was framed (a
    /// body read to the close leaves no connection to reuse).
    fn body(&self, conn: &mut Conn, head: &Head, received: &mut usize) -> Result<bool, Error> {
        let body = self.call.phase(phase::BODY, self.limits.body_timeout);
        let mut read = |conn: &mut Conn| {
            let d = self.read_deadline(phase::BODY, body);
            self.more(conn, received, phase::BODY, d)
        };
        conn.body.clear();
        match head.framing(self.method)? {
            Framing::Empty => Ok(true),
            Framing::Length(len) => {
                self.within_cap(len)?;
                length(conn, len, &mut read)?;
                Ok(true)
            }
            Framing::Chunked => {
                chunked(conn, self.limits.max_response_bytes, &mut read)?;
                Ok(true)
            }
            Framing::UntilClose => {
                until_close(conn, &mut read)?;
                Ok(false)
            }
        }
    }
}

/// A body of `len` bytes.
fn length(
    conn: &mut Conn,
    len: usize,
    read: &mut dyn FnMut(&mut Conn) -> Result<usize, Error>,
) -> Result<(), Error> {
    conn.body.reserve_exact(len);
    loop {
        let take = conn.filled().len().min(len - conn.body.len());
        conn.consume_into_body(take);
        if conn.body.len() == len {
            return Ok(());
        }
        if read(conn)? == 0 {
            return Err(Error::BadResponse(format!(
                "the body ended after {} of its {len} bytes",
                conn.body.len()
            )));
        }
    }
}

/// A body that ends when the connection does.
fn until_close(
    conn: &mut Conn,
    read: &mut dyn FnMut(&mut Conn) -> Result<usize, Error>,
) -> Result<(), Error> {
    loop {
        let n = conn.filled().len();
        conn.consume_into_body(n);
        match read(conn) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(Error::Broken { source, .. })
                if conn.is_tls() && source.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                return Err(Error::BadResponse(
                    "the TLS connection ended without close_notify, so the body \
                     (delimited by the close) may be cut short"
                        .into(),
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

/// A parsed response head.
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    /// Its length in bytes.
    len: usize,
    /// The connection stays open after this response (HTTP/1.1 without `close`, or
    /// HTTP/1.0 with `keep-alive`).
    keep_alive: bool,
    /// Both Transfer-Encoding and Content-Length: framed by the first, and the
    /// connection is not reused (RFC 9112 section 6.3, item 3).
    conflicting: bool,
}

/// The head at the start of `buf`, if complete.
fn parse_head(buf: &[u8], limits: &ClientLimits) -> Result<Option<Head>, Error> {
    // On the heap: a fiber's stack is small, and the limit is the caller's.
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut resp = httparse::Response::new(&mut slots);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::BadResponse(format!(
                "more than {} headers",
                limits.max_headers
            )))
        }
        Err(e) => {
            return Err(Error::BadResponse(format!(
                "the head is not HTTP/1.x ({e})"
            )))
        }
    };
    let headers: Vec<(String, String)> = resp
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let tokens = |name: &str, token: &str| {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    let keep_alive = match resp.version {
        Some(1) => !tokens("connection", "close"),
        _ => tokens("connection", "keep-alive") && !tokens("connection", "close"),
    };
    let conflicting = headers.iter().any(|(n, _)| n == "transfer-encoding")
        && headers.iter().any(|(n, _)| n == "content-length");
    Ok(Some(Head {
        status: resp.code.unwrap_or(0),
        headers,
        len,
        keep_alive,
        conflicting,
    }))
}

impl Head {
    fn framing(&self, method: Method) -> Result<Framing, Error> {
        if method == Method::Head || matches!(self.status, 204 | 304) {
            return Ok(Framing::Empty);
        }
        let values = |name: &'static str| {
            self.headers
                .iter()
                .filter(move |(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if let Some(last) = values("transfer-encoding")
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|t| !t.is_empty())
        {
            return Ok(if last.eq_ignore_ascii_case("chunked") {
                Framing::Chunked
            } else {
                // Any other final coding: the body runs to the close.
                Framing::UntilClose
            });
        }
        let mut length = None;
        for v in values("content-length").flat_map(|v| v.split(',')) {
            let v = v.trim();
            let n = v
                .parse::<usize>()
                .ok()
                .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| {
                    Error::BadResponse(format!("Content-Length '{v}' is not a number"))
                })?;
            if length.is_some_and(|l| l != n) {
                return Err(Error::BadResponse(
                    "two different Content-Length values".into(),
                ));
            }
            length = Some(n);
        }
        Ok(length.map_or(Framing::UntilClose, Framing::Length))
    }
}

/// Decode a chunked body from `conn` into `conn.body`, at most `limit` bytes of it.
fn chunked(
    conn: &mut Conn,
    limit: usize,
    read: &mut dyn FnMut(&mut Conn) -> Result<usize, Error>,
) -> Result<(), Error> {
    let ended = || Error::BadResponse("the chunked body ended early".into());
    loop {
        let (size_len, size) = loop {
            match httparse::parse_chunk_size(conn.filled()) {
                Ok(httparse::Status::Complete(found)) => break found,
                Ok(httparse::Status::Partial) => {
                    if read(conn)? == 0 {
                        return Err(ended());
                    }
                }
                Err(_) => return Err(Error::BadResponse("bad chunk size".into())),
            }
        };
        let size = usize::try_from(size)
            .ok()
            .filter(|s| conn.body.len().saturating_add(*s) <= limit)
            .ok_or(Error::TooLarge { limit })?;
        conn.consume(size_len);
        if size == 0 {
            // Trailers, if any, end with an empty line; only that line matters.
            loop {
                if let Some(end) = conn.filled().windows(2).position(|w| w == b"\r\n") {
                    conn.consume(end + 2);
                    if end == 0 {
                        return Ok(());
                    }
                    continue;
                }
                if read(conn)? == 0 {
                    return Err(ended());
                }
            }
        }
        let mut left = size;
        while left > 0 {
            if conn.filled().is_empty() && read(conn)? == 0 {
                return Err(ended());
            }
            let take = conn.filled().len().min(left);
            conn.consume_into_body(take);
            left -= take;
        }
        while conn.filled().len() < 2 {
            if read(conn)? == 0 {
                return Err(ended());
            }
        }
        if &conn.filled()[..2] != b"\r\n" {
            return Err(Error::BadResponse("a chunk does not end with CRLF".into()));
        }
        conn.consume(2);
    }
}
