//! `fiberstack serve --processes N` as a user runs it, against its own private MariaDB,
//! with plain `ab` as the load: a worker killed with `kill -9` (only its own in-flight
//! requests may fail, no connection is refused, a replacement answers soon), a rolling
//! restart on SIGHUP (no failed request), a worker replaced past `--overflow-limit`
//! (no failed request), a worker killed while MySQL is down (replaced at once, not
//! ready until MySQL is back), SIGTERM (every worker, then MariaDB, exit 0),
//! the default without a supervisor, systemd's socket activation, and the supervisor's
//! start-up errors, each naming its flag. About 40 s of CI time, mostly the two `ab`
//! runs (5000 requests of 0.1 s at 100 at once: 5 s each at best).

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::child::{alive, Served};
use common::tools::ab_count;

const BIN: &str = env!("CARGO_BIN_EXE_fiberstack");
/// Longest a start (MariaDB and the workers) may take on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// The load of the issue's acceptance runs. `-r`: go on after a receive error (a
/// killed worker's connection reset), instead of aborting. A connection the dead
/// worker's kernel closed with a FIN instead reads as an empty response: ab counts it
/// as a "Length" failure (every body is compared with the first one), which is why
/// `-l` must not be given.
const AB_LOAD: [&str; 5] = ["-c", "100", "-n", "5000", "-r"];

/// `fiberstack serve` (through `cmd`: the binary, or a wrapper that runs it) with
/// test-sized pools plus `args`, once it prints its start-up line (for a supervisor:
/// once every worker accepts; its workers print their own lines first).
fn serve_with(mut cmd: Command, args: &[&str]) -> Served {
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--fibers",
        "120",
        "--db-pool",
        "60",
        "--threads",
        "2",
        "--shutdown-grace",
        "10",
    ])
    .args(args)
    .env_remove("DATABASE_URL");
    // Supervised unless told otherwise: then wait for the supervisor's line, which
    // comes once every worker accepts.
    let unsupervised = args.windows(2).any(|w| w == ["--supervisor", "off"]);
    Served::start(
        cmd,
        move |line| unsupervised || line.contains("supervisor pid"),
        START_TIMEOUT,
    )
}

fn serve(args: &[&str]) -> Served {
    serve_with(Command::new(BIN), args)
}

/// `GET path` over a fresh connection: status and body (10 s at most).
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.get(9..12)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// What `/stats` says about the process that answered.
#[derive(Debug, Clone, Copy)]
struct Answer {
    pid: u32,
    /// Requests running or waiting for a fiber there.
    in_flight: u64,
    /// Its open connections, less the one asking: every request ab has in flight there
    /// (one connection each), those not yet handed to a fiber included.
    open: u64,
    /// `/widgets` requests it ran (ab's; the test's own `/stats` requests also run on
    /// fibers and are not counted).
    completed: u64,
    /// Stack overflows it caught.
    overflows: u64,
    /// When the `/stats` request that this answers was sent: the counts are of a moment
    /// between then and the answer's arrival.
    asked: Instant,
}

fn stats(addr: SocketAddr) -> Option<Answer> {
    let asked = Instant::now();
    let (status, body) = get(addr, "/stats")?;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("/stats is JSON");
    Some(Answer {
        pid: v["worker"]["pid"].as_u64().expect("worker.pid") as u32,
        in_flight: v["fibers"]["busy"].as_u64().unwrap_or(0)
            + v["fibers"]["queued"].as_u64().unwrap_or(0),
        open: v["http_server"]["open_connections"]
            .as_u64()
            .expect("http_server.open_connections")
            .saturating_sub(1),
        completed: v["fibers"]["routes"]["widgets"]["runs"]
            .as_u64()
            .unwrap_or(0),
        overflows: v["fibers"]["aftermath"]["abandoned"]
            .as_u64()
            .expect("fibers.aftermath.abandoned"),
        asked,
    })
}

/// Poll `/stats` until `until` holds for an answer (bounded); that answer.
fn poll_stats(addr: SocketAddr, within: Duration, until: impl Fn(&Answer) -> bool) -> Answer {
    let deadline = Instant::now() + within;
    loop {
        if let Some(a) = stats(addr) {
            if until(&a) {
                return a;
            }
        }
        assert!(
            Instant::now() < deadline,
            "/stats never answered as wanted within {within:?}"
        );
    }
}

/// The answer of a worker under ab's full load: 100 at once over two workers, about 50
/// each once ab has ramped up, and many responses done (ab takes the first one's length
/// as the reference, and a failure counted before the second would replace it).
fn under_full_load(addr: SocketAddr) -> Answer {
    poll_stats(addr, Duration::from_secs(30), |a| {
        a.in_flight >= 30 && a.completed >= 100
    })
}

/// The pids of the workers, from `/stats` answers (both of two, bounded).
fn worker_pids(addr: SocketAddr, n: usize) -> HashSet<u32> {
    common::tools::distinct_pids(n, || stats(addr).map(|a| a.pid))
}

/// `ab` with the acceptance load on `/widgets?sleep=0.1`, on a thread.
fn ab(addr: SocketAddr) -> std::thread::JoinHandle<Output> {
    common::tools::ab_thread(&AB_LOAD, format!("http://{addr}/widgets?sleep=0.1"))
}

/// ab's output once it ended, all 5000 requests done (failed ones included).
fn finished(load: std::thread::JoinHandle<Output>) -> String {
    let out = load.join().unwrap();
    let text = common::tools::text(&out);
    assert!(out.status.success(), "ab failed:\n{text}");
    assert_eq!(ab_count(&text, "Complete requests:"), 5000, "{text}");
    text
}

/// SIGTERM, then a clean exit.
fn stop(mut serve: Served) {
    serve.signal("TERM");
    let (status, log) = serve.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}: {log:?}");
}

/// ab's failures by kind: (connect, receive, length); its breakdown line is printed
/// only when some failed.
fn ab_failures(out: &str) -> (u64, u64, u64) {
    if ab_count(out, "Failed requests:") == 0 {
        return (0, 0, 0);
    }
    let line = out
        .lines()
        .find(|l| l.contains("(Connect:"))
        .unwrap_or_else(|| panic!("no breakdown of the failures:\n{out}"));
    (
        ab_count(line, "Connect:"),
        ab_count(line, "Receive:"),
        ab_count(line, "Length:"),
    )
}

fn kill9(pid: u32) {
    let ok = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// `kill -SEGV` of a worker from the same user is not a fault of a fiber: it is not taken
/// for an overflow (the worker is not replaced, no overflow is counted, the stderr line
/// names the sender), and the next real overflow is still a 500 for that request alone.
#[test]
fn a_sigsegv_sent_to_a_worker_is_not_an_overflow_and_the_next_overflow_is_still_caught() {
    let mut serve = serve(&[]);
    let addr = serve.addr;
    let before = poll_stats(addr, Duration::from_secs(10), |_| true);
    for _ in 0..3 {
        let sent = Command::new("kill")
            .args(["-SEGV", &before.pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }
    serve.wait_log(&["SIGSEGV", "sent by pid"], Duration::from_secs(10));
    let after = poll_stats(addr, Duration::from_secs(10), |_| true);
    assert_eq!(after.pid, before.pid, "the worker was replaced");
    assert_eq!(after.overflows, before.overflows, "taken for an overflow");
    let (status, body) = get(addr, "/deep?depth=3000&frame=1024").expect("an answer to /deep");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("overflow"), "{body}");
    assert_eq!(get(addr, "/hello").map(|r| r.0), Some(200));
    let last = poll_stats(addr, Duration::from_secs(10), |a| {
        a.overflows > before.overflows
    });
    assert_eq!(last.overflows, before.overflows + 1);
}

#[test]
fn a_killed_worker_is_replaced_and_only_its_requests_fail() {
    let mut serve = serve(&["--processes", "2"]);
    let addr = serve.addr;
    let first = worker_pids(addr, 2);
    let load = ab(addr);
    // Kill a worker just after it said how many requests it has in flight. Its count
    // is of a moment after the `/stats` request was sent: on a loaded machine the
    // answer takes tens of ms to come back, and requests arrive meanwhile.
    let victim = under_full_load(addr);
    let looked = victim.asked;
    kill9(victim.pid);
    let killed_at = Instant::now();
    let replacement = poll_stats(addr, Duration::from_secs(10), |a| !first.contains(&a.pid));
    let took = killed_at.elapsed();
    let text = finished(load);
    assert!(!text.contains("refused"), "{text}");
    // A request lost with the worker fails once: as a receive error (a reset, which ab
    // counts once more as an "exception"), or as an empty response ("Length").
    let (connect, received, length) = ab_failures(&text);
    assert_eq!(connect, 0, "{text}");
    let failed = received + length;
    // The count moved between the `/stats` request and the kill: ab's 100 clients on a 0.1 s route
    // start at most 1000 requests a second, and the victim may have taken any of those
    // that arrived meanwhile (`kill` is a process of its own: tens of ms on a loaded
    // machine), plus a margin of 20.
    let gap = killed_at - looked;
    let arrived = (gap.as_secs_f64() * 1000.0).ceil() as u64;
    assert!(
        failed <= victim.open + arrived + 20,
        "{failed} failed, but only {} were in flight on the killed worker and {arrived} \
         more could arrive in the {} ms from the `/stats` request to the kill:\n{text}",
        victim.open,
        gap.as_millis()
    );
    let line = serve.wait_log(
        &[
            &format!("(pid {})", victim.pid),
            "was killed (SIGKILL)",
            "replacing it",
        ],
        Duration::from_secs(5),
    );
    eprintln!(
        "killed pid {} with {} connections open: {failed} failed; pid {} answered {} ms \
         after the kill\n  {line}",
        victim.pid,
        victim.open,
        replacement.pid,
        took.as_millis()
    );
    assert!(
        took < Duration::from_secs(3),
        "the replacement answered {took:?} after the kill (1 s is the aim; 3 s on a \
         loaded 2-core machine)"
    );
    stop(serve);
}

#[test]
fn sighup_restarts_every_worker_without_a_failed_request() {
    let mut serve = serve(&["--processes", "2"]);
    let addr = serve.addr;
    let first = worker_pids(addr, 2);
    let load = ab(addr);
    under_full_load(addr);
    serve.signal("HUP");
    for old in &first {
        serve.wait_log(
            &[&format!("(pid {old})"), "after it was replaced"],
            Duration::from_secs(30),
        );
    }
    let now = worker_pids(addr, 2);
    assert!(now.is_disjoint(&first), "old {first:?}, now {now:?}");
    let text = finished(load);
    assert_eq!(ab_count(&text, "Failed requests:"), 0, "{text}");
    stop(serve);
}

/// Caught stack overflows past `--overflow-limit`: the worker asks to be replaced (each
/// overflow left its abandoned frames' heap behind), the supervisor replaces it in the
/// order of a rolling restart, and the load on the other routes loses nothing (a worker
/// an overflow left suspect refuses, with a 503, what it had not started).
#[test]
fn overflows_past_the_limit_replace_the_worker_and_every_request_is_answered() {
    const LIMIT: u64 = 10;
    let mut serve = serve(&["--processes", "2", "--overflow-limit", &LIMIT.to_string()]);
    let addr = serve.addr;
    let first = worker_pids(addr, 2);
    let load = ab(addr);
    under_full_load(addr);
    // Each worker takes about half; 4 * LIMIT brings at least one past the limit.
    for _ in 0..4 * LIMIT {
        let (status, body) = get(addr, "/deep?depth=3000&frame=1024").expect("/deep answers");
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("stack overflow"), "{body}");
    }
    let asked = serve.wait_log(
        &[
            "asked to be replaced",
            &format!("(--overflow-limit {LIMIT})"),
        ],
        Duration::from_secs(30),
    );
    serve.wait_log(&["after it was replaced"], Duration::from_secs(30));
    let fresh = poll_stats(addr, Duration::from_secs(10), |a| !first.contains(&a.pid));
    assert!(
        fresh.overflows < LIMIT,
        "a fresh worker starts its own count: {fresh:?}"
    );
    let text = finished(load);
    // Every request is answered. One of the overflows may strike outside a safe point
    // (inside an allocation, say): its worker is then suspect and answers the requests
    // it had read but not started with a 503 and Retry-After (fiber_web's suspect.rs),
    // which ab counts as failed by length; nothing else may fail.
    let (connect, receive, _) = ab_failures(&text);
    assert_eq!((connect, receive), (0, 0), "{text}");
    let failed = ab_count(&text, "Failed requests:");
    if failed > 0 {
        let answered = ab_count(&text, "Non-2xx responses:");
        assert_eq!(failed, answered, "every failure is an answer: {text}");
        assert!(failed < 250, "{text}");
    }
    eprintln!(
        "{asked}\n  pid {} serves in its place ({} overflows so far)",
        fresh.pid, fresh.overflows
    );
    stop(serve);
}

#[test]
fn sigterm_finishes_requests_stops_every_worker_then_mariadb_and_exits_0() {
    let mut serve = serve(&["--processes", "2"]);
    let addr = serve.addr;
    let workers = worker_pids(addr, 2);
    let mariadb = serve.mariadb_pid();
    assert!(alive(mariadb));
    let slow = std::thread::spawn(move || get(addr, "/widgets?sleep=1"));
    poll_stats(addr, Duration::from_secs(10), |a| a.in_flight >= 1);
    serve.signal("TERM");
    let (status, log) = serve.wait_exit(Duration::from_secs(30));
    let log = log.join("\n");
    assert!(!alive(mariadb), "MariaDB still runs:\n{log}");
    assert!(
        workers.iter().all(|&w| !alive(w)),
        "a worker still runs:\n{log}"
    );
    // Who went when, from the supervisor's log (polling pids cannot order two exits a
    // few milliseconds apart): every worker exited before MariaDB was stopped.
    let stopping_db = log
        .find("stopping MariaDB")
        .unwrap_or_else(|| panic!("no line about stopping MariaDB:\n{log}"));
    for w in &workers {
        let exited = log
            .find(&format!("(pid {w}) exited"))
            .unwrap_or_else(|| panic!("no line about worker {w} exiting:\n{log}"));
        assert!(
            exited < stopping_db,
            "MariaDB stopped while worker {w} ran:\n{log}"
        );
    }
    assert!(status.success(), "{status}");
    assert_eq!(
        slow.join().unwrap(),
        Some((200, "Oh hai".to_string())),
        "the request in flight at SIGTERM was not finished"
    );
    assert!(workers.iter().all(|&w| !alive(w)));
    assert!(log.contains("every worker has stopped"), "{log}");
}

#[test]
fn by_default_a_supervisor_runs_one_worker() {
    let mut serve = serve(&[]);
    let a = stats(serve.addr).expect("/stats");
    assert_ne!(
        a.pid,
        serve.child.id(),
        "a worker answers, not the supervisor"
    );
    let (_, body) = get(serve.addr, "/stats").unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["worker"]["id"], 1, "{body}");
    assert_eq!(v["worker"]["supervisor_pid"], serve.child.id(), "{body}");
    assert!(
        serve.banner.contains("1 worker processes"),
        "{}",
        serve.banner
    );
    serve.signal("TERM");
    let (status, log) = serve.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    // The worker says why it stops as the supervisor heard it.
    assert!(
        log.iter()
            .any(|l| l.contains("fiberstack: got SIGTERM: finishing")),
        "{log:?}"
    );
}

#[test]
fn with_the_supervisor_off_one_process_serves_and_says_what_it_loses() {
    let mut serve = serve(&["--supervisor", "off"]);
    let a = stats(serve.addr).expect("/stats");
    assert_eq!(a.pid, serve.child.id(), "the serve process itself answers");
    let (_, body) = get(serve.addr, "/stats").unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["worker"]["id"].is_null(), "{body}");
    assert!(!serve.banner.contains("supervisor"), "{}", serve.banner);
    let said = serve.wait_log(
        &["no supervisor (--supervisor off)"],
        Duration::from_secs(5),
    );
    assert!(said.contains("cannot be replaced"), "{said}");
    serve.signal("TERM");
    let (status, _) = serve.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}");
}

#[test]
fn systemd_socket_activation_serves_on_the_socket_it_passes() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // systemd-socket-activate starts the program at the first connection: make one
    // (retrying until it listens), answered once the server runs.
    let first = std::thread::spawn(move || {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(answer) = get(addr, "/widgets?sleep=0") {
                return answer.0;
            }
            assert!(Instant::now() < deadline, "{addr} never answered");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    common::tools::require("systemd-socket-activate", "--version", "systemd");
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.args(["-l", &addr.to_string(), BIN]);
    let serve = serve_with(cmd, &[]);
    assert_eq!(first.join().unwrap(), 200);
    // Our --bind said port 0: the address served is the inherited socket's.
    assert_eq!(serve.addr.port(), port, "{}", serve.banner);
    assert_eq!(get(serve.addr, "/widgets?sleep=0").map(|r| r.0), Some(200));
    stop(serve);
}

/// Runs `serve` with `args` to its end (it must fail at start-up); its stderr.
fn start_error(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("serve")
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("FIBERSTACK_PROCESSES")
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_supervisors_start_up_errors_name_their_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = start_error(&["--processes", "2", "--bind", &addr]);
    assert!(
        err.contains("already in use") && err.contains("--bind"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    for bad in ["0", "1000"] {
        let err = start_error(&["--processes", bad]);
        assert!(err.contains("--processes"), "{err}");
    }

    let err = start_error(&[
        "--processes",
        "2",
        "--bind",
        "127.0.0.1:0",
        "--mariadbd",
        "/nonexistent/mariadbd",
    ]);
    assert!(
        err.contains("--mariadbd") && err.contains("/nonexistent/mariadbd"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn an_app_on_the_library_gets_the_supervisor_the_example_shows() {
    let mut cmd = Command::new(common::tools::example("minimal_server"));
    cmd.args(["--bind", "127.0.0.1:0", "--processes", "2"]);
    let mut serve = Served::start(cmd, |line| line.contains("supervisor pid"), START_TIMEOUT);
    let hello = |addr| get(addr, "/hello?name=workers");
    assert_eq!(hello(serve.addr), Some((200, "Hello, workers!\n".into())));
    // kill -9 a worker: the supervisor replaces it, and the port keeps answering.
    let started = serve.wait_log(&["started worker 1 generation 0"], Duration::from_secs(5));
    let pid: u32 = started
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {started:?}"));
    kill9(pid);
    serve.wait_log(
        &["worker 1 generation 1", "accepts"],
        Duration::from_secs(30),
    );
    for _ in 0..10 {
        assert_eq!(hello(serve.addr), Some((200, "Hello, workers!\n".into())));
    }
    stop(serve);
}

/// `serve | head -1`, or a reader that took the start-up line and left: the
/// supervisor and its worker print their lines into a closed pipe (EPIPE), and go on
/// serving, the private MariaDB with them.
#[test]
fn a_server_whose_stdout_is_closed_keeps_serving() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // every write to stdout now fails with EPIPE
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--bind",
            &addr.to_string(),
            "--fibers",
            "8",
            "--db-pool",
            "4",
        ])
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let answered = |path: &str| get(addr, path).is_some_and(|(status, _)| status == 200);
    let up = common::poll(START_TIMEOUT, || answered("/widgets?sleep=0"));
    assert!(up, "no answer within {START_TIMEOUT:?}");
    // The supervisor prints its line once its worker accepts: for two seconds after
    // that, it must stay, and MySQL must go on answering.
    let exited = common::poll(Duration::from_secs(2), || {
        child.try_wait().unwrap().is_some() || !answered("/widgets?sleep=0")
    });
    assert!(
        !exited,
        "the supervisor exited, or MySQL went, on a closed stdout"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A worker killed while MySQL is down is replaced at once: the replacement serves, not
/// ready (its pool opens no connection until MySQL is back), and is ready once MySQL
/// returns. Before, the replacement exited at start-up (its pool could not open) and
/// the supervisor kept restarting it: with one process, nothing answered the port for
/// the whole outage. The MariaDB is `fiberstack mariadb --control`, which the test
/// takes down and brings back, its URL given by the environment.
#[test]
fn a_worker_killed_while_mysql_is_down_is_replaced_and_serves_not_ready() {
    use std::io::{BufRead, BufReader};
    let mut mariadb = Command::new(BIN)
        .args(["mariadb", "--control", "--max-connections", "60"])
        .env_remove("DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut control = mariadb.stdin.take().unwrap();
    let (tx, said) = std::sync::mpsc::channel();
    let stdout = mariadb.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || {
        said.recv_timeout(START_TIMEOUT)
            .expect("fiberstack mariadb said nothing")
    };
    let url = next();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--fibers",
        "20",
        "--db-pool",
        "5",
    ])
    .args([
        "--threads",
        "1",
        "--processes",
        "1",
        "--shutdown-grace",
        "5",
    ])
    .env("DATABASE_URL", &url);
    let serve = Served::start(cmd, |line| line.contains("supervisor pid"), START_TIMEOUT);
    let addr = serve.addr;
    let first = poll_stats(addr, Duration::from_secs(10), |_| true);
    assert_eq!(get(addr, "/readyz").map(|(s, _)| s), Some(200));

    writeln!(control, "kill").unwrap();
    assert_eq!(next(), "stopped");
    kill9(first.pid);
    // Within a few seconds (the first restart is immediate), not after the outage.
    let replacement = poll_stats(addr, Duration::from_secs(10), |a| a.pid != first.pid);
    assert_ne!(replacement.pid, first.pid);
    assert_eq!(
        get(addr, "/readyz").map(|(s, _)| s),
        Some(503),
        "not ready without MySQL"
    );

    writeln!(control, "start").unwrap();
    assert!(next().starts_with("started "));
    let deadline = Instant::now() + Duration::from_secs(15);
    while get(addr, "/readyz").map(|(s, _)| s) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "never ready after MySQL came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(addr, "/widgets?sleep=0").map(|(s, _)| s), Some(200));
    assert_eq!(stats(addr).map(|a| a.pid), Some(replacement.pid));
    stop(serve);
    drop(control);
    let _ = mariadb.wait();
}
