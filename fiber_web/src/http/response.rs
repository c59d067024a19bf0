//! A response as handlers build it, and its serialization with the right
//! connection headers and a `Date` (cached per second, `date.rs`). Status lines come
//! from `status.rs`; a 1xx, 204 or 304 goes out with neither body nor Content-Length.

use std::borrow::Cow;

use std::fmt::Write as _;

use crate::http::defaults::DefaultHeaders;
use crate::http::problem::Problem;
use crate::http::status::{has_no_body, status_line};

/// A complete response: status, extra headers, body.
///
/// Both the headers and the body may be borrowed from statics: a handler that answers
/// with a fixed text and content type (`/hello`) allocates nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers besides Content-Length, Connection and Date: `Response::write_to`
    /// (the fiber server) and hyper (the twin) add those three. A list known when the
    /// server is built (a content type) is borrowed: no allocation per response.
    pub headers: HeaderList,
    /// The body (a static text is borrowed, not copied).
    pub body: Cow<'static, [u8]>,
    /// The framework's problem this response renders ([`Response::problem`]), rendered
    /// again as it leaves the router, in the form the client and the app ask for.
    pub(crate) problem: Option<Box<Problem>>,
}

/// A response's extra headers: borrowed as long as none is added.
pub type HeaderList = Cow<'static, [(&'static str, Cow<'static, str>)]>;

/// The renderings of a framework's problem ([`App::render_problems`](crate::App::render_problems)
/// picks one, or its own).
impl Problem {
    /// The default rendering: [`json_response`](Self::json_response) when the
    /// client asked for JSON, else [`text_response`](Self::text_response).
    pub fn to_response(&self) -> Response {
        if self.wants_json() {
            self.json_response()
        } else {
            self.text_response()
        }
    }

    /// `application/problem+json`: `type`, `title`, `status`, `detail`, and, where
    /// they apply, `field`, `location`, `line`, `column` and `request_id`.
    pub fn json_response(&self) -> Response {
        let mut body = serde_json::Map::new();
        body.insert("type".into(), self.type_uri().into());
        body.insert("title".into(), self.title().into());
        body.insert("status".into(), self.status().into());
        body.insert("detail".into(), self.detail().into());
        if let Some((name, location)) = self.field() {
            body.insert("field".into(), name.into());
            body.insert("location".into(), location.as_str().into());
        }
        if let Some((line, column)) = self.position() {
            body.insert("line".into(), line.into());
            body.insert("column".into(), column.into());
        }
        if let Some(id) = self.request_id() {
            body.insert("request_id".into(), id.into());
        }
        let mut resp = Response::json(self.status(), &body);
        resp.headers = Cow::Borrowed(&PROBLEM_JSON);
        resp
    }

    /// `text/plain`: the detail, then the request id on a line of its own when there
    /// is one.
    pub fn text_response(&self) -> Response {
        let mut text = String::with_capacity(self.detail().len() + 40);
        text.push_str(self.detail());
        text.push('\n');
        if let Some(id) = self.request_id() {
            let _ = writeln!(text, "request id: {id}");
        }
        Response::text(self.status(), text)
    }
}

impl From<Problem> for Response {
    fn from(problem: Problem) -> Response {
        let mut resp = problem.text_response();
        resp.problem = Some(Box::new(problem));
        resp
    }
}

static PROBLEM_JSON: [(&str, Cow<'static, str>); 1] =
    [("Content-Type", Cow::Borrowed("application/problem+json"))];

/// The header lists of the content types the constructors set.
static TEXT: [(&str, Cow<'static, str>); 1] =
    [("Content-Type", Cow::Borrowed("text/plain; charset=utf-8"))];
static HTML: [(&str, Cow<'static, str>); 1] =
    [("Content-Type", Cow::Borrowed("text/html; charset=utf-8"))];
static JSON: [(&str, Cow<'static, str>); 1] = [("Content-Type", Cow::Borrowed("application/json"))];

impl Response {
    /// `text/plain` with `body` (a `&'static str` is borrowed, not copied).
    pub fn text(status: u16, body: impl Into<Cow<'static, str>>) -> Response {
        Response::with_type(status, &TEXT, bytes(body.into()))
    }

    /// `text/html` with `body` (a `&'static str` is borrowed, not copied).
    pub fn html(status: u16, body: impl Into<Cow<'static, str>>) -> Response {
        Response::with_type(status, &HTML, bytes(body.into()))
    }

    /// `application/json` with `value` serialized compactly, as axum and serde_json
    /// write it (`jq` or a browser pretty-prints for a person; the server's CPU and the
    /// wire pay for every space). A value that cannot be serialized (a map with
    /// non-string keys, a `Serialize` impl that fails) is a 500 naming serde's reason,
    /// not a broken body.
    pub fn json(status: u16, value: &impl serde::Serialize) -> Response {
        Response::serialized(status, value, false)
    }

    /// [`Response::json`] indented two spaces a level, for a body a person reads as it
    /// comes (a debug route, a config dump).
    pub fn json_pretty(status: u16, value: &impl serde::Serialize) -> Response {
        Response::serialized(status, value, true)
    }

    /// `application/json` with `value` serialized, indented when `pretty`, or the 500
    /// it is.
    fn serialized(status: u16, value: &impl serde::Serialize, pretty: bool) -> Response {
        // Most bodies fit the first allocation; serde_json's own starts at zero.
        let mut body = Vec::with_capacity(128);
        let written = if pretty {
            serde_json::to_writer_pretty(&mut body, value)
        } else {
            serde_json::to_writer(&mut body, value)
        };
        match written {
            Ok(()) => Response::with_type(status, &JSON, Cow::Owned(body)),
            Err(e) => Problem::new(
                500,
                "handler-failed",
                "the response could not be serialized",
            )
            .with_internal(format!("the response could not be serialized: {e}"))
            .into(),
        }
    }

    /// A response with `status` and no body: `204 No Content` after a delete, a `304`,
    /// a redirect (add `Location`).
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: Cow::Borrowed(&[]),
            body: Cow::Borrowed(&[]),
            problem: None,
        }
    }

    /// `204 No Content`.
    pub fn no_content() -> Response {
        Response::empty(204)
    }

    /// A plain-text error whose body is `message` and a newline: what the client reads
    /// is what it should change.
    pub fn error(status: u16, message: impl std::fmt::Display) -> Response {
        Response::text(status, format!("{message}\n"))
    }

    fn with_type(
        status: u16,
        headers: &'static [(&'static str, Cow<'static, str>)],
        body: Cow<'static, [u8]>,
    ) -> Response {
        Response {
            status,
            headers: Cow::Borrowed(headers),
            body,
            problem: None,
        }
    }

    /// The framework's problem this response is, if it is one: a layer may read it
    /// (its kind, its field) to answer otherwise. It is rendered again, in the form
    /// the client and the app ask for, as the response leaves the router; a layer that
    /// wants its own body builds a new response rather than changing this one's.
    pub fn problem(&self) -> Option<&Problem> {
        self.problem.as_deref()
    }

    /// Add a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.to_mut().push((name, Cow::Owned(value.into())));
        self
    }

    /// Whether the response set a header named `name` (any case) itself: the server's
    /// defaults and the request id's header give way to it.
    pub(crate) fn sets_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The same response with `headers` instead of its own.
    pub(crate) fn with_headers(
        mut self,
        headers: Vec<(&'static str, Cow<'static, str>)>,
    ) -> Response {
        self.headers = Cow::Owned(headers);
        self
    }

    /// The same response with another status.
    pub fn with_status(mut self, status: u16) -> Response {
        self.status = status;
        self
    }

    /// Bytes [`Response::write_to`] writes at most: the capacity that makes it one
    /// allocation.
    pub(crate) fn wire_len(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum();
        FIXED_HEAD_BYTES + headers + self.body.len()
    }

    /// Serialize into `out` with Content-Length and Date. `keep_alive` decides the
    /// Connection header; `minor_version` is the request's (an HTTP/1.0 client gets an
    /// explicit keep-alive). Plain byte copies, no formatting machinery: this runs for
    /// every response (BENCHMARKS.md, "Where a request's time goes").
    pub(crate) fn write_to(
        &self,
        out: &mut Vec<u8>,
        minor_version: u8,
        keep_alive: bool,
        head_only: bool,
    ) {
        self.write_with(
            out,
            minor_version,
            keep_alive,
            head_only,
            DefaultHeaders::none(),
        );
    }

    /// [`Response::write_to`], then `defaults` (the server's headers for every
    /// response, `App::default_header`) after the response's own, each unless the
    /// response set a header of the same name.
    pub(crate) fn write_with(
        &self,
        out: &mut Vec<u8>,
        minor_version: u8,
        keep_alive: bool,
        head_only: bool,
        defaults: &DefaultHeaders,
    ) {
        let status = crate::http::status::on_the_wire(self.status);
        match status_line(status) {
            Some(line) => out.extend_from_slice(line.as_bytes()),
            None => {
                // No reason phrase: RFC 9112 allows an empty one, and a client reads
                // the code.
                let mut line = *b"HTTP/1.1 000 \r\n";
                put_decimal(&mut line[9..12], usize::from(status));
                out.extend_from_slice(&line);
            }
        }
        let bodiless = has_no_body(status);
        // Content-Length and Date are put together on the stack and copied once.
        let mut fixed = [0u8; LENGTH_LINE_BYTES + DATE_LINE_BYTES];
        let mut at = 0;
        if !bodiless {
            fixed[..16].copy_from_slice(b"Content-Length: ");
            at = 16 + put_decimal(&mut fixed[16..36], self.body.len());
            fixed[at..at + 2].copy_from_slice(b"\r\n");
            at += 2;
        }
        let date = &mut fixed[at..at + DATE_LINE_BYTES];
        date[..6].copy_from_slice(b"Date: ");
        date[6..6 + crate::http::date::LEN].copy_from_slice(&crate::http::date::now());
        date[DATE_LINE_BYTES - 2..].copy_from_slice(b"\r\n");
        out.extend_from_slice(&fixed[..at + DATE_LINE_BYTES]);
        for (name, value) in self.headers.iter() {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        defaults.write_into(out, |name| self.sets_header(name));
        if !keep_alive {
            out.extend_from_slice(b"Connection: close\r\n\r\n");
        } else if minor_version == 0 {
            out.extend_from_slice(b"Connection: keep-alive\r\n\r\n");
        } else {
            out.extend_from_slice(b"\r\n");
        }
        if !head_only && !bodiless {
            out.extend_from_slice(&self.body);
        }
    }
}

/// A text body as bytes, borrowed if it was.
fn bytes(text: Cow<'static, str>) -> Cow<'static, [u8]> {
    match text {
        Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
        Cow::Owned(text) => Cow::Owned(text.into_bytes()),
    }
}

/// The most bytes of a head besides the extra headers: the status line (46 bytes with
/// the longest reason, 511's), Content-Length (38 with 20 digits), Date (37), and
/// Connection with the blank line (26): 147.
const FIXED_HEAD_BYTES: usize = 160;

/// `Content-Length: `, 20 digits at most, and a line end.
const LENGTH_LINE_BYTES: usize = 16 + 20 + 2;
/// `Date: `, an IMF-fixdate and a line end.
const DATE_LINE_BYTES: usize = 6 + crate::http::date::LEN + 2;

/// `n` in decimal at the front of `to`, which has room for it (20 bytes hold any
/// `usize`); returns how many digits it took.
fn put_decimal(to: &mut [u8], n: usize) -> usize {
    let mut len = 1;
    let mut rest = n / 10;
    while rest > 0 {
        rest /= 10;
        len += 1;
    }
    let mut rest = n;
    for digit in to[..len].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_headers_follow_the_own_unless_it_set_the_name() {
        let mut defaults = DefaultHeaders::default();
        defaults.push("Server", Cow::Borrowed("app"));
        defaults.push("X-Frame-Options", Cow::Borrowed("DENY"));
        let wire = |r: Response| {
            let mut out = Vec::new();
            r.write_with(&mut out, 1, true, false, &defaults);
            String::from_utf8(out).unwrap()
        };
        let plain = wire(Response::text(200, "hi"));
        assert!(plain.contains("\r\nContent-Type: text/plain; charset=utf-8\r\nServer: app\r\nX-Frame-Options: DENY\r\n\r\nhi"), "{plain}");
        let own = wire(Response::text(200, "hi").header("server", "mine"));
        assert!(
            own.contains("\r\nserver: mine\r\n") && !own.contains("Server: app"),
            "{own}"
        );
        assert!(own.contains("X-Frame-Options: DENY"), "{own}");
    }

    #[test]
    fn json_is_compact_unless_asked_to_be_pretty() {
        let value = serde_json::json!({"a": [1, 2], "b": "c"});
        let r = Response::json(200, &value);
        assert_eq!(&*r.body, br#"{"a":[1,2],"b":"c"}"#);
        let r = Response::json_pretty(crate::status::CREATED, &value);
        let pretty = "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"c\"\n}";
        assert_eq!(std::str::from_utf8(&r.body).unwrap(), pretty);
        assert_eq!((r.status, &*r.headers[0].1), (201, "application/json"));
    }

    #[test]
    fn connection_headers_follow_the_request() {
        let r = Response::text(200, "Oh hai");
        let s = |minor, ka| {
            let mut out = Vec::new();
            r.write_to(&mut out, minor, ka, false);
            String::from_utf8(out).unwrap()
        };
        assert!(s(1, true).starts_with("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nDate: "));
        let date = s(1, true)[42..].split("\r\n").next().unwrap().to_string();
        assert_eq!(date.len(), crate::http::date::LEN, "{date}");
        assert!(date.ends_with(" GMT"), "{date}");
        assert!(!s(1, true).contains("Connection"));
        assert!(s(1, false).contains("Connection: close\r\n"));
        assert!(s(0, true).contains("Connection: keep-alive\r\n"));
        assert!(s(0, true).ends_with("\r\n\r\nOh hai"));
    }

    #[test]
    fn lengths_are_written_in_decimal_and_fit_the_estimate() {
        for len in [0, 7, 10, 99, 1000, 123_456] {
            let r = Response::text(200, "x".repeat(len)).header("Retry-After", "1");
            let mut out = Vec::new();
            r.write_to(&mut out, 0, true, false);
            let s = String::from_utf8(out.clone()).unwrap();
            assert!(s.contains(&format!("\r\nContent-Length: {len}\r\n")), "{s}");
            assert!(
                out.len() <= r.wire_len(),
                "{} > {}",
                out.len(),
                r.wire_len()
            );
        }
        let mut out = Vec::new();
        Response::error(505, "x").write_to(&mut out, 1, false, false);
        assert!(out.starts_with(b"HTTP/1.1 505 HTTP Version Not Supported\r\n"));
        out.clear();
        Response::error(299, "x").write_to(&mut out, 1, false, false);
        assert!(out.starts_with(b"HTTP/1.1 299 \r\nContent-Length: 2\r\n"));
    }

    #[test]
    fn head_responses_keep_the_length_but_drop_the_body() {
        let mut out = Vec::new();
        Response::text(200, "Oh hai").write_to(&mut out, 1, true, true);
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("Content-Length: 6\r\n") && s.ends_with("\r\n\r\n"));
    }

    #[test]
    fn no_content_and_not_modified_carry_neither_body_nor_length() {
        for resp in [
            Response::no_content(),
            Response::text(204, "ignored"),
            Response::empty(304).header("ETag", "\"x\""),
            Response::empty(100),
        ] {
            let mut out = Vec::new();
            resp.write_to(&mut out, 1, true, false);
            let s = String::from_utf8(out).unwrap();
            assert!(!s.to_ascii_lowercase().contains("content-length"), "{s}");
            assert!(s.ends_with("\r\n\r\n"), "a body was written: {s:?}");
        }
        let mut out = Vec::new();
        Response::no_content().write_to(&mut out, 1, true, false);
        assert!(out.starts_with(b"HTTP/1.1 204 No Content\r\nDate: "));
        out.clear();
        Response::empty(201).write_to(&mut out, 1, true, false);
        assert!(out.starts_with(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n"));
    }

    #[test]
    fn json_serializes_any_value_and_names_what_cannot_be() {
        #[derive(serde::Serialize)]
        struct Todo {
            id: u64,
            title: &'static str,
        }
        let r = Response::json(201, &Todo { id: 7, title: "x" });
        assert_eq!(r.status, 201);
        assert_eq!(&r.headers[..], &JSON[..]);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v, serde_json::json!({"id": 7, "title": "x"}));
        let mut bad = std::collections::HashMap::new();
        bad.insert(vec![1u8], 1);
        let r = Response::json(200, &bad);
        assert_eq!(r.status, 500);
        assert!(String::from_utf8_lossy(&r.body).contains("could not be serialized"));
    }

    #[test]
    fn the_json_form_has_the_rfc_9457_members_and_the_field() {
        let mut p = crate::http::problem::Problem::new(
            400,
            "invalid-parameter",
            "path parameter 'id': 'x' is not a u64",
        )
        .with_field("id", crate::http::Location::Path);
        p.set_request(Some("abc-1"), true);
        let resp = p.to_response();
        assert_eq!(resp.headers[0].1, "application/problem+json");
        let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(v["type"], "urn:fiber-web:problem:invalid-parameter");
        assert_eq!(v["title"], "Bad Request");
        assert_eq!(v["status"], 400);
        assert_eq!(v["field"], "id");
        assert_eq!(v["location"], "path");
        assert_eq!(v["request_id"], "abc-1");
        p.set_request(Some("abc-1"), false);
        let text = p.to_response();
        assert_eq!(
            std::str::from_utf8(&text.body).unwrap(),
            "path parameter 'id': 'x' is not a u64\nrequest id: abc-1\n"
        );
    }
}
