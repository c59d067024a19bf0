//! The one error type of the demo's library: why the demo could not start, saying
//! which flag to change, with the cause underneath ([`std::error::Error::source`]).

use std::fmt;
use std::io;

use crate::config::ServeConfig;

/// Where MySQL start-up failed, each step worded once for every runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbStep {
    /// Opening the pool's `--db-pool` connections.
    OpenPool {
        /// The pool's size, `--db-pool`.
        size: usize,
    },
    /// Taking a connection to create the schema.
    Reach,
    /// Creating the demo schema.
    Schema,
    /// Starting the private MariaDB (`--mariadbd`).
    PrivateServer,
}

impl DbStep {
    /// The step of opening `cfg`'s pool.
    pub fn open_pool(cfg: &ServeConfig) -> DbStep {
        DbStep::OpenPool { size: cfg.db_pool }
    }
}

/// Why the demo could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The framework could not start: the port, the fiber pool, the watchdog, the
    /// server (its message names the flag).
    Web(fiber_web::Error),
    /// MySQL start-up failed at `step`.
    Database {
        /// Which step.
        step: DbStep,
        /// What MySQL (or the launcher) said.
        source: fiber_mysql::Error,
    },
    /// A flag's value is not usable (`--database-url`, `--upstream`).
    Flag {
        /// The flag.
        flag: &'static str,
        /// What is wrong with it: the parser's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The command line names no command the binary has, or a tool's argument is
    /// wrong (the flags of `serve` are the framework's: [`Error::Web`]).
    Usage(String),
    /// `stack-report` could not measure a route: what went wrong.
    Report(String),
    /// `stack-report` could not make a fiber pool to measure on.
    MeasurePool(fiber_pool::ConfigError),
    /// `stack-report`: a route failed on a stack that should have served it.
    Measure {
        /// The request.
        target: &'static str,
        /// The stack it ran on, in bytes.
        stack_size: usize,
        /// How it failed.
        source: fiber_pool::RunError,
    },
    /// A system resource: what was being done, and why it failed.
    Io {
        /// What was being done (`start the tokio runtime (--threads)`).
        what: String,
        /// The operating system's error.
        source: io::Error,
    },
}

impl Error {
    /// An [`Error::Io`] saying what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for DbStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbStep::OpenPool { size } => write!(f, "cannot open the MySQL pool (--db-pool {size})"),
            DbStep::Reach => f.write_str("cannot reach MySQL"),
            DbStep::Schema => f.write_str("cannot create the demo schema"),
            DbStep::PrivateServer => f.write_str("cannot start the private MariaDB (--mariadbd)"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Web(e) => write!(f, "{e}"),
            Error::Database { step, source } => write!(f, "{step}: {source}"),
            Error::Flag { flag, source } => write!(f, "bad {flag}: {source}"),
            Error::MeasurePool(e) => write!(f, "cannot make a fiber pool to measure on: {e}"),
            Error::Measure {
                target,
                stack_size,
                source,
            } => write!(f, "{target} failed on a {stack_size}-byte stack: {source}"),
            Error::Usage(why) | Error::Report(why) => f.write_str(why),
            Error::Io { what, source } => write!(f, "cannot {what}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Web(e) => Some(e),
            Error::Database { source, .. } => Some(source),
            Error::Io { source, .. } => Some(source),
            Error::Flag { source, .. } => Some(&**source),
            Error::MeasurePool(e) => Some(e),
            Error::Measure { source, .. } => Some(source),
            Error::Usage(_) | Error::Report(_) => None,
        }
    }
}

impl From<fiber_web::Error> for Error {
    fn from(e: fiber_web::Error) -> Error {
        // The demo's own start-up ran inside the framework's: give it back whole.
        match e {
            fiber_web::Error::App(inner) => match inner.downcast::<Error>() {
                Ok(ours) => *ours,
                Err(other) => Error::Web(fiber_web::Error::App(other)),
            },
            other => Error::Web(other),
        }
    }
}
