//! Handlers that break the rules (examples/adversarial_app.rs, built on the public API
//! as a user would write it), each while `ab -c 50` runs on `/sleep?sleep=0.1` (a MySQL
//! `select sleep(0.1)`) against the same two worker processes behind a supervisor:
//!
//! - an overflow holding a `std::sync::Mutex`, and one inside a `LazyLock` initializer:
//!   a 500 that says state may be left behind; the next request to the route blocks its
//!   worker thread; the watchdog logs the stall and the supervisor replaces the worker;
//! - an overflow inside `println!`: the same, for a request that prints on the other
//!   thread (std's stdout lock is left held by the thread of the abandoned fiber; on
//!   that same thread the lock is reentrant, and `println!` panics: a 500);
//! - `std::thread::sleep(3 s)` and a 3 s CPU loop: answered; the stall is logged with
//!   its route, and past `--stall-limit` (2 s here) the worker is replaced.
//!
//! For each: ab's failures are at most the connections the replaced worker left
//! unfinished (its own log line counts them; 0 when no worker was stuck), the server
//! serves afterwards, and the log names the route and the cause. About a minute of CI.
//! For a longer check that it keeps serving after each case (the issue's 30 s), run:
//! `FIBERSTACK_ADVERSARIAL_SOAK=30 cargo nextest run --test adversarial`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::child::Served;
use common::tools::ab_count;

/// Longest the supervisor and its two workers may take to accept.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// `--stall-limit` of the app, in seconds: a 3 s hold passes it.
const STALL_LIMIT: &str = "2";
/// The load: 50 at once, going on after a receive error (a stuck worker's connections
/// are closed when it exits), 30 s at most per request.
const AB_LOAD: [&str; 7] = ["-c", "50", "-n", "1000", "-r", "-s", "30"];
/// How long the server must keep serving after each case (FIBERSTACK_ADVERSARIAL_SOAK
/// seconds when set).
const SOAK: Duration = Duration::from_secs(3);

/// One kept-alive connection: its requests all go to the same worker process.
struct Conn(TcpStream, Vec<u8>);

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        Conn(s, Vec::new())
    }

    /// `GET path`; `None` when the connection ends or `within` passes without an answer.
    fn get(&mut self, path: &str, within: Duration) -> Option<common::Resp> {
        self.0.set_read_timeout(Some(within)).unwrap();
        self.0
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .ok()?;
        let deadline = Instant::now() + within;
        loop {
            if let Some((resp, used)) = common::parse_one(&self.1) {
                self.1.drain(..used);
                return Some(resp);
            }
            if Instant::now() >= deadline {
                return None;
            }
            let mut buf = [0u8; 4096];
            match self.0.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.1.extend_from_slice(&buf[..n]),
            }
        }
    }
}

/// `/stats` over a fresh connection (5 s at most: it may land on a stuck thread).
fn stats(addr: SocketAddr) -> Option<serde_json::Value> {
    let r = Conn::open(addr).get("/stats", Duration::from_secs(5))?;
    assert_eq!(r.status, 200, "{}", r.body);
    Some(serde_json::from_str(&r.body).expect("/stats is JSON"))
}

fn pid(stats: &serde_json::Value) -> u32 {
    stats["worker"]["pid"].as_u64().expect("worker.pid") as u32
}

/// Poll `/stats` until an answer satisfies `until` (bounded); that answer.
fn poll_stats(
    addr: SocketAddr,
    what: &str,
    within: Duration,
    until: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = stats(addr) {
            if until(&s) {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "no {what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids of the two workers, from `/stats` answers (bounded).
fn worker_pids(addr: SocketAddr) -> std::collections::HashSet<u32> {
    common::tools::distinct_pids(2, || stats(addr).map(|s| pid(&s)))
}

/// The load on `/sleep?sleep=0.1`, on a thread.
fn ab(addr: SocketAddr) -> std::thread::JoinHandle<Output> {
    common::tools::ab_thread(&AB_LOAD, format!("http://{addr}/sleep?sleep=0.1"))
}

/// ab's lost requests. With `-r`, ab counts a request whose connection was reset as a
/// "Receive" failure and an "Exception", and then, as for one closed without an answer,
/// as a "Length" failure (0 bytes read, not the first response's length; see
/// `close_connection` in ab.c): each lost request is one "Length" failure. Its
/// breakdown line is printed only when some failed.
fn ab_lost(out: &str) -> u64 {
    if ab_count(out, "Failed requests:") == 0 {
        return 0;
    }
    let line = out
        .lines()
        .find(|l| l.contains("(Connect:"))
        .unwrap_or_else(|| panic!("no breakdown of the failures:\n{out}"));
    assert_eq!(ab_count(line, "Connect:"), 0, "{out}");
    let lost = ab_count(line, "Length:");
    assert!(ab_count(line, "Receive:") <= lost, "{out}");
    lost
}

/// `/sleep?sleep=0.1` answers 200, over fresh connections, for `soak` (each within 10 s).
fn serves_for(addr: SocketAddr, soak: Duration) {
    let until = Instant::now() + soak;
    while Instant::now() < until {
        let r = Conn::open(addr)
            .get("/sleep?sleep=0.1", Duration::from_secs(10))
            .expect("the server answers after the case");
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

/// What one case did.
struct Outcome {
    /// The stuck worker's unfinished connections, when one was replaced.
    unfinished: Option<u64>,
    /// ab's lost requests (see [`ab_lost`]).
    failed: u64,
    took: Duration,
}

/// How a case goes.
enum Kind {
    /// Overflows; then the next request to the route (with `?depth=1`: no overflow)
    /// blocks its thread on what the abandoned frames held when `must_hang`; else up
    /// to `tries` such requests each answer or block.
    Overflow { tries: usize, must_hang: bool },
    /// Holds its thread for 3 s, then answers 200.
    Holds,
}

fn run_case(serve: &mut Served, route: &str, kind: Kind, soak: Duration) -> Outcome {
    let addr = serve.addr;
    let start = Instant::now();
    let before = worker_pids(addr);
    let load = ab(addr);
    // Under load: requests of the sleep route in flight somewhere.
    poll_stats(addr, "load", Duration::from_secs(30), |s| {
        s["fibers"]["busy"].as_u64().unwrap_or(0) >= 5
    });
    let mut conn = Conn::open(addr);
    let who = conn
        .get("/stats", Duration::from_secs(10))
        .expect("/stats on the case's connection");
    let victim = pid(&serde_json::from_str(&who.body).unwrap());
    let replaced = match kind {
        Kind::Overflow { tries, must_hang } => {
            let r = conn
                .get(&format!("/{route}"), Duration::from_secs(30))
                .unwrap_or_else(|| panic!("/{route}: no answer"));
            assert_eq!(r.status, 500, "{}", r.body);
            assert!(
                r.body
                    .contains(&format!("fiber stack overflow in route {route}")),
                "{}",
                r.body
            );
            assert!(
                r.body.contains("may be left behind") && !r.body.contains("server is fine"),
                "the overflow struck in the handler's own code: {}",
                r.body
            );
            serve.wait_log(
                &[&format!("GET {route} -> 500"), "fiber stack overflow"],
                Duration::from_secs(10),
            );
            // A later request to the route blocks its thread: never answered, the
            // worker is replaced instead (its connection closes when the worker exits).
            let hung = (0..tries).any(|_| {
                match conn.get(&format!("/{route}?depth=1"), Duration::from_secs(60)) {
                    // Or, on the thread whose lock it is (std's stdout lock is
                    // reentrant), a panic: the RefCell inside is still borrowed.
                    Some(r) => {
                        assert!(
                            r.status == 200
                                || (r.status == 500 && r.body.contains("already borrowed")),
                            "{}",
                            r.body
                        );
                        false
                    }
                    None => true,
                }
            });
            assert!(
                hung || !must_hang,
                "none of {tries} requests to /{route} hung"
            );
            if hung {
                serve.wait_log(
                    &["stall: route", route, "lock left held"],
                    Duration::from_secs(10),
                );
            }
            hung
        }
        Kind::Holds => {
            let r = conn
                .get(&format!("/{route}"), Duration::from_secs(30))
                .unwrap_or_else(|| panic!("/{route}: no answer"));
            assert_eq!(r.status, 200, "{}", r.body);
            serve.wait_log(
                &[&format!("stall: route {route} has held its worker thread")],
                Duration::from_secs(10),
            );
            // Past --stall-limit: replaced; it finishes what it had, then exits.
            true
        }
    };
    let mut unfinished = None;
    if replaced {
        serve.wait_log(
            &[&format!("(pid {victim}) asked to be replaced"), route],
            Duration::from_secs(10),
        );
        let took_over = serve.wait_log(
            &[
                &format!("(pid {victim}) stops accepting"),
                "after its start",
            ],
            Duration::from_secs(30),
        );
        eprintln!("/{route}: {took_over}");
        serve.wait_log(
            &[&format!("(pid {victim})"), "after it was replaced"],
            Duration::from_secs(40),
        );
        let line = serve.wait_log(
            &[&format!("pid {victim} stopped;"), "connections unfinished"],
            Duration::from_secs(5),
        );
        unfinished = Some(ab_count(&line, "stopped;"));
        poll_stats(addr, "a new worker", Duration::from_secs(10), |s| {
            !before.contains(&pid(s))
        });
    }
    let out = load.join().unwrap();
    let text = common::tools::text(&out);
    assert!(out.status.success(), "ab failed:\n{text}");
    assert_eq!(ab_count(&text, "Complete requests:"), 1000, "{text}");
    assert!(!text.contains("refused"), "{text}");
    let failed = ab_lost(&text);
    // Only the stuck worker's requests may fail: those it left unfinished (one of
    // which is this case's own connection).
    let allowed = unfinished.map_or(0, |n| n.saturating_sub(u64::from(replaced)));
    assert!(
        failed <= allowed,
        "/{route}: ab lost {failed} requests; the stuck worker left {unfinished:?} \
         connections unfinished:\n{text}"
    );
    serves_for(addr, soak);
    Outcome {
        unfinished,
        failed,
        took: start.elapsed(),
    }
}

#[test]
fn adversarial_handlers_under_load_are_answered_contained_and_logged() {
    let soak = std::env::var("FIBERSTACK_ADVERSARIAL_SOAK")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(SOAK, Duration::from_secs);
    let mut cmd = Command::new(common::tools::example("adversarial_app"));
    cmd.args([
        "--bind",
        "127.0.0.1:0",
        "--processes",
        "2",
        "--stall-limit",
        STALL_LIMIT,
    ])
    .args(["--stall-warn", "0.1", "--fibers", "120", "--workers", "2"])
    .args(["--shutdown-grace", "5", "--access-log", "off"])
    .env("DATABASE_URL", common::database_url());
    let mut serve = Served::start(cmd, |line| line.contains("supervisor pid"), START_TIMEOUT);
    let cases = [
        (
            "mutex",
            Kind::Overflow {
                tries: 1,
                must_hang: true,
            },
        ),
        (
            "lazy",
            Kind::Overflow {
                tries: 1,
                must_hang: true,
            },
        ),
        // std's stdout lock is reentrant: a request on the thread that held it gets
        // in (and panics on the RefCell inside, still borrowed), one on the other
        // thread blocks. Which thread this connection's next request runs on is may's
        // choice: each outcome is checked, the hang only when it happens.
        (
            "print",
            Kind::Overflow {
                tries: 3,
                must_hang: false,
            },
        ),
        ("thread_sleep", Kind::Holds),
        ("busy", Kind::Holds),
    ];
    for (route, kind) in cases {
        let o = run_case(&mut serve, route, kind, soak);
        eprintln!(
            "/{route}: ab lost {} (stuck worker's unfinished connections: {:?}), case took \
             {} ms",
            o.failed,
            o.unfinished,
            o.took.as_millis()
        );
    }
    serve.signal("TERM");
    let (status, log) = serve.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status}: {log:?}");
}
