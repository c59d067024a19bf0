//! `GET /metrics` on both runtimes, started in this process on port 0 against one real
//! MariaDB: `promtool check metrics` passes while wrk loads the server, the numbers
//! move by exactly the requests sent, an `Accept` the server cannot serve still gets
//! the text format, and a scrape is answered while every fiber (or task slot) is busy;
//! with the queue full too, `/healthz`, `/readyz`, `/stats` and `/metrics` all answer.
//!
//! promtool comes with Debian's `prometheus` package and wrk with `wrk`
//! (`scripts/install-deps` installs both); without them the load test fails saying so.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::either::Runtime;
use common::either::{Server, RUNTIMES};
use common::{get, parse, raw, Resp};

/// `GET /metrics`, checked to be the text format.
fn scrape(addr: SocketAddr) -> String {
    let r = get(addr, "/metrics");
    assert_eq!(r.status, 200, "/metrics: {}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    r.body
}

/// The value of the sample written exactly as `series` (name and labels), if any.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{series} {v}: {e}")))
}

fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// A program the test needs, or a failure naming the Debian package that has it.
fn tool(program: &str, package: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{program} is not installed: install Debian's {package} package \
         (scripts/install-deps does)"
    );
    Command::new(program)
}

/// `text` through `promtool check metrics`: its verdict, with what it printed.
fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = tool("promtool", "prometheus")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(said)
    }
}

/// wrk against `url` for `secs` seconds (it stops by itself; killed on drop).
struct Load(Child);

impl Load {
    fn start(url: String, connections: u32, secs: u32) -> Load {
        let child = tool("wrk", "wrk")
            .args(["-t1", &format!("-c{connections}"), &format!("-d{secs}s")])
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("wrk starts");
        Load(child)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn promtool_passes_under_load(runtime: Runtime) {
    let server = Server::start(runtime, |_| {});
    let addr = server.addr();
    let slow = Load::start(format!("http://{addr}/widgets?sleep=0.05"), 16, 4);
    let fast = Load::start(format!("http://{addr}/hello"), 8, 4);
    let busy = "fiberstack_fibers_busy";
    // Scrape until the load shows (a state, not a guess), then check three scrapes.
    let mut text = String::new();
    let loaded = common::poll(Duration::from_secs(20), || {
        text = scrape(addr);
        must(&text, busy) > 0.0
            && must(
                &text,
                "fiberstack_http_requests_total{route=\"hello\",status_class=\"2xx\"}",
            ) > 0.0
    });
    assert!(loaded, "no load seen on {runtime}:\n{text}");
    for _ in 0..3 {
        let text = scrape(addr);
        if let Err(said) = promtool_check(&text) {
            panic!("promtool check metrics on {runtime}:\n{said}\n--- the scrape:\n{text}");
        }
    }
    drop((slow, fast));
}

/// The check above can fail: promtool refuses a counter named like a gauge.
#[test]
fn promtool_refuses_a_badly_named_counter() {
    let bad = "# HELP x_seconds Time.\n# TYPE x_seconds counter\nx_seconds 1\n";
    let said = promtool_check(bad).unwrap_err();
    assert!(said.contains("_total"), "{said}");
}

#[test]
fn promtool_passes_under_load_on_each_runtime() {
    for runtime in RUNTIMES {
        promtool_passes_under_load(runtime);
    }
}

#[test]
fn the_numbers_move_by_exactly_the_requests_sent() {
    const SENT: u64 = 7;
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |_| {});
        let addr = server.addr();
        let ok = "fiberstack_http_requests_total{route=\"hello\",status_class=\"2xx\"}";
        let count = "fiberstack_http_request_duration_seconds_count{route=\"hello\"}";
        let inf = "fiberstack_http_request_duration_seconds_bucket{route=\"hello\",le=\"+Inf\"}";
        let runs = "fiberstack_route_runs_total{route=\"hello\"}";
        let missing = "fiberstack_http_requests_total{route=\"unmatched\",status_class=\"4xx\"}";
        let all_2xx = "fiberstack_http_responses_total{status_class=\"2xx\"}";

        let before = scrape(addr);
        for _ in 0..SENT {
            assert_eq!(get(addr, "/hello").status, 200);
        }
        assert_eq!(get(addr, "/no-such-route").status, 404);
        let after = scrape(addr);

        let rose = |series: &str| must(&after, series) - value(&before, series).unwrap_or(0.0);
        assert_eq!(rose(ok), SENT as f64, "{runtime}: {ok}");
        assert_eq!(rose(count), SENT as f64, "{runtime}: {count}");
        assert_eq!(rose(inf), SENT as f64, "{runtime}: {inf}");
        assert_eq!(rose(runs), SENT as f64, "{runtime}: {runs}");
        assert_eq!(rose(missing), 1.0, "{runtime}: {missing}");
        // The hello requests and the first scrape (counted once it was answered).
        assert_eq!(rose(all_2xx), (SENT + 1) as f64, "{runtime}: {all_2xx}");
        assert!(must(&after, "fiberstack_uptime_seconds") > 0.0);
        assert!(must(&after, "process_resident_memory_bytes") > 1e6);
        assert!(must(&after, "process_open_fds") >= 3.0);
        assert_eq!(
            must(&after, "fiberstack_fibers"),
            50.0,
            "{runtime}: --fibers"
        );
        assert_eq!(must(&after, "fiberstack_db_pool_connections"), 20.0);
        let info = format!("fiberstack_build_info{{runtime=\"{runtime}\",");
        assert!(after.contains(&info), "{runtime}: no {info}");
    }
}

#[test]
fn an_accept_it_cannot_serve_still_gets_the_text_format() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |_| {});
        for accept in [
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
            "application/openmetrics-text;version=1.0.0",
            "image/png",
        ] {
            let request = format!(
                "GET /metrics HTTP/1.1\r\nHost: test\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
            );
            let r: Resp = parse(&raw(server.addr(), request.as_bytes())).expect("a response");
            assert_eq!(r.status, 200, "{runtime}, Accept: {accept}: {}", r.body);
            assert_eq!(
                r.header("content-type"),
                Some("text/plain; version=0.0.4; charset=utf-8"),
                "{runtime}, Accept: {accept}"
            );
            assert!(r.body.contains("# TYPE fiberstack_fibers gauge"));
        }
    }
}

#[test]
fn a_scrape_is_answered_while_every_fiber_is_busy() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |cfg| {
            cfg.web.fibers = 2;
            cfg.web.queue = 4;
        });
        let addr = server.addr();
        let completed = "fiberstack_fibers_completed_total";
        let before = must(&scrape(addr), completed);
        let sleepers: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || get(addr, "/widgets?sleep=2").status))
            .collect();
        let mut text = String::new();
        let full = common::poll(Duration::from_secs(10), || {
            text = scrape(addr);
            must(&text, "fiberstack_fibers_busy") == 2.0
        });
        assert!(full, "{runtime}: both fibers never busy:\n{text}");
        // Rendered while both still ran: it waited for no fiber (one that did would
        // have got the first sleeper's, and shown it completed).
        assert_eq!(must(&text, completed), before, "{runtime}:\n{text}");
        for s in sleepers {
            assert_eq!(s.join().unwrap(), 200);
        }
    }
}

#[test]
fn every_monitoring_route_answers_while_the_fibers_and_the_queue_are_full() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |cfg| {
            cfg.web.fibers = 2;
            cfg.web.queue = 2;
        });
        let addr = server.addr();
        // Two run and two wait: every fiber (task slot) and the whole queue taken.
        let sleepers: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(move || get(addr, "/widgets?sleep=3").status))
            .collect();
        let mut text = String::new();
        let full = common::poll(Duration::from_secs(10), || {
            text = scrape(addr);
            must(&text, "fiberstack_fibers_busy") == 2.0
                && must(&text, "fiberstack_fibers_queued") == 2.0
        });
        assert!(
            full,
            "{runtime}: the fibers and queue never filled:\n{text}"
        );
        let hello = get(addr, "/hello");
        assert_eq!(
            hello.status, 503,
            "{runtime}: a route's request is refused: {hello:?}"
        );
        for path in ["/healthz", "/readyz", "/stats", "/metrics"] {
            let r = get(addr, path);
            assert_eq!(
                r.status, 200,
                "{runtime}: {path} under full load: {}",
                r.body
            );
        }
        let stats = server.stats();
        let slots = runtime.slots();
        assert_eq!(stats[slots]["busy"], 2, "{runtime}: {stats}");
        for s in sleepers {
            assert_eq!(s.join().unwrap(), 200);
        }
    }
}
