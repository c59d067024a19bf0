//! The one error type of the crate: why an app could not be built, started or served.
//! Each variant says what to change; [`std::error::Error::source`] gives the cause
//! underneath, where there is one.

use std::fmt;
use std::io;

use crate::http::router::PatternError;

/// Why an app could not start or serve.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A flag or environment variable of [`Options`](crate::Options) had a bad value.
    Option {
        /// The flag as written (`--fibers`), or the variable (`FIBER_WEB_FIBERS`).
        name: String,
        /// What is wrong and what to write instead.
        why: String,
    },
    /// Route patterns that do not parse, or routes that clash, each named.
    Routes(Vec<PatternError>),
    /// The fiber pool could not be made (`--fibers`, `--stack-size`, `--queue`, or the
    /// allocator it needs).
    Fibers(fiber_pool::ConfigError),
    /// A system resource the server needs: binding the port, signal handlers, a
    /// thread; `what` says which, the source why.
    Io {
        /// What was being done (`bind 127.0.0.1:3000 (--bind)`).
        what: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The supervisor could not run its workers.
    Supervisor(String),
    /// The app's own start-up (the closure given to [`serve`](crate::serve())) failed.
    App(Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// An [`Error::Io`] saying what was being done.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Option { name, why } => write!(f, "{name}: {why}"),
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
            Error::Supervisor(why) => write!(f, "supervisor: {why}"),
            Error::App(e) => write!(f, "the app could not start: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Fibers(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            Error::App(e) => Some(&**e),
            Error::Routes(errors) => errors.first().map(|e| e as _),
            Error::Option { .. } | Error::Supervisor(_) => None,
        }
    }
}

impl From<fiber_pool::ConfigError> for Error {
    fn from(e: fiber_pool::ConfigError) -> Error {
        Error::Fibers(e)
    }
}
