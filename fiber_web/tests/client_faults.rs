//! Upstreams that misbehave on purpose, one per phase of a call: refused, a connect
//! that never completes, a request nobody reads, silence before the first byte, a
//! head or a body that stops or dribbles, garbage, heads too large or too many headers,
//! bodies that end early or lie about their length; and a call's own timeout and
//! deadline. Each is an error that names its phase, within its limit, with the status
//! a gateway answers (504 for a timeout, else 502), and no call left in flight.

mod upstream;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_web::client::{phase, HttpClient, Method, Url};
use fiber_web::config::ClientLimits;
use fiber_web::Error;
use upstream::{fibers, hold_until_closed, on_fiber, Next, Upstream};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Limits short enough that every fault resolves in well under a second, each its own
/// value so that a message shows which one fired.
fn short() -> ClientLimits {
    ClientLimits {
        connect_timeout: Duration::from_millis(300),
        send_timeout: Duration::from_millis(310),
        read_timeout: Duration::from_millis(320),
        body_timeout: Duration::from_millis(600),
        total_timeout: Duration::from_secs(5),
        max_response_bytes: 64 * 1024,
        ..ClientLimits::default()
    }
}

/// How late past its limit a timeout may be reported on a busy 2-core machine.
const LATE: Duration = Duration::from_millis(1500);

/// GET `url` (or `method` it with `body`) on a fiber: the error, and how long it took.
fn fails(
    limits: ClientLimits,
    url: &str,
    call: impl FnOnce(&HttpClient, &Url) -> Result<fiber_web::client::ClientResponse, Error>
        + Send
        + 'static,
) -> (Error, Duration) {
    let (pool, http) = (fibers(), Arc::new(HttpClient::new(limits)));
    let url = Url::parse(url).unwrap();
    let h = Arc::clone(&http);
    let start = Instant::now();
    let got = on_fiber(&pool, "client", move || call(&h, &url));
    let took = start.elapsed();
    let e = got.expect_err("the call must fail");
    assert_eq!(http.stats().in_flight, 0, "{:?}", http.stats());
    assert_eq!(http.stats().errors, 1, "{:?}", http.stats());
    (e, took)
}

fn get(h: &HttpClient, u: &Url) -> Result<fiber_web::client::ClientResponse, Error> {
    h.get(u)
}

/// Assert `e` is a timeout of `phase` after `limit`, reported within `took`.
fn timed_out(e: &Error, took: Duration, phase: &str, limit: Duration) {
    assert!(
        matches!(e, Error::Timeout { phase: p, limit: l } if *p == phase && *l == limit),
        "expected a {phase} timeout after {limit:?}: {e:?}"
    );
    assert_eq!((e.gateway_status(), e.phase()), (504, Some(phase)));
    let says = format!("{phase} timed out after {} ms", limit.as_millis());
    assert!(e.to_string().contains(&says), "{e}");
    assert!(
        took >= limit && took < limit + LATE,
        "{took:?} for {limit:?}"
    );
}

/// Assert `e` is a bad response (502) that says `says`.
fn bad_response(e: &Error, says: &str) {
    assert!(matches!(e, Error::BadResponse(_)), "{e:?}");
    assert_eq!(e.gateway_status(), 502);
    assert!(e.to_string().contains(says), "'{says}' in: {e}");
}

/// An upstream that writes `bytes` after reading the request, then holds the
/// connection until the client leaves.
fn sends(bytes: &'static [u8]) -> Upstream {
    Upstream::start(move |s, _| {
        let _ = s.write_all(bytes);
        hold_until_closed(s)
    })
}

#[test]
fn a_refused_connect_is_a_502_naming_the_address() {
    let closed: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (e, _) = fails(short(), &format!("http://{closed}/"), get);
    assert!(
        matches!(e, Error::Connect { addr, .. } if addr == closed),
        "{e:?}"
    );
    assert_eq!((e.gateway_status(), e.phase()), (502, Some(phase::CONNECT)));
    assert!(e.to_string().contains("refused"), "{e}");
}

#[test]
fn a_connect_that_never_completes_times_out_in_the_connect_phase() {
    let silent = fiber_pool::testing::UnansweringListener::new().unwrap();
    let addr = silent.addr;
    let (e, took) = fails(short(), &format!("http://{addr}/"), get);
    timed_out(&e, took, phase::CONNECT, short().connect_timeout);
}

#[test]
fn a_request_nobody_reads_times_out_in_the_send_phase() {
    // Accepted and never read: the socket buffers fill, then the write waits.
    let up = Upstream::start_raw(|s, _| {
        let _keep = s;
        std::thread::sleep(upstream::HOLD);
    });
    let (e, took) = fails(short(), &up.url("/"), |h, u| {
        h.request(Method::Put, u).body(vec![b'x'; 64 << 20]).send()
    });
    timed_out(&e, took, phase::SEND, short().send_timeout);
}

#[test]
fn silence_before_the_first_byte_is_a_first_byte_timeout() {
    let up = Upstream::start(|s, _| hold_until_closed(s));
    let (e, took) = fails(short(), &up.url("/"), get);
    timed_out(&e, took, phase::FIRST_BYTE, short().read_timeout);
}

#[test]
fn a_head_that_stops_is_a_head_timeout() {
    let up = sends(b"HTTP/1.1 200 OK\r\nContent-Le");
    let (e, took) = fails(short(), &up.url("/"), get);
    timed_out(&e, took, phase::HEAD, short().read_timeout);
}

#[test]
fn a_body_that_stops_is_a_body_timeout_after_the_read_timeout() {
    let up = sends(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello");
    let (e, took) = fails(short(), &up.url("/"), get);
    timed_out(&e, took, phase::BODY, short().read_timeout);
}

#[test]
fn a_dribbled_body_is_a_body_timeout_after_the_whole_body_limit() {
    // A byte every 50 ms: no read waits long, the whole body does.
    let up = Upstream::start(|s, _| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        for _ in 0..1000 {
            if s.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Next::Close
    });
    let (e, took) = fails(short(), &up.url("/"), get);
    timed_out(&e, took, phase::BODY, short().body_timeout);
}

#[test]
fn the_calls_own_timeout_and_deadline_bound_every_phase() {
    let up = Upstream::start(|s, _| hold_until_closed(s));
    let slow = ClientLimits {
        read_timeout: Duration::from_secs(30),
        ..short()
    };
    let limit = Duration::from_millis(250);
    let (e, took) = fails(slow.clone(), &up.url("/"), move |h, u| {
        h.request(Method::Get, u).timeout(limit).send()
    });
    timed_out(&e, took, phase::TOTAL, limit);

    let (e, took) = fails(slow, &up.url("/"), move |h, u| {
        h.request(Method::Get, u)
            .deadline(Instant::now() + limit)
            .timeout(Duration::from_secs(10))
            .send()
    });
    assert!(
        matches!(
            e,
            Error::Timeout {
                phase: phase::DEADLINE,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(took >= limit && took < limit + LATE, "{took:?}");

    // A deadline already passed: nothing is sent.
    let before = up.requests().len();
    let (e, _) = fails(short(), &up.url("/"), |h, u| {
        h.request(Method::Get, u).deadline(Instant::now()).send()
    });
    assert_eq!(e.phase(), Some(phase::DEADLINE), "{e:?}");
    assert_eq!(up.requests().len(), before);
}

#[test]
fn garbage_and_broken_framing_are_bad_responses_that_say_where() {
    for (bytes, says) in [
        (
            &b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\r\n\r\n"[..],
            "the head is not HTTP/1.x",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
            "Content-Length '12x' is not a number",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            "two different Content-Length values",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "bad chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
            "a chunk does not end with CRLF",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "no upgrade was asked for",
        ),
    ] {
        let up = sends(bytes);
        let (e, _) = fails(short(), &up.url("/"), get);
        bad_response(&e, says);
    }
}

#[test]
fn bodies_that_end_early_are_bad_responses_not_short_bodies() {
    for (bytes, says) in [
        (
            &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"[..],
            "the body ended after 5 of its 10 bytes",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
            "the chunked body ended early",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Le",
            "the connection closed inside the response head",
        ),
        (b"", "the connection closed before any response"),
    ] {
        let up = Upstream::start(move |s, _| {
            let _ = s.write_all(bytes);
            Next::Close
        });
        let (e, _) = fails(short(), &up.url("/"), get);
        bad_response(&e, says);
    }
}

#[test]
fn heads_over_their_limits_are_refused() {
    let many: &'static [u8] = Box::leak(
        format!("HTTP/1.1 200 OK\r\n{}\r\n", "X-A: 1\r\n".repeat(65))
            .into_bytes()
            .into_boxed_slice(),
    );
    let up = sends(many);
    let (e, _) = fails(short(), &up.url("/"), get);
    bad_response(&e, "more than 64 headers");

    let long: &'static [u8] = Box::leak(
        format!("HTTP/1.1 200 OK\r\nX-Long: {}\r\n\r\n", "a".repeat(8192))
            .into_bytes()
            .into_boxed_slice(),
    );
    let up = sends(long);
    let limits = ClientLimits {
        max_head_bytes: 4096,
        ..short()
    };
    let (e, _) = fails(limits, &up.url("/"), get);
    bad_response(&e, "the response head is larger than the 4096-byte limit");
}

#[test]
fn a_body_over_the_cap_is_an_error_however_it_is_framed() {
    let limits = ClientLimits {
        max_response_bytes: 1000,
        ..short()
    };
    for bytes in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n",
    ] {
        let up = sends(bytes);
        let (e, _) = fails(limits.clone(), &up.url("/"), get);
        assert!(matches!(e, Error::TooLarge { limit: 1000 }), "{e:?}");
    }
    // Unannounced: bytes until the close, more than the cap, after the head (so that
    // it is the body's reads that pass the cap, not the first one).
    let up = Upstream::start(|s, _| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(20));
            let _ = s.write_all(&[b'x'; 400]);
        }
        Next::Close
    });
    let (e, _) = fails(limits, &up.url("/"), get);
    assert!(matches!(e, Error::TooLarge { limit: 1000 }), "{e:?}");
    assert!(
        e.to_string().contains("larger than the 1000-byte limit"),
        "{e}"
    );
}

#[test]
fn bad_requests_are_refused_before_anything_is_sent() {
    let up = Upstream::start(|s, _| upstream::respond(s, "200 OK", "", b"ok"));
    let (e, _) = fails(short(), &up.url("/"), |h, u| {
        h.request(Method::Get, u)
            .header("X-Evil", "a\r\nHost: b")
            .send()
    });
    assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
    assert_eq!(e.phase(), Some(phase::REQUEST));
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 0);
}
