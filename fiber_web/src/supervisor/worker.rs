//! The worker's side: who this worker is, and its line protocol with the supervisor
//! over the Unix socket that is its stdin.
//!
//! Worker to supervisor: `ready` (it accepts now), `replace <reason>` (it wants to be
//! replaced), `suspect <reason>` (a stack overflow left it suspect: it has stopped
//! accepting and wants to be replaced, `suspect.rs`). Supervisor to worker: `stop`
//! (stop accepting, finish, exit). End of file
//! from the supervisor (it died) also means stop: a worker never outlives it by more
//! than its grace period. The socket is the worker's stdin because std can take that
//! descriptor safely (`stdin().as_fd()`), where an arbitrary fd number needs unsafe.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::inherit::{SUPERVISOR_PID_ENV, WORKER_ENV};
use crate::shutdown::StopRequests;

/// Longest a message to the supervisor may wait for room in the socket.
pub(crate) const CONTROL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// A worker process run by a supervisor.
#[derive(Debug)]
pub struct Worker {
    /// Which of the `--processes` slots, from 1.
    pub(crate) id: usize,
    /// How many workers this slot has had before this one (0 for the first).
    pub(crate) generation: u64,
    /// The supervisor's pid.
    pub(crate) supervisor_pid: u32,
    control: Mutex<UnixStream>,
}

static WORKER: OnceLock<Option<Worker>> = OnceLock::new();

/// This process's worker identity, when a supervisor started it (its pid in
/// `FIBERSTACK_SUPERVISOR_PID` is our parent's), else `None`.
pub fn worker() -> Option<&'static Worker> {
    WORKER.get_or_init(from_env).as_ref()
}

fn from_env() -> Option<Worker> {
    let supervisor_pid: u32 = std::env::var(SUPERVISOR_PID_ENV).ok()?.parse().ok()?;
    if supervisor_pid != std::os::unix::process::parent_id() {
        return None; // a grandchild that inherited the environment
    }
    let marker = std::env::var(WORKER_ENV).ok()?;
    let (id, generation) = marker.split_once('.')?;
    let control = UnixStream::from(io::stdin().as_fd().try_clone_to_owned().ok()?);
    // A stdin that is not a socket (a terminal, /dev/null) is not a supervisor's.
    control.peer_addr().ok()?;
    let _ = control.set_write_timeout(Some(CONTROL_WRITE_TIMEOUT));
    Some(Worker {
        id: id.parse().ok()?,
        generation: generation.parse().ok()?,
        supervisor_pid,
        control: Mutex::new(control),
    })
}

impl Worker {
    /// Whether this worker replaces an earlier one of its slot (after a crash, a
    /// replacement asked for, or a rolling restart): its slot's first worker has
    /// started, so what start-up set up once (a database schema) is there already.
    pub fn is_replacement(&self) -> bool {
        self.generation > 0
    }

    fn say(&self, line: &str) -> io::Result<()> {
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        control.write_all(format!("{line}\n").as_bytes())
    }

    /// `replace <reason>`, or `suspect <reason>` once this worker takes no more work
    /// (`suspect.rs`); the reason on one line: it cannot forge another command.
    fn ask(&self, reason: &str) -> io::Result<()> {
        let word = match crate::suspect::stopped() {
            true => "suspect",
            false => "replace",
        };
        self.say(&format!("{word} {}", reason.replace(['\n', '\r'], " ")))
    }
}

/// Tell the supervisor that this worker accepts connections now (call it once the
/// server listens); without a supervisor, nothing.
pub fn ready() {
    if let Some(w) = worker() {
        if let Err(e) = w.say("ready") {
            log::warn!(
                target: crate::logging::app_name(),
                "worker {}: cannot tell the supervisor it is ready: {e}",
                w.id
            );
        }
    }
}

/// Ask the supervisor to replace this worker: see the contract in `supervisor/mod.rs`.
/// Without a supervisor it logs and returns.
pub fn ask_for_replacement(reason: &str) {
    match worker() {
        Some(w) => {
            // The request goes out before anything is logged: an overflow may have
            // left stderr's lock held, and the log line would then block for good.
            let sent = w.ask(reason);
            log::warn!(
                target: crate::logging::app_name(),
                "worker {} (pid {}) asks to be replaced: {reason}",
                w.id,
                std::process::id()
            );
            if let Err(e) = sent {
                log::warn!(target: crate::logging::app_name(), "cannot reach the supervisor: {e}");
            }
        }
        None => log::warn!(
            target: crate::logging::app_name(),
            "this process should be replaced ({reason}), but no supervisor runs \
             it (start it with --processes 2 or more to have one): it carries on"
        ),
    }
}

/// What stops this process: SIGTERM; SIGINT too unless supervised (Ctrl-C reaches the
/// whole process group, and the supervisor then stops its workers in order); and a
/// supervised worker's `stop` from the supervisor, or the supervisor's end. Install it
/// before starting anything, so that a stop during start-up is not lost.
pub fn stop_requests() -> io::Result<StopRequests> {
    let requests = StopRequests::install(worker().is_none())?;
    if let Some(w) = worker() {
        let reader = w
            .control
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_clone()?;
        let tx = requests.sender();
        std::thread::Builder::new()
            .name("supervisor-link".into())
            .spawn(move || listen(reader, tx))?;
    }
    Ok(requests)
}

/// Set when the supervisor stops every worker (`stop-all`): no other worker will take
/// what waits in the shared backlog.
static EVERY_WORKER_STOPS: AtomicBool = AtomicBool::new(false);

/// Whether this worker stops together with every other one, so that what waits in
/// the listening socket's backlog is its own to serve; `false` for a worker being
/// replaced (its replacement takes the backlog) and for a process with no supervisor.
pub(crate) fn every_worker_stops() -> bool {
    EVERY_WORKER_STOPS.load(Ordering::Acquire)
}

/// Read the supervisor's words until it says stop or goes away.
fn listen(reader: UnixStream, tx: mpsc::Sender<String>) {
    let _ = reader.set_read_timeout(None);
    for line in BufReader::new(reader).lines() {
        match line.as_deref().map(str::trim) {
            Ok(said)
                if said
                    .split(' ')
                    .next()
                    .is_some_and(|w| w == "stop" || w == "stop-all") =>
            {
                let (word, why) = said.split_once(' ').unwrap_or((said, ""));
                if word == "stop-all" {
                    EVERY_WORKER_STOPS.store(true, Ordering::Release);
                }
                let why = why.trim();
                let why = if why.is_empty() {
                    "the supervisor asked".to_string()
                } else {
                    why.to_string()
                };
                let _ = tx.send(why);
                return;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = tx.send("the supervisor is gone".into());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_for_replacement_is_one_line_whatever_its_reason() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let w = Worker {
            id: 1,
            generation: 0,
            supervisor_pid: 1,
            control: Mutex::new(ours),
        };
        w.ask("stalled 10 s\nready").unwrap();
        let mut line = String::new();
        BufReader::new(theirs).read_line(&mut line).unwrap();
        assert_eq!(line, "replace stalled 10 s ready\n");
    }

    #[test]
    fn stop_or_the_supervisors_end_stops_the_worker() {
        for (said, why) in [
            (&b"hello\nstop\n"[..], "the supervisor asked"),
            (b"stop replaced by worker 1\n", "replaced by worker 1"),
            (b"stop-all got SIGTERM\n", "got SIGTERM"),
            (b"", "the supervisor is gone"),
        ] {
            let (mut supervisor, ours) = UnixStream::pair().unwrap();
            supervisor.write_all(said).unwrap();
            drop(supervisor);
            let (tx, rx) = mpsc::channel();
            listen(ours, tx);
            assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), why);
        }
    }
}
