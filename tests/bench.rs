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
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            ["fibers ", "async ", "minihttp "]
                .iter()
                .any(|r| l.starts_with(r))
        })
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
    for runtime in ["fibers", "async", "minihttp"] {
        assert_eq!(
            md.matches(&format!("\n| {runtime} | /")).count(),
            5,
            "{runtime}: {md}"
        );
        assert!(md.contains(&format!("runtime {runtime}")), "{md}");
    }
    assert!(
        md.contains("core split:") && md.contains("Commit: "),
        "{md}"
    );
    let svg = std::fs::read_to_string(dirs[0].join("bench.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for panel in ["Served req/s", "Latency", "Memory per connection"] {
        assert!(svg.contains(panel), "no {panel} panel");
    }
    assert!(svg.contains("not run: ab hangs"), "{svg}");
    assert!(!svg.contains("no result"), "{svg}");
    let _ = std::fs::remove_dir_all(&out);
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
