//! A parsed HTTP/1.x request, and the parser that turns bytes into one within limits.
//!
//! The parser only looks at bytes already read; reading them (with timeouts) is the
//! connection loop's job (`conn.rs`). Everything a client controls is bounded by
//! [`HttpLimits`]: header count, head size, body size. The target and Host rules are
//! in `target.rs`, the chunked coding in `chunked.rs`.

use std::borrow::Cow;

use crate::config::HttpLimits;
use crate::http::{target, HttpError};

/// One request, fully read (head and body).
#[derive(Clone, Debug)]
pub struct Request {
    /// `GET`, `POST`, ... as sent (the common methods borrowed, not allocated).
    pub method: Cow<'static, str>,
    /// The path, without the query string, normalized (`target.rs`): unreserved
    /// escapes decoded, other escapes as sent, one trailing slash dropped; `*` for
    /// `OPTIONS *`.
    pub path: String,
    /// The raw query string (after `?`), empty if none.
    pub query: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Header names (lower-cased) and values, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body (from `Content-Length` or the chunked coding).
    pub body: Vec<u8>,
}

impl Request {
    /// Build a request by hand, for tests and for calling handlers directly.
    pub fn get(target: &str) -> Request {
        let (path, query) = split_target(target);
        Request {
            method: "GET".into(),
            path,
            query,
            minor_version: 1,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of query parameter `name`, form-decoded (`+` is a space).
    pub fn query_param(&self, name: &str) -> Option<String> {
        crate::http::query::query_param(&self.query, name)
    }

    /// Whether the client waits for `100 Continue` before it sends the body.
    pub fn expects_continue(&self) -> bool {
        self.minor_version >= 1
            && self
                .header("expect")
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }

    /// Whether the client asked to keep the connection open after this request:
    /// HTTP/1.1 keeps it unless `Connection: close`; HTTP/1.0 closes it unless
    /// `Connection: keep-alive`.
    pub fn wants_keep_alive(&self) -> bool {
        let tokens = |want: &str| {
            self.headers
                .iter()
                .filter(|(n, _)| n == "connection")
                .flat_map(|(_, v)| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case(want))
        };
        if self.minor_version >= 1 {
            !tokens("close")
        } else {
            tokens("keep-alive")
        }
    }
}

/// How the body of a request is framed (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes (0 without the header), at most `max_body_bytes`.
    Length(usize),
    /// `Transfer-Encoding: chunked`, decoded by `chunked.rs`.
    Chunked,
}

/// The head of a request: everything but the body, and how the body is framed.
#[derive(Debug)]
pub struct Head {
    pub request: Request,
    /// Bytes the head took in the buffer.
    pub head_len: usize,
    /// How the body that follows it is framed.
    pub framing: Framing,
}

impl Head {
    /// Whether a body follows the head.
    pub fn has_body(&self) -> bool {
        self.framing != Framing::Length(0)
    }
}

/// Parse a request head from the start of `buf`.
///
/// `Ok(None)` means more bytes are needed (and the head is still within limits).
///
/// In two steps, so that the header array of the first (`parse_raw`, its own frame)
/// is off the stack before the target is normalized and allocated (`finish`): run
/// one after the other instead of nested, they keep the deepest point of reading a
/// request within the connection coroutine's top stack page (docs/PROFILE.md).
pub fn parse_head(buf: &[u8], limits: &HttpLimits) -> Result<Option<Head>, HttpError> {
    match parse_raw(buf, limits)? {
        Some(raw) => finish(raw, limits).map(Some),
        None => Ok(None),
    }
}

/// A complete head as httparse saw it: what borrows the buffer, and the headers
/// copied out of httparse's array.
struct RawHead<'b> {
    method: &'b str,
    target: &'b str,
    minor_version: u8,
    /// A header that is not UTF-8 is reported after the target's errors, as it was
    /// when both were checked in one pass.
    headers: Result<Vec<(String, String)>, HttpError>,
    head_len: usize,
}

/// The first step of [`parse_head`]. Most heads have a few headers: parse into a
/// small array on the stack first, and only a head with more is parsed again with
/// room for `max_headers` (a 2 KiB allocation and its zeroing per request were 15%
/// of /hello's instructions). Never inlined: the array must leave the stack with it.
#[inline(never)]
fn parse_raw<'b>(buf: &'b [u8], limits: &HttpLimits) -> Result<Option<RawHead<'b>>, HttpError> {
    let mut few = [httparse::EMPTY_HEADER; FEW_HEADERS];
    let room = FEW_HEADERS.min(limits.max_headers);
    match parse_into(buf, limits, &mut few[..room]) {
        Err(HttpError::TooManyHeaders { .. }) if limits.max_headers > room => parse_into(
            buf,
            limits,
            &mut vec![httparse::EMPTY_HEADER; limits.max_headers],
        ),
        other => other,
    }
}

/// Headers the first parse of a head has room for (on the carrier's stack).
const FEW_HEADERS: usize = 16;

/// [`parse_raw`] with room for `headers.len()` headers.
fn parse_into<'b>(
    buf: &'b [u8],
    limits: &HttpLimits,
    headers: &mut [httparse::Header<'b>],
) -> Result<Option<RawHead<'b>>, HttpError> {
    let mut req = httparse::Request::new(headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_header_bytes {
                return Err(too_large(buf, limits));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::TooManyHeaders {
                limit: limits.max_headers,
            })
        }
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    };
    if head_len > limits.max_header_bytes {
        return Err(too_large(buf, limits));
    }
    let mut out = Vec::with_capacity(req.headers.len());
    let mut not_utf8 = None;
    for h in req.headers.iter() {
        match std::str::from_utf8(h.value) {
            Ok(value) => out.push((h.name.to_ascii_lowercase(), value.trim().to_string())),
            Err(_) => {
                not_utf8 = Some(HttpError::Malformed(format!(
                    "header '{}' is not valid UTF-8",
                    h.name
                )));
                break;
            }
        }
    }
    // httparse fills these three on Complete.
    Ok(Some(RawHead {
        method: req.method.unwrap_or_default(),
        target: req.path.unwrap_or_default(),
        minor_version: req.version.unwrap_or(1),
        headers: not_utf8.map_or(Ok(out), Err),
        head_len,
    }))
}

/// The second step of [`parse_head`]: the target, the Host rule and the framing.
/// Never inlined either, so that `parse_head`'s own frame stays small.
#[inline(never)]
fn finish(raw: RawHead<'_>, limits: &HttpLimits) -> Result<Head, HttpError> {
    let method = method_name(raw.method);
    let target = target::parse(&method, raw.target)?;
    let out = raw.headers?;
    let hosts = out
        .iter()
        .filter(|(n, _)| n == "host")
        .map(|(_, v)| v.as_str());
    target::check_host(raw.minor_version, hosts)?;
    let request = Request {
        method,
        path: target.path,
        query: target.query,
        minor_version: raw.minor_version,
        headers: out,
        body: Vec::new(),
    };
    let framing = framing(&request, limits)?;
    Ok(Head {
        request,
        head_len: raw.head_len,
        framing,
    })
}

/// The methods of RFC 9110 section 9 and PATCH: a request naming one of them borrows
/// its name instead of allocating it.
const KNOWN_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
];

/// `sent` as a request's method: a known one borrowed, any other token copied.
fn method_name(sent: &str) -> Cow<'static, str> {
    match KNOWN_METHODS.iter().find(|m| **m == sent) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(sent.to_string()),
    }
}

/// A head over `max_header_bytes`: 414 when the request line alone is (RFC 9112
/// section 3: a target longer than the server parses MUST get a 414), else 431.
fn too_large(buf: &[u8], limits: &HttpLimits) -> HttpError {
    let limit = limits.max_header_bytes;
    match buf.iter().position(|&b| b == b'\n') {
        Some(line) if line <= limit => HttpError::HeadTooLarge { limit },
        _ => HttpError::UriTooLong { limit },
    }
}

/// How the body is framed. Every ambiguity is a 400 after which the connection
/// closes, because ambiguous framing is how requests get smuggled past a proxy:
/// Transfer-Encoding together with Content-Length (RFC 9112 section 6.3 lets a server
/// reject it; we do, rather than guess which one a proxy in front believed),
/// Transfer-Encoding in HTTP/1.0, a coding list that does not end in `chunked`, and
/// conflicting or non-numeric lengths. A known list we cannot decode (`gzip, chunked`)
/// is a 501.
fn framing(req: &Request, limits: &HttpLimits) -> Result<Framing, HttpError> {
    let codings: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n == "transfer-encoding")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .collect();
    if !codings.is_empty() {
        let te = codings.join(", ");
        if req.minor_version == 0 {
            return Err(HttpError::Malformed(format!(
                "Transfer-Encoding '{te}' in an HTTP/1.0 request: send Content-Length"
            )));
        }
        if req.header("content-length").is_some() {
            return Err(HttpError::Malformed(
                "both Content-Length and Transfer-Encoding: send only one of them".into(),
            ));
        }
        let chunked = |c: &&str| c.eq_ignore_ascii_case("chunked");
        return match codings.iter().rposition(chunked) {
            Some(last) if last + 1 == codings.len() && codings.len() == 1 => Ok(Framing::Chunked),
            Some(last) if last + 1 == codings.len() && !codings[..last].iter().any(chunked) => {
                Err(HttpError::UnsupportedTransferEncoding(te))
            }
            _ => Err(HttpError::Malformed(format!(
                "Transfer-Encoding '{te}' must end in chunked, once: the body's end is unknown"
            ))),
        };
    }
    let mut lengths = req
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str());
    let Some(first) = lengths.next() else {
        return Ok(Framing::Length(0));
    };
    if lengths.any(|other| other != first) {
        return Err(HttpError::Malformed(
            "conflicting Content-Length headers".into(),
        ));
    }
    if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::Malformed(format!(
            "Content-Length '{first}' is not a number of bytes"
        )));
    }
    let len: usize = first.parse().map_err(|_| HttpError::BodyTooLarge {
        limit: limits.max_body_bytes,
    })?;
    if len > limits.max_body_bytes {
        return Err(HttpError::BodyTooLarge {
            limit: limits.max_body_bytes,
        });
    }
    Ok(Framing::Length(len))
}

/// httparse reports any request line it cannot split as a version error (`G ET /
/// HTTP/1.1` reads as target `ET`, version `/ HTTP/1.1`): only a line that really ends
/// in `HTTP/<digit>.<digit>` is a 505; anything else is a malformed request.
fn version_error(buf: &[u8]) -> HttpError {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let well_formed = parts.len() == 3
        && !parts[0].is_empty()
        && !parts[1].is_empty()
        && matches!(parts[2], [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit());
    if well_formed {
        HttpError::Version
    } else {
        HttpError::Malformed("the request line is not 'METHOD /target HTTP/1.x'".into())
    }
}

fn split_target(target: &str) -> (String, String) {
    match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    }
}

/// Decode one `application/x-www-form-urlencoded` component: `+` is a space, `%XX` a
/// byte (percent-encoding's decoder). Invalid escapes are kept as written; invalid
/// UTF-8 becomes U+FFFD.
pub fn form_decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// Encode text for a query string (the inverse of [`form_decode`]): form_urlencoded's
/// serializer, which leaves `A-Z a-z 0-9 * - . _` as they are and writes a space as `+`.
pub fn form_encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits::default()
    }

    #[test]
    fn a_complete_head_parses_with_query_and_headers() {
        let raw = b"GET http://x/widgets/?sleep=0.25&q=rails+3 HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n";
        let head = parse_head(raw, &limits()).unwrap().unwrap();
        assert_eq!(head.head_len, raw.len());
        assert_eq!(head.request.path, "/widgets");
        assert_eq!(head.request.query_param("sleep").as_deref(), Some("0.25"));
        assert_eq!(head.request.query_param("q").as_deref(), Some("rails 3"));
        assert!(!head.request.wants_keep_alive());
    }

    #[test]
    fn keep_alive_defaults_differ_between_1_0_and_1_1() {
        let p = |raw: &[u8]| parse_head(raw, &limits()).unwrap().unwrap().request;
        assert!(p(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").wants_keep_alive());
        assert!(!p(b"GET / HTTP/1.0\r\n\r\n").wants_keep_alive());
        assert!(p(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").wants_keep_alive());
        assert!(
            !p(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n").wants_keep_alive()
        );
    }

    #[test]
    fn partial_heads_wait_for_more_until_the_limit() {
        assert!(parse_head(b"GET / HTTP/1.1\r\nHost:", &limits())
            .unwrap()
            .is_none());
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(limits().max_header_bytes + 1, b'a');
        assert!(matches!(
            parse_head(&big, &limits()),
            Err(HttpError::HeadTooLarge { .. })
        ));
    }

    #[test]
    fn hostile_heads_are_refused_with_the_right_error() {
        let l = limits();
        let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..=l.max_headers {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_head(&many, &l),
            Err(HttpError::TooManyHeaders { .. })
        ));
        for raw in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /%00 HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(raw, &l), Err(HttpError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(matches!(
            parse_head(
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
                &l
            ),
            Err(HttpError::BodyTooLarge { .. })
        ));
        assert!(matches!(
            parse_head(
                b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                &l
            ),
            Err(HttpError::UnsupportedTransferEncoding(_))
        ));
        let chunked = parse_head(
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n",
            &l,
        );
        assert_eq!(chunked.unwrap().unwrap().framing, Framing::Chunked);
    }

    #[test]
    fn only_a_well_formed_other_version_is_a_505() {
        let l = limits();
        assert!(matches!(
            parse_head(b"GET / HTTP/2.0\r\n\r\n", &l),
            Err(HttpError::Version)
        ));
        for raw in [
            &b"G ET / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/1.1 extra\r\n\r\n",
            b"GET / HTTQ/1.1\r\n\r\n",
            b"GET / HTTP/1.x\r\n\r\n",
        ] {
            let e = parse_head(raw, &l).unwrap_err();
            assert_eq!(e.status(), 400, "{}: {e}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn form_coding_round_trips() {
        for s in [
            "rails 3",
            "a&b=c",
            "ünï",
            "100%",
            "'; drop table tweets; --",
        ] {
            assert_eq!(form_decode(&form_encode(s)), s);
        }
        assert_eq!(form_decode("%zz%4"), "%zz%4");
    }
}
