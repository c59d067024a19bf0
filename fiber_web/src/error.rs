//! The one error type of the crate, [`Error`]: why an app could not be built, started
//! or served, and why an outgoing call ([`crate::client`]) failed. Each variant says
//! what to change; [`std::error::Error::source`] gives the cause underneath, where
//! there is one. A call's failure also names its phase ([`Error::phase`]) and the
//! status a gateway answers with for it ([`Error::gateway_status`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::process::ExitStatus;
use std::time::Duration;

use crate::http::client::phase;

/// Why an app could not start or serve, or why an outgoing call failed.
///
/// Its `Debug` form is its message and its causes, one per line, as `anyhow` prints
/// them: `fn main() -> Result<(), fiber_web::Error>` shows a user what to change
/// (`Error: --fibers: ...`), not the variant's fields. Match on the variant for the
/// fields.
#[non_exhaustive]
pub enum Error {
    // Building, starting and serving an app.
    /// A flag or environment variable of [`Options`](crate::Options) had a bad value.
    Option {
        /// The flag as written (`--fibers`), or the variable (`FIBER_WEB_FIBERS`).
        name: String,
        /// What is wrong and what to write instead.
        why: String,
    },
    /// A route pattern that does not parse, or a route that clashes with another.
    Route {
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it, and what to write instead.
        why: String,
    },
    /// Every refused route of an app, each an [`Error::Route`], named at once when the
    /// app is built (or [`App::check`](crate::App::check)ed).
    Routes(Vec<Error>),
    /// The fiber pool could not be made (`--fibers`, `--stack-size`, `--queue`, or the
    /// allocator it needs).
    Fibers(fiber_pool::ConfigError),
    /// A system resource the server needs: binding the port, signal handlers, a
    /// thread, a worker process; `what` says which, the source why.
    Io {
        /// What was being done (`listen on 127.0.0.1:3000 (--bind)`).
        what: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// A worker process the supervisor started ended before it accepted a connection
    /// (its own message is in the log above); the supervisor stopped the others.
    WorkerExited {
        /// Which of the `--processes` slots, from 1.
        id: usize,
        /// How it ended.
        status: ExitStatus,
    },
    /// A worker process did not accept within `--worker-start-timeout`; the
    /// supervisor stopped it and the others.
    WorkerStartTimeout {
        /// Which of the `--processes` slots, from 1.
        id: usize,
        /// The limit it passed.
        limit: Duration,
    },
    /// SIGTERM or Ctrl-C reached the supervisor before its first workers accepted.
    StoppedDuringStartup,
    /// The app's own start-up (the closure given to [`serve`](crate::serve())) failed.
    App(Box<dyn std::error::Error + Send + Sync>),

    // An outgoing call of the HTTP client.
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
    /// A phase of a call took longer than its limit.
    Timeout {
        /// Which phase (one of [`phase`]'s names), or [`phase::TOTAL`] /
        /// [`phase::DEADLINE`] when the call's own time ran out first.
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
    /// The connection broke in a phase (reset, broken pipe); `exchange` when the
    /// client cannot tell which (the async twin's).
    Broken {
        /// Which phase.
        phase: &'static str,
        /// The socket's error.
        source: io::Error,
    },
    /// The call's job was cancelled (for a server's handler: its client left), so the
    /// call was abandoned and its connection closed. A deadline that passes is an
    /// [`Error::Timeout`] with [`phase::DEADLINE`] instead.
    Cancelled {
        /// Why the job was cancelled.
        reason: fiber_pool::CancelReason,
    },
}

impl Error {
    /// An [`Error::Io`] saying what was being done.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// The status a server answers with when this error comes from its upstream: 504
    /// for a timeout, 503 for a cancelled call, 502 for any other failed call; 500 for
    /// an error that is not a call's.
    pub fn gateway_status(&self) -> u16 {
        match self {
            Error::Timeout { .. } => 504,
            // Nobody reads the answer (the client left), or the server is stopping.
            Error::Cancelled { .. } => 503,
            e if e.phase().is_some() => 502,
            _ => 500,
        }
    }

    /// The phase an outgoing call failed in (one of [`phase`]'s names; `response` for
    /// a response that is malformed or too large, `cancelled` for a cancelled call);
    /// `None` for an error that is not a call's.
    pub fn phase(&self) -> Option<&'static str> {
        Some(match self {
            Error::BadUrl(_) | Error::InvalidRequest(_) => phase::REQUEST,
            Error::Resolve { .. } => phase::DNS,
            Error::Connect { .. } => phase::CONNECT,
            Error::Tls { phase, .. }
            | Error::Timeout { phase, .. }
            | Error::Broken { phase, .. } => phase,
            Error::TooLarge { .. } | Error::BadResponse(_) => "response",
            Error::Cancelled { .. } => "cancelled",
            Error::Option { .. }
            | Error::Route { .. }
            | Error::Routes(_)
            | Error::Fibers(_)
            | Error::Io { .. }
            | Error::WorkerExited { .. }
            | Error::WorkerStartTimeout { .. }
            | Error::StoppedDuringStartup
            | Error::App(_) => return None,
        })
    }

    /// Whether the error is a call's timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")?;
        let mut cause = std::error::Error::source(self);
        if cause.is_some() {
            f.write_str("\n\nCaused by:")?;
        }
        while let Some(e) = cause {
            write!(f, "\n    {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Option { name, why } => write!(f, "{name}: {why}"),
            Error::Route { pattern, why } => write!(f, "route pattern '{pattern}': {why}"),
            Error::Routes(errors) => {
                f.write_str("the app's routes are wrong: ")?;
                for (i, e) in errors.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
            Error::Fibers(e) => write!(f, "bad --fibers, --stack-size or --queue: {e}"),
            Error::Io { what, source } => write!(f, "cannot {what}: {source}"),
            Error::WorkerExited { id, status } => {
                f.write_str("supervisor: worker ")?;
                match (
                    status.code(),
                    std::os::unix::process::ExitStatusExt::signal(status),
                ) {
                    (Some(code), _) => write!(f, "{id} exited with status {code}")?,
                    (None, Some(signal)) => write!(f, "{id} died of signal {signal}")?,
                    (None, None) => write!(f, "{id} ended ({status})")?,
                }
                f.write_str(" before it accepted (see its message above)")
            }
            Error::WorkerStartTimeout { id, limit } => write!(
                f,
                "supervisor: worker {id} did not accept within {limit:?}: raise \
                 --worker-start-timeout, or see why it is slow in its log above"
            ),
            Error::StoppedDuringStartup => f.write_str("supervisor: stopped during start-up"),
            Error::App(e) => write!(f, "the app could not start: {e}"),
            Error::BadUrl(why) => write!(f, "bad URL {why}"),
            Error::InvalidRequest(why) => write!(f, "the request cannot be sent: {why}"),
            Error::Resolve { host, source } => {
                write!(f, "cannot resolve '{host}' (dns): {source}")
            }
            Error::Connect { addr, source } => write!(f, "cannot connect to {addr}: {source}"),
            Error::Tls {
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
            Error::Timeout { phase, limit } => write!(
                f,
                "upstream {phase} timed out after {} ms",
                limit.as_millis()
            ),
            Error::TooLarge { limit } => {
                write!(f, "upstream response larger than the {limit}-byte limit")
            }
            Error::BadResponse(why) => write!(f, "upstream sent a bad response: {why}"),
            Error::Broken { phase, source } => {
                write!(f, "upstream connection failed ({phase}): {source}")
            }
            Error::Cancelled { reason } => write!(f, "upstream call abandoned: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Fibers(e) => Some(e),
            Error::Io { source, .. }
            | Error::Resolve { source, .. }
            | Error::Connect { source, .. }
            | Error::Broken { source, .. } => Some(source),
            Error::Tls { source, .. } => Some(source),
            Error::App(e) => Some(&**e),
            Error::Routes(errors) => errors.first().map(|e| e as _),
            Error::Cancelled { reason } => Some(reason),
            Error::Option { .. }
            | Error::Route { .. }
            | Error::WorkerExited { .. }
            | Error::WorkerStartTimeout { .. }
            | Error::StoppedDuringStartup
            | Error::BadUrl(_)
            | Error::InvalidRequest(_)
            | Error::Timeout { .. }
            | Error::TooLarge { .. }
            | Error::BadResponse(_) => None,
        }
    }
}

impl From<fiber_pool::ConfigError> for Error {
    fn from(e: fiber_pool::ConfigError) -> Error {
        Error::Fibers(e)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn main_prints_the_message_and_the_causes_not_the_fields() {
        let flag = Error::Option {
            name: "--database-url".into(),
            why: "unknown flag: did you mean --db-url?".into(),
        };
        assert_eq!(
            format!("{flag:?}"),
            "--database-url: unknown flag: did you mean --db-url?"
        );
        let connect = Error::Connect {
            addr: "127.0.0.1:9".parse().unwrap(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        };
        let printed = format!("{connect:?}");
        assert!(printed.starts_with(&connect.to_string()), "{printed}");
        assert!(
            printed.ends_with("\n\nCaused by:\n    connection refused"),
            "{printed}"
        );
        assert!(!printed.contains("source:"), "{printed}");
    }

    #[test]
    fn each_calls_error_names_its_phase_and_its_gateway_status() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let cases = [
            (
                Error::Timeout {
                    phase: phase::FIRST_BYTE,
                    limit: Duration::from_millis(500),
                },
                504,
                "first byte",
                "upstream first byte timed out after 500 ms",
            ),
            (
                Error::Connect {
                    addr: "127.0.0.1:9".parse().unwrap(),
                    source: refused,
                },
                502,
                "connect",
                "cannot connect to 127.0.0.1:9",
            ),
            (
                Error::Tls {
                    host: "a.test".into(),
                    phase: phase::TLS,
                    source: rustls::Error::HandshakeNotComplete,
                },
                502,
                "tls handshake",
                "TLS handshake with 'a.test' failed",
            ),
            (
                Error::Resolve {
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
            assert_eq!(e.phase(), Some(phase), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        // Not a call's: no phase, and a plain server error.
        let e = Error::StoppedDuringStartup;
        assert_eq!((e.phase(), e.gateway_status()), (None, 500));
    }

    #[test]
    fn the_cause_is_the_source() {
        let e = Error::Broken {
            phase: phase::SEND,
            source: io::Error::from(io::ErrorKind::BrokenPipe),
        };
        let source = e.source().expect("a source");
        assert_eq!(
            source.downcast_ref::<io::Error>().map(io::Error::kind),
            Some(io::ErrorKind::BrokenPipe)
        );
        assert!(Error::TooLarge { limit: 1 }.source().is_none());
        let routes = Error::Routes(vec![Error::Route {
            pattern: "/a/{".into(),
            why: "unclosed".into(),
        }]);
        assert_eq!(
            routes.source().map(|e| e.to_string()).as_deref(),
            Some("route pattern '/a/{': unclosed")
        );
    }

    #[test]
    fn a_worker_that_died_is_named_with_how() {
        use std::os::unix::process::ExitStatusExt;
        let e = Error::WorkerExited {
            id: 2,
            status: ExitStatus::from_raw(9),
        };
        assert_eq!(
            e.to_string(),
            "supervisor: worker 2 died of signal 9 before it accepted (see its message above)"
        );
    }
}
