//! Clients that give up on queued requests, on each runtime (common::either): every gauge in `/stats`
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

use common::either::{Runtime, Server, RUNTIMES};
use common::{concurrent_gets, poll};
use serde_json::Value;

const FIBERS: usize = 2;
const QUEUE: usize = 4;

fn server(runtime: Runtime) -> Server {
    Server::start(runtime, |cfg| {
        cfg.db_pool = 4;
        cfg.web.fibers = FIBERS;
        cfg.web.queue = QUEUE;
    })
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
fn abandoned_queued_requests_leave_no_trace() {
    for runtime in RUNTIMES {
        let server = server(runtime);
        let addr = server.addr();
        let after = abandon_a_full_queue(addr, &|| server.snapshot());
        if runtime == Runtime::Fibers {
            // The queued four were dropped from the queue when their clients went:
            // none ran.
            assert_eq!(
                after["http_server"]["abandoned"], QUEUE,
                "queued requests of gone clients must be counted, not run: {after:#}"
            );
            // The two running were stopped (their queries killed), and nothing was
            // answered.
            assert_eq!(after["http_server"]["cancelled"], FIBERS, "{after:#}");
            let responses = &after["http_server"]["responses"];
            assert_eq!(responses["2xx"], 0, "{after:#}");
            assert_eq!(responses["5xx"], 0, "{after:#}");
        }
        burst_is_served(addr);
    }
}
