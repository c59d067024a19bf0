//! The framework's own refusals and failures as data ([`Problem`], RFC 9457 problem
//! details), and how one becomes a response: `application/problem+json` when the
//! request's `Accept` asks for JSON, `text/plain` otherwise, or whatever the app's own
//! renderer makes of it (`App::render_problems`). The renderings are `response.rs`'s
//! (a problem is data; a response is made of it).
//!
//! Every answer the framework makes itself is a problem: the connection's early
//! refusals (400, 408, 413, 414, 431, 501, 505), the router's 404 and 405, the
//! extractors' 400, 415 and 422, a full queue's or pool's 503, a deadline's 504, a
//! handler's panic or overflow 500. A problem travels as an ordinary [`Response`]
//! (its text form, so a layer sees a response like any other) with the problem
//! attached; it is rendered once, as the response leaves the router, with the request
//! id and the client's `Accept`.
//!
//! What a client reads is `detail`: what to change, bounded, never a database's
//! text or an operator's advice. What only the operator should read goes in
//! `internal`, which the 5xx log line prints beside the request id.

use std::borrow::Cow;

/// Bytes of client input a problem's detail or field repeats; longer input is cut
/// (with `...`), so a 14 KB path segment is not echoed back whole.
pub const ECHO_LIMIT: usize = 64;

/// Where an extractor found the value it refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A path parameter (`{id}`).
    Path,
    /// A query-string parameter.
    Query,
    /// The request body.
    Body,
    /// A request header.
    Header,
}

impl Location {
    /// `path`, `query`, `body` or `header`: the `location` member of the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Body => "body",
            Location::Header => "header",
        }
    }
}

/// One refusal or failure the framework answers by itself (see the module's header).
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    status: u16,
    kind: &'static str,
    detail: String,
    field: Option<(String, Location)>,
    position: Option<(usize, usize)>,
    internal: Option<String>,
    request_id: Option<String>,
    wants_json: bool,
}

impl Problem {
    /// A problem with `status`, a short stable `kind` (`not-found`,
    /// `invalid-parameter`: the last part of its `type` URI, for a client's code to
    /// match) and the `detail` a client reads.
    pub fn new(status: u16, kind: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            kind,
            detail: detail.into(),
            field: None,
            position: None,
            internal: None,
            request_id: None,
            wants_json: false,
        }
    }

    /// The same problem naming the parameter or field it is about, and where it was.
    pub fn with_field(mut self, name: &str, location: Location) -> Problem {
        self.field = Some((echo(name).into_owned(), location));
        self
    }

    /// The same problem with the line and column (1-based) a body's parser stopped at.
    pub fn with_position(mut self, line: usize, column: usize) -> Problem {
        self.position = Some((line, column));
        self
    }

    /// The same problem with text for the operator only: the 5xx log line prints it,
    /// no client reads it (a database's message, a limit to raise).
    pub fn with_internal(mut self, internal: impl Into<String>) -> Problem {
        self.internal = Some(internal.into());
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The short, stable name of what went wrong (`not-found`, `invalid-json`).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// `urn:fiber-web:problem:KIND`: the RFC 9457 `type`, a URI to match on, not to
    /// fetch.
    pub fn type_uri(&self) -> String {
        format!("urn:fiber-web:problem:{}", self.kind)
    }

    /// The status's reason phrase (`Not Found`): the RFC 9457 `title`.
    pub fn title(&self) -> &'static str {
        crate::http::status::reason(self.status)
    }

    /// What a client should change, in a sentence.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The parameter or field the problem is about, and where it was.
    pub fn field(&self) -> Option<(&str, Location)> {
        self.field.as_ref().map(|(n, l)| (n.as_str(), *l))
    }

    /// The line and column a body's parser stopped at.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.position
    }

    /// The operator's text (see [`with_internal`](Self::with_internal)).
    pub fn internal(&self) -> Option<&str> {
        self.internal.as_deref()
    }

    /// The request's id, when the app gives requests ids (`App::request_ids`).
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// Whether the request's `Accept` asked for JSON (`application/json`,
    /// `application/problem+json`, any `+json`): what the default rendering follows.
    pub fn wants_json(&self) -> bool {
        self.wants_json
    }

    /// Fill in what the framework knows of the request when the response leaves it.
    pub(crate) fn set_request(&mut self, request_id: Option<&str>, wants_json: bool) {
        self.request_id = request_id.map(str::to_string);
        self.wants_json = wants_json;
    }

    pub(crate) fn set_status(&mut self, status: u16) {
        self.status = status;
    }
}

/// Whether an `Accept` value asks for JSON: a media range `application/json`,
/// `application/problem+json` or any `application/...+json` (any case, any
/// parameters), with a nonzero `q`. `*/*` alone is text.
pub(crate) fn accepts_json(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let essence = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            let p = p.trim();
            p.len() > 2 && p[..2].eq_ignore_ascii_case("q=") && p[2..].trim().parse() == Ok(0.0)
        });
        !refused && is_json(essence)
    })
}

/// Whether a Content-Type names JSON: `application/json` or `application/<x>+json`,
/// any case, with or without parameters.
pub(crate) fn is_json(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or("").trim();
    let Some((kind, sub)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (sub.eq_ignore_ascii_case("json")
            || sub.len() > 5 && sub[sub.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// `text` as a problem may repeat it: at most [`ECHO_LIMIT`] bytes (cut at a
/// character boundary, with `...`), control characters replaced.
pub fn echo(text: &str) -> Cow<'_, str> {
    bounded(text, ECHO_LIMIT)
}

fn bounded(text: &str, limit: usize) -> Cow<'_, str> {
    let cut = text.len() > limit;
    if !cut && !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if cut {
        out.push_str("...");
    }
    Cow::Owned(out)
}

/// Bytes of a framework message that quotes a client's input at some length (a
/// malformed header's text) that a problem keeps: [`echo`] for whole sentences.
const MESSAGE_LIMIT: usize = 512;

/// A whole message, bounded at [`MESSAGE_LIMIT`] like [`echo`] bounds an input.
pub(crate) fn echo_long(text: &str) -> String {
    bounded(text, MESSAGE_LIMIT).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_asks_for_json_by_media_range() {
        for yes in [
            "application/json",
            "application/problem+json",
            "text/html, application/json;q=0.9",
            "APPLICATION/JSON; charset=utf-8",
        ] {
            assert!(accepts_json(yes), "{yes}");
        }
        for no in [
            "*/*",
            "text/plain",
            "",
            "application/json;q=0",
            "application/xml",
        ] {
            assert!(!accepts_json(no), "{no}");
        }
    }

    #[test]
    fn echoed_input_is_bounded_and_printable() {
        assert_eq!(echo("short"), "short");
        let long = "é".repeat(10_000);
        let cut = echo(&long);
        assert!(cut.len() <= ECHO_LIMIT + 3 && cut.ends_with("..."), "{cut}");
        assert_eq!(echo("a\r\nb"), "a??b");
    }
}
