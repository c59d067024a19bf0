//! What a call sends: [`Method`], and [`RequestBuilder`] for headers, a body (raw or
//! JSON), a timeout and a deadline; its head is written in one buffer with the body
//! after it, so that a small request is one write.

use std::io::Write as _;
use std::time::{Duration, Instant};

use super::response::ClientResponse;
use super::url::Url;
use super::HttpClient;
use crate::Error;

/// A request method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// GET
    Get,
    /// HEAD: the response has no body, whatever its headers say.
    Head,
    /// POST (not idempotent: never retried)
    Post,
    /// PUT
    Put,
    /// PATCH (not idempotent: never retried)
    Patch,
    /// DELETE
    Delete,
    /// OPTIONS
    Options,
}

impl Method {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
        }
    }

    /// Idempotent (RFC 9110 section 9.2.2): sending it twice does what once does, so a
    /// request that met a kept-alive connection the server had closed is sent again on
    /// a new one.
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Method::Post | Method::Patch)
    }

    /// Whether an empty body is announced (`Content-Length: 0`): for the methods whose
    /// requests usually have one (RFC 9110 section 8.6).
    fn expects_body(self) -> bool {
        matches!(self, Method::Post | Method::Put | Method::Patch)
    }
}

/// A request being built: `client.request(Method::Post, &url).json(&v).send()`.
#[must_use = "a request does nothing until it is sent"]
pub struct RequestBuilder<'a> {
    client: &'a HttpClient,
    pub(crate) method: Method,
    pub(crate) url: &'a Url,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Instant>,
    /// The first thing that was wrong, reported by `send`.
    error: Option<Error>,
    /// The caller asked for `Connection: close`.
    pub(crate) close: bool,
}

impl<'a> RequestBuilder<'a> {
    pub(crate) fn new(client: &'a HttpClient, method: Method, url: &'a Url) -> Self {
        RequestBuilder {
            client,
            method,
            url,
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            deadline: None,
            error: None,
            close: false,
        }
    }

    /// Add a header. `Host`, `User-Agent` and `Accept` replace the client's own;
    /// `Content-Length` and `Transfer-Encoding` are refused (the client frames the
    /// body); `Connection: close` closes the connection after the response.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if self.error.is_some() {
            return self;
        }
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            self.error = Some(Error::InvalidRequest(format!(
                "'{name}' is not a header name"
            )));
        } else if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            self.error = Some(Error::InvalidRequest(format!(
                "the value of {name} holds a line break or NUL"
            )));
        } else if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            self.error = Some(Error::InvalidRequest(format!(
                "{name} is set by the client from the body"
            )));
        } else {
            if name.eq_ignore_ascii_case("connection")
                && value
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("close"))
            {
                self.close = true;
            }
            self.headers
                .push((name.to_string(), value.trim().to_string()));
        }
        self
    }

    /// The body, sent with its `Content-Length`.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// `value` as a JSON body, with `Content-Type: application/json` unless a
    /// Content-Type was set.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => self.body = body,
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(Error::InvalidRequest(format!(
                        "the body cannot be JSON: {e}"
                    )));
                }
                return self;
            }
        }
        if !self.has_header("content-type") {
            self.headers
                .push(("Content-Type".into(), "application/json".into()));
        }
        self
    }

    /// This call's own time limit, instead of `ClientLimits::total_timeout`.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// An instant by which the call must be over, whatever its timeouts (a handler's
    /// own deadline, passed down).
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Send it and read the whole response, within every limit.
    pub fn send(self) -> Result<ClientResponse, Error> {
        self.client.send(self)
    }

    fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The whole request: head, then body.
    pub(crate) fn encode(&mut self) -> Result<Vec<u8>, Error> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let url = self.url;
        let mut out = Vec::with_capacity(128 + url.target.len() + self.body.len());
        // Writes to a Vec cannot fail.
        let _ = write!(out, "{} {} HTTP/1.1\r\n", self.method.as_str(), url.target);
        for (name, default) in [
            ("Host", url.host.as_str()),
            ("User-Agent", "fiber_web"),
            ("Accept", "*/*"),
        ] {
            if !self.has_header(name) {
                let _ = write!(out, "{name}: {default}\r\n");
            }
        }
        for (name, value) in &self.headers {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        if !self.body.is_empty() || self.method.expects_body() {
            let _ = write!(out, "Content-Length: {}\r\n", self.body.len());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        Ok(out)
    }
}

/// RFC 9110's `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientLimits;

    #[test]
    fn the_head_has_the_defaults_the_callers_headers_and_the_body_length() {
        let client = HttpClient::new(ClientLimits::default());
        let url = Url::parse("http://127.0.0.1:9/todos?x=1").unwrap();
        let mut r = client
            .request(Method::Post, &url)
            .header("X-Trace", " abc ")
            .header("User-Agent", "tests")
            .json(&serde_json::json!({"title": "milk"}));
        let wire = String::from_utf8(r.encode().unwrap()).unwrap();
        assert_eq!(
            wire,
            "POST /todos?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAccept: */*\r\n\
             X-Trace: abc\r\nUser-Agent: tests\r\nContent-Type: application/json\r\n\
             Content-Length: 16\r\n\r\n{\"title\":\"milk\"}"
        );
        let mut r = client.request(Method::Put, &url);
        let wire = String::from_utf8(r.encode().unwrap()).unwrap();
        assert!(wire.ends_with("Content-Length: 0\r\n\r\n"), "{wire}");
        let mut r = client
            .request(Method::Get, &url)
            .header("Content-Type", "text/plain");
        let wire = String::from_utf8(r.encode().unwrap()).unwrap();
        assert!(!wire.contains("Content-Length"), "{wire}");
    }

    #[test]
    fn headers_that_would_break_the_framing_are_refused() {
        let client = HttpClient::new(ClientLimits::default());
        let url = Url::parse("http://127.0.0.1:9/").unwrap();
        for (name, value, says) in [
            ("X-Evil", "a\r\nHost: b", "line break"),
            ("Bad Name", "x", "not a header name"),
            ("Content-Length", "5", "set by the client"),
            ("transfer-encoding", "chunked", "set by the client"),
        ] {
            let mut r = client.request(Method::Get, &url).header(name, value);
            let e = r.encode().unwrap_err();
            assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
            assert!(e.to_string().contains(says), "{e}");
        }
        assert!(
            client
                .request(Method::Get, &url)
                .header("Connection", "close")
                .close
        );
    }
}
