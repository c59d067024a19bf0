//! Connections come back clean: what MariaDB reports about a session's changes, the
//! rule that decides a reset (fiber_mysql's `session.rs`), that every leak is gone at
//! the next checkout of a pool of one, and that a clean connection keeps its prepared
//! statements. Each test starts its own server: some need an account that may
//! `LOCK TABLES`, and statement counts must be this test's alone.
mod common;

use fiber_mysql::{Conn, Error, Pool, PoolConfig, PooledConn, ResetReason};

/// A private server, with tables `t` and `u`, and its administrator's options.
fn server() -> (fiber_mysql::launcher::MariaDb, fiber_mysql::Opts) {
    let server = common::private_server(20);
    let opts = server.admin_opts();
    let mut c = Conn::connect(&opts).unwrap();
    c.query("CREATE TABLE t (v INT) ENGINE=InnoDB; CREATE TABLE u (v INT) ENGINE=InnoDB")
        .unwrap();
    c.query("CREATE PROCEDURE set_var() BEGIN SET @in_procedure = 1; END")
        .unwrap();
    // A stored function that takes a named lock, under a name that is no keyword.
    c.query(
        "CREATE FUNCTION grab() RETURNS INT NOT DETERMINISTIC NO SQL RETURN GET_LOCK('fn_lock', 0)",
    )
    .unwrap();
    (server, opts)
}

fn pool_of_one(opts: fiber_mysql::Opts) -> Pool {
    Pool::new(PoolConfig::new(opts, 1)).unwrap()
}

/// A probe's answer as text: its first value, or the server's error number.
fn answer(conn: &mut PooledConn, sql: &str) -> String {
    match conn.query(sql) {
        Ok(r) => {
            let last = r.more.last().unwrap_or(&r);
            match last.rows.first() {
                Some(row) => row
                    .get::<Option<String>, _>(0)
                    .flatten()
                    .unwrap_or_else(|| "NULL".into()),
                None => "ok".into(),
            }
        }
        Err(Error::Server { code, .. }) => format!("error {code}"),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// What each kind of statement makes the rule say, on a connection reset before each.
/// Cases answered `Untracked` are ones MariaDB did not report (the rule checks the
/// server's report first), so they show what the tracker misses.
#[test]
fn the_servers_reports_and_the_statement_rules_give_each_reason() {
    use ResetReason::*;
    let (_server, opts) = server();
    let mut conn = Conn::connect(&opts).unwrap();
    let cases: &[(&str, Option<ResetReason>)] = &[
        ("SELECT 1", None),
        ("INSERT INTO t VALUES (1)", None),
        ("START TRANSACTION; INSERT INTO t VALUES (1); COMMIT", None),
        ("SELECT v FROM t WHERE v > 0 FOR UPDATE", None),
        ("SET @a = 1", Some(StateChanged)),
        ("SET SESSION sql_mode = ''", Some(StateChanged)),
        ("SET sql_mode = ''", Some(StateChanged)),
        ("SET @@session.sql_mode = ''", Some(StateChanged)),
        ("SET NAMES latin1", Some(StateChanged)),
        ("SET autocommit = 0", Some(StateChanged)),
        ("CREATE TEMPORARY TABLE tmp (v INT)", Some(StateChanged)),
        ("USE information_schema", Some(StateChanged)),
        ("PREPARE s FROM 'SELECT 1'", Some(StateChanged)),
        ("EXECUTE IMMEDIATE 'SET @ei = 1'", Some(StateChanged)),
        ("CALL set_var()", Some(StateChanged)),
        ("START TRANSACTION", Some(InTransaction)),
        ("BEGIN; INSERT INTO t VALUES (2)", Some(InTransaction)),
        ("XA START 'x'", Some(InTransaction)),
        ("SELECT nope FROM t", Some(StatementFailed)),
        // Not reported by MariaDB 10.11: caught by the statement rules.
        ("SELECT @b := 1", Some(Untracked)),
        ("SELECT 1 INTO @c", Some(Untracked)),
        ("SET @@max_statement_time = 5", Some(Untracked)),
        ("SELECT GET_LOCK('l', 0)", Some(Untracked)),
        ("LOCK TABLES t READ", Some(Untracked)),
        ("HANDLER t OPEN", Some(Untracked)),
        ("SET TRANSACTION READ ONLY", Some(Untracked)),
        (
            "EXECUTE IMMEDIATE CONCAT('SELECT GET_L', 'OCK(''l3'', 0)')",
            Some(Untracked),
        ),
        // Not covered: a stored function's lock is in no statement's text (the
        // application marks the session: `a_stored_functions_lock_needs_the_mark`).
        ("SELECT grab()", None),
    ];
    let mut wrong = Vec::new();
    for (sql, expected) in cases {
        conn.reset().unwrap();
        assert_eq!(conn.reset_reason(), None, "right after a reset");
        let _ = conn.query(sql);
        let got = conn.reset_reason();
        println!("{sql:<55} {got:?}");
        if got != *expected {
            wrong.push(format!("{sql}: expected {expected:?}, got {got:?}"));
        }
    }
    // Protocol-level prepared statements (our statement cache) are not reported.
    conn.reset().unwrap();
    assert_eq!(
        conn.exec("SELECT ? + 1", (1,))
            .unwrap()
            .scalar::<i64>()
            .unwrap(),
        Some(2)
    );
    println!(
        "{:<55} {:?}",
        "exec SELECT ? + 1 (COM_STMT_PREPARE)",
        conn.reset_reason()
    );
    if conn.reset_reason().is_some() {
        wrong.push(format!("exec: {:?}", conn.reset_reason()));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Each leak: what sets it up, a probe, and the probe's answer with and without it.
struct Leak {
    setup: &'static str,
    probe: &'static str,
    leaked: &'static str,
    clean: &'static str,
}

const LEAKS: &[Leak] = &[
    Leak { setup: "SET @secret = 'alice-token'", probe: "SELECT COALESCE(@secret, 'none')", leaked: "alice-token", clean: "none" },
    Leak {
        setup: "CREATE TEMPORARY TABLE tmp_leak (v INT) ENGINE=InnoDB; START TRANSACTION; INSERT INTO tmp_leak VALUES (1)",
        probe: "SELECT COUNT(*) FROM tmp_leak",
        leaked: "1",
        clean: "error 1146",
    },
    Leak { setup: "START TRANSACTION; INSERT INTO t VALUES (7)", probe: "SELECT CONCAT(@@in_transaction, ' ', (SELECT COUNT(*) FROM t WHERE v = 7))", leaked: "1 1", clean: "0 0" },
    Leak { setup: "SET SESSION sql_mode = ''", probe: "SELECT @@session.sql_mode = @@global.sql_mode", leaked: "0", clean: "1" },
    Leak { setup: "SET autocommit = 0", probe: "SELECT @@autocommit", leaked: "0", clean: "1" },
    Leak { setup: "SET NAMES latin1", probe: "SELECT @@character_set_client", leaked: "latin1", clean: "utf8mb4" },
    Leak { setup: "USE information_schema", probe: "SELECT DATABASE()", leaked: "information_schema", clean: "fiberstack_private" },
    Leak { setup: "PREPARE leak_s FROM 'SELECT 5'", probe: "EXECUTE leak_s", leaked: "5", clean: "error 1243" },
    Leak { setup: "SELECT @selected := 'token'", probe: "SELECT COALESCE(@selected, 'none')", leaked: "token", clean: "none" },
    Leak { setup: "SET @@max_statement_time = 5", probe: "SELECT @@session.max_statement_time = @@global.max_statement_time", leaked: "0", clean: "1" },
    Leak { setup: "SELECT GET_LOCK('leak_lock', 0)", probe: "SELECT IS_FREE_LOCK('leak_lock')", leaked: "0", clean: "1" },
    Leak { setup: "LOCK TABLES t READ", probe: "SELECT COUNT(*) FROM u", leaked: "error 1100", clean: "0" },
    Leak { setup: "HANDLER t OPEN", probe: "HANDLER t READ FIRST", leaked: "ok", clean: "error 1109" },
    Leak { setup: "EXECUTE IMMEDIATE CONCAT('SELECT GET_L', 'OCK(''ei_lock'', 0)')", probe: "SELECT IS_FREE_LOCK('ei_lock')", leaked: "0", clean: "1" },
    Leak { setup: "SET TRANSACTION READ ONLY", probe: "START TRANSACTION; INSERT INTO u VALUES (1); ROLLBACK", leaked: "error 1792", clean: "ok" },
];

/// With a pool of one, every leak set up by one checkout is gone at the next, which
/// gets the same connection (a reset, not a reconnect). Each probe is first shown to
/// see its leak within the setup's own checkout.
#[test]
fn each_leak_is_gone_at_the_next_checkout() {
    let (_server, opts) = server();
    let pool = pool_of_one(opts);
    let id = pool.get().unwrap().connection_id();
    let mut failures = Vec::new();
    for leak in LEAKS {
        {
            let mut conn = pool.get().unwrap();
            answer(&mut conn, leak.setup);
            let seen = answer(&mut conn, leak.probe);
            assert_eq!(
                seen, leak.leaked,
                "the probe sees the leak of `{}`",
                leak.setup
            );
            assert!(conn.reset_reason().is_some(), "{}", leak.setup);
        }
        let resets = pool.stats().resets;
        {
            let mut conn = pool.get().unwrap();
            answer(&mut conn, leak.setup);
        }
        assert_eq!(pool.stats().resets, resets + 1, "{}", leak.setup);
        let mut next = pool.get().unwrap();
        let seen = answer(&mut next, leak.probe);
        println!("{:<60} next checkout: {seen}", leak.setup);
        if seen != leak.clean {
            failures.push(format!("{}: the next checkout saw {seen}", leak.setup));
        }
        assert_eq!(next.connection_id(), id, "reset, not reconnected");
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(pool.stats().reset_failures, 0);
}

/// A named lock taken by a stored function is in no statement's text: the next
/// checkout still holds it unless the application marks the session, which resets it.
#[test]
fn a_stored_functions_lock_needs_the_mark() {
    let (_server, opts) = server();
    let pool = pool_of_one(opts);
    let free = |conn: &mut PooledConn| answer(conn, "SELECT IS_FREE_LOCK('fn_lock')");
    {
        let mut conn = pool.get().unwrap();
        assert_eq!(answer(&mut conn, "SELECT grab()"), "1");
        assert_eq!(conn.reset_reason(), None, "the rules cannot see it");
    }
    assert_eq!(
        free(&mut pool.get().unwrap()),
        "0",
        "the documented gap: still held"
    );
    {
        let mut conn = pool.get().unwrap();
        answer(&mut conn, "SELECT grab()");
        conn.mark_session_dirty();
    }
    assert_eq!(
        free(&mut pool.get().unwrap()),
        "1",
        "marked: reset, and released"
    );
}

/// The four leaks of one request at once: a secret in a user variable, a temporary
/// table with an uncommitted row, an open transaction with an insert, and sql_mode.
#[test]
fn a_request_that_leaks_everything_at_once_leaves_nothing() {
    let (_server, opts) = server();
    let pool = pool_of_one(opts);
    {
        let mut conn = pool.get().unwrap();
        conn.query("SET @secret = 'alice-token'").unwrap();
        conn.query("CREATE TEMPORARY TABLE tmp_leak (v INT) ENGINE=InnoDB")
            .unwrap();
        conn.query("START TRANSACTION").unwrap();
        conn.query("INSERT INTO tmp_leak VALUES (1)").unwrap();
        conn.query("INSERT INTO t VALUES (42)").unwrap();
        conn.query("SET SESSION sql_mode = ''").unwrap();
    }
    let mut next = pool.get().unwrap();
    assert_eq!(
        answer(&mut next, "SELECT COALESCE(@secret, 'none')"),
        "none"
    );
    assert_eq!(
        answer(&mut next, "SELECT COUNT(*) FROM tmp_leak"),
        "error 1146"
    );
    assert_eq!(answer(&mut next, "SELECT @@in_transaction"), "0");
    assert_eq!(
        answer(&mut next, "SELECT COUNT(*) FROM t WHERE v = 42"),
        "0"
    );
    assert_eq!(
        answer(&mut next, "SELECT @@session.sql_mode = @@global.sql_mode"),
        "1"
    );
}

/// The server-wide count of COM_STMT_PREPARE (only this test uses its server).
fn prepares(admin: &mut Conn) -> u64 {
    let r = admin
        .query("SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'")
        .unwrap();
    r.rows[0].get::<String, _>(1).unwrap().parse().unwrap()
}

/// A checkout that changed nothing is not reset and keeps its prepared statement (no
/// second COM_STMT_PREPARE); one that changed its session is reset, and its next use
/// of the statement prepares it again (which shows the count would see a reset).
#[test]
fn a_clean_checkout_keeps_its_statement_cache() {
    let (_server, opts) = server();
    let mut admin = Conn::connect(&opts).unwrap();
    let pool = pool_of_one(opts);
    let sql = "SELECT v FROM t WHERE v = ?";
    pool.get().unwrap().exec(sql, (1,)).unwrap();
    let before = prepares(&mut admin);
    for i in 0..5 {
        let mut conn = pool.get().unwrap();
        conn.exec(sql, (i,)).unwrap();
        conn.query("SELECT 1").unwrap();
        conn.query("START TRANSACTION; INSERT INTO t VALUES (3); COMMIT")
            .unwrap();
        assert_eq!(conn.reset_reason(), None);
    }
    assert_eq!(
        prepares(&mut admin),
        before,
        "no statement was prepared again"
    );
    assert_eq!(pool.stats().resets, 0);

    pool.get()
        .unwrap()
        .query("SET SESSION sql_mode = ''")
        .unwrap();
    assert_eq!(pool.stats().resets, 1);
    pool.get().unwrap().exec(sql, (1,)).unwrap();
    assert_eq!(
        prepares(&mut admin),
        before + 1,
        "prepared again after the reset"
    );
}

/// A reset that fails closes the connection: here the configured database is gone, so
/// COM_INIT_DB fails. The next checkout opens a new connection.
#[test]
fn a_failed_reset_discards_the_connection() {
    let (_server, mut opts) = server();
    let mut admin = Conn::connect(&opts).unwrap();
    admin.query("CREATE DATABASE doomed").unwrap();
    opts.db = Some("doomed".into());
    let pool = pool_of_one(opts);
    let first = {
        let mut conn = pool.get().unwrap();
        conn.query("SET @a = 1").unwrap();
        admin.query("DROP DATABASE doomed").unwrap();
        conn.connection_id()
    };
    let stats = pool.stats();
    assert_eq!(
        (
            stats.resets,
            stats.reset_failures,
            stats.replaced,
            stats.idle
        ),
        (1, 1, 1, 0)
    );
    admin.query("CREATE DATABASE doomed").unwrap();
    let mut conn = pool.get().unwrap();
    assert_eq!(
        conn.query("SELECT 1").unwrap().scalar::<i64>().unwrap(),
        Some(1)
    );
    assert_ne!(conn.connection_id(), first);
}
