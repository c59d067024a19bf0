//! Shared by the integration tests: start the real demo on port 0 against a real
//! MariaDB, and talk to it with a raw std socket client (not our own HTTP client, so
//! that a bug there cannot hide a bug in the server).
#![allow(dead_code)]

/// Every allocation first makes sure the fiber it runs on (if any) has stack left for
/// the allocator: an overflow then strikes before malloc takes its arena lock, never
/// inside it (STACK_SIZES.md). An app declares it once, in its binary.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

pub mod child;
pub mod either;
pub mod tfb;
pub mod tools;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use fiberstack::config::Options;
use fiberstack::config::ServeConfig;
use fiberstack::start::{start, Running};

/// Test settings: port 0, small pools, the shared test MariaDB when the test script
/// started one (FIBERSTACK_TEST_DATABASE_URL), else a private one for this process.
pub fn config() -> ServeConfig {
    ServeConfig {
        db_pool: 20,
        database_url: std::env::var("FIBERSTACK_TEST_DATABASE_URL")
            .ok()
            .filter(|u| !u.is_empty()),
        web: Options {
            bind: "127.0.0.1:0".parse().unwrap(),
            fibers: 50,
            threads: 2,
            ..ServeConfig::default().web
        },
        ..ServeConfig::default()
    }
}

/// The URL of one database both runtimes can share: FIBERSTACK_TEST_DATABASE_URL, or
/// one private MariaDB for this test binary (fiber_mysql's `testing` fixture).
pub fn database_url() -> String {
    fiber_mysql::testing::test_database_opts()
        .unwrap_or_else(|e| panic!("no test database: {e}"))
        .url()
}

/// Start the demo with `config()` changed by `tweak`.
pub fn serve(tweak: impl FnOnce(&mut ServeConfig)) -> Running {
    let mut cfg = config();
    tweak(&mut cfg);
    start(&cfg).unwrap_or_else(|e| panic!("the demo did not start: {e}"))
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Send `raw` bytes and read until the server closes (30 s at most).
pub fn raw(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// `GET path` with `Connection: close`.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    let bytes = raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    parse(&bytes).unwrap_or_else(|| {
        panic!(
            "no response to GET {path}: {:?}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// Parse one response from the start of `bytes` (Content-Length framed).
pub fn parse(bytes: &[u8]) -> Option<Resp> {
    parse_one(bytes).map(|(r, _)| r)
}

/// The first final (2xx-5xx) response in `bytes`, and where it ends: interim 1xx
/// responses before it are skipped, as RFC 9110 asks of every HTTP/1.1 client. The
/// server sends one (`103 Early Hints`) to a request whose client sent a FIN while it
/// ran, to tell a half-close from a close (fiber_web's departure.rs).
pub fn parse_final(bytes: &[u8]) -> Option<(Resp, usize)> {
    let mut at = 0;
    loop {
        let (resp, used) = parse_one(&bytes[at..])?;
        at += used;
        if resp.status >= 200 {
            return Some((resp, at));
        }
    }
}

/// Read from `s` into `all` until it holds a whole final response (interim ones are
/// skipped: [`parse_final`]); that response. Panics when `s` closes first.
pub fn read_final(s: &mut impl std::io::Read, all: &mut Vec<u8>) -> Resp {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((resp, _)) = parse_final(all) {
            return resp;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "closed before an answer: {:?}",
            String::from_utf8_lossy(all)
        );
        all.extend_from_slice(&chunk[..n]);
    }
}

/// Parse one response and return the bytes it took.
pub fn parse_one(bytes: &[u8]) -> Option<(Resp, usize)> {
    let text = String::from_utf8_lossy(bytes);
    let head_end = text.find("\r\n\r\n")?;
    let mut lines = text[..head_end].split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let start = head_end + 4;
    let body = String::from_utf8_lossy(bytes.get(start..start + len)?).into_owned();
    Some((
        Resp {
            status,
            headers,
            body,
        },
        start + len,
    ))
}

/// Run `n` GETs of `path` at once from threads: every thread connects first, then all
/// send their request together (a barrier), so the server really sees `n` at once.
/// Returns each response and the wall-clock time from the common start.
pub fn concurrent_gets(addr: SocketAddr, path: &str, n: usize) -> (Vec<Resp>, Duration) {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (path, barrier) = (path.to_string(), barrier.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                barrier.wait();
                let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
                s.write_all(req.as_bytes()).unwrap();
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                parse(&out)
                    .unwrap_or_else(|| panic!("no response: {:?}", String::from_utf8_lossy(&out)))
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let resps = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (resps, start.elapsed())
}

/// `GET /stats`, parsed (see src/app/stats.rs for the fields).
pub fn stats(addr: SocketAddr) -> serde_json::Value {
    let r = get(addr, "/stats");
    assert_eq!(r.status, 200, "/stats: {}", r.body);
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("/stats is not JSON ({e}): {}", r.body))
}

/// Poll `reached` every 10 ms until it holds (a state, not a guess at how long it
/// takes) or `within` has passed; whether it held.
pub fn poll(within: Duration, mut reached: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if reached() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`poll`] that panics naming `what` when the state is not reached.
pub fn wait_until(what: &str, within: Duration, reached: impl FnMut() -> bool) {
    assert!(poll(within, reached), "no {what} within {within:?}");
}

/// Poll `/stats` until `reached` holds and return those stats; panics naming `what`
/// (and showing the last stats) after `within`.
pub fn wait_for_stats(
    addr: SocketAddr,
    what: &str,
    within: Duration,
    reached: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let ok = poll(within, || {
        last = stats(addr);
        reached(&last)
    });
    assert!(ok, "no {what} within {within:?}: {last:#}");
    last
}
