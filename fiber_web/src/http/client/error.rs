//! [`ClientError`]: why an outgoing call failed, each naming the phase it failed in, and
//! the status a gateway answers with for it; [`phase`]: the phases' names.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// The phases of a call, as errors name them ([`ClientError::phase`]).
pub mod phase {
    /// Building the request (a bad URL, header or JSON body).
    pub const REQUEST: &str = "request";
    /// Resolving the host name.
    pub const DNS: &str = "dns";
    /// Opening the TCP connection.
    pub const CONNECT: &str = "connect";
    /// The TLS handshake (certificate checks included).
    pub const TLS: &str = "tls handshake";
    /// Writing the request head and body.
    pub const SEND: &str = "send";
    /// Waiting for the response's first byte.
    pub const FIRST_BYTE: &str = "first byte";
    /// Reading the rest of the response head.
    pub const HEAD: &str = "head";
    /// Reading the response body.
    pub const BODY: &str = "body";
    /// The call's own timeout (`ClientLimits::total_timeout`, or the request's).
    pub const TOTAL: &str = "total";
    /// The caller's deadline.
    pub const DEADLINE: &str = "deadline";
}

/// Why a call failed; each maps to the status a gateway answers with
/// ([`ClientError::gateway_status`]) and names its phase ([`ClientError::phase`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL cannot be used.
    BadUrl(String),
    /// The request cannot be sent as built: a header name or value that is not valid
    /// HTTP, a framing header the client sets itself, a body that is not JSON.
    InvalidRequest(String),
    /// The host name did not resolve (or the resolver's queue was full).
    Resolve {
        /// The name.
        host: String,
        /// Why (the system resolver's message).
        source: io::Error,
    },
    /// The TCP connection could not be opened (refused, unreachable).
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// TLS failed: the handshake (an untrusted certificate, one for another name, no
    /// common protocol) or, later, a record that does not decrypt.
    Tls {
        /// The server name the certificate was checked against.
        host: String,
        /// [`phase::TLS`], or the phase of the exchange that got a bad record.
        phase: &'static str,
        /// rustls' error.
        source: rustls::Error,
    },
    /// A phase took longer than its limit: one of [`phase`]'s names.
    Timeout {
        /// Which phase, or [`phase::TOTAL`] / [`phase::DEADLINE`] when the call's own
        /// time ran out first.
        phase: &'static str,
        /// Its limit.
        limit: Duration,
    },
    /// The response was larger than `max_response_bytes`.
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The upstream sent something that is not an HTTP/1.x response (the message says
    /// where in the response).
    BadResponse(String),
    /// The connection broke in a phase (reset, broken pipe).
    Broken {
        /// Which phase.
        phase: &'static str,
        /// The socket's error.
        source: io::Error,
    },
    /// The connection broke, in a phase that is not known: what a client that cannot
    /// tell gives (the async twin's).
    Io(io::Error),
    /// The call's job was cancelled (for a server's handler: its client left), so the
    /// call was abandoned and its connection closed. A deadline that passes is a
    /// [`ClientError::Timeout`] with [`phase::DEADLINE`] instead.
    Cancelled {
        /// Why the job was cancelled.
        reason: fiber_pool::CancelReason,
    },
}

impl ClientError {
    /// The status a server answers with when this error comes from its upstream: 504
    /// for a timeout, 503 for a cancelled call, 502 otherwise.
    pub fn gateway_status(&self) -> u16 {
        match self {
            ClientError::Timeout { .. } => 504,
            // Nobody reads the answer (the client left), or the server is stopping.
            ClientError::Cancelled { .. } => 503,
            _ => 502,
        }
    }

    /// The phase the call failed in (one of [`phase`]'s names; `response` for a
    /// response that is malformed or too large, `exchange` for [`ClientError::Io`]).
    pub fn phase(&self) -> &'static str {
        match self {
            ClientError::BadUrl(_) | ClientError::InvalidRequest(_) => phase::REQUEST,
            ClientError::Resolve { .. } => phase::DNS,
            ClientError::Connect { .. } => phase::CONNECT,
            ClientError::Tls { phase, .. }
            | ClientError::Timeout { phase, .. }
            | ClientError::Broken { phase, .. } => phase,
            ClientError::TooLarge { .. } | ClientError::BadResponse(_) => "response",
            ClientError::Io(_) => "exchange",
            ClientError::Cancelled { .. } => "cancelled",
        }
    }

    /// Whether the error is a timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Timeout { .. })
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::BadUrl(why) => write!(f, "bad URL {why}"),
            ClientError::InvalidRequest(why) => write!(f, "the request cannot be sent: {why}"),
            ClientError::Resolve { host, source } => {
                write!(f, "cannot resolve '{host}' (dns): {source}")
            }
            ClientError::Connect { addr, source } => {
                write!(f, "cannot connect to {addr}: {source}")
            }
            ClientError::Tls {
                host,
                phase,
                source,
            } => {
                if *phase == self::phase::TLS {
                    write!(f, "TLS handshake with '{host}' failed: {source}")
                } else {
                    write!(f, "TLS with '{host}' failed ({phase}): {source}")
                }
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
            ClientError::Broken { phase, source } => {
                write!(f, "upstream connection failed ({phase}): {source}")
            }
            ClientError::Io(e) => write!(f, "upstream connection failed: {e}"),
            ClientError::Cancelled { reason } => write!(f, "upstream call abandoned: {reason}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Resolve { source, .. }
            | ClientError::Connect { source, .. }
            | ClientError::Broken { source, .. }
            | ClientError::Io(source) => Some(source),
            ClientError::Tls { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn each_error_names_its_phase_and_its_gateway_status() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let cases = [
            (
                ClientError::Timeout {
                    phase: phase::FIRST_BYTE,
                    limit: Duration::from_millis(500),
                },
                504,
                "first byte",
                "upstream first byte timed out after 500 ms",
            ),
            (
                ClientError::Connect {
                    addr: "127.0.0.1:9".parse().unwrap(),
                    source: refused,
                },
                502,
                "connect",
                "cannot connect to 127.0.0.1:9",
            ),
            (
                ClientError::Tls {
                    host: "a.test".into(),
                    phase: phase::TLS,
                    source: rustls::Error::HandshakeNotComplete,
                },
                502,
                "tls handshake",
                "TLS handshake with 'a.test' failed",
            ),
            (
                ClientError::Resolve {
                    host: "nowhere.test".into(),
                    source: io::Error::other("no such host"),
                },
                502,
                "dns",
                "cannot resolve 'nowhere.test' (dns): no such host",
            ),
        ];
        for (e, status, phase, says) in cases {
            assert_eq!(e.gateway_status(), status, "{e}");
            assert_eq!(e.phase(), phase, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn the_cause_is_the_source() {
        let e = ClientError::Broken {
            phase: phase::SEND,
            source: io::Error::from(io::ErrorKind::BrokenPipe),
        };
        let source = e.source().expect("a source");
        assert_eq!(
            source.downcast_ref::<io::Error>().map(io::Error::kind),
            Some(io::ErrorKind::BrokenPipe)
        );
        assert!(ClientError::TooLarge { limit: 1 }.source().is_none());
    }
}
