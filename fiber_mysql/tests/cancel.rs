//! Cancelling a checkout's query from another coroutine or thread, and deadlines,
//! against a real MariaDB: `select sleep(10)` stops within milliseconds, the connection
//! is reused afterwards, a cancel never reaches another checkout, the kills go to the
//! server's `extra_port` (past a thread pool with no thread free) or, without one, to
//! its own port, a storm of cancels ends every statement at once in either thread
//! mode, and a query whose KILL is slow is cut off.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_mysql::launcher::ThreadHandling;
use fiber_mysql::{Conn, Error, Phase, Pool, PoolConfig, KILL_CONNECTIONS, KILL_PATIENCE};

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

/// A `SHOW GLOBAL STATUS` counter.
fn status(conn: &mut Conn, name: &str) -> u64 {
    let sql = format!("SHOW GLOBAL STATUS LIKE '{name}'");
    let r = conn.query(&sql).unwrap();
    r.rows[0].get::<String, _>(1).unwrap().parse().unwrap()
}

/// Polls until `what` holds, for at most [`STATE_WAIT`].
fn wait_for(what: &str, mut holds: impl FnMut() -> bool) {
    let until = Instant::now() + STATE_WAIT;
    while !holds() {
        assert!(Instant::now() < until, "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The server connections that run a statement now (killed ones included), the
/// watcher's own left out.
fn statements(watcher: &mut Conn) -> Vec<u64> {
    let own = u64::from(watcher.connection_id());
    let r = watcher.query("SHOW PROCESSLIST").unwrap();
    r.rows
        .iter()
        .filter(|row| {
            let command = row.get::<String, _>("Command");
            matches!(command.as_deref(), Some("Query" | "Killed"))
        })
        .filter_map(|row| row.get::<u64, _>("Id"))
        .filter(|&id| id != own)
        .collect()
}

/// The administrator, through the server's `extra_port` (served even when its thread
/// pool has no thread free).
fn extra_port_admin(server: &fiber_mysql::launcher::MariaDb) -> Conn {
    Conn::connect(&fiber_mysql::Opts {
        port: server.extra_port(),
        ..server.admin_opts()
    })
    .unwrap()
}

/// The pool finds the server's `extra_port` itself (the private server's URL does
/// not name it) and opens its side channel there, ahead of any kill: every KILL
/// connection goes to that port, and the server's own port has only the pool's.
#[test]
fn the_side_channel_is_opened_ahead_on_the_servers_extra_port() {
    const SIZE: usize = 2;
    let server = common::private_server(SIZE + 20);
    assert_eq!(server.opts().kill_port, None, "found, not told");
    let pool = pool(server.opts(), SIZE);
    wait_for("the side channel opened on the extra port", || {
        common::connections_to(server.extra_port()) == KILL_CONNECTIONS
            && pool.stats().kill_connections == KILL_CONNECTIONS
    });
    assert_eq!(pool.stats().kill_connections, KILL_CONNECTIONS);
    // A cancel goes through them: no connection of its own, on either port.
    let mut conn = pool.get().unwrap();
    let handle = conn.cancel_handle();
    let query = may::go!(move || conn.query("select sleep(10)"));
    let mut watcher = extra_port_admin(&server);
    wait_for("the query ran", || statements(&mut watcher).len() == 1);
    handle.cancel().unwrap();
    assert!(matches!(query.join().unwrap(), Err(Error::Cancelled)));
    assert_eq!(
        common::connections_to(server.extra_port()),
        KILL_CONNECTIONS + 1
    );
    assert_eq!(common::connections_to(server.port()), SIZE);
}

/// Kills on the `extra_port` reach a statement while the server's thread pool has no
/// thread free (held to the threads it has, each running a sleep), and end it on the
/// server at once. A pool told to send its kills to the server's own port
/// (`kill_port`, as to a server without an `extra_port`) gets no KILL answered then:
/// its cancelled query is cut off after `KILL_PATIENCE` instead and its connection
/// replaced, while the statement runs on until the pool has a thread again.
#[test]
fn kills_pass_a_thread_pool_with_no_thread_free_and_a_slow_kill_is_cut_off() {
    const EACH: usize = 8;
    /// Longer than the whole test on the slowest machine: the picks below take the
    /// statements running when every thread is asleep, and the first sleeps started
    /// must still be those. (Every one ends by a cancel or with its server.)
    const HOLD: &str = "select sleep(120)";
    /// Connections that run sleeps beyond the pool's own, over the threads it has.
    const SPARE_ABOVE_THREADS: usize = 4;
    /// Thread groups, pinned: MariaDB makes one per core, and which group a
    /// connection's statements run in goes by its id. With many groups some have a
    /// single thread, and a sleep may take the one thread another pool's statement
    /// needed.
    const GROUPS: u32 = 2;
    let server = common::private_server(2 * EACH + 40);
    let mut watcher = extra_port_admin(&server);
    watcher
        .query(&format!("SET GLOBAL thread_pool_size = {GROUPS}"))
        .unwrap();
    let extra = pool(server.opts(), EACH);
    let own_port = fiber_mysql::Opts {
        kill_port: Some(server.port()),
        ..server.opts()
    };
    let own = pool(own_port, EACH);
    let mut threads = 0;
    wait_for("both side channels opened, every pool thread idle", || {
        threads = status(&mut watcher, "Threadpool_threads");
        extra.stats().kill_connections == KILL_CONNECTIONS
            && own.stats().kill_connections == KILL_CONNECTIONS
            && status(&mut watcher, "Threadpool_idle_threads") == threads
    });
    // Every connection is made before the pool is held: a handshake needs a thread.
    let mut running = Vec::new();
    for pool in [&extra, &own] {
        for _ in 0..EACH {
            let mut conn = pool.get().unwrap();
            let id = u64::from(conn.connection_id().unwrap());
            running.push((id, conn.cancel_handle(), conn));
        }
    }
    let spare: Vec<Conn> = (0..threads as usize + SPARE_ABOVE_THREADS)
        .map(|_| Conn::connect(&server.opts()).unwrap())
        .collect();
    let sleeping = |watcher: &mut Conn| -> Vec<u64> {
        let r = watcher.query("SHOW PROCESSLIST").unwrap();
        r.rows
            .iter()
            .filter(|row| {
                let state = row.get::<Option<String>, _>("State").flatten();
                state.as_deref() == Some("User sleep")
            })
            .filter_map(|row| row.get::<u64, _>("Id"))
            .collect()
    };
    // One sleep of each pool runs first, on threads free then, so that both have a
    // statement on a thread whichever groups their connections are in.
    let mut started: Vec<_> = running
        .into_iter()
        .map(|(id, handle, conn)| (id, handle, Some(conn), None))
        .collect();
    let mut start = |i: usize| {
        let mut conn = started[i].2.take().unwrap();
        started[i].3 = Some(may::go!(move || conn.query(HOLD)));
        started[i].0
    };
    for first in [0, EACH] {
        let id = start(first);
        wait_for("the pool's first sleep runs", || {
            sleeping(&mut watcher).contains(&id)
        });
    }
    // Every thread the pool has now is idle or runs one of those two: held to that
    // many, it makes no more. Then sleeps on every thread, and more queued behind them
    // in every group, so a thread freed by a kill takes the next sleep, never a KILL
    // connection's command.
    let threads = status(&mut watcher, "Threadpool_threads");
    assert!(
        spare.len() as u64 + 2 * EACH as u64 >= threads + SPARE_ABOVE_THREADS as u64,
        "the pool made {threads} threads: more than the sleeps can hold"
    );
    watcher
        .query(&format!("SET GLOBAL thread_pool_max_threads = {threads}"))
        .unwrap();
    for i in (1..EACH).chain(EACH + 1..2 * EACH) {
        start(i);
    }
    let running: Vec<_> = started
        .into_iter()
        .map(|(id, handle, _, query)| (id, handle, query.unwrap()))
        .collect();
    let blockers: Vec<_> = spare
        .into_iter()
        .map(|mut conn| may::go!(move || conn.query(HOLD).map(drop)))
        .collect();
    // (Threadpool_idle_threads counts a thread in a SLEEP as idle: not a measure.)
    wait_for("every pool thread asleep", || {
        sleeping(&mut watcher).len() as u64 == threads
    });
    let asleep = sleeping(&mut watcher);
    let pick = |from: std::ops::Range<usize>| {
        from.clone()
            .find(|&i| asleep.contains(&running[i].0))
            .unwrap_or_else(|| panic!("no statement of {from:?} runs: {asleep:?}"))
    };
    // Through the extra port: the KILL is answered and the statement ends at once.
    let fast = pick(0..EACH);
    let started = Instant::now();
    running[fast].1.cancel().unwrap();
    wait_for("the killed statement ended", || {
        !statements(&mut watcher).contains(&running[fast].0)
    });
    let took = started.elapsed();
    println!("a cancel through the extra port, no pool thread free: {took:?}");
    assert!(took < KILL_PATIENCE, "{took:?}");
    assert_eq!(extra.stats().replaced, 0);
    wait_for("the freed thread took a queued sleep", || {
        sleeping(&mut watcher).len() as u64 == threads
    });
    // Through the server's own port: no thread answers the KILL, so the query is cut
    // off, its slot free at once, while its statement runs on.
    let slow = pick(EACH..2 * EACH);
    let started = Instant::now();
    running[slow].1.cancel().unwrap();
    let took = started.elapsed();
    println!("a cancel whose KILL waits for a pool thread: cut off after {took:?}");
    assert!(
        took >= KILL_PATIENCE && took < 3 * KILL_PATIENCE,
        "{took:?}"
    );
    wait_for("the cut-off checkout ended", || {
        own.stats().in_use == EACH - 1
    });
    assert!(statements(&mut watcher).contains(&running[slow].0));
    // The pool has threads again: the KILLs still out land, the rest are cancelled.
    watcher
        .query("SET GLOBAL thread_pool_max_threads = 500")
        .unwrap();
    for (_, handle, _) in &running {
        handle.cancel().unwrap();
    }
    for (id, _, query) in running {
        let result = query.join().unwrap();
        assert!(matches!(result, Err(Error::Cancelled)), "{id}: {result:?}");
    }
    // The slow cancel's connection, at least, was cut off and replaced. (The cleanup's
    // cancels of statements still queued are cut off too: a KILL that reaches a
    // session before its command does is dropped.)
    assert!(own.stats().replaced >= 1, "{:?}", own.stats());
    // The blockers end with their server, not by KILLs: a KILL of a SLEEP sent while
    // other sleeps wake waits up to MariaDB's 2 s (`killer.rs`), and one watcher
    // sending a dozen of those in turn would outlast any wait here.
    drop(server);
    wait_for("every blocker ended with its server", || {
        blockers.iter().all(|b| b.is_done())
    });
    for b in blockers {
        let result = b.join().unwrap();
        assert!(result.is_err(), "a blocker's sleep outlived its server");
    }
}

/// A storm of cancels in either thread mode: every query fails as cancelled, every
/// statement has ended on the server within a second, and no connection is cut off.
/// The kills take turns: sent all at once, MariaDB answers nearly each KILL of a
/// `SLEEP` 2 s late (`killer.rs`), the statements run on for those 2 s, and the
/// checkouts are cut off.
#[test]
fn a_storm_of_cancels_in_either_thread_mode_ends_every_statement_at_once() {
    const QUERIES: usize = 20;
    const STORMS: usize = 3;
    /// Cut off connections tolerated over a mode's 60 cancels: a KILL may still meet
    /// another sleeper's hold on the server's shared mutex now and then, and on a
    /// loaded machine a few pass `KILL_PATIENCE`. Kills sent all at once have nearly
    /// every one cut.
    const CUT_AT_MOST: u64 = 10;
    for threads in ThreadHandling::ALL {
        let server = common::private_server_in(QUERIES + 20, threads);
        let pool = pool(server.opts(), QUERIES);
        let mut watcher = extra_port_admin(&server);
        wait_for("the side channel opened", || {
            pool.stats().kill_connections == KILL_CONNECTIONS
        });
        for storm in 0..STORMS {
            let mut handles = Vec::new();
            let mut queries = Vec::new();
            for _ in 0..QUERIES {
                let mut conn = pool.get().unwrap();
                handles.push(conn.cancel_handle());
                queries.push(may::go!(move || conn.query("select sleep(10)")));
            }
            wait_for("every query ran", || {
                statements(&mut watcher).len() == QUERIES
            });
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
            let returned = started.elapsed();
            wait_for("every statement ended", || {
                statements(&mut watcher).is_empty()
            });
            let ended = started.elapsed();
            println!("{threads}, storm {storm}: {QUERIES} cancels returned in {returned:?}, their statements ended in {ended:?}");
            assert!(ended < Duration::from_secs(1), "{threads}: {ended:?}");
        }
        let stats = pool.stats();
        println!("{threads}: {stats:?}");
        assert!(stats.replaced <= CUT_AT_MOST, "{threads}: {stats:?}");
    }
}

/// A client must not depend on an `extra_port`: told of one where nothing listens,
/// the side channel opens on the server's own port, and cancels work as ever.
#[test]
fn kills_go_to_the_servers_own_port_when_the_kill_port_refuses() {
    let server = common::private_server(20);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = fiber_mysql::Opts {
        kill_port: Some(closed),
        ..server.opts()
    };
    let pool = pool(opts, 1);
    wait_for("the side channel opened", || {
        pool.stats().kill_connections == KILL_CONNECTIONS
    });
    assert_eq!(common::connections_to(server.extra_port()), 0);
    let mut watcher = extra_port_admin(&server);
    let mut conn = pool.get().unwrap();
    let handle = conn.cancel_handle();
    let query = may::go!(move || conn.query("select sleep(10)"));
    wait_for("the query ran", || statements(&mut watcher).len() == 1);
    let started = Instant::now();
    handle.cancel().unwrap();
    assert!(matches!(query.join().unwrap(), Err(Error::Cancelled)));
    wait_for("the statement ended", || {
        statements(&mut watcher).is_empty()
    });
    assert!(started.elapsed() < KILL_PATIENCE, "{:?}", started.elapsed());
    assert_eq!(pool.stats().replaced, 0);
}

/// Runs `sql` under a deadline `ms` from now on `conn`, checks that it failed on that
/// deadline in the query phase, and gives back the error and how long it took.
fn query_past_a_deadline(
    conn: &mut fiber_mysql::PooledConn,
    ms: u64,
    sql: &str,
) -> (Error, Duration) {
    let started = Instant::now();
    conn.set_deadline(Some(started + Duration::from_millis(ms)));
    let err = conn.query(sql).unwrap_err();
    let took = started.elapsed();
    assert_query_deadline(&err);
    (err, took)
}

/// `err` is a deadline that passed in the query phase.
fn assert_query_deadline(err: &Error) {
    assert!(
        matches!(
            err,
            Error::DeadlineExceeded {
                phase: Phase::Query
            }
        ),
        "{err}"
    );
}

#[test]
fn a_deadline_kills_the_query_and_names_the_phase() {
    let pool = pool(common::opts(), 1);
    let mut conn = pool.get().unwrap();
    let (err, took) = query_past_a_deadline(&mut conn, 200, "select sleep(10)");
    println!("deadline of 200 ms: the query returned after {took:?}");
    assert!(!err.is_unavailable());
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Past the deadline nothing is sent; without one the connection serves again.
    let started = Instant::now();
    let err = conn.query("select sleep(1)").unwrap_err();
    assert_query_deadline(&err);
    // Within the second a `sleep(1)` that was sent would take (a loaded machine may
    // deschedule the test for a good part of it).
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    conn.set_deadline(None);
    assert_eq!(
        conn.query("SELECT 7").unwrap().scalar::<i64>().unwrap(),
        Some(7)
    );
}

/// A deadline that passes while the query waits for the server to read it: its `KILL
/// QUERY` reaches an idle session and is dropped when the command starts, so the
/// session itself is killed. The caller hears of it within `KILL_PATIENCE` or so, and
/// the statement never runs. (Here the query waits in the server's thread pool: its
/// connection's group is busy with a statement that computes and never waits, and a
/// group that busy reads nothing new until `thread_pool_stall_limit`, 500 ms.)
#[test]
fn a_deadline_before_the_server_read_the_query_kills_the_session() {
    let server = common::private_server(40);
    let pool = pool(server.opts(), 1);
    let mut watcher = extra_port_admin(&server);
    wait_for("the side channel opened", || {
        pool.stats().kill_connections == KILL_CONNECTIONS
    });
    let groups = watcher
        .query("SELECT @@thread_pool_size")
        .unwrap()
        .scalar::<u64>()
        .unwrap()
        .unwrap();
    let mut conn = pool.get().unwrap();
    let id = u64::from(conn.connection_id().unwrap());
    // MariaDB puts connection `id` in thread group `id % groups`.
    let mut busy = (0..10 * groups)
        .map(|_| Conn::connect(&server.opts()).unwrap())
        .find(|c| u64::from(c.connection_id()) % groups == id % groups)
        .expect("a connection in the same thread group");
    let busy_id = u64::from(busy.connection_id());
    let computing = may::go!(move || busy.query("SELECT BENCHMARK(1000000000, MD5('x'))"));
    wait_for("the group is busy", || {
        statements(&mut watcher).contains(&busy_id)
    });
    let (_, took) = query_past_a_deadline(&mut conn, 100, "select sleep(10)");
    println!("a deadline of 100 ms on a query the server had not read: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    drop(conn);
    watcher.query(&format!("KILL QUERY {busy_id}")).unwrap();
    // (A killed BENCHMARK may answer rather than fail: either ends it.)
    let _ = computing.join().unwrap();
    // The session was killed (gone, or going once its thread group has a thread); its
    // `sleep(10)` never starts, where a dropped KILL QUERY alone would let it run.
    wait_for("the session killed", || {
        let r = watcher.query("SHOW PROCESSLIST").unwrap();
        let row = r
            .rows
            .iter()
            .find(|row| row.get::<u64, _>("Id") == Some(id));
        row.is_none_or(|row| row.get::<String, _>("Command").as_deref() == Some("Killed"))
    });
    assert_eq!(
        pool.get()
            .unwrap()
            .query("SELECT 7")
            .unwrap()
            .scalar::<i64>()
            .unwrap(),
        Some(7)
    );
    // Not kept: a KILL QUERY that had stopped a running statement would have kept it.
    assert_eq!(pool.stats().opened, 2, "{:?}", pool.stats());
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
