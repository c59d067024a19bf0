//! `/twitter` and `/widgets/http` against upstreams that misbehave on purpose: refused,
//! silent, slow, garbage, too big, not JSON, the wrong JSON, a 500. Each must be a 502
//! or 504 whose body names the upstream and the fault, within the client's timeouts,
//! and leave no fiber busy and no client call in flight.
//!
//! The misbehaving upstreams are std listeners on 127.0.0.1:0 run by the test itself.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::{get, serve, wait_for_stats};
use fiberstack::config::{ClientLimits, ServeConfig};

/// Short client limits so that every fault resolves in about a second.
const CONNECT: Duration = Duration::from_millis(500);
const READ: Duration = Duration::from_millis(500);
const TOTAL: Duration = Duration::from_millis(1500);
const MAX_RESPONSE: usize = 64 * 1024;
/// How late an answer may come after the timer that should produce it (at once for a
/// fault seen on the first read). The body says which timer fired; the time only
/// shows that it fired near its setting rather than at a default (15 s, 20 s), so it
/// can be wide for a busy 2-core machine.
const LATE: Duration = Duration::from_millis(2500);
/// How long a fake upstream keeps a connection before giving up on it.
const FAKE_HOLD: Duration = Duration::from_secs(10);

fn short_client(cfg: &mut ServeConfig) {
    cfg.client = ClientLimits {
        connect_timeout: CONNECT,
        read_timeout: READ,
        total_timeout: TOTAL,
        max_response_bytes: MAX_RESPONSE,
        ..ClientLimits::default()
    };
}

/// A fake upstream: on every accepted connection, read a request head and `behave`;
/// repeat while `behave` says to keep the connection (a keep-alive upstream).
fn fake_upstream(behave: fn(&mut TcpStream) -> bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            thread::spawn(move || {
                stream.set_read_timeout(Some(FAKE_HOLD)).unwrap();
                stream.set_write_timeout(Some(FAKE_HOLD)).unwrap();
                loop {
                    // Read the request head (our client sends no body).
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    if !behave(&mut stream) {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Wait until the client hangs up (or FAKE_HOLD passes): a silent upstream.
fn hold_until_closed(s: &mut TcpStream) -> bool {
    let mut sink = [0u8; 1024];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    false
}

/// A well-framed keep-alive response.
fn respond(s: &mut TcpStream, status: &str, body: &[u8]) -> bool {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(body).is_ok()
}

/// Start the demo with `/twitter` reading `upstream`.
fn demo_with_upstream(upstream: SocketAddr) -> (fiberstack::start::Running, String) {
    let url = format!("http://{upstream}/search.json?q=rails+3");
    let u = url.clone();
    let app = serve(move |cfg| {
        short_client(cfg);
        cfg.upstream = Some(u);
    });
    (app, url)
}

/// GET `/twitter`, assert the status, that the body names the upstream and each of
/// `says`, and that it took at most `within`.
fn expect_gateway_error(
    app: &fiberstack::start::Running,
    url: &str,
    status: u16,
    says: &[&str],
    within: Duration,
) {
    let start = Instant::now();
    let r = get(app.addr(), "/twitter");
    let took = start.elapsed();
    assert_eq!(r.status, status, "{}", r.body);
    assert!(
        r.body.contains(url),
        "the body names the upstream: {}",
        r.body
    );
    for s in says {
        assert!(r.body.contains(s), "the body says '{s}': {}", r.body);
    }
    assert!(took <= within, "answered in {took:?}, over {within:?}");
    assert_nothing_stuck(app.addr());
}

/// `/stats` shows no request fiber busy (it runs on a monitoring fiber of its own) and
/// no client call in flight (polled: the handler that just answered may still be
/// releasing its fiber).
fn assert_nothing_stuck(addr: SocketAddr) {
    wait_for_stats(
        addr,
        "idle server (no busy request fiber), no client call in flight",
        Duration::from_secs(5),
        |v| v["fibers"]["busy"] == 0 && v["http_client"]["in_flight"] == 0,
    );
}

#[test]
fn a_refused_upstream_is_a_502_that_says_refused() {
    // A port that was just free: nothing listens there.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (app, url) = demo_with_upstream(closed);
    expect_gateway_error(&app, &url, 502, &["cannot connect", "refused"], LATE);
}

#[test]
fn a_silent_upstream_is_a_504_after_the_read_timeout() {
    let (app, url) = demo_with_upstream(fake_upstream(hold_until_closed));
    let within = READ + LATE;
    expect_gateway_error(&app, &url, 504, &["timed out after 500 ms"], within);
}

#[test]
fn a_dribbling_upstream_is_a_504_after_the_total_timeout() {
    // One body byte every 100 ms: no single read waits long, the whole exchange does.
    fn dribble(s: &mut TcpStream) -> bool {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        for _ in 0..1000 {
            if s.write_all(b" ").is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
        false
    }
    let (app, url) = demo_with_upstream(fake_upstream(dribble));
    let within = TOTAL + LATE;
    expect_gateway_error(&app, &url, 504, &["total", "1500 ms"], within);
}

#[test]
fn a_garbage_upstream_is_a_502_bad_response() {
    fn garbage(s: &mut TcpStream) -> bool {
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe garbage\r\n\r\n");
        hold_until_closed(s)
    }
    let (app, url) = demo_with_upstream(fake_upstream(garbage));
    expect_gateway_error(&app, &url, 502, &["bad response"], LATE);
}

#[test]
fn an_upstream_that_closes_without_answering_is_a_502() {
    fn hang_up(_: &mut TcpStream) -> bool {
        false
    }
    let (app, url) = demo_with_upstream(fake_upstream(hang_up));
    expect_gateway_error(&app, &url, 502, &["closed before any response"], LATE);
}

#[test]
fn a_huge_upstream_body_is_a_502_too_large_whether_announced_or_not() {
    // Announced: Content-Length over the limit, refused before reading the body.
    fn announced(s: &mut TcpStream) -> bool {
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            100 * MAX_RESPONSE
        );
        hold_until_closed(s)
    }

    // Unannounced: no length, bytes until the limit is passed; and chunked.
    fn unframed(s: &mut TcpStream) -> bool {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
        let block = [b'x'; 8192];
        for _ in 0..(100 * MAX_RESPONSE / block.len()) {
            if s.write_all(&block).is_err() {
                break;
            }
        }
        false
    }
    fn chunked(s: &mut TcpStream) -> bool {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        let block = [b'x'; 4096];
        for _ in 0..(100 * MAX_RESPONSE / block.len()) {
            let _ = write!(s, "{:x}\r\n", block.len());
            if s.write_all(&block).is_err() || s.write_all(b"\r\n").is_err() {
                break;
            }
        }
        false
    }

    for upstream in [announced, unframed, chunked] {
        let (app, url) = demo_with_upstream(fake_upstream(upstream));
        expect_gateway_error(&app, &url, 502, &["larger than the 65536-byte limit"], LATE);
    }
}

#[test]
fn non_json_and_wrong_json_are_502s_that_show_the_expected_shape() {
    fn html(s: &mut TcpStream) -> bool {
        respond(s, "200 OK", b"<html><body>rate limited</body></html>")
    }
    let (app, url) = demo_with_upstream(fake_upstream(html));
    expect_gateway_error(&app, &url, 502, &["JSON that is not", "results"], LATE);
    drop(app);

    fn wrong_shape(s: &mut TcpStream) -> bool {
        respond(s, "200 OK", br#"{"statuses":[{"full_text":"rails 3"}]}"#)
    }
    let (app, url) = demo_with_upstream(fake_upstream(wrong_shape));
    expect_gateway_error(
        &app,
        &url,
        502,
        &["JSON that is not", "missing field `results`"],
        LATE,
    );
}

#[test]
fn an_upstream_500_is_a_502_that_gives_the_status() {
    fn error(s: &mut TcpStream) -> bool {
        respond(s, "500 Internal Server Error", b"{\"error\":\"boom\"}")
    }
    let (app, url) = demo_with_upstream(fake_upstream(error));
    expect_gateway_error(&app, &url, 502, &["answered 500"], LATE);
    // The 500 came with keep-alive: the next call reuses that connection, and is
    // answered the same way.
    expect_gateway_error(&app, &url, 502, &["answered 500"], LATE);
    let v: serde_json::Value = serde_json::from_str(&get(app.addr(), "/stats").body).unwrap();
    assert_eq!(v["http_client"]["reused_connections"], 1, "{v:#}");
}

/// `/widgets/http`'s upstream is this server's own `/widgets` (one second of MySQL):
/// a read timeout shorter than that is a 504 naming `/widgets`, and the inner request
/// still finishes and frees its fiber.
#[test]
fn widgets_http_times_out_on_a_slow_inner_widgets_with_a_504() {
    let app = serve(short_client);
    let addr = app.addr();
    let start = Instant::now();
    let r = get(addr, "/widgets/http");
    assert_eq!(r.status, 504, "{}", r.body);
    assert!(
        r.body.contains(&format!("http://{addr}/widgets")),
        "{}",
        r.body
    );
    assert!(r.body.contains("timed out after 500 ms"), "{}", r.body);
    assert!(start.elapsed() < READ + LATE);
    // The abandoned inner /widgets still runs its 1 s query; then all is idle.
    assert_nothing_stuck(addr);
}

/// With one fiber, `/widgets/http` holds it and its inner `/widgets` waits for a fiber
/// until `fiber_wait_timeout`: the inner 503 becomes a 502 that quotes it.
#[test]
fn widgets_http_reports_an_inner_503_as_a_502() {
    let app = serve(|cfg| {
        short_client(cfg);
        cfg.web.fibers = 1;
        cfg.web.fiber_wait = Duration::from_millis(200);
    });
    let addr = app.addr();
    let r = get(addr, "/widgets/http");
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(
        r.body
            .contains(&format!("GET http://{addr}/widgets answered 503")),
        "{}",
        r.body
    );
    // The one request fiber is free again, and no client call is left in flight.
    assert_nothing_stuck(addr);
    assert_eq!(get(addr, "/healthz").status, 200);
}
