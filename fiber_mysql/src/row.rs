//! One column of a [`Row`] read as a Rust type, by name or by position, with an error
//! that names the column and the type ([`RowExt::try_get`], [`RowExt::try_take`]).
//!
//! mysql_common's own `Row::get` returns `None` for a missing column and panics when
//! the value does not convert ("Could not retrieve `i64`", for a NULL), and
//! `Row::get_opt` returns the value that failed without the column that held it.
//! Here every failure is an [`Error::Column`]: the column (by the name or position the
//! caller gave, with its name), the Rust type asked for, and a [`ColumnProblem`]
//! saying what was wrong (missing, NULL, another type, moved out already).

use std::any::type_name;

use mysql_common::constants::{ColumnFlags, ColumnType};
use mysql_common::packets::Column;
use mysql_common::prelude::FromValue;
use mysql_common::row::Row;
use mysql_common::value::Value;

use crate::error::{ColumnProblem, Error, Result};

/// MySQL's number for the `binary` character set: a string column with it holds
/// bytes (`VARBINARY`, `BLOB`), with any other its text (`VARCHAR`, `TEXT`).
const BINARY_CHARSET: u16 = 63;

/// What names a column of a row: its name (`&str`, compared exactly, case included)
/// or its position from 0 (`usize`). Implemented for those two only.
pub trait ColumnIndex: sealed::Index {}

impl ColumnIndex for &str {}
impl ColumnIndex for usize {}

mod sealed {
    use mysql_common::packets::Column;

    /// The methods behind [`super::ColumnIndex`], out of the public API's reach.
    pub trait Index {
        /// The column's position among `columns`, if the row has it.
        fn position(&self, columns: &[Column]) -> Option<usize>;
        /// How an error names the column: `` `age` ``, or `` 2 (`age`) ``.
        fn describe(&self, columns: &[Column]) -> String;
    }

    impl Index for &str {
        fn position(&self, columns: &[Column]) -> Option<usize> {
            columns.iter().position(|c| c.name_ref() == self.as_bytes())
        }

        fn describe(&self, _: &[Column]) -> String {
            format!("`{self}`")
        }
    }

    impl Index for usize {
        fn position(&self, columns: &[Column]) -> Option<usize> {
            (*self < columns.len()).then_some(*self)
        }

        fn describe(&self, columns: &[Column]) -> String {
            match columns.get(*self) {
                Some(c) => format!("{self} (`{}`)", c.name_str()),
                None => self.to_string(),
            }
        }
    }
}

/// Reading a [`Row`]'s columns as Rust types with errors that name the column and the
/// type: import it (`use fiber_mysql::RowExt;`) and call `row.try_get::<T>(column)`.
///
/// ```no_run
/// use fiber_mysql::RowExt;
/// # fn f(conn: &mut fiber_mysql::Conn) -> fiber_mysql::Result<()> {
/// let result = conn.exec("SELECT id, name, nickname FROM users WHERE id = ?", (7,))?;
/// for row in &result.rows {
///     let id: i64 = row.try_get("id")?;
///     let name = row.try_get::<String>(1)?;
///     let nickname: Option<String> = row.try_get("nickname")?; // NULL is None
/// }
/// # Ok(()) }
/// ```
pub trait RowExt: sealed_row::Sealed {
    /// The value of `column` (a name or a position from 0) converted to `T`, or an
    /// [`Error::Column`] naming the column and `T`: [`ColumnProblem::Missing`] (with
    /// the columns the row has), [`ColumnProblem::Null`] when `T` has no NULL (ask for
    /// `Option<T>`), [`ColumnProblem::WrongType`] with the column's SQL type. The
    /// value is copied; [`RowExt::try_take`] moves it out instead.
    fn try_get<T: FromValue>(&self, column: impl ColumnIndex) -> Result<T>;

    /// [`RowExt::try_get`] that moves the value out of the row instead of copying it
    /// (a long string is not copied); a later read of the same column fails with
    /// [`ColumnProblem::Taken`].
    fn try_take<T: FromValue>(&mut self, column: impl ColumnIndex) -> Result<T>;
}

mod sealed_row {
    /// Only [`mysql_common::row::Row`] reads its columns through [`super::RowExt`].
    pub trait Sealed {}
    impl Sealed for mysql_common::row::Row {}
}

impl RowExt for Row {
    fn try_get<T: FromValue>(&self, column: impl ColumnIndex) -> Result<T> {
        let at = find::<T>(self, &column)?;
        match self.as_ref(at) {
            Some(value) => convert::<T>(self, &column, at, value.clone()),
            None => Err(column_error::<T>(self, &column, ColumnProblem::Taken)),
        }
    }

    fn try_take<T: FromValue>(&mut self, column: impl ColumnIndex) -> Result<T> {
        let at = find::<T>(self, &column)?;
        match self.take::<Value, usize>(at) {
            Some(value) => convert::<T>(self, &column, at, value),
            None => Err(column_error::<T>(self, &column, ColumnProblem::Taken)),
        }
    }
}

/// The position of `column` in `row`, or the error naming what the row has.
fn find<T>(row: &Row, column: &impl ColumnIndex) -> Result<usize> {
    let columns = row.columns_ref();
    column.position(columns).ok_or_else(|| {
        let names = columns.iter().map(|c| c.name_str().into_owned()).collect();
        column_error::<T>(row, column, ColumnProblem::Missing { columns: names })
    })
}

fn convert<T: FromValue>(
    row: &Row,
    column: &impl ColumnIndex,
    at: usize,
    value: Value,
) -> Result<T> {
    T::from_value_opt(value).map_err(|e| {
        let problem = match e.0 {
            Value::NULL => ColumnProblem::Null,
            _ => ColumnProblem::WrongType {
                sql_type: sql_type(&row.columns_ref()[at]),
            },
        };
        column_error::<T>(row, column, problem)
    })
}

fn column_error<T>(row: &Row, column: &impl ColumnIndex, problem: ColumnProblem) -> Error {
    Error::Column {
        column: column.describe(row.columns_ref()),
        rust_type: short_type_name(type_name::<T>()),
        problem,
    }
}

/// `T`'s name without module paths: `core::option::Option<alloc::string::String>`
/// becomes `Option<String>`.
pub(crate) fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut word = String::new();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(&word));
    out
}

/// The SQL name of a column's declared type, as a reader of the schema knows it.
fn sql_type(column: &Column) -> String {
    let binary = column.character_set() == BINARY_CHARSET;
    let unsigned = column.flags().contains(ColumnFlags::UNSIGNED_FLAG);
    let name = match column.column_type() {
        ColumnType::MYSQL_TYPE_TINY if unsigned => "TINYINT UNSIGNED",
        ColumnType::MYSQL_TYPE_SHORT if unsigned => "SMALLINT UNSIGNED",
        ColumnType::MYSQL_TYPE_INT24 if unsigned => "MEDIUMINT UNSIGNED",
        ColumnType::MYSQL_TYPE_LONG if unsigned => "INT UNSIGNED",
        ColumnType::MYSQL_TYPE_LONGLONG if unsigned => "BIGINT UNSIGNED",
        ColumnType::MYSQL_TYPE_TINY => "TINYINT",
        ColumnType::MYSQL_TYPE_SHORT => "SMALLINT",
        ColumnType::MYSQL_TYPE_INT24 => "MEDIUMINT",
        ColumnType::MYSQL_TYPE_LONG => "INT",
        ColumnType::MYSQL_TYPE_LONGLONG => "BIGINT",
        ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL => "DECIMAL",
        ColumnType::MYSQL_TYPE_FLOAT => "FLOAT",
        ColumnType::MYSQL_TYPE_DOUBLE => "DOUBLE",
        ColumnType::MYSQL_TYPE_VARCHAR | ColumnType::MYSQL_TYPE_VAR_STRING if binary => "VARBINARY",
        ColumnType::MYSQL_TYPE_VARCHAR | ColumnType::MYSQL_TYPE_VAR_STRING => "VARCHAR",
        ColumnType::MYSQL_TYPE_STRING if binary => "BINARY",
        ColumnType::MYSQL_TYPE_STRING => "CHAR",
        ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
            if binary =>
        {
            "BLOB"
        }
        ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB => "TEXT",
        ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE => "DATE",
        ColumnType::MYSQL_TYPE_TIME | ColumnType::MYSQL_TYPE_TIME2 => "TIME",
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_DATETIME2 => "DATETIME",
        ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => "TIMESTAMP",
        ColumnType::MYSQL_TYPE_YEAR => "YEAR",
        ColumnType::MYSQL_TYPE_BIT => "BIT",
        ColumnType::MYSQL_TYPE_JSON => "JSON",
        ColumnType::MYSQL_TYPE_ENUM => "ENUM",
        ColumnType::MYSQL_TYPE_SET => "SET",
        ColumnType::MYSQL_TYPE_NULL => "NULL",
        other => {
            let name = format!("{other:?}");
            return name.trim_start_matches("MYSQL_TYPE_").to_string();
        }
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn type_names_lose_their_module_paths() {
        assert_eq!(short_type_name("i64"), "i64");
        assert_eq!(
            short_type_name("core::option::Option<alloc::string::String>"),
            "Option<String>"
        );
        assert_eq!(
            short_type_name("(i64, alloc::vec::Vec<u8>, time::date::Date)"),
            "(i64, Vec<u8>, Date)"
        );
        assert_eq!(short_type_name("&str"), "&str");
    }
}
