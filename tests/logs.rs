//! Logs of the `fiberstack serve` binary (the logger is the binary's): an access line
//! per request on both runtimes unless `--access-log off`, `RUST_LOG` honoured over
//! the defaults (`info,may=warn`), a bad directive named in a warning while logging
//! goes on, and the server's own lines (5xx, shutdown) keep their wording.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::either::{Runtime, RUNTIMES};
use common::get;

/// A `fiberstack serve` child and every line of its stderr so far.
struct Serve {
    child: Child,
    addr: SocketAddr,
    stderr: Lines,
}

/// The lines read so far from a child's pipe, by a thread that ends at its end.
struct Lines {
    read: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Lines {
    fn collect(pipe: impl std::io::Read + Send + 'static) -> Lines {
        let read = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&read);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                into.lock().unwrap().push(line);
            }
        });
        Lines {
            read,
            reader: Some(reader),
        }
    }

    fn first(&self) -> Option<String> {
        self.read.lock().unwrap().first().cloned()
    }

    /// Every line, once the pipe has ended.
    fn all(&mut self) -> Vec<String> {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.read.lock().unwrap().clone()
    }
}

impl Serve {
    /// `serve --bind 127.0.0.1:0` with `args` and `env`, on the test database (given in
    /// the environment: a URL in argv would show in `ps`).
    fn start(runtime: Runtime, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut child = runtime
            .serve_command()
            .args(["--bind", "127.0.0.1:0", "--fibers", "8"])
            .args(["--db-pool", "4", "--threads", "2"])
            .args(args)
            .env("DATABASE_URL", common::database_url())
            .env_remove("RUST_LOG")
            .env_remove("FIBERSTACK_ACCESS_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = Lines::collect(child.stdout.take().unwrap());
        let stderr = Lines::collect(child.stderr.take().unwrap());
        let mut serve = Serve {
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            stderr,
        };
        // The start-up line says where it listens.
        let started = common::poll(Duration::from_secs(60), || {
            stdout.first().is_some() || serve.child.try_wait().unwrap().is_some()
        });
        let banner = stdout.first().unwrap_or_default();
        let addr = banner
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok());
        match addr {
            Some(addr) if started => serve.addr = addr,
            _ => panic!("no start-up line ({banner:?}); stderr: {:?}", serve.stop()),
        }
        serve
    }

    /// SIGTERM, wait for the exit (bounded), and every line of stderr.
    fn stop(&mut self) -> Vec<String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The exit closed the pipe: the reader ends.
        self.stderr.all()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first of `lines` that contains `text`, or a failure showing them all.
fn line_with<'a>(lines: &'a [String], text: &str) -> &'a String {
    lines
        .iter()
        .find(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no line with '{text}': {lines:#?}"))
}

/// An access line, read by its structure:
/// `<timestamp> INFO  <method> <path> <status> <ms>ms route=<label>[ stack=<n>B]`.
#[derive(Debug)]
struct Access<'a> {
    line: &'a str,
    method: &'a str,
    path: &'a str,
    status: u16,
    route: &'a str,
    stack: Option<&'a str>,
}

/// `line` as an access line, or `None` if it is any other record (a warning, the
/// start-up line, may's own), whatever text that record carries.
fn access_line(line: &str) -> Option<Access<'_>> {
    let (ts, rest) = line.split_once(' ')?;
    if !starts_with_a_timestamp(ts) {
        return None;
    }
    let fields: Vec<&str> = rest.strip_prefix("INFO  ")?.split(' ').collect();
    let (method, path, status, ms, route) = match fields[..] {
        [m, p, s, t, r] | [m, p, s, t, r, _] => (m, p, s, t, r),
        _ => return None,
    };
    let stack = match fields.get(5) {
        Some(s) => Some(s.strip_prefix("stack=")?.strip_suffix('B')?),
        None => None,
    };
    let number = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (whole, frac) = ms.strip_suffix("ms")?.split_once('.')?;
    if !(number(whole) && frac.len() == 3 && number(frac)) {
        return None;
    }
    Some(Access {
        line,
        method,
        path,
        status: status.parse().ok().filter(|s| (100..600).contains(s))?,
        route: route.strip_prefix("route=")?,
        stack,
    })
}

/// The access lines among `lines`.
fn access_lines(lines: &[String]) -> Vec<Access<'_>> {
    lines.iter().filter_map(|l| access_line(l)).collect()
}

/// `2026-11-30T20:51:06.123Z`: the shape every log line starts with.
fn starts_with_a_timestamp(line: &str) -> bool {
    let ts = line.split(' ').next().unwrap_or("");
    ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T' && ts.as_bytes()[19] == b'.'
}

#[test]
fn every_request_gets_an_access_line_on_each_runtime_by_default() {
    for runtime in RUNTIMES {
        let mut serve = Serve::start(runtime, &[], &[]);
        // The fiber pool measures every 64th run's stack: 64 runs include one.
        for _ in 0..64 {
            assert_eq!(get(serve.addr, "/hello?secret=1").status, 200);
        }
        assert_eq!(get(serve.addr, "/nope").status, 404);
        let lines = serve.stop();
        let access = access_lines(&lines);
        assert_eq!(access.len(), 65, "{runtime}: {lines:#?}");
        for a in &access {
            assert!(!a.line.contains("secret"), "no query strings: {a:?}");
            assert_eq!(a.method, "GET", "{a:?}");
        }
        let hello: Vec<&Access> = access.iter().filter(|a| a.path == "/hello").collect();
        assert_eq!(hello.len(), 64, "{access:#?}");
        assert!(
            hello.iter().all(|a| a.status == 200 && a.route == "hello"),
            "{hello:#?}"
        );
        assert!(
            access
                .iter()
                .any(|a| a.path == "/nope" && a.status == 404 && a.route == "-"),
            "{access:#?}"
        );
        let measured = access.iter().filter(|a| a.stack.is_some()).count();
        match runtime {
            Runtime::Fibers => assert!(measured >= 1, "no stack use shown: {access:#?}"),
            Runtime::Async => {
                assert_eq!(measured, 0, "tasks have no stack to measure: {access:#?}")
            }
        }
        for a in access.iter().filter_map(|a| a.stack) {
            assert!(a.parse::<usize>().is_ok_and(|b| b > 0), "stack={a}B");
        }
        // The server's own lines keep their wording, through the logger.
        for said in ["fiberstack: got SIGTERM: finishing", "stopped"] {
            let line = line_with(&lines, said);
            assert!(starts_with_a_timestamp(line), "{runtime}: {line}");
        }
    }
}

#[cfg(not(rig))] // the fiber server's own
#[test]
fn access_log_off_writes_none_and_keeps_the_rest() {
    let mut serve = Serve::start(Runtime::Fibers, &["--access-log", "off"], &[]);
    assert_eq!(get(serve.addr, "/hello").status, 200);
    let lines = serve.stop();
    assert!(access_lines(&lines).is_empty(), "{lines:#?}");
    line_with(&lines, "stopped");
}

#[cfg(not(rig))] // the fiber server's own
#[test]
fn a_bad_rust_log_directive_is_named_and_the_others_still_apply() {
    let mut serve = Serve::start(
        Runtime::Fibers,
        &[],
        &[("RUST_LOG", "may=loud,fiberstack::access=off,info")],
    );
    assert_eq!(get(serve.addr, "/hello").status, 200);
    let lines = serve.stop();
    let warning = line_with(&lines, "RUST_LOG: ignored 'may=loud'");
    assert!(warning.contains(" WARN "), "{warning}");
    // The good directives apply: no access lines, and info lines still come.
    assert!(access_lines(&lines).is_empty(), "{lines:#?}");
    line_with(&lines, "stopped");
}

#[cfg(not(rig))] // the fiber server's own
#[test]
fn mays_records_are_shown_and_default_to_warn() {
    // may logs every socket it registers at info ("add fd to epoll select").
    let may_lines = |lines: &[String]| lines.iter().filter(|l| l.contains(" may::")).count();
    let mut quiet = Serve::start(Runtime::Fibers, &[], &[("RUST_LOG", "info")]);
    assert_eq!(get(quiet.addr, "/hello").status, 200);
    let lines = quiet.stop();
    assert_eq!(
        may_lines(&lines),
        0,
        "may is at warn unless asked: {lines:#?}"
    );

    let mut chatty = Serve::start(Runtime::Fibers, &[], &[("RUST_LOG", "info,may=info")]);
    assert_eq!(get(chatty.addr, "/hello").status, 200);
    let lines = chatty.stop();
    assert!(
        may_lines(&lines) > 0,
        "may's records reach the log: {lines:#?}"
    );
}

#[cfg(not(rig))] // the fiber server's own
#[test]
fn a_5xx_is_logged_with_its_wording() {
    let mut serve = Serve::start(Runtime::Fibers, &["--stack-size", "16k"], &[]);
    let r = get(serve.addr, "/deep?depth=100&frame=1024");
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(get(serve.addr, "/hello").status, 200, "the server goes on");
    let lines = serve.stop();
    let said = "fiberstack: GET deep -> 500: fiber stack overflow in route deep";
    let line = line_with(&lines, said);
    assert!(line.contains(" ERROR "), "{line}");
    // What the client was not told: the stack, where it struck, what to raise.
    for operator in [
        "its 16384-byte stack was too small",
        "safe point",
        "--stack-size",
    ] {
        assert!(line.contains(operator), "{operator}: {line}");
    }
}

#[cfg(not(rig))] // the fiber server's own
#[test]
fn why_serve_failed_is_said_even_with_logging_off() {
    for rust_log in ["info", "off"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fiberstack"))
            // Refused by the fiber pool, after the logger is set up (not by clap).
            .args(["serve", "--bind", "127.0.0.1:0", "--stack-size", "1k"])
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("fiberstack: bad --fibers, --stack-size or --queue"),
            "RUST_LOG={rust_log}: {err}"
        );
    }
}
