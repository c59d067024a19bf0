//! The binary as a user runs it: the start-up line, flags refused by name, a taken
//! port, a MySQL error turned into a logged 500, and graceful shutdown on SIGTERM with
//! requests in flight (also under plain ab), the private MariaDB stopped with it; the
//! README's flag table is exactly what `serve` accepts; and `fiberstack mariadb
//! --control` kills and starts its server on command.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::child::{alive, Served};
use common::{concurrent_gets, get, wait_for_stats};

const BIN: &str = env!("CARGO_BIN_EXE_fiberstack");

/// `fiberstack serve` with small pools and `args`, once it prints its start-up line.
fn serve(args: &[&str]) -> Served {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--fibers",
        "20",
        "--db-pool",
        "10",
    ])
    .args(args);
    Served::start(cmd, |_| true, Duration::from_secs(60))
}

#[test]
fn sigterm_finishes_in_flight_requests_then_stops_mariadb() {
    let mut s = serve(&[]);
    assert!(
        s.banner.contains("20 fibers x 128KiB stack"),
        "{}",
        s.banner
    );
    assert!(s.banner.contains("private MariaDB"), "{}", s.banner);
    let mariadb = s.mariadb_pid();
    assert!(alive(mariadb));
    let addr = s.addr;
    // 10 requests that each hold one of the 10 MySQL connections for 3 s; SIGTERM
    // once /stats shows all 10 holding one (3 s leaves the last to start time
    // to be seen before the first ends, on a busy machine too).
    let in_flight = std::thread::spawn(move || concurrent_gets(addr, "/widgets?sleep=3", 10));
    wait_for_stats(
        addr,
        "10 requests in flight",
        Duration::from_secs(20),
        |st| st["db"]["in_use"].as_u64() >= Some(10),
    );
    s.signal("TERM");
    let (resps, _) = in_flight.join().unwrap();
    assert!(resps.iter().all(|r| r.status == 200), "{resps:?}");
    assert!(resps
        .iter()
        .all(|r| r.header("Connection") == Some("close")));
    let (status, stderr) = s.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?} {stderr:?}");
    assert!(
        stderr.iter().any(|l| l.contains("got SIGTERM")),
        "{stderr:?}"
    );
    assert!(stderr.iter().any(|l| l.contains("stopped")), "{stderr:?}");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the port is closed"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(mariadb) {
        assert!(
            Instant::now() < deadline,
            "the private MariaDB outlived the server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ab_across_a_shutdown_sees_no_failed_accepted_request() {
    if Command::new("ab").arg("-V").output().is_err() {
        panic!("ab is missing: run scripts/install-deps");
    }
    let mut s = serve(&[]);
    let url = format!("http://{}/widgets?sleep=0.1", s.addr);
    let ab = Command::new("ab")
        .args(["-c", "10", "-n", "400", "-s", "20", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // SIGTERM in the middle of the run: after 50 of the 400 requests.
    wait_for_stats(
        s.addr,
        "50 /widgets answered",
        Duration::from_secs(30),
        |st| st["fibers"]["routes"]["widgets"]["runs"].as_u64() >= Some(50),
    );
    s.signal("TERM");
    let out = ab.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    s.wait_exit(Duration::from_secs(15));
    // ab stops at the first refused connect; what it had sent was answered.
    assert!(!text.contains("reset by peer"), "{text}");
    assert!(!text.contains("timed out"), "{text}");
    if text.contains("Failed requests") {
        assert!(text.contains("Failed requests:        0"), "{text}");
    } else {
        assert!(text.contains("Connection refused"), "{text}");
    }
}

/// The long flags (`--name`) in `text`, in order of first appearance.
fn long_flags(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("--") {
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        let flag = format!("--{}", name.trim_end_matches('-'));
        if name.starts_with(|c: char| c.is_ascii_lowercase()) && !found.contains(&flag) {
            found.push(flag);
        }
    }
    found
}

#[test]
fn the_readme_flag_table_is_what_serve_accepts() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("\n## Flags\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README has a Flags section");
    // The table's rows: the flags in their first column.
    let table: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .flat_map(|l| long_flags(l.split(" | ").next().unwrap()))
        .collect();
    assert!(table.len() >= 20, "the scan found the table: {table:?}");
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let accepted: Vec<String> = long_flags(&help)
        .into_iter()
        .filter(|f| f != "--help")
        .collect();
    let unknown: Vec<&String> = table.iter().filter(|f| !accepted.contains(f)).collect();
    let undocumented: Vec<&String> = accepted.iter().filter(|f| !table.contains(f)).collect();
    assert!(
        unknown.is_empty() && undocumented.is_empty(),
        "README flags serve does not accept: {unknown:?}; serve flags the README's table \
         lacks: {undocumented:?}"
    );
}

#[test]
fn bad_flags_are_refused_by_name() {
    for (args, says) in [
        (&["--stack-size", "lots"][..], "--stack-size"),
        (&["--stack-size", "64parsecs"][..], "unknown unit"),
        (&["--fibers", "0"][..], "--fibers"),
        (&["--db-driver", "odbc"][..], "native"),
        (&["--bind", "nowhere"][..], "--bind"),
        (&["--fiber-wait=-1"][..], "--fiber-wait"),
    ] {
        let out = Command::new(BIN).arg("serve").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn without_mariadbd_the_error_names_the_package_and_the_flag() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--mariadbd",
            "/nonexistent/mariadbd",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("apt-get install mariadb-server"), "{err}");
    assert!(err.contains("--database-url"), "{err}");
}

#[test]
fn a_taken_port_stops_the_start_with_the_flag_to_change() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args(["serve", "--bind", &port, "--db-pool", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already in use") && err.contains("--bind"),
        "{err}"
    );
}

#[test]
fn a_mysql_error_is_a_500_whose_text_is_logged_and_not_sent() {
    let mut db = fiber_mysql::launcher::MariaDb::start(Default::default()).unwrap();
    let s = serve(&["--database-url", &db.url()]);
    assert!(
        s.banner.contains("external mysql://app:***@"),
        "{}",
        s.banner
    );
    assert_eq!(get(s.addr, "/upstream/search.json?q=rails").status, 200);
    let mut admin = fiber_mysql::Conn::connect(&db.admin_opts()).unwrap();
    admin.query("drop table fiberstack.tweets").unwrap();
    let r = get(s.addr, "/upstream/search.json?q=rails");
    assert_eq!(r.status, 500, "{}", r.body);
    // The client reads that the database failed; the table's name is the log's.
    assert!(r.body.contains("database error"), "{}", r.body);
    assert!(
        !r.body.contains("doesn't exist") && !r.body.contains("tweets"),
        "{}",
        r.body
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let logged = loop {
        if let Ok(line) = s.stderr.recv_timeout(Duration::from_millis(100)) {
            if line.contains("doesn't exist") {
                break line;
            }
        }
        assert!(Instant::now() < deadline, "the error was not logged");
    };
    assert!(
        logged.contains("upstream_search") && logged.contains("500"),
        "{logged}"
    );
    assert_eq!(get(s.addr, "/healthz").status, 200);
    drop(s);
    db.stop();
}

/// `fiberstack mariadb --control`, the outage drill of scripts/soak: `kill` takes the
/// server down (a connect is refused), `start` brings it back on the same port with its
/// data, an unknown command is named, and the end of stdin stops it like SIGTERM.
#[test]
fn mariadb_control_kills_and_starts_the_server_and_stops_at_the_end_of_stdin() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(BIN)
        .args(["mariadb", "--control", "--max-connections", "20"])
        .env_remove("DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut commands = child.stdin.take().unwrap();
    let (tx, said) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || {
        said.recv_timeout(Duration::from_secs(60))
            .expect("fiberstack mariadb said nothing within 60 s")
    };
    let opts = fiber_mysql::Opts::from_url(&next()).unwrap();
    let mut conn = fiber_mysql::Conn::connect(&opts).unwrap();
    conn.query("create table kept (x int)").unwrap();
    conn.query("insert into kept values (7)").unwrap();

    writeln!(commands, "kill").unwrap();
    assert_eq!(next(), "stopped");
    assert!(fiber_mysql::Conn::connect(&opts).is_err(), "still answers");
    writeln!(commands, "reboot").unwrap();
    assert!(next().contains("unknown command 'reboot'"));
    writeln!(commands, "start").unwrap();
    let started = next();
    let pid: u32 = started
        .strip_prefix("started ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{started:?}"));
    let mut conn = fiber_mysql::Conn::connect(&opts).unwrap();
    let rows = conn.query("select x from kept").unwrap().rows;
    assert_eq!(
        rows[0].get::<i64, _>(0),
        Some(7),
        "the data did not survive"
    );

    drop(commands);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running after its stdin ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(!alive(pid), "mariadbd {pid} outlived its controller");
}
