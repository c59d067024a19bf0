//! A request on a kept-alive connection allocates nothing in the server: its head is
//! parsed into the connection's buffers, its context is the connection's last one
//! renewed, the line kept for an error is copied into the box the connection keeps
//! for it, and a static body is
//! borrowed. Counted by `fiber_pool::testing::CountingAlloc`, over 2000
//! requests to a real server on port 0 from a client that itself allocates nothing
//! while it counts. Its own test binary: the count is the whole process's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fiber_pool::testing::{allocations, CountingAlloc};
use fiber_web::{App, Options, Request, Response};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const REQUEST: &[u8] = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";

/// Reads one answer to `REQUEST` (`len` bytes: every answer has the same length, the
/// `Date` being fixed-width) into `buf`, and says whether it is a 200.
fn answer(s: &mut TcpStream, buf: &mut [u8], len: usize) -> bool {
    s.write_all(REQUEST).unwrap();
    s.read_exact(&mut buf[..len]).unwrap();
    buf.starts_with(b"HTTP/1.1 200 ")
}

#[test]
fn a_kept_alive_request_allocates_nothing_in_the_server() {
    let options = Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        fibers: 4,
        threads: 1,
        access_log: false,
        // A deadline on every request: its context carries one too.
        request_timeout: Some(Duration::from_secs(30)),
        ..Options::default()
    };
    let serving = fiber_web::start(
        &options,
        |_| {},
        |_| {
            Ok::<_, std::convert::Infallible>(App::new(()).get("/hello", |_: &(), _: &Request| {
                Response::text(200, "Hello, World!")
            }))
        },
    )
    .unwrap();
    let mut s = TcpStream::connect(serving.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();

    // The first answer, read whole, gives the length of every answer.
    s.write_all(REQUEST).unwrap();
    let mut first = Vec::new();
    let mut buf = [0u8; 1024];
    let len = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the server closed: {}",
            String::from_utf8_lossy(&first)
        );
        first.extend_from_slice(&buf[..n]);
        if first.ends_with(b"Hello, World!") {
            break first.len();
        }
    };
    // Warm up: the connection's buffers and the pool's first runs.
    for _ in 0..200 {
        assert!(answer(&mut s, &mut buf, len));
    }

    const N: usize = 2000;
    let before = allocations();
    let mut ok = 0;
    for _ in 0..N {
        ok += usize::from(answer(&mut s, &mut buf, len));
    }
    let allocations = allocations() - before;
    assert_eq!(ok, N, "every request answered 200");
    eprintln!("{allocations} allocations for {N} requests");
    // Some background work (a sweeper tick, the Date's refresh) may allocate now and
    // then: a tenth of an allocation per request is the bound, about 2 before.
    assert!(
        allocations <= N / 10,
        "{allocations} allocations for {N} requests: a request allocates on its path"
    );
    drop(s);
    serving.shutdown(Duration::from_secs(5));
}
