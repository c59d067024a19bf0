//! The processes a soak runs and watches: the private MariaDB (`fiberstack mariadb
//! --control`, which the soak kills and starts through its stdin), the demo and the todo
//! API (each a supervisor and its workers, started as a user would), their logs, and
//! what /proc says about each process (children, RSS, descriptors).

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest wait for a server's start-up line, or MariaDB's first answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for MariaDB to be killed, or started again and answering.
pub const MARIADB_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for a server to exit after SIGTERM: its shutdown grace and a margin.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(40);
/// How often a wait on /proc or a log looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// Whether `pid` runs (a zombie, dead but not yet reaped, does not).
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

/// The live children of `pid`, in pid order.
pub fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // After the command's `)`: state, then the parent's pid.
        let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = fields.next().unwrap_or("Z");
        if fields.next().and_then(|p| p.parse::<u32>().ok()) == Some(pid) && state != "Z" {
            found.push(child);
        }
    }
    found.sort_unstable();
    found
}

/// The process `pid` runs, from /proc (empty when it is gone).
pub fn command_name(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Resident memory of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// Open descriptors of `pid`.
pub fn fds(pid: u32) -> Option<u64> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count() as u64)
}

/// Send signal `name` (TERM, HUP, KILL) to `pid`, through `kill(1)`.
pub fn signal(pid: u32, name: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run kill: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("kill -{name} {pid} failed (the process is gone?)")),
    }
}

/// Each line of `pipe` on a channel, read on a thread of its own.
fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The private MariaDB, driven through `fiberstack mariadb --control`'s stdin.
pub struct MariaDb {
    child: Child,
    commands: Option<ChildStdin>,
    events: mpsc::Receiver<String>,
    /// Its URL (with the app user's password: passed on in the environment only).
    url: String,
}

impl MariaDb {
    /// Start it with room for `max_connections`.
    pub fn start(fiberstack: &Path, max_connections: usize) -> Result<MariaDb, String> {
        let mut child = Command::new(fiberstack)
            .args(["mariadb", "--control", "--max-connections"])
            .arg(max_connections.to_string())
            .env_remove("DATABASE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", fiberstack.display()))?;
        let commands = child.stdin.take();
        // Piped just above.
        let events = lines(child.stdout.take().expect("piped stdout"));
        let mut db = MariaDb {
            child,
            commands,
            events,
            url: String::new(),
        };
        db.url = db.expect("mysql://", START_TIMEOUT)?;
        Ok(db)
    }

    /// The URL clients connect with.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn expect(&mut self, start: &str, within: Duration) -> Result<String, String> {
        match self.events.recv_timeout(within) {
            Ok(line) if line.starts_with(start) => Ok(line),
            Ok(line) => Err(format!("fiberstack mariadb said {line:?}, not {start}...")),
            Err(_) => Err(format!(
                "fiberstack mariadb said nothing within {within:?} (its stderr has why)"
            )),
        }
    }

    fn command(&mut self, command: &str, answer: &str) -> Result<String, String> {
        let pipe = self.commands.as_mut().ok_or("MariaDB was stopped")?;
        writeln!(pipe, "{command}").map_err(|e| format!("fiberstack mariadb is gone: {e}"))?;
        self.expect(answer, MARIADB_COMMAND_TIMEOUT)
    }

    /// SIGKILL `mariadbd`, as a crash would; it stays down.
    pub fn kill(&mut self) -> Result<(), String> {
        self.command("kill", "stopped").map(drop)
    }

    /// Start `mariadbd` again on the same port and data; returns once it answers.
    pub fn start_again(&mut self) -> Result<(), String> {
        self.command("start", "started").map(drop)
    }

    /// The pid of `fiberstack mariadb` (see [`mariadbd_under`]).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop it (the end of its stdin) and wait until its files are gone.
    pub fn stop(&mut self) -> Result<(), String> {
        drop(self.commands.take());
        wait_exit(&mut self.child, STOP_TIMEOUT).map(drop)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if self.stop().is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The pid of the `mariadbd` that `fiberstack mariadb` (pid `control`) runs now, if
/// one runs: a child of its launcher's shell.
pub fn mariadbd_under(control: u32) -> Option<u32> {
    children(control)
        .into_iter()
        .flat_map(children)
        .find(|&p| command_name(p) == "mariadbd")
}

/// Wait up to `within` for `child` to exit.
fn wait_exit(child: &mut Child, within: Duration) -> Result<std::process::ExitStatus, String> {
    let deadline = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => return Err(format!("pid {} did not exit within {within:?}", child.id())),
            Err(e) => return Err(format!("cannot wait for pid {}: {e}", child.id())),
        }
    }
}

/// What a server's log said: its supervisor's lines, with when they came (the faults
/// read them to see workers accept), and how many access lines went by.
pub struct Log {
    t0: Instant,
    lines: Mutex<Vec<(f64, String)>>,
    /// Access lines seen (counted, not kept).
    access: AtomicU64,
}

impl Log {
    fn lines(&self) -> std::sync::MutexGuard<'_, Vec<(f64, String)>> {
        // Held only to push or to scan: never poisoned half-way.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every supervisor line that came at or after `since` (seconds since the soak
    /// started).
    pub fn since(&self, since: f64) -> Vec<String> {
        self.lines()
            .iter()
            .filter(|(at, _)| *at >= since)
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// Whether a supervisor line that came at or after `since` holds every one of
    /// `parts`.
    pub fn has(&self, since: f64, parts: &[&str]) -> bool {
        self.lines()
            .iter()
            .any(|(at, l)| *at >= since && parts.iter().all(|p| l.contains(p)))
    }

    /// Access lines seen so far.
    pub fn access_lines(&self) -> u64 {
        self.access.load(Ordering::Relaxed)
    }
}

/// What marks a line of the supervisor (`APP: supervisor: worker 1 generation 2 (pid
/// N) accepts, ...`).
const SUPERVISOR_LINE: &str = ": supervisor: ";

/// Whether `line` is an access line (`<time> INFO  GET /path 200 ...`): kept out of
/// the saved log, which would otherwise hold a line per request.
fn is_access(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let (_time, level, method, path) = (words.next(), words.next(), words.next(), words.next());
    level == Some("INFO")
        && method.is_some_and(|m| m.chars().all(|c| c.is_ascii_uppercase()))
        && path.is_some_and(|p| p.starts_with('/'))
}

/// A server started as a user would, on port 0: a supervisor and its workers.
pub struct Server {
    pub name: &'static str,
    child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Log>,
}

impl Server {
    /// Start `cmd` and wait for the supervisor's start-up line (every worker accepts);
    /// its stderr goes, access lines left out, to `log_file`, and its supervisor's
    /// lines to [`Server::log`].
    pub fn start(
        name: &'static str,
        mut cmd: Command,
        t0: Instant,
        log_file: &Path,
    ) -> Result<Server, String> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let log = Arc::new(Log {
            t0,
            lines: Mutex::new(Vec::new()),
            access: AtomicU64::new(0),
        });
        let mut file = fs::File::create(log_file)
            .map_err(|e| format!("cannot create {}: {e}", log_file.display()))?;
        // Piped just above.
        let stderr = lines(child.stderr.take().expect("piped stderr"));
        let keeper = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in stderr {
                if is_access(&line) {
                    keeper.access.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let _ = writeln!(file, "{line}");
                if line.contains(SUPERVISOR_LINE) {
                    let at = keeper.t0.elapsed().as_secs_f64();
                    keeper.lines().push((at, line));
                }
            }
        });
        let stdout = lines(child.stdout.take().expect("piped stdout"));
        let deadline = Instant::now() + START_TIMEOUT;
        let banner = loop {
            match stdout.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("supervisor pid") => break line,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{name} printed no start-up line within {START_TIMEOUT:?} (its log: {})",
                        log_file.display()
                    ));
                }
            }
        };
        // Workers print their own start-up lines as they are replaced: read them all,
        // so that the pipe never fills.
        std::thread::spawn(move || for _ in stdout {});
        let addr = banner
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("no address in {name}'s start-up line: {banner}"))?;
        Ok(Server {
            name,
            child,
            addr,
            log,
        })
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its workers now (the supervisor's live children).
    pub fn workers(&self) -> Vec<u32> {
        children(self.pid())
    }

    /// Every process of it: the supervisor first.
    pub fn processes(&self) -> Vec<u32> {
        let mut all = vec![self.pid()];
        all.extend(self.workers());
        all
    }

    /// SIGTERM, then wait (bounded) for the exit; Ok when it exited with status 0.
    pub fn stop(&mut self) -> Result<(), String> {
        signal(self.pid(), "TERM")?;
        let status = wait_exit(&mut self.child, STOP_TIMEOUT)?;
        match status.success() {
            true => Ok(()),
            false => Err(format!("{} exited with {status} after SIGTERM", self.name)),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) && self.stop().is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_lines_are_told_from_the_others() {
        assert!(is_access(
            "2026-12-03T19:11:15.781Z INFO  GET /stats 200 0.105ms route=stats"
        ));
        assert!(!is_access(
            "2026-12-03T19:11:10.102Z INFO  fiberstack: supervisor: started worker 1"
        ));
        assert!(!is_access(
            "2026-12-03T19:11:15.796Z ERROR fiberstack: GET deep -> 500: fiber stack overflow"
        ));
    }

    #[test]
    fn this_process_is_a_child_of_its_parent() {
        let me = std::process::id();
        let parent = fs::read_to_string(format!("/proc/{me}/stat"))
            .unwrap()
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u32>()
            .unwrap();
        assert!(children(parent).contains(&me));
        assert!(alive(me));
        assert!(rss_kib(me).unwrap() > 0 && fds(me).unwrap() > 0);
    }
}
