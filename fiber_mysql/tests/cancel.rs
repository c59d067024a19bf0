//! Cancelling a checkout's query from another coroutine or thread, and deadlines,
//! against a real MariaDB: `select sleep(10)` stops within milliseconds, the connection
//! is reused afterwards, and a cancel never reaches another checkout.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_mysql::{Conn, Error, Phase, Pool, PoolConfig, KILL_CONNECTIONS};

/// How many cancels the latency figures are taken over.
const RUNS: usize = 50;
/// Longest any wait for a state in these tests.
const STATE_WAIT: Duration = Duration::from_secs(10);

fn pool(opts: fiber_mysql::Opts, size: usize) -> Pool {
    Pool::new(PoolConfig::new(opts, size)).unwrap()
}

/// Polls the server until connection `id` runs `sql` (so a cancel finds it running
/// on the server, not on its way there).
fn wait_until_running(watcher: &mut Conn, id: u32, sql: &str) {
    let until = Instant::now() + STATE_WAIT;
    loop {
        let r = watcher.query("SHOW PROCESSLIST").unwrap();
        let running = r.rows.iter().any(|row| {
            row.get::<u64, _>("Id") == Some(u64::from(id))
                && row.get::<Option<String>, _>("Info").flatten().as_deref() == Some(sql)
        });
        if running {
            return;
        }
        assert!(Instant::now() < until, "connection {id} never ran {sql}");
        may::coroutine::sleep(Duration::from_millis(1));
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[test]
fn cancel_stops_a_sleeping_query_within_milliseconds_and_the_connection_is_reused() {
    let opts = common::opts();
    let pool = pool(opts.clone(), 1);
    let mut watcher = Conn::connect(&opts).unwrap();
    let mut latencies = Vec::new();
    for run in 0..RUNS {
        let mut conn = pool.get().unwrap();
        let id = conn.connection_id().unwrap();
        let handle = conn.cancel_handle();
        let query = may::go!(move || {
            let result = conn.query("select sleep(10)");
            let returned = Instant::now();
            // The checkout stays cancelled: a later command is refused unsent.
            let later = conn.query("select 1");
            (result, returned, later)
        });
        wait_until_running(&mut watcher, id, "select sleep(10)");
        let cancelled_at = Instant::now();
        // From another thread, as a watchdog would.
        let h = handle.clone();
        std::thread::spawn(move || h.cancel())
            .join()
            .unwrap()
            .unwrap();
        let (result, returned, later) = query.join().unwrap();
        assert!(
            matches!(result, Err(Error::Cancelled)),
            "run {run}: {result:?}"
        );
        assert!(!result.unwrap_err().is_unavailable());
        assert!(matches!(later, Err(Error::Cancelled)), "{later:?}");
        assert!(handle.is_cancelled());
        latencies.push(returned.saturating_duration_since(cancelled_at));

        // The same connection serves the next checkout, reset and correct.
        let mut next = pool.get().unwrap();
        assert_eq!(next.connection_id(), Some(id), "reused, not replaced");
        assert_eq!(
            next.query("SELECT 41 + 1")
                .unwrap()
                .scalar::<i64>()
                .unwrap(),
            Some(42)
        );
        assert_eq!(
            next.exec("SELECT ? * 2", (21,))
                .unwrap()
                .scalar::<i64>()
                .unwrap(),
            Some(42)
        );
    }
    let stats = pool.stats();
    assert_eq!(
        stats.resets, RUNS as u64,
        "every cancelled checkout was reset: {stats:?}"
    );
    assert_eq!(stats.replaced, 0, "{stats:?}");
    latencies.sort();
    let (median, p99) = (percentile(&latencies, 50), percentile(&latencies, 99));
    println!(
        "cancel of select sleep(10) -> Error::Cancelled, {RUNS} runs: median {median:?}, p99 {p99:?}, max {:?}",
        latencies[RUNS - 1]
    );
    assert!(median < Duration::from_millis(100), "median {median:?}");
}

/// A handle kept past its checkout does nothing to the next checkout of the same
/// connection: its query runs to the end while the stale handle keeps cancelling.
#[test]
fn a_stale_handle_never_kills_the_next_checkouts_query() {
    let pool = pool(common::opts(), 1);
    let stale = {
        let mut conn = pool.get().unwrap();
        let handle = conn.cancel_handle();
        conn.query("select 1").unwrap();
        handle
    };
    stale.cancel().unwrap();
    assert!(!stale.is_cancelled(), "the checkout had ended");
    let mut next = pool.get().unwrap();
    let started = Instant::now();
    let query = may::go!(move || next.query("select sleep(0.5)").map(|r| r.scalar::<i64>()));
    while !query.is_done() {
        stale.cancel().unwrap();
        may::coroutine::sleep(Duration::from_millis(5));
    }
    let result = query.join().unwrap();
    assert!(matches!(result, Ok(Ok(Some(0)))), "{result:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );
}

/// What the guarantee rests on: MariaDB drops a `KILL QUERY` that reaches an idle
/// session when its next command starts. And a checkout cancelled while idle sends
/// no KILL: its next command is refused unsent, the next checkout is unaffected.
#[test]
fn a_kill_of_an_idle_session_is_dropped_and_an_idle_cancel_refuses_later_commands() {
    let opts = common::opts();
    let mut target = Conn::connect(&opts).unwrap();
    let mut killer = Conn::connect(&opts).unwrap();
    killer
        .query(&format!("KILL QUERY {}", target.connection_id()))
        .unwrap();
    let r = target.query("select sleep(0.2)").unwrap();
    assert_eq!(r.scalar::<i64>().unwrap(), Some(0), "not interrupted");

    let pool = pool(opts, 1);
    let mut conn = pool.get().unwrap();
    conn.query("select 1").unwrap();
    let handle = conn.cancel_handle();
    handle.cancel().unwrap();
    let started = Instant::now();
    assert!(matches!(
        conn.query("select sleep(1)"),
        Err(Error::Cancelled)
    ));
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "refused, not sent"
    );
    drop(conn);
    let mut next = pool.get().unwrap();
    assert_eq!(
        next.query("select sleep(0.2)")
            .unwrap()
            .scalar::<i64>()
            .unwrap(),
        Some(0)
    );
}

/// A storm of cancels goes through the pool's bounded side channel: every query is
/// stopped, and the server never sees more than the pool, the side channel and the
/// test's own watcher at once.
#[test]
fn a_storm_of_cancels_shares_the_side_channel() {
    const QUERIES: usize = 30;
    let server = common::private_server(QUERIES + 20);
    let opts = server.opts();
    let pool = pool(opts, QUERIES);
    let mut watcher = Conn::connect(&server.admin_opts()).unwrap();
    let mut handles = Vec::new();
    let mut queries = Vec::new();
    for _ in 0..QUERIES {
        let mut conn = pool.get().unwrap();
        let id = conn.connection_id().unwrap();
        handles.push(conn.cancel_handle());
        queries.push(may::go!(move || conn.query("select sleep(10)")));
        wait_until_running(&mut watcher, id, "select sleep(10)");
    }
    // From here on Max_used_connections counts from those open now (the pool and the
    // watcher): what connected and left before (the pool's start-up probe) is not seen.
    watcher.query("FLUSH STATUS").unwrap();
    let started = Instant::now();
    let cancels: Vec<_> = handles
        .into_iter()
        .map(|h| may::go!(move || h.cancel()))
        .collect();
    for c in cancels {
        c.join().unwrap().unwrap();
    }
    for q in queries {
        assert!(matches!(q.join().unwrap(), Err(Error::Cancelled)));
    }
    let took = started.elapsed();
    let max_used: u64 = watcher
        .query("SHOW GLOBAL STATUS LIKE 'Max_used_connections'")
        .unwrap()
        .rows[0]
        .get::<String, _>(1)
        .unwrap()
        .parse()
        .unwrap();
    println!("{QUERIES} cancels: {took:?}, max connections used {max_used}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The pool, the side channel, the watcher (the pool's start-up probe is closed
    // before the pool opens; the launcher's administrator left before the test).
    assert!(
        max_used as usize <= QUERIES + KILL_CONNECTIONS + 2,
        "{max_used}"
    );
}

#[test]
fn a_deadline_kills_the_query_and_names_the_phase() {
    let pool = pool(common::opts(), 1);
    let mut conn = pool.get().unwrap();
    let started = Instant::now();
    conn.set_deadline(Some(started + Duration::from_millis(200)));
    let err = conn.query("select sleep(10)").unwrap_err();
    let took = started.elapsed();
    println!("deadline of 200 ms: the query returned after {took:?}");
    assert!(
        matches!(
            err,
            Error::DeadlineExceeded {
                phase: Phase::Query
            }
        ),
        "{err}"
    );
    assert!(!err.is_unavailable());
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Past the deadline nothing is sent; without one the connection serves again.
    let started = Instant::now();
    let err = conn.query("select sleep(1)").unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeadlineExceeded {
                phase: Phase::Query
            }
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    conn.set_deadline(None);
    assert_eq!(
        conn.query("SELECT 7").unwrap().scalar::<i64>().unwrap(),
        Some(7)
    );
}

#[test]
fn checkout_until_names_the_checkout_wait_and_the_connect() {
    let pool = pool(common::opts(), 1);
    let held = pool.get().unwrap();
    let started = Instant::now();
    let Err(err) = pool.checkout_until(started + Duration::from_millis(200)) else {
        panic!("checked out a connection that is held")
    };
    assert!(
        matches!(
            err,
            Error::DeadlineExceeded {
                phase: Phase::CheckoutWait
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "{:?}",
        started.elapsed()
    );
    assert!(!err.is_unavailable());
    held.discard(); // the slot is empty now: the next checkout connects first
    let deadline = Instant::now() + Duration::from_millis(50);
    let mut conn = pool.get_until(deadline).unwrap();
    assert_eq!(conn.deadline(), Some(deadline));
    while Instant::now() < deadline {
        may::coroutine::sleep(Duration::from_millis(5));
    }
    let err = conn.query("SELECT 1").unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeadlineExceeded {
                phase: Phase::Connect
            }
        ),
        "{err}"
    );
    drop(conn);
    let within = pool.checkout_until(Instant::now() + Duration::from_secs(5));
    assert_eq!(
        within
            .unwrap()
            .query("SELECT 1")
            .unwrap()
            .scalar::<i64>()
            .unwrap(),
        Some(1)
    );
}

/// The handle is what the other engineer's watchdog holds: `Send + Sync + Clone`.
#[test]
fn the_handle_is_send_sync_and_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<fiber_mysql::CancelHandle>();
    let _ = Arc::new(());
}
