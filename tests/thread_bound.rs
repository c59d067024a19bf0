//! A handler's fiber never changes OS thread: examples/thread_bound.rs, started as a
//! user starts it, holds the thread's id, a thread-local `RefCell` borrow, an `Rc` into
//! a thread-local, a `rand::thread_rng()` and an entered `tracing` span across each
//! kind of wait (a sleep, a sleep that can be cancelled, a MySQL query, a transaction,
//! a checkout that times out, an HTTP call, a scope child's join, a blocking call, a
//! wait the route's deadline ends, a route's turn, the fiber queue, a client that
//! leaves), and answers 500 when any of them was another thread's after the wait. Under
//! `ab -c 64`, in the default configuration and with each `--threads` and
//! `--processes` the docs allow, every answer is a 200.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::child::Served;
use common::tools::{ab, ab_count, text};

const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest one ab run may take (the slowest, the limited route one at a time, takes
/// about a second).
const AB_TIMEOUT: Duration = Duration::from_secs(120);

/// The example with `args` after `--bind 127.0.0.1:0 --access-log off`.
fn start(args: &[&str]) -> Served {
    let mut cmd = Command::new(common::tools::example("thread_bound"));
    cmd.args(["--bind", "127.0.0.1:0", "--access-log", "off"])
        .args(args)
        .env("DATABASE_URL", common::database_url());
    Served::start(cmd, |line| line.contains("http://"), START_TIMEOUT)
}

/// `ab -c c -n n` on `path`: panics unless all `n` were answered 200.
fn all_held(addr: SocketAddr, path: &str, c: usize, n: usize) {
    let out = ab(c, n, &format!("http://{addr}{path}")).output_within(AB_TIMEOUT);
    let out = text(&out);
    let complete = ab_count(&out, "Complete requests:");
    let failed = ab_count(&out, "Failed requests:");
    // ab prints the line only when some were.
    let non_2xx = if out.contains("Non-2xx responses:") {
        ab_count(&out, "Non-2xx responses:")
    } else {
        0
    };
    assert!(
        complete == n as u64 && failed == 0 && non_2xx == 0,
        "{path}: {complete} of {n} complete, {failed} failed, {non_2xx} not 200 \
         (a 500 says which value was another thread's):\n{out}"
    );
}

/// This process's `/report`.
fn report(addr: SocketAddr) -> serde_json::Value {
    let r = common::get(addr, "/report");
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str(&r.body).unwrap()
}

/// Every wait but the client's leaving, at `-c 64`: the requests it made.
fn every_wait(addr: SocketAddr) -> u64 {
    let mut made = 0;
    for (path, n) in [
        ("/hold?wait=sleep", 2000),
        ("/hold?wait=sleep_or_cancelled", 1000),
        ("/hold?wait=query", 1000),
        ("/hold?wait=transaction", 500),
        ("/hold?wait=checkout_timeout", 500),
        ("/hold?wait=http", 500),
        ("/hold?wait=scope", 1000),
        ("/hold?wait=blocking", 1000),
        ("/deadline?wait=deadline", 300),
        ("/limited?wait=limited", 200),
    ] {
        all_held(addr, path, 64, n);
        made += n as u64;
    }
    made
}

#[test]
fn in_the_default_configuration_no_request_resumes_on_another_thread() {
    let server = start(&[]);
    // The acceptance figure: 20,000 sleeps at 64 at once.
    all_held(server.addr, "/hold?wait=sleep", 64, 20_000);
    let made = 20_000 + every_wait(server.addr);
    let r = report(server.addr);
    assert_eq!(r["moved"], 0, "{r}");
    assert_eq!(r["wrong"], 0, "{r}");
    assert_eq!(r["held"].as_u64(), Some(made), "{r}");
}

#[test]
fn a_request_queued_for_a_fiber_holds_its_values_across_its_waits() {
    // 4 fibers for 64 clients: most requests wait in the fiber queue first.
    let server = start(&["--fibers", "4", "--queue", "1024"]);
    all_held(server.addr, "/hold?wait=sleep", 64, 2000);
    all_held(server.addr, "/hold?wait=query", 64, 500);
    assert_eq!(report(server.addr)["moved"], 0);
}

#[test]
fn a_request_whose_client_leaves_ends_on_its_own_thread() {
    let server = start(&[]);
    let clients = 20;
    let mut open: Vec<TcpStream> = (0..clients)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            s.write_all(b"GET /hold?wait=gone HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    // Wait until every one is in its handler (its 10 s sleep), then leave.
    common::wait_until("20 handlers sleeping", Duration::from_secs(20), || {
        report(server.addr)["waiting_to_be_left"].as_u64().unwrap() >= clients as u64
    });
    let left = Instant::now();
    open.clear();
    common::wait_until("20 cancelled handlers", Duration::from_secs(5), || {
        report(server.addr)["gone"].as_u64().unwrap() >= clients as u64
    });
    assert!(left.elapsed() < Duration::from_secs(5));
    let r = report(server.addr);
    assert_eq!(r["moved"], 0, "{r}");
    assert_eq!(r["wrong"], 0, "{r}");
}

#[test]
fn every_threads_and_processes_setting_keeps_each_request_on_its_thread() {
    for processes in ["1", "2"] {
        for threads in ["1", "2", "4"] {
            let server = start(&["--threads", threads, "--processes", processes]);
            for (path, n) in [
                ("/hold?wait=sleep", 2000),
                ("/hold?wait=query", 500),
                ("/hold?wait=http", 300),
                ("/hold?wait=scope", 500),
                ("/deadline?wait=deadline", 300),
            ] {
                all_held(server.addr, path, 64, n);
            }
        }
    }
}
