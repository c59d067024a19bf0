//! Our HTTP/1.x layer on `may::net`: parsing, responses, routing, the connection loop,
//! the listener, and the coroutine-native client.
//!
//! Why not stock may_minihttp 0.1.11: it never closes a connection (HTTP/1.0 and
//! `Connection: close` are ignored, so plain `ab` hangs), its listener shares a taken
//! port silently (SO_REUSEPORT), it drops connections with more than 16 headers and
//! parses Content-Length with `unwrap()`. We keep its shape (one coroutine per
//! connection, a tiny handler signature) and own the connection loop.

pub(crate) mod chunked;
pub mod client;
pub(crate) mod conn;
pub(crate) mod date;
pub(crate) mod defaults;
pub(crate) mod departure;
pub(crate) mod extensions;
pub(crate) mod form;
pub(crate) mod handler;
pub mod html;
pub(crate) mod idle;
pub(crate) mod listener;
pub(crate) mod literals;
pub(crate) mod problem;
pub(crate) mod query;
pub(crate) mod refusal;
pub(crate) mod reply;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod router;
pub mod status;
pub(crate) mod target;

pub use extensions::Extensions;
pub use handler::Handler;
pub use problem::{Location, Problem};
pub use reply::{IntoResponse, Json};
pub use request::{Headers, Request};
pub use response::Response;

use std::fmt;

/// Socket timeouts as may honours them (see there).
pub(crate) use fiber_pool::net::io_timeout;

/// What was wrong with what a client sent; each maps to one status code.
#[derive(Debug)]
#[non_exhaustive]
pub enum HttpError {
    /// The request line or a header is not valid HTTP (400).
    Malformed(String),
    /// More headers than `max_headers` (431).
    TooManyHeaders {
        /// The limit that was passed.
        limit: usize,
    },
    /// The head is longer than `max_header_bytes` (431).
    HeadTooLarge {
        /// The limit that was passed.
        limit: usize,
    },
    /// The request line alone is longer than `max_header_bytes` (414).
    UriTooLong {
        /// The limit that was passed.
        limit: usize,
    },
    /// The body is longer than `max_body_bytes` (413).
    BodyTooLarge {
        /// The limit that was passed.
        limit: usize,
    },
    /// A `Transfer-Encoding` list ending in chunked with a coding we do not decode
    /// before it, such as `gzip, chunked` (501).
    UnsupportedTransferEncoding(String),
    /// A well-formed `HTTP/x.y` version other than HTTP/1.0 or HTTP/1.1 (505); a
    /// request line that is not `METHOD /target HTTP/x.y` at all is `Malformed`.
    Version,
    /// The head did not arrive within `header_timeout` (408).
    HeadTimeout,
    /// The body (Content-Length or chunked) did not arrive within `body_timeout` of
    /// the head's end (408).
    BodyTimeout,
}

impl HttpError {
    /// The status code this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Malformed(_) => 400,
            HttpError::TooManyHeaders { .. } | HttpError::HeadTooLarge { .. } => 431,
            HttpError::BodyTooLarge { .. } => 413,
            HttpError::UriTooLong { .. } => 414,
            HttpError::UnsupportedTransferEncoding(_) => 501,
            HttpError::Version => 505,
            HttpError::HeadTimeout | HttpError::BodyTimeout => 408,
        }
    }
}

impl HttpError {
    /// The problem a client gets for it: the status, a stable kind, this message.
    pub(crate) fn problem(&self) -> Problem {
        let kind = match self {
            HttpError::Malformed(_) => "malformed-request",
            HttpError::TooManyHeaders { .. } | HttpError::HeadTooLarge { .. } => {
                "headers-too-large"
            }
            HttpError::BodyTooLarge { .. } => "body-too-large",
            HttpError::UriTooLong { .. } => "uri-too-long",
            HttpError::UnsupportedTransferEncoding(_) => "unsupported-transfer-encoding",
            HttpError::Version => "http-version-not-supported",
            HttpError::HeadTimeout | HttpError::BodyTimeout => "request-timeout",
        };
        Problem::new(self.status(), kind, problem::echo_long(&self.to_string()))
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Malformed(why) => write!(f, "malformed request: {why}"),
            HttpError::TooManyHeaders { limit } => {
                write!(f, "too many request headers: at most {limit} are accepted")
            }
            HttpError::HeadTooLarge { limit } => write!(
                f,
                "request line and headers are too large: at most {limit} bytes are accepted"
            ),
            HttpError::UriTooLong { limit } => write!(
                f,
                "the request line is too long: at most {limit} bytes are accepted; \
                 send long data in a body"
            ),
            HttpError::BodyTooLarge { limit } => {
                write!(
                    f,
                    "request body too large: at most {limit} bytes are accepted"
                )
            }
            HttpError::UnsupportedTransferEncoding(te) => write!(
                f,
                "Transfer-Encoding '{te}' is not supported: send the body chunked or with Content-Length"
            ),
            HttpError::Version => write!(f, "only HTTP/1.0 and HTTP/1.1 are spoken here"),
            HttpError::HeadTimeout => write!(f, "the request head did not arrive in time"),
            HttpError::BodyTimeout => write!(
                f,
                "the request body did not arrive in time: send all of it (Content-Length or chunked) promptly"
            ),
        }
    }
}

impl std::error::Error for HttpError {}
