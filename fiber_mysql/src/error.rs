//! The one error type of this crate, with messages that say what to do next.
//!
//! The HTTP layer needs one decision from an error: is the database
//! *unavailable* (answer 503 and let the client retry) or did this request
//! fail (500)? [`Error::is_unavailable`] makes it.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::headroom::{CONNECTION_HEADROOM, KILL_HEADROOM};

/// Everything that can go wrong between a caller and the database.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with an ERR packet: the connection is still usable.
    Server {
        /// MySQL/MariaDB error number, e.g. 1045 (access denied), 1064 (syntax).
        code: u16,
        /// Five-character SQL state, e.g. `28000`, `42000`.
        state: String,
        /// The server's own message.
        message: String,
    },
    /// A socket error (refused, reset, closed by the server, read timeout).
    /// The connection that saw it is poisoned and never reused.
    Io(io::Error),
    /// The server sent something this client does not understand.
    /// The connection is poisoned.
    Protocol(String),
    /// TCP connect plus handshake did not finish within `Opts::connect_timeout`.
    ConnectTimeout,
    /// The query ran past `Opts::query_timeout`; it was stopped with `KILL QUERY`.
    QueryTimeout,
    /// No pooled connection became free within `PoolConfig::wait_timeout`.
    PoolTimeout {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The pool is larger than the server allows connections.
    PoolTooBig {
        /// Requested pool size.
        pool: usize,
        /// The server's `@@max_connections`.
        max_connections: usize,
    },
    /// The parameters do not fit the statement (count, named parameters, size).
    /// Nothing was sent; the connection is still usable.
    Params(String),
    /// A malformed database URL or option.
    Url(String),
    /// The private MariaDB could not be started.
    Launch(String),
    /// A value did not convert to the requested Rust type (the threads driver's
    /// conversions; a row's columns report [`Error::Column`]).
    Convert(String),
    /// A column of a row could not be read as the Rust type asked for: a missing
    /// column, NULL into a type without NULL, or a value of another type
    /// ([`RowExt::try_get`](crate::RowExt::try_get), [`FromRow`](crate::FromRow)).
    /// The connection is unaffected.
    Column {
        /// The column as the caller named it: `` `age` ``, or `` 2 (`age`) `` when
        /// asked for by position.
        column: String,
        /// The Rust type asked for, without module paths: `i64`, `Option<String>`.
        rust_type: String,
        /// What was wrong.
        problem: ColumnProblem,
    },
    /// The threads driver's worker thread is gone (it panicked or was shut down).
    WorkerGone,
    /// The checkout was cancelled through a [`CancelHandle`](crate::CancelHandle): the
    /// running command was stopped with `KILL QUERY` (MariaDB's 1317, "query execution
    /// was interrupted"), or a later command was refused unsent. The connection stays
    /// usable; the pool resets it at give-back.
    Cancelled,
    /// The deadline set with [`PooledConn::set_deadline`](crate::PooledConn::set_deadline)
    /// or [`Pool::checkout_until`](crate::Pool::checkout_until) passed. In the query
    /// phase the query was stopped with `KILL QUERY` and the connection stays usable.
    DeadlineExceeded {
        /// What was being waited for.
        phase: Phase,
    },
}

/// Why an [`Error::Column`] could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnProblem {
    /// The row has no such column (a name is compared exactly, case included).
    Missing {
        /// The names of the columns the row has, in order.
        columns: Vec<String>,
    },
    /// The value is NULL and the Rust type has no NULL: read it as `Option<T>`.
    Null,
    /// The value does not convert to the Rust type (text into a number, a number out
    /// of the type's range, a TIME of more than 24 hours into a time of day).
    WrongType {
        /// The column's SQL type as the server declared it, e.g. `VARCHAR`, `BIGINT`.
        sql_type: String,
    },
    /// The value was moved out already by an earlier
    /// [`RowExt::try_take`](crate::RowExt::try_take) of the same column.
    Taken,
}

/// What a [`Error::DeadlineExceeded`] was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// A free connection from the pool.
    CheckoutWait,
    /// Opening a connection (TCP, handshake, authentication).
    Connect,
    /// A query's answer.
    Query,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::CheckoutWait => "waiting for a pooled connection",
            Phase::Connect => "connecting",
            Phase::Query => "waiting for the query",
        })
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Server error codes that mean "the server is going away or full", not "your query is wrong".
const UNAVAILABLE_CODES: &[u16] = &[
    1040, // ER_CON_COUNT_ERROR: too many connections
    1053, // ER_SERVER_SHUTDOWN
    1077, // ER_NORMAL_SHUTDOWN
    1079, // ER_SHUTDOWN_COMPLETE
    1152, // ER_ABORTING_CONNECTION
    1927, // ER_CONNECTION_KILLED (MariaDB)
    2002, 2003, 2006, 2013, // client-side codes reported by the `mysql` crate
];

impl Error {
    /// True when the database cannot serve right now (down, refused, restarting,
    /// too many connections, pool exhausted): map it to HTTP 503. False for
    /// errors of the request itself (syntax, constraint, parameters): 500; and for
    /// [`Error::Cancelled`] and [`Error::DeadlineExceeded`], which the request's own
    /// cancellation or deadline caused (the caller knows why: 499 or 504).
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Io(_)
            | Error::ConnectTimeout
            | Error::PoolTimeout { .. }
            | Error::WorkerGone => true,
            Error::Server { code, .. } => UNAVAILABLE_CODES.contains(code),
            _ => false,
        }
    }

    /// True when the connection that produced this error must not be reused.
    pub fn poisons_connection(&self) -> bool {
        matches!(
            self,
            Error::Io(_) | Error::Protocol(_) | Error::ConnectTimeout | Error::WorkerGone
        ) || matches!(self, Error::Server { code, .. } if UNAVAILABLE_CODES.contains(code))
    }

    /// The server's error number, if the server produced this error.
    pub fn server_code(&self) -> Option<u16> {
        match self {
            Error::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol(what.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Server {
                code,
                state,
                message,
            } => write!(f, "database error {code} ({state}): {message}"),
            Error::Io(e) => write!(f, "database connection failed: {e}"),
            Error::Protocol(what) => write!(f, "database protocol error: {what}"),
            Error::ConnectTimeout => f.write_str(
                "timed out connecting to the database (is it running and reachable? \
                 raise connect_timeout if it is slow)",
            ),
            Error::QueryTimeout => {
                f.write_str("query ran past query_timeout and was killed with KILL QUERY")
            }
            Error::PoolTimeout { waited } => write!(
                f,
                "no database connection became free within {waited:?}: \
                 the pool is saturated (raise the pool size or wait_timeout)"
            ),
            Error::PoolTooBig {
                pool,
                max_connections,
            } => write!(
                f,
                "a pool of {pool} connections does not fit the server's max_connections = \
                 {max_connections} (one more is kept free for KILL QUERY): lower the pool size \
                 to at most {} or raise max_connections \
                 (SET GLOBAL max_connections = {}; or mariadbd --max-connections={})",
                max_connections.saturating_sub(KILL_HEADROOM),
                pool + CONNECTION_HEADROOM,
                pool + CONNECTION_HEADROOM
            ),
            Error::Params(what) => write!(f, "bad statement parameters: {what}"),
            Error::Url(what) => write!(
                f,
                "bad database URL: {what} (expected mysql://user:password@IP:port/database)"
            ),
            Error::Launch(what) => write!(f, "could not start the private MariaDB: {what}"),
            Error::Convert(what) => write!(f, "value conversion failed: {what}"),
            Error::Column {
                column,
                rust_type,
                problem,
            } => match problem {
                ColumnProblem::Missing { columns } => {
                    write!(
                        f,
                        "no column {column} to read as `{rust_type}`: the row's columns are "
                    )?;
                    if columns.is_empty() {
                        return f.write_str("none");
                    }
                    for (i, name) in columns.iter().enumerate() {
                        let comma = if i == 0 { "" } else { ", " };
                        write!(f, "{comma}`{name}`")?;
                    }
                    Ok(())
                }
                ColumnProblem::Null => write!(
                    f,
                    "column {column} is NULL, which `{rust_type}` cannot hold: read it as \
                     `Option<{rust_type}>`"
                ),
                ColumnProblem::WrongType { sql_type } => write!(
                    f,
                    "column {column} ({sql_type}) holds a value that does not convert to \
                     `{rust_type}`"
                ),
                ColumnProblem::Taken => write!(
                    f,
                    "column {column} was moved out of the row already, so it cannot be read \
                     as `{rust_type}` again"
                ),
            },
            Error::WorkerGone => f.write_str("the database worker thread is gone"),
            Error::Cancelled => f.write_str("the query was cancelled (KILL QUERY)"),
            Error::DeadlineExceeded { phase } => {
                write!(f, "the request's deadline passed while {phase}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}
