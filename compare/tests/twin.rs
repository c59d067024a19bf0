//! The async twin against the fiber server: both started in this process on port 0,
//! against one real MariaDB, asked the same things over a raw socket. Every route must
//! answer with the same status, body and headers that matter; the twin must run
//! requests concurrently, admit load like the fiber pool, close HTTP/1.0 connections,
//! and shut down gracefully.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{concurrent_gets, get, parse, raw, Resp};
use fiberstack::config::Options;
use fiberstack::config::ServeConfig;

fn config(tweak: impl FnOnce(&mut ServeConfig)) -> ServeConfig {
    let mut cfg = ServeConfig {
        db_pool: 20,
        database_url: Some(common::database_url()),
        web: Options {
            bind: "127.0.0.1:0".parse().unwrap(),
            fibers: 50,
            threads: 2,
            ..ServeConfig::default().web
        },
        ..ServeConfig::default()
    };
    tweak(&mut cfg);
    cfg
}

fn start_twin(cfg: &ServeConfig) -> compare::twin::Running {
    compare::twin::start(cfg).unwrap_or_else(|e| panic!("the twin did not start: {e}"))
}

fn start_fibers(cfg: &ServeConfig) -> fiberstack::start::Running {
    fiberstack::start::start(cfg).unwrap_or_else(|e| panic!("the fiber server did not start: {e}"))
}

/// Send one raw request and parse the response.
fn send(addr: SocketAddr, request: &str) -> Resp {
    let bytes = raw(addr, request.as_bytes());
    parse(&bytes).unwrap_or_else(|| {
        panic!(
            "no response to {request:?}: {:?}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// What must be equal between the two servers' answers.
fn essence(r: &Resp) -> (u16, String, Option<String>, Option<String>, Option<String>) {
    let h = |n: &str| r.header(n).map(str::to_string);
    (
        r.status,
        r.body.clone(),
        h("content-type"),
        h("allow"),
        h("retry-after"),
    )
}

#[test]
fn every_route_answers_like_the_fiber_server() {
    let cfg = config(|_| {});
    let fibers = start_fibers(&cfg);
    let twin = start_twin(&cfg);
    let long_q = format!("/upstream/search.json?q={}", "x".repeat(201));
    let gets = [
        "/",
        "/hello",
        "/sleep?secs=0",
        "/sleep?secs=0.05",
        "/sleep?secs=11",
        "/sleep?secs=soon",
        "/healthz",
        "/widgets?sleep=0",
        "/widgets?sleep=0.05",
        "/widgets?sleep=abc",
        "/widgets?sleep=11",
        "/widgets/http",
        "/twitter",
        "/upstream/search.json?q=rails+3",
        "/upstream/search.json?q=100%25",
        "/upstream/search.json?q=%27%3B+drop+table+tweets",
        "/upstream/search.json",
        &long_q,
        "/deep?depth=5&frame=300",
        "/deep?depth=-1",
        "/deep?frame=70000",
        "/nope",
        "/twitter/nope",
        // HTTP/1.1 conformance (docs/HTTP.md): one trailing slash, absolute-form,
        // percent-escapes decoded only where safe.
        "/widgets/?sleep=0",
        "/twitter/",
        "/widgets/http/",
        "http://x/hello",
        "/he%6Clo",
        "/widgets%2Fhttp",
        "/hello%00",
        "/hello%zz",
    ];
    for path in gets {
        let f = get(fibers.addr(), path);
        let t = get(twin.addr(), path);
        assert_eq!(essence(&t), essence(&f), "GET {path}");
    }
    for request in [
        "POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        "DELETE /twitter HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
        "GET /hello HTTP/1.0\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "GET /hello HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "GET /hello HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ] {
        let f = send(fibers.addr(), request);
        let t = send(twin.addr(), request);
        assert_eq!(essence(&t), essence(&f), "{request:?}");
    }
    // Refused by hyper itself, whose 400s carry no body: the status is the same.
    for request in [
        "GET /hello HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n",
        "GET /hello HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET /hello HTTP/1.1\r\nHost : t\r\n\r\n",
    ] {
        let f = send(fibers.addr(), request);
        let t = send(twin.addr(), request);
        assert_eq!((t.status, f.status), (400, 400), "{request:?}");
    }
    // HEAD: GET's status and headers, no body.
    let head = b"HEAD /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let (f, t) = (raw(fibers.addr(), head), raw(twin.addr(), head));
    let (f, t) = (String::from_utf8_lossy(&f), String::from_utf8_lossy(&t));
    assert!(
        f.starts_with("HTTP/1.1 200 OK\r\n") && f.ends_with("\r\n\r\n"),
        "{f}"
    );
    assert!(
        t.starts_with("HTTP/1.1 200 OK\r\n") && t.ends_with("\r\n\r\n"),
        "{t}"
    );
    for line in [
        "content-length: 13\r\n",
        "content-type: text/plain; charset=utf-8\r\n",
    ] {
        assert!(f.to_ascii_lowercase().contains(line), "{f}");
        assert!(t.to_ascii_lowercase().contains(line), "{t}");
    }
    // Sanity: the comparison compared real answers, not two empty ones.
    let hello = get(twin.addr(), "/hello");
    assert_eq!((hello.status, hello.body.as_str()), (200, "Hello, World!"));
    let twitter = get(twin.addr(), "/twitter");
    assert!(twitter.body.contains("rails 3</br>"), "{}", twitter.body);

    // /stats differs in content (uptimes, counters) but not in shape.
    let f: serde_json::Value = serde_json::from_str(&get(fibers.addr(), "/stats").body).unwrap();
    let t: serde_json::Value = serde_json::from_str(&get(twin.addr(), "/stats").body).unwrap();
    for key in ["uptime_secs", "db", "http_client", "http_server"] {
        assert!(f.get(key).is_some() && t.get(key).is_some(), "/stats {key}");
    }
    assert_eq!(t["db"]["size"], 20);
    assert_eq!(t["tasks"]["size"], 50);
    assert!(t["tasks"]["routes"]["widgets"]["runs"].as_u64().unwrap() >= 4);
    assert!(t["tasks"]["routes"]["twitter"]["runs"].as_u64().unwrap() >= 2);
    // The labels are the fiber server's, route for route (those that run on a request
    // fiber: /healthz and /metrics take neither a fiber nor a task slot, and the
    // monitoring routes have fibers and slots of their own).
    let fiber_labels: Vec<&str> = fiberstack::app::ROUTE_LABELS
        .iter()
        .copied()
        .filter(|label| ![fiber_web::metrics::HEALTHZ, fiber_web::metrics::METRICS].contains(label))
        .filter(|label| !fiberstack::app::MONITORING_LABELS.contains(label))
        .collect();
    let mut twin_labels: Vec<&str> = t["tasks"]["routes"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = fiber_labels.clone();
    sorted.sort_unstable();
    twin_labels.sort_unstable();
    assert_eq!(twin_labels, sorted);

    twin.shutdown(Duration::from_secs(5));
    fibers.shutdown(Duration::from_secs(5));
}

#[test]
fn ten_one_second_widgets_run_at_once() {
    let twin = start_twin(&config(|_| {}));
    let (resps, took) = concurrent_gets(twin.addr(), "/widgets", 10);
    assert!(
        resps.iter().all(|r| r.status == 200 && r.body == "Oh hai"),
        "{resps:?}"
    );
    // Serially this is 10 s; concurrently a little over 1 s.
    assert!(took < Duration::from_secs(3), "10 x /widgets took {took:?}");
    twin.shutdown(Duration::from_secs(5));
}

#[test]
fn http_1_0_without_keep_alive_is_closed_and_1_1_is_kept_open() {
    let twin = start_twin(&config(|_| {}));
    // `raw` reads until the server closes: a server that keeps an HTTP/1.0 connection
    // open would make this take the read timeout (30 s), as plain `ab` would hang.
    let started = Instant::now();
    let bytes = raw(twin.addr(), b"GET /hello HTTP/1.0\r\n\r\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    let resp = parse(&bytes).expect("a response");
    assert_eq!((resp.status, resp.body.as_str()), (200, "Hello, World!"));

    // HTTP/1.1: two requests on one connection.
    let mut s = TcpStream::connect(twin.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let (first, used) = common::parse_one(&out).expect("first response");
    let second = parse(&out[used..]).expect("second response on the same connection");
    assert_eq!(first.body, "Hello, World!");
    assert_eq!(second.body, "ok");
    twin.shutdown(Duration::from_secs(5));
}

#[test]
fn the_limit_admits_like_the_fiber_pool() {
    // Two slots, one place in the queue: of four requests at once, two run, one
    // waits its turn, one is refused at once with 503 and Retry-After.
    let cfg = config(|c| {
        c.web.fibers = 2;
        c.web.queue = 1;
    });
    let twin = start_twin(&cfg);
    let fibers = start_fibers(&cfg);
    for (name, addr) in [("async", twin.addr()), ("fibers", fibers.addr())] {
        let (resps, _) = concurrent_gets(addr, "/widgets?sleep=0.5", 4);
        let mut statuses: Vec<u16> = resps.iter().map(|r| r.status).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 200, 200, 503], "{name}: {resps:?}");
        let refused = resps.iter().find(|r| r.status == 503).unwrap();
        assert_eq!(refused.header("retry-after"), Some("1"), "{name}");
        assert!(
            refused
                .body
                .contains("the queue is full; try again shortly"),
            "{name}: {}",
            refused.body
        );
    }
    twin.shutdown(Duration::from_secs(5));
    fibers.shutdown(Duration::from_secs(5));

    // One slot and a short wait: the second request times out with 503.
    let twin = start_twin(&config(|c| {
        c.web.fibers = 1;
        c.web.fiber_wait = Duration::from_millis(200);
    }));
    let (resps, _) = concurrent_gets(twin.addr(), "/widgets?sleep=0.5", 2);
    let mut statuses: Vec<u16> = resps.iter().map(|r| r.status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 503], "{resps:?}");
    let refused = resps.iter().find(|r| r.status == 503).unwrap();
    assert!(
        refused
            .body
            .contains("waited for a worker in vain; try again shortly"),
        "{}",
        refused.body
    );
    twin.shutdown(Duration::from_secs(5));
}

#[test]
fn a_saturated_database_pool_is_a_503_on_both() {
    let cfg = config(|c| {
        c.db_pool = 1;
        c.db_wait_timeout = Duration::from_millis(200);
    });
    let twin = start_twin(&cfg);
    let fibers = start_fibers(&cfg);
    for (name, addr) in [("async", twin.addr()), ("fibers", fibers.addr())] {
        let (resps, _) = concurrent_gets(addr, "/widgets?sleep=0.6", 2);
        let mut statuses: Vec<u16> = resps.iter().map(|r| r.status).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 503], "{name}: {resps:?}");
        let refused = resps.iter().find(|r| r.status == 503).unwrap();
        assert!(
            refused
                .body
                .starts_with("database unavailable: try again shortly"),
            "{name}: {}",
            refused.body
        );
        assert_eq!(refused.header("retry-after"), Some("1"), "{name}");
    }
    twin.shutdown(Duration::from_secs(5));
    fibers.shutdown(Duration::from_secs(5));
}

#[test]
fn shutdown_finishes_the_request_in_flight() {
    let twin = start_twin(&config(|_| {}));
    let addr = twin.addr();
    let client = std::thread::spawn(move || get(addr, "/widgets?sleep=0.5"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while twin.server.stop_state().in_flight() == 0 {
        assert!(Instant::now() < deadline, "the request never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let drained = twin.shutdown(Duration::from_secs(5));
    assert_eq!(drained.connections_left, 0);
    let resp = client.join().unwrap();
    assert_eq!((resp.status, resp.body.as_str()), (200, "Oh hai"));
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "the port is closed after shutdown"
    );
}

/// `serve --runtime async` from the binary: the banner says so, and a stack overflow
/// in `/deep`, which a fiber turns into a 500, takes the whole async process down.
/// This is the difference the fiber pool's guard pages buy, shown on purpose.
#[test]
fn the_binary_serves_the_twin_and_an_overflow_kills_it() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_compare"))
        .args(["serve", "--runtime", "async", "--bind", "127.0.0.1:0"])
        // The bare process: a supervisor would start a new one after the crash.
        .args(["--db-pool", "2", "--supervisor", "off"])
        // Not in argv: the URL holds a password, and argv shows in `ps`.
        .env("DATABASE_URL", common::database_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(banner.contains("| runtime async,"), "{banner}");
    let addr: SocketAddr = banner
        .split("http://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no address in {banner}"));
    assert_eq!(get(addr, "/hello").body, "Hello, World!");

    // 100000 levels of 64 KiB: far past any thread stack.
    let bytes = raw(
        addr,
        b"GET /deep?depth=100000&frame=65536 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(bytes.is_empty(), "{:?}", String::from_utf8_lossy(&bytes));
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("has overflowed its stack"), "{stderr}");
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
        let pool = compare::twin::db::Pool::open(&opts, 1, long, long)
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
        let url =
            fiber_web::client::Url::parse(&format!("http://{}/", silent.local_addr().unwrap()))
                .unwrap();
        let client = compare::twin::client::Client::new(Default::default());
        let gone = tokio::time::timeout(Duration::from_millis(50), client.get(&url)).await;
        assert!(
            gone.is_err(),
            "the silent upstream must keep the call waiting"
        );
        assert_eq!(client.stats().in_flight, 0, "{:?}", client.stats());
    });
}
