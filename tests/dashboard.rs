//! The dashboard (`GET /`) as a browser draws it: Debian's chromium, headless, loads
//! the page from a server under `ab` load on both runtimes; the rendered DOM's numbers
//! must agree with `/stats` read around the render, and a 1280x800 screenshot is saved
//! under target/dashboard/ for people to look at.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::tools::{ab, require, run_within, text};
use common::{get, stats, wait_for_stats};
use fiberstack::config::{Runtime, ServeConfig};

/// Virtual time the page gets before the DOM is read: several one-second polls.
const RENDER_BUDGET_MS: u32 = 5000;
/// Real time chromium may take, page load and render included, on two busy cores.
const CHROMIUM_DEADLINE: Duration = Duration::from_secs(90);

fn config(runtime: Runtime) -> ServeConfig {
    ServeConfig {
        runtime,
        database_url: Some(common::database_url()),
        ..common::config()
    }
}

/// chromium, headless, with a fresh profile and nothing phoning home; `args` say what
/// to produce from `url`.
fn chromium(url: &str, args: &[&str]) -> String {
    require("chromium", "--version", "chromium");
    // One profile per server (its port is in the URL): tests may share this process.
    let tag: String = url.chars().filter(char::is_ascii_digit).collect();
    let profile =
        std::env::temp_dir().join(format!("fiberstack-chromium-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    let out = run_within(
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--window-size=1280,800",
                &format!("--virtual-time-budget={RENDER_BUDGET_MS}"),
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .arg(url),
        CHROMIUM_DEADLINE,
    );
    let _ = std::fs::remove_dir_all(&profile);
    assert!(out.status.success(), "chromium failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element with `id` in serialized HTML.
fn by_id<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the rendered page:\n{dom}"));
    let open = at + dom[at..].find('>').expect("a tag's end");
    let rest = &dom[open + 1..];
    &rest[..rest.find('<').unwrap_or(rest.len())]
}

/// The number in the element with `id`.
fn number(dom: &str, id: &str) -> u64 {
    let t = by_id(dom, id);
    t.trim()
        .parse()
        .unwrap_or_else(|_| panic!("#{id} shows {t:?}, not a number"))
}

/// The cell `class` of the routes table's row for `route`.
fn route_cell<'a>(dom: &'a str, route: &str, class: &str) -> &'a str {
    let row = dom
        .find(&format!("data-route=\"{route}\""))
        .unwrap_or_else(|| panic!("no row for {route} in the routes table:\n{dom}"));
    let at = row + dom[row..].find(&format!("class=\"{class}\">")).unwrap();
    let rest = &dom[at + class.len() + 9..];
    &rest[..rest.find('<').unwrap()]
}

/// Where screenshots go: the workspace's target/ (or CARGO_TARGET_DIR).
fn screenshot_path(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A PNG's width and height, from its IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Load the page under ab load, compare the DOM with /stats, save a screenshot.
fn renders_under_load(addr: SocketAddr, pool: &str, shot: &str) {
    let page = get(addr, "/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(
        !page.body.contains("http://") && !page.body.contains("https://"),
        "the page must be self-contained (no CDN)"
    );

    let _load = ab(10, 100_000, &format!("http://{addr}/widgets?sleep=0.05"));
    let runs = |s: &serde_json::Value| s[pool]["routes"]["widgets"]["runs"].as_u64();
    wait_for_stats(
        addr,
        "ab's load on /widgets",
        Duration::from_secs(60),
        |s| runs(s) >= Some(20),
    );

    let before = stats(addr);
    let url = format!("http://{addr}/");
    let dom = chromium(&url, &["--dump-dom"]);
    let after = stats(addr);

    let updates = dom
        .split("data-updates=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no data-updates on <body>:\n{dom}"));
    assert!(
        updates >= 2,
        "the page polled /stats {updates} times:\n{dom}"
    );
    assert!(
        !by_id(&dom, "status").contains("cannot read"),
        "{}",
        by_id(&dom, "status")
    );
    // Fixed numbers: equal.
    assert_eq!(
        number(&dom, "fibers-size"),
        after[pool]["size"].as_u64().unwrap()
    );
    assert_eq!(
        number(&dom, "db-size"),
        after["db"]["size"].as_u64().unwrap()
    );
    match after[pool]["stack_size"].as_u64() {
        Some(stack) => assert_eq!(number(&dom, "stack-size"), stack),
        None => assert!(by_id(&dom, "stack-head").contains("no fixed stacks")),
    }
    // Counters that only grow: between the reads before and after the render.
    let within = |what: &str, shown: u64, lo: Option<u64>, hi: Option<u64>| {
        let (lo, hi) = (lo.unwrap(), hi.unwrap());
        assert!(
            (lo..=hi).contains(&shown),
            "{what}: the page shows {shown}, /stats went from {lo} to {hi}"
        );
    };
    within(
        "completed",
        number(&dom, "fibers-completed"),
        before[pool]["completed"].as_u64(),
        after[pool]["completed"].as_u64(),
    );
    let widgets_runs = route_cell(&dom, "widgets", "runs").parse().unwrap();
    within("widgets runs", widgets_runs, runs(&before), runs(&after));
    let rate = route_cell(&dom, "widgets", "rate");
    assert!(
        rate.parse::<f64>().is_ok_and(|r| r >= 0.0),
        "widgets req/s shows {rate:?}"
    );

    let path = screenshot_path(shot);
    let _ = std::fs::remove_file(&path);
    chromium(&url, &[&format!("--screenshot={}", path.display())]);
    let png = std::fs::read(&path).unwrap_or_else(|e| panic!("no screenshot at {path:?}: {e}"));
    assert_eq!(png_size(&png), (1280, 800), "{path:?}");
    eprintln!("dashboard screenshot: {}", path.display());
}

#[test]
fn the_dashboard_agrees_with_stats_on_fibers() {
    let running = fiberstack::start::start(&config(Runtime::Fibers)).unwrap();
    renders_under_load(running.addr(), "fibers", "dashboard-fibers.png");
    running.shutdown(Duration::from_secs(5));
}

#[test]
fn the_dashboard_agrees_with_stats_on_the_async_twin() {
    let running = fiberstack::twin::start(&config(Runtime::Async)).unwrap();
    renders_under_load(running.addr(), "tasks", "dashboard-async.png");
    running.shutdown(Duration::from_secs(5));
}
