//! The `threads` driver, for comparison: the `mysql` crate's blocking
//! `Conn`, each on a dedicated OS thread; the calling fiber sends a job over
//! a channel and parks on a may channel until the thread answers.
//!
//! It behaves like the native driver (same results, same typed errors, the
//! same `KILL QUERY` timeout) but costs an OS thread and two channel hops per
//! query, and `mysql` opens TCP itself (`prefer_socket(false)` keeps it from
//! switching to the Unix socket behind our back, see docs/FACTS.md).

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use may::sync::mpsc as may_mpsc;
use mysql::prelude::Queryable;
use mysql_common::params::Params;
use mysql_common::row::Row;

use crate::cancel::Killer;
use crate::error::{Error, Result};
use crate::opts::Opts;
use crate::query::{QueryResult, KILL_DRAIN_TIMEOUT};

/// Stack of each connection thread (the `mysql` crate needs little).
const THREAD_STACK: usize = 256 * 1024;

enum Job {
    Query(String),
    Exec(String, Params),
    Ping,
    Reset,
}

type Reply = may_mpsc::Sender<Result<QueryResult>>;

/// A `mysql::Conn` owned by its own thread.
pub struct ThreadConn {
    jobs: Option<std_mpsc::Sender<(Job, Reply)>>,
    opts: Opts,
    connection_id: u32,
    broken: bool,
    /// Where its `KILL QUERY` goes (the pool's side channel, or its own).
    pub(crate) killer: Arc<Killer>,
    /// The caller's deadline for every command (`PooledConn::set_deadline`).
    pub(crate) deadline: Option<std::time::Instant>,
}

impl std::fmt::Debug for ThreadConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadConn")
            .field("connection_id", &self.connection_id)
            .field("broken", &self.broken)
            .finish()
    }
}

impl ThreadConn {
    /// Starts the thread, which connects; waits (parking the fiber) for the outcome.
    pub fn connect(opts: &Opts) -> Result<ThreadConn> {
        let addr = opts.socket_addr()?;
        let builder = mysql::OptsBuilder::new()
            .ip_or_hostname(Some(addr.ip().to_string()))
            .tcp_port(addr.port())
            .user(Some(opts.user.clone()))
            .pass((!opts.password.is_empty()).then(|| opts.password.clone()))
            .db_name(opts.db.clone())
            .prefer_socket(false)
            .tcp_connect_timeout(Some(opts.connect_timeout))
            .read_timeout(Some(opts.read_timeout))
            .write_timeout(Some(opts.read_timeout));
        let (jobs, job_rx) = std_mpsc::channel::<(Job, Reply)>();
        let (ready_tx, ready_rx) = may_mpsc::channel::<Result<u32>>();
        thread::Builder::new()
            .name("fiber_mysql-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                let mut conn = match mysql::Conn::new(builder) {
                    Ok(conn) => conn,
                    Err(e) => {
                        let _ = ready_tx.send(Err(convert_error(e)));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(conn.connection_id()));
                // Ends when the ThreadConn (the only sender) is dropped.
                for (job, reply) in job_rx {
                    let _ = reply.send(run(&mut conn, job));
                }
            })
            .map_err(Error::Io)?;
        let wait = opts.connect_timeout + Duration::from_secs(1);
        let connection_id = match ready_rx.recv_timeout(wait) {
            Ok(result) => result?,
            Err(_) => return Err(Error::ConnectTimeout),
        };
        Ok(ThreadConn {
            jobs: Some(jobs),
            opts: opts.clone(),
            connection_id,
            broken: false,
            killer: Arc::new(Killer::new(opts, 1)),
            deadline: None,
        })
    }

    /// COM_QUERY through `mysql::Conn::query_iter`.
    pub fn query(&mut self, sql: &str) -> Result<QueryResult> {
        self.call(Job::Query(sql.to_string()))
    }

    /// A prepared statement through `mysql::Conn::exec_iter`.
    pub fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        let params = params.into();
        if let Params::Named(_) = params {
            return Err(Error::Params(
                "named parameters are not supported; use `?` placeholders".into(),
            ));
        }
        self.call(Job::Exec(sql.to_string(), params))
    }

    /// COM_PING.
    pub fn ping(&mut self) -> Result<()> {
        self.call(Job::Ping).map(drop)
    }

    /// `mysql::Conn::reset` (COM_RESET_CONNECTION, its statement cache cleared). This
    /// driver cannot see the server's session reports, so the pool resets it at every
    /// give-back, as the `mysql` crate's own pool does.
    pub fn reset(&mut self) -> Result<()> {
        let result = self.call(Job::Reset).map(drop);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// True once an I/O or protocol error (or a lost thread) made it unusable.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The server's id for this connection.
    pub fn connection_id(&self) -> u32 {
        self.connection_id
    }

    fn call(&mut self, job: Job) -> Result<QueryResult> {
        if self.broken {
            return Err(Error::WorkerGone);
        }
        if self
            .deadline
            .is_some_and(|d| d <= std::time::Instant::now())
        {
            return Err(Error::DeadlineExceeded {
                phase: crate::error::Phase::Query,
            });
        }
        let (reply, answer) = may_mpsc::channel();
        let sent = self.jobs.as_ref().map(|jobs| jobs.send((job, reply)));
        if !matches!(sent, Some(Ok(()))) {
            self.broken = true;
            return Err(Error::WorkerGone);
        }
        // The thread's own read timeout fires first without a query timeout.
        let mut limit = match self.opts.query_timeout {
            Some(t) => t,
            None => self.opts.read_timeout + Duration::from_secs(1),
        };
        let mut stop = Error::QueryTimeout;
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left <= limit {
                limit = left;
                stop = Error::DeadlineExceeded {
                    phase: crate::error::Phase::Query,
                };
            }
        }
        let can_kill = self.opts.query_timeout.is_some() || self.deadline.is_some();
        let result = match answer.recv_timeout(limit) {
            Ok(result) => result,
            Err(std_mpsc::RecvTimeoutError::Timeout) if can_kill => {
                // Same policy as the native driver: stop the query, keep the
                // connection if its answer arrives promptly.
                let killed = self.killer.kill_query(self.connection_id);
                let drained = answer.recv_timeout(KILL_DRAIN_TIMEOUT);
                if killed.is_err() || drained.is_err() {
                    // Still running: its KILL QUERY may have come before the command
                    // (dropped, see query.rs); a KILL CONNECTION is never dropped.
                    let _ = self.killer.kill_connection(self.connection_id);
                    self.broken = true;
                }
                return Err(stop);
            }
            Err(_) => Err(Error::WorkerGone),
        };
        if let Err(e) = &result {
            if e.poisons_connection() {
                self.broken = true;
            }
        }
        result
    }
}

impl Drop for ThreadConn {
    fn drop(&mut self) {
        // Closing the job channel ends the thread, which drops mysql::Conn
        // (COM_QUIT). We do not join: that could block a fiber's worker.
        self.jobs.take();
    }
}

fn run(conn: &mut mysql::Conn, job: Job) -> Result<QueryResult> {
    match job {
        Job::Query(sql) => {
            let result = conn.query_iter(sql).map_err(convert_error)?;
            collect(result)
        }
        Job::Exec(sql, params) => {
            let result = conn.exec_iter(sql, params).map_err(convert_error)?;
            collect(result)
        }
        Job::Ping => conn
            .ping()
            .map(|()| QueryResult::default())
            .map_err(convert_error),
        Job::Reset => conn
            .reset()
            .map(|()| QueryResult::default())
            .map_err(convert_error),
    }
}

fn collect<P: mysql::prelude::Protocol>(
    mut result: mysql::QueryResult<'_, '_, '_, P>,
) -> Result<QueryResult> {
    let mut sets = Vec::new();
    while let Some(mut set) = result.iter() {
        // The counts exist only before the set is consumed (the mysql crate
        // keeps the OK packet while "in an empty set").
        let mut one = QueryResult {
            columns: set.columns().as_ref().to_vec().into(),
            affected_rows: set.affected_rows(),
            last_insert_id: set.last_insert_id(),
            warnings: set.warnings(),
            info: set.info_str().into_owned(),
            ..QueryResult::default()
        };
        one.rows = set
            .by_ref()
            .collect::<std::result::Result<Vec<Row>, _>>()
            .map_err(convert_error)?;
        sets.push(one);
    }
    let mut first = if sets.is_empty() {
        QueryResult::default()
    } else {
        sets.remove(0)
    };
    first.more = sets;
    Ok(first)
}

/// The `mysql` crate's errors in our terms.
fn convert_error(e: mysql::Error) -> Error {
    use mysql::{DriverError, Error as M};
    match e {
        M::MySqlError(e) => Error::Server {
            code: e.code,
            state: e.state,
            message: e.message,
        },
        M::IoError(e) => Error::Io(e),
        M::CodecError(e) => Error::Protocol(e.to_string()),
        M::DriverError(DriverError::ConnectTimeout) => Error::ConnectTimeout,
        M::DriverError(DriverError::CouldNotConnect(Some((addr, what, kind)))) => {
            Error::Io(std::io::Error::new(kind, format!("{what} ({addr})")))
        }
        M::DriverError(DriverError::MismatchedStmtParams(want, got)) => Error::Params(format!(
            "the statement has {want} placeholders but {got} values were given"
        )),
        M::DriverError(e) => Error::Protocol(e.to_string()),
        M::UrlError(e) => Error::Url(e.to_string()),
        M::FromValueError(v) => Error::Convert(format!("{v:?}")),
        M::FromRowError(r) => Error::Convert(format!("{r:?}")),
    }
}
