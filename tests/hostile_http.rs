//! Clients that attack or abuse the HTTP layer: malformed request lines, limits hit
//! exactly, slowloris heads and bodies, pipelined floods that never read, clients that
//! vanish mid-response, idle keep-alive hoarders, and more connections than allowed.
//! Each gets a 4xx/503 or a close in bounded time and memory, and `/healthz` answers
//! after. (The basic 400/431/413/501/505 cases are in http_semantics.rs.)

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::{get, parse, parse_one, raw, serve};
use fiberstack::config::{HttpLimits, ServeConfig};
use fiberstack::start::Running;

/// The short server timeouts these tests run with.
const HEADER_TIMEOUT: Duration = Duration::from_millis(500);
const BODY_TIMEOUT: Duration = Duration::from_millis(600);
const IDLE_TIMEOUT: Duration = Duration::from_millis(700);
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// Slack for scheduling on two shared cores.
const SLACK: Duration = Duration::from_millis(700);

fn short_timeouts(cfg: &mut ServeConfig) {
    cfg.web.http = HttpLimits {
        header_timeout: HEADER_TIMEOUT,
        body_timeout: BODY_TIMEOUT,
        idle_timeout: IDLE_TIMEOUT,
        write_timeout: WRITE_TIMEOUT,
        ..HttpLimits::default()
    };
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read until the server closes (EOF or reset); returns what came and when it closed.
fn read_until_closed(s: &mut TcpStream) -> (Vec<u8>, Instant) {
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return (out, Instant::now()),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (out, Instant::now()),
            Err(e) => panic!(
                "the server neither answered nor closed: {e}; got {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
}

/// Poll until the server counts no open connection but `keep` (bounded).
fn wait_connections(app: &Running, keep: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let open = app.connections();
        if open <= keep {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{open} connections still open after {within:?}, expected {keep}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn healthy(app: &Running) {
    let r = get(app.addr(), "/healthz");
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
}

/// Resident memory of this process (the server runs in it), from /proc/self/statm.
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn malformed_request_lines_and_headers_get_a_400_and_a_close() {
    let app = serve(|_| {});
    let cases: &[&[u8]] = &[
        b"GET\r\n\r\n",
        b"GET /\r\n\r\n",
        b"GET / HTTP/1.1 extra\r\n\r\n",
        b"G ET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\x01\x02\x03\r\n\r\n",
        b"\xff\xfe / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n: empty name\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX: \x00\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX: \xff\xfe\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x10\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    ];
    for req in cases {
        let bytes = raw(app.addr(), req);
        let r = parse(&bytes).unwrap_or_else(|| {
            panic!(
                "no response to {:?}: {:?}",
                String::from_utf8_lossy(req),
                String::from_utf8_lossy(&bytes)
            )
        });
        assert_eq!(
            r.status,
            400,
            "{:?}: {}",
            String::from_utf8_lossy(req),
            r.body
        );
        assert_eq!(r.header("Connection"), Some("close"));
    }
    healthy(&app);
}

#[test]
fn limits_hold_exactly_at_their_edge() {
    let app = serve(|_| {});
    let l = HttpLimits::default();
    // max_headers headers pass; one more is a 431.
    let headers = |n: usize| -> String { (0..n).map(|i| format!("X-{i}: 1\r\n")).collect() };
    let req = |h: String| format!("GET /hello HTTP/1.1\r\nHost: x\r\n{h}Connection: close\r\n\r\n");
    // "Host" and "Connection: close" are two of the headers.
    let ok = parse(&raw(app.addr(), req(headers(l.max_headers - 2)).as_bytes())).unwrap();
    assert_eq!(ok.status, 200, "{}", ok.body);
    let over = parse(&raw(app.addr(), req(headers(l.max_headers - 1)).as_bytes())).unwrap();
    assert_eq!(over.status, 431, "{}", over.body);

    // A head of exactly max_header_bytes passes; one byte more is a 431.
    let sized = |total: usize| {
        let base = req("X-Pad: \r\n".into()).len();
        req(format!("X-Pad: {}\r\n", "p".repeat(total - base)))
    };
    let exact = sized(l.max_header_bytes);
    assert_eq!(exact.len(), l.max_header_bytes);
    assert_eq!(
        parse(&raw(app.addr(), exact.as_bytes())).unwrap().status,
        200
    );
    let r = parse(&raw(app.addr(), sized(l.max_header_bytes + 1).as_bytes())).unwrap();
    assert_eq!(r.status, 431, "{}", r.body);

    // A body of exactly max_body_bytes is read (and the route answers); one more is 413.
    let post = |len: usize| {
        let mut v = format!(
            "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
        v.resize(v.len() + len, b'b');
        v
    };
    let r = parse(&raw(app.addr(), &post(l.max_body_bytes))).unwrap();
    assert_eq!(r.status, 405, "the body was read and routed: {}", r.body);
    let r = parse(&raw(app.addr(), &post(l.max_body_bytes + 1))).unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    healthy(&app);
}

#[test]
fn slowloris_heads_get_a_408_within_the_header_timeout_while_others_are_served() {
    let app = serve(short_timeouts);
    let addr = app.addr();
    // Many clients dribble a head, one byte every 100 ms, never finishing it.
    let lorises: Vec<_> = (0..40)
        .map(|_| {
            thread::spawn(move || {
                let mut s = connect(addr);
                let start = Instant::now();
                s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n").unwrap();
                let mut reader = s.try_clone().unwrap();
                let dribbler = thread::spawn(move || {
                    while s.write_all(b"X").is_ok() && start.elapsed() < Duration::from_secs(5) {
                        thread::sleep(Duration::from_millis(100));
                    }
                });
                let (bytes, closed) = read_until_closed(&mut reader);
                let _ = dribbler.join();
                (bytes, closed - start)
            })
        })
        .collect();
    // Meanwhile the server keeps answering others promptly.
    for _ in 0..5 {
        let start = Instant::now();
        healthy(&app);
        assert!(start.elapsed() < Duration::from_millis(300));
        thread::sleep(Duration::from_millis(50));
    }
    let mut worst = Duration::ZERO;
    for l in lorises {
        let (bytes, took) = l.join().unwrap();
        let r = parse(&bytes).expect("a 408, not a silent close");
        assert_eq!(r.status, 408, "{}", r.body);
        assert!(r.body.contains("did not arrive in time"), "{}", r.body);
        worst = worst.max(took);
    }
    eprintln!("slowloris: 40 connections, the last closed after {worst:?}");
    assert!(worst < HEADER_TIMEOUT + SLACK, "{worst:?}");
    wait_connections(&app, 0, SLACK);
    healthy(&app);
}

#[test]
fn a_body_that_never_arrives_or_dribbles_gets_a_408_within_the_body_timeout() {
    let app = serve(short_timeouts);
    // Three bytes of ten, then nothing.
    let mut s = connect(app.addr());
    let start = Instant::now();
    s.write_all(b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        .unwrap();
    let (bytes, closed) = read_until_closed(&mut s);
    let r = parse(&bytes).expect("a 408");
    assert_eq!(r.status, 408, "{}", r.body);
    assert!(
        r.body.contains("body"),
        "the message is about the body: {}",
        r.body
    );
    assert!(closed - start < BODY_TIMEOUT + SLACK);
    assert!(
        closed - start >= BODY_TIMEOUT,
        "not before body_timeout: {:?}",
        closed - start
    );

    // One body byte every 100 ms: each read is quick, the whole body is not.
    let mut s = connect(app.addr());
    let start = Instant::now();
    s.write_all(b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        .unwrap();
    let mut writer = s.try_clone().unwrap();
    let dribbler = thread::spawn(move || {
        for _ in 0..100 {
            if writer.write_all(b"b").is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    let (bytes, closed) = read_until_closed(&mut s);
    let _ = dribbler.join();
    let r = parse(&bytes).expect("a 408");
    assert_eq!(r.status, 408, "{}", r.body);
    let took = closed - start;
    eprintln!("dribbled body closed after {took:?}");
    assert!(took < BODY_TIMEOUT + SLACK, "{took:?}");
    assert!(took >= BODY_TIMEOUT, "not before body_timeout: {took:?}");
    healthy(&app);
}

#[test]
fn a_pipelined_flood_that_is_never_read_is_closed_by_the_write_timeout_in_bounded_memory() {
    let app = serve(short_timeouts);
    let rss_before = rss_bytes();
    let mut s = connect(app.addr());
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    // Up to 64 MiB of pipelined `GET /stats` (a ~2 KiB answer each), never reading.
    const FLOOD: usize = 64 << 20;
    let block: Vec<u8> = b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64 * 1024 / 23);
    let writer = thread::spawn(move || {
        let mut sent = 0;
        while sent < FLOOD {
            match s.write(&block) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        (sent, s)
    });
    // The server answers until its writes stall, then closes within write_timeout.
    let start = Instant::now();
    let mut peak = rss_before;
    while app.connections() > 0 || start.elapsed() < WRITE_TIMEOUT {
        peak = peak.max(rss_bytes());
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the flooding connection is still open after 10 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let closed_after = start.elapsed();
    let (sent, _s) = writer.join().unwrap();
    let grew = peak.saturating_sub(rss_before);
    eprintln!(
        "flood: {} KiB sent before the close at {closed_after:?}; RSS grew {} KiB at peak",
        sent >> 10,
        grew >> 10
    );
    assert!(
        sent < FLOOD,
        "the server stopped reading: the flood could not all go"
    );
    assert!(grew < 32 << 20, "RSS grew {} KiB", grew >> 10);
    healthy(&app);
}

#[test]
fn a_pipelined_flood_read_slowly_is_answered_in_full_and_in_order() {
    let app = serve(short_timeouts);
    const N: usize = 5000;
    let mut flood = Vec::new();
    for i in 0..N {
        let close = if i == N - 1 {
            "Connection: close\r\n"
        } else {
            ""
        };
        flood.extend_from_slice(
            format!("GET /hello?n={i} HTTP/1.1\r\nHost: x\r\n{close}\r\n").as_bytes(),
        );
    }
    let rss_before = rss_bytes();
    let mut s = connect(app.addr());
    let mut writer = s.try_clone().unwrap();
    let w = thread::spawn(move || writer.write_all(&flood).is_ok());
    // Read 4 KiB every 2 ms: slower than the server writes, faster than write_timeout.
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut peak = rss_before;
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("read failed after {} bytes: {e}", got.len()),
        }
        peak = peak.max(rss_bytes());
        thread::sleep(Duration::from_millis(2));
    }
    assert!(w.join().unwrap());
    let mut at = 0;
    let mut answered = 0;
    while let Some((r, used)) = parse_one(&got[at..]) {
        assert_eq!((r.status, r.body.as_str()), (200, "Hello, World!"));
        at += used;
        answered += 1;
    }
    assert_eq!((answered, at), (N, got.len()));
    let grew = peak.saturating_sub(rss_before);
    eprintln!(
        "slow reader: {N} responses, RSS grew {} KiB at peak",
        grew >> 10
    );
    assert!(grew < 32 << 20);
    healthy(&app);
}

#[test]
fn clients_that_vanish_mid_response_leave_the_server_serving() {
    let app = serve(short_timeouts);
    let addr = app.addr();
    // A large answer (a 404 quoting a 15 KiB path), the client reads 10 bytes and
    // resets the connection; and a slow /widgets whose client is gone before it ends.
    let long_path = format!("/{}", "a".repeat(15 * 1024));
    for _ in 0..50 {
        let mut s = connect(addr);
        s.write_all(format!("GET {long_path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut ten = [0u8; 10];
        s.read_exact(&mut ten).unwrap();
        assert_eq!(&ten, b"HTTP/1.1 4");
        drop(s);
    }
    let gone: Vec<_> = (0..10)
        .map(|_| {
            let mut s = connect(addr);
            s.write_all(b"GET /widgets?sleep=0.3 HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    drop(gone);
    // Each request still runs to its end, and every connection coroutine ends: none is
    // stuck writing to a dead socket. (Polled: the accept loop may not have taken the
    // vanished connections yet, so "no connection open" alone proves nothing.)
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v: serde_json::Value = serde_json::from_str(&get(addr, "/stats").body).unwrap();
        let runs = v["fibers"]["routes"]["widgets"]["runs"]
            .as_u64()
            .unwrap_or(0);
        let open = app.connections();
        if runs >= 10 && v["fibers"]["busy"] == 0 && open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} connections open: {v:#}");
        thread::sleep(Duration::from_millis(20));
    }
    healthy(&app);
}

#[test]
fn idle_keep_alive_connections_close_after_the_idle_timeout() {
    let app = serve(short_timeouts);
    let start = Instant::now();
    let mut conns: Vec<TcpStream> = (0..100)
        .map(|i| {
            let mut s = connect(app.addr());
            // Half made one request and stay for more; half never said anything.
            if i % 2 == 0 {
                s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
            }
            s
        })
        .collect();
    let mut worst = Duration::ZERO;
    for (i, s) in conns.iter_mut().enumerate() {
        let (bytes, closed) = read_until_closed(s);
        if i % 2 == 0 {
            let (r, used) = parse_one(&bytes).expect("the answer first");
            assert_eq!((r.status, used), (200, bytes.len()));
        } else {
            assert!(bytes.is_empty(), "{:?}", String::from_utf8_lossy(&bytes));
        }
        worst = worst.max(closed - start);
    }
    eprintln!("idle: 100 connections closed by {worst:?}");
    assert!(
        worst >= IDLE_TIMEOUT,
        "closed before idle_timeout: {worst:?}"
    );
    assert!(worst < IDLE_TIMEOUT + SLACK, "{worst:?}");
    wait_connections(&app, 0, SLACK);
    healthy(&app);
}

#[test]
fn connections_over_max_connections_get_a_503_and_a_close() {
    const MAX: usize = 5;
    let app = serve(|cfg| {
        short_timeouts(cfg);
        cfg.web.http.idle_timeout = Duration::from_secs(30);
        cfg.web.http.max_connections = MAX;
    });
    // MAX kept-alive connections, each proven accepted by an answer.
    let mut held: Vec<TcpStream> = (0..MAX)
        .map(|_| {
            let mut s = connect(app.addr());
            s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            assert_eq!(parse(&buf[..n]).unwrap().status, 200);
            s
        })
        .collect();
    for _ in 0..3 {
        let mut s = connect(app.addr());
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (bytes, _) = read_until_closed(&mut s);
        let r = parse(&bytes).expect("a 503, not a reset");
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(
            r.body.contains(&format!("{MAX} open connections")),
            "{}",
            r.body
        );
        assert_eq!(r.header("Retry-After"), Some("1"));
        assert_eq!(r.header("Connection"), Some("close"));
    }
    // One leaves: a new client is served again.
    drop(held.pop());
    wait_connections(&app, MAX - 1, Duration::from_secs(2));
    healthy(&app);
}

#[test]
fn the_listen_backlog_is_raised_above_mays_1024() {
    let app = serve(|_| {});
    // `ss -lnt` shows a listener's backlog as its Send-Q.
    let out = std::process::Command::new("ss")
        .args(["-lnt", &format!("sport = :{}", app.addr().port())])
        .output()
        .expect("ss (iproute2) is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let backlog: i32 = text
        .lines()
        .find(|l| l.starts_with("LISTEN"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("no listener in: {text}"));
    let somaxconn: i32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        backlog,
        fiberstack::config::HttpLimits::default()
            .listen_backlog
            .min(somaxconn)
    );
    assert!(backlog > 1024 || somaxconn <= 1024, "{backlog}");
}
