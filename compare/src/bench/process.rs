//! The servers under test as child processes, and what /proc says about them:
//! resident memory (VmRSS) and CPU time (utime and stime), and the CPU time of the load
//! tools (this process's children, once reaped).
//!
//! Each server is `taskset -c S fiberstack serve --bind 127.0.0.1:0 ...` (the demo's
//! binary, beside this one) or `taskset -c S compare serve --runtime X ...` (S: the
//! server cpus); its one start-up line on stdout says where it listens. Its stderr
//! goes to a log file in the results directory. It is stopped with SIGTERM (a graceful
//! shutdown), and killed if it has not exited after [`STOP_TIMEOUT`].

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bench::cpus::Split;
use crate::bench::scenario::Settings;
use compare::Runtime;

/// Longest wait for a server's start-up line (opening 5000 MySQL connections included).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for a server to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the RSS sampler reads /proc during a load.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// A running server under test.
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
    pub banner: String,
}

/// The fiber server's binary, `fiberstack`, beside `exe` (cargo builds them into one
/// directory); refused with what to build when it is missing.
pub fn fiber_server(exe: &Path) -> Result<PathBuf, String> {
    let bin = exe.with_file_name("fiberstack");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "the fiber server's binary is not beside this one ({}): build it too, \
             `cargo build --release` (or `-p fiberstack`)",
            bin.display()
        ))
    }
}

impl ServerProcess {
    /// Start `runtime`'s server against `database_url` with `settings`: the fiber
    /// server is `fiberstack serve`, the binary beside `exe` (this one), the others
    /// `exe serve --runtime <runtime>`.
    pub fn start(
        exe: &Path,
        runtime: Runtime,
        database_url: &str,
        settings: Settings,
        threads: usize,
        split: &Split,
        log: &Path,
    ) -> Result<ServerProcess, String> {
        let (program, which): (PathBuf, &[&str]) = match runtime {
            Runtime::Fibers => (fiber_server(exe)?, &[]),
            Runtime::Async => (exe.to_path_buf(), &["--runtime", "async"]),
            Runtime::Minihttp => (exe.to_path_buf(), &["--runtime", "minihttp"]),
        };
        let mut cmd = split.command(&split.server, &program.to_string_lossy());
        cmd.arg("serve")
            .args(which)
            .args(["--bind", "127.0.0.1:0"])
            // In the environment, not argv: the URL holds the password, and argv is
            // visible to every user in `ps`.
            .env("DATABASE_URL", database_url)
            .args(["--fibers", &settings.fibers.to_string()])
            .args(["--db-pool", &settings.db_pool.to_string()])
            .args(["--queue", &settings.queue.to_string()])
            .args(["--max-connections", &settings.max_connections.to_string()])
            .args(["--threads", &threads.to_string()])
            // One process with no supervisor, whatever FIBERSTACK_PROCESSES or
            // FIBERSTACK_SUPERVISOR say: its /proc is then all the server's CPU and memory
            // (a supervisor's would leave out its worker's).
            .args(["--processes", "1", "--supervisor", "off"])
            .args(["--shutdown-grace", "5"])
            // A line per request would fill the log file and measure stderr, not the server.
            .args(["--access-log", "off"]);
        ServerProcess::launch(cmd, log, &runtime.to_string())
    }

    /// Run `cmd` (a server that prints its start-up line, naming its address, first on
    /// stdout) with its stderr into `log`, and wait for that line; `what` names it in
    /// an error.
    pub fn launch(mut cmd: Command, log: &Path, what: &str) -> Result<ServerProcess, String> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        // The pipe was requested just above, so it exists.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let banner = match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if !line.is_empty() => line.trim().to_string(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the {what} server printed no start-up line within {START_TIMEOUT:?} (see its log)"
                ));
            }
        };
        let addr = banner_addr(&banner).ok_or_else(|| format!("no address in `{banner}`"))?;
        Ok(ServerProcess {
            child,
            addr,
            banner,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The status of `GET path` (`None`: no answer), to tell whether the server has
    /// a route at all.
    pub fn status_of(&self, path: &str) -> Option<u16> {
        get(self.addr, path).map(|(status, _)| status)
    }

    /// Wait (up to `within`) until the server holds no MySQL connection, i.e. what
    /// the previous load left in flight has finished. A fiber finishes a request
    /// whose client went away (wrk stops mid-request); the async twin drops it. Not
    /// waiting would let one scenario's leftovers queue ahead of the next one's.
    pub fn wait_idle(&self, within: Duration) -> Result<(), String> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let idle = stats_json(self.addr).is_some_and(|v| v["db"]["in_use"].as_u64() == Some(0));
            if idle {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("the server was still busy after {within:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Resident memory now, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid())
    }

    /// CPU time used so far.
    pub fn cpu_times(&self) -> Option<CpuTimes> {
        cpu_times(self.pid())
    }

    /// SIGTERM, then wait for the exit (kill after [`STOP_TIMEOUT`]).
    pub fn stop(mut self) -> Result<(), String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!(
                        "server {} did not stop within {STOP_TIMEOUT:?}; killed",
                        self.addr
                    ));
                }
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // After `stop` this finds the child gone; otherwise (an error path) it must not
        // outlive the bench.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET /stats` of the server at `addr`, as JSON.
fn stats_json(addr: SocketAddr) -> Option<serde_json::Value> {
    let (_, body) = get(addr, "/stats")?;
    serde_json::from_str(&body).ok()
}

/// `GET path` of the server at `addr`: the status and the body. The body is read as
/// far as its Content-Length, not to the end: minihttp never closes a connection.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let status: u16 = head.get(9..12)?.parse().ok()?;
        let len: usize = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })?;
        if body.len() >= len {
            return Some((status, body[..len].to_string()));
        }
    }
}

/// `fiberstack: listening on http://127.0.0.1:40309 | runtime ...` -> the address.
pub fn banner_addr(banner: &str) -> Option<SocketAddr> {
    banner
        .split("listening on http://")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// VmRSS of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time split as the kernel accounts it, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    /// In user mode (utime).
    pub user: f64,
    /// In the kernel on the process's behalf (stime).
    pub kernel: f64,
}

impl CpuTimes {
    pub fn total(&self) -> f64 {
        self.user + self.kernel
    }

    /// What was used between `earlier` and `self`.
    pub fn since(&self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user - earlier.user,
            kernel: self.kernel - earlier.kernel,
        }
    }

    /// Each part divided by `n` (and scaled by `scale`): per request, in us, with
    /// `scale` 1e6.
    pub fn per(&self, n: f64, scale: f64) -> CpuTimes {
        CpuTimes {
            user: self.user / n * scale,
            kernel: self.kernel / n * scale,
        }
    }
}

/// The CPU time fields of a /proc/PID/stat line, in clock ticks.
///
/// The resolution is a tick (10 ms at CLK_TCK 100): over a measured wrk run of
/// 8-10 s, in which a server busy on its core uses some 800-1000 ticks serving about
/// a million requests, a reading is off by at most a tick at each end, 0.2-0.3% of the
/// figure; on a one-second `--quick` run, 2%.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatTicks {
    /// Fields 14 and 15: the process's own user and kernel time, all its threads.
    pub utime: u64,
    pub stime: u64,
    /// Fields 16 and 17: those of its children that it has waited for.
    pub cutime: u64,
    pub cstime: u64,
}

impl StatTicks {
    /// The fields of a /proc/PID/stat line. The command name (field 2) may hold
    /// spaces and parentheses, so fields are counted after its last `)`.
    pub fn parse(stat: &str) -> Option<StatTicks> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Field N of the line is fields[N - 3]: `rest` starts at field 3.
        let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
        Some(StatTicks {
            utime: field(14)?,
            stime: field(15)?,
            cutime: field(16)?,
            cstime: field(17)?,
        })
    }

    /// /proc/`pid`/stat now.
    pub fn of(pid: u32) -> Option<StatTicks> {
        StatTicks::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// The process's own time, in seconds.
    pub fn own(&self) -> CpuTimes {
        seconds(self.utime, self.stime)
    }

    /// Its waited-for children's time, in seconds.
    pub fn children(&self) -> CpuTimes {
        seconds(self.cutime, self.cstime)
    }
}

fn seconds(user: u64, kernel: u64) -> CpuTimes {
    let tck = clock_ticks() as f64;
    CpuTimes {
        user: user as f64 / tck,
        kernel: kernel as f64 / tck,
    }
}

/// The CPU time `pid` has used so far, every thread of it (not its children: the
/// bench starts each server with `--processes 1`, so no worker is left out).
pub fn cpu_times(pid: u32) -> Option<CpuTimes> {
    Some(StatTicks::of(pid)?.own())
}

/// The CPU time of this process's children that it has waited for, so far: read
/// before a load tool starts and after `Command::output` has reaped it, the
/// difference is the tool's own use (what `getrusage(RUSAGE_CHILDREN)` reports, here
/// in ticks). Sound because the bench waits for no other child meanwhile: the
/// servers and MariaDB are reaped only when stopped, after their loads, and one load
/// runs at a time. (Sampling the running tool's /proc instead would miss its last
/// moments, and its pid is gone once it is reaped.)
pub fn children_cpu_times() -> Option<CpuTimes> {
    Some(StatTicks::of(std::process::id())?.children())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux in practice).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// Samples a process's RSS in the background and keeps the peak.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl RssSampler {
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_kib(pid).unwrap_or(0)));
        let thread = {
            let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if let Some(kib) = rss_kib(pid) {
                        peak.fetch_max(kib, Ordering::AcqRel);
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
        };
        RssSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// Stop sampling; the peak RSS seen, in KiB.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_of_this_process_reads() {
        let pid = std::process::id();
        assert!(rss_kib(pid).unwrap() > 100);
        assert!(cpu_times(pid).is_some());
        assert!(children_cpu_times().is_some());
        let sampler = RssSampler::start(pid);
        assert!(sampler.finish() > 100);
    }

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        // A name with spaces and both parentheses, as `prctl(PR_SET_NAME)` allows.
        let stat = "42 (a (b) c) d) S 1 2 3 4 5 6 7 8 9 10 250 50 7 3 20 0 1 0";
        let t = StatTicks::parse(stat).unwrap();
        assert_eq!(
            t,
            StatTicks {
                utime: 250,
                stime: 50,
                cutime: 7,
                cstime: 3
            }
        );
        let tck = clock_ticks() as f64;
        assert_eq!(t.own().user, 250.0 / tck);
        assert_eq!(t.children().kernel, 3.0 / tck);
        // A line cut short, or a name never closed, is no reading.
        assert_eq!(
            StatTicks::parse("42 (a b) S 1 2 3 4 5 6 7 8 9 10 250 50"),
            None
        );
        assert_eq!(StatTicks::parse("42 (a b S 1 2 3"), None);
    }

    /// The load tool's reading: a child's CPU time is this process's once reaped, as
    /// `Command::output` reaps ab and wrk.
    #[test]
    fn a_reaped_childs_cpu_time_is_counted() {
        let before = children_cpu_times().unwrap();
        // Some 0.1-0.5 s of CPU in the shell's own arithmetic, whatever the load.
        let out = Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let used = children_cpu_times().unwrap().since(before);
        assert!(used.total() >= 0.03, "{used:?}");
        assert!(
            used.user > used.kernel,
            "a shell loop is user time: {used:?}"
        );
    }

    #[test]
    fn cpu_times_subtract_and_divide() {
        let a = CpuTimes {
            user: 1.0,
            kernel: 2.0,
        };
        let b = CpuTimes {
            user: 1.5,
            kernel: 5.0,
        };
        let d = b.since(a).per(1_000_000.0, 1e6);
        assert_eq!((d.user, d.kernel, d.total()), (0.5, 3.0, 3.5));
    }

    #[test]
    fn the_banner_gives_the_address() {
        let b = "fiberstack: listening on http://127.0.0.1:40309 | runtime async, 100 tasks";
        assert_eq!(banner_addr(b), Some("127.0.0.1:40309".parse().unwrap()));
        assert_eq!(banner_addr("fiberstack: cannot start"), None);
    }
}
