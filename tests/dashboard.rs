//! The dashboard (`GET /`) as a browser draws it: Debian's chromium, headless, loads
//! the page from a server under `ab` load on both runtimes; the rendered DOM's numbers
//! must agree with `/stats` read around the render, the req/s of the loaded route must
//! have moved, and a 1280x800 screenshot, saved under target/dashboard/ for people to
//! look at, must show the page drawn from `/stats`: its dark header, its cards and
//! sparklines on the page's background, and no error in the header's status.

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::either::{Server, RUNTIMES};
use common::tools::{ab, require, run_within, text};
use common::{get, stats, wait_for_stats};

/// Virtual time the page gets before the DOM is read: several one-second polls.
const RENDER_BUDGET_MS: u32 = 5000;
/// Real time chromium may take, page load and render included, on two busy cores.
const CHROMIUM_DEADLINE: Duration = Duration::from_secs(90);

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

/// A decoded 8-bit RGB or RGBA PNG (what chromium writes): its size and pixels.
struct Image {
    width: usize,
    height: usize,
    /// `[r, g, b]` per pixel, row by row (alpha dropped).
    rgb: Vec<[u8; 3]>,
}

impl Image {
    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }

    /// The share of the pixels in rows `rows` for which `f` holds.
    fn share(&self, rows: std::ops::Range<usize>, f: impl Fn([u8; 3]) -> bool) -> f64 {
        let n = rows.len() * self.width;
        let hits = rows
            .flat_map(|y| (0..self.width).map(move |x| (x, y)))
            .filter(|&(x, y)| f(self.at(x, y)))
            .count();
        hits as f64 / n as f64
    }
}

/// Decode a non-interlaced 8-bit RGB or RGBA PNG: its IDAT chunks inflated, each row
/// unfiltered (PNG's five filters).
fn decode_png(bytes: &[u8]) -> Image {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (mut at, mut idat, mut ihdr) = (8, Vec::new(), None);
    while at + 8 <= bytes.len() {
        let (len, kind) = (be(at), &bytes[at + 4..at + 8]);
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => ihdr = Some(data.to_vec()),
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let ihdr = ihdr.expect("an IHDR chunk");
    let dim = |i: usize| u32::from_be_bytes(ihdr[i..i + 4].try_into().unwrap()) as usize;
    let (width, height) = (dim(0), dim(4));
    let (depth, colour, interlace) = (ihdr[8], ihdr[9], ihdr[12]);
    let channels = match colour {
        2 => 3,
        6 => 4,
        _ => panic!("colour type {colour}: chromium writes RGB or RGBA"),
    };
    assert_eq!((depth, interlace), (8, 0), "8-bit, not interlaced");
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .expect("IDAT inflates");
    let stride = width * channels;
    assert_eq!(
        raw.len(),
        height * (stride + 1),
        "one filter byte and a row per line"
    );
    let mut pixels = vec![0u8; height * stride];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for i in 0..stride {
            let a = if i >= channels {
                pixels[y * stride + i - channels]
            } else {
                0
            };
            let b = if y > 0 {
                pixels[(y - 1) * stride + i]
            } else {
                0
            };
            let c = if y > 0 && i >= channels {
                pixels[(y - 1) * stride + i - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = (
                        (p - i16::from(a)).abs(),
                        (p - i16::from(b)).abs(),
                        (p - i16::from(c)).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("row {y}: filter {f}"),
            };
            pixels[y * stride + i] = line[i].wrapping_add(predicted);
        }
    }
    let rgb = pixels
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    Image { width, height, rgb }
}

/// The page's colours (src/app/dashboard.html's `:root`) and the sparklines' ground.
const INK: [u8; 3] = [0x1d, 0x23, 0x30];
const BACKGROUND: [u8; 3] = [0xf2, 0xf4, 0xf8];
const CARD: [u8; 3] = [0xff, 0xff, 0xff];
const SPARK_GROUND: [u8; 3] = [0xf7, 0xf8, 0xfb];
/// Rows of the header (10 px of padding around an 18 px title).
const HEADER_ROWS: std::ops::Range<usize> = 0..38;

/// What a 1280x800 screenshot of the dashboard shows when it drew `/stats`: the dark
/// header across the top, the grey page with white cards and the sparklines' ground
/// below it, and in the header no pixel of the red (`#ffb4b4` on the dark) in which
/// the status says it cannot read /stats. A blank page, an error page or a page
/// whose polls failed breaks one of these.
fn shows_the_dashboard(shot: &Image) -> Result<String, String> {
    if (shot.width, shot.height) != (1280, 800) {
        return Err(format!("{}x{}, not 1280x800", shot.width, shot.height));
    }
    let header = shot.share(2..3, |p| p == INK);
    let below = HEADER_ROWS.end + 10..shot.height;
    let (background, cards, sparks) = (
        shot.share(below.clone(), |p| p == BACKGROUND),
        shot.share(below.clone(), |p| p == CARD),
        shot.share(below, |p| p == SPARK_GROUND),
    );
    let red = shot.share(HEADER_ROWS, |[r, g, b]| {
        i16::from(r) > i16::from(g) + 40 && i16::from(r) > i16::from(b) + 40
    });
    let seen = format!(
        "header row {:.0}% ink, below it {:.0}% background, {:.0}% card, {:.1}% sparkline \
         ground; {:.2}% red in the header",
        header * 100.0,
        background * 100.0,
        cards * 100.0,
        sparks * 100.0,
        red * 100.0
    );
    let fits = header > 0.95 && background > 0.05 && cards > 0.3 && sparks > 0.02 && red == 0.0;
    if fits {
        Ok(seen)
    } else {
        Err(seen)
    }
}

/// `Ok` when the page shows a rate above zero for `/widgets`, else what it shows.
fn rate_moved(dom: &str) -> Result<(), String> {
    let rate = route_cell(dom, "widgets", "rate");
    match rate.parse::<f64>() {
        Ok(r) if r > 0.0 => Ok(()),
        _ => Err(rate.to_string()),
    }
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

    // Short queries, hundreds of runs a second: every interval between two of the
    // page's polls, however short (chromium's virtual time runs its timers at once),
    // sees some complete.
    let _load = ab(10, 1_000_000, &format!("http://{addr}/widgets?sleep=0.01"));
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
    // The rate is the runs between the page's last two polls over the server's clock:
    // under load it moved.
    // Chromium's virtual time can put the two polls within one instant, in which a
    // loaded machine completes nothing: then the page is read again, a few times.
    let mut shown = rate_moved(&dom);
    for _ in 0..3 {
        if shown.is_ok() {
            break;
        }
        shown = rate_moved(&chromium(&url, &["--dump-dom"]));
    }
    if let Err(rate) = shown {
        panic!("widgets req/s shows {rate:?} under ab's load, in four reads of the page");
    }

    let path = screenshot_path(shot);
    let _ = std::fs::remove_file(&path);
    chromium(&url, &[&format!("--screenshot={}", path.display())]);
    let png = std::fs::read(&path).unwrap_or_else(|e| panic!("no screenshot at {path:?}: {e}"));
    match shows_the_dashboard(&decode_png(&png)) {
        Ok(seen) => eprintln!("dashboard screenshot: {}: {seen}", path.display()),
        Err(seen) => panic!("{path:?} does not show the dashboard drawn from /stats: {seen}"),
    }
}

#[test]
fn the_dashboard_agrees_with_stats() {
    for runtime in RUNTIMES {
        let server = Server::start(runtime, |_| {});
        let shot = format!("dashboard-{runtime}.png");
        renders_under_load(server.addr(), runtime.slots(), &shot);
    }
}
