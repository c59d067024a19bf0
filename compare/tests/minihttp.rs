//! `serve --runtime minihttp` on the real may_minihttp 0.1.11: the defects that
//! `fiber_web/src/http/mod.rs` gives as the reason we own the connection loop, each provoked here
//! so that the reason is executable, and each next to what the fiber server does with
//! the same bytes. Also: the flags it ignores are named at start-up, and `/deep` past
//! the stack takes the request and the process down where the fiber server answers 500.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{get, parse, poll, wait_until, Resp};

const BIN: &str = env!("CARGO_BIN_EXE_compare");
/// How long a client waits for the server to close before we call the connection
/// "left open": what ab would wait for ever (until its own 30 s timeout).
const CLIENT_WAIT: Duration = Duration::from_secs(2);
/// How long a connection whose coroutine panicked may take to close.
const PANIC_WAIT: Duration = Duration::from_secs(20);

/// A `compare serve --runtime minihttp` child on the shared test MariaDB; killed on drop.
struct Mini {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Mini {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mini {
    fn start(extra: &[&str]) -> Mini {
        let mut child = Command::new(BIN)
            .args(["serve", "--runtime", "minihttp", "--bind", "127.0.0.1:0"])
            .args(["--db-pool", "4", "--threads", "2"])
            .args(extra)
            .env("DATABASE_URL", common::database_url())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut banner = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut banner)
            .unwrap();
        let addr = banner
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {banner:?}: {}", stderr.lock().unwrap()));
        assert!(banner.contains("runtime minihttp"), "{banner}");
        Mini {
            child,
            addr,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }
}

/// How a connection ended after the request was sent.
#[derive(Debug, PartialEq)]
enum Ending {
    /// The server closed it (EOF) or reset it.
    Closed,
    /// Still open after [`CLIENT_WAIT`] of silence.
    LeftOpen,
}

/// Send `raw` and read until the server closes, or until it has been silent for
/// [`CLIENT_WAIT`]: what came back, and how the connection ended.
fn exchange(addr: SocketAddr, raw: &[u8]) -> (Vec<u8>, Ending) {
    exchange_within(addr, raw, CLIENT_WAIT)
}

/// [`exchange`], waiting through up to `silence` without a byte.
fn exchange_within(addr: SocketAddr, raw: &[u8], silence: Duration) -> (Vec<u8>, Ending) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(silence)).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, Ending::Closed),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (out, Ending::LeftOpen)
            }
            Err(_) => return (out, Ending::Closed),
        }
    }
}

/// `GET path` on a keep-alive connection, read as far as its Content-Length (minihttp
/// never closes, so reading to the end would wait for ever).
fn mini_get(addr: SocketAddr, path: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while parse(&out).is_none() {
        match s.read(&mut buf) {
            Ok(n) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => panic!("no response to {path}: {:?}", String::from_utf8_lossy(&out)),
        }
    }
    parse(&out).unwrap()
}

/// `raw` gets no answer: the connection is closed, and minihttp's stderr says `why`.
/// The close comes once the coroutine's panic has been reported, and the panic hook
/// symbolises a backtrace first under `RUST_BACKTRACE` (seconds in a debug build on a
/// busy machine): waited for up to [`PANIC_WAIT`].
fn dropped_without_a_word(mini: &Mini, raw: &[u8], why: &str) {
    let (out, ending) = exchange_within(mini.addr, raw, PANIC_WAIT);
    assert_eq!(
        (out.as_slice(), ending),
        (&b""[..], Ending::Closed),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert!(
        poll(Duration::from_secs(5), || mini.stderr().contains(why)),
        "no {why} in: {}",
        mini.stderr()
    );
}

fn status(bytes: &[u8]) -> Option<u16> {
    parse(bytes).map(|r| r.status)
}

/// `GET /hello` with `n` extra headers.
fn with_headers(n: usize) -> Vec<u8> {
    let mut req = String::from("GET /hello HTTP/1.1\r\nHost: t\r\n");
    for i in 1..n {
        req.push_str(&format!("X-Extra-{i}: {i}\r\n"));
    }
    req.push_str("\r\n");
    req.into_bytes()
}

#[test]
fn the_routes_answer_and_stats_count_what_was_served() {
    let mini = Mini::start(&[]);
    let hello = mini_get(mini.addr, "/hello");
    assert_eq!((hello.status, hello.body.as_str()), (200, "Hello, World!"));
    let w = mini_get(mini.addr, "/widgets?sleep=0.05");
    assert_eq!((w.status, w.body.as_str()), (200, "Oh hai"));
    assert_eq!(mini_get(mini.addr, "/widgets?sleep=x").status, 400);
    assert_eq!(mini_get(mini.addr, "/nowhere").status, 404);
    let stats: serde_json::Value =
        serde_json::from_str(&mini_get(mini.addr, "/stats").body).unwrap();
    assert_eq!(stats["runtime"], "minihttp");
    assert_eq!(stats["pid"].as_u64(), Some(u64::from(mini.child.id())));
    assert!(stats["uptime_secs"].as_f64().unwrap() > 0.0);
    assert_eq!(stats["served_2xx"].as_u64(), Some(2), "{stats}");
    assert_eq!(stats["db"]["in_use"].as_u64(), Some(0), "{stats}");
}

#[test]
fn flags_it_cannot_honour_are_named_with_the_reason() {
    let mini = Mini::start(&["--fibers", "7", "--stack-size", "1MiB", "--queue", "3"]);
    let ignored = |flag: &str| mini.stderr().contains(&format!("--{flag} ignored: "));
    wait_until("the ignored-flag lines", Duration::from_secs(10), || {
        ignored("fibers") && ignored("stack-size") && ignored("queue")
    });
    let err = mini.stderr();
    assert!(err.contains("no fiber pool"), "{err}");
    assert!(err.contains("may's default"), "{err}");
    // Flags left at their defaults are not reported.
    assert!(!err.contains("--max-connections"), "{err}");
}

/// HTTP/1.0 without keep-alive, and HTTP/1.1 with `Connection: close`, both mean "close
/// after this response". may_minihttp answers and keeps the connection open: a client
/// that reads to the end (ab, HTTP/1.0's only framing for it) waits for ever. The
/// fiber server answers and closes.
#[test]
fn http_1_0_and_connection_close_are_ignored_so_plain_ab_hangs() {
    let mini = Mini::start(&[]);
    let fibers = common::serve(|_| {});
    for req in [
        &b"GET /hello HTTP/1.0\r\n\r\n"[..],
        b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    ] {
        let (out, ending) = exchange(mini.addr, req);
        assert_eq!(status(&out), Some(200), "{}", String::from_utf8_lossy(&out));
        assert_eq!(
            ending,
            Ending::LeftOpen,
            "minihttp closed after the response"
        );
        let (out, ending) = exchange(fibers.addr(), req);
        assert_eq!(status(&out), Some(200));
        assert_eq!(ending, Ending::Closed, "the fiber server closes");
    }
}

/// A 17th request header: may_minihttp's parse fails (16 slots) and it drops the
/// connection without a word. 16 are served. The fiber server serves 17.
#[test]
fn a_17th_header_drops_the_connection() {
    let mini = Mini::start(&[]);
    let fibers = common::serve(|_| {});
    let (out, ending) = exchange(mini.addr, &with_headers(16));
    assert_eq!(status(&out), Some(200), "{}", String::from_utf8_lossy(&out));
    assert_eq!(ending, Ending::LeftOpen);
    dropped_without_a_word(&mini, &with_headers(17), "TooManyHeaders");
    let (out, _) = exchange(fibers.addr(), &with_headers(17));
    assert_eq!(status(&out), Some(200), "{}", String::from_utf8_lossy(&out));
}

/// `Content-Length: abc`: may_minihttp parses it with `unwrap()` when the body is read,
/// so the connection's coroutine panics and the connection is dropped with no answer
/// (the process lives on). The fiber server answers 400.
#[test]
fn a_bad_content_length_panics_the_connection() {
    let mini = Mini::start(&[]);
    let fibers = common::serve(|_| {});
    let bad = b"GET /hello HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n";
    dropped_without_a_word(&mini, bad, "panicked");
    assert_eq!(
        mini_get(mini.addr, "/hello").status,
        200,
        "the process lives on"
    );
    let (out, _) = exchange(fibers.addr(), bad);
    assert_eq!(status(&out), Some(400), "{}", String::from_utf8_lossy(&out));
}

/// `/deep` past the stack. On a fiber: a 500, and the server goes on. On may_minihttp
/// the recursion runs on the connection's own may stack: generator's guard-page handler
/// prints "coroutine has overflowed its stack", the request is never answered, and may
/// ends the process (`stack overflow detected`, status 1) when it drops the coroutine,
/// whose stack the patched generator reports as used whole after an overflow
/// (patches/generator/PATCH.md; stock 0.8.12 looked at the stack's bottom word, which
/// a debug build's frames step over, and the process lived on).
#[test]
fn deep_overflow_kills_minihttp_where_fibers_answer_500() {
    let deep = "/deep?depth=3000&frame=1024";
    let fibers = common::serve(|_| {});
    let r = get(fibers.addr(), deep);
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(get(fibers.addr(), "/hello").status, 200, "fibers go on");

    let mut mini = Mini::start(&[]);
    let (out, _) = exchange(
        mini.addr,
        format!("GET {deep} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
    );
    assert_eq!(out, b"", "{}", String::from_utf8_lossy(&out));
    wait_until("the overflow message", Duration::from_secs(10), || {
        mini.stderr().contains("coroutine has overflowed its stack")
    });
    let deadline = Instant::now() + Duration::from_secs(2);
    let exited = loop {
        if let Some(status) = mini.exited() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = exited.expect("may_minihttp outlived the overflow");
    assert_eq!(status.code(), Some(1), "{status}: {}", mini.stderr());
    // The stderr reader may be a line behind the exit.
    wait_until("may's exit message", Duration::from_secs(10), || {
        mini.stderr().contains("stack overflow detected")
    });
}
