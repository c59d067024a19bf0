//! `exec_many`: a prepared statement run once per set of values, the executions sent
//! together before their answers are read, against a real MariaDB. The results come
//! back in order, across more rounds than one write holds; a failing statement stops
//! none sent with it; N statements cost about one round trip (measured through a
//! relay that delays every answer); a deadline mid-pipeline kills the query and the
//! pool replaces the connection.
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use fiber_mysql::{Conn, Driver, Error, Opts, Queryable, PIPELINE_STATEMENTS};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

#[test]
fn results_come_back_in_order_across_rounds() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let n = 3 * PIPELINE_STATEMENTS + 5;
    let results = conn
        .exec_many("SELECT ?, ? * 2", (0..n as i64).map(|i| (i, i)))
        .unwrap();
    assert_eq!(results.len(), n);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.rows[0].get::<i64, _>(0), Some(i as i64));
        assert_eq!(r.rows[0].get::<i64, _>(1), Some(2 * i as i64));
    }
    // The connection is in step afterwards.
    assert_eq!(
        conn.exec("SELECT ?", (7,)).unwrap().rows[0].get::<i64, _>(0),
        Some(7)
    );
    assert!(conn
        .exec_many("SELECT ?", Vec::<(i64,)>::new())
        .unwrap()
        .is_empty());
}

#[test]
fn a_failing_statement_stops_none_sent_with_it_and_the_first_failure_is_returned() {
    let table = common::unique_table("pipeline_dup");
    let mut conn = Conn::connect(&common::opts()).unwrap();
    conn.query(&format!("CREATE TABLE {table} (id INT PRIMARY KEY)"))
        .unwrap();
    let insert = format!("INSERT INTO {table} (id) VALUES (?)");
    let err = conn
        .exec_many(&insert, [1, 2, 2, 3, 3, 4].map(|id| (id,)))
        .unwrap_err();
    assert!(
        matches!(err, Error::Server { code: 1062, .. }),
        "a duplicate key: {err:?}"
    );
    let ids = conn
        .query(&format!("SELECT id FROM {table} ORDER BY id"))
        .unwrap()
        .rows_as::<(i64,)>()
        .unwrap();
    assert_eq!(ids, vec![(1,), (2,), (3,), (4,)], "every other insert ran");
    // Wrong arity is refused before anything is sent (`a_bad_set_anywhere_sends_nothing`
    // has one in a later round).
    let sets: [Vec<fiber_mysql::Value>; 2] = [vec![5.into()], vec![]];
    let err = conn.exec_many(&insert, sets).unwrap_err();
    assert!(matches!(err, Error::Params(_)), "{err:?}");
    let count = conn
        .query(&format!("SELECT COUNT(*) FROM {table}"))
        .unwrap()
        .scalar::<i64>()
        .unwrap();
    assert_eq!(count, Some(4), "nothing of the refused pipeline ran");
    conn.query(&format!("DROP TABLE {table}")).unwrap();
}

/// A TCP relay to `upstream` that holds every chunk the server sends for `delay`
/// before passing it on: a round trip through it costs at least `delay`.
fn slow_relay(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(upstream).unwrap();
            let pump = |mut from: TcpStream, mut to: TcpStream, delay: Option<Duration>| {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        if let Some(d) = delay {
                            std::thread::sleep(d);
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                })
            };
            pump(
                client.try_clone().unwrap(),
                server.try_clone().unwrap(),
                None,
            );
            pump(server, client, Some(delay));
        }
    });
    addr
}

#[test]
fn n_statements_cost_about_one_round_trip() {
    const DELAY: Duration = Duration::from_millis(30);
    const N: usize = 20;
    let opts = common::opts();
    let upstream = opts.socket_addr().unwrap();
    let relay = slow_relay(upstream, DELAY);
    let mut through = opts.clone();
    through.host = relay.ip().to_string();
    through.port = relay.port();
    let mut conn = Conn::connect(&through).unwrap();
    conn.exec("SELECT ?", (0,)).unwrap(); // prepared: not part of the measure
    let started = Instant::now();
    let results = conn
        .exec_many("SELECT ?", (0..N as i64).map(|i| (i,)))
        .unwrap();
    let pipelined = started.elapsed();
    assert_eq!(results.len(), N);
    let started = Instant::now();
    for i in 0..N as i64 {
        conn.exec("SELECT ?", (i,)).unwrap();
    }
    let one_by_one = started.elapsed();
    println!("{N} statements through a {DELAY:?} relay: pipelined {pipelined:?}, one by one {one_by_one:?}");
    assert!(one_by_one >= DELAY * N as u32, "{one_by_one:?}");
    assert!(
        pipelined < DELAY * (N as u32 / 4),
        "{N} pipelined statements took {pipelined:?}, about {} round trips",
        pipelined.as_millis() / DELAY.as_millis()
    );
}

#[test]
fn a_deadline_mid_pipeline_kills_the_query_and_the_pool_replaces_the_connection() {
    let pool = common::pool(common::opts(), 1, Driver::Native);
    let mut conn = pool.get().unwrap();
    conn.set_deadline(Some(Instant::now() + Duration::from_millis(300)));
    let started = Instant::now();
    let err = conn
        .exec_many("SELECT SLEEP(?)", [0.0, 5.0, 0.0].map(|s| (s,)))
        .unwrap_err();
    assert!(
        matches!(err, Error::DeadlineExceeded { .. }),
        "the deadline: {err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(conn);
    // The next checkout gets a working connection.
    let mut conn = pool.get().unwrap();
    let r = conn.exec_many("SELECT ?", [1, 2].map(|i| (i,))).unwrap();
    assert_eq!(r[1].rows[0].get::<i64, _>(0), Some(2));
}

#[test]
fn a_checkout_on_a_fiber_pipelines_through_queryable() {
    fn total(db: &mut impl Queryable, ids: &[i64]) -> fiber_mysql::Result<i64> {
        let results = db.exec_many("SELECT CAST(? AS SIGNED)", ids.iter().map(|&i| (i,)))?;
        Ok(results
            .iter()
            .filter_map(|r| r.rows[0].get::<i64, _>(0))
            .sum())
    }
    let opts: Opts = common::opts();
    let pool = common::pool(opts, 2, Driver::Native);
    let fibers = fiber_pool::FiberPool::new(fiber_pool::PoolConfig::default()).unwrap();
    let got = fibers
        .run("pipeline", move || {
            let mut conn = pool.checkout()?;
            let plain = total(&mut conn, &[1, 2, 3])?;
            let in_tx = conn.transaction(|tx| total(tx, &[10, 20]))?;
            Ok::<_, Error>((plain, in_tx))
        })
        .unwrap()
        .unwrap();
    assert_eq!(got, (6, 30));
}

/// `SELECT ?` has no column type until an execution binds a value, and the type
/// follows the value: the server sends the columns again when they change and omits
/// them while they do not (MariaDB's metadata caching), so every answer of a
/// pipeline is read with the columns the server described last.
#[test]
fn a_result_typed_by_its_values_reads_right_in_every_answer() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let ints = conn.exec_many("SELECT ?", [1, 2, 3].map(|i| (i,))).unwrap();
    let got: Vec<i64> = ints.iter().map(|r| r.rows[0].get(0).unwrap()).collect();
    assert_eq!(got, [1, 2, 3]);
    let text = conn.exec("SELECT ?", ("four",)).unwrap();
    assert_eq!(text.rows[0].get::<String, _>(0).as_deref(), Some("four"));
    let mixed = conn
        .exec_many("SELECT ?", ["five", "six"].map(|s| (s,)))
        .unwrap();
    assert_eq!(mixed[1].rows[0].get::<String, _>(0).as_deref(), Some("six"));
    let again = conn.exec_many("SELECT ?", [7, 8].map(|i| (i,))).unwrap();
    let got: Vec<i64> = again.iter().map(|r| r.rows[0].get(0).unwrap()).collect();
    assert_eq!(got, [7, 8]);
}

/// A table `(id INT PRIMARY KEY)` no other test uses, on `conn`.
fn id_table(conn: &mut Conn, prefix: &str) -> String {
    let table = common::unique_table(prefix);
    conn.query(&format!("CREATE TABLE {table} (id INT PRIMARY KEY)"))
        .unwrap();
    table
}

fn count(conn: &mut Conn, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    conn.query(&sql).unwrap().scalar::<i64>().unwrap().unwrap()
}

/// Every set is checked before anything is sent, in later rounds too.
#[test]
fn a_bad_set_anywhere_sends_nothing() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = id_table(&mut conn, "pipeline_checked");
    let insert = format!("INSERT INTO {table} (id) VALUES (?)");
    let mut sets: Vec<Vec<fiber_mysql::Value>> = (0..PIPELINE_STATEMENTS as i64 + 6)
        .map(|i| vec![i.into()])
        .collect();
    sets.push(vec![]);
    let err = conn.exec_many(&insert, sets).unwrap_err();
    assert!(matches!(err, Error::Params(_)), "{err:?}");
    assert_eq!(count(&mut conn, &table), 0, "nothing of it ran");
}

/// Inside a transaction the statements run one at a time and the first failure stops
/// them: a failure there may have ended the transaction (a deadlock rolls it back),
/// and statements sent behind it would commit on their own.
#[test]
fn inside_a_transaction_the_first_failure_stops_the_rest() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = id_table(&mut conn, "pipeline_in_tx");
    let insert = format!("INSERT INTO {table} (id) VALUES (?)");
    conn.query("START TRANSACTION").unwrap();
    let err = conn
        .exec_many(&insert, [1, 2, 2, 3].map(|id| (id,)))
        .unwrap_err();
    assert!(matches!(err, Error::Server { code: 1062, .. }), "{err:?}");
    conn.query("COMMIT").unwrap();
    let ids = conn
        .query(&format!("SELECT id FROM {table} ORDER BY id"))
        .unwrap()
        .rows_as::<(i64,)>()
        .unwrap();
    assert_eq!(
        ids,
        vec![(1,), (2,)],
        "the insert after the failure never ran"
    );
}

/// A deadline that passes mid-pipeline kills the session, so the statements queued
/// behind the one running never run (`KILL QUERY` would stop only that one).
#[test]
fn a_deadline_mid_pipeline_runs_none_of_the_statements_queued_behind() {
    let mut setup = Conn::connect(&common::opts()).unwrap();
    let table = id_table(&mut setup, "pipeline_killed");
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let id = conn.connection_id();
    conn.set_deadline(Some(Instant::now() + Duration::from_millis(300)));
    let insert = format!("INSERT INTO {table} (id) SELECT ? FROM DUAL WHERE SLEEP(?) = 0");
    let err = conn
        .exec_many(&insert, [(1, 2.0), (2, 0.0), (3, 0.0), (4, 0.0)])
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    assert!(conn.is_broken(), "the connection is given up");
    drop(conn);
    // Once the session is gone (a server still reading the pipeline would run the
    // inserts queued behind the killed one first), nothing of it is there.
    let gone = format!("SELECT COUNT(*) FROM information_schema.processlist WHERE id = {id}");
    let until = Instant::now() + Duration::from_secs(10);
    while setup.query(&gone).unwrap().scalar::<i64>().unwrap() != Some(0) {
        assert!(Instant::now() < until, "session {id} is still there");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(count(&mut setup, &table), 0);
}

/// An execution too large to share a round goes out alone: before, it was written
/// behind one whose answer, larger than the socket buffers, the server was blocked
/// writing, and both sides waited until the read timeout.
#[test]
fn a_large_execution_after_a_large_answer_does_not_wait_for_a_timeout() {
    let mut opts = common::opts();
    opts.read_timeout = Duration::from_secs(10);
    let mut conn = Conn::connect(&opts).unwrap();
    let sql = "SELECT LENGTH(REPEAT('x', ?)), LENGTH(?)";
    let big = "y".repeat(12 << 20);
    let started = Instant::now();
    let r = conn
        .exec_many(sql, [(8i64 << 20, String::new()), (1, big)])
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r[0].rows[0].get::<i64, _>(0), Some(8 << 20));
    assert_eq!(r[1].rows[0].get::<i64, _>(1), Some(12 << 20));
}

/// An execution of exactly 0xFFFFFF bytes goes out as two packets (the second empty),
/// so its answer starts at sequence id 2, not 1.
#[test]
fn an_execution_split_into_two_packets_is_answered_in_step() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    // COM_STMT_EXECUTE of one string: 14 bytes of header and types, a 4-byte length.
    let exact = "z".repeat(0xFF_FFFF - 18);
    let r = conn
        .exec_many("SELECT LENGTH(?)", [exact, "ab".to_string()].map(|s| (s,)))
        .unwrap();
    assert_eq!(r[0].rows[0].get::<i64, _>(0), Some(0xFF_FFFF - 18));
    assert_eq!(r[1].rows[0].get::<i64, _>(0), Some(2));
}

/// A cancel while a pipeline runs kills its whole session too: the statements queued
/// behind the one running never run, and the checkout fails as cancelled.
#[test]
fn a_cancelled_pipeline_runs_none_of_the_statements_queued_behind() {
    let mut setup = Conn::connect(&common::opts()).unwrap();
    let table = id_table(&mut setup, "pipeline_cancelled");
    let pool = common::pool(common::opts(), 1, Driver::Native);
    let mut conn = pool.get().unwrap();
    let handle = conn.cancel_handle();
    let id = conn.connection_id().unwrap();
    let insert = format!("INSERT INTO {table} (id) SELECT ? FROM DUAL WHERE SLEEP(?) = 0");
    let running = std::thread::spawn(move || {
        let r = conn.exec_many(&insert, [(1, 5.0), (2, 0.0), (3, 0.0)]);
        drop(conn);
        r
    });
    let sleeping = format!(
        "SELECT COUNT(*) FROM information_schema.processlist WHERE id = {id} AND state = 'User sleep'"
    );
    let until = Instant::now() + Duration::from_secs(10);
    while setup.query(&sleeping).unwrap().scalar::<i64>().unwrap() != Some(1) {
        assert!(Instant::now() < until, "the first statement never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    handle.cancel().unwrap();
    let err = running.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err:?}");
    let gone = format!("SELECT COUNT(*) FROM information_schema.processlist WHERE id = {id}");
    while setup.query(&gone).unwrap().scalar::<i64>().unwrap() != Some(0) {
        assert!(Instant::now() < until, "session {id} is still there");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(count(&mut setup, &table), 0, "nothing of the pipeline ran");
}
