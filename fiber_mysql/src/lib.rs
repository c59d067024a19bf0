//! A MySQL/MariaDB client for the `may` coroutine runtime: code written in
//! blocking style (`conn.query("select sleep(1)")`) parks only its fiber,
//! and the worker thread runs others meanwhile.
//!
//! Layout, one idea per file, from the bottom up: each imports only files listed
//! before it (the workspace's `tests/source_rules.rs` fails on an import cycle).
//! - `headroom`: the server connections a pool needs beyond its size;
//! - `stream`: the socket under a connection (TCP on the carrier, or a Unix socket);
//! - `framing`: packets over the socket, read in place and written in batches;
//! - `stmt_cache`: a connection's prepared statements, found by their SQL;
//! - `session`: whether a session changed, from the server's reports, and when a
//!   connection is reset before reuse ([`ResetReason`]);
//! - [`error`]: the one error type, with [`Error::is_unavailable`] for 503-vs-500;
//! - [`opts`]: connection options and `mysql://` URLs;
//! - `auth`: mysql_native_password and caching_sha2_password exchanges;
//! - `private_dir`: the private server's 0700 template and data directories, checked
//!   before use;
//! - `conn`: TCP, handshake, packet I/O, timeouts, poisoning ([`Conn`]);
//! - `accounts`: who may log in to the private server (no passwordless account over
//!   TCP);
//! - `killer`: the pool's side channel for `KILL QUERY`: its connections, opened
//!   ahead on the server's `extra_port` when it has one, and the turn kills take;
//! - `cancel`: stopping a running query from outside ([`CancelHandle`]), cutting off
//!   one whose KILL is slow;
//! - `row`: one column of a row read as a Rust type by name or position, with an error
//!   naming the column and the type ([`RowExt::try_get`], [`ColumnProblem`]);
//! - `query`: COM_QUERY, prepared statements, result sets, query timeout ([`QueryResult`]);
//! - `from_row`: a whole row into a struct (`#[derive(FromRow)]`, by column name) or a
//!   tuple (by position) ([`FromRow`], [`QueryResult::rows_as`]);
//! - [`launcher`]: a private MariaDB for the demo and tests ([`launcher::MariaDb`]);
//! - `testing` (feature `testing`): the shared test server, for tests only;
//! - `threads` (feature `threads`): the comparison driver, `mysql::Conn` on one OS
//!   thread per connection;
//! - [`pool`]: FIFO pool over either driver ([`Pool`], [`PooledConn`], [`Driver`]);
//! - `transaction`: `conn.transaction(|tx| ..)` ([`Transaction`]);
//! - `queryable`: the statements and typed helpers that a [`Conn`], a [`PooledConn`]
//!   (also as the `Lent` of [`Pool::checkout`]) and a [`Transaction`] share, so that one
//!   helper takes any of them ([`Queryable`]).
//!
//! Protocol parts (packets, scrambles, rows and values) come from
//! mysql_common 0.37, the version the `mysql` crate 28 uses, so one copy builds.
//! Only the types our API takes and returns are re-exported here ([`Row`], [`Value`],
//! [`Params`], [`Column`] and the value conversion traits); the protocol crate itself
//! is not, so its packets and framing are no part of this crate's API. Rows convert
//! through this crate's own [`FromRow`] (mysql_common's trait of that name panics or
//! reports a failure without its column, and is not re-exported).
//!
//! ```no_run
//! use fiber_mysql::{FromRow, Queryable, RowExt};
//!
//! #[derive(FromRow)]
//! struct Widget {
//!     id: u64,
//!     name: String,
//!     price_cents: Option<i64>,
//! }
//!
//! # fn f(pool: &fiber_mysql::Pool) -> fiber_mysql::Result<()> {
//! let mut conn = pool.checkout()?;
//! let cheap: Vec<Widget> = conn.exec_as("SELECT * FROM widgets WHERE price_cents < ?", (500,))?;
//! let one: Option<Widget> = conn.exec_first("SELECT * FROM widgets WHERE id = ?", (7,))?;
//! let rows = conn.query("SELECT id, name FROM widgets")?.rows;
//! let name: String = rows[0].try_get("name")?;
//! # Ok(()) }
//! ```
//!
//! ## Features
//! - `threads`: [`Driver`]'s `Threads` variant, which builds the `mysql` crate.
//! - `time`: DATETIME, TIMESTAMP and DATE columns read as `time::PrimitiveDateTime` and
//!   `time::Date`, TIME as `time::Time` (a time of day) or `time::Duration` (any TIME,
//!   negative or past 24 hours), and those types bind as parameters; the `time` crate
//!   is re-exported as `fiber_mysql::time`.
//! - `testing`: the shared test server (`testing::test_database_opts`) and
//!   `launcher::MariaDb::admin_opts`, for tests only.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accounts;
mod auth;
mod cancel;
mod conn;
pub mod error;
mod framing;
mod from_row;
mod headroom;
mod killer;
pub mod launcher;
pub mod opts;
mod permits;
pub mod pool;
mod private_dir;
mod query;
mod queryable;
mod row;
mod session;
mod stmt_cache;
mod stream;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "threads")]
mod threads;
mod transaction;

pub use cancel::{
    CancelHandle, KILL_ANSWER_TIMEOUT, KILL_ATTEMPTS, KILL_CONNECTIONS, KILL_CONNECT_TIMEOUT,
    KILL_PATIENCE, KILL_RETRY_AFTER, KILL_SETTLE_TIMEOUT, KILL_TURN, KILL_WAIT,
};
pub use conn::{Conn, RESET_TIMEOUT};
pub use error::{ColumnProblem, Error, Phase, Result};
/// `#[derive(FromRow)]`: a struct with named fields read from a row by column name
/// (see the trait [`FromRow`]).
pub use fiber_mysql_derive::FromRow;
pub use from_row::FromRow;
/// Column definitions of a result ([`QueryResult::columns`]) and their types.
pub use mysql_common::constants::ColumnType;
pub use mysql_common::packets::Column;
/// Statement parameters: `()`, a tuple `(a, b)`, or `Vec<Value>`.
pub use mysql_common::params::Params;
/// Conversions between Rust values and [`Value`]s.
pub use mysql_common::prelude::{FromValue, ToValue};
/// One row of a result: `row.try_get::<i64>("id")`, `row.try_get::<Option<String>>(1)`
/// ([`RowExt`]), or the whole row with [`FromRow`].
pub use mysql_common::row::Row;
/// The `time` crate, whose types DATETIME, TIMESTAMP, DATE and TIME columns read into
/// (feature `time`).
#[cfg(feature = "time")]
pub use mysql_common::time;
pub use mysql_common::value::convert::FromValueError;
/// One SQL value (what a parameter or a column holds).
pub use mysql_common::value::Value;
pub use opts::Opts;
pub use pool::{Driver, Pool, PoolConfig, PoolStats, PooledConn, CHECKOUT_STACK_MARGIN};
pub use query::{QueryResult, PIPELINE_BYTES, PIPELINE_STATEMENTS, STMT_CACHE_PER_CONN};
pub use queryable::Queryable;
pub use row::{ColumnIndex, RowExt};
pub use session::ResetReason;
pub use transaction::Transaction;
