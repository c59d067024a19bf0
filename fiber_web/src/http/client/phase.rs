//! The phases of an outgoing call, as its errors name them
//! ([`Error::phase`](crate::Error::phase)): each phase has its own limit in
//! [`ClientLimits`](crate::config::ClientLimits), and a timeout names the one that ran out.

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
