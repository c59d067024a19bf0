//! Rows into Rust values against a real MariaDB: a column by name or position
//! (`RowExt::try_get`), a row into a struct (`#[derive(FromRow)]`) or a tuple, the
//! typed helpers of `Queryable`, and one helper taking a `Conn`, a pooled connection,
//! a `Lent` checkout and a `Transaction`. Each failure is provoked on purpose (NULL
//! into `i64`, a missing column, text into a number, a column read twice) over both
//! protocols, and its error must name the column and the Rust type.
mod common;

use fiber_mysql::{
    ColumnProblem, Conn, Driver, Error, FromRow, QueryResult, Queryable, Row, RowExt,
};

/// A table of three users, one with NULL age and nick; returns its name.
fn users(db: &mut impl Queryable) -> String {
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
        let (column, rust_type, problem, message) = common::column_error(row.try_get::<i64>("age"));
        assert_eq!(
            (&*column, &*rust_type, problem),
            ("`age`", "i64", ColumnProblem::Null)
        );
        assert!(
            message.contains("`age`") && message.contains("`Option<i64>`"),
            "{message}"
        );
        // By position, the error says the name too.
        let (column, ..) = common::column_error(row.try_get::<i64>(2));
        assert_eq!(column, "2 (`age`)");
        // `scalar` reports the same way.
        let first = conn
            .query(&format!("SELECT age FROM {table} WHERE id = 3"))
            .unwrap();
        let (column, rust_type, problem, _) = common::column_error(first.scalar::<u32>());
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
            common::column_error(row.try_get::<Option<String>>("nmae"));
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
        common::column_error(row.try_get::<i64>("ID"));
        let (column, _, problem, _) = common::column_error(row.try_get::<i64>(2));
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
        let (column, rust_type, problem, message) =
            common::column_error(row.try_get::<i64>("name"));
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
        let (_, rust_type, problem, _) = common::column_error(row.try_get::<u8>("score"));
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
    let (column, _, problem, message) = common::column_error(row.try_take::<String>("name"));
    assert_eq!((&*column, problem), ("`name`", ColumnProblem::Taken));
    assert!(message.contains("moved out"), "{message}");
    let (_, _, problem, _) = common::column_error(row.try_get::<String>(1));
    assert_eq!(problem, ColumnProblem::Taken);
    assert_eq!(
        row.try_get::<i64>("id").unwrap(),
        1,
        "the other columns stay"
    );
}

#[derive(Debug, PartialEq, FromRow)]
struct User {
    id: i64,
    name: String,
    age: Option<i32>,
    #[fiber_mysql(rename = "nick")]
    nickname: Option<String>,
}

/// Reads `age` as a number that cannot be NULL.
#[derive(Debug, FromRow)]
#[allow(dead_code)] // made only to fail: its fields are never read
struct Strict {
    id: i64,
    age: i64,
}

/// Reads a column no query here selects.
#[derive(Debug, FromRow)]
#[allow(dead_code)] // made only to fail: its fields are never read
struct WithEmail {
    id: i64,
    email: String,
}

/// Reads the name as a number.
#[derive(Debug, FromRow)]
#[allow(dead_code)] // made only to fail: its fields are never read
struct NameAsNumber {
    name: u64,
}

/// A keyword field reads the column of its name without `r#`.
#[derive(Debug, FromRow)]
struct Keyword {
    r#type: String,
}

for_each_driver! {
    fn a_struct_reads_by_column_name_and_ignores_other_columns(driver: Driver) {
        let pool = common::pool(common::opts(), 1, driver);
        let mut conn = pool.checkout().unwrap();
        let table = users(&mut conn);
        // Selected in another order, with a column no field reads.
        let users: Vec<User> = conn
            .exec_as(
                &format!("SELECT score, nick, age, name, id FROM {table} WHERE id >= ? ORDER BY id"),
                (2,),
            )
            .unwrap();
        assert_eq!(
            users,
            [
                User { id: 2, name: "alan".into(), age: Some(41), nickname: None },
                User { id: 3, name: "grace".into(), age: None, nickname: None },
            ]
        );
        let ada: Option<User> = conn
            .query_first(&format!("SELECT * FROM {table} ORDER BY id"))
            .unwrap();
        assert_eq!(ada.unwrap().nickname.as_deref(), Some("countess"));
        let nobody: Option<User> = conn
            .exec_first(&format!("SELECT * FROM {table} WHERE id = ?"), (99,))
            .unwrap();
        assert_eq!(nobody, None);
        let none: Vec<User> = conn.query_as(&format!("SELECT * FROM {table} WHERE id > 99")).unwrap();
        assert!(none.is_empty());
        let kind: Keyword = conn.query_first("SELECT 'gear' AS `type`").unwrap().unwrap();
        assert_eq!(kind.r#type, "gear");
    }

    fn a_struct_field_that_does_not_read_names_the_column_and_its_type(driver: Driver) {
        let pool = common::pool(common::opts(), 1, driver);
        let mut conn = pool.checkout().unwrap();
        let table = users(&mut conn);
        let all = format!("SELECT * FROM {table} ORDER BY id");
        // Rows 1 and 2 have an age: the third fails, and its error is the result.
        let (column, rust_type, problem, message) = common::column_error(conn.query_as::<Strict>(&all));
        assert_eq!((&*column, &*rust_type, problem), ("`age`", "i64", ColumnProblem::Null));
        assert!(message.contains("read it as `Option<i64>`"), "{message}");
        let (column, rust_type, problem, _) = common::column_error(conn.exec_as::<WithEmail>(&all, ()));
        assert_eq!((&*column, &*rust_type), ("`email`", "String"));
        assert!(matches!(problem, ColumnProblem::Missing { ref columns } if columns.len() == 5), "{problem:?}");
        let (column, rust_type, problem, _) =
            common::column_error(conn.exec_first::<NameAsNumber>(&all, ()));
        assert_eq!((&*column, &*rust_type), ("`name`", "u64"));
        assert_eq!(problem, ColumnProblem::WrongType { sql_type: "VARCHAR".into() });
        // A conversion error leaves the connection as it was.
        assert_eq!(conn.query("SELECT 1").unwrap().scalar::<i64>().unwrap(), Some(1));
    }
}

#[test]
fn tuples_read_by_position_and_name_the_position_that_failed() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = users(&mut conn);
    let sql = format!("SELECT id, name, age FROM {table} ORDER BY id");
    let pairs: Vec<(i64, String)> = conn.query_as(&sql).unwrap();
    assert_eq!(pairs[2], (3, "grace".to_string()));
    let single: Option<(String,)> = conn.query_first(&sql).unwrap();
    assert_eq!(
        single,
        Some(("1".to_string(),)),
        "the text protocol sends numbers as text, which reads as a string too"
    );
    let (column, rust_type, problem, _) =
        common::column_error(conn.query_as::<(i64, String, u8)>(&sql));
    assert_eq!(
        (&*column, &*rust_type, problem),
        ("2 (`age`)", "u8", ColumnProblem::Null)
    );
    let (column, _, problem, _) =
        common::column_error(conn.exec_as::<(i64, String, i32, i32)>(&sql, ()));
    assert_eq!(column, "3");
    assert!(
        matches!(problem, ColumnProblem::Missing { .. }),
        "{problem:?}"
    );
    let rows = conn
        .query(&sql)
        .unwrap()
        .rows_as::<(i64, String, Option<i32>)>()
        .unwrap();
    assert_eq!(rows[0], (1, "ada".to_string(), Some(36)));
}

/// Where fiber_mysql is reached through a re-export.
mod facade {
    pub use fiber_mysql as db;
}

/// Derived through the re-export: the generated code names `crate::facade::db`.
#[derive(Debug, FromRow)]
#[fiber_mysql(crate = "crate::facade::db")]
struct ThroughFacade {
    n: i64,
}

#[test]
fn the_crate_attribute_derives_through_a_re_export() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let row: ThroughFacade = conn.query_first("SELECT 7 AS n").unwrap().unwrap();
    assert_eq!(row.n, 7);
}

/// The helper of the trait's documentation: inserts, then reads back what it inserted.
fn add(db: &mut impl Queryable, table: &str, id: i64, name: &str) -> fiber_mysql::Result<User> {
    db.exec(
        &format!("INSERT INTO {table} (id, name, score) VALUES (?, ?, 0)"),
        (id, name),
    )?;
    let added: Option<User> =
        db.exec_first(&format!("SELECT * FROM {table} WHERE id = ?"), (id,))?;
    Ok(added.expect("the row just inserted"))
}

/// How many rows `table` has, seen from a connection of its own (committed rows only).
fn committed(table: &str) -> i64 {
    let mut other = Conn::connect(&common::opts()).unwrap();
    other
        .query(&format!("SELECT COUNT(*) FROM {table}"))
        .unwrap()
        .scalar()
        .unwrap()
        .unwrap()
}

#[test]
fn one_helper_takes_a_conn_a_pooled_conn_a_checkout_and_a_transaction() {
    let opts = common::opts();
    let mut plain = Conn::connect(&opts).unwrap();
    let table = users(&mut plain);
    assert_eq!(add(&mut plain, &table, 10, "conn").unwrap().name, "conn");
    let pool = common::pool(opts, 1, Driver::Native);
    {
        let mut guard = pool.get().unwrap();
        assert_eq!(
            add(&mut guard, &table, 11, "pooled").unwrap().name,
            "pooled"
        );
    }
    let mut lent = pool.checkout().unwrap();
    assert_eq!(add(&mut lent, &table, 12, "lent").unwrap().name, "lent");
    assert_eq!(committed(&table), 6);
    // Inside a transaction the helper's insert is the transaction's: rolled back with it.
    let rolled_back: Result<(), Error> = lent.transaction(|tx| {
        let user = add(tx, &table, 13, "in tx")?;
        assert_eq!(user.id, 13, "the transaction sees its own insert");
        assert_eq!(committed(&table), 6, "not visible outside before commit");
        Err(Error::Convert("give up".into()))
    });
    assert!(rolled_back.is_err());
    assert_eq!(committed(&table), 6, "rolled back");
    lent.transaction(|tx| add(tx, &table, 14, "kept")).unwrap();
    assert_eq!(committed(&table), 7, "committed");
}
