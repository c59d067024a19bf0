//! The native `Conn` against a real MariaDB: auth, results, errors, timeout.
mod common;

use std::time::{Duration, Instant};

use fiber_mysql::{Conn, Error, Opts};

#[test]
fn password_user_connects_and_queries() {
    let opts = common::opts();
    assert!(!opts.password.is_empty(), "the app user has a password");
    let mut conn = Conn::connect(&opts).unwrap();
    conn.ping().unwrap();
    let r = conn.query("SELECT 1 + 1, 'x', NULL").unwrap();
    assert_eq!(r.rows.len(), 1);
    assert_eq!(r.rows[0].get::<i64, _>(0), Some(2));
    assert_eq!(r.rows[0].get::<String, _>(1).as_deref(), Some("x"));
    assert_eq!(r.rows[0].get::<Option<i64>, _>(2), Some(None));
    let user = conn
        .query("SELECT CURRENT_USER()")
        .unwrap()
        .scalar::<String>()
        .unwrap();
    assert!(user.unwrap().starts_with(&opts.user));
}

#[test]
fn several_statements_return_every_result_in_order() {
    let table = common::unique_table("multi");
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let r = conn
        .query(&format!(
            "CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, v INT); \
             INSERT INTO {table} (v) VALUES (10), (20); \
             SELECT v FROM {table} ORDER BY id; \
             UPDATE {table} SET v = v + 1 WHERE v > 15"
        ))
        .unwrap();
    assert_eq!(r.more.len(), 3);
    assert_eq!(r.more[0].affected_rows, 2);
    assert_eq!(r.more[0].last_insert_id, Some(1));
    let values: Vec<i64> = r.more[1]
        .rows
        .iter()
        .map(|row| row.get(0).unwrap())
        .collect();
    assert_eq!(values, vec![10, 20]);
    assert_eq!(r.more[2].affected_rows, 1);
    // A failing statement in the middle: its error, and the connection goes on.
    let err = conn
        .query(&format!("SELECT 1; SELECT nope FROM {table}; SELECT 3"))
        .unwrap_err();
    assert_eq!(err.server_code(), Some(1054), "{err}");
    assert_eq!(
        conn.query("SELECT 4").unwrap().scalar::<i64>().unwrap(),
        Some(4)
    );
    conn.query(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn wrong_password_is_access_denied_with_the_servers_message() {
    let mut opts = common::opts();
    opts.password.push_str("-wrong");
    match Conn::connect(&opts) {
        Err(Error::Server {
            code: 1045,
            state,
            message,
        }) => {
            assert_eq!(state, "28000");
            assert!(message.contains("Access denied"), "{message}");
        }
        other => panic!("expected 1045, got {other:?}"),
    }
}

#[test]
fn unknown_database_is_a_typed_error_naming_it() {
    let mut opts = common::opts();
    opts.db = Some("no_such_db_here".into());
    let err = Conn::connect(&opts).unwrap_err();
    // 1049 for a user with global rights, 1044 for our app user (rights on its db only).
    assert!(matches!(err.server_code(), Some(1044 | 1049)), "{err}");
    assert!(err.to_string().contains("no_such_db_here"), "{err}");
    assert!(!err.is_unavailable());
}

#[test]
fn syntax_error_is_typed_and_the_connection_stays_usable() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    match conn.query("SELEKT 1") {
        Err(Error::Server {
            code: 1064,
            state,
            message,
        }) => {
            assert_eq!(state, "42000");
            assert!(message.contains("SELEKT"), "{message}");
        }
        other => panic!("expected 1064, got {other:?}"),
    }
    assert!(!conn.is_broken());
    let err = conn.exec("SELEKT ?", (1,)).unwrap_err();
    assert_eq!(err.server_code(), Some(1064));
    assert_eq!(
        conn.query("SELECT 5").unwrap().scalar::<i64>().unwrap(),
        Some(5)
    );
}

#[test]
fn query_timeout_kills_the_query_and_keeps_the_connection() {
    let mut opts = common::opts();
    opts.query_timeout = Some(Duration::from_millis(300));
    let mut conn = Conn::connect(&opts).unwrap();
    let started = Instant::now();
    let err = conn.query("SELECT SLEEP(5)").unwrap_err();
    assert!(matches!(err, Error::QueryTimeout), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!conn.is_broken(), "drained after KILL QUERY");
    assert_eq!(
        conn.query("SELECT 6").unwrap().scalar::<i64>().unwrap(),
        Some(6)
    );
    let err = conn.exec("SELECT SLEEP(?)", (5,)).unwrap_err();
    assert!(matches!(err, Error::QueryTimeout), "{err}");
    assert_eq!(
        conn.exec("SELECT ?", (7,))
            .unwrap()
            .scalar::<i64>()
            .unwrap(),
        Some(7)
    );
}

#[test]
fn connect_to_a_closed_port_is_unavailable() {
    // A port just freed; another test's server (this process runs them side by side
    // under `cargo test`) may take it meanwhile, so a few are tried until one refuses.
    let mut seen = Vec::new();
    for _ in 0..10 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let opts = Opts::new("127.0.0.1", port, "app");
        let err = Conn::connect(&opts).unwrap_err();
        if matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused) {
            assert!(err.is_unavailable(), "{err}");
            return;
        }
        seen.push(err.to_string());
    }
    panic!("no freed port refused a connect: {seen:?}");
}

/// The statement cache, when full, closes the statement used longest ago: one used
/// all along stays prepared.
#[test]
fn a_full_statement_cache_closes_the_least_recently_used_statement() {
    let mut conn = fiber_mysql::Conn::connect(&common::opts()).unwrap();
    let sql = |i: usize| format!("SELECT ? + {i}");
    let prepares = |conn: &mut fiber_mysql::Conn| -> u64 {
        let r = conn
            .query("SHOW SESSION STATUS LIKE 'Com_stmt_prepare'")
            .unwrap();
        r.rows[0].get::<String, _>(1).unwrap().parse().unwrap()
    };
    let full = fiber_mysql::STMT_CACHE_PER_CONN;
    for i in 0..full {
        conn.exec(&sql(i), (1,)).unwrap();
        conn.exec(&sql(0), (1,)).unwrap(); // statement 0 stays the most recent
    }
    let before = prepares(&mut conn);
    conn.exec(&sql(full), (1,)).unwrap(); // one over: statement 1 goes
    conn.exec(&sql(0), (1,)).unwrap();
    assert_eq!(
        prepares(&mut conn),
        before + 1,
        "statement 0 was prepared again"
    );
    conn.exec(&sql(1), (1,)).unwrap();
    assert_eq!(
        prepares(&mut conn),
        before + 2,
        "statement 1 was still cached"
    );
}

/// The server's `Bytes_sent` for this session.
fn bytes_sent(conn: &mut fiber_mysql::Conn) -> u64 {
    let r = conn.query("SHOW SESSION STATUS LIKE 'Bytes_sent'").unwrap();
    r.rows[0].get::<String, _>(1).unwrap().parse().unwrap()
}

/// MariaDB's metadata caching: an execution's answer leaves out the column
/// definitions its prepare sent (a table of long names would make them over a
/// hundred bytes each), and the rows are read with the cached ones; when the table
/// changes, the server sends them again and the cache takes the new ones.
#[test]
fn an_execution_omits_the_columns_until_they_change() {
    let mut conn = fiber_mysql::Conn::connect(&common::opts()).unwrap();
    let table = common::unique_table("metadata_cached_with_a_long_name_to_make_columns_large");
    conn.query(&format!(
        "CREATE TABLE {table} (an_identifier_column_with_a_long_name INT, \
         a_text_column_with_a_long_name VARCHAR(20))"
    ))
    .unwrap();
    conn.query(&format!("INSERT INTO {table} VALUES (1, 'one')"))
        .unwrap();
    let select = format!("SELECT * FROM {table} WHERE an_identifier_column_with_a_long_name = ?");
    let first = conn.exec(&select, (1,)).unwrap();
    assert_eq!(first.columns.len(), 2);
    // What one `SHOW STATUS` costs, then what an execution adds to it.
    let a = bytes_sent(&mut conn);
    let b = bytes_sent(&mut conn);
    let again = conn.exec(&select, (1,)).unwrap();
    let c = bytes_sent(&mut conn);
    let execution = (c - b) - (b - a);
    assert!(
        execution < 100,
        "an execution's answer took {execution} bytes: its column definitions came again"
    );
    assert_eq!(again.rows[0].get::<String, _>(1).as_deref(), Some("one"));
    assert_eq!(
        again.columns[1].name_str(),
        "a_text_column_with_a_long_name"
    );

    conn.query(&format!(
        "ALTER TABLE {table} ADD COLUMN a_third_column INT NOT NULL DEFAULT 7"
    ))
    .unwrap();
    for _ in 0..2 {
        let changed = conn.exec(&select, (1,)).unwrap();
        assert_eq!(changed.columns.len(), 3, "the new column is read");
        assert_eq!(changed.rows[0].get::<i64, _>(2), Some(7));
        assert_eq!(changed.columns[2].name_str(), "a_third_column");
    }
    conn.query(&format!("DROP TABLE {table}")).unwrap();
}
