//! A worker that a stack overflow left suspect takes no more work
//! (fiber_web/src/suspect.rs), served as a user starts examples/adversarial_app.rs:
//! `--bind` alone, one worker under the default supervisor.
//!
//! - Its 500 says `Connection: close` and the connection closes; an idle kept-alive
//!   connection to it closes at once too.
//! - The same route's harmless form, sent at once on a new connection, is answered
//!   within a second by the replacement: after a std `Mutex`, a `may::sync::Mutex` and a
//!   fan-out child left held, 200; after a `LazyLock` whose initializer overflows, 500
//!   (its harmless form overflows there too).
//! - A flood of 200 overflows at `ab -c 4`: every request is answered (a 500, or a 503
//!   with `Retry-After` from a suspect worker or from the supervisor while no worker
//!   accepts), but for those whose handlers ran beside an overflow and hang on what it
//!   left, which the replaced workers' log lines count; and the replacements stay
//!   within the supervisor's rate bound.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::child::Served;
use common::tools::ab_count;

/// Longest the supervisor and its worker may take to accept.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// The acceptance: the harmless form is answered within this.
const HARMLESS_WITHIN: Duration = Duration::from_secs(1);
/// Longest a closed connection may take to read as closed.
const CLOSED_WITHIN: Duration = Duration::from_secs(1);
/// The supervisor's rate bound (fiber_web/src/supervisor/process.rs): this many
/// replacements asked for start at once...
const REPLACE_BURST: u64 = 5;
/// ... and one more each time the oldest leaves a window of this many seconds.
const REPLACE_WINDOW_SECS: u64 = 5;
/// The suspect workers' grace in the flood: the requests that hang there end with it.
const FLOOD_GRACE: &str = "2";

/// One kept-alive connection.
struct Conn(TcpStream, Vec<u8>);

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        Conn(
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap(),
            Vec::new(),
        )
    }

    /// `GET path`; `None` when the connection ends or `within` passes without an answer.
    fn get(&mut self, path: &str, within: Duration) -> Option<common::Resp> {
        self.0
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .ok()?;
        let deadline = Instant::now() + within;
        loop {
            if let Some((resp, used)) = common::parse_one(&self.1) {
                self.1.drain(..used);
                return Some(resp);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            self.0
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .ok()?;
            let mut buf = [0u8; 4096];
            match self.0.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.1.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Whether the server closes this connection within `within` (a read returns its
    /// end, or a reset).
    fn closed_within(&mut self, within: Duration) -> bool {
        self.0.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 64];
        match self.0.read(&mut buf) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }
}

/// The pid of the worker that answers `/stats` on `conn`.
fn pid(conn: &mut Conn) -> u32 {
    let r = conn.get("/stats", Duration::from_secs(10)).expect("/stats");
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v["worker"]["pid"].as_u64().expect("worker.pid") as u32
}

fn serve(extra: &[&str]) -> Served {
    let mut cmd = Command::new(common::tools::example("adversarial_app"));
    cmd.args(["--bind", "127.0.0.1:0"])
        .args(extra)
        .env("DATABASE_URL", common::database_url());
    Served::start(cmd, |line| line.contains("supervisor pid"), START_TIMEOUT)
}

#[test]
fn the_harmless_form_sent_at_once_after_a_suspect_overflow_is_answered_within_a_second() {
    let mut serve = serve(&[]);
    let addr = serve.addr;
    for (route, harmless_status) in [
        ("mutex", 200),
        ("may_mutex", 200),
        ("lazy", 500),
        ("scope", 200),
    ] {
        let mut idle = Conn::open(addr);
        let mut conn = Conn::open(addr);
        let victim = pid(&mut conn);
        assert_eq!(pid(&mut idle), victim, "one worker serves");
        let hostile = conn
            .get(&format!("/{route}"), Duration::from_secs(30))
            .unwrap_or_else(|| panic!("/{route}: no answer"));
        let sent = Instant::now();
        assert_eq!(hostile.status, 500, "{}", hostile.body);
        assert_eq!(
            hostile.header("Connection"),
            Some("close"),
            "/{route}: {:?}",
            hostile.headers
        );
        let harmless = Conn::open(addr)
            .get(&format!("/{route}?depth=1"), HARMLESS_WITHIN)
            .unwrap_or_else(|| panic!("/{route}?depth=1: no answer within {HARMLESS_WITHIN:?}"));
        let took = sent.elapsed();
        eprintln!(
            "/{route}?depth=1 after the overflow: {} in {took:?}",
            harmless.status
        );
        assert_eq!(harmless.status, harmless_status, "{}", harmless.body);
        assert!(took <= HARMLESS_WITHIN, "{took:?}");
        // The suspect worker closed both its connections: the one it answered, and the
        // one that idled.
        assert!(conn.closed_within(CLOSED_WITHIN), "/{route}: kept open");
        assert!(
            idle.closed_within(CLOSED_WITHIN),
            "/{route}: idle one kept open"
        );
        let now = pid(&mut Conn::open(addr));
        assert_ne!(now, victim, "/{route}: the suspect worker still answers");
        serve.wait_log(
            &[&format!("(pid {victim}) is suspect, has stopped accepting")],
            Duration::from_secs(10),
        );
    }
    serve.signal("TERM");
    let (status, log) = serve.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status}: {log:?}");
}

#[test]
fn a_flood_of_suspect_overflows_is_answered_and_its_replacements_are_rate_bounded() {
    let mut serve = serve(&["--shutdown-grace", FLOOD_GRACE]);
    let addr = serve.addr;
    let started = Instant::now();
    common::tools::require("ab", "-V", "apache2-utils");
    let out = Command::new("ab")
        .args(["-c", "4", "-n", "200", "-l", "-r", "-s", "30"])
        .arg(format!("http://{addr}/mutex"))
        .output()
        .expect("ab runs");
    let took = started.elapsed();
    let text = common::tools::text(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(ab_count(&text, "Complete requests:"), 200, "{text}");
    // Every answer is a 500 (an overflow) or a 503 (a worker or the supervisor saying
    // to retry), none a 2xx: what ab counts as neither got no answer. (With `-r` ab
    // counts one such request as a receive failure and an exception both.)
    let failed = 200 - ab_count(&text, "Non-2xx responses:");
    serve.signal("TERM");
    let (status, rest) = serve.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    let log: Vec<String> = serve.log.iter().cloned().chain(rest).collect();
    // What was lost: only requests a replaced worker left unfinished.
    let unfinished: u64 = log
        .iter()
        .filter(|l| l.contains("connections unfinished after the grace period"))
        .map(|l| ab_count(l, "stopped;"))
        .sum();
    let replacements = log
        .iter()
        .filter(|l| l.contains("supervisor: started worker 1 generation"))
        .count() as u64
        - 1;
    let refused = log
        .iter()
        .filter(|l| l.contains("answers the port itself"))
        .count();
    eprintln!(
        "flood in {took:?}: {failed} unanswered of 200, {unfinished} left unfinished by \
         replaced workers, {replacements} replacements, the supervisor answered the port \
         {refused} times"
    );
    assert!(
        failed <= unfinished,
        "{failed} > {unfinished}:\n{text}\n{}",
        log.join("\n")
    );
    let bound = REPLACE_BURST + took.as_secs() * REPLACE_BURST / REPLACE_WINDOW_SECS + 1;
    assert!(
        replacements <= bound,
        "{replacements} > {bound}:\n{}",
        log.join("\n")
    );
}
