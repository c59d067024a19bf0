//! Checks before a bench starts anything: the load tools are installed, and each row it
//! is asked to run fits this machine's limits. A row that does not fit is not run, on
//! the runtimes it does not fit, and says which limit stopped it; the preflight prints
//! each such limit with the command that raises it, or says that it cannot be raised
//! here. A bench with no row left refuses to start.
//!
//! The limits, per row of C connections (and P MySQL connections, F fibers):
//!
//! | limit | who needs it | how much |
//! |---|---|---|
//! | `ulimit -n` (RLIMIT_NOFILE) | each process: the server, wrk or the bench's own idle client, MariaDB | C + P + 200 in the server |
//! | `net.ipv4.ip_local_port_range` | the client side: C connections to one address | C + 100 ports |
//! | `vm.max_map_count` | fibers and may_minihttp: two mappings a stack (its guard splits it) | 2 x (F + C) + 1000 |
//! | `net.core.somaxconn` | the server's listen queue, which wrk's C connects at once fill | min(C, the backlog asked for); only a warning |
//!
//! The soft open-files limit is raised to the hard one first where a row needs more
//! (children inherit it: the servers, MariaDB, wrk). The sysctls are read from
//! /proc/sys, or from the directory `--proc-sys` names (laid out the same way), so
//! that a test can give limits this machine does not have.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use compare::Runtime;
use fiber_mysql::launcher::CONNECTION_HEADROOM;

use crate::bench::scenario::{Load, Scenario};
use crate::bench::RUNTIMES;

/// File descriptors a process needs beyond its client and MySQL connections.
const FD_SLACK: usize = 200;
/// Files MariaDB keeps beyond its connections: with fewer, it lowers `max_connections`
/// to (open files - 10 - twice its smallest table cache of 400) at start.
const MARIADB_FD_SLACK: usize = 810;
/// Local ports beyond the connections of a row (the bench's `/stats` reads, MySQL).
const PORT_SLACK: usize = 100;
/// Memory mappings of a process beyond its stacks: libraries, heaps, thread stacks.
const MAP_SLACK: usize = 1000;
/// Mappings a guarded stack costs: the guard page splits its reservation in two.
const MAPS_PER_STACK: usize = 2;
/// The most local ports Linux hands out (`1024 65535`).
const MOST_PORTS: usize = 64_512;
/// What `vm.max_map_count` is raised to at least (STACK_SIZES.md).
const MAP_COUNT_RAISED: usize = 262_144;

/// Where the sysctls are read unless `--proc-sys` says otherwise.
pub const DEFAULT_PROC_SYS: &str = "/proc/sys";

/// ab and wrk must be installed for the scenarios that use them.
pub fn check_tools(scenarios: &[Scenario]) -> Result<(), String> {
    let ab = scenarios.iter().any(|s| matches!(s.load, Load::Ab { .. }));
    let wrk = scenarios.iter().any(|s| matches!(s.load, Load::Wrk { .. }));
    for (tool, arg, needed) in [("ab", "-V", ab), ("wrk", "-v", wrk)] {
        if needed && Command::new(tool).arg(arg).output().is_err() {
            return Err(format!(
                "`{tool}` is not installed: apt-get install apache2-utils wrk (or scripts/install-deps)"
            ));
        }
    }
    Ok(())
}

/// The limits a row can run into, as this process sees them.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// RLIMIT_NOFILE, soft and hard (`u64::MAX` for unlimited).
    pub open_files: Option<(u64, u64)>,
    pub somaxconn: Option<usize>,
    /// `net.ipv4.ip_local_port_range`: the first and last port.
    pub port_range: Option<(usize, usize)>,
    pub max_map_count: Option<usize>,
    /// Where the sysctls were read.
    pub proc_sys: PathBuf,
}

impl Limits {
    /// This process's open-files limit, and the sysctls under `proc_sys`.
    pub fn read(proc_sys: &Path) -> Limits {
        let sysctl = |name: &str| std::fs::read_to_string(proc_sys.join(name)).ok();
        let number = |name: &str| sysctl(name)?.trim().parse().ok();
        Limits {
            open_files: open_files_limit(),
            somaxconn: number("net/core/somaxconn"),
            port_range: sysctl("net/ipv4/ip_local_port_range").and_then(|t| {
                let mut it = t.split_whitespace().map(|n| n.parse().ok());
                Some((it.next()??, it.next()??))
            }),
            max_map_count: number("vm/max_map_count"),
            proc_sys: proc_sys.to_path_buf(),
        }
    }

    /// The command that raises `name` (`net.core.somaxconn`) to `value`, and whether
    /// it can work here: the file under /proc/sys can be opened for writing (opening
    /// it changes nothing).
    fn raise(&self, name: &str, value: &str) -> String {
        let path = self.proc_sys.join(name.replace('.', "/"));
        let command = format!("raise it: `sysctl -w {name}={value}`");
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(_) => command,
            Err(e) => format!(
                "{command}, which cannot work from here ({}: {e})",
                path.display()
            ),
        }
    }
}

/// What the preflight found for the rows it was asked about.
#[derive(Debug, Default)]
pub struct Preflight {
    /// Why a row does not run on a runtime, for the table's `not run:` cell.
    pub not_run: HashMap<(&'static str, Runtime), String>,
    /// What to print before anything starts: each limit too small for a row, with the
    /// command that raises it; warnings for rows that run anyway.
    pub lines: Vec<String>,
}

/// One limit too small for one row.
struct Finding {
    runtimes: Vec<Runtime>,
    /// For the table (`None`: a warning, the row runs).
    short: Option<String>,
    /// For the preflight line: the figures and what to do.
    long: String,
}

/// Check every row of `scenarios` on every runtime that would run it (`skipped` says
/// which would not, for their own reasons) against `limits`. `can_raise_files(n)` says
/// why the hard open-files limit cannot be raised to `n` here, if it cannot.
pub fn check_limits(
    scenarios: &[Scenario],
    limits: &Limits,
    skipped: &dyn Fn(&Scenario, Runtime) -> bool,
    can_raise_files: &dyn Fn(u64) -> Option<String>,
) -> Preflight {
    let mut out = Preflight::default();
    for s in scenarios {
        let runtimes: Vec<Runtime> = RUNTIMES.into_iter().filter(|r| !skipped(s, *r)).collect();
        if runtimes.is_empty() {
            continue;
        }
        for f in findings(s, &runtimes, limits, can_raise_files) {
            let on = f
                .runtimes
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            match &f.short {
                Some(short) => {
                    out.lines
                        .push(format!("preflight: {} not run on {on}: {}", s.name, f.long));
                    for r in &f.runtimes {
                        let reason = out.not_run.entry((s.name, *r)).or_default();
                        if !reason.is_empty() {
                            reason.push_str("; ");
                        }
                        reason.push_str(short);
                    }
                }
                None => out.lines.push(format!(
                    "preflight: {} on {on}, warning: {}",
                    s.name, f.long
                )),
            }
        }
    }
    for reason in out.not_run.values_mut() {
        reason.push_str(" (the preflight's lines say how to raise it)");
    }
    out
}

/// The limits too small for `s` on `runtimes`.
fn findings(
    s: &Scenario,
    runtimes: &[Runtime],
    limits: &Limits,
    can_raise_files: &dyn Fn(u64) -> Option<String>,
) -> Vec<Finding> {
    let c = s.load.concurrency();
    let pool = s.settings.db_pool;
    let mut found = Vec::new();

    // Open files: the process of the row that holds the most.
    let (who, need, detail) = open_files_need(s);
    if let Some((soft, hard)) = limits.open_files {
        if need > soft {
            let (short, what) = if need <= hard {
                (
                    format!("open files: `ulimit -n` is {soft}, {who} needs about {need}"),
                    format!(
                        "the soft limit is {soft} and the bench could not raise it to the hard \
                         limit {hard}: `ulimit -Sn {hard}` in the shell that starts the bench"
                    ),
                )
            } else {
                let how = match can_raise_files(need) {
                    None => format!(
                        "raise it: `ulimit -n {need}` as root in the shell that starts the \
                         bench (or `nofile` in /etc/security/limits.conf)"
                    ),
                    Some(why) => format!("it cannot be raised here ({why})"),
                };
                (
                    format!("open files: the hard limit is {hard}, {who} needs about {need}"),
                    format!("the hard limit `ulimit -Hn` is {hard}: {how}"),
                )
            };
            found.push(Finding {
                runtimes: runtimes.to_vec(),
                short: Some(short),
                long: format!(
                    "open files (`ulimit -n`): {who} needs about {need} ({detail}); {what}"
                ),
            });
        }
    }

    // Local ports: every client connection of the row goes to the one server address.
    if let Some((lo, hi)) = limits.port_range {
        let have = (hi + 1).saturating_sub(lo);
        let need = c.max(pool) + PORT_SLACK;
        if have < need {
            let how = if need <= MOST_PORTS {
                limits.raise("net.ipv4.ip_local_port_range", "\"1024 65535\"")
            } else {
                format!(
                    "no port range holds that many connections to one address ({MOST_PORTS} at \
                     most): it cannot be raised, the load would need more server addresses"
                )
            };
            found.push(Finding {
                runtimes: runtimes.to_vec(),
                short: Some(format!("local ports: {have}, {need} needed")),
                long: format!(
                    "local ports (net.ipv4.ip_local_port_range): {c} connections to one address \
                     need about {need} ports, the range {lo}-{hi} has {have}; {how}"
                ),
            });
        }
    }

    // Memory mappings: a guarded stack per fiber and per connection's coroutine on may.
    if let Some(max) = limits.max_map_count {
        for runtime in runtimes {
            let fibers = match runtime {
                Runtime::Fibers => s.settings.fibers,
                Runtime::Minihttp => 0,
                // tokio's tasks have no stacks of their own.
                Runtime::Async => continue,
            };
            let need = MAPS_PER_STACK * (fibers + c) + MAP_SLACK;
            if need > max {
                let raised = need.next_power_of_two().max(MAP_COUNT_RAISED);
                let stacks = match fibers {
                    0 => format!("{c} connection stacks"),
                    f => format!("{f} fiber and {c} connection stacks"),
                };
                found.push(Finding {
                    runtimes: vec![*runtime],
                    short: Some(format!("vm.max_map_count: {max}, {need} needed")),
                    long: format!(
                        "memory mappings (vm.max_map_count): {runtime} needs about {need} \
                         ({stacks}, {MAPS_PER_STACK} mappings each, + {MAP_SLACK}), the limit \
                         is {max}; {}",
                        limits.raise("vm.max_map_count", &raised.to_string())
                    ),
                });
            }
        }
    }

    // The listen queue: wrk and ab open their connections at once.
    if let (Some(somaxconn), false) = (limits.somaxconn, matches!(s.load, Load::Idle { .. })) {
        for runtime in runtimes {
            let asked = match runtime {
                Runtime::Minihttp => compare::mini::LISTEN_BACKLOG,
                _ => fiber_web::config::HttpLimits::default().listen_backlog as usize,
            };
            let queue = c.min(asked);
            if somaxconn < queue {
                found.push(Finding {
                    runtimes: vec![*runtime],
                    short: None,
                    long: format!(
                        "the listen queue (net.core.somaxconn) is {somaxconn}, below the \
                         {queue} of the {c} connections opened at once that the server asks \
                         to queue ({asked}): the rest wait for SYN retries, which the row \
                         then times; {}",
                        limits.raise("net.core.somaxconn", &asked.to_string())
                    ),
                });
            }
        }
    }
    merge_by_text(found)
}

/// Findings that read the same on several runtimes, as one.
fn merge_by_text(found: Vec<Finding>) -> Vec<Finding> {
    let mut merged: Vec<Finding> = Vec::new();
    for f in found {
        match merged
            .iter_mut()
            .find(|m| m.long == f.long && m.short == f.short)
        {
            Some(m) => m.runtimes.extend(f.runtimes),
            None => merged.push(f),
        }
    }
    merged
}

/// The process of row `s` that holds the most open files: who it is, about how many,
/// and what they are.
fn open_files_need(s: &Scenario) -> (&'static str, u64, String) {
    let (c, pool) = (s.load.concurrency(), s.settings.db_pool);
    let client = match s.load {
        Load::Idle { .. } => "the bench's idle client",
        Load::Ab { .. } => "ab",
        Load::Wrk { .. } => "wrk",
    };
    let processes = [
        (
            "the server",
            c + pool + FD_SLACK,
            format!("{c} client + {pool} MySQL connections + {FD_SLACK}"),
        ),
        (
            client,
            c + FD_SLACK,
            format!("{c} connections + {FD_SLACK}"),
        ),
        (
            "MariaDB",
            pool + CONNECTION_HEADROOM + MARIADB_FD_SLACK,
            format!("{pool} + {CONNECTION_HEADROOM} connections + {MARIADB_FD_SLACK}"),
        ),
    ];
    // The list is not empty, so there is a largest.
    let (who, need, detail) = processes.into_iter().max_by_key(|p| p.1).unwrap();
    (who, need as u64, detail)
}

/// The most open files any process of a row of `scenarios` needs.
pub fn most_open_files(scenarios: &[Scenario]) -> u64 {
    scenarios
        .iter()
        .map(|s| open_files_need(s).1)
        .max()
        .unwrap_or(0)
}

/// Raise this process's soft open-files limit to its hard limit when `need` is above
/// the soft one (the servers, MariaDB and the load tools are its children and inherit
/// it), with util-linux's `prlimit` on this process. A line saying what was done, or
/// why it could not be.
pub fn raise_open_files(need: u64) -> Option<String> {
    let (soft, hard) = open_files_limit()?;
    if need <= soft || soft >= hard {
        return None;
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(1_048_576u64);
    let to = hard.min(nr_open);
    let hard_text = if hard == u64::MAX {
        "unlimited".to_string()
    } else {
        hard.to_string()
    };
    let out = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={to}:{hard_text}"))
        .output();
    Some(match out {
        Ok(o) if o.status.success() => format!(
            "preflight: raised the soft open-files limit from {soft} to {to} (the hard limit) \
             for the servers, MariaDB and the load tools"
        ),
        Ok(o) => format!(
            "preflight: could not raise the soft open-files limit from {soft} to {to}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!(
            "preflight: could not raise the soft open-files limit from {soft}: cannot run \
             prlimit (util-linux): {e}"
        ),
    })
}

/// Why the hard open-files limit cannot be raised to `n` here, if it cannot: a shell
/// is asked to (`ulimit -n N`), which changes nothing of this process.
pub fn hard_open_files_refusal(n: u64) -> Option<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {n}"))
        .output()
        .ok()?;
    if out.status.success() {
        return None;
    }
    let why = String::from_utf8_lossy(&out.stderr);
    let why = why.trim().rsplit(": ").next().unwrap_or("refused").trim();
    Some(format!("`ulimit -n {n}` is refused: {why}"))
}

/// This process's soft and hard limit on open files (children inherit them).
fn open_files_limit() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut fields = line.split_whitespace().skip(3).map(|f| match f {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    });
    Some((fields.next()??, fields.next()??))
}

/// The preflight's lines, one after the other.
#[cfg(test)]
fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::scenario;

    /// This machine as the full run meets it: `ulimit -n` 20000 that cannot be raised,
    /// 28,232 local ports, 65,530 mappings, a listen queue of 4096.
    fn this_machine() -> Limits {
        Limits {
            open_files: Some((20_000, 20_000)),
            somaxconn: Some(4096),
            port_range: Some((32_768, 60_999)),
            max_map_count: Some(65_530),
            proc_sys: PathBuf::from("/nonexistent/proc/sys"),
        }
    }

    fn refused(_: u64) -> Option<String> {
        Some("`ulimit -n N` is refused: Operation not permitted".into())
    }

    fn check(list: &[Scenario], limits: &Limits) -> Preflight {
        check_limits(list, limits, &|s, r| s.skipped_on(r).is_some(), &refused)
    }

    #[test]
    fn this_process_has_an_open_files_limit() {
        let (soft, hard) = open_files_limit().unwrap();
        assert!(soft >= 256 && hard >= soft);
    }

    #[test]
    fn the_full_run_here_leaves_out_the_rows_beyond_its_limits_and_names_them() {
        let p = check(&scenario::full(10), &this_machine());
        let not_run: Vec<(&str, Runtime)> = {
            let mut v: Vec<_> = p.not_run.keys().copied().collect();
            v.sort_by_key(|(n, r)| (*n, r.to_string()));
            v
        };
        assert_eq!(
            not_run,
            [
                ("idle-50000", Runtime::Async),
                ("idle-50000", Runtime::Fibers),
                ("idle-50000", Runtime::Minihttp),
                ("widgets-10000", Runtime::Async),
                ("widgets-10000", Runtime::Fibers),
            ],
            "{:#?}",
            p.lines
        );
        let text = joined(&p.lines);
        assert!(
            text.contains("preflight: widgets-10000 not run on fibers, async: open files (`ulimit -n`): the server needs about 20200 (10000 client + 10000 MySQL connections + 200); the hard limit `ulimit -Hn` is 20000: it cannot be raised here"),
            "{text}"
        );
        assert!(
            text.contains("preflight: idle-50000 not run on fibers, async, minihttp: open files"),
            "{text}"
        );
        assert!(
            text.contains("sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\""),
            "{text}"
        );
        assert!(text.contains("idle-50000 not run on fibers: memory mappings (vm.max_map_count): fibers needs about 101200 (100 fiber and 50000 connection stacks"), "{text}");
        assert!(text.contains("idle-50000 not run on minihttp: memory mappings (vm.max_map_count): minihttp needs about 101000"), "{text}");
        assert!(text.contains("sysctl -w vm.max_map_count=262144"), "{text}");
        // sleep-10000 needs half the files of widgets-10000, and fits; the listen queue
        // is what the servers ask for (4096), so nothing warns.
        assert!(!p.not_run.contains_key(&("sleep-10000", Runtime::Fibers)));
        assert!(!text.contains("warning"), "{text}");
        let why = &p.not_run[&("idle-50000", Runtime::Fibers)];
        assert!(why.starts_with("open files: the hard limit is 20000, the server needs about 50210; local ports: 28232, 50100 needed; vm.max_map_count: 65530, 101200 needed"), "{why}");
    }

    #[test]
    fn small_limits_are_named_with_the_command_that_raises_them() {
        let tiny = Limits {
            open_files: Some((1000, 1000)),
            somaxconn: Some(8),
            port_range: Some((40_000, 40_149)),
            max_map_count: Some(1200),
            proc_sys: PathBuf::from("/nonexistent/proc/sys"),
        };
        let p = check(&scenario::quick(), &tiny);
        let text = joined(&p.lines);
        // hello-200: 200 connections need 300 ports of the 150.
        assert!(
            text.contains("hello-200 not run on fibers, async, minihttp: local ports"),
            "{text}"
        );
        assert!(
            text.contains("need about 300 ports, the range 40000-40149 has 150"),
            "{text}"
        );
        assert!(
            text.contains(
                "cannot work from here (/nonexistent/proc/sys/net/ipv4/ip_local_port_range"
            ),
            "{text}"
        );
        // widgets-200's MariaDB keeps 200 connections and its tables.
        assert!(text.contains("widgets-200 not run on fibers, async, minihttp: open files (`ulimit -n`): MariaDB needs about 1030 (200 + 20 connections + 810)"), "{text}");
        assert!(
            text.contains("hello-200 not run on fibers: memory mappings"),
            "{text}"
        );
        assert!(text.contains("hello-16 on fibers, async, warning: the listen queue (net.core.somaxconn) is 8, below the 16"), "{text}");
        assert!(
            text.contains("hello-16 on minihttp, warning: the listen queue"),
            "{text}"
        );
        // What fits runs: ab-c5 at 5 connections has no finding that stops it.
        assert!(
            p.not_run.keys().all(|(name, _)| *name != "ab-c5"),
            "{:?}",
            p.not_run
        );
        // A soft limit below the hard one is the bench's to raise; only when it could
        // not is it named.
        let soft = Limits {
            open_files: Some((1000, 20_000)),
            ..this_machine()
        };
        let text = joined(&check(&scenario::quick(), &soft).lines);
        assert!(text.contains("`ulimit -Sn 20000`"), "{text}");
        let raisable = check_limits(
            &scenario::full(10),
            &this_machine(),
            &|s, r| s.skipped_on(r).is_some(),
            &|_| None,
        );
        assert!(
            joined(&raisable.lines).contains("raise it: `ulimit -n 20200` as root"),
            "{:?}",
            raisable.lines
        );
    }
}
