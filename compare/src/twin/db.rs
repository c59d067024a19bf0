//! The twin's MySQL pool: `mysql_async` with exactly `--db-pool` connections, opened at
//! start like fiber_mysql's, a wait timeout that becomes a 503, and a query timeout
//! that stops the query with `KILL QUERY`, as fiber_mysql does.
//!
//! Errors are turned into [`fiber_mysql::Error`], so that [`fiberstack::app::db_error`]
//! answers with the same status (503 when the database is unavailable, else 500) and
//! the same message on both runtimes.

use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_mysql::pool::CONNECT_PARALLELISM;
use fiber_mysql::Error;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Params, PoolConstraints, PoolOpts};

use crate::twin::gauge::Held;

/// What the pool counts, for `/stats`.
#[derive(Debug, Default)]
struct Counters {
    in_use: AtomicUsize,
    waiting: AtomicUsize,
    total_waits: AtomicU64,
    total_wait_us: AtomicU64,
}

/// A pool of `size` connections.
pub struct Pool {
    pool: mysql_async::Pool,
    /// Where a `KILL QUERY` connection goes.
    opts: mysql_async::Opts,
    size: usize,
    wait_timeout: Duration,
    query_timeout: Duration,
    counters: Arc<Counters>,
}

/// A connection taken from the pool; it goes back when dropped.
pub struct Conn {
    conn: mysql_async::Conn,
    counters: Arc<Counters>,
}

impl Deref for Conn {
    type Target = mysql_async::Conn;
    fn deref(&self) -> &mysql_async::Conn {
        &self.conn
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut mysql_async::Conn {
        &mut self.conn
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.counters.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

/// mysql_async's options for the server `opts` names, with a pool of exactly `size`.
///
/// `prefer_socket(false)`: by default mysql_async reconnects to 127.0.0.1 over the
/// Unix socket, which would compare a socket client with a TCP one. No
/// `COM_RESET_CONNECTION` on every return to the pool: fiber_mysql sends none either.
pub fn async_opts(opts: &fiber_mysql::Opts, size: usize) -> mysql_async::Opts {
    // min <= max holds (they are equal), so the constraints always exist.
    let constraints = PoolConstraints::new(size, size).expect("min equals max");
    mysql_async::OptsBuilder::default()
        .ip_or_hostname(opts.host.clone())
        .tcp_port(opts.port)
        .user(Some(opts.user.clone()))
        .pass((!opts.password.is_empty()).then(|| opts.password.clone()))
        .db_name(opts.db.clone())
        .prefer_socket(false)
        .tcp_nodelay(true)
        .pool_opts(
            PoolOpts::default()
                .with_constraints(constraints)
                .with_reset_connection(false),
        )
        .into()
}

impl Pool {
    /// Open the pool: all `size` connections, [`CONNECT_PARALLELISM`] at a time, each
    /// within `opts.connect_timeout` (mysql_async has no connect timeout of its own).
    pub async fn open(
        opts: &fiber_mysql::Opts,
        size: usize,
        wait_timeout: Duration,
        query_timeout: Duration,
    ) -> Result<Pool, Error> {
        let async_opts = async_opts(opts, size);
        let pool = mysql_async::Pool::new(async_opts.clone());
        let connect_timeout = opts.connect_timeout;
        let opened: Vec<mysql_async::Conn> = stream::iter(0..size)
            .map(|_| {
                let pool = pool.clone();
                async move {
                    match tokio::time::timeout(connect_timeout, pool.get_conn()).await {
                        Ok(conn) => conn.map_err(to_error),
                        Err(_) => Err(Error::ConnectTimeout),
                    }
                }
            })
            .buffer_unordered(CONNECT_PARALLELISM)
            .try_collect()
            .await?;
        // Dropping them hands them to the pool, which keeps `size` idle (min = max).
        drop(opened);
        Ok(Pool {
            pool,
            opts: async_opts,
            size,
            wait_timeout,
            query_timeout,
            counters: Arc::default(),
        })
    }

    /// A connection, or [`Error::PoolTimeout`] after `wait_timeout`.
    pub async fn get(&self) -> Result<Conn, Error> {
        let c = &self.counters;
        // Given back even if this future is dropped while it waits (a client gone).
        let (waiting, _) = Held::enter(&c.waiting);
        let started = Instant::now();
        let got = tokio::time::timeout(self.wait_timeout, self.pool.get_conn()).await;
        let waited = started.elapsed();
        drop(waiting);
        c.total_waits.fetch_add(1, Ordering::Relaxed);
        c.total_wait_us
            .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        match got {
            Ok(Ok(conn)) => {
                c.in_use.fetch_add(1, Ordering::AcqRel);
                Ok(Conn {
                    conn,
                    counters: Arc::clone(c),
                })
            }
            Ok(Err(e)) => Err(to_error(e)),
            Err(_) => Err(Error::PoolTimeout { waited }),
        }
    }

    /// Run a prepared statement on a pooled connection and collect its rows; a query
    /// past `query_timeout` is killed and is [`Error::QueryTimeout`].
    pub async fn exec<T, P>(&self, sql: &'static str, params: P) -> Result<Vec<T>, Error>
    where
        T: FromRow + Send + 'static,
        P: Into<Params> + Send,
    {
        let mut conn = self.get().await?;
        // A query whose future is dropped before its answer (past `query_timeout`, or
        // the request's client gone: the server drops its handler) leaves the
        // connection mid-result, which mysql_async discards; the server would go on
        // running it: the guard stops it.
        let mut unanswered = KillOnDrop {
            opts: Some(self.opts.clone()),
            id: conn.id(),
        };
        let answered = tokio::time::timeout(self.query_timeout, conn.exec(sql, params)).await;
        match answered {
            Ok(rows) => {
                unanswered.opts = None;
                rows.map_err(to_error)
            }
            Err(_) => Err(Error::QueryTimeout),
        }
    }

    /// The pool's counters, as the fiber server's pool reports them (what the twin
    /// does not count, such as replaced connections, is 0).
    pub fn stats(&self) -> fiber_mysql::PoolStats {
        let c = &self.counters;
        let in_use = c.in_use.load(Ordering::Relaxed);
        fiber_mysql::PoolStats {
            size: self.size,
            in_use,
            idle: self.size.saturating_sub(in_use),
            waiting: c.waiting.load(Ordering::Relaxed),
            total_waits: c.total_waits.load(Ordering::Relaxed),
            total_wait_time: std::time::Duration::from_micros(
                c.total_wait_us.load(Ordering::Relaxed),
            ),
            ..fiber_mysql::PoolStats::default()
        }
    }

    /// Close every connection (waits for those in use to come back).
    pub async fn disconnect(&self) {
        let _ = self.pool.clone().disconnect().await;
    }
}

/// Stops connection `id`'s query with `KILL QUERY` when dropped armed (`opts` set).
struct KillOnDrop {
    opts: Option<mysql_async::Opts>,
    id: u32,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(opts) = self.opts.take() {
            tokio::spawn(kill_query(opts, self.id));
        }
    }
}

async fn kill_query(opts: mysql_async::Opts, id: u32) {
    if let Ok(mut conn) = mysql_async::Conn::new(opts).await {
        let _ = conn.query_drop(format!("KILL QUERY {id}")).await;
        let _ = conn.disconnect().await;
    }
}

/// The same error as fiber_mysql would have reported.
pub fn to_error(e: mysql_async::Error) -> Error {
    match e {
        mysql_async::Error::Server(e) => Error::Server {
            code: e.code,
            state: e.state,
            message: e.message,
        },
        mysql_async::Error::Io(e) => Error::Io(match e {
            mysql_async::IoError::Io(e) => e,
            #[allow(unreachable_patterns)] // TLS errors exist only with TLS features
            other => io::Error::other(other.to_string()),
        }),
        mysql_async::Error::Driver(
            e @ (mysql_async::DriverError::ConnectionClosed
            | mysql_async::DriverError::PoolDisconnected),
        ) => Error::Io(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            e.to_string(),
        )),
        mysql_async::Error::Url(e) => Error::Url(e.to_string()),
        other => Error::Protocol(other.to_string()),
    }
}
