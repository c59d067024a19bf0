//! What both drivers must do the same way, through the pool: types, injection
//! safety, typed errors, pool limits, and recovery after a server restart.
//! Each test runs once per driver (`name::native`, `name::threads`).
mod common;

use std::time::Duration;

use fiber_mysql::{Driver, Error, Pool, PoolConfig, Value};

for_each_driver! {
    fn types_round_trip(driver: Driver) {
        let table = common::unique_table("types");
        let pool = common::pool(common::opts(), 2, driver);
        let mut conn = pool.get().unwrap();
        conn.query(&format!(
            "CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, big BIGINT, neg INT, \
             u BIGINT UNSIGNED, dec_ DECIMAL(12,4), txt TEXT, d DATE, ts DATETIME(3), \
             blob_ BLOB, nul INT NULL)"
        ))
        .unwrap();
        let text = "it's \"quoted\" \\ with a NUL \0 byte and ünïcödé";
        let blob: Vec<u8> = (0..=255u8).collect();
        let r = conn
            .exec(
                &format!(
                    "INSERT INTO {table} (big, neg, u, dec_, txt, d, ts, blob_, nul) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    i64::MAX,
                    -42i32,
                    u64::MAX,
                    "12345678.1234",
                    text,
                    Value::Date(2024, 2, 29, 0, 0, 0, 0),
                    Value::Date(2024, 2, 29, 23, 59, 58, 123_000),
                    blob.clone(),
                    Value::NULL,
                ),
            )
            .unwrap();
        assert_eq!(r.affected_rows, 1);
        let id = r.last_insert_id.expect("auto-increment id");
        let select = format!(
            "SELECT big, neg, u, dec_, txt, d, ts, blob_, nul FROM {table} WHERE id = ?"
        );
        // Binary protocol (prepared) and text protocol (plain query) agree.
        let prepared = conn.exec(&select, (id,)).unwrap();
        let plain = conn.query(&select.replace('?', &id.to_string())).unwrap();
        for r in [prepared, plain] {
            let row = &r.rows[0];
            assert_eq!(row.get::<i64, _>("big"), Some(i64::MAX));
            assert_eq!(row.get::<i32, _>("neg"), Some(-42));
            assert_eq!(row.get::<u64, _>("u"), Some(u64::MAX));
            assert_eq!(row.get::<String, _>("dec_").as_deref(), Some("12345678.1234"));
            assert_eq!(row.get::<String, _>("txt").as_deref(), Some(text));
            let d: String = row.get::<Value, _>("d").unwrap().as_sql(true);
            assert_eq!(d, "'2024-02-29'");
            let ts: String = row.get::<Value, _>("ts").unwrap().as_sql(true);
            // Text protocol: '...58.123'; binary: '...58.123000'.
            assert!(ts.starts_with("'2024-02-29 23:59:58.123"), "{ts}");
            assert_eq!(row.get::<Vec<u8>, _>("blob_"), Some(blob.clone()));
            assert_eq!(row.get::<Option<i64>, _>("nul"), Some(None));
        }
        conn.query(&format!("DROP TABLE {table}")).unwrap();
    }

    fn injection_payloads_are_stored_as_plain_text(driver: Driver) {
        let table = common::unique_table("inj");
        let pool = common::pool(common::opts(), 1, driver);
        let mut conn = pool.get().unwrap();
        conn.query(&format!("CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, name TEXT)"))
            .unwrap();
        let payloads = [
            "'; DROP TABLE users; --",
            "' OR '1'='1",
            "\" OR \"\"=\"",
            "1; SELECT SLEEP(10)",
            "admin'--",
            "' UNION SELECT user, password FROM mysql.user --",
            "\\'; DROP TABLE x; -- \0",
            "Robert'); DROP TABLE Students;--",
        ];
        for p in payloads {
            conn.exec(&format!("INSERT INTO {table} (name) VALUES (?)"), (p,)).unwrap();
            let r = conn
                .exec(&format!("SELECT COUNT(*) FROM {table} WHERE name = ?"), (p,))
                .unwrap();
            assert_eq!(r.scalar::<i64>().unwrap(), Some(1), "{p}");
        }
        let r = conn.query(&format!("SELECT name FROM {table} ORDER BY id")).unwrap();
        let names: Vec<String> = r.rows.iter().map(|row| row.get(0).unwrap()).collect();
        assert_eq!(names, payloads);
        conn.query(&format!("DROP TABLE {table}")).unwrap();
    }

    fn server_errors_are_typed_and_the_connection_is_reused(driver: Driver) {
        let pool = common::pool(common::opts(), 1, driver);
        let mut conn = pool.get().unwrap();
        let id = conn.connection_id();
        match conn.query("SELEKT 1") {
            Err(Error::Server { code: 1064, state, message }) => {
                assert_eq!(state, "42000");
                assert!(message.contains("SELEKT"), "{message}");
            }
            other => panic!("expected 1064, got {other:?}"),
        }
        let err = conn.exec("SELECT ? + ?", (1,)).unwrap_err();
        assert!(matches!(err, Error::Params(_) | Error::Protocol(_)), "{err}");
        drop(conn);
        let mut again = pool.get().unwrap();
        assert_eq!(again.connection_id(), id, "a server error does not cost the connection");
        assert_eq!(again.query("SELECT 1").unwrap().scalar::<i64>().unwrap(), Some(1));
        assert_eq!(pool.stats().replaced, 0);
    }

    fn wrong_password_and_unknown_database_fail_pool_start(driver: Driver) {
        let mut opts = common::opts();
        opts.password.push('x');
        let err = Pool::new(PoolConfig { driver, ..PoolConfig::new(opts, 2) }).unwrap_err();
        assert_eq!(err.server_code(), Some(1045), "{err}");
        assert!(err.to_string().contains("Access denied"), "{err}");
        let mut opts = common::opts();
        opts.db = Some("no_such_db".into());
        let err = Pool::new(PoolConfig { driver, ..PoolConfig::new(opts, 2) }).unwrap_err();
        assert!(matches!(err.server_code(), Some(1044 | 1049)), "{err}");
    }

    fn pool_too_big_names_both_numbers(driver: Driver) {
        let opts = common::opts();
        let mut probe = fiber_mysql::Conn::connect(&opts).unwrap();
        let max: u64 = probe.query("SELECT @@max_connections").unwrap().scalar().unwrap().unwrap();
        let size = max as usize + 5;
        let err = Pool::new(PoolConfig { driver, ..PoolConfig::new(opts, size) }).unwrap_err();
        assert!(matches!(err, Error::PoolTooBig { pool, max_connections }
            if pool == size && max_connections == max as usize), "{err}");
        let text = err.to_string();
        assert!(text.contains(&size.to_string()) && text.contains(&max.to_string()), "{text}");
        assert!(text.contains("max-connections"), "{text}");
    }

    fn pool_wait_times_out_with_a_typed_error(driver: Driver) {
        let mut cfg = PoolConfig::new(common::opts(), 1);
        cfg.driver = driver;
        cfg.wait_timeout = Duration::from_millis(200);
        let pool = Pool::new(cfg).unwrap();
        let held = pool.get().unwrap();
        let err = pool.get().unwrap_err();
        assert!(matches!(err, Error::PoolTimeout { waited } if waited >= Duration::from_millis(190)), "{err}");
        assert!(err.is_unavailable());
        let stats = pool.stats();
        assert_eq!((stats.in_use, stats.timeouts, stats.total_waits), (1, 1, 1));
        drop(held);
        assert_eq!(pool.stats().idle, 1);
        pool.get().unwrap();
    }

    fn query_timeout_is_killed_and_typed(driver: Driver) {
        let mut opts = common::opts();
        opts.query_timeout = Some(Duration::from_millis(300));
        let pool = common::pool(opts, 1, driver);
        let mut conn = pool.get().unwrap();
        let started = std::time::Instant::now();
        let err = conn.query("SELECT SLEEP(5)").unwrap_err();
        assert!(matches!(err, Error::QueryTimeout), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(conn.query("SELECT 2").unwrap().scalar::<i64>().unwrap(), Some(2));
    }

    fn killed_server_gives_typed_errors_then_the_pool_serves_again(driver: Driver) {
        let mut server = common::private_server(20);
        let mut cfg = PoolConfig::new(server.opts(), 4);
        cfg.driver = driver;
        cfg.wait_timeout = Duration::from_secs(2);
        let pool = Pool::new(cfg).unwrap();
        let mut conn = pool.get().unwrap();
        assert_eq!(conn.query("SELECT 1").unwrap().scalar::<i64>().unwrap(), Some(1));

        server.kill_server().unwrap();
        // The checked-out connection: an I/O error, which means "unavailable".
        let err = conn.query("SELECT 1").unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");
        drop(conn); // closed and counted as replaced, never reused
        // While it is down, checkouts fail to reconnect: also "unavailable".
        let err = pool.get().and_then(|mut c| c.query("SELECT 1")).unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");

        server.start_server().unwrap();
        // Native: dead idle connections are noticed at checkout, so the first
        // query after the restart succeeds. Threads: each stale connection may
        // fail once (the mysql crate hides its socket) before being replaced.
        let attempts = if driver == Driver::Native { 1 } else { 5 };
        let mut ok = 0;
        for _ in 0..attempts {
            if let Ok(mut c) = pool.get() {
                if c.query("SELECT 1").is_ok() { ok += 1; break; }
            }
        }
        assert_eq!(ok, 1, "pool did not recover");
        for _ in 0..8 {
            let mut c = pool.get().unwrap();
            if driver == Driver::Native {
                c.query("SELECT 1").unwrap();
            } else {
                let _ = c.query("SELECT 1");
            }
        }
        let mut c = pool.get().unwrap();
        c.query("SELECT 1").unwrap();
        assert!(pool.stats().replaced >= 1, "{:?}", pool.stats());
        assert!(pool.healthy());
    }
}
