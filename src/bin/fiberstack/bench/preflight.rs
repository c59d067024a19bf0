//! Checks before a bench starts anything: the load tools are installed, and every
//! scenario fits under the open-files limit. Each failure says what to install or change.

use crate::bench::scenario::{Load, Scenario};

/// File descriptors a server needs beyond its client and MySQL connections.
const FD_SLACK: usize = 200;

/// ab and wrk must be installed for the scenarios that use them.
pub fn check_tools(scenarios: &[Scenario]) -> Result<(), String> {
    let ab = scenarios.iter().any(|s| matches!(s.load, Load::Ab { .. }));
    let wrk = scenarios.iter().any(|s| matches!(s.load, Load::Wrk { .. }));
    for (tool, arg, needed) in [("ab", "-V", ab), ("wrk", "-v", wrk)] {
        if needed && std::process::Command::new(tool).arg(arg).output().is_err() {
            return Err(format!(
                "`{tool}` is not installed: apt-get install apache2-utils wrk (or scripts/install-deps)"
            ));
        }
    }
    Ok(())
}

/// Each server holds a client and a MySQL connection per request in flight, and wrk
/// a connection per `-c`: all must fit under `ulimit -n`.
pub fn check_open_files(scenarios: &[Scenario]) -> Result<(), String> {
    let limit = open_files_limit().unwrap_or(u64::MAX) as usize;
    for s in scenarios {
        let need = s.load.concurrency() + s.settings.db_pool + FD_SLACK;
        if need > limit {
            return Err(format!(
                "scenario {} needs about {need} open files per process, but `ulimit -n` is {limit}: \
                 raise it or leave the scenario out with --only",
                s.name
            ));
        }
    }
    Ok(())
}

/// The soft limit on open files of this process (children inherit it).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_an_open_files_limit() {
        assert!(open_files_limit().unwrap() >= 1024);
    }
}
