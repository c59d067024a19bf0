//! Requests that end when their client leaves, and requests that end at their
//! deadline, on both runtimes:
//!
//! - 20 clients ask for `/widgets?sleep=10` and close their connections after the
//!   queries started: within 4 s (tens of milliseconds on a quiet machine) every
//!   MySQL connection is back in the pool (the queries killed), the work is
//!   counted as cancelled, and nothing was answered; 20 clients that leave while
//!   their `/twitter` calls wait on a silent upstream end those calls as soon;
//! - the same when the clients leave during the second request of their connections,
//!   the first having run long enough for the sweeper to watch the socket;
//! - a client that shuts down only its sending side still gets its answer (after an
//!   interim 103 on HTTP/1.1: fiber_web/src/http/departure.rs);
//! - with `--request-timeout 1.5`, `/widgets?sleep=5` is a 504 within 1.8 s, and the
//!   query's connection is back in the pool within 1 s.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::either::Runtime;
use common::either::{Server, RUNTIMES};

/// Clients that leave.
const LEAVING: usize = 20;

/// How soon the work of clients that left must end: well before the 10 s queries
/// and the 15 s upstream read timeout would end it, with room for a busy machine
/// (`compare cancel-report` measures it: tens of milliseconds).
const ENDS_WITHIN: Duration = Duration::from_secs(4);

/// Either runtime with a pool of `LEAVING + 5`, and `request_timeout`.
fn server(runtime: Runtime, request_timeout: Option<Duration>) -> Server {
    server_with(runtime, request_timeout, |_| {})
}

/// [`server`], with the test config changed further by `tweak`.
fn server_with(
    runtime: Runtime,
    request_timeout: Option<Duration>,
    tweak: impl FnOnce(&mut fiberstack::config::ServeConfig),
) -> Server {
    Server::start(runtime, |cfg| {
        cfg.db_pool = LEAVING + 5;
        cfg.web.request_timeout = request_timeout;
        tweak(cfg);
    })
}

/// Send `GET path` on a new connection, without closing it.
fn ask(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    s
}

/// Poll `server`'s pool until `in_use` is `want`, for at most `within`; how long it took.
fn until_in_use(server: &Server, want: u64, within: Duration) -> Duration {
    let started = Instant::now();
    let ok = common::poll(within, || server.in_use() == want);
    assert!(
        ok,
        "db.in_use is {} after {within:?}, not {want}; stats: {}",
        server.in_use(),
        server.stats()
    );
    started.elapsed()
}

/// Poll until `server` counts `want` requests cancelled (a request is counted once
/// its work has ended, a moment after what it held was given back).
fn until_cancelled(server: &Server, want: u64, runtime: Runtime) {
    let cancelled = || server.stats()["http_server"]["cancelled"].as_u64().unwrap();
    common::poll(ENDS_WITHIN, || cancelled() >= want);
    assert_eq!(cancelled(), want, "{runtime}");
}

#[test]
fn clients_that_leave_give_their_connections_back_at_once() {
    for runtime in RUNTIMES {
        let server = server(runtime, None);
        let clients: Vec<TcpStream> = (0..LEAVING)
            .map(|_| ask(server.addr(), "/widgets?sleep=10"))
            .collect();
        until_in_use(&server, LEAVING as u64, Duration::from_secs(10));
        let left = Instant::now();
        drop(clients); // FIN on each: their kernels answer the probe with a reset
        let back = until_in_use(&server, 0, ENDS_WITHIN);
        eprintln!(
            "{runtime}: {LEAVING} connections back {} ms after their clients left",
            back.as_millis()
        );
        assert!(left.elapsed() < Duration::from_secs(5));
        until_cancelled(&server, LEAVING as u64, runtime);
        // The killed queries left the pool whole: a query answers at once.
        let r = common::get(server.addr(), "/widgets?sleep=0");
        assert_eq!((r.status, r.body.as_str()), (200, "Oh hai"), "{runtime}");
    }
}

/// The sweeper keeps a connection's socket in its hang-up set from its first request
/// that ran a tick to the connection's end (fiber_web/src/http/idle.rs): a client that
/// leaves during a later request of the same connection is seen as soon.
#[test]
fn clients_that_leave_during_a_later_request_give_their_connections_back_at_once() {
    for runtime in RUNTIMES {
        let server = server(runtime, None);
        let mut clients: Vec<TcpStream> = (0..LEAVING)
            .map(|_| ask(server.addr(), "/widgets?sleep=0.1"))
            .collect();
        for s in &mut clients {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let answer = common::read_final(s, &mut Vec::new());
            assert_eq!(
                (answer.status, answer.body.as_str()),
                (200, "Oh hai"),
                "{runtime}"
            );
            s.write_all(b"GET /widgets?sleep=10 HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
        }
        until_in_use(&server, LEAVING as u64, Duration::from_secs(10));
        drop(clients);
        let back = until_in_use(&server, 0, ENDS_WITHIN);
        eprintln!(
            "{runtime}: {LEAVING} connections back {} ms after their clients left a second request",
            back.as_millis()
        );
        until_cancelled(&server, LEAVING as u64, runtime);
    }
}

#[test]
fn a_client_that_half_closes_still_gets_its_answer() {
    for runtime in RUNTIMES {
        let server = server(runtime, None);
        let mut s = ask(server.addr(), "/widgets?sleep=0.3");
        s.shutdown(Shutdown::Write).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        // An interim 103 may come first (the probe that told it from a departure).
        let last = got.rsplit("HTTP/1.1 ").next().unwrap_or_default();
        assert!(last.starts_with("200 OK"), "{runtime}: {got:?}");
        assert!(got.ends_with("Oh hai"), "{runtime}: {got:?}");
        assert!(
            got.matches("HTTP/1.1 103 Early Hints\r\n\r\n").count() <= 1,
            "{runtime}: {got:?}"
        );
        let cancelled = server.stats()["http_server"]["cancelled"].as_u64().unwrap();
        assert_eq!(cancelled, 0, "{runtime}");
    }
}

#[test]
fn a_request_past_its_deadline_is_a_504_and_its_query_is_killed() {
    // Longer than MariaDB's thread-pool stall limit (500 ms): a statement queued
    // behind a group stalled on a busy machine's disk still fits in it.
    let timeout = Duration::from_millis(1500);
    for runtime in RUNTIMES {
        // A private MariaDB: on the shared one, other tests' sleeping queries fill its
        // thread pool's groups, and a new statement waits for a thread (MariaDB
        // throttles their creation) longer than any deadline a test can afford.
        let server = server_with(runtime, Some(timeout), |cfg| cfg.database_url = None);
        let started = Instant::now();
        let r = common::get(server.addr(), "/widgets?sleep=5");
        let took = started.elapsed();
        assert_eq!(r.status, 504, "{runtime}: {}", r.body);
        assert!(r.body.contains("deadline passed"), "{runtime}: {}", r.body);
        if runtime == Runtime::Fibers {
            assert!(r.body.contains("waiting for the query"), "{}", r.body);
        }
        assert!(
            took >= timeout && took < timeout + Duration::from_millis(300),
            "{runtime}: answered after {took:?}"
        );
        until_in_use(&server, 0, Duration::from_secs(1));
        // Within its deadline a request is served as ever.
        let r = common::get(server.addr(), "/widgets?sleep=0.1");
        assert_eq!(r.status, 200, "{runtime}: {}", r.body);
        let r = common::get(server.addr(), "/sleep?secs=3");
        assert_eq!(r.status, 504, "{runtime}: {}", r.body);
    }
}

/// An upstream that accepts connections (the kernel does, from its backlog) and
/// never answers; `/twitter` on a server pointed at it waits for its first byte.
fn silent_upstream() -> (std::net::TcpListener, String) {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/search.json", silent.local_addr().unwrap());
    (silent, url)
}

#[test]
fn clients_that_leave_abandon_their_upstream_calls() {
    let (_silent, upstream) = silent_upstream();
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |cfg| cfg.upstream = Some(upstream.clone()));
        let in_flight = || server.stats()["http_client"]["in_flight"].as_u64().unwrap();
        let clients: Vec<TcpStream> = (0..LEAVING)
            .map(|_| ask(server.addr(), "/twitter"))
            .collect();
        let waiting = common::poll(Duration::from_secs(10), || in_flight() == LEAVING as u64);
        assert!(
            waiting,
            "{runtime}: {} calls in flight, not {LEAVING}",
            in_flight()
        );
        drop(clients);
        let ended = common::poll(ENDS_WITHIN, || in_flight() == 0);
        assert!(
            ended,
            "{runtime}: {} calls still in flight {ENDS_WITHIN:?} after their clients left; stats: {}",
            in_flight(),
            server.stats()
        );
        until_cancelled(&server, LEAVING as u64, runtime);
    }
}

#[test]
fn an_upstream_call_past_the_requests_deadline_is_a_504() {
    let (_silent, upstream) = silent_upstream();
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |cfg| {
            cfg.upstream = Some(upstream.clone());
            cfg.web.request_timeout = Some(Duration::from_millis(500));
        });
        let started = Instant::now();
        let r = common::get(server.addr(), "/twitter");
        let took = started.elapsed();
        assert_eq!(r.status, 504, "{runtime}: {}", r.body);
        assert!(r.body.contains("deadline"), "{runtime}: {}", r.body);
        assert!(
            took < Duration::from_millis(800),
            "{runtime}: answered after {took:?}"
        );
    }
}
