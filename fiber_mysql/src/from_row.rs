//! A whole row read into a Rust value: the [`FromRow`] trait, its derive for structs
//! (by column name) and its impls for tuples (by position), and
//! [`QueryResult::rows_as`], which reads every row of a result.
//!
//! Every failure is the [`Error::Column`] of the first column that did not read
//! (`row.rs`): which column, which Rust type, and why.

use mysql_common::prelude::FromValue;
use mysql_common::row::Row;

use crate::error::Result;
use crate::query::QueryResult;
use crate::row::RowExt;

/// A Rust value made from one row of a result.
///
/// Derive it for a struct with named fields: each field reads the column of its name
/// (`#[fiber_mysql(rename = "column")]` names another), converted to the field's type;
/// NULL needs an `Option` field. Columns no field names are ignored, so `SELECT *`
/// reads into a struct of some of its columns. Tuples read columns by position:
/// `(i64, String)` is the first two columns.
///
/// ```no_run
/// use fiber_mysql::{FromRow, Queryable};
///
/// #[derive(Debug, FromRow)]
/// struct User {
///     id: i64,
///     name: String,
///     #[fiber_mysql(rename = "nick")]
///     nickname: Option<String>, // NULL reads as None
/// }
///
/// # fn f(conn: &mut fiber_mysql::Conn) -> fiber_mysql::Result<()> {
/// let users: Vec<User> = conn.exec_as("SELECT id, name, nick FROM users WHERE id > ?", (0,))?;
/// let first: Option<(i64, String)> = conn.query_first("SELECT id, name FROM users")?;
/// # Ok(()) }
/// ```
///
/// A column the row lacks, a NULL into a field that is no `Option`, or a value that
/// does not convert to the field's type fail with an [`Error::Column`](crate::Error::Column)
/// such as "column `age` is NULL, which `i64` cannot hold: read it as `Option<i64>`".
///
/// The derived code names this crate as `::fiber_mysql`. Code that reaches it under
/// another path (through a crate that re-exports it, without depending on it) says
/// which: `#[fiber_mysql(crate = "fiber_web::mysql")]` on the struct.
pub trait FromRow: Sized {
    /// Reads `row`, moving its values out.
    fn from_row(row: Row) -> Result<Self>;
}

impl QueryResult {
    /// Every row read as `T` ([`FromRow`]), in order; the first row that does not read
    /// is the error. The other fields (counts, [`QueryResult::more`]) are dropped.
    pub fn rows_as<T: FromRow>(self) -> Result<Vec<T>> {
        self.rows.into_iter().map(T::from_row).collect()
    }
}

/// `FromRow` for the tuples of each listed arity, each element reading the column at
/// its position.
macro_rules! tuple_from_row {
    ($(($($t:ident $i:tt),+))+) => {$(
        impl<$($t: FromValue),+> FromRow for ($($t,)+) {
            fn from_row(mut row: Row) -> Result<Self> {
                Ok(($(row.try_take::<$t>($i as usize)?,)+))
            }
        }
    )+};
}

tuple_from_row! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
    (A 0, B 1, C 2, D 3, E 4)
    (A 0, B 1, C 2, D 3, E 4, F 5)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11)
}
