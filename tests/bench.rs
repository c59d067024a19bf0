//! `fiberstack bench --quick` end to end: the real binary splits the cores, starts a
//! private MariaDB and each of the three servers in turn (fibers, async, raw
//! minihttp), ab and wrk against each, and writes the table, the Markdown and the
//! chart. Needs `mariadbd`, `ab`, `wrk` and `taskset` (scripts/install-deps); about 20 s.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_quick_bench_measures_three_runtimes_pinned_and_writes_its_results() {
    let out = std::env::temp_dir().join(format!("fiberstack-bench-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let started = Instant::now();
    let run = Command::new(env!("CARGO_BIN_EXE_fiberstack"))
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .output()
        .expect("run fiberstack bench");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{}\n{stdout}\n{stderr}", run.status);
    assert!(took < Duration::from_secs(90), "--quick took {took:?}");

    // The core split, then the table: every column, a row per runtime and scenario.
    let split = stdout
        .lines()
        .find(|l| l.starts_with("core split:"))
        .unwrap_or_else(|| panic!("no split line:\n{stdout}"));
    let usable = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    if usable.trim() == "0" {
        assert!(split.contains("one usable cpu"), "{split}");
    } else {
        assert!(split.contains("taskset -c"), "{split}");
    }
    for column in [
        "runtime",
        "route",
        "concurrency",
        "served/s median",
        "min-max",
        "p50",
        "p99",
        "failed",
        "server RSS",
        "CPU",
        "of ceiling C/S",
        "of expected",
        "fibers/this",
    ] {
        assert!(stdout.contains(column), "no {column} column:\n{stdout}");
    }
    // The main table comes first; the CPU table of the CPU-bound scenarios after it.
    let (main, cpu) = stdout
        .split_once("Server CPU per served request")
        .unwrap_or_else(|| panic!("no server CPU table:\n{stdout}"));
    let rows: Vec<&str> = runtime_lines(main)
        .filter(|l| !l.contains("per in-flight request") && !l.contains("per idle keep-alive"))
        .collect();
    assert_eq!(rows.len(), 15, "5 scenarios x 3 runtimes:\n{stdout}");
    // The idle keep-alive rows have no rate, latency or ratio: only memory, below.
    let (idle, rows): (Vec<&str>, Vec<&str>) =
        rows.iter().partition(|r| r.contains("idle keep-alive"));
    assert_eq!(idle.len(), 3, "{stdout}");
    for row in &idle {
        assert!(!row.contains("error") && !row.contains("not run"), "{row}");
    }
    let (skipped, measured): (Vec<&str>, Vec<&str>) =
        rows.iter().partition(|r| r.contains("not run: "));
    // minihttp leaves out ab (it hangs) and /widgets/http (no such route), and says so.
    assert_eq!(skipped.len(), 2, "{stdout}");
    assert!(
        skipped.iter().all(|r| r.starts_with("minihttp ")),
        "{stdout}"
    );
    assert!(stdout.contains("not run: ab hangs"), "{stdout}");
    assert_eq!(
        measured
            .iter()
            .filter(|r| r.starts_with("minihttp "))
            .count(),
        2,
        "minihttp runs /hello and /widgets:\n{stdout}"
    );
    for row in &measured {
        assert!(!row.contains("error"), "a scenario failed: {row}\n{stderr}");
        // min-max of the one round: a single value twice.
        assert!(
            row.split_whitespace().any(|c| {
                let mut it = c.split('-');
                matches!((it.next(), it.next(), it.next()), (Some(a), Some(b), None)
                    if a == b && a.parse::<f64>().is_ok())
            }),
            "no min-max: {row}"
        );
        // Rows of the other runtimes carry fibers' per-round ratio to them.
        let ratio = row.contains("x (");
        assert_eq!(ratio, !row.starts_with("fibers "), "ratio: {row}");
    }
    // The sleeping routes reach most of the expected figure on every runtime: a
    // server that serialised requests would be far below it. (The second "% of"
    // of a row; the first is the ceiling C/S.)
    let of_expected: Vec<f64> = measured
        .iter()
        .filter_map(|r| r.split("% of ").nth(1)?.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(of_expected.len(), 7, "{stdout}");
    assert!(
        of_expected.iter().all(|f| *f > 70.0),
        "{of_expected:?}\n{stdout}"
    );
    // What each server spent per /hello request: a figure per runtime, above zero
    // (it served thousands of requests in the run) and far below a millisecond (a
    // debug build on a shared core spends tens of microseconds). The load tool's own
    // use is there too, in % of its cpus.
    for column in [
        "server CPU/request",
        "user",
        "kernel",
        "this/fibers",
        "load tool CPU",
    ] {
        assert!(cpu.contains(column), "no {column} column:\n{cpu}");
    }
    let cpu_rows: Vec<&str> = runtime_lines(cpu)
        .filter(|l| l.contains(" /hello "))
        .collect();
    assert_eq!(cpu_rows.len(), 3, "hello-16 x 3 runtimes:\n{cpu}");
    for row in &cpu_rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        // The first figure in us is the median of user + kernel; user and kernel follow.
        let us: Vec<f64> = cells
            .windows(2)
            .filter(|w| w[1] == "us")
            .filter_map(|w| w[0].parse().ok())
            .collect();
        assert_eq!(us.len(), 3, "median, user, kernel: {row}");
        assert!(
            us[0] > 0.0 && us[0] < 1000.0,
            "server CPU per request: {row}"
        );
        assert!(
            (us[1] + us[2] - us[0]).abs() < 0.02 && us[1] >= 0.0 && us[2] > 0.0,
            "user + kernel: {row}"
        );
        let load_pct: f64 = row
            .split("% of ")
            .next()
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no load tool CPU: {row}"));
        assert!(load_pct > 0.0 && load_pct < 150.0, "load tool CPU: {row}");
        assert_eq!(
            row.contains("x ("),
            !row.starts_with("fibers "),
            "ratio: {row}"
        );
    }
    // The progress line went to stderr: 5 + 5 + 3 measurements.
    assert!(
        stderr.contains("bench [") && stderr.contains("13/13"),
        "{stderr}"
    );
    assert!(stdout.contains("KiB per in-flight request"), "{stdout}");
    let per_idle: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.strip_suffix(" KiB per idle keep-alive connection"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(per_idle.len(), 3, "a figure per runtime:\n{stdout}");
    // A connection holds at least its socket's state on the server, and far less than
    // a megabyte.
    assert!(
        per_idle.iter().all(|k| (0.5..1024.0).contains(k)),
        "{per_idle:?}\n{stdout}"
    );

    // The files: one timestamped directory with the Markdown and the chart.
    let dirs: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let md = std::fs::read_to_string(dirs[0].join("bench.md")).unwrap();
    assert!(md.contains("| runtime | route | concurrency |"), "{md}");
    // The main table, then the CPU table (the one CPU-bound scenario).
    let (md_main, md_cpu) = md
        .split_once("## Server CPU per request")
        .unwrap_or_else(|| panic!("no server CPU section:\n{md}"));
    assert!(md_cpu.contains("| server CPU/request |"), "{md}");
    for runtime in ["fibers", "async", "minihttp"] {
        let rows = |part: &str, route| part.matches(&format!("\n| {runtime} | {route}")).count();
        assert_eq!(rows(md_main, "/"), 5, "{runtime}: {md}");
        assert_eq!(rows(md_cpu, "/hello |"), 1, "{runtime}: {md}");
        assert!(md.contains(&format!("runtime {runtime}")), "{md}");
    }
    assert!(
        md.contains("core split:") && md.contains("Commit: "),
        "{md}"
    );
    // Each round's CPU figures for the CPU-bound scenario, on each runtime; none for
    // the sleeping ones, whose few requests the clock ticks cannot divide.
    let rounds = md
        .split_once("## Every round (server CPU per served request")
        .unwrap_or_else(|| panic!("no per-round CPU figures:\n{md}"))
        .1;
    assert_eq!(rounds.matches(" kernel), wrk ").count(), 3, "{rounds}");
    assert_eq!(rounds.matches(" kernel), ab ").count(), 0, "{rounds}");
    let svg = std::fs::read_to_string(dirs[0].join("bench.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for panel in ["Served req/s", "Latency", "Memory per connection"] {
        assert!(svg.contains(panel), "no {panel} panel");
    }
    assert!(svg.contains("not run: ab hangs"), "{svg}");
    assert!(!svg.contains("no result"), "{svg}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The lines of `text` that start with a runtime's name.
fn runtime_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| {
        ["fibers ", "async ", "minihttp "]
            .iter()
            .any(|r| l.starts_with(r))
    })
}

/// Cpus that do not exist, or that both sides claim, are refused before anything
/// starts, with a message naming the flag.
#[test]
fn bad_core_splits_are_refused_by_flag() {
    let refused = |args: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_fiberstack"))
            .args(["bench", "--quick", "--out", "/nonexistent/never-written"])
            .args(args)
            .output()
            .expect("run fiberstack bench");
        assert!(!run.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&run.stderr).into_owned()
    };
    let e = refused(&["--server-cpus", "4096"]);
    assert!(
        e.contains("--server-cpus 4096") && e.contains("does not exist"),
        "{e}"
    );
    let e = refused(&["--load-cpus", "0-4096"]);
    assert!(e.contains("--load-cpus 0-4096"), "{e}");
    let e = refused(&["--server-cpus", "0", "--load-cpus", "0"]);
    assert!(
        e.contains("--server-cpus and --load-cpus overlap on cpu 0"),
        "{e}"
    );
}
