//! The core split of a pinned bench: the server under test and its MariaDB on one set
//! of cpus, the load tools (ab, wrk) on the rest, each started under `taskset -c`.
//!
//! Unpinned, the load tool takes CPU from whichever server leaves more idle, and the
//! ratio between two servers becomes whatever the scheduler makes it (1.43x unpinned
//! for a pair that is 1.04x pinned: see BENCHMARKS.md). With one usable cpu there is
//! nothing to split: the bench runs unpinned and says so on every ratio.

use std::fmt;
use std::process::Command;

/// Where each side runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The server under test and its MariaDB.
    pub server: Vec<usize>,
    /// ab and wrk.
    pub load: Vec<usize>,
    /// False on a one-cpu machine: nothing is pinned.
    pub pinned: bool,
}

impl Split {
    /// `command` under `taskset -c <cpus>` (unchanged when unpinned). taskset execs
    /// the command, so the child's pid is the command's own.
    pub fn command(&self, cpus: &[usize], program: &str) -> Command {
        if self.pinned {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(list(cpus)).arg(program);
            cmd
        } else {
            Command::new(program)
        }
    }

    /// Move every thread of a running `pid` (MariaDB, started by the launcher) onto
    /// the server's cpus.
    pub fn pin_pid(&self, pid: u32) -> Result<(), String> {
        if !self.pinned {
            return Ok(());
        }
        let out = Command::new("taskset")
            .args(["-a", "-p", "-c", &list(&self.server), &pid.to_string()])
            .output()
            .map_err(|e| format!("cannot run taskset (util-linux): {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "taskset -a -p -c {} {pid}: {}",
                list(&self.server),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// wrk's threads: one per load cpu.
    pub fn load_threads(&self) -> usize {
        self.load.len().max(1)
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pinned {
            write!(
                f,
                "core split: server + MariaDB on cpu {}, load tools on cpu {} (taskset -c)",
                list(&self.server),
                list(&self.load)
            )
        } else {
            write!(
                f,
                "core split: none, this machine has one usable cpu ({}): server, MariaDB \
                 and load tools share it, and every ratio is marked unpinned",
                list(&self.server)
            )
        }
    }
}

/// `0-1,3` from [0, 1, 3].
pub fn list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Parse a cpu list like `1`, `0-1` or `0,2-3` (sorted, without repeats).
pub fn parse(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{s}' is not a cpu number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("'{part}' runs backwards"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The cpus this process may run on: the kernel's online cpus, narrowed by this
/// process's affinity (`Cpus_allowed_list`, what sched_getaffinity returns).
pub fn usable() -> Result<Vec<usize>, String> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(|e| format!("cannot read /sys/devices/system/cpu/online: {e}"))
        .and_then(|t| parse(&t))?;
    let allowed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| parse(l).ok())
        });
    Ok(match allowed {
        Some(allowed) => online.into_iter().filter(|c| allowed.contains(c)).collect(),
        None => online,
    })
}

/// The split for `--server-cpus` / `--load-cpus` on a machine whose usable cpus are
/// `usable`: half and half by default (the load tools on the first half), one flag's
/// complement when only one is given. Cpus that are not usable, or that both sides
/// claim, are refused with a message naming the flag.
pub fn split(server: Option<&str>, load: Option<&str>, usable: &[usize]) -> Result<Split, String> {
    let chosen = |flag: &str, text: Option<&str>| -> Result<Option<Vec<usize>>, String> {
        let Some(text) = text else { return Ok(None) };
        let cpus = parse(text).map_err(|e| format!("--{flag} {text}: {e}"))?;
        let missing: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|c| !usable.contains(c))
            .collect();
        if cpus.is_empty() || !missing.is_empty() {
            return Err(format!(
                "--{flag} {text}: cpu {} does not exist or is not usable here; this machine \
                 offers cpu {}",
                list(&missing),
                list(usable)
            ));
        }
        Ok(Some(cpus))
    };
    let (server, load) = (chosen("server-cpus", server)?, chosen("load-cpus", load)?);
    let rest = |taken: &[usize]| -> Vec<usize> {
        usable
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .collect()
    };
    if usable.len() < 2 && server.is_none() && load.is_none() {
        return Ok(Split {
            server: usable.to_vec(),
            load: usable.to_vec(),
            pinned: false,
        });
    }
    let (server, load) = match (server, load) {
        (Some(s), Some(l)) => (s, l),
        (Some(s), None) => {
            let l = rest(&s);
            (s, l)
        }
        (None, Some(l)) => (rest(&l), l),
        (None, None) => {
            let half = usable.len() / 2;
            (usable[half..].to_vec(), usable[..half].to_vec())
        }
    };
    let both: Vec<usize> = server
        .iter()
        .copied()
        .filter(|c| load.contains(c))
        .collect();
    if !both.is_empty() {
        return Err(format!(
            "--server-cpus and --load-cpus overlap on cpu {}: give each side its own",
            list(&both)
        ));
    }
    if server.is_empty() || load.is_empty() {
        let (flag, side) = if server.is_empty() {
            ("--load-cpus", "the server")
        } else {
            ("--server-cpus", "the load tools")
        };
        return Err(format!(
            "{flag} takes every usable cpu ({}), leaving none for {side}: name fewer",
            list(usable)
        ));
    }
    Ok(Split {
        server,
        load,
        pinned: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print() {
        assert_eq!(parse("1").unwrap(), vec![1]);
        assert_eq!(parse("0-1").unwrap(), vec![0, 1]);
        assert_eq!(parse("3,0-1,1").unwrap(), vec![0, 1, 3]);
        assert!(parse("2-1").is_err() && parse("a").is_err() && parse("").is_err());
        assert_eq!(list(&[0, 1, 3, 5, 6, 7]), "0-1,3,5-7");
    }

    #[test]
    fn half_and_half_by_default_or_the_complement_of_one_flag() {
        let two = [0, 1];
        let s = split(None, None, &two).unwrap();
        assert_eq!((s.server, s.load, s.pinned), (vec![1], vec![0], true));
        let four = [0, 1, 2, 3];
        assert_eq!(split(None, None, &four).unwrap().server, vec![2, 3]);
        assert_eq!(split(Some("0"), None, &four).unwrap().load, vec![1, 2, 3]);
        assert_eq!(split(None, Some("3"), &four).unwrap().server, vec![0, 1, 2]);
        let s = split(Some("0-1"), Some("3"), &four).unwrap();
        assert_eq!(s.load_threads(), 1);
        assert_eq!((s.server, s.load), (vec![0, 1], vec![3]));
    }

    #[test]
    fn one_cpu_runs_unpinned_and_says_so() {
        let s = split(None, None, &[0]).unwrap();
        assert!(!s.pinned);
        assert!(s.to_string().contains("one usable cpu"), "{s}");
        assert_eq!(s.command(&s.load, "wrk").get_program(), "wrk");
    }

    #[test]
    fn missing_or_overlapping_cpus_are_refused_by_flag() {
        let two = [0, 1];
        let e = split(Some("7"), None, &two).unwrap_err();
        assert!(
            e.contains("--server-cpus 7") && e.contains("does not exist"),
            "{e}"
        );
        let e = split(None, Some("0-2"), &two).unwrap_err();
        assert!(e.contains("--load-cpus 0-2") && e.contains("cpu 2 "), "{e}");
        let e = split(Some("0-1"), Some("1"), &two).unwrap_err();
        assert!(e.contains("overlap on cpu 1"), "{e}");
        let e = split(Some("0-1"), None, &two).unwrap_err();
        assert!(e.contains("--server-cpus takes every usable cpu"), "{e}");
        let e = split(Some("x"), None, &two).unwrap_err();
        assert!(e.contains("--server-cpus x"), "{e}");
    }
}
