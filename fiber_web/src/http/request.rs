//! A parsed HTTP/1.x request, and the parser that turns bytes into one within limits.
//!
//! The parser only looks at bytes already read; reading them (with timeouts) is the
//! connection loop's job (`conn.rs`). Everything a client controls is bounded by
//! [`HttpLimits`]: header count, head size, body size. The target and Host rules are
//! in `target.rs`, the chunked coding in `chunked.rs`.
//!
//! A request's head lives in two buffers that the connection keeps from one request to
//! the next: the target (the normalized path, then the query) and [`Headers`] (names
//! and values back to back, with the offsets between them). Parsing a keep-alive
//! connection's next request overwrites them in place: no allocation per request
//! (BENCHMARKS.md, "Where a request's time goes").
//!
//! What a handler reads from a request beyond its head: path parameters
//! ([`Request::param`]), the query string as a typed struct ([`Request::query`]) and a
//! JSON body ([`Request::json`]); each refuses a request that does not fit with the
//! response that says what to send instead (400, 415).

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::str::FromStr;

use serde::de::DeserializeOwned;

use crate::config::HttpLimits;
use crate::http::extensions::Extensions;
use crate::http::problem::{echo, is_json, Location, Problem};
use crate::http::router::Params;
use crate::http::{form, target, HttpError, Response};

/// Bytes of a target that [`Request::line_into`] copies in place, not to the heap: most
/// targets are shorter (TechEmpower's longest, `/queries?queries=500`, is 21).
const LINE_INLINE: usize = 128;

/// A request's line, copied out of it into a box the connection keeps
/// ([`Request::line_into`]).
pub(crate) struct RequestLine {
    method: Cow<'static, str>,
    minor_version: u8,
    path_len: usize,
    target: LineTarget,
    /// What a problem answer needs of the headers: the request id and `Accept`.
    id: Option<String>,
    wants_json: bool,
}

enum LineTarget {
    Inline(u8, [u8; LINE_INLINE]),
    Heap(String),
}

impl LineTarget {
    /// This copy made a copy of `target`, over the bytes it held when it fits.
    fn set(&mut self, target: &str) {
        match u8::try_from(target.len()) {
            Ok(n) if usize::from(n) <= LINE_INLINE => {
                if let LineTarget::Heap(_) = self {
                    *self = LineTarget::Inline(0, [0; LINE_INLINE]);
                }
                if let LineTarget::Inline(len, bytes) = self {
                    bytes[..target.len()].copy_from_slice(target.as_bytes());
                    *len = n;
                }
            }
            _ => *self = LineTarget::Heap(target.to_owned()),
        }
    }
}

impl RequestLine {
    /// A line of nothing yet, for [`Request::line_into`] to write.
    fn empty() -> RequestLine {
        RequestLine {
            method: Cow::Borrowed(""),
            minor_version: 0,
            path_len: 0,
            target: LineTarget::Inline(0, [0; LINE_INLINE]),
            id: None,
            wants_json: false,
        }
    }

    /// A request of this line alone (no headers, no body), boxed: for a job that did
    /// not give its request back. Borrowed, out of line and cold, so that the frame
    /// of the dispatch that calls it (on the connection's stack) holds no `Request`
    /// for this rare case.
    #[cold]
    #[inline(never)]
    pub(crate) fn to_request(&self) -> Box<Request> {
        let target = match &self.target {
            // Bytes copied whole from a `String`: valid UTF-8, so nothing is replaced.
            LineTarget::Inline(len, bytes) => {
                String::from_utf8_lossy(&bytes[..usize::from(*len)]).into_owned()
            }
            LineTarget::Heap(target) => target.clone(),
        };
        Box::new(Request {
            method: self.method.clone(),
            minor_version: self.minor_version,
            target,
            path_len: self.path_len,
            id: self.id.clone(),
            wants_json: self.wants_json,
            ..Request::default()
        })
    }
}

/// One request, fully read (head and body).
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// `GET`, `POST`, ... as sent (the common methods borrowed, not allocated).
    pub method: Cow<'static, str>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// The headers, names lower-cased, in the order sent.
    pub headers: Headers,
    /// The body (from `Content-Length` or the chunked coding).
    pub body: Vec<u8>,
    /// The normalized path, then the raw query: [`Request::path`], [`Request::query_string`].
    target: String,
    /// Where the path ends in `target`.
    path_len: usize,
    /// The matched route's parameters (set by the router).
    pub(crate) params: Params,
    /// The context of the connection's last request that needed one (a route on the
    /// carrier without a limit leaves it as it was), for its next one
    /// ([`Context::renewed`](fiber_pool::Context::renewed)): kept with the buffers a
    /// connection reuses, so a request's context costs no allocation while nobody
    /// else holds the last one.
    pub(crate) context: Option<fiber_pool::Context>,
    /// The request's id (`App::request_ids`), set before its layers run.
    pub(crate) id: Option<String>,
    /// Set on a request rebuilt from its line ([`RequestLine::to_request`]), whose
    /// headers are gone: whether they asked for JSON.
    wants_json: bool,
    extensions: Extensions,
}

impl Request {
    /// Build a `GET` request by hand, for tests and for calling handlers directly.
    pub fn get(target: &str) -> Request {
        Request::new("GET", target)
    }

    /// Build a request by hand: `method` and `target` (a path, then `?` and a query),
    /// taken as sent (no normalization).
    pub fn new(method: &str, target: &str) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method_name(method),
            minor_version: 1,
            target: format!("{path}{query}"),
            path_len: path.len(),
            ..Request::default()
        }
    }

    /// The request line alone (method, version, target), for what must still name
    /// the request after the request itself is gone (moved into a job that did not
    /// give it back), written into `slot`, whose box the connection keeps from
    /// request to request. Made for every request that runs on a fiber: a kept box is
    /// written in place (the target's bytes over the last ones, nothing zeroed and
    /// nothing moved), and nothing is allocated for a common method and a target of
    /// up to [`LINE_INLINE`] bytes. The copy is on the heap, in none of the frames
    /// under the request's run on the connection's stack, whose every page a
    /// kept-alive connection keeps resident; out of line, so that no line is in a
    /// caller's frame either.
    #[inline(never)]
    pub(crate) fn line_into<'s>(&self, slot: &'s mut Option<Box<RequestLine>>) -> &'s RequestLine {
        let kept = slot.get_or_insert_with(|| Box::new(RequestLine::empty()));
        kept.method.clone_from(&self.method);
        kept.minor_version = self.minor_version;
        kept.path_len = self.path_len;
        kept.target.set(&self.target);
        kept.id.clone_from(&self.id);
        kept.wants_json = self.wants_json();
        kept
    }

    /// The request's id, when the app gives requests ids (`App::request_ids`): the
    /// client's own, or one made for it. The same id is in the response's header and
    /// in the access and 5xx log lines.
    pub fn request_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// What layers put on the request for the handler ([`Extensions`]).
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The request's extensions, to put a value on it.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// Whether the client's `Accept` asks for JSON: the framework's own answers are
    /// then `application/problem+json` ([`Problem`]).
    pub(crate) fn wants_json(&self) -> bool {
        self.wants_json
            || self.headers.sent(ACCEPT_BIT)
                && self
                    .headers
                    .get_all("accept")
                    .any(crate::http::problem::accepts_json)
    }

    /// The raw text of path parameter `name` (`{id}` in `/todos/{id}`), escapes as
    /// sent; `None` when the matched route has no such parameter.
    pub fn param_text(&self, name: &str) -> Option<&str> {
        self.params.get(self.path(), name)
    }

    /// Path parameter `name`, its escapes decoded, parsed as a `T`
    /// (`req.param::<u64>("id")?`). A value that does not parse is a 400 naming the
    /// parameter, its value and the type expected; a name the route does not have is a
    /// 500 (the handler and its pattern disagree).
    pub fn param<T: FromStr>(&self, name: &str) -> Result<T, Response> {
        let Some(raw) = self.param_text(name) else {
            return Err(
                Problem::new(500, "handler-failed", "the request could not be handled")
                    .with_internal(format!(
                        "the route for {} has no path parameter '{name}': its pattern and \
                     handler disagree",
                        echo(self.path())
                    ))
                    .into(),
            );
        };
        let decoded = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
        decoded.parse().map_err(|_| {
            Problem::new(
                400,
                "invalid-parameter",
                format!(
                    "path parameter '{}': '{}' is not a {}",
                    echo(name),
                    echo(&decoded),
                    short_type_name::<T>()
                ),
            )
            .with_field(name, Location::Path)
            .into()
        })
    }

    /// The query string as a `T` through serde (`#[derive(Deserialize)] struct Page
    /// { limit: Option<u32> }`); a field that is missing or does not parse is a 400
    /// naming it and the value sent.
    pub fn query<T: DeserializeOwned>(&self) -> Result<T, Response> {
        form::from_query(self.query_string()).map_err(|e| {
            let problem = Problem::new(400, "invalid-query", e.to_string());
            match e.field() {
                Some(field) => problem.with_field(field, Location::Query),
                None => problem,
            }
            .into()
        })
    }

    /// The body as JSON of type `T`. Without a JSON `Content-Type`
    /// (`application/json`, or any `application/...+json`) it is a 415; a body that is
    /// not JSON is a 400 with the line and column its parser stopped at; JSON that does
    /// not fit `T` (a missing field, a wrong type) is a 422 naming the field by its path
    /// (`tags[2].name`), as data in the JSON form of the problem. A body over the
    /// server's limit never gets here: it is a 413 before the handler runs
    /// (`HttpLimits::max_body_bytes`).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Response> {
        let media = self.header("content-type").unwrap_or("");
        if !is_json(media) {
            let sent = if media.is_empty() {
                "no Content-Type".to_string()
            } else {
                format!("Content-Type '{}'", echo(media))
            };
            return Err(Problem::new(
                415,
                "unsupported-media-type",
                format!(
                    "the body must be JSON: send it with Content-Type: application/json \
                     ({sent} was sent)"
                ),
            )
            .with_field("content-type", Location::Header)
            .into());
        }
        let mut de = serde_json::Deserializer::from_slice(&self.body);
        serde_path_to_error::deserialize(&mut de).map_err(|e| json_problem(&e, &self.body).into())
    }

    /// The same request with one more header (name lower-cased, value trimmed).
    pub fn with_header(mut self, name: &str, value: &str) -> Request {
        self.headers.push(name, value);
        self
    }

    /// The path, without the query string, normalized (`target.rs`): unreserved
    /// escapes decoded, other escapes as sent, one trailing slash dropped; `*` for
    /// `OPTIONS *`.
    pub fn path(&self) -> &str {
        &self.target[..self.path_len]
    }

    /// The raw query string (after `?`), empty if none.
    pub fn query_string(&self) -> &str {
        &self.target[self.path_len..]
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// The first value of query parameter `name`, form-decoded (`+` is a space).
    pub fn query_param(&self, name: &str) -> Option<String> {
        crate::http::query::query_param(self.query_string(), name)
    }

    /// Whether the client waits for `100 Continue` before it sends the body.
    pub(crate) fn expects_continue(&self) -> bool {
        self.minor_version >= 1
            && self.headers.sent(EXPECT_BIT)
            && self
                .header("expect")
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }

    /// Whether the client asked to keep the connection open after this request:
    /// HTTP/1.1 keeps it unless `Connection: close`; HTTP/1.0 closes it unless
    /// `Connection: keep-alive`.
    pub(crate) fn wants_keep_alive(&self) -> bool {
        if !self.headers.sent(CONNECTION_BIT) {
            return self.minor_version >= 1;
        }
        let tokens = |want: &str| {
            self.headers
                .get_all("connection")
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case(want))
        };
        if self.minor_version >= 1 {
            !tokens("close")
        } else {
            tokens("keep-alive")
        }
    }
}

/// The problem for a JSON body that did not deserialize: 400 for text that is not
/// JSON, 422 for JSON of another shape, naming the field.
fn json_problem(e: &serde_path_to_error::Error<serde_json::Error>, body: &[u8]) -> Problem {
    let inner = e.inner();
    let (line, column) = (inner.line(), inner.column());
    match inner.classify() {
        serde_json::error::Category::Data => {
            // serde names a missing field in its message, at the path of its parent.
            let message = inner.to_string();
            let parent = e.path().to_string();
            let missing = message
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next());
            let field = match (missing, parent.as_str()) {
                (Some(name), ".") => name.to_string(),
                (Some(name), parent) => format!("{parent}.{name}"),
                (None, path) => path.to_string(),
            };
            let why = match missing {
                Some(_) => " is missing".to_string(),
                None => format!(
                    ": {}",
                    echo(message.split(" at line ").next().unwrap_or(&message))
                ),
            };
            Problem::new(
                422,
                "unprocessable-json",
                format!(
                    "the JSON body does not fit this route: field '{}'{why}",
                    echo(&field)
                ),
            )
            .with_field(&field, Location::Body)
            .with_position(line, column)
        }
        serde_json::error::Category::Eof if body.is_empty() => Problem::new(
            400,
            "invalid-json",
            "the JSON body is empty: send a JSON document",
        ),
        _ => Problem::new(
            400,
            "invalid-json",
            format!("the body is not valid JSON: at line {line} column {column}"),
        )
        .with_position(line, column),
    }
}

/// The last part of `T`'s name (`u64`, `Uuid`), for messages a client reads.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

/// A request's headers in one buffer: each name (lower-cased, as HTTP names are
/// case-insensitive) followed by its value (trimmed), with where each ends.
#[derive(Clone, Debug, Default)]
pub struct Headers {
    text: String,
    /// Per header, where its name starts, where it ends (and its value starts) and
    /// where its value ends in `text`.
    spans: Vec<(usize, usize, usize)>,
    /// Which of the [`FRAMING`] headers are present, one bit each: the parser and
    /// the connection ask for each of them on every request, and most requests send
    /// none but Host, so a lookup of an absent one answers without a scan.
    present: u8,
    /// How many Host headers there are (up to 255), and the index in `spans` of the
    /// first: every request's head is checked for exactly one, and finds it here
    /// without a scan.
    hosts: u8,
    first_host: usize,
}

/// [`Headers::present`]'s bits, in [`FRAMING`]'s order.
const HOST_BIT: u8 = 1;
const CONTENT_LENGTH_BIT: u8 = 1 << 1;
const TRANSFER_ENCODING_BIT: u8 = 1 << 2;
const CONNECTION_BIT: u8 = 1 << 3;
const EXPECT_BIT: u8 = 1 << 4;
const ACCEPT_BIT: u8 = 1 << 5;

/// The headers every request is asked about (framing, Host, persistence, 100-continue,
/// and Accept, which a problem answer reads).
const FRAMING: [&str; 6] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "expect",
    "accept",
];

/// The bit of `name` (any case) in [`Headers::present`], or 0 for another header.
/// The server's own lookups name headers in lower case: an exact match is tried
/// first, as it costs less than one that ignores case.
fn framing_bit(name: &str) -> u8 {
    match framing_candidate(name.as_bytes()) {
        Some(i) if FRAMING[i] == name || FRAMING[i].eq_ignore_ascii_case(name) => 1 << i,
        _ => 0,
    }
}

/// [`framing_bit`] of a name already in lower case (a pushed header's): a plain
/// comparison, cheaper than one that ignores case.
fn framing_bit_lower(name: &[u8]) -> u8 {
    match framing_candidate(name) {
        Some(i) if FRAMING[i].as_bytes() == name => 1 << i,
        _ => 0,
    }
}

/// The one [`FRAMING`] name that `name` could be. The length picks it: the names
/// differ in it, but for `expect` and `accept`, which differ in their first letter.
fn framing_candidate(name: &[u8]) -> Option<usize> {
    match (name.len(), name.first()) {
        (4, _) => Some(0),
        (14, _) => Some(1),
        (17, _) => Some(2),
        (10, _) => Some(3),
        (6, Some(b'e' | b'E')) => Some(4),
        (6, _) => Some(5),
        _ => None,
    }
}

impl Headers {
    /// The first value of header `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        Self::named(&self.text, self.candidates(name))
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every value of header `name` (any case), in the order sent.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + Clone + 'a {
        Self::named(&self.text, self.candidates(name))
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The spans to look through for `name`: none when it is a [`FRAMING`] header
    /// that was not sent.
    fn candidates(&self, name: &str) -> &[(usize, usize, usize)] {
        let bit = framing_bit(name);
        if bit != 0 && self.present & bit == 0 {
            &[]
        } else {
            &self.spans
        }
    }

    /// Every header as (lower-cased name, value), in the order sent.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone + '_ {
        Self::named(&self.text, &self.spans)
    }

    /// The headers of `spans` in `text` as (name, value).
    fn named<'a>(
        text: &'a str,
        spans: &'a [(usize, usize, usize)],
    ) -> impl Iterator<Item = (&'a str, &'a str)> + Clone + 'a {
        spans.iter().map(move |&(start, name_end, value_end)| {
            (&text[start..name_end], &text[name_end..value_end])
        })
    }

    /// How many headers there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Add header `name` (lower-cased here) with `value`, the spaces, tabs and line
    /// ends around it trimmed here, as the parser trims a value sent (RFC 9110's
    /// optional whitespace). Other whitespace is part of the value: `5\u{a0}` is no
    /// Content-Length, and a request that sends it is refused.
    pub fn push(&mut self, name: &str, value: &str) {
        self.push_trimmed(name, value.trim_matches([' ', '\t', '\r', '\n']));
    }

    /// [`push`](Self::push) of a value with nothing to trim around it: the parser's,
    /// which httparse trimmed of spaces and tabs (and of line ends after it).
    pub(crate) fn push_trimmed(&mut self, name: &str, value: &str) {
        let start = self.text.len();
        self.text.push_str(name);
        self.text[start..].make_ascii_lowercase();
        let name_end = self.text.len();
        self.text.push_str(value);
        let bit = framing_bit_lower(&self.text.as_bytes()[start..name_end]);
        self.note(bit, (start, name_end, self.text.len()));
    }

    /// Replace the headers with those httparse `sent`, checking that every value is
    /// UTF-8 in one pass over them all, not one per value (a short value's own check
    /// costs more than the bytes it looks at). Names are tokens, so ASCII. On a value
    /// that is not UTF-8, only the headers before it are kept and its header's name is
    /// returned; a head that sends one is refused.
    pub(crate) fn fill_parsed<'s>(&mut self, sent: &[httparse::Header<'s>]) -> Result<(), &'s str> {
        self.clear();
        let mut text = std::mem::take(&mut self.text).into_bytes();
        for h in sent {
            self.push_bytes(&mut text, h.name, h.value);
        }
        match String::from_utf8(text) {
            Ok(text) => {
                self.text = text;
                Ok(())
            }
            Err(e) => {
                // The headers before the bad one stay, as a refusal may read them
                // (Accept).
                let bad = e.utf8_error().valid_up_to();
                let at = self.spans.iter().position(|&(_, _, end)| bad < end);
                let before = &sent[..at.unwrap_or(0)];
                let mut text = e.into_bytes();
                text.clear();
                self.clear();
                for h in before {
                    self.push_bytes(&mut text, h.name, h.value);
                }
                self.text = String::from_utf8(text).unwrap_or_default();
                Err(at.map_or("", |i| sent[i].name))
            }
        }
    }

    /// Append `name` (lower-cased here) and `value` to `text`, the buffer taken out
    /// of `self.text`.
    fn push_bytes(&mut self, text: &mut Vec<u8>, name: &str, value: &[u8]) {
        let start = text.len();
        text.extend_from_slice(name.as_bytes());
        text[start..].make_ascii_lowercase();
        let name_end = text.len();
        text.extend_from_slice(value);
        self.note(
            framing_bit_lower(&text[start..name_end]),
            (start, name_end, text.len()),
        );
    }

    /// Record a header just appended at `span`, and its [`FRAMING`] `bit` (0 for
    /// another header).
    fn note(&mut self, bit: u8, span: (usize, usize, usize)) {
        self.present |= bit;
        if bit == HOST_BIT {
            if self.hosts == 0 {
                self.first_host = self.spans.len();
            }
            self.hosts = self.hosts.saturating_add(1);
        }
        self.spans.push(span);
    }

    /// Whether a [`FRAMING`] header of `bit` was sent: the server's own question on
    /// every request, answered without a lookup by name.
    fn sent(&self, bit: u8) -> bool {
        self.present & bit != 0
    }

    /// The value of the Host header when there is exactly one.
    pub(crate) fn only_host(&self) -> Option<&str> {
        if self.hosts != 1 {
            return None;
        }
        let (_, name_end, value_end) = self.spans[self.first_host];
        Some(&self.text[name_end..value_end])
    }

    /// Remove every header named `name` (any case). Their bytes stay in the buffer
    /// until the next request reuses it.
    pub fn remove(&mut self, name: &str) {
        let text = &self.text;
        self.spans
            .retain(|&(start, end, _)| !text[start..end].eq_ignore_ascii_case(name));
        let bit = framing_bit(name);
        if bit != 0 {
            self.present &= !bit;
        }
        if bit == HOST_BIT {
            self.hosts = 0;
        } else if self.hosts > 0 {
            // The spans before it may have gone.
            let text = &self.text;
            self.first_host = self
                .spans
                .iter()
                .position(|&(start, end, _)| &text[start..end] == "host")
                .unwrap_or_default();
        }
    }

    /// Remove every header, keeping the buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
        self.present = 0;
        self.hosts = 0;
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

/// What parsing a head found besides the request itself.
#[derive(Debug)]
pub struct Head {
    /// Bytes the head took in the buffer.
    pub head_len: usize,
    /// How the body that follows it is framed.
    pub framing: Framing,
}

/// Parse a request head from the start of `buf` into `req` (its buffers reused; its
/// body emptied).
///
/// `Ok(None)` means more bytes are needed (and the head is still within limits).
///
/// In two steps, so that the header array of the first (`parse_raw`, its own frame)
/// is off the stack before the target is normalized (`finish`): run one after the
/// other instead of nested, they keep the deepest point of reading a request within
/// the connection coroutine's top stack page (`scripts/profile-hello stack` prints the
/// words each connection used; BENCHMARKS.md, "Where a request's time goes").
pub fn parse_head(
    buf: &[u8],
    limits: &HttpLimits,
    req: &mut Request,
) -> Result<Option<Head>, HttpError> {
    match parse_raw(buf, limits, &mut req.headers)? {
        Some(raw) => finish(raw, limits, req).map(Some),
        None => Ok(None),
    }
}

/// A complete head as httparse saw it: what borrows the buffer (the headers are
/// already copied into the request's [`Headers`]).
struct RawHead<'b> {
    method: &'b str,
    target: &'b str,
    minor_version: u8,
    /// A header that is not UTF-8 is reported after the target's errors, as it was
    /// when both were checked in one pass.
    headers: Result<(), HttpError>,
    head_len: usize,
}

/// The first step of [`parse_head`]. Most heads have a few headers: parse into a
/// small array on the stack first, and only a head with more is parsed again with
/// room for `max_headers` (a 2 KiB allocation and its zeroing per request were 15%
/// of /hello's instructions). Never inlined: the array must leave the stack with it.
#[inline(never)]
fn parse_raw<'b>(
    buf: &'b [u8],
    limits: &HttpLimits,
    out: &mut Headers,
) -> Result<Option<RawHead<'b>>, HttpError> {
    // Left unwritten: httparse writes each slot before it hands it back, and zeroing
    // 16 headers cost more than a short head's parse of them.
    let mut few = [const { MaybeUninit::uninit() }; FEW_HEADERS];
    let room = FEW_HEADERS.min(limits.max_headers);
    match parse_into(buf, limits, &mut few[..room], out) {
        Err(HttpError::TooManyHeaders { .. }) if limits.max_headers > room => {
            let mut many = Vec::with_capacity(limits.max_headers);
            many.resize_with(limits.max_headers, MaybeUninit::uninit);
            parse_into(buf, limits, &mut many, out)
        }
        other => other,
    }
}

/// Headers the first parse of a head has room for (on the carrier's stack).
const FEW_HEADERS: usize = 16;

/// [`parse_raw`] with room for `headers.len()` headers; a complete head's headers
/// replace those in `out`.
fn parse_into<'b>(
    buf: &'b [u8],
    limits: &HttpLimits,
    headers: &mut [MaybeUninit<httparse::Header<'b>>],
    out: &mut Headers,
) -> Result<Option<RawHead<'b>>, HttpError> {
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, headers) {
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
    let utf8 = out
        .fill_parsed(req.headers)
        .map_err(|name| HttpError::Malformed(format!("header '{name}' is not valid UTF-8")));
    // httparse fills these three on Complete.
    Ok(Some(RawHead {
        method: req.method.unwrap_or_default(),
        target: req.path.unwrap_or_default(),
        minor_version: req.version.unwrap_or(1),
        headers: utf8,
        head_len,
    }))
}

/// The second step of [`parse_head`]: the target, the Host rule and the framing.
/// Never inlined either, so that `parse_head`'s own frame stays small.
#[inline(never)]
fn finish(raw: RawHead<'_>, limits: &HttpLimits, req: &mut Request) -> Result<Head, HttpError> {
    req.method = method_name(raw.method);
    req.minor_version = raw.minor_version;
    req.body = Vec::new();
    req.params.clear();
    req.id = None;
    req.extensions.clear();
    req.path_len = target::parse_into(&req.method, raw.target, &mut req.target)?;
    raw.headers?;
    match req.headers.only_host() {
        // The usual: one Host, of which only the value is left to check.
        Some(host) => target::check_host(raw.minor_version, [host])?,
        None => target::check_host(raw.minor_version, req.headers.get_all("host"))?,
    }
    let framing = framing(req, limits)?;
    Ok(Head {
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
    // GET is most requests: compared first, without a search.
    if sent.as_bytes() == b"GET" {
        return Cow::Borrowed(KNOWN_METHODS[0]);
    }
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
    if !req.headers.sent(TRANSFER_ENCODING_BIT) {
        return content_length(req, limits);
    }
    let codings: Vec<&str> = req
        .headers
        .get_all("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
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
    match codings.iter().rposition(chunked) {
        Some(last) if last + 1 == codings.len() && codings.len() == 1 => Ok(Framing::Chunked),
        Some(last) if last + 1 == codings.len() && !codings[..last].iter().any(chunked) => {
            Err(HttpError::UnsupportedTransferEncoding(te))
        }
        _ => Err(HttpError::Malformed(format!(
            "Transfer-Encoding '{te}' must end in chunked, once: the body's end is unknown"
        ))),
    }
}

/// The framing of a request without Transfer-Encoding: its Content-Length, if any.
fn content_length(req: &Request, limits: &HttpLimits) -> Result<Framing, HttpError> {
    if !req.headers.sent(CONTENT_LENGTH_BIT) {
        return Ok(Framing::Length(0));
    }
    let mut lengths = req.headers.get_all("content-length");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits::default()
    }

    /// [`parse_head`] into a fresh request.
    fn parse_head(raw: &[u8], limits: &HttpLimits) -> Result<Option<(Request, Head)>, HttpError> {
        let mut req = Request::default();
        Ok(super::parse_head(raw, limits, &mut req)?.map(|head| (req, head)))
    }

    #[test]
    fn a_complete_head_parses_with_query_and_headers() {
        let raw = b"GET http://x/widgets/?sleep=0.25&q=rails+3 HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n";
        let (req, head) = parse_head(raw, &limits()).unwrap().unwrap();
        assert_eq!(head.head_len, raw.len());
        assert_eq!(req.path(), "/widgets");
        assert_eq!(req.query_string(), "sleep=0.25&q=rails+3");
        assert_eq!(req.query_param("sleep").as_deref(), Some("0.25"));
        assert_eq!(req.query_param("q").as_deref(), Some("rails 3"));
        assert!(!req.wants_keep_alive());
        let headers: Vec<_> = req.headers.iter().collect();
        assert_eq!(headers, [("host", "x"), ("connection", "Close")]);
        assert_eq!(req.header("CONNECTION"), Some("Close"));
        assert_eq!(req.headers.get_all("host").count(), 1);
    }

    /// Header values are checked for UTF-8 together: a head whose values all are
    /// parses, non-ASCII text included, and one that sends a value that is not is
    /// refused naming that header, the headers before it kept for the refusal.
    #[test]
    fn a_value_that_is_not_utf8_is_refused_by_name() {
        let raw = "GET / HTTP/1.1\r\nHost: x\r\nX-City: Zürich\r\nX-Word: 日本\r\n\r\n";
        let (req, _) = parse_head(raw.as_bytes(), &limits()).unwrap().unwrap();
        assert_eq!(req.header("x-city"), Some("Zürich"));
        assert_eq!(req.header("x-word"), Some("日本"));
        let raw = b"GET / HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\nX-City: Z\xfcrich\r\nX-After: 1\r\n\r\n";
        let mut req = Request::default();
        match super::parse_head(raw, &limits(), &mut req) {
            Err(HttpError::Malformed(e)) => assert_eq!(e, "header 'X-City' is not valid UTF-8"),
            other => panic!("{other:?}"),
        }
        let kept: Vec<_> = req.headers.iter().collect();
        assert_eq!(kept, [("host", "x"), ("accept", "text/plain")]);
        // The buffer is whole again for the connection's next head.
        let next = b"GET / HTTP/1.1\r\nHost: y\r\n\r\n";
        super::parse_head(next, &limits(), &mut req)
            .unwrap()
            .unwrap();
        assert_eq!(req.headers.iter().collect::<Vec<_>>(), [("host", "y")]);
    }

    /// Only a value's optional whitespace (spaces and tabs) is trimmed, whether it was
    /// sent or pushed: any other whitespace is part of it, so a framing header or a
    /// Host that carries one is refused, never read as the value without it.
    #[test]
    fn only_spaces_and_tabs_are_trimmed_from_a_value() {
        let mut headers = Headers::default();
        headers.push("X-A", " \t a b \t\r\n");
        headers.push("X-B", "\u{a0}b\u{3000}");
        assert_eq!(headers.get("x-a"), Some("a b"));
        assert_eq!(headers.get("x-b"), Some("\u{a0}b\u{3000}"));
        let sent = "GET / HTTP/1.1\r\nHost: a\r\nX-B: \u{a0}b\u{3000}\r\n\r\n";
        let (req, _) = parse_head(sent.as_bytes(), &limits()).unwrap().unwrap();
        assert_eq!(req.header("x-b"), headers.get("x-b"), "sent as pushed");
        for (head, says) in [
            ("Host: a\u{a0}", "is not a host[:port]"),
            (
                "Host: a\r\nContent-Length: 5\u{a0}",
                "is not a number of bytes",
            ),
            (
                "Host: a\r\nContent-Length: 5\r\nContent-Length: 5\u{85}",
                "conflicting",
            ),
        ] {
            let raw = format!("POST / HTTP/1.1\r\n{head}\r\n\r\n");
            let err = parse_head(raw.as_bytes(), &limits())
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{head:?}: {err}");
        }
    }

    #[test]
    fn the_only_host_is_kept_track_of_through_pushes_and_removals() {
        let mut headers = Headers::default();
        assert_eq!(headers.only_host(), None, "none");
        headers.push("Accept", "*/*");
        headers.push("HOST", " a:1 ");
        assert_eq!(headers.only_host(), Some("a:1"));
        headers.push("X-Other", "x");
        headers.remove("accept");
        assert_eq!(headers.only_host(), Some("a:1"), "its index moved");
        headers.push("host", "b");
        assert_eq!(headers.only_host(), None, "two");
        headers.remove("Host");
        assert_eq!(headers.only_host(), None, "removed");
        headers.push("host", "c");
        assert_eq!(headers.only_host(), Some("c"));
        headers.clear();
        assert_eq!(headers.only_host(), None, "cleared");
        // The parser's count decides what the request is told.
        let two = b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n";
        let err = parse_head(two, &limits()).unwrap_err().to_string();
        assert!(
            err.contains("exactly one Host header, this one has 2"),
            "{err}"
        );
        let bad = b"GET / HTTP/1.1\r\nX: y\r\nHost: a b\r\n\r\n";
        let err = parse_head(bad, &limits()).unwrap_err().to_string();
        assert!(err.contains("'a b' is not a host[:port]"), "{err}");
    }

    #[test]
    fn framing_headers_are_found_in_any_case_and_absent_ones_without_a_scan() {
        for (i, name) in FRAMING.iter().enumerate() {
            assert_eq!(framing_bit(name), 1 << i, "{name}");
            assert_eq!(framing_bit(&name.to_ascii_uppercase()), 1 << i, "{name}");
            assert_eq!(framing_bit_lower(name.as_bytes()), 1 << i, "{name}");
        }
        for other in [
            "hosts",
            "x-host",
            "content-type",
            "accepts",
            "expectx",
            "hozt",
        ] {
            assert_eq!(framing_bit(other), 0, "{other}");
            assert_eq!(framing_bit_lower(other.as_bytes()), 0, "{other}");
        }
        assert_eq!((framing_bit(""), framing_bit_lower(b"")), (0, 0));
        let bits = [
            ("host", HOST_BIT),
            ("content-length", CONTENT_LENGTH_BIT),
            ("transfer-encoding", TRANSFER_ENCODING_BIT),
            ("connection", CONNECTION_BIT),
            ("expect", EXPECT_BIT),
            ("accept", ACCEPT_BIT),
        ];
        for (name, bit) in bits {
            assert_eq!(framing_bit(name), bit, "{name}");
        }
        let mut headers = Headers::default();
        headers.push("Content-LENGTH", "5");
        headers.push("X-Other", "y");
        assert_eq!(headers.get("content-length"), Some("5"));
        assert_eq!(headers.get("CONTENT-length"), Some("5"));
        assert_eq!(headers.get("x-other"), Some("y"));
        assert_eq!(headers.get("transfer-encoding"), None);
        // The bits are cleared with the headers: a reused buffer forgets them.
        headers.clear();
        headers.push("Host", "x");
        assert_eq!(headers.get("content-length"), None);
        assert_eq!(headers.get_all("host").collect::<Vec<_>>(), ["x"]);
    }

    #[test]
    fn keep_alive_defaults_differ_between_1_0_and_1_1() {
        let p = |raw: &[u8]| parse_head(raw, &limits()).unwrap().unwrap().0;
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
        assert_eq!(chunked.unwrap().unwrap().1.framing, Framing::Chunked);
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
    fn a_kept_line_holds_only_the_latest_request() {
        let long = format!("/{}", "x".repeat(LINE_INLINE + 10));
        let mut kept = None;
        for target in ["/queries?queries=20", "/db", long.as_str(), "/hello?a=1"] {
            let mut req = Request::new("POST", target);
            req.id = Some(format!("id-{target}"));
            req.line_into(&mut kept);
            let back = kept.as_ref().unwrap().to_request();
            assert_eq!(
                (back.method.as_ref(), back.target.as_str(), back.path_len),
                ("POST", req.target.as_str(), req.path_len),
            );
            assert_eq!(back.id, req.id);
            let inline = matches!(kept.as_ref().unwrap().target, LineTarget::Inline(..));
            assert_eq!(inline, target.len() <= LINE_INLINE, "{target}");
        }
    }

    #[test]
    fn a_reused_request_holds_only_the_latest_head() {
        let l = limits();
        let mut req = Request::default();
        let first = b"POST /a/?x=1 HTTP/1.1\r\nHost: one\r\nX-Long-Header:  v  \r\n\r\n";
        super::parse_head(first, &l, &mut req).unwrap().unwrap();
        assert_eq!((req.path(), req.query_string()), ("/a", "x=1"));
        assert_eq!(req.header("x-long-header"), Some("v"));
        req.body = b"body".to_vec();
        let second = b"GET /b HTTP/1.0\r\n\r\n";
        let head = super::parse_head(second, &l, &mut req).unwrap().unwrap();
        assert_eq!(head.head_len, second.len());
        assert_eq!(
            (&*req.method, req.path(), req.query_string()),
            ("GET", "/b", "")
        );
        assert_eq!(req.minor_version, 0);
        assert!(req.headers.is_empty() && req.body.is_empty());
        let by_hand = Request::get("/c?d=e").with_header("Content-Type", " text/plain ");
        assert_eq!((by_hand.path(), by_hand.query_string()), ("/c", "d=e"));
        assert_eq!(by_hand.header("content-type"), Some("text/plain"));
    }

    #[test]
    fn parameters_are_decoded_and_parsed_or_refused_by_name() {
        use crate::http::router::Router;
        let router = Router::new().get("/todos/{id}/{slug}", "t", ());
        let mut req = Request::get("/todos/42/a%20b");
        router
            .resolve("GET", "/todos/42/a%20b", &mut req.params)
            .unwrap();
        assert_eq!(req.param::<u64>("id").unwrap(), 42);
        assert_eq!(req.param::<String>("slug").unwrap(), "a b");
        assert_eq!(req.param_text("slug"), Some("a%20b"));
        let mut req = Request::get("/todos/abc/x");
        router
            .resolve("GET", "/todos/abc/x", &mut req.params)
            .unwrap();
        let bad = req.param::<u64>("id").unwrap_err();
        assert_eq!(bad.status, 400);
        assert_eq!(
            String::from_utf8_lossy(&bad.body),
            "path parameter 'id': 'abc' is not a u64\n"
        );
        assert_eq!(req.param::<u64>("nope").unwrap_err().status, 500);
    }

    #[test]
    fn json_bodies_need_their_type_and_their_shape() {
        #[derive(serde::Deserialize, Debug)]
        struct New {
            title: String,
        }
        let post = |ct: Option<&str>, body: &str| {
            let mut req = Request::new("POST", "/todos");
            req.body = body.as_bytes().to_vec();
            match ct {
                Some(ct) => req.with_header("Content-Type", ct),
                None => req,
            }
        };
        let ok: New = post(Some("application/json; charset=utf-8"), r#"{"title":"x"}"#)
            .json()
            .unwrap();
        assert_eq!(ok.title, "x");
        assert!(
            post(Some("application/merge-patch+json"), r#"{"title":"y"}"#)
                .json::<New>()
                .is_ok()
        );
        let text = |r: Response| (r.status, String::from_utf8_lossy(&r.body).into_owned());
        let (status, says) = text(post(Some("text/plain"), "x").json::<New>().unwrap_err());
        assert_eq!(status, 415);
        assert!(says.contains("Content-Type: application/json") && says.contains("'text/plain'"));
        assert_eq!(post(None, "{}").json::<New>().unwrap_err().status, 415);
        let (status, says) = text(
            post(Some("application/json"), "{\"title\": 5}")
                .json::<New>()
                .unwrap_err(),
        );
        assert_eq!(status, 422);
        assert!(
            says.contains("field 'title': invalid type: integer `5`, expected a string"),
            "{says}"
        );
        let missing = post(Some("application/json"), "{}")
            .json::<New>()
            .unwrap_err();
        let problem = missing.problem().unwrap();
        assert_eq!(problem.field(), Some(("title", Location::Body)));
        let (status, says) = text(missing);
        assert_eq!(status, 422);
        assert!(says.contains("field 'title' is missing"), "{says}");
        let (status, says) = text(
            post(Some("application/json"), "{\"title\": ")
                .json::<New>()
                .unwrap_err(),
        );
        assert_eq!(status, 400);
        assert!(says.contains("is not valid JSON"), "{says}");
        let (_, says) = text(
            post(Some("application/json"), "")
                .json::<New>()
                .unwrap_err(),
        );
        assert!(says.contains("is empty"), "{says}");
    }
}
