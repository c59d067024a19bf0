//! Graceful drain through fiber_web's public API, over a real socket: shutting a
//! server down stops it accepting, lets a request in flight finish and closes its
//! connection after the answer, and returns once it has; a request still running when
//! the grace ends is reported, not waited for.

mod serving;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// fiber_web's names, in one place.
use fiber_web::{App, Request};

use serving::{options, poll, read_reply, serve, Reply};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// A handler's progress, which the test steers: `entered` once it runs, and it answers
/// once `release` is set.
#[derive(Default)]
struct Gate {
    entered: AtomicBool,
    release: AtomicBool,
}

/// An app whose `/slow` holds its request until the gate is released (waiting on the
/// fiber, which parks, not on the thread).
fn held(gate: Arc<Gate>) -> App<Arc<Gate>> {
    App::new(gate).get("/slow", |gate: &Arc<Gate>, _: &Request| {
        gate.entered.store(true, Ordering::SeqCst);
        while !gate.release.load(Ordering::SeqCst) {
            fiber_pool::sleep(Duration::from_millis(1));
        }
        "finished"
    })
}

/// `GET /slow` on a kept-alive connection, on a thread: its answer, and whether the
/// server closed the connection after it.
fn slow_request(addr: SocketAddr) -> std::thread::JoinHandle<(Reply, bool)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    std::thread::spawn(move || {
        let reply = read_reply(&mut s);
        let closed = matches!(s.read(&mut [0u8; 1]), Ok(0));
        (reply, closed)
    })
}

#[test]
fn shutdown_stops_accepting_and_lets_the_request_in_flight_finish() {
    let gate = Arc::new(Gate::default());
    let serving = serve(&options(), held(Arc::clone(&gate)));
    let addr = serving.addr();
    let client = slow_request(addr);
    assert!(
        poll(|| gate.entered.load(Ordering::SeqCst)),
        "/slow never ran"
    );

    let shutdown = std::thread::spawn(move || serving.shutdown(Duration::from_secs(30)));
    assert!(
        poll(|| TcpStream::connect(addr).is_err()),
        "the server still accepts connections while it drains"
    );
    assert!(
        !shutdown.is_finished(),
        "the shutdown returned with a request in flight"
    );
    gate.release.store(true, Ordering::SeqCst);
    let drained = shutdown.join().unwrap();
    assert_eq!(drained.connections_left, 0, "{drained:?}");

    let (reply, closed) = client.join().unwrap();
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, "finished"),
        "{reply:?}"
    );
    // The connection's keep-alive was settled when the request arrived, before the
    // drain began, so the answer does not say `Connection: close`; the server closes
    // the connection once it is out.
    assert!(
        closed,
        "the connection stayed open after the drained answer"
    );
}

#[test]
fn a_request_still_running_when_the_grace_ends_is_reported_not_waited_for() {
    const GRACE: Duration = Duration::from_millis(300);
    let gate = Arc::new(Gate::default());
    let serving = serve(&options(), held(Arc::clone(&gate)));
    let client = slow_request(serving.addr());
    assert!(
        poll(|| gate.entered.load(Ordering::SeqCst)),
        "/slow never ran"
    );

    let started = Instant::now();
    let drained = serving.shutdown(GRACE);
    let took = started.elapsed();
    assert_eq!(drained.connections_left, 1, "{drained:?}");
    assert!(
        took >= GRACE && took < GRACE + Duration::from_secs(5),
        "shutdown took {took:?} with a grace of {GRACE:?}"
    );
    // The request was left running, not cut off: released, it still answers.
    gate.release.store(true, Ordering::SeqCst);
    let (reply, _) = client.join().unwrap();
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, "finished"),
        "{reply:?}"
    );
}
