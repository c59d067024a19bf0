//! deploy/haproxy.cfg as it is: Debian's haproxy in front of two `fiberstack serve`
//! processes sharing one private MariaDB, `ab -c 50 -n 2000` through it, and one server
//! SIGTERMed midway. Its drain (src/shutdown.rs) and HAProxy's checks and retries
//! together must lose nothing: 0 failed requests, 0 non-2xx.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::tools::{ab, require, text, Reaped};
use common::{get, poll, stats, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_fiberstack");
const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy.cfg");
/// Time a process gets to start, or to finish its part.
const START_WITHIN: Duration = Duration::from_secs(60);
const AB_WITHIN: Duration = Duration::from_secs(180);

/// A `fiberstack serve` child on a loopback port of its own and its address (from
/// the start-up line). The database URL goes through the environment, not argv.
fn server(database_url: &str) -> (Reaped, SocketAddr) {
    let mut child = Reaped::spawn(
        Command::new(BIN)
            .args(["serve", "--bind", "127.0.0.1:0", "--fibers", "60"])
            .args(["--db-pool", "25", "--shutdown-grace", "20"])
            .env("DATABASE_URL", database_url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let stdout = child.child().stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        lines.for_each(drop); // keep the pipe drained until the child exits
    });
    let banner = rx
        .recv_timeout(START_WITHIN)
        .ok()
        .flatten()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("fiberstack serve printed no start-up line"));
    let addr = common::tools::banner_addr(&banner);
    (child, addr)
}

/// A loopback port free a moment ago, for HAProxy's frontend.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn widgets_runs(addr: SocketAddr) -> u64 {
    stats(addr)["fibers"]["routes"]["widgets"]["runs"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_server_sigtermed_under_ab_loses_no_request_behind_haproxy() {
    require("haproxy", "-v", "haproxy");
    let database_url = common::database_url();
    let (mut a, a_addr) = server(&database_url);
    let (_b, b_addr) = server(&database_url);
    let front = free_port();
    let _haproxy = Reaped::spawn(
        Command::new("haproxy")
            .args(["-db", "-f", CONFIG])
            .env("FS_LISTEN", front.to_string())
            .env("FS_A", a_addr.to_string())
            .env("FS_B", b_addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    // HAProxy is up and both servers pass its /readyz checks: each answers through it.
    wait_until(
        "both servers answering through haproxy",
        START_WITHIN,
        || {
            std::net::TcpStream::connect(front).is_ok() && {
                for _ in 0..4 {
                    let _ = get(front, "/widgets?sleep=0");
                }
                widgets_runs(a_addr) > 0 && widgets_runs(b_addr) > 0
            }
        },
    );

    let load = ab(50, 2000, &format!("http://{front}/widgets?sleep=0.1"));
    // Midway: when the two servers have answered 600 of the 2000 between them.
    wait_until("600 /widgets answered", AB_WITHIN, || {
        widgets_runs(a_addr) + widgets_runs(b_addr) >= 600
    });
    let a_runs = widgets_runs(a_addr);
    let kill = Command::new("kill")
        .args(["-TERM", &a.child().id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(
        poll(Duration::from_secs(30), || a.exited()),
        "server a did not exit after SIGTERM"
    );

    let out = load.output_within(AB_WITHIN);
    let report = text(&out);
    assert!(out.status.success(), "ab failed:\n{report}");
    assert!(report.contains("Complete requests:      2000"), "{report}");
    assert!(report.contains("Failed requests:        0"), "{report}");
    assert!(!report.contains("Non-2xx responses"), "{report}");
    // Server b took over what a would have served after its SIGTERM (a finished the
    // requests it had in flight, up to its 60 fibers, so count those as a's).
    let left = 2000 - a_runs - 60;
    let b_runs = widgets_runs(b_addr);
    assert!(
        b_runs >= left,
        "b served {b_runs}, less than the {left} left after a stopped"
    );
}
