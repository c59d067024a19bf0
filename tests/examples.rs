//! Every example runs and says what it should: each is started with `cargo run
//! --example` (the way its "Run with" line tells a reader to), bounded by a timeout, and
//! judged by what it prints, so a broken example fails here. The examples are built
//! once first, with a generous timeout; each run then gets a short one. About 5 s
//! when the examples are already built; mysql_query needs `mariadbd`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// Longest a build of every example may take (a cold debug build on 2 cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest one example may run once built.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// `cargo` in this package's directory, in this test's profile, so that the examples
/// reuse the artifacts already built for the tests.
fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args(args);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    cmd
}

/// Builds every example once per test binary; the runs below then start at once.
fn build_examples() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = run_within(cargo(&["build", "--quiet", "--examples"]), BUILD_TIMEOUT);
        assert!(
            out.status.success(),
            "building the examples failed:\n{}",
            text(&out.stderr)
        );
    });
}

/// `cargo run --quiet --example NAME [-- ARGS]`. (`cargo run` execs the example on
/// Unix, so the child's pid is the example's own.)
fn example(name: &str, args: &[&str]) -> Command {
    build_examples();
    let mut cmd = cargo(&["run", "--quiet", "--example", name]);
    if !args.is_empty() {
        cmd.arg("--").args(args);
    }
    cmd
}

/// Runs `cmd` to the end, killing it after `timeout`.
fn run_within(mut cmd: Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cargo");
    let stdout = drain(child.stdout.take().expect("piped"));
    let stderr = drain(child.stderr.take().expect("piped"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} still running after {timeout:?}; it printed:\n{}\n{}",
                text(&stdout.join().unwrap()),
                text(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Reads a pipe to its end on a thread (so that a full pipe cannot stall the child).
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs an example to its end and returns its stdout, failing on a non-zero exit.
fn stdout_of(name: &str) -> String {
    let out = run_within(example(name, &[]), RUN_TIMEOUT);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{name}: {}\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// The number right after `before` in `s`.
fn number_after(s: &str, before: &str) -> f64 {
    let rest = &s[s
        .find(before)
        .unwrap_or_else(|| panic!("no '{before}' in: {s}"))
        + before.len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after '{before}' in: {s}"))
}

#[test]
fn fiber_pool_runs_twelve_jobs_four_at_a_time() {
    let out = stdout_of("fiber_pool");
    assert!(out.contains("at most 4 ran at once"), "{out}");
    // Three rounds of 200 ms: not one round (no limit), not twelve (no concurrency).
    let ms = number_after(&out, "on 4 fibers took ");
    assert!((550.0..2000.0).contains(&ms), "{out}");
}

#[test]
fn stack_overflow_is_caught_and_the_pool_serves_again() {
    let out = stdout_of("stack_overflow");
    for says in [
        "128 KiB stack: rendered 41 nested templates",
        "16 KiB stack: caught: job `render` overflowed its 16384-byte fiber stack",
        "16 KiB stack, after the overflow: rendered 5 nested templates; overflows counted: 1",
    ] {
        assert!(out.contains(says), "no '{says}' in:\n{out}");
    }
}

#[test]
fn mysql_query_runs_ten_sleeps_at_once() {
    let out = stdout_of("mysql_query");
    // One after another would take 5 s.
    let secs = number_after(&out, "10 x select sleep(0.5) on a pool of 10 took ");
    assert!((0.45..2.0).contains(&secs), "{out}");
}

/// Kills the example when the test ends, passed or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn minimal_server_answers_hello_on_a_free_port() {
    let mut cmd = example("minimal_server", &["--bind", "127.0.0.1:0"]);
    let mut server = Killed(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start cargo"),
    );
    // It prints its address once it listens.
    let stdout = server.0.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(RUN_TIMEOUT)
        .expect("minimal_server printed its address");
    let addr: SocketAddr = line
        .split_once("listening on http://")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("not an address: {line:?}"));

    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"GET /hello?name=examples HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .expect("a whole response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.ends_with("\r\n\r\nHello, examples!\n"),
        "{response}"
    );
    drop(server);
}

/// One exchange with `Connection: close`: the status, the head and the body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .expect("a whole response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// The address in the first stdout line of `child` that says `listening on http://ADDR`.
fn listening_addr(child: &mut Child) -> SocketAddr {
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once("listening on http://") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                return;
            }
        }
    });
    let addr = rx.recv_timeout(RUN_TIMEOUT).expect("a 'listening on' line");
    addr.parse()
        .unwrap_or_else(|_| panic!("not an address: {addr:?}"))
}

#[test]
fn todo_api_answers_every_case_with_its_status() {
    let opts = fiber_mysql::testing::test_database_opts().expect("a test database");
    // It creates its table when it is missing.
    let mut admin = fiber_mysql::Conn::connect(&opts).unwrap();
    admin.query("drop table if exists todos").unwrap();
    let mut cmd = example("todo_api", &["--bind", "127.0.0.1:0"]);
    let backup = std::env::temp_dir().join(format!("todo-backup-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&backup);
    let mut server = Killed(
        cmd.env("DATABASE_URL", opts.url())
            .env("TODO_BACKUP", &backup)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start cargo"),
    );
    let addr = listening_addr(&mut server.0);
    let json = "Content-Type: application/json\r\n";

    let (status, head, body) = http(addr, "POST", "/todos", json, r#"{"title": "buy milk"}"#);
    assert_eq!(status, 201, "{head}\n{body}");
    assert!(head.starts_with("HTTP/1.1 201 Created\r\n"), "{head}");
    let todo: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = todo["id"].as_u64().expect("an id");
    assert_eq!(todo["title"], "buy milk");
    assert!(
        head.contains(&format!("\r\nLocation: /todos/{id}")),
        "{head}"
    );
    assert!(head.contains("\r\nX-Request-Id: "), "the layer ran: {head}");

    let (status, _, body) = http(addr, "GET", &format!("/todos/{id}"), "", "");
    assert_eq!(
        (
            status,
            serde_json::from_str::<serde_json::Value>(&body).unwrap()
        ),
        (200, todo)
    );
    let (status, _, body) = http(addr, "GET", "/todos", "", "");
    assert_eq!(status, 200);
    let all: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(all.len(), 1, "{body}");
    let (status, _, body) = http(addr, "GET", "/todos/abc", "", "");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("'id'") && body.contains("'abc'"), "{body}");
    let (status, _, body) = http(addr, "GET", "/todos/999999", "", "");
    assert_eq!(status, 404, "{body}");

    let plain = "Content-Type: text/plain\r\n";
    let (status, _, body) = http(addr, "POST", "/todos", plain, "buy milk");
    assert_eq!(status, 415, "{body}");
    assert!(body.contains("Content-Type: application/json"), "{body}");
    let (status, _, body) = http(addr, "POST", "/todos", json, r#"{"title": "#);
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = http(addr, "POST", "/todos", json, r#"{"name": "x"}"#);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("field 'title' is missing"), "{body}");

    let (status, head, body) = http(addr, "DELETE", &format!("/todos/{id}"), "", "");
    assert_eq!(status, 204, "{head}");
    assert!(head.starts_with("HTTP/1.1 204 No Content\r\n"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
    assert!(body.is_empty(), "{body:?}");
    let (status, _, _) = http(addr, "DELETE", &format!("/todos/{id}"), "", "");
    assert_eq!(status, 404);
    let (status, _, body) = http(addr, "GET", "/summary", "", "");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"todos\":0") && body.contains("\"health\":\"ok\""),
        "{body}"
    );
    let (status, _, body) = http(addr, "POST", "/todos", json, r#"{"title": "bread"}"#);
    assert_eq!(status, 201, "{body}");
    let (status, _, body) = http(addr, "POST", "/backup", "", "");
    assert_eq!(status, 200, "{body}");
    let saved: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(saved["saved"], 1, "{body}");
    let written = std::fs::read_to_string(&backup).unwrap();
    assert!(written.contains("\"title\":\"bread\""), "{written}");
    drop(server);
}

#[test]
fn todo_api_stays_small() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/todo_api.rs"))
            .unwrap();
    // Seven routes (CRUD, a fan-out to two upstreams, a blocking file write), a
    // layer and readiness, comments included: what the framework must keep small.
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(
        lines <= 150,
        "examples/todo_api.rs has {lines} non-blank lines, over 150"
    );
}

#[test]
fn bookmarks_guards_its_group_reads_structs_and_answers_problems() {
    let opts = fiber_mysql::testing::test_database_opts().expect("a test database");
    let mut admin = fiber_mysql::Conn::connect(&opts).unwrap();
    admin.query("drop table if exists bookmarks").unwrap();
    let mut cmd = example("bookmarks", &["--bind", "127.0.0.1:0"]);
    let mut server = Killed(
        cmd.env("DATABASE_URL", opts.url())
            .env("BOOKMARKS_KEYS", "k-ada:ada:admin,k-bob:bob")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start cargo"),
    );
    let addr = listening_addr(&mut server.0);
    let (ada, bob) = (
        "Authorization: Bearer k-ada\r\nAccept: application/json\r\n\
         Content-Type: application/json\r\n",
        "Authorization: Bearer k-bob\r\nAccept: application/json\r\n\
         Content-Type: application/json\r\n",
    );
    let problem = |status: u16, head: &str, body: &str, kind: &str| {
        assert!(
            head.contains("Content-Type: application/problem+json"),
            "{head}"
        );
        assert!(head.contains("\r\nX-Request-Id: "), "{head}");
        let p: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (p["status"].as_u64(), p["type"].as_str()),
            (
                Some(status.into()),
                Some(&*format!("urn:fiber-web:problem:{kind}"))
            ),
            "{body}"
        );
        assert!(p["request_id"].is_string(), "{body}");
        p
    };
    // The group's layer: no key, no bookmarks; the request id is on the 401 too.
    let (status, head, body) = http(
        addr,
        "GET",
        "/bookmarks",
        "Accept: application/json\r\n",
        "",
    );
    assert_eq!(status, 401, "{body}");
    problem(401, &head, &body, "unauthorized");
    let new = r#"{"url": "https://example.com", "title": "Example"}"#;
    let (status, head, body) = http(addr, "POST", "/bookmarks", ada, new);
    assert_eq!(status, 201, "{head}\n{body}");
    let saved: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = saved["id"].as_u64().unwrap();
    assert_eq!(
        (saved["title"].as_str(), saved["version"].as_u64()),
        (Some("Example"), Some(1))
    );
    // A URL saved twice: 409 naming the field, and the database's text stays inside.
    let (status, head, body) = http(addr, "POST", "/bookmarks", ada, new);
    assert_eq!(problem(status, &head, &body, "duplicate")["field"], "url");
    assert!(
        !body.contains("Duplicate entry") && !body.contains("owner_url"),
        "{body}"
    );
    // Each user sees their own.
    let (_, _, body) = http(addr, "GET", "/bookmarks", bob, "");
    assert_eq!(body, "[]");
    let (status, head, body) = http(addr, "GET", &format!("/bookmarks/{id}"), bob, "");
    assert_eq!(status, 404);
    problem(404, &head, &body, "not-found");
    let (status, head, body) = http(addr, "GET", "/bookmarks/x", ada, "");
    assert_eq!(
        problem(status, &head, &body, "invalid-parameter")["field"],
        "id"
    );
    let (status, head, body) = http(
        addr,
        "POST",
        "/bookmarks",
        ada,
        r#"{"url": "u", "title": 7}"#,
    );
    assert_eq!(
        problem(status, &head, &body, "unprocessable-json")["field"],
        "title"
    );
    // The optimistic version, in a transaction.
    let path = format!("/bookmarks/{id}");
    let (status, head, body) = http(addr, "PATCH", &path, ada, r#"{"title": "E", "version": 9}"#);
    assert_eq!(
        problem(status, &head, &body, "stale-version")["field"],
        "version"
    );
    let (status, _, body) = http(addr, "PATCH", &path, ada, r#"{"title": "E", "version": 1}"#);
    assert_eq!(status, 200, "{body}");
    let renamed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (renamed["title"].as_str(), renamed["version"].as_u64()),
        (Some("E"), Some(2))
    );
    // An import is all or nothing: one duplicate rolls the others back.
    let two = r#"[{"url": "https://a.example", "title": "A"}, {"url": "https://example.com", "title": "dup"}]"#;
    let (status, head, body) = http(addr, "POST", "/bookmarks/import", ada, two);
    problem(status, &head, &body, "duplicate");
    let (_, _, body) = http(addr, "GET", "/bookmarks", ada, "");
    assert_eq!(
        serde_json::from_str::<Vec<serde_json::Value>>(&body)
            .unwrap()
            .len(),
        1,
        "{body}"
    );
    let fine = r#"[{"url": "https://a.example", "title": "A"}, {"url": "https://b.example", "title": "B"}]"#;
    let (status, _, body) = http(addr, "POST", "/bookmarks/import", ada, fine);
    assert_eq!((status, body.as_str()), (200, r#"{"imported":2}"#));
    // The route's own layer: only an admin deletes.
    let (status, head, body) = http(addr, "DELETE", &path, bob, "");
    problem(status, &head, &body, "forbidden");
    let (status, _, _) = http(addr, "DELETE", &path, ada, "");
    assert_eq!(status, 204);
    // Without Accept: application/json, a problem is text, with the id.
    let (status, head, body) = http(addr, "DELETE", &path, "Authorization: Bearer k-ada\r\n", "");
    assert_eq!(status, 404);
    assert!(
        head.contains("Content-Type: text/plain") && body.contains("request id: "),
        "{head}\n{body}"
    );
    drop(server);
}

#[test]
fn bookmarks_stays_small() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/bookmarks.rs"
    ))
    .unwrap();
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(
        lines <= 200,
        "examples/bookmarks.rs has {lines} non-blank lines, over 200"
    );
}
