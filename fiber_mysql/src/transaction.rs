//! `conn.transaction(|tx| ..)`: a transaction that commits when the closure returns
//! `Ok`, and rolls back when it returns `Err` (handed to the caller unchanged) or
//! panics (the panic goes on after the rollback).
//!
//! What else ends one:
//! - A fiber that overflows its stack mid-transaction is abandoned, not unwound: no
//!   rollback runs here. A checkout from [`Pool::checkout`](crate::Pool::checkout)
//!   lives in a `fiber_pool::Lent`, whose owner then ends the server session by
//!   shutting its socket down through a second descriptor (the connection itself is
//!   leaked, untouched: see `pool.rs`, "Abandoned checkouts"), and the server rolls
//!   back the transaction of a session that ended (`tests/transactions.rs` checks it).
//! - A failed `ROLLBACK` (a broken connection) is not reported over the closure's own
//!   outcome: the give-back closes a broken connection, or resets one that still has
//!   a transaction open (`session.rs`).
//! - A failed `COMMIT` is returned; the server has rolled the transaction back (or
//!   the connection is gone, and with it the transaction).

use std::panic::{self, AssertUnwindSafe};

use crate::cancel::CancelHandle;
use crate::error::{Error, Result};
use crate::pool::PooledConn;
use crate::query::QueryResult;
use crate::Params;

/// The connection inside [`PooledConn::transaction`]: statements only, so that the
/// closure cannot start a second transaction (which would commit the first).
#[derive(Debug)]
pub struct Transaction<'a> {
    conn: &'a mut PooledConn,
}

impl Transaction<'_> {
    /// See [`PooledConn::query`].
    pub fn query(&mut self, sql: &str) -> Result<QueryResult> {
        self.conn.query(sql)
    }

    /// See [`PooledConn::exec`].
    pub fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        self.conn.exec(sql, params)
    }

    /// See [`PooledConn::exec_many`].
    pub fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>> {
        self.conn.exec_many(sql, params)
    }

    /// See [`PooledConn::connection_id`].
    pub fn connection_id(&self) -> Option<u32> {
        self.conn.connection_id()
    }

    /// See [`PooledConn::cancel_handle`].
    pub fn cancel_handle(&mut self) -> CancelHandle {
        self.conn.cancel_handle()
    }
}

impl PooledConn {
    /// Runs `f` in a transaction: `START TRANSACTION`, then `COMMIT` if `f` returns
    /// `Ok`, `ROLLBACK` if it returns `Err` (that error is returned as it is) or
    /// panics (the panic is resumed after the rollback). Errors of this crate convert
    /// into `E` with `From`, so `E` may be [`Error`] itself or an application's error.
    /// Works through a `fiber_pool::Lent<PooledConn>` too (it derefs to this).
    ///
    /// ```no_run
    /// # fn f(pool: &fiber_mysql::Pool) -> fiber_mysql::Result<()> {
    /// let mut conn = pool.checkout()?;
    /// let id = conn.transaction(|tx| {
    ///     let id = tx.exec("INSERT INTO orders (item) VALUES (?)", ("widget",))?.last_insert_id;
    ///     tx.exec("UPDATE stock SET n = n - 1 WHERE item = ?", ("widget",))?;
    ///     Ok::<_, fiber_mysql::Error>(id)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn transaction<T, E>(
        &mut self,
        f: impl FnOnce(&mut Transaction<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<Error>,
    {
        self.query("START TRANSACTION")?;
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            f(&mut Transaction { conn: &mut *self })
        }));
        match outcome {
            Ok(Ok(value)) => {
                self.query("COMMIT")?;
                Ok(value)
            }
            Ok(Err(e)) => {
                self.roll_back();
                Err(e)
            }
            Err(panic) => {
                self.roll_back();
                panic::resume_unwind(panic)
            }
        }
    }

    /// `ROLLBACK`; its failure is left to the give-back (see the module comment).
    fn roll_back(&mut self) {
        let _ = self.query("ROLLBACK");
    }
}
