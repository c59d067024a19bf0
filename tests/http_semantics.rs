//! HTTP/1.0 and 1.1 connection semantics, limits on what clients send, and a taken
//! port: the things stock may_minihttp gets wrong.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{parse, parse_final, parse_one, raw, serve};

#[test]
fn http_1_0_closes_unless_asked_to_keep_alive() {
    let app = serve(|_| {});
    // Plain HTTP/1.0, as ab sends: the server must close, or ab hangs.
    let bytes = raw(app.addr(), b"GET /hello HTTP/1.0\r\n\r\n");
    let r = parse(&bytes).unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "Hello, World!"));
    assert_eq!(r.header("Connection"), Some("close"));

    // HTTP/1.0 with keep-alive: two requests on one connection.
    let mut s = TcpStream::connect(app.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..2 {
        s.write_all(b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.header("Connection"), Some("keep-alive"));
    }
}

#[test]
fn http_1_1_keeps_alive_until_connection_close() {
    let app = serve(|_| {});
    let mut s = TcpStream::connect(app.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..3 {
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Connection"), None);
    }
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap(); // returns only because the server closed
    assert_eq!(parse(&rest).unwrap().header("Connection"), Some("close"));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let app = serve(|_| {});
    let bytes = raw(
        app.addr(),
        b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let (a, n) = parse_one(&bytes).unwrap();
    let (b, m) = parse_one(&bytes[n..]).unwrap();
    let (c, _) = parse_one(&bytes[n + m..]).unwrap();
    assert_eq!(
        (a.body.as_str(), b.body.as_str(), c.status),
        ("Hello, World!", "ok", 404)
    );
}

#[test]
fn head_requests_get_the_length_without_the_body() {
    let app = serve(|_| {});
    let bytes = raw(
        app.addr(),
        b"HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("Content-Length: 13\r\n") && text.ends_with("\r\n\r\n"),
        "{text}"
    );
}

#[test]
fn bad_requests_get_a_4xx_and_the_server_goes_on() {
    let app = serve(|_| {});
    let many: String = (0..100).map(|i| format!("X-{i}: 1\r\n")).collect();
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"NONSENSE\r\n\r\n".to_vec(), 400, "malformed"),
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n").into_bytes(),
            431,
            "too many request headers",
        ),
        (huge.into_bytes(), 431, "too large"),
        (
            b"POST /widgets HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n".to_vec(),
            400,
            "Content-Length",
        ),
        (
            b"POST /widgets HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n".to_vec(),
            413,
            "body too large",
        ),
        (
            b"POST /widgets HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                .to_vec(),
            501,
            "not supported",
        ),
        (
            b"GET / HTTP/2.0\r\n\r\n".to_vec(),
            505,
            "HTTP/1.0 and HTTP/1.1",
        ),
    ];
    for (req, status, says) in cases {
        let r = parse(&raw(app.addr(), &req)).expect("an answer, not a dropped connection");
        assert_eq!(r.status, status, "{says}");
        assert!(r.body.contains(says), "{status}: {}", r.body);
        assert_eq!(r.header("Connection"), Some("close"));
    }
    assert_eq!(common::get(app.addr(), "/healthz").status, 200);
}

#[test]
fn a_taken_port_is_refused_not_shared() {
    let app = serve(|_| {});
    let Err(err) = fiber_web::rig::bind_listener(app.addr()) else {
        panic!("the port is taken: binding it again must fail");
    };
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains("--bind"), "{err}");
}

#[test]
fn a_stop_closes_idle_keep_alive_connections_without_waiting_for_the_idle_timeout() {
    // Waits between requests are ended by the server's sweeper (fiber_web/src/http/idle.rs),
    // not by a timer of their own: a stop must still reach every one of them.
    let app = serve(|cfg| cfg.web.http.idle_timeout = Duration::from_secs(60));
    let mut idle: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = sent(app.addr(), b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(read_response(&mut s).status, 200);
            s
        })
        .collect();
    let started = Instant::now();
    let drained = app.serving.shutdown(Duration::from_secs(20));
    let took = started.elapsed();
    assert_eq!(drained.connections_left, 0);
    // Wide: two shared cores. Without the sweeper's stop wake-up the connections
    // would stay until the grace (20 s) or their idle timeout (60 s).
    assert!(took < Duration::from_secs(5), "the stop took {took:?}");
    for s in &mut idle {
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    }
}

#[test]
fn a_kept_alive_connection_answers_each_next_request_at_once_however_it_arrives() {
    // Between requests the server parks without reading first when its last read
    // emptied the socket (conn.rs, `drained`): a request must never wait for a
    // wake-up (the idle slice's, 200 ms, or the sweeper's tick, 20 ms), whether it
    // comes whole, in pieces, or before the previous answer was read.
    let app = serve(|_| {});
    let mut s = TcpStream::connect(app.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let req: &[u8] = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    let (mut slow, mut placed, mut gaps) = (Vec::new(), 0, Vec::new());
    for i in 0..90 {
        let started = Instant::now();
        let mut first_answered = None;
        match i % 3 {
            0 => s.write_all(req).unwrap(),
            1 => {
                s.write_all(&req[..10]).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                s.write_all(&req[10..]).unwrap();
            }
            _ => {
                // The next request arrives while the previous one is being served
                // (after the server read it, before it answered).
                s.write_all(b"GET /widgets?sleep=0.05 HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                if in_its_handler_unanswered(app.addr(), &s) {
                    placed += 1;
                }
                s.write_all(req).unwrap();
                assert_eq!(read_response_from(&mut s, true).status, 200);
                first_answered = Some(Instant::now());
            }
        }
        assert_eq!(read_response(&mut s).status, 200);
        gaps.extend(first_answered.map(|t| t.elapsed()));
        let took = started.elapsed();
        if took >= Duration::from_millis(180) {
            slow.push((i, took));
        }
    }
    // A lost wake-up costs a whole slice each time; scheduling on two busy cores may
    // delay a few requests, not one in ten.
    assert!(slow.len() <= 9, "slow requests: {slow:?}");
    // A request that came while the one before it was served is there when that one
    // has been answered: it is answered at once, not after the tick (up to 20 ms) that
    // ends a wait whose readiness was lost.
    gaps.sort();
    assert!(
        gaps[gaps.len() / 2] < Duration::from_millis(3),
        "from the first answer to the second: {gaps:?}"
    );
    // The case of the third kind was the one tested: most of its requests were
    // written while the one before was in its handler.
    assert!(
        placed >= 20,
        "only {placed} of 30 written while /widgets ran"
    );
}

/// Wait until the server has read the `/widgets` request sent on `s` and is in its
/// handler (its query holds a MySQL connection: `/stats` shows one in use), and say
/// whether its answer had still not come then. The server under test serves nothing
/// else, so the connection in use is that request's.
fn in_its_handler_unanswered(addr: std::net::SocketAddr, s: &TcpStream) -> bool {
    common::wait_for_stats(
        addr,
        "the /widgets request in its handler",
        Duration::from_secs(10),
        |st| st["db"]["in_use"].as_u64() >= Some(1),
    );
    s.set_nonblocking(true).unwrap();
    let answered = s.peek(&mut [0u8; 1]);
    s.set_nonblocking(false).unwrap();
    matches!(answered, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn a_client_that_closes_after_its_request_gets_the_answer_and_the_close_at_once() {
    // A request and the client's close (FIN) that arrive together, while the server is
    // busy with the previous request, raise one readiness: the read that takes the
    // request empties the socket, and the FIN behind it raises nothing more. The wait
    // that follows such a read is cut to one sweeper tick (20 ms), so the read that
    // sees the close comes soon, not at the end of the 200 ms idle slice.
    let app = serve(|_| {});
    let mut placed = 0;
    let mut took: Vec<Duration> = (0..5)
        .map(|_| {
            let mut s = sent(
                app.addr(),
                b"GET /widgets?sleep=0.1 HTTP/1.1\r\nHost: x\r\n\r\n",
            );
            if in_its_handler_unanswered(app.addr(), &s) {
                placed += 1;
            }
            s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            // From the first answer on: the second is written at once, and the close
            // must follow within a tick, not a slice. The FIN came while a request
            // ran, so either answer may follow a `103 Early Hints` (the server's look
            // at whether the client left): a client skips it.
            let mut all = Vec::new();
            common::read_final(&mut s, &mut all);
            let first_answered = Instant::now();
            s.read_to_end(&mut all).unwrap();
            let took = first_answered.elapsed();
            let (first, used) = parse_final(&all).expect("the first answer");
            let second = parse_final(&all[used..]).map(|(r, n)| (r.status, used + n));
            assert_eq!(
                (first.status, second),
                (200, Some((200, all.len()))),
                "{:?}",
                String::from_utf8_lossy(&all)
            );
            took
        })
        .collect();
    took.sort();
    assert!(
        placed >= 4,
        "only {placed} of 5 closes sent while /widgets ran"
    );
    // The median of five: a missed close adds the whole slice (200-220 ms) every time,
    // one tick at most 20-40 ms.
    assert!(took[2] < Duration::from_millis(120), "{took:?}");
}

/// A connection to `addr` (reads time out after 30 s) that has sent `request`.
fn sent(addr: std::net::SocketAddr, request: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    s
}

/// Read one Content-Length response from a kept-alive connection.
fn read_response(s: &mut TcpStream) -> common::Resp {
    read_response_from(s, false)
}

/// [`read_response`]; with `more`, a second response may follow (read byte by byte
/// so that none of it is taken).
fn read_response_from(s: &mut TcpStream, more: bool) -> common::Resp {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((r, used)) = parse_one(&buf) {
            assert_eq!(used, buf.len(), "no stray bytes after the response");
            return r;
        }
        let want = if more { 1 } else { chunk.len() };
        let n = s.read(&mut chunk[..want]).unwrap();
        assert!(n > 0, "the server closed a kept-alive connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}
