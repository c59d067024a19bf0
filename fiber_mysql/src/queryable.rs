//! [`Queryable`]: what runs statements, whichever holds the connection: a [`Conn`], a
//! [`PooledConn`], the `fiber_pool::Lent<PooledConn>` that [`Pool::checkout`] returns,
//! or a [`Transaction`]. A helper that takes `&mut impl Queryable` takes each of them.
//!
//! The typed helpers ([`Queryable::query_as`], [`Queryable::exec_as`],
//! [`Queryable::query_first`], [`Queryable::exec_first`]) read rows with [`FromRow`]
//! (`from_row.rs`). Starting a transaction is not part of the trait: inside one, the
//! closure's [`Transaction`] must not start a second (which would commit the first).
//!
//! [`Pool::checkout`]: crate::Pool::checkout

use mysql_common::params::Params;

use crate::conn::Conn;
use crate::error::Result;
use crate::from_row::FromRow;
use crate::pool::PooledConn;
use crate::query::QueryResult;
use crate::transaction::Transaction;

/// Runs statements: implemented by [`Conn`], [`PooledConn`], the
/// `fiber_pool::Lent<PooledConn>` of [`Pool::checkout`](crate::Pool::checkout) and
/// [`Transaction`], so that one helper takes any of them.
///
/// ```no_run
/// use fiber_mysql::{FromRow, Queryable};
///
/// #[derive(FromRow)]
/// struct Widget {
///     id: u64,
///     name: String,
/// }
///
/// /// Adds a widget, whoever holds the connection; returns its id.
/// fn add(db: &mut impl Queryable, name: &str) -> fiber_mysql::Result<Option<u64>> {
///     Ok(db.exec("INSERT INTO widgets (name) VALUES (?)", (name,))?.last_insert_id)
/// }
///
/// fn find(db: &mut impl Queryable, id: u64) -> fiber_mysql::Result<Option<Widget>> {
///     db.exec_first("SELECT id, name FROM widgets WHERE id = ?", (id,))
/// }
///
/// # fn f(pool: &fiber_mysql::Pool) -> fiber_mysql::Result<()> {
/// let mut conn = pool.checkout()?;
/// add(&mut conn, "sprocket")?; // the checkout
/// conn.transaction(|tx| {
///     add(tx, "gear")?; // a transaction
///     find(tx, 7)
/// })?;
/// # Ok(()) }
/// ```
pub trait Queryable {
    /// Runs `sql` with COM_QUERY ([`Conn::query`]); never put user input in `sql`.
    fn query(&mut self, sql: &str) -> Result<QueryResult>;

    /// Runs one statement with `?` placeholders as a prepared statement ([`Conn::exec`]).
    fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult>;

    /// Runs the prepared statement once per set of values, pipelined: one round trip
    /// for them all ([`Conn::exec_many`]).
    fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>>;

    /// [`Queryable::query`], every row read as `T`.
    fn query_as<T: FromRow>(&mut self, sql: &str) -> Result<Vec<T>> {
        self.query(sql)?.rows_as()
    }

    /// [`Queryable::query`], its first row read as `T`, or `None` without rows. The
    /// whole result is read: say `LIMIT 1` when more rows could match.
    fn query_first<T: FromRow>(&mut self, sql: &str) -> Result<Option<T>> {
        first(self.query(sql)?)
    }

    /// [`Queryable::exec`], every row read as `T`.
    fn exec_as<T: FromRow>(&mut self, sql: &str, params: impl Into<Params>) -> Result<Vec<T>> {
        self.exec(sql, params)?.rows_as()
    }

    /// [`Queryable::exec`], its first row read as `T`, or `None` without rows. The
    /// whole result is read: say `LIMIT 1` when more rows could match.
    fn exec_first<T: FromRow>(
        &mut self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Option<T>> {
        first(self.exec(sql, params)?)
    }
}

/// The first row of `result` as `T`.
fn first<T: FromRow>(result: QueryResult) -> Result<Option<T>> {
    result.rows.into_iter().next().map(T::from_row).transpose()
}

impl Queryable for Conn {
    fn query(&mut self, sql: &str) -> Result<QueryResult> {
        Conn::query(self, sql)
    }

    fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        Conn::exec(self, sql, params)
    }

    fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>> {
        Conn::exec_many(self, sql, params)
    }
}

impl Queryable for PooledConn {
    fn query(&mut self, sql: &str) -> Result<QueryResult> {
        PooledConn::query(self, sql)
    }

    fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        PooledConn::exec(self, sql, params)
    }

    fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>> {
        PooledConn::exec_many(self, sql, params)
    }
}

/// The checkout of [`Pool::checkout`](crate::Pool::checkout) as it is, so that
/// `add(&mut conn)` needs no `&mut *conn`.
impl Queryable for fiber_pool::Lent<PooledConn> {
    fn query(&mut self, sql: &str) -> Result<QueryResult> {
        PooledConn::query(self, sql)
    }

    fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        PooledConn::exec(self, sql, params)
    }

    fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>> {
        PooledConn::exec_many(self, sql, params)
    }
}

impl Queryable for Transaction<'_> {
    fn query(&mut self, sql: &str) -> Result<QueryResult> {
        Transaction::query(self, sql)
    }

    fn exec(&mut self, sql: &str, params: impl Into<Params>) -> Result<QueryResult> {
        Transaction::exec(self, sql, params)
    }

    fn exec_many<P: Into<Params>>(
        &mut self,
        sql: &str,
        params: impl IntoIterator<Item = P>,
    ) -> Result<Vec<QueryResult>> {
        Transaction::exec_many(self, sql, params)
    }
}
