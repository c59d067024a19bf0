//! The server's CPU quota (`--server-quota`): a cgroup of the bench's own that holds the
//! server under measure to a share of one cpu. On a machine where one core of wrk
//! cannot keep one core of server busy (wrk used 98% of its core against fibers and
//! may_minihttp on two cores), req/s measures the load tool; with the server held to
//! 40% of its core, wrk has room to spare, the server is the bottleneck again, and
//! req/s ranks the servers' CPU per request.
//!
//! ```text
//! cgroup v2 (ROOT/cgroup.controllers names cpu):
//!   ROOT/fiberstack-bench-<bench pid>/cpu.max              "4000 10000"
//! cgroup v1 (ROOT/cpu/cpu.cfs_quota_us exists):
//!   ROOT/cpu/fiberstack-bench-<bench pid>/cpu.cfs_period_us  10000
//!                                        /cpu.cfs_quota_us   4000
//! each quota'd server: its pid -> cgroup.procs right after it started (every thread
//!   moves, and what it starts later is born inside); stopped, it leaves the group
//! each load: the group's cpu.stat before and after (periods, and those in which the
//!   quota ran out), the server's CPU time from /proc as on every row
//! the end, or the bench killed however: the group is removed (the watcher below)
//! ```
//!
//! Only the server goes in. Its MariaDB stays on the server cpus without a quota: the
//! rows under a quota are `/hello`, which sends MySQL nothing, and MariaDB's
//! background threads inside the group would spend the server's quota, so that the
//! server would no longer be what the quota holds.
//!
//! The period is 10 ms (the kernel's default is 100 ms): a server that has used its
//! quota waits for the next period, and a shorter one keeps that wait, which a request
//! arriving then sees in its latency, at most 6 ms at 40%. The kernel's smallest quota
//! is 1 ms, so quotas below 10% get a 100 ms period.
//!
//! ## Removal, even after Ctrl-C or SIGKILL
//! A cgroup outlives its creator, and a terminal's Ctrl-C kills the bench before any
//! `Drop` runs. As the private MariaDB does (fiber_mysql's launcher), the group has a
//! tiny `sh` watcher in its own process group (a Ctrl-C does not reach it) whose stdin
//! is a pipe from the bench: when the pipe closes, because [`CpuGroup`] was dropped or
//! because the bench died, however it died, the watcher stops what is left in the
//! group (only the bench's servers are ever put there: SIGTERM, then SIGKILL) and
//! removes it. On the normal path the group is already gone and the watcher just exits.

use std::fmt;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;

use crate::bench::cpus::Split;

/// Where the cgroup file system is mounted unless `--cgroup-root` says otherwise.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// The quota `--server-quota auto` gives the CPU-bound rows when the load tools have no
/// more cpus than the server: measured on two cores (docs/FACTS.md), it held each
/// `/hello` server at 40-41% of its core while one wrk thread on the other core was not
/// saturated. At 40% the fastest server (about 7 us of CPU a request) serves some 57k
/// req/s, which costs wrk about 43% of its core: the quota, not wrk, is the limit.
pub const AUTO_PERCENT: u32 = 40;

/// A quota'd server that used less than this % of its quota was not held by it:
/// something else (the load tool, a busy machine) was the limit.
pub const REACHED_PCT: f64 = 90.0;

/// The period of quotas of [`SHORT_PERIOD_MIN_PCT`]% and more, in microseconds.
const SHORT_PERIOD_US: u64 = 10_000;
/// The period of smaller quotas: the kernel refuses a quota under 1 ms.
const LONG_PERIOD_US: u64 = 100_000;
const SHORT_PERIOD_MIN_PCT: u32 = 10;

/// How long the watcher lets what is left in the group stop after SIGTERM, and again
/// after SIGKILL, in tenths of a second.
const WATCHER_WAIT_TENTHS: u32 = 100;

/// `--server-quota`: `auto`, `off`, or a share of one cpu in %.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaChoice {
    /// [`AUTO_PERCENT`] where the load tool would otherwise be the limit: see [`decide`].
    Auto,
    Off,
    /// 1-100 % of one cpu.
    Percent(u32),
}

impl FromStr for QuotaChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<QuotaChoice, String> {
        match text {
            "auto" => Ok(QuotaChoice::Auto),
            "off" => Ok(QuotaChoice::Off),
            _ => match text.trim_end_matches('%').parse::<u32>() {
                Ok(p @ 1..=100) => Ok(QuotaChoice::Percent(p)),
                Ok(p) => Err(format!(
                    "{p}% is no quota: give 1-100 (% of one cpu the server may use), \
                     `auto` or `off`"
                )),
                Err(_) => {
                    Err("give 1-100 (% of one cpu the server may use), `auto` or `off`".into())
                }
            },
        }
    }
}

impl fmt::Display for QuotaChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaChoice::Auto => f.write_str("auto"),
            QuotaChoice::Off => f.write_str("off"),
            QuotaChoice::Percent(p) => write!(f, "{p}"),
        }
    }
}

/// What the CPU-bound rows run under, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// % of one cpu, or `None` for no quota.
    pub percent: Option<u32>,
    pub why: String,
}

/// The quota rule: an explicit `--server-quota PCT` or `off` is taken as given;
/// `auto` gives [`AUTO_PERCENT`] when the load tools have no more cpus than the server
/// (one each on two cores, or one shared cpu), where wrk, which spends about as much
/// CPU on a request as the server does, is otherwise the limit, and no quota when they
/// have more.
pub fn decide(choice: QuotaChoice, split: &Split) -> Decision {
    let (load, server) = (split.load.len(), split.server.len());
    let cpus = |n: usize| format!("{n} cpu{}", if n == 1 { "" } else { "s" });
    match choice {
        QuotaChoice::Off => Decision {
            percent: None,
            why: "--server-quota off".into(),
        },
        QuotaChoice::Percent(p) => Decision {
            percent: Some(p),
            why: format!("--server-quota {p}"),
        },
        QuotaChoice::Auto if load <= server => Decision {
            percent: Some(AUTO_PERCENT),
            why: format!(
                "--server-quota auto: the load tools have {}, no more than the server's {}, \
                 so wrk would otherwise be the limit",
                cpus(load),
                cpus(server)
            ),
        },
        QuotaChoice::Auto => Decision {
            percent: None,
            why: format!(
                "--server-quota auto: the load tools have {}, more than the server's {}",
                cpus(load),
                cpus(server)
            ),
        },
    }
}

/// The cgroup interface the machine has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// `cpu.max`.
    V2,
    /// `cpu.cfs_quota_us` and `cpu.cfs_period_us`.
    V1,
}

/// The quota's period and quota, in microseconds, for `percent` of one cpu.
pub fn period_and_quota_us(percent: u32) -> (u64, u64) {
    let period = if percent >= SHORT_PERIOD_MIN_PCT {
        SHORT_PERIOD_US
    } else {
        LONG_PERIOD_US
    };
    (period, period * u64::from(percent) / 100)
}

/// The group's `cpu.stat` counters: enforcement periods, and those in which the
/// quota ran out (v1 and v2 name them alike).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttling {
    pub periods: u64,
    pub throttled: u64,
}

impl Throttling {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: Throttling) -> Throttling {
        Throttling {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled: self.throttled.saturating_sub(earlier.throttled),
        }
    }

    /// `nr_periods` and `nr_throttled` of a `cpu.stat`.
    pub fn parse(stat: &str) -> Option<Throttling> {
        let field = |name: &str| {
            stat.lines().find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse().ok())?
            })
        };
        Some(Throttling {
            periods: field("nr_periods")?,
            throttled: field("nr_throttled")?,
        })
    }
}

/// What a quota'd server had and did during one load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaUse {
    /// The quota, % of one cpu.
    pub percent: u32,
    /// The group's periods over the load (`None` if cpu.stat could not be read).
    pub throttling: Option<Throttling>,
}

/// The bench's cgroup with its quota; dropping it removes the group.
pub struct CpuGroup {
    dir: PathBuf,
    version: Version,
    percent: u32,
    /// The `sh` that removes the group once its stdin closes (module comment).
    watcher: Child,
}

/// Removes a group whose bench is gone. `$1` is the group's directory.
const WATCHER: &str = r#"
dir=$1
while read -r _; do :; done
[ -d "$dir" ] || exit 0
for sig in TERM KILL; do
  for pid in $(cat "$dir/cgroup.procs" 2>/dev/null); do kill -s $sig "$pid" 2>/dev/null; done
  i=0
  while [ -n "$(cat "$dir/cgroup.procs" 2>/dev/null)" ] && [ $i -lt $2 ]; do
    sleep 0.1; i=$((i+1))
  done
done
rmdir "$dir"
"#;

impl CpuGroup {
    /// Create `fiberstack-bench-<pid>` under the cgroup file system at `root` with a
    /// quota of `percent` % of one cpu. The error says what was missing or refused.
    pub fn create(root: &Path, percent: u32) -> Result<CpuGroup, String> {
        let (version, parent) = detect(root)?;
        let dir = parent.join(format!("fiberstack-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cleanup = |why: String| {
            let _ = std::fs::remove_dir(&dir);
            why
        };
        let (period, quota) = period_and_quota_us(percent);
        let writes: Vec<(&str, String)> = match version {
            Version::V2 => vec![("cpu.max", format!("{quota} {period}"))],
            Version::V1 => vec![
                ("cpu.cfs_period_us", period.to_string()),
                ("cpu.cfs_quota_us", quota.to_string()),
            ],
        };
        for (file, value) in &writes {
            let path = dir.join(file);
            // A directory made outside a cgroup file system gets no interface files:
            // writing would create a plain file that holds nothing back.
            if !path.is_file() {
                return Err(cleanup(format!(
                    "{} is not a cgroup: the kernel made no {file} in it",
                    dir.display()
                )));
            }
            std::fs::write(&path, value)
                .map_err(|e| cleanup(format!("cannot write {value} to {}: {e}", path.display())))?;
        }
        let watcher = Command::new("sh")
            .arg("-c")
            .arg(WATCHER)
            .arg("fiberstack-bench-cgroup-watcher")
            .arg(&dir)
            .arg(WATCHER_WAIT_TENTHS.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a terminal's Ctrl-C stops the bench, not this.
            .process_group(0)
            .spawn()
            .map_err(|e| cleanup(format!("cannot run sh: {e}")))?;
        Ok(CpuGroup {
            dir,
            version,
            percent,
            watcher,
        })
    }

    /// Move every thread of `pid` into the group.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        let procs = self.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .map_err(|e| format!("cannot move {pid} into {}: {e}", procs.display()))
    }

    /// The quota, % of one cpu.
    pub fn percent(&self) -> u32 {
        self.percent
    }

    /// The group's throttling counters now (`None` if they cannot be read).
    pub fn throttling(&self) -> Option<Throttling> {
        Throttling::parse(&std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?)
    }

    /// The group's directory.
    #[cfg(test)]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl fmt::Display for CpuGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (period, quota) = period_and_quota_us(self.percent);
        match self.version {
            Version::V2 => write!(f, "cgroup v2 cpu.max \"{quota} {period}\""),
            Version::V1 => write!(
                f,
                "cgroup v1 cpu.cfs_quota_us {quota} per cpu.cfs_period_us {period}"
            ),
        }?;
        write!(f, " in {}", self.dir.display())
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // The servers were stopped (and reaped) before the group is dropped, so it is
        // empty; a server that is still leaving makes this fail, and the watcher, told
        // by the pipe's closing, waits for it and removes the group.
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(mut pipe) = self.watcher.stdin.take() {
            let _ = pipe.flush();
        }
        let _ = self.watcher.wait();
    }
}

/// The cgroup interface at `root` and the directory new groups go in: v2 if `root` is
/// a unified hierarchy with the cpu controller handed down, else v1's cpu hierarchy.
fn detect(root: &Path) -> Result<(Version, PathBuf), String> {
    let controllers = root.join("cgroup.controllers");
    if let Ok(list) = std::fs::read_to_string(&controllers) {
        if !list.split_whitespace().any(|c| c == "cpu") {
            return Err(format!(
                "the cgroup v2 hierarchy at {} has no cpu controller ({} lists `{}`)",
                root.display(),
                controllers.display(),
                list.trim()
            ));
        }
        let subtree = root.join("cgroup.subtree_control");
        let handed = std::fs::read_to_string(&subtree).unwrap_or_default();
        if !handed.split_whitespace().any(|c| c == "cpu") {
            return Err(format!(
                "the cgroup v2 hierarchy at {} does not hand the cpu controller to its \
                 groups: enable it with `echo +cpu > {}`",
                root.display(),
                subtree.display()
            ));
        }
        return Ok((Version::V2, root.to_path_buf()));
    }
    let v1 = root.join("cpu");
    if v1.join("cpu.cfs_quota_us").is_file() {
        return Ok((Version::V1, v1));
    }
    Err(format!(
        "no cgroup cpu controller at {}: neither cgroup v2 ({}) nor v1 ({})",
        root.display(),
        controllers.display(),
        v1.join("cpu.cfs_quota_us").display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_bad_quotas_say_what_to_give() {
        assert_eq!("auto".parse(), Ok(QuotaChoice::Auto));
        assert_eq!("off".parse(), Ok(QuotaChoice::Off));
        assert_eq!("40".parse(), Ok(QuotaChoice::Percent(40)));
        assert_eq!("100%".parse(), Ok(QuotaChoice::Percent(100)));
        for bad in ["0", "101", "-5", "x"] {
            let e = bad.parse::<QuotaChoice>().unwrap_err();
            assert!(e.contains("1-100") && e.contains("off"), "{bad}: {e}");
        }
    }

    #[test]
    fn auto_holds_the_server_where_the_load_tools_have_no_more_cpus() {
        let split = |server: &[usize], load: &[usize]| Split {
            server: server.to_vec(),
            load: load.to_vec(),
            pinned: true,
        };
        let two = split(&[1], &[0]);
        assert_eq!(decide(QuotaChoice::Auto, &two).percent, Some(AUTO_PERCENT));
        assert!(decide(QuotaChoice::Auto, &two)
            .why
            .contains("1 cpu, no more"));
        assert_eq!(
            decide(QuotaChoice::Auto, &split(&[3], &[0, 1, 2])).percent,
            None
        );
        assert_eq!(
            decide(QuotaChoice::Auto, &split(&[2, 3], &[0, 1])).percent,
            Some(40)
        );
        assert_eq!(decide(QuotaChoice::Off, &two).percent, None);
        assert_eq!(decide(QuotaChoice::Percent(7), &two).percent, Some(7));
    }

    #[test]
    fn periods_keep_the_quota_at_a_millisecond_or_more() {
        assert_eq!(period_and_quota_us(40), (10_000, 4000));
        assert_eq!(period_and_quota_us(10), (10_000, 1000));
        assert_eq!(period_and_quota_us(9), (100_000, 9000));
        assert_eq!(period_and_quota_us(1), (100_000, 1000));
        assert_eq!(period_and_quota_us(100), (10_000, 10_000));
    }

    #[test]
    fn cpu_stat_is_read_alike_in_both_versions() {
        let v1 = "nr_periods 120\nnr_throttled 97\nthrottled_time 581000000\n";
        let v2 = "usage_usec 4\nuser_usec 2\nsystem_usec 2\nnr_periods 120\nnr_throttled 97\nthrottled_usec 581\n";
        let t = Throttling {
            periods: 120,
            throttled: 97,
        };
        assert_eq!(Throttling::parse(v1), Some(t));
        assert_eq!(Throttling::parse(v2), Some(t));
        assert_eq!(Throttling::parse("usage_usec 4\n"), None);
        let later = Throttling {
            periods: 220,
            throttled: 190,
        };
        assert_eq!(
            later.since(t),
            Throttling {
                periods: 100,
                throttled: 93
            }
        );
    }

    /// A plain directory is no cgroup file system, even where it can be written: the
    /// bench refuses it and leaves nothing behind.
    #[test]
    fn a_directory_that_is_not_a_cgroup_is_refused_and_left_clean() {
        let root =
            std::env::temp_dir().join(format!("fiberstack-quota-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let e = CpuGroup::create(&root, 40).err().unwrap();
        assert!(e.contains("no cgroup cpu controller"), "{e}");
        std::fs::create_dir_all(root.join("cpu")).unwrap();
        std::fs::write(root.join("cpu/cpu.cfs_quota_us"), "-1").unwrap();
        let e = CpuGroup::create(&root, 40).err().unwrap();
        assert!(e.contains("is not a cgroup"), "{e}");
        let left: Vec<_> = std::fs::read_dir(root.join("cpu")).unwrap().collect();
        assert_eq!(left.len(), 1, "only the fake interface file: {left:?}");
        std::fs::write(root.join("cgroup.controllers"), "memory io\n").unwrap();
        let e = CpuGroup::create(&root, 40).err().unwrap();
        assert!(e.contains("no cpu controller"), "{e}");
        std::fs::write(root.join("cgroup.controllers"), "cpu memory\n").unwrap();
        let e = CpuGroup::create(&root, 40).err().unwrap();
        assert!(e.contains("echo +cpu >"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// On this machine's own cgroups (skipped where there are none it can write): a
    /// busy process put in the group is held to its quota, and a group dropped with a
    /// process still inside (the bench killed mid-row) has that process stopped and the
    /// group removed by the watcher.
    #[test]
    fn a_real_group_holds_a_busy_process_and_is_removed_even_with_one_inside() {
        use std::time::{Duration, Instant};
        let group = match CpuGroup::create(Path::new(DEFAULT_ROOT), 20) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("skipped: no cgroup to write here: {e}");
                return;
            }
        };
        let dir = group.dir().to_path_buf();
        assert!(dir.is_dir());
        let mut busy = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        group.add(busy.id()).unwrap();
        let before = group.throttling().unwrap();
        let cpu = |pid: u32| crate::bench::process::cpu_times(pid).unwrap().total();
        let (t0, c0) = (Instant::now(), cpu(busy.id()));
        std::thread::sleep(Duration::from_millis(800));
        let share = (cpu(busy.id()) - c0) / t0.elapsed().as_secs_f64() * 100.0;
        let held = group.throttling().unwrap().since(before);
        assert!(share < 35.0, "held to 20% of a cpu, it used {share:.0}%");
        assert!(
            held.throttled > 0 && held.periods >= held.throttled,
            "{held:?}"
        );
        let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
        group.add(sleeper.id()).unwrap();
        let _ = busy.kill();
        let _ = busy.wait();
        drop(group);
        assert!(!dir.exists(), "{} is left", dir.display());
        let status = sleeper.wait().unwrap();
        assert!(
            !status.success(),
            "the process left inside was stopped: {status}"
        );
    }
}
