//! Clients that give up on queued requests, on both runtimes: every gauge in `/stats`
//! must return to 0, the fiber server must not run a request whose client has gone,
//! must stop the ones running (and count both), and the next burst must be served
//! without a false 503.
//!
//! The scenario: `--fibers 2 --queue 4 --db-pool 4`, six requests to
//! `/widgets?sleep=1`; two run, four wait. Their clients go once the server shows all
//! six admitted (polled, not timed as with `curl -m 0.3`), and they
//! go with a reset (SO_LINGER 0, as a killed client or a proxy that gives up does): a
//! client that only closes its sending side may still read the answer, and both
//! runtimes answer it (hyper's `half_close`, `conn.rs`), so only a reset says "gone".
//! The counters are read in-process with the same snapshot `/stats` serves: the route
//! itself needs a slot, and while the queue is full it is rightly refused.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{concurrent_gets, poll};
use fiberstack::config::Options;
use fiberstack::config::{Runtime, ServeConfig};
use serde_json::Value;

const FIBERS: usize = 2;
const QUEUE: usize = 4;

fn config(runtime: Runtime) -> ServeConfig {
    ServeConfig {
        runtime,
        db_pool: 4,
        database_url: Some(common::database_url()),
        web: Options {
            bind: "127.0.0.1:0".parse().unwrap(),
            fibers: FIBERS,
            queue: QUEUE,
            workers: 2,
            ..ServeConfig::default().web
        },
        ..ServeConfig::default()
    }
}

/// The slot gauges: `fibers` on the fiber server, `tasks` on the twin.
fn slots(s: &Value) -> &Value {
    s.get("fibers").unwrap_or(&s["tasks"])
}

fn all_idle(s: &Value) -> bool {
    let zero = |v: &Value| v.as_u64() == Some(0);
    zero(&slots(s)["busy"])
        && zero(&slots(s)["queued"])
        && zero(&s["db"]["in_use"])
        && zero(&s["db"]["waiting"])
        && zero(&s["http_client"]["in_flight"])
}

/// Send `FIBERS + QUEUE` slow requests, wait until they all hold a slot or a place in
/// the queue, then close every client; returns once the gauges are back to 0.
fn abandon_a_full_queue(addr: SocketAddr, stats: &dyn Fn() -> Value) -> Value {
    let clients: Vec<TcpStream> = (0..FIBERS + QUEUE)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /widgets?sleep=1 HTTP/1.1\r\nHost: test\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    wait_for(stats, "a full queue", Duration::from_secs(10), |s| {
        slots(s)["busy"] == FIBERS && slots(s)["queued"] == QUEUE
    });
    for client in clients {
        // Linger 0: close() sends RST instead of FIN.
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    }
    // The two running requests end after their second; the four queued ones must not
    // keep anything after that.
    wait_for(
        stats,
        "every gauge back at 0",
        Duration::from_secs(20),
        all_idle,
    )
}

/// Poll `stats` until `reached` holds; panics with the last snapshot after `within`.
fn wait_for(
    stats: &dyn Fn() -> Value,
    what: &str,
    within: Duration,
    reached: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let ok = poll(within, || {
        last = stats();
        reached(&last)
    });
    assert!(ok, "no {what} within {within:?}: {last:#}");
    last
}

/// A full burst (every fiber and every queue place) must be served.
fn burst_is_served(addr: SocketAddr) {
    let (resps, _) = concurrent_gets(addr, "/widgets?sleep=0.2", FIBERS + QUEUE);
    for r in &resps {
        assert_eq!(
            r.status, 200,
            "a false refusal after abandonment: {}",
            r.body
        );
    }
}

#[test]
fn abandoned_queued_requests_leave_no_trace_on_fibers() {
    let server = fiberstack::start::start(&config(Runtime::Fibers)).expect("fibers start");
    let addr = server.addr();
    let stats = || serde_json::to_value(fiberstack::app::stats::snapshot(&server.state)).unwrap();
    let after = abandon_a_full_queue(addr, &stats);
    // The queued four were dropped from the queue when their clients went: none ran.
    assert_eq!(
        after["http_server"]["abandoned"], QUEUE,
        "queued requests of gone clients must be counted, not run: {after:#}"
    );
    // The two running were stopped (their queries killed), and nothing was answered.
    assert_eq!(after["http_server"]["cancelled"], FIBERS, "{after:#}");
    let responses = &after["http_server"]["responses"];
    assert_eq!(responses["2xx"], 0, "{after:#}");
    assert_eq!(responses["5xx"], 0, "{after:#}");
    burst_is_served(addr);
    server.shutdown(Duration::from_secs(5));
}

#[test]
fn abandoned_queued_requests_leave_no_trace_on_the_twin() {
    let server = fiberstack::twin::start(&config(Runtime::Async)).expect("twin starts");
    let addr = server.addr();
    let stats = || serde_json::to_value(fiberstack::twin::stats::snapshot(&server.state)).unwrap();
    abandon_a_full_queue(addr, &stats);
    burst_is_served(addr);
    server.shutdown(Duration::from_secs(5));
}

/// The twin's gauges when a future is dropped mid-wait (hyper drops a request's future
/// when its connection fails; a `timeout` or `select!` drops what it wraps): the MySQL
/// pool's `waiting` and the HTTP client's `in_flight` must come back to 0.
#[test]
fn the_twins_gauges_survive_dropped_futures() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = fiber_mysql::testing::test_database_opts().expect("test database");
    rt.block_on(async {
        let long = Duration::from_secs(60);
        let pool = fiberstack::twin::db::Pool::open(&opts, 1, long, long)
            .await
            .expect("pool opens");
        let held = pool.get().await.expect("the one connection");
        let gone = tokio::time::timeout(Duration::from_millis(50), pool.get()).await;
        assert!(gone.is_err(), "the second get must wait");
        assert_eq!(pool.stats().waiting, 0, "{:?}", pool.stats());
        drop(held);
        assert_eq!(pool.stats().in_use, 0, "{:?}", pool.stats());
        pool.disconnect().await;

        // An upstream that accepts (the kernel does) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = fiber_web::http::client::Url::parse(&format!(
            "http://{}/",
            silent.local_addr().unwrap()
        ))
        .unwrap();
        let client = fiberstack::twin::client::Client::new(Default::default());
        let gone = tokio::time::timeout(Duration::from_millis(50), client.get(&url)).await;
        assert!(
            gone.is_err(),
            "the silent upstream must keep the call waiting"
        );
        assert_eq!(client.stats().in_flight, 0, "{:?}", client.stats());
    });
}
