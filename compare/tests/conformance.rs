//! The MUSTs of RFC 9112 and RFC 9110 that docs/HTTP.md lists, each shown against
//! both real servers (the fiber server and the async twin, started in this process on
//! port 0 against one real MariaDB) over a raw socket; and a test that keeps the
//! table honest: every row names a test function that exists.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{parse_one, Resp};
use fiberstack::config::Options;
use fiberstack::config::ServeConfig;

/// The body timeout these tests run with (a never-ending chunked body).
const BODY_TIMEOUT: Duration = Duration::from_millis(600);
/// Slack for scheduling on two shared cores.
const SLACK: Duration = Duration::from_millis(1500);

fn config(tweak: impl FnOnce(&mut ServeConfig)) -> ServeConfig {
    let url = common::database_url();
    let mut cfg = ServeConfig {
        db_pool: 20,
        database_url: Some(url),
        web: Options {
            bind: "127.0.0.1:0".parse().unwrap(),
            fibers: 50,
            threads: 2,
            ..ServeConfig::default().web
        },
        ..ServeConfig::default()
    };
    cfg.web.http.body_timeout = BODY_TIMEOUT;
    tweak(&mut cfg);
    cfg
}

/// Both runtimes, started with the same configuration.
struct Both {
    fibers: fiberstack::start::Running,
    twin: compare::twin::Running,
}

impl Both {
    fn start(tweak: impl FnOnce(&mut ServeConfig)) -> Both {
        let cfg = config(tweak);
        Both {
            fibers: fiberstack::start::start(&cfg)
                .unwrap_or_else(|e| panic!("the fiber server did not start: {e}")),
            twin: compare::twin::start(&cfg)
                .unwrap_or_else(|e| panic!("the twin did not start: {e}")),
        }
    }

    /// Each runtime's name and address.
    fn each(&self) -> [(&'static str, SocketAddr); 2] {
        [("fibers", self.fibers.addr()), ("twin", self.twin.addr())]
    }

    fn stop(self) {
        self.twin.shutdown(Duration::from_secs(5));
        self.fibers.shutdown(Duration::from_secs(5));
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Send `req` and read until the server closes (10 s at most): every response that
/// came (interim 1xx included), and whether the server closed.
fn exchange(addr: SocketAddr, req: &[u8]) -> (Vec<Resp>, bool) {
    let mut s = connect(addr);
    let _ = s.write_all(req);
    read_all(&mut s)
}

/// Read responses until the server closes or 10 s pass.
fn read_all(s: &mut TcpStream) -> (Vec<Resp>, bool) {
    let mut got = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let closed = loop {
        match s.read(&mut chunk) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    let mut resps = Vec::new();
    let mut at = 0;
    while let Some((r, used)) = parse_one(&got[at..]) {
        resps.push(r);
        at += used;
    }
    assert_eq!(
        at,
        got.len(),
        "whole responses only: {:?}",
        String::from_utf8_lossy(&got)
    );
    (resps, closed)
}

/// Read exactly one response head and body from a connection kept open.
fn read_one(s: &mut TcpStream) -> Resp {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        if let Some((r, used)) = parse_one(&got) {
            if used == got.len() {
                return r;
            }
        }
        match s.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            other => panic!(
                "no whole response ({other:?}): {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

fn statuses(resps: &[Resp]) -> Vec<u16> {
    resps.iter().map(|r| r.status).collect()
}

/// `req` gets exactly `status` and the connection closes, on `name`'s server.
fn refused_and_closed(name: &str, addr: SocketAddr, req: &[u8], status: u16) {
    let (resps, closed) = exchange(addr, req);
    let what = format!("{name}: {:?}", String::from_utf8_lossy(req));
    assert_eq!(statuses(&resps), [status], "{what}: {resps:?}");
    assert!(closed, "{what}: the connection stays open");
}

/// Each of `reqs` gets exactly `status` and a close, on both runtimes.
fn both_refuse(both: &Both, reqs: &[&[u8]], status: u16) {
    for (name, addr) in both.each() {
        for req in reqs {
            refused_and_closed(name, addr, req, status);
        }
    }
}

#[test]
fn host_is_required_exactly_once_in_http_1_1() {
    let both = Both::start(|_| {});
    both_refuse(
        &both,
        &[
            b"GET /hello HTTP/1.1\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: a/b\r\n\r\n",
        ],
        400,
    );
    for (name, addr) in both.each() {
        // HTTP/1.0 may go without (ab sends one anyway).
        let (resps, closed) = exchange(addr, b"GET /hello HTTP/1.0\r\n\r\n");
        assert_eq!(statuses(&resps), [200], "{name}");
        assert!(closed);
        let r = &common::get(addr, "/hello");
        assert_eq!(r.status, 200, "{name}");
    }
    // The message says what to change.
    let (resps, _) = exchange(both.fibers.addr(), b"GET /hello HTTP/1.1\r\n\r\n");
    assert!(
        resps[0].body.contains("exactly one Host header"),
        "{}",
        resps[0].body
    );
    both.stop();
}

#[test]
fn absolute_form_targets_are_routed_by_their_path() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        // The target's authority wins over Host (RFC 9112 section 3.2.2): neither is
        // used for routing here.
        let (resps, _) = exchange(
            addr,
            b"GET http://example.com/hello HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(statuses(&resps), [200], "{name}");
        assert_eq!(resps[0].body, "Hello, World!");
        let (resps, _) = exchange(
            addr,
            b"GET HTTP://example.com:80/upstream/search.json/?q=rails+3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(statuses(&resps), [200], "{name}: {resps:?}");
        assert!(resps[0].body.contains("rails 3"), "{name}: {resps:?}");
    }
    // authority-form is for proxies: this is none.
    both_refuse(
        &both,
        &[b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"],
        400,
    );
    both.stop();
}

#[test]
fn options_asterisk_names_the_allowed_methods() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        let (resps, _) = exchange(
            addr,
            b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(statuses(&resps), [200], "{name}");
        assert_eq!(resps[0].header("Allow"), Some("GET, HEAD"), "{name}");
    }
    both_refuse(&both, &[b"GET * HTTP/1.1\r\nHost: x\r\n\r\n"], 400);
    both.stop();
}

#[test]
fn percent_encoded_paths_route_as_decoded_only_where_safe() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        // Unreserved characters decode: this is /hello.
        let r = common::get(addr, "/he%6C%6c%6F");
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, "Hello, World!"),
            "{name}"
        );
        // %2F is data, not a separator: there is no route "/widgets%2Fhttp".
        let r = common::get(addr, "/widgets%2Fhttp");
        assert_eq!(r.status, 404, "{name}: {}", r.body);
        for bad in ["/hello%00", "/hello%zz", "/hello%4", "/hello%"] {
            let req = format!("GET {bad} HTTP/1.1\r\nHost: x\r\n\r\n");
            refused_and_closed(name, addr, req.as_bytes(), 400);
        }
    }
    both.stop();
}

#[test]
fn one_trailing_slash_routes_as_the_route_without_it() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        for (path, body) in [
            ("/widgets/?sleep=0", "Oh hai"),
            ("/widgets/http/", "Oh hai"),
            ("/hello/", "Hello, World!"),
        ] {
            let r = common::get(addr, path);
            assert_eq!((r.status, r.body.as_str()), (200, body), "{name} {path}");
        }
        let r = common::get(addr, "/twitter/");
        assert_eq!(r.status, 200, "{name}: {}", r.body);
        assert_eq!(common::get(addr, "/hello//").status, 404, "{name}");
    }
    both.stop();
}

/// The original demo's first command, `ab -c 5 -n 10 http://127.0.0.1:3000/widgets/`,
/// against the fiber server: every request a 200 in about ab's floor of 3 s.
#[test]
fn ab_gets_every_widgets_with_a_trailing_slash() {
    let cfg = config(|_| {});
    let app = fiberstack::start::start(&cfg).unwrap();
    let url = format!("http://{}/widgets/", app.addr());
    let started = Instant::now();
    let out = Command::new("ab")
        .args(["-c", "5", "-n", "10", &url])
        .output()
        .expect("ab (apache2-utils) is installed");
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no '{name}' in ab's report: {text}"))
    };
    assert_eq!(field("Complete requests:"), 10, "{text}");
    assert_eq!(field("Failed requests:"), 0, "{text}");
    assert!(
        !text.contains("Non-2xx responses"),
        "ab saw non-2xx: {text}"
    );
    eprintln!("ab -c 5 -n 10 /widgets/: {took:?}");
    assert!(
        took >= Duration::from_secs(3),
        "{took:?}: /widgets sleeps 1 s"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    app.shutdown(Duration::from_secs(5));
}

const CHUNKED_HELLO: &[u8] =
    b"GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
    3;name=value\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n\
    GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

#[test]
fn chunked_request_bodies_are_decoded_on_both() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        // The request after the chunked body is answered: the body ended where the
        // last chunk and the trailers say.
        // hyper does not drain a chunked body its handler left unread: it answers and
        // closes, so the twin never sees the second request.
        let expect: &[u16] = if name == "fibers" {
            &[200, 200]
        } else {
            &[200]
        };
        let (resps, closed) = exchange(addr, CHUNKED_HELLO);
        assert_eq!(statuses(&resps), expect, "{name}: {resps:?}");
        assert_eq!(resps[0].body, "Hello, World!");
        assert!(resps.len() < 2 || resps[1].body == "ok");
        assert!(closed);
    }
    // Sent a byte at a time, to the server that reads the body itself.
    let mut s = connect(both.fibers.addr());
    s.set_nodelay(true).unwrap();
    for b in CHUNKED_HELLO {
        s.write_all(&[*b]).unwrap();
    }
    let (resps, _) = read_all(&mut s);
    assert_eq!(statuses(&resps), [200, 200], "byte by byte");
    both.stop();
}

#[test]
fn chunked_bodies_over_the_limits_get_a_4xx_and_a_close() {
    let both = Both::start(|cfg| cfg.web.http.max_body_bytes = 16);
    let addr = both.fibers.addr();
    let chunked = |body: &str| {
        format!(
            "GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}\
             GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        )
    };
    let long_ext = format!("1;{}\r\na\r\n0\r\n\r\n", "e".repeat(20_000));
    let long_trailer = format!("0\r\nX: {}\r\n\r\n", "t".repeat(20_000));
    let many_trailers = format!("0\r\n{}\r\n", "X: 1\r\n".repeat(100));
    for (body, status) in [
        // 17 bytes in two chunks, one more than max_body_bytes.
        ("10\r\n0123456789abcdef\r\n1\r\nx\r\n0\r\n\r\n", 413),
        // One chunk over the cap is refused when its size is read.
        ("11\r\n", 413),
        ("ffffffffffffffffffff\r\nx\r\n0\r\n\r\n", 400),
        ("3\r\nabcd\r\n0\r\n\r\n", 400),
        ("3\nabc\r\n0\r\n\r\n", 400),
        ("x\r\n", 400),
        (&long_ext, 400),
        (&long_trailer, 431),
        (&many_trailers, 431),
    ] {
        refused_and_closed("fibers", addr, chunked(body).as_bytes(), status);
    }
    // A chunked body that never ends: 408 once body_timeout has passed.
    let mut s = connect(addr);
    let started = Instant::now();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        .unwrap();
    let (resps, closed) = read_all(&mut s);
    let took = started.elapsed();
    assert_eq!(statuses(&resps), [408], "{resps:?}");
    assert!(closed);
    assert!(
        took >= BODY_TIMEOUT && took < BODY_TIMEOUT + SLACK,
        "{took:?}"
    );
    // The twin (hyper's decoder): a broken chunked body ends the connection without
    // an answer to the request after it.
    for body in [
        "ffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
        "3\r\nabcd\r\n0\r\n\r\n",
    ] {
        let (resps, closed) = exchange(both.twin.addr(), chunked(body).as_bytes());
        assert!(closed, "twin: {body:?}");
        assert!(
            !resps.iter().any(|r| r.body == "ok"),
            "twin read past a broken body: {body:?} {resps:?}"
        );
    }
    assert_eq!(common::get(addr, "/healthz").status, 200);
    both.stop();
}

#[test]
fn content_length_with_transfer_encoding_is_refused_or_closed() {
    let both = Both::start(|_| {});
    let req = b"GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n\
        3\r\nabc\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    // The fiber server refuses it: 400, and the connection closes.
    refused_and_closed("fibers", both.fibers.addr(), req, 400);
    // hyper lets chunked win (RFC 9112 section 6.3) and closes after the answer.
    let (resps, closed) = exchange(both.twin.addr(), req);
    assert_eq!(statuses(&resps), [200], "twin: {resps:?}");
    assert!(closed, "twin: the connection must close");
    both.stop();
}

#[test]
fn transfer_encoding_not_ending_in_chunked_or_in_http_1_0_is_a_400_and_a_close() {
    let both = Both::start(|_| {});
    both_refuse(
        &both,
        &[
            b"GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"GET /hello HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /hello HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        ],
        400,
    );
    both.stop();
}

#[test]
fn invalid_content_lengths_are_a_400_and_a_close() {
    let both = Both::start(|_| {});
    let reqs: Vec<String> = ["-1", "+5", "abc", "5 5", "0x5", "5\r\nContent-Length: 6"]
        .iter()
        .map(|cl| format!("GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n"))
        .collect();
    let reqs: Vec<&[u8]> = reqs.iter().map(|r| r.as_bytes()).collect();
    both_refuse(&both, &reqs, 400);
    // A numeral too large for any integer: the fiber server says 413 (over the cap),
    // hyper 400 (it cannot represent it); neither overflows.
    let huge = b"GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n";
    refused_and_closed("fibers", both.fibers.addr(), huge, 413);
    refused_and_closed("twin", both.twin.addr(), huge, 400);
    both.stop();
}

#[test]
fn whitespace_before_a_colon_obs_fold_and_bare_cr_are_a_400() {
    let both = Both::start(|_| {});
    both_refuse(
        &both,
        &[
            b"GET /hello HTTP/1.1\r\nHost : x\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n",
            b"GET /hello HTTP/1.1\r\n Host: x\r\n\r\n",
            b"GET /hello HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
        ],
        400,
    );
    both.stop();
}

#[test]
fn a_request_line_longer_than_the_head_limit_is_a_414_on_fibers() {
    let both = Both::start(|_| {});
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(20_000));
    refused_and_closed("fibers", both.fibers.addr(), long.as_bytes(), 414);
    // hyper says 431 up to its own 64 KiB URI limit: the head is over max_buf_size.
    refused_and_closed("twin", both.twin.addr(), long.as_bytes(), 431);
    both.stop();
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

#[test]
fn expect_100_continue_gets_100_before_the_body_or_the_final_status_at_once() {
    let both = Both::start(|cfg| cfg.web.http.max_body_bytes = 1000);
    let fibers = both.fibers.addr();
    // Fibers: 100 Continue before the body is sent, then the answer.
    for framing in ["Content-Length: 3", "Transfer-Encoding: chunked"] {
        let mut s = connect(fibers);
        let head = format!(
            "GET /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n{framing}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut interim = [0u8; CONTINUE.len()];
        s.read_exact(&mut interim).unwrap();
        assert_eq!(&interim[..], CONTINUE, "{framing}");
        let body: &[u8] = if framing.starts_with("Content") {
            b"abc"
        } else {
            b"3\r\nabc\r\n0\r\n\r\n"
        };
        s.write_all(body).unwrap();
        let (resps, _) = read_all(&mut s);
        assert_eq!(statuses(&resps), [200], "{framing}");
    }
    // Both: a request refused anyway gets its final status at once, before any body.
    for (name, addr) in both.each() {
        for (req, status) in [("POST /hello", 405), ("GET /nope", 404)] {
            let mut s = connect(addr);
            let head = format!(
                "{req} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
            );
            s.write_all(head.as_bytes()).unwrap();
            assert_eq!(read_one(&mut s).status, status, "{name} {req}");
        }
    }
    // Fibers: a Content-Length over the cap is a 413 at once.
    let mut s = connect(fibers);
    s.write_all(
        b"GET /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_one(&mut s).status, 413);
    // The twin's handlers read no body, so hyper sends no 100: the final status
    // comes at once.
    let mut s = connect(both.twin.addr());
    s.write_all(
        b"GET /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_one(&mut s).status, 200);
    // HTTP/1.0: the expectation is ignored, no 1xx goes to an HTTP/1.0 client. The
    // fiber server waits for the body; the twin answers at once (it reads none).
    for (name, addr) in both.each() {
        let mut s = connect(addr);
        s.write_all(b"GET /hello HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut first = [0u8; 64];
        let early = match s.read(&mut first) {
            Ok(n) => first[..n].to_vec(),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Vec::new(),
            Err(e) => panic!("{name}: {e}"),
        };
        assert!(
            !early.starts_with(b"HTTP/1.1 1"),
            "{name}: {:?}",
            String::from_utf8_lossy(&early)
        );
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"abc");
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let all = [early, rest].concat();
        let (r, used) = parse_one(&all).expect("a response");
        assert_eq!((r.status, used), (200, all.len()), "{name}");
    }
    both.stop();
}

/// IMF-fixdates of the last few seconds.
fn recent_dates() -> Vec<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (now - 3..=now + 1)
        .map(|s| String::from_utf8(fiber_web::rig::imf_fixdate(s).to_vec()).unwrap())
        .collect()
}

#[test]
fn every_response_carries_a_date() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        for req in [
            &b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
            b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            b"GET /hello HTTP/1.1\r\n\r\n",
        ] {
            let (resps, _) = exchange(addr, req);
            let date = resps[0].header("Date").unwrap_or_else(|| {
                panic!("{name}: no Date in {:?}", resps[0].headers);
            });
            assert!(
                recent_dates().iter().any(|d| d == date),
                "{name}: Date {date:?} is not IMF-fixdate of now"
            );
        }
    }
    both.stop();
}

#[test]
fn connection_close_ends_the_connection_after_that_response() {
    let both = Both::start(|_| {});
    for (name, addr) in both.each() {
        let (resps, closed) = exchange(
            addr,
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert_eq!(
            statuses(&resps),
            [200],
            "{name}: the second request is not processed"
        );
        assert!(closed, "{name}");
    }
    both.stop();
}

/// The workspace's root: this crate is `compare/` in it.
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The conformance table in docs/HTTP.md: every row names at least one test as
/// `file::function`, and each exists in `tests/<file>.rs` (the demo's) or
/// `compare/tests/<file>.rs` (the rig's).
#[test]
fn the_conformance_table_names_a_real_test_for_every_must() {
    let doc = std::fs::read_to_string(format!("{WORKSPACE}/docs/HTTP.md")).unwrap();
    let (rows, problems) = table_problems(&doc);
    assert!(
        rows >= 30,
        "only {rows} rows: the table was not found whole"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check catches both faults.
    let bad = "<!-- conformance table -->\n| ID | S | Requirement | F | T | Tests |\n|--|--|--|--|--|--|\n\
               | X1 | 1 | A server MUST do it | yes | yes | none yet |\n\
               | X2 | 2 | A server MUST do more | yes | yes | `conformance::no_such_test` |\n";
    assert_eq!(table_problems(bad), (2, vec![
        format!("no test named: | X1 | 1 | A server MUST do it | yes | yes | none yet |"),
        format!("conformance::no_such_test does not exist in tests/conformance.rs: | X2 | 2 | A server MUST do more | yes | yes | `conformance::no_such_test` |"),
    ]));
}

/// The rows of the table after the `<!-- conformance table -->` marker, and what is
/// wrong with them.
fn table_problems(doc: &str) -> (usize, Vec<String>) {
    let Some(table) = doc.split("<!-- conformance table -->").nth(1) else {
        return (0, vec!["no '<!-- conformance table -->' marker".into()]);
    };
    let lines = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    let mut rows = 0;
    let mut problems = Vec::new();
    for line in lines.filter(|l| !l.starts_with("|--")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        if cells[0] == "| ID" || cells.len() < 6 {
            continue;
        }
        rows += 1;
        let (requirement, tests) = (cells[2], *cells.last().unwrap());
        let names: Vec<&str> = tests
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| n.contains("::"))
            .collect();
        if requirement.contains("MUST") && names.is_empty() {
            problems.push(format!("no test named: {line}"));
        }
        for name in names {
            let (file, function) = name.split_once("::").unwrap();
            let source = ["tests", "compare/tests"]
                .map(|dir| {
                    std::fs::read_to_string(format!("{WORKSPACE}/{dir}/{file}.rs"))
                        .unwrap_or_default()
                })
                .concat();
            if !source.contains(&format!("fn {function}(")) {
                problems.push(format!("{name} does not exist in tests/{file}.rs: {line}"));
            }
        }
    }
    (rows, problems)
}
