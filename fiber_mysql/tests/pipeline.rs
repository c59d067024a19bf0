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
    // Wrong arity is refused before anything is sent.
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
