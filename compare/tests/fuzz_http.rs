//! A seeded, dependency-free fuzzer over request handling: valid requests mutated
//! (byte flips, truncation, duplicated and oversized headers, random methods, targets
//! in origin-, absolute- and asterisk-form, versions, Content-Lengths, chunked bodies
//! with extensions and trailers, missing and doubled Host, `Expect: 100-continue`,
//! CRLF games, NULs, high bytes), fed (a) to `parse_head` and the chunked decoder
//! directly, which must never panic and must map every error to a 4xx or 5xx, (b) to
//! the live server, which must answer each connection with well-formed responses or
//! close it cleanly, never answer a parse problem with a 500, and go on serving
//! `/healthz`, and (c) to both runtimes, which must give the same status to every
//! request that both accept (route it: 2xx, 404, 405).
//!
//! The seed is a fixed constant, so CI replays the same inputs; it is printed.
//! `FIBERSTACK_FUZZ_SEED=<n>` replays another, `FIBERSTACK_FUZZ_SEED=clock` takes the
//! clock's. Run longer by hand:
//! `FIBERSTACK_FUZZ_ITERS=1000000 FIBERSTACK_FUZZ_SEED=clock cargo nextest run --test fuzz_http`

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::{get, parse_one, serve};
use fiber_web::rig::ChunkedDecoder;
use fiber_web::rig::{parse_head, Framing};
use fiber_web::Request;
use fiberstack::config::{HttpLimits, ServeConfig};

/// Parser iterations when FIBERSTACK_FUZZ_ITERS is not set (a couple of seconds).
const DEFAULT_ITERS: u64 = 50_000;
/// Live requests when FIBERSTACK_FUZZ_ITERS is not set; with it, ITERS / 100.
const DEFAULT_LIVE: u64 = 300;
/// Client threads sending the live requests.
const LIVE_THREADS: u64 = 6;
/// Requests sent to both runtimes when FIBERSTACK_FUZZ_ITERS is not set; with it,
/// ITERS / 200.
const DEFAULT_PARITY: u64 = 300;
/// The seed when FIBERSTACK_FUZZ_SEED is not set: CI runs the same inputs each time.
const DEFAULT_SEED: u64 = 0x15_f1be_c0de;

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

/// [`DEFAULT_SEED`], or FIBERSTACK_FUZZ_SEED: a number, or `clock` for a new one.
fn seed() -> u64 {
    let seed = match std::env::var("FIBERSTACK_FUZZ_SEED").as_deref() {
        Err(_) => DEFAULT_SEED,
        Ok("clock") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        Ok(n) => n.parse().unwrap_or_else(|_| {
            panic!("FIBERSTACK_FUZZ_SEED must be a number or 'clock', not {n:?}")
        }),
    };
    seed.max(1)
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
    "HTTP://x:80/healthz/",
    "http://x",
    "/hello/",
    "/he%6Clo",
    "/widgets%2Fhttp",
    "/hello%00",
    "/hello%zz",
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
    let mut r = format!("{method} {target} {version}\r\n");
    match rng.below(20) {
        0 | 1 => {}
        2 => r.push_str("Host: fuzz\r\nHost: fuzz\r\n"),
        _ => r.push_str("Host: fuzz\r\n"),
    }
    for _ in 0..rng.below(4) {
        r.push_str(&format!("X-{}: {}\r\n", rng.below(100), rng.next()));
    }
    if rng.chance(8) {
        r.push_str("Expect: 100-continue\r\n");
    }
    let body_len = if rng.chance(3) { rng.below(64) } else { 0 };
    let mut body = vec![b'b'; body_len];
    match rng.below(10) {
        // chunked, now and then with Content-Length too, or another coding.
        0 | 1 => {
            let te = match rng.below(8) {
                0 => "gzip, chunked",
                1 => "chunked, gzip",
                2 => "Chunked",
                _ => "chunked",
            };
            r.push_str(&format!("Transfer-Encoding: {te}\r\n"));
            if rng.chance(6) {
                r.push_str(&format!("Content-Length: {body_len}\r\n"));
            }
            body = chunk(rng, &body);
        }
        _ if body_len > 0 || rng.chance(5) => {
            let cl = match rng.below(6) {
                0 => format!("{}", rng.next()),
                1 => "-1".into(),
                2 => "abc".into(),
                3 => format!("{body_len}, {body_len}"),
                _ => format!("{body_len}"),
            };
            r.push_str(&format!("Content-Length: {cl}\r\n"));
        }
        _ => {}
    }
    r.push_str("\r\n");
    let mut bytes = r.into_bytes();
    bytes.extend(body);
    bytes
}

/// `body` in the chunked coding: random chunk sizes, sometimes an extension, upper-
/// case hex or a trailer field.
fn chunk(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len());
        let size = if rng.chance(2) {
            format!("{n:x}")
        } else {
            format!("{n:X}")
        };
        let ext = if rng.chance(4) { ";ext=\"v\"" } else { "" };
        out.extend_from_slice(format!("{size}{ext}\r\n").as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    if rng.chance(4) {
        out.extend_from_slice(b"X-Trailer: t\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
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
    let (mut ok, mut partial, mut errors, mut chunked_bodies) = (0u64, 0u64, 0u64, 0u64);
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
        let mut request = Request::default();
        let result = catch_unwind(AssertUnwindSafe(|| parse_head(&buf, &limits, &mut request)))
            .unwrap_or_else(|_| panic!("parse_head panicked; {}", what()));
        match result {
            Ok(Some(head)) => {
                ok += 1;
                assert!(head.head_len <= buf.len(), "{}", what());
                assert!(head.head_len <= limits.max_header_bytes, "{}", what());
                assert!(request.headers.len() <= limits.max_headers, "{}", what());
                let path = request.path();
                assert!(path.starts_with('/') || path == "*", "{}", what());
                match head.framing {
                    Framing::Length(n) => assert!(n <= limits.max_body_bytes, "{}", what()),
                    Framing::Chunked => {
                        chunked_bodies += 1;
                        let mut rest = buf[head.head_len..].to_vec();
                        let mut decoder = ChunkedDecoder::default();
                        let fed =
                            catch_unwind(AssertUnwindSafe(|| decoder.feed(&mut rest, &limits)))
                                .unwrap_or_else(|_| {
                                    panic!("the chunked decoder panicked; {}", what())
                                });
                        match fed {
                            Ok(true) => {
                                let body = decoder.into_body();
                                assert!(body.len() <= limits.max_body_bytes, "{}", what());
                            }
                            Ok(false) => {}
                            Err(e) => assert!((400..500).contains(&e.status()), "{e}; {}", what()),
                        }
                    }
                }
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
        "{n} in {:?}: {ok} parsed ({chunked_bodies} chunked), {partial} partial, {errors} refused",
        start.elapsed()
    );
    assert!(ok > 0 && errors > 0, "the generator reaches both outcomes");
    assert!(chunked_bodies > 0, "the generator reaches chunked bodies");
}

#[test]
fn the_live_server_answers_mutated_requests_well_or_closes_cleanly() {
    let seed = seed();
    let n = iters().map_or(DEFAULT_LIVE, |i| (i / 100).max(DEFAULT_LIVE));
    eprintln!("fuzz live: seed {seed} (FIBERSTACK_FUZZ_SEED), {n} connections");
    let app = serve(|cfg| {
        cfg.web.http.header_timeout = Duration::from_millis(500);
        cfg.web.http.idle_timeout = Duration::from_millis(500);
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

#[test]
fn every_request_both_runtimes_accept_gets_the_same_status_from_both() {
    let seed = seed();
    let n = iters().map_or(DEFAULT_PARITY, |i| (i / 200).max(DEFAULT_PARITY));
    eprintln!("fuzz parity: seed {seed} (FIBERSTACK_FUZZ_SEED), {n} requests to each runtime");
    let url = common::database_url();
    let mut cfg = ServeConfig {
        database_url: Some(url),
        ..common::config()
    };
    cfg.web.http.header_timeout = Duration::from_millis(500);
    cfg.web.http.idle_timeout = Duration::from_millis(500);
    let fibers = fiberstack::start::start(&cfg).unwrap();
    let twin = compare::twin::start(&cfg).unwrap();
    let (f_addr, t_addr) = (fibers.addr(), twin.addr());
    let workers: Vec<_> = (0..LIVE_THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_add(1000 + t).max(1));
                let limits = HttpLimits::default();
                let (mut compared, mut differed) = (0u64, 0u64);
                for i in (t..n).step_by(LIVE_THREADS as usize) {
                    let mut req = request(&mut rng);
                    if rng.chance(3) {
                        req = mutate(&mut rng, req, &limits);
                    }
                    let what = format!(
                        "seed {seed}, thread {t}, request {i}: {:?}",
                        String::from_utf8_lossy(&req)
                    );
                    let f = exchange(f_addr, &req, &format!("fibers; {what}"));
                    let t = exchange(t_addr, &req, &format!("twin; {what}"));
                    // Routed: the request passed both HTTP layers.
                    let routed = |s: &Option<&u16>| {
                        s.is_some_and(|&s| (200..300).contains(&s) || s == 404 || s == 405)
                    };
                    match (f.first(), t.first()) {
                        (f, t) if routed(&f) && routed(&t) => {
                            compared += 1;
                            assert_eq!(f, t, "fibers vs twin; {what}");
                        }
                        (f, t) if f != t => {
                            differed += 1;
                            if differed <= 3 {
                                eprintln!("refused differently: fibers {f:?}, twin {t:?}; {what}");
                            }
                        }
                        _ => {}
                    }
                }
                (compared, differed)
            })
        })
        .collect();
    let (mut compared, mut differed) = (0, 0);
    for w in workers {
        let (c, d) = w.join().unwrap();
        compared += c;
        differed += d;
    }
    eprintln!(
        "{n} requests: {compared} routed by both with the same status; {differed} refused \
         differently (docs/HTTP.md says where the runtimes differ)"
    );
    assert!(
        compared >= n / 8,
        "only {compared} of {n} were routed by both"
    );
    twin.shutdown(Duration::from_secs(5));
    fibers.shutdown(Duration::from_secs(5));
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
            status_line(rest),
            "not a status line at byte {at}: {:?}; {what}",
            String::from_utf8_lossy(rest)
        );
        // A HEAD's answer has a Content-Length but no body: when the request had a
        // HEAD and what follows the head is the next response (or nothing), take it
        // as bodiless.
        let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n");
        let bodiless = head_end.filter(|&e| {
            let after = &rest[e + 4..];
            req.windows(5).any(|w| w == b"HEAD ") && (after.is_empty() || status_line(after))
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
        at += used;
        if r.status == 100
            && req
                .windows(12)
                .any(|w| w.eq_ignore_ascii_case(b"100-continue"))
        {
            continue; // the interim answer to an Expect: 100-continue
        }
        if r.status == 103 {
            // The interim answer that tells a client that only half-closed from one
            // that left (fiber_web/src/http/departure.rs); HTTP/1.1 clients skip 1xx.
            continue;
        }
        assert!((200..600).contains(&r.status), "{}; {what}", r.status);
        assert_ne!(r.status, 500, "a 500 for a request: {}; {what}", r.body);
        statuses.push(r.status);
    }
    statuses
}

/// A status line starts here: HTTP/1.1, or HTTP/1.0 (hyper answers an HTTP/1.0
/// request in its version; the fiber server always says HTTP/1.1, which RFC 9110
/// section 2.5 prefers).
fn status_line(b: &[u8]) -> bool {
    b.starts_with(b"HTTP/1.1 ") || b.starts_with(b"HTTP/1.0 ")
}
