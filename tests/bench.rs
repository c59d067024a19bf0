//! `fiberstack bench --quick` end to end: the real binary starts a private MariaDB,
//! both servers in turn, ab and wrk against each, and writes the table, the Markdown
//! and the chart. Needs `mariadbd`, `ab` and `wrk` (scripts/install-deps); about 15 s.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_quick_bench_measures_both_runtimes_and_writes_its_results() {
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
    assert!(took < Duration::from_secs(60), "--quick took {took:?}");

    // The table on stdout: every column, a row per runtime and scenario, all measured.
    for column in [
        "runtime",
        "route",
        "concurrency",
        "req/s",
        "p50",
        "p99",
        "failed",
        "server RSS",
        "CPU",
        "of bound",
        "fibers/async",
    ] {
        assert!(stdout.contains(column), "no {column} column:\n{stdout}");
    }
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("fibers ") || l.starts_with("async "))
        .filter(|l| !l.contains("per in-flight request"))
        .collect();
    assert_eq!(rows.len(), 8, "4 scenarios x 2 runtimes:\n{stdout}");
    for row in &rows {
        assert!(!row.contains("error"), "a scenario failed: {row}\n{stderr}");
        // Each scenario has a fiber/async ratio.
        assert!(row.trim_end().ends_with('x'), "no ratio: {row}");
    }
    // The sleeping routes reach most of their physical bound on both runtimes: a
    // server that serialised requests would be far below it.
    let of_bound: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.split("% of ").next()?.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(of_bound.len(), 6, "{stdout}");
    assert!(of_bound.iter().all(|f| *f > 70.0), "{of_bound:?}\n{stdout}");
    // The progress line went to stderr.
    assert!(
        stderr.contains("bench [") && stderr.contains("8/8"),
        "{stderr}"
    );
    assert!(stdout.contains("KiB per in-flight request"), "{stdout}");

    // The files: one timestamped directory with the Markdown and the chart.
    let dirs: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let md = std::fs::read_to_string(dirs[0].join("bench.md")).unwrap();
    assert!(md.contains("| runtime | route | concurrency |"), "{md}");
    assert_eq!(md.matches("\n| fibers | /").count(), 4, "{md}");
    assert_eq!(md.matches("\n| async | /").count(), 4, "{md}");
    assert!(
        md.contains("runtime async,") && md.contains("runtime fibers,"),
        "{md}"
    );
    let svg = std::fs::read_to_string(dirs[0].join("bench.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<rect x=\"250\"").count(),
        8,
        "two bars per scenario"
    );
    assert!(!svg.contains("no result"), "{svg}");
    let _ = std::fs::remove_dir_all(&out);
}
