//! A seeded, dependency-free fuzzer over request handling: valid requests mutated
//! (byte flips, truncation, duplicated and oversized headers, random methods, targets,
//! versions and Content-Lengths, CRLF games, NULs, high bytes), fed (a) to
//! `parse_head` directly, which must never panic and must map every error to a 4xx or
//! 5xx, and (b) to the live server, which must answer each connection with well-formed
//! responses or close it cleanly, never answer a parse problem with a 500, and go on
//! serving `/healthz`.
//!
//! Run briefly in CI; by hand for longer, and replay a failure with its seed:
//! `FIBERSTACK_FUZZ_ITERS=1000000 FIBERSTACK_FUZZ_SEED=42 cargo nextest run --test fuzz_http`

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::{get, parse_one, serve};
use fiberstack::config::HttpLimits;
use fiberstack::http::request::parse_head;

/// Parser iterations when FIBERSTACK_FUZZ_ITERS is not set (a couple of seconds).
const DEFAULT_ITERS: u64 = 50_000;
/// Live requests when FIBERSTACK_FUZZ_ITERS is not set; with it, ITERS / 100.
const DEFAULT_LIVE: u64 = 300;
/// Client threads sending the live requests.
const LIVE_THREADS: u64 = 6;

/// xorshift64*: tiny, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

fn seed() -> u64 {
    std::env::var("FIBERSTACK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        .max(1)
}

fn iters() -> Option<u64> {
    std::env::var("FIBERSTACK_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
}

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "get", "G\x00T", "GËT", "", "CONNECT",
];
/// Fast routes only: the live phase must not wait on MySQL sleeps.
const TARGETS: &[&str] = &[
    "/hello",
    "/healthz",
    "/nope",
    "/widgets?sleep=0",
    "/widgets?sleep=abc",
    "/upstream/search.json?q=%27%3B--",
    "*",
    "http://x/hello",
    "/hello?%zz",
    "//",
    "/\u{ff}",
];
const VERSIONS: &[&str] = &[
    "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.", "http/1.1", "HTTP/11", "",
];

/// A valid request, or one with a random method, target or version.
fn request(rng: &mut Rng) -> Vec<u8> {
    let method = if rng.chance(4) {
        rng.pick(METHODS)
    } else {
        "GET"
    };
    let target = rng.pick(TARGETS);
    let version = if rng.chance(4) {
        rng.pick(VERSIONS)
    } else {
        "HTTP/1.1"
    };
    let mut r = format!("{method} {target} {version}\r\nHost: fuzz\r\n");
    for _ in 0..rng.below(4) {
        r.push_str(&format!("X-{}: {}\r\n", rng.below(100), rng.next()));
    }
    let body_len = if rng.chance(3) { rng.below(64) } else { 0 };
    if body_len > 0 || rng.chance(5) {
        let cl = match rng.below(6) {
            0 => format!("{}", rng.next()),
            1 => "-1".into(),
            2 => "abc".into(),
            3 => format!("{body_len}, {body_len}"),
            _ => format!("{body_len}"),
        };
        r.push_str(&format!("Content-Length: {cl}\r\n"));
    }
    if rng.chance(10) {
        r.push_str("Transfer-Encoding: chunked\r\n");
    }
    r.push_str("\r\n");
    let mut bytes = r.into_bytes();
    bytes.extend(std::iter::repeat_n(b'b', body_len));
    bytes
}

/// Mutate `req` a few times.
fn mutate(rng: &mut Rng, mut req: Vec<u8>, limits: &HttpLimits) -> Vec<u8> {
    for _ in 0..rng.below(4) {
        let at = rng.below(req.len() + 1);
        match rng.below(10) {
            0 if !req.is_empty() => {
                let i = rng.below(req.len());
                req[i] ^= 1 << rng.below(8);
            }
            1 => req.truncate(at),
            2 => {
                const JUNK: &[&[u8]] = &[
                    b"\r\n",
                    b"\n",
                    b"\r",
                    b"\r\n\r\n",
                    b"\x00",
                    b"\xff\xfe",
                    b" ",
                    b":",
                    b"\t",
                ];
                let junk = *rng.pick(JUNK);
                req.splice(at..at, junk.iter().copied());
            }
            3 => {
                // Many duplicated headers.
                let n = rng.below(2 * limits.max_headers);
                let h = b"X-Dup: 1\r\n".repeat(n);
                let at = find_line_end(&req).unwrap_or(at);
                req.splice(at..at, h);
            }
            4 => {
                // An oversized header.
                let n = rng.below(2 * limits.max_header_bytes);
                let h = format!("X-Big: {}\r\n", "v".repeat(n)).into_bytes();
                let at = find_line_end(&req).unwrap_or(at);
                req.splice(at..at, h);
            }
            5 => {
                let h = format!("Content-Length: {}\r\n", rng.next() >> rng.below(64)).into_bytes();
                let at = find_line_end(&req).unwrap_or(at);
                req.splice(at..at, h);
            }
            6 if !req.is_empty() => {
                let i = rng.below(req.len());
                req[i] = 0x80 | rng.below(128) as u8;
            }
            7 if !req.is_empty() => {
                let i = rng.below(req.len());
                req.remove(i);
            }
            8 => {
                // A whole second request pipelined after it.
                let more = request(rng);
                req.extend_from_slice(&more);
            }
            _ => {
                // Bare LFs instead of CRLFs.
                req = String::from_utf8_lossy(&req)
                    .replace("\r\n", "\n")
                    .into_bytes();
            }
        }
    }
    req
}

/// Just after the request line, where a header may be inserted.
fn find_line_end(req: &[u8]) -> Option<usize> {
    req.windows(2).position(|w| w == b"\r\n").map(|i| i + 2)
}

fn small_limits(rng: &mut Rng) -> HttpLimits {
    if rng.chance(2) {
        return HttpLimits::default();
    }
    HttpLimits {
        max_headers: 1 + rng.below(8),
        max_header_bytes: 16 + rng.below(512),
        max_body_bytes: rng.below(100),
        ..HttpLimits::default()
    }
}

#[test]
fn the_parser_never_panics_and_every_error_is_a_4xx_or_5xx() {
    let seed = seed();
    let n = iters().unwrap_or(DEFAULT_ITERS);
    eprintln!("fuzz parse_head: seed {seed} (FIBERSTACK_FUZZ_SEED), {n} iterations");
    let mut rng = Rng(seed);
    let start = Instant::now();
    let (mut ok, mut partial, mut errors) = (0u64, 0u64, 0u64);
    for i in 0..n {
        let limits = small_limits(&mut rng);
        let req = request(&mut rng);
        let buf = mutate(&mut rng, req, &limits);
        let what = || {
            format!(
                "seed {seed}, iteration {i}: {:?}",
                String::from_utf8_lossy(&buf)
            )
        };
        let result = catch_unwind(AssertUnwindSafe(|| parse_head(&buf, &limits)))
            .unwrap_or_else(|_| panic!("parse_head panicked; {}", what()));
        match result {
            Ok(Some(head)) => {
                ok += 1;
                assert!(head.head_len <= buf.len(), "{}", what());
                assert!(head.head_len <= limits.max_header_bytes, "{}", what());
                assert!(head.body_len <= limits.max_body_bytes, "{}", what());
                assert!(
                    head.request.headers.len() <= limits.max_headers,
                    "{}",
                    what()
                );
                assert!(head.request.path.starts_with('/'), "{}", what());
            }
            Ok(None) => {
                partial += 1;
                assert!(buf.len() <= limits.max_header_bytes, "{}", what());
            }
            Err(e) => {
                errors += 1;
                assert!((400..600).contains(&e.status()), "{e}; {}", what());
                assert!(!e.to_string().is_empty());
            }
        }
    }
    eprintln!(
        "{n} in {:?}: {ok} parsed, {partial} partial, {errors} refused",
        start.elapsed()
    );
    assert!(ok > 0 && errors > 0, "the generator reaches both outcomes");
}

#[test]
fn the_live_server_answers_mutated_requests_well_or_closes_cleanly() {
    let seed = seed();
    let n = iters().map_or(DEFAULT_LIVE, |i| (i / 100).max(DEFAULT_LIVE));
    eprintln!("fuzz live: seed {seed} (FIBERSTACK_FUZZ_SEED), {n} connections");
    let app = serve(|cfg| {
        cfg.http.header_timeout = Duration::from_millis(500);
        cfg.http.idle_timeout = Duration::from_millis(500);
    });
    let addr = app.addr();
    let workers: Vec<_> = (0..LIVE_THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_add(t).max(1));
                let limits = HttpLimits::default();
                let mut statuses = Vec::new();
                for i in (t..n).step_by(LIVE_THREADS as usize) {
                    let req = request(&mut rng);
                    let req = mutate(&mut rng, req, &limits);
                    let what = format!(
                        "seed {seed}, thread {t}, connection {i}: {:?}",
                        String::from_utf8_lossy(&req)
                    );
                    statuses.extend(exchange(addr, &req, &what));
                }
                statuses
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for w in workers {
        statuses.extend(w.join().unwrap());
    }
    let count = |lo: u16, hi: u16| statuses.iter().filter(|s| (lo..hi).contains(*s)).count();
    eprintln!(
        "{} responses: {} 2xx, {} 4xx, {} 5xx",
        statuses.len(),
        count(200, 300),
        count(400, 500),
        count(500, 600)
    );
    assert!(count(200, 300) > 0 && count(400, 500) > 0);
    assert_eq!(get(addr, "/healthz").status, 200);
}

/// Send `req`, half-close, and read until the server closes: what came must be whole
/// responses, none a 500; returns their statuses.
fn exchange(addr: SocketAddr, req: &[u8], what: &str) -> Vec<u16> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may answer and close before reading everything: a failed write is fine.
    let _ = s.write_all(req);
    let _ = s.shutdown(Shutdown::Write);
    let mut got = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            // A reset after a complete answer is a clean close too (unread input).
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no answer and no close within 10 s ({e}); {what}"),
        }
    }
    let mut statuses = Vec::new();
    let mut at = 0;
    while at < got.len() {
        let rest = &got[at..];
        assert!(
            rest.starts_with(b"HTTP/1.1 "),
            "not a status line at byte {at}: {:?}; {what}",
            String::from_utf8_lossy(rest)
        );
        // A HEAD's answer has a Content-Length but no body: when the request had a
        // HEAD and what follows the head is the next response (or nothing), take it
        // as bodiless.
        let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n");
        let bodiless = head_end.filter(|&e| {
            let after = &rest[e + 4..];
            req.windows(5).any(|w| w == b"HEAD ")
                && (after.is_empty() || after.starts_with(b"HTTP/1.1 "))
        });
        let parsed = match bodiless {
            Some(e) => std::str::from_utf8(&rest[9..12])
                .ok()
                .and_then(|s| s.parse().ok())
                .map(|status| {
                    let r = common::Resp {
                        status,
                        headers: Vec::new(),
                        body: String::new(),
                    };
                    (r, e + 4)
                }),
            None => parse_one(rest),
        };
        let Some((r, used)) = parsed else {
            panic!(
                "a cut response: {:?}; {what}",
                String::from_utf8_lossy(rest)
            );
        };
        assert!((200..600).contains(&r.status), "{}; {what}", r.status);
        assert_ne!(r.status, 500, "a 500 for a request: {}; {what}", r.body);
        statuses.push(r.status);
        at += used;
    }
    statuses
}
