//! Rows into Rust values against a real MariaDB: a column by name or position
//! (`RowExt::try_get`). Each failure is provoked on purpose (NULL into `i64`, a missing
//! column, text into a number, a column read twice) over both protocols, and its error
//! must name the column and the Rust type.
mod common;

use fiber_mysql::{ColumnProblem, Conn, Error, QueryResult, Row, RowExt};

/// A table of three users, one with NULL age and nick; returns its name.
fn users(db: &mut Conn) -> String {
    let table = common::unique_table("rows");
    db.query(&format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, \
         age INT NULL, nick VARCHAR(40) NULL, score DOUBLE NOT NULL)"
    ))
    .unwrap();
    db.query(&format!(
        "INSERT INTO {table} VALUES (1, 'ada', 36, 'countess', 9.5), \
         (2, 'alan', 41, NULL, 8.0), (3, 'grace', NULL, NULL, 7.25)"
    ))
    .unwrap();
    table
}

/// The column, Rust type and problem of an `Error::Column`, and its message; panics
/// on any other outcome.
fn column_error<T: std::fmt::Debug>(
    r: fiber_mysql::Result<T>,
) -> (String, String, ColumnProblem, String) {
    match r {
        Err(e @ Error::Column { .. }) => {
            let message = e.to_string();
            let Error::Column {
                column,
                rust_type,
                problem,
            } = e
            else {
                unreachable!()
            };
            (column, rust_type, problem, message)
        }
        other => panic!("expected Error::Column, got {other:?}"),
    }
}

/// The same query over the text protocol (`query`) and the binary one (`exec`).
fn both_protocols(conn: &mut Conn, sql: &str) -> [QueryResult; 2] {
    [conn.query(sql).unwrap(), conn.exec(sql, ()).unwrap()]
}

#[test]
fn a_column_reads_by_name_and_by_position_over_both_protocols() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = users(&mut conn);
    let sql = format!("SELECT id, name, age, nick, score FROM {table} ORDER BY id");
    for result in both_protocols(&mut conn, &sql) {
        let row = &result.rows[0];
        assert_eq!(row.try_get::<i64>("id").unwrap(), 1);
        assert_eq!(row.try_get::<String>(1).unwrap(), "ada");
        assert_eq!(row.try_get::<Option<i32>>("age").unwrap(), Some(36));
        assert_eq!(row.try_get::<f64>("score").unwrap(), 9.5);
        let grace = &result.rows[2];
        assert_eq!(grace.try_get::<Option<i32>>("age").unwrap(), None);
        assert_eq!(grace.try_get::<Option<String>>(3).unwrap(), None);
    }
}

#[test]
fn null_into_a_type_without_null_names_the_column_and_the_type() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = users(&mut conn);
    let sql = format!("SELECT id, name, age FROM {table} WHERE id = 3");
    for result in both_protocols(&mut conn, &sql) {
        let row = &result.rows[0];
        let (column, rust_type, problem, message) = column_error(row.try_get::<i64>("age"));
        assert_eq!(
            (&*column, &*rust_type, problem),
            ("`age`", "i64", ColumnProblem::Null)
        );
        assert!(
            message.contains("`age`") && message.contains("`Option<i64>`"),
            "{message}"
        );
        // By position, the error says the name too.
        let (column, ..) = column_error(row.try_get::<i64>(2));
        assert_eq!(column, "2 (`age`)");
        // `scalar` reports the same way.
        let first = conn
            .query(&format!("SELECT age FROM {table} WHERE id = 3"))
            .unwrap();
        let (column, rust_type, problem, _) = column_error(first.scalar::<u32>());
        assert_eq!(
            (&*column, &*rust_type, problem),
            ("0 (`age`)", "u32", ColumnProblem::Null)
        );
    }
}

#[test]
fn a_missing_column_names_it_the_type_and_the_columns_the_row_has() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = users(&mut conn);
    let sql = format!("SELECT id, name FROM {table} WHERE id = 1");
    for result in both_protocols(&mut conn, &sql) {
        let row = &result.rows[0];
        let (column, rust_type, problem, message) =
            column_error(row.try_get::<Option<String>>("nmae"));
        assert_eq!((&*column, &*rust_type), ("`nmae`", "Option<String>"));
        assert_eq!(
            problem,
            ColumnProblem::Missing {
                columns: vec!["id".into(), "name".into()]
            }
        );
        assert!(
            message.contains("`nmae`")
                && message.contains("`Option<String>`")
                && message.contains("`id`, `name`"),
            "{message}"
        );
        // Names compare exactly.
        column_error(row.try_get::<i64>("ID"));
        let (column, _, problem, _) = column_error(row.try_get::<i64>(2));
        assert_eq!(column, "2");
        assert!(
            matches!(problem, ColumnProblem::Missing { .. }),
            "{problem:?}"
        );
    }
}

#[test]
fn a_value_of_another_type_names_the_column_its_sql_type_and_the_rust_type() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = users(&mut conn);
    let sql = format!("SELECT id, name, score FROM {table} WHERE id = 1");
    for result in both_protocols(&mut conn, &sql) {
        let row = &result.rows[0];
        let (column, rust_type, problem, message) = column_error(row.try_get::<i64>("name"));
        assert_eq!((&*column, &*rust_type), ("`name`", "i64"));
        assert_eq!(
            problem,
            ColumnProblem::WrongType {
                sql_type: "VARCHAR".into()
            }
        );
        assert!(
            message.contains("`name` (VARCHAR)") && message.contains("`i64`"),
            "{message}"
        );
        let (_, rust_type, problem, _) = column_error(row.try_get::<u8>("score"));
        assert_eq!(rust_type, "u8");
        assert_eq!(
            problem,
            ColumnProblem::WrongType {
                sql_type: "DOUBLE".into()
            }
        );
    }
}

#[test]
fn a_column_taken_once_is_reported_when_read_again() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = users(&mut conn);
    let mut result = conn
        .query(&format!("SELECT id, name FROM {table} WHERE id = 1"))
        .unwrap();
    let row: &mut Row = &mut result.rows[0];
    assert_eq!(row.try_take::<String>("name").unwrap(), "ada");
    let (column, _, problem, message) = column_error(row.try_take::<String>("name"));
    assert_eq!((&*column, problem), ("`name`", ColumnProblem::Taken));
    assert!(message.contains("moved out"), "{message}");
    let (_, _, problem, _) = column_error(row.try_get::<String>(1));
    assert_eq!(problem, ColumnProblem::Taken);
    assert_eq!(
        row.try_get::<i64>("id").unwrap(),
        1,
        "the other columns stay"
    );
}
