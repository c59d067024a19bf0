//! A server running as a child process, the way a user starts it (`fiberstack serve`,
//! an example, or either behind `systemd-socket-activate`): its start-up line and
//! address, its stderr as it comes, signals, and a bounded wait for its exit. Killed
//! when dropped, so a failing test leaves nothing behind.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A started server process.
pub struct Served {
    pub child: Child,
    /// The address from its start-up line.
    pub addr: SocketAddr,
    /// Its start-up line.
    pub banner: String,
    /// Its stderr, line by line.
    pub stderr: mpsc::Receiver<String>,
    /// The stderr lines [`Served::wait_log`] has read so far.
    pub log: Vec<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each line of `pipe`, sent on as it comes (on a thread of its own).
fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

impl Served {
    /// Start `cmd` and wait (up to `within`) for the first stdout line that
    /// `is_banner` accepts; it names the address after `http://`.
    pub fn start(mut cmd: Command, is_banner: impl Fn(&str) -> bool, within: Duration) -> Served {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let deadline = Instant::now() + within;
        let banner = loop {
            match stdout.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if is_banner(&line) => break line,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "{cmd:?}: no start-up line within {within:?}; stderr: {:?}",
                        stderr.try_iter().collect::<Vec<_>>()
                    )
                }
            }
        };
        let addr = super::tools::banner_addr(&banner);
        Served {
            child,
            addr,
            banner,
            stderr,
            log: Vec::new(),
        }
    }

    /// Send signal `name` (TERM, HUP, ...).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{name} failed");
    }

    /// Wait (bounded) until stderr has had a line containing every one of `parts`.
    pub fn wait_log(&mut self, parts: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            self.log.extend(self.stderr.try_iter());
            if let Some(line) = self
                .log
                .iter()
                .find(|l| parts.iter().all(|p| l.contains(p)))
            {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no line with {parts:?} on stderr within {within:?}:\n{}",
                self.log.join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait (bounded) for the process to exit; its status and the stderr lines not
    /// yet read.
    pub fn wait_exit(&mut self, within: Duration) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The reader thread ends at the pipe's EOF, closing the channel.
                let mut lines = Vec::new();
                let eof_by = Instant::now() + Duration::from_secs(5);
                while let Ok(line) = self
                    .stderr
                    .recv_timeout(eof_by.saturating_duration_since(Instant::now()))
                {
                    lines.push(line);
                }
                return (status, lines);
            }
            assert!(Instant::now() < deadline, "did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pid of the private MariaDB, from the start-up line.
    pub fn mariadb_pid(&self) -> u32 {
        self.banner
            .split("(pid ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("no private MariaDB's pid in {:?}", self.banner))
    }
}

/// Whether `pid` runs (a zombie, dead but not yet reaped, does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}
