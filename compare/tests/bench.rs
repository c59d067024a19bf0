//! `compare bench --quick` end to end: the real binary splits the cores, starts a
//! private MariaDB and each of the three servers in turn (fibers, async, raw
//! minihttp), ab and wrk against each, the CPU-bound rows under a CPU quota where the
//! rule gives one, and writes the table, the Markdown and the chart. Then what it
//! refuses before starting anything: bad quotas, a cgroup it cannot write, limits too
//! small for a row (smaller limits given through `--proc-sys` and a shell's `ulimit`);
//! and the quota's cgroup removed after a Ctrl-C. Needs `mariadbd`, `ab`, `wrk`,
//! `taskset` and `prlimit` (scripts/install-deps), and root for the quota; about 40 s.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tests that start servers take turns: on two cores, one's wrk would be the
/// other's noise (nextest runs each test in a process of its own, at once).
fn servers_to_myself() -> File {
    let lock = File::create(std::env::temp_dir().join("fiberstack-bench-tests.lock"))
        .expect("create the lock file");
    lock.lock().expect("lock the lock file");
    lock
}

#[test]
fn a_quick_bench_measures_three_runtimes_pinned_and_writes_its_results() {
    let _turn = servers_to_myself();
    let out = std::env::temp_dir().join(format!("fiberstack-bench-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // The rule's quota where a cgroup can be made, none where it cannot (the bench
    // would refuse to start: a_cgroup_it_cannot_write_is_refused_naming_the_flag).
    let quota_arg: &[&str] = if can_hold_a_quota() {
        &[]
    } else {
        &["--server-quota", "off"]
    };
    let started = Instant::now();
    let run = Command::new(env!("CARGO_BIN_EXE_compare"))
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .args(quota_arg)
        .output()
        .expect("run compare bench");
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
    // The quota line: the rule's choice (40% of a cpu where the load tools have no
    // more cpus than the server, as on two cores) and why.
    let quota_line = stdout
        .lines()
        .find(|l| l.starts_with("quota: "))
        .unwrap_or_else(|| panic!("no quota line:\n{stdout}"));
    assert!(
        quota_line.contains("--server-quota auto") || quota_line.contains("--server-quota off"),
        "{quota_line}"
    );
    let quota = quota_line
        .contains("hold the server to 40% of one cpu")
        .then_some(40);
    if quota.is_some() {
        assert!(
            quota_line.contains("cgroup v") && quota_line.contains("fiberstack-bench-"),
            "{quota_line}"
        );
    }
    // The main table comes first; the CPU table of the CPU-bound scenarios after it.
    // Each is read by its structure (the header, the dashes that give each column's
    // span, the rows up to the blank line), so the notes printed around the tables
    // can say anything without being taken for rows.
    let (main, cpu) = stdout
        .split_once("Server CPU per served request")
        .unwrap_or_else(|| panic!("no server CPU table:\n{stdout}"));
    let main = Table::first_in(main);
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
        "quota",
        "of ceiling C/S",
        "of expected",
        "fibers/this",
    ] {
        assert!(
            main.header.iter().any(|h| h == column),
            "no {column} column:\n{stdout}"
        );
    }
    assert_eq!(main.rows.len(), 24, "8 scenarios x 3 runtimes:\n{stdout}");
    // The idle keep-alive rows have no rate, latency or ratio: only memory, below.
    let (idle, rows): (Vec<&Row>, Vec<&Row>) = main
        .rows
        .iter()
        .partition(|r| r.get("load") == "idle keep-alive");
    assert_eq!(idle.len(), 3, "{stdout}");
    for row in &idle {
        assert_eq!(row.get("served/s median"), "-", "{row:?}");
        assert_eq!(row.get("failed"), "0", "{row:?}");
    }
    let (skipped, measured): (Vec<&Row>, Vec<&Row>) = rows
        .iter()
        .partition(|r| r.get("served/s median").starts_with("not run: "));
    // minihttp leaves out ab (it hangs), /widgets/http and /sleep (no such routes), and
    // says so; fibers and the twin run /sleep where the demo has it, and say so where
    // it does not (a 404 to the probe).
    let sleep_missing = skipped
        .iter()
        .filter(|r| r.get("runtime") != "minihttp")
        .inspect(|r| {
            assert!(r.get("route").starts_with("/sleep"), "{r:?}");
            assert!(
                r.get("served/s median")
                    .contains("has no such route (GET /sleep?secs=0 answered 404)"),
                "{r:?}"
            );
        })
        .count();
    assert!(sleep_missing == 0 || sleep_missing == 2, "{stdout}");
    assert_eq!(skipped.len(), 3 + sleep_missing, "{stdout}");
    assert!(
        skipped
            .iter()
            .any(|r| r.get("served/s median").starts_with("not run: ab hangs")),
        "{stdout}"
    );
    assert_eq!(
        measured
            .iter()
            .filter(|r| r.get("runtime") == "minihttp")
            .count(),
        4,
        "minihttp runs /hello and /widgets, twice each:\n{stdout}"
    );
    for row in &measured {
        let served: f64 = row.get("served/s median").parse().unwrap_or_else(|_| {
            panic!("a scenario failed: {row:?}\n{stderr}");
        });
        assert!(served > 0.0, "{row:?}");
        // min-max of the one round: a single value twice.
        assert_eq!(
            row.get("min-max"),
            format!("{0}-{0}", row.get("served/s median")),
            "{row:?}"
        );
        // Rows of the other runtimes carry fibers' per-round ratio to them.
        let ratio = row.get("fibers/this");
        assert_eq!(ratio == "-", row.get("runtime") == "fibers", "{row:?}");
        assert!(ratio == "-" || ratio.contains("x ("), "ratio: {row:?}");
        // The quota holds the /hello rows only, and each says how much of it its
        // server used.
        match (row.get("route"), quota) {
            ("/hello", Some(pct)) => quota_used(row.get("quota"), pct),
            _ => assert_eq!(row.get("quota"), "-", "{row:?}"),
        }
    }
    // The sleeping routes reach at least half the expected figure on every runtime
    // (a debug build on a loaded machine has reached 67%): a server that serialised
    // requests would reach about one in c of it: 30% on ab's 10 requests at -c 5,
    // 10% or less on the wrk rows.
    let of_expected: Vec<f64> = measured
        .iter()
        .filter_map(|r| r.get("of expected").split('%').next()?.parse().ok())
        .collect();
    assert_eq!(
        of_expected.len(),
        10 + sleep_missing.abs_diff(2),
        "{stdout}"
    );
    assert!(
        of_expected.iter().all(|f| *f > 50.0),
        "{of_expected:?}\n{stdout}"
    );
    // What each server spent per /hello request: a figure per runtime, above zero
    // (it served thousands of requests in the run) and far below a millisecond (a
    // debug build on a shared core spends tens of microseconds). The load tool's own
    // use is there too, in % of its cpus.
    let cpu = Table::first_in(cpu);
    for column in [
        "server CPU/request",
        "user",
        "kernel",
        "this/fibers",
        "load tool CPU",
        "quota",
    ] {
        assert!(
            cpu.header.iter().any(|h| h == column),
            "no {column} column:\n{stdout}"
        );
    }
    assert_eq!(
        cpu.rows.len(),
        6,
        "hello-16 and hello-200 x 3 runtimes:\n{stdout}"
    );
    for row in &cpu.rows {
        assert_eq!(row.get("route"), "/hello", "{row:?}");
        match quota {
            Some(pct) => quota_used(row.get("quota"), pct),
            None => assert_eq!(row.get("quota"), "-", "{row:?}"),
        }
        let us = |column: &str| -> f64 {
            let cell = row.get(column);
            cell.strip_suffix(" us")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{column} is not a figure in us: {row:?}"))
        };
        let (total, user, kernel) = (us("server CPU/request"), us("user"), us("kernel"));
        assert!(
            total > 0.0 && total < 1000.0,
            "server CPU per request: {row:?}"
        );
        assert!(
            (user + kernel - total).abs() < 0.02 && user >= 0.0 && kernel > 0.0,
            "user + kernel: {row:?}"
        );
        let load_pct: f64 = row
            .get("load tool CPU")
            .split('%')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no load tool CPU: {row:?}"));
        assert!(load_pct > 0.0 && load_pct < 150.0, "load tool CPU: {row:?}");
        let ratio = row.get("this/fibers");
        assert_eq!(ratio == "-", row.get("runtime") == "fibers", "{row:?}");
        assert!(ratio == "-" || ratio.contains("x ("), "ratio: {row:?}");
    }
    // The progress line went to stderr: 8 + 8 + 5 measurements (a /sleep the server
    // turned out not to have counts as one).
    assert!(
        stderr.contains("bench [") && stderr.contains("21/21"),
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
        assert_eq!(rows(md_main, "/"), 8, "{runtime}: {md}");
        assert_eq!(rows(md_cpu, "/hello |"), 2, "{runtime}: {md}");
        // Each server's start-up line is in the results: the fiber server's (the
        // framework's) names its fibers, the rig's their runtime.
        let banner = match runtime {
            "fibers" => "fibers x 128KiB stack".to_string(),
            other => format!("runtime {other}"),
        };
        assert!(md.contains(&banner), "{md}");
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
    assert_eq!(rounds.matches(" kernel), wrk ").count(), 6, "{rounds}");
    if let Some(pct) = quota {
        assert_eq!(
            rounds.matches(&format!(", quota {pct}% used ")).count(),
            6,
            "{rounds}"
        );
    }
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

/// A `quota` cell of a row held to `pct`% of a cpu: `40%, used 98%`, the use a figure
/// (a busy machine can keep the server below its quota; the bench then says so).
fn quota_used(cell: &str, pct: u32) {
    let used: f64 = cell
        .strip_prefix(&format!("{pct}%, used "))
        .and_then(|u| u.strip_suffix('%'))
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("not a quota of {pct}% with its use: {cell:?}"));
    assert!(used > 0.0 && used < 150.0, "{cell}");
}

/// A table the bench prints: a header line, a line of dashes under each column, then
/// one line per row up to the first blank line. Each column spans from the start of
/// its dashes to the start of the next column's, so a cell may hold spaces.
#[derive(Debug)]
struct Table {
    header: Vec<String>,
    rows: Vec<Row>,
}

/// One row of a [`Table`]: its cells by column name.
#[derive(Debug)]
struct Row(Vec<(String, String)>);

impl Row {
    /// The cell of `column` (trimmed), or a failure naming the row.
    fn get(&self, column: &str) -> &str {
        self.0
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {column} column in {self:?}"))
    }
}

impl Table {
    /// The first table in `text`: the first line of dashes and spaces, with its header
    /// above it.
    fn first_in(text: &str) -> Table {
        let lines: Vec<&str> = text.lines().collect();
        let is_rule = |l: &str| l.starts_with('-') && l.chars().all(|c| c == '-' || c == ' ');
        let rule_at = lines
            .iter()
            .position(|l| is_rule(l))
            .unwrap_or_else(|| panic!("no table in:\n{text}"));
        assert!(rule_at > 0, "a rule without a header:\n{text}");
        let rule = lines[rule_at];
        // Where each column starts: where a run of dashes starts.
        let starts: Vec<usize> = rule
            .char_indices()
            .filter(|&(i, c)| c == '-' && (i == 0 || rule.as_bytes()[i - 1] == b' '))
            .map(|(i, _)| i)
            .collect();
        let cells = |line: &str| -> Vec<String> {
            (0..starts.len())
                .map(|k| {
                    let from = starts[k].min(line.len());
                    let to = starts.get(k + 1).map_or(line.len(), |&e| e.min(line.len()));
                    line.get(from..to).unwrap_or("").trim().to_string()
                })
                .collect()
        };
        let header = cells(lines[rule_at - 1]);
        let rows = lines[rule_at + 1..]
            .iter()
            .take_while(|l| !l.trim().is_empty())
            .map(|l| Row(header.iter().cloned().zip(cells(l)).collect()))
            .collect();
        Table { header, rows }
    }
}

/// Cpus that do not exist, or that both sides claim, are refused before anything
/// starts, with a message naming the flag.
#[test]
fn bad_core_splits_are_refused_by_flag() {
    let refused = |args: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_compare"))
            .args(["bench", "--quick", "--out", "/nonexistent/never-written"])
            .args(args)
            .output()
            .expect("run compare bench");
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

/// `compare bench ARGS`, refused before it starts anything: its stderr. `--out`
/// names a directory that cannot be made, so a bench that started would fail there.
fn refused(args: &[&str]) -> String {
    refused_under(None, args)
}

/// The same under `sh -c 'ULIMIT && exec compare bench ARGS'`, so that the bench
/// has the open-files limit the shell set.
fn refused_under(ulimit: Option<&str>, args: &[&str]) -> String {
    let bin = env!("CARGO_BIN_EXE_compare");
    let mut cmd = match ulimit {
        Some(u) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("{u} && exec \"$0\" \"$@\""))
                .arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let run = cmd
        .arg("bench")
        .args(["--out", "/nonexistent/never-written"])
        .args(args)
        .output()
        .expect("run compare bench");
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(!run.status.success(), "{args:?} was accepted:\n{stderr}");
    assert!(
        !stderr.contains("bench ["),
        "{args:?} started measuring:\n{stderr}"
    );
    stderr
}

/// A quota that is no share of a cpu is refused by clap, naming the flag and what to give.
#[test]
fn quotas_outside_1_to_100_are_refused_naming_the_flag() {
    for bad in ["0", "101"] {
        let e = refused(&["--quick", "--server-quota", bad]);
        assert!(
            e.contains("--server-quota") && e.contains("give 1-100") && e.contains("off"),
            "{bad}: {e}"
        );
    }
}

/// A cgroup root that is none: absent, or a plain directory laid out like cgroup v1
/// (writable here, but the kernel makes no interface files in it). The bench refuses
/// before it starts anything, names `--server-quota` and what to do, and leaves no
/// directory of its own behind.
#[test]
fn a_cgroup_it_cannot_write_is_refused_naming_the_flag() {
    let e = refused(&[
        "--quick",
        "--server-quota",
        "40",
        "--cgroup-root",
        "/nonexistent/cgroup",
    ]);
    assert!(
        e.contains("--server-quota 40: cannot hold the server to 40% of a cpu")
            && e.contains("no cgroup cpu controller at /nonexistent/cgroup")
            && e.contains("--server-quota off"),
        "{e}"
    );
    let fake = std::env::temp_dir().join(format!("fiberstack-fake-cgroup-{}", std::process::id()));
    std::fs::create_dir_all(fake.join("cpu")).unwrap();
    std::fs::write(fake.join("cpu/cpu.cfs_quota_us"), "-1\n").unwrap();
    let root = fake.to_str().unwrap();
    // An explicit quota, so that the refusal does not depend on this machine's cpus
    // (auto gives none where the load tools have more cpus than the server).
    let e = refused(&[
        "--quick",
        "--only",
        "hello-16",
        "--cgroup-root",
        root,
        "--server-quota",
        "40",
    ]);
    assert!(
        e.contains("--server-quota 40: cannot hold") && e.contains("is not a cgroup"),
        "{e}"
    );
    let left: Vec<_> = std::fs::read_dir(fake.join("cpu")).unwrap().collect();
    assert_eq!(
        left.len(),
        1,
        "only the fake interface file is left: {left:?}"
    );
    std::fs::remove_dir_all(&fake).unwrap();
}

/// A directory laid out like /proc/sys with the given sysctls.
fn fake_proc_sys(tag: &str, somaxconn: u32, ports: &str, max_map_count: u32) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("fiberstack-proc-sys-{tag}-{}", std::process::id()));
    for (file, value) in [
        ("net/core/somaxconn", somaxconn.to_string()),
        ("net/ipv4/ip_local_port_range", ports.to_string()),
        ("vm/max_map_count", max_map_count.to_string()),
    ] {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
    }
    dir
}

/// Limits too small for the rows asked for: each is named with the command that raises
/// it, before anything starts, and a bench with no row left refuses to start.
#[test]
fn limits_too_small_are_named_with_the_command_that_raises_them() {
    let tiny = fake_proc_sys("tiny", 8, "40000\t40109", 1200);
    let e = refused(&[
        "--quick",
        "--only",
        "hello",
        "--proc-sys",
        tiny.to_str().unwrap(),
    ]);
    for line in [
        // 16 and 200 connections to one address, and 110 ports.
        "preflight: hello-16 not run on fibers, async, minihttp: local ports (net.ipv4.ip_local_port_range): 16 connections to one address need about 116 ports, the range 40000-40109 has 110; raise it: `sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"`",
        "preflight: hello-200 not run on fibers, async, minihttp: local ports",
        // 200 fibers and 200 connection stacks, two mappings each.
        "preflight: hello-200 not run on fibers: memory mappings (vm.max_map_count): fibers needs about 1800 (200 fiber and 200 connection stacks, 2 mappings each, + 1000), the limit is 1200; raise it: `sysctl -w vm.max_map_count=262144`",
        "preflight: hello-200 not run on minihttp: memory mappings (vm.max_map_count): minihttp needs about 1400",
        // A listen queue of 8 is only a warning: the row would run.
        "preflight: hello-16 on fibers, async, warning: the listen queue (net.core.somaxconn) is 8, below the 16 of the 16 connections opened at once that the server asks to queue (4096)",
        "raise it: `sysctl -w net.core.somaxconn=4096`",
        "nothing left to run",
    ] {
        assert!(e.contains(line), "no `{line}` in:\n{e}");
    }

    // Open files, with a hard limit the shell lowered: MariaDB's connections and tables
    // are the most any process of idle-200 holds.
    let e = refused_under(Some("ulimit -n 400"), &["--quick", "--only", "idle-200"]);
    assert!(
        e.contains("preflight: idle-200 not run on fibers, async, minihttp: open files (`ulimit -n`): MariaDB needs about 840 (10 + 20 connections + 810); the hard limit `ulimit -Hn` is 400: "),
        "{e}"
    );
    assert!(
        e.contains("it cannot be raised here") || e.contains("raise it: `ulimit -n 840` as root"),
        "{e}"
    );
    // A soft limit below the hard one is raised for the bench's children, and is no
    // finding (the ports are what stop idle-200 here).
    let e = refused_under(
        Some("ulimit -Sn 400"),
        &[
            "--quick",
            "--only",
            "idle-200",
            "--proc-sys",
            tiny.to_str().unwrap(),
        ],
    );
    assert!(
        e.contains("preflight: raised the soft open-files limit from 400 to "),
        "{e}"
    );
    assert!(!e.contains("open files (`ulimit -n`)"), "{e}");
    assert!(
        e.contains("idle-200 not run on fibers, async, minihttp: local ports"),
        "{e}"
    );

    // This machine as the full run meets it: 20000 open files, the kernel's default
    // ports and mappings. 50,000 idle connections fit none of them.
    let here = fake_proc_sys("here", 4096, "32768 60999", 65530);
    let e = refused_under(
        Some("ulimit -n 20000"),
        &["--only", "idle-50000", "--proc-sys", here.to_str().unwrap()],
    );
    for line in [
        "preflight: idle-50000 not run on fibers, async, minihttp: open files (`ulimit -n`): the server needs about 50210 (50000 client + 10 MySQL connections + 200)",
        "preflight: idle-50000 not run on fibers, async, minihttp: local ports (net.ipv4.ip_local_port_range): 50000 connections to one address need about 50100 ports, the range 32768-60999 has 28232",
        "preflight: idle-50000 not run on fibers: memory mappings (vm.max_map_count): fibers needs about 101200",
    ] {
        assert!(e.contains(line), "no `{line}` in:\n{e}");
    }
    for dir in [tiny, here] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// Whether this process may create cgroups with a CPU quota here (root, and a v2 cpu
/// controller or a v1 cpu hierarchy).
fn can_hold_a_quota() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let cgroup = Path::new("/sys/fs/cgroup");
    root && (cgroup.join("cgroup.controllers").is_file()
        || cgroup.join("cpu/cpu.cfs_quota_us").is_file())
}

/// Ctrl-C in the terminal (SIGINT to the bench's process group) while a quota'd row
/// runs: the bench dies before any `Drop`, yet its server stops and the quota's cgroup
/// is removed.
#[test]
fn a_ctrl_c_mid_row_leaves_no_cgroup_behind() {
    if !can_hold_a_quota() {
        eprintln!("skipped: no cgroup with a CPU quota can be made here (root and cgroup cpu)");
        return;
    }
    let _turn = servers_to_myself();
    let out = std::env::temp_dir().join(format!("fiberstack-bench-ctrl-c-{}", std::process::id()));
    let mut bench = Command::new(env!("CARGO_BIN_EXE_compare"))
        .args([
            "bench",
            "--quick",
            "--only",
            "hello-16",
            "--server-quota",
            "40",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // A process group of its own, as a terminal's job is: the SIGINT below reaches
        // the bench and its servers, not this test.
        .process_group(0)
        .spawn()
        .expect("run compare bench");
    let name = format!("fiberstack-bench-{}", bench.id());
    let cgroup = Path::new("/sys/fs/cgroup");
    let group = [cgroup.join(&name), cgroup.join("cpu").join(&name)];
    let procs = || -> Vec<u32> {
        group
            .iter()
            .filter_map(|g| std::fs::read_to_string(g.join("cgroup.procs")).ok())
            .flat_map(|t| {
                t.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let server = loop {
        if let Some(pid) = procs().first() {
            break *pid;
        }
        assert!(
            bench.try_wait().unwrap().is_none() && Instant::now() < deadline,
            "no server entered {name}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let interrupted = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", bench.id())])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let status = bench.wait().unwrap();
    assert!(!status.success(), "the bench was interrupted: {status}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while group.iter().any(|g| g.exists()) {
        assert!(
            Instant::now() < deadline,
            "{name} is still there after the Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !Path::new(&format!("/proc/{server}")).exists()
            || std::fs::read_to_string(format!("/proc/{server}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "the server {server} outlived the bench"
    );
    let _ = std::fs::remove_dir_all(&out);
}
