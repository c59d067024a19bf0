//! The supervisor process: bind the port once, start the workers, replace each one that
//! exits, crashes or asks, roll them all on SIGHUP, and stop them all on SIGTERM or
//! SIGINT. It never accepts a connection; it only keeps the listening socket open.
//!
//! One thread (the caller of [`Supervisor::run`]) decides everything, from a channel of
//! events; each worker has a thread that waits for its exit (and kills it when told)
//! and a thread that reads its control socket (`worker.rs` has the protocol).
//!
//! ## Replacements asked for are rate-bounded
//! A worker that asks to be replaced (`replace`, or `suspect` after a stack overflow
//! left it suspect: it has stopped accepting, `suspect.rs`) is replaced at once, up to
//! [`REPLACE_BURST`] replacements in any [`REPLACE_WINDOW`]; one past that starts when
//! the oldest of those leaves the window. So a flood of overflows costs at most one
//! process start a second, not one per overflow. (A worker that dies is replaced at
//! once, or after the crash-loop delay; a SIGHUP rolls every worker, unbounded.)
//!
//! ## Nobody waits in the backlog for nothing
//! While no worker accepts (the only one is suspect, dead or stopping) connections wait
//! in the kernel's backlog for the replacement, [`BACKLOG_WAIT`] at most; when no
//! replacement is starting (the rate bound holds it back, a crash loop delays it) or it
//! takes longer, the supervisor answers them itself, a 503 with `Retry-After` (seconds
//! until the replacement is due) and `Connection: close` (`refuse.rs`), until a worker
//! accepts again.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::inherit::{self, SUPERVISOR_PID_ENV, WORKER_ENV};
use super::refuse::Refuser;
use crate::http::listener::bind_error;
use crate::Error;

/// Most `--processes`: each worker is a whole server with its own pools.
pub(crate) const MAX_PROCESSES: usize = 64;
/// How often the supervisor looks at its deadlines when no event comes.
const TICK: Duration = Duration::from_millis(20);
/// How often a worker's waiter thread looks whether it exited.
const EXIT_POLL: Duration = Duration::from_millis(5);
/// Past its grace period, how long a stopping worker gets before it is killed.
const STOP_MARGIN: Duration = Duration::from_secs(2);
/// A worker that dies within this time of its start counts as crash-looping...
const CRASH_WINDOW: Duration = Duration::from_secs(2);
/// ... and its replacement waits this long, doubled per crash in a row, up to
/// [`MAX_RESTART_DELAY`].
const FIRST_RESTART_DELAY: Duration = Duration::from_millis(100);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(5);
/// Replacements that workers ask for start at once up to this many in any
/// [`REPLACE_WINDOW`] (see the module comment)...
pub(crate) const REPLACE_BURST: usize = 5;
/// ... and one more each time the oldest of them leaves this window: one a second.
pub(crate) const REPLACE_WINDOW: Duration = Duration::from_secs(5);
/// Longest the backlog waits for a starting replacement while no worker accepts,
/// before the supervisor answers it (a worker starts in a few hundred milliseconds).
pub(crate) const BACKLOG_WAIT: Duration = Duration::from_secs(1);

/// What the supervisor needs to know.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// Worker processes (`--processes`), 1 to `MAX_PROCESSES` (64).
    pub processes: usize,
    /// The address to bind once (`--bind`).
    pub bind: SocketAddr,
    /// Connections the kernel queues for the workers.
    pub listen_backlog: i32,
    /// Time a stopping worker gets to finish its requests (`--shutdown-grace`).
    pub shutdown_grace: Duration,
    /// Longest a new worker may take to say it accepts before it is killed and retried.
    pub start_timeout: Duration,
}

impl SupervisorConfig {
    /// `processes` workers on `bind`, with the defaults of `config.rs` for the rest.
    #[cfg(test)]
    pub(crate) fn new(processes: usize, bind: SocketAddr) -> Self {
        SupervisorConfig {
            processes,
            bind,
            listen_backlog: crate::config::HttpLimits::default().listen_backlog,
            shutdown_grace: crate::config::DEFAULT_SHUTDOWN_GRACE,
            start_timeout: crate::config::DEFAULT_WORKER_START_TIMEOUT,
        }
    }
}

/// A bound port and the workers to run on it.
pub struct Supervisor {
    cfg: SupervisorConfig,
    /// The listening socket; closed (`None`) once every worker is told to stop, so
    /// that the port closes when the last worker has taken its backlog.
    listener: Option<TcpListener>,
    /// Its address, for the start-up line and the log.
    addr: SocketAddr,
    exe: PathBuf,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    /// Appended to the start-up line (what the workers share, like MariaDB).
    note: String,
}

impl Supervisor {
    /// Check the settings and bind the port: the errors name the flag to change.
    pub fn bind(cfg: SupervisorConfig) -> Result<Supervisor, Error> {
        if !(1..=MAX_PROCESSES).contains(&cfg.processes) {
            return Err(Error::Option {
                name: "--processes".into(),
                why: format!("must be from 1 to {MAX_PROCESSES}, got {}", cfg.processes),
            });
        }
        let listener = match inherit::take_listener()
            .map_err(|e| Error::io("take the inherited listening socket", e))?
        {
            // systemd's socket activation: the socket is bound (and listening) already;
            // the workers get it from this process, as they would a bound one.
            Some(inherited) => inherited,
            None => {
                // std binds without SO_REUSEPORT: a port another server listens on is
                // refused.
                let listen = || format!("listen on {} (--bind)", cfg.bind);
                let listener = TcpListener::bind(cfg.bind)
                    .map_err(|e| Error::io(listen(), bind_error(cfg.bind, e)))?;
                socket2::SockRef::from(&listener)
                    .listen(cfg.listen_backlog)
                    .map_err(|e| Error::io(listen(), e))?;
                listener
            }
        };
        // Resolved now: after a new binary is installed at this path, SIGHUP runs it.
        let exe = std::env::current_exe()
            .map_err(|e| Error::io("find this program to start workers", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("read the bound address", e))?;
        Ok(Supervisor {
            cfg,
            listener: Some(listener),
            addr,
            exe,
            args: std::env::args_os().skip(1).collect(),
            env: Vec::new(),
            note: String::new(),
        })
    }

    /// The bound address (the real port when bound to port 0).
    pub(crate) fn addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }

    /// A variable every worker gets (for example the private MariaDB's URL: the
    /// environment, unlike argv, is not visible to other users).
    pub fn env(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.env.push((name.into(), value.into()));
    }

    /// Add `text` to the start-up line (`fiberstack: listening on ... | text`).
    pub fn note(&mut self, text: impl Into<String>) {
        self.note = text.into();
    }

    /// Start the workers, keep them running until SIGTERM or SIGINT, then stop them all
    /// (each finishes its requests up to the grace period) and return. Errors: a worker
    /// of the first generation could not start.
    pub fn run(self) -> Result<(), Error> {
        let (tx, rx) = mpsc::channel();
        forward_signals(tx.clone())?;
        self.run_on(tx, rx)
    }

    /// [`Supervisor::run`] on a channel of events (a test sends its own signals).
    fn run_on(self, tx: mpsc::Sender<Event>, rx: mpsc::Receiver<Event>) -> Result<(), Error> {
        let mut state = State {
            sup: self,
            tx,
            workers: Vec::new(),
            next_generation: Vec::new(),
            restarts: VecDeque::new(),
            crashes: Vec::new(),
            rolling: VecDeque::new(),
            deferred: Vec::new(),
            stopping: false,
            asked: VecDeque::new(),
            no_worker_since: None,
            refuser: None,
        };
        let n = state.sup.cfg.processes;
        state.next_generation = vec![0; n + 1];
        state.crashes = vec![0; n + 1];
        for id in 1..=n {
            state.spawn(id, "start".into())?;
        }
        state.wait_first_generation(&rx)?;
        state.supervise(&rx);
        Ok(())
    }
}

/// What the decision thread hears.
enum Event {
    Signal(i32),
    Ready {
        id: usize,
        generation: u64,
    },
    Replace {
        id: usize,
        generation: u64,
        reason: String,
        /// The worker said `suspect`: it accepts no more.
        suspect: bool,
    },
    Exited {
        id: usize,
        generation: u64,
        status: io::Result<ExitStatus>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Started, not yet accepting.
    Starting,
    /// Accepting.
    Serving,
    /// Told to stop: finishing its requests.
    Stopping,
}

struct Proc {
    id: usize,
    generation: u64,
    pid: u32,
    started: Instant,
    phase: Phase,
    /// When the phase began (for the start and stop deadlines).
    since: Instant,
    /// Why it was started.
    why: String,
    /// Takes connections once serving: false once it said `suspect`.
    accepting: bool,
    control: UnixStream,
    kill: Arc<AtomicBool>,
}

impl Proc {
    fn name(&self) -> String {
        format!(
            "worker {} generation {} (pid {})",
            self.id, self.generation, self.pid
        )
    }

    /// Tell the worker to stop, saying `why` (it logs the reason as its own): `stop`
    /// when another worker takes its place (it leaves the backlog to it), `stop-all`
    /// when every worker stops (it takes what waits in the backlog first: nobody else
    /// will).
    fn tell_stop(&mut self, word: &str, why: &str) {
        self.phase = Phase::Stopping;
        self.since = Instant::now();
        // A worker that cannot hear it is killed at the stop deadline. One line: the
        // reason is ours, with no newline in it.
        let _ = writeln!(self.control, "{word} {}", why.replace('\n', " "));
    }
}

struct State {
    sup: Supervisor,
    tx: mpsc::Sender<Event>,
    workers: Vec<Proc>,
    /// Per slot (index = worker id), the next generation number.
    next_generation: Vec<u64>,
    /// Replacements waiting for their delay (crash loops): when, which slot, why.
    restarts: VecDeque<(Instant, usize, String)>,
    /// Per slot, deaths in a row within [`CRASH_WINDOW`] of their start.
    crashes: Vec<u32>,
    /// Slots a rolling restart (SIGHUP) has yet to replace, in order.
    rolling: VecDeque<usize>,
    /// Requests for replacement heard while the first workers were starting (and
    /// whether each said `suspect`).
    deferred: Vec<(usize, u64, String, bool)>,
    stopping: bool,
    /// When the replacements workers asked for started (or will), oldest first, for
    /// the rate bound (see the module comment).
    asked: VecDeque<Instant>,
    /// Since when no worker accepts.
    no_worker_since: Option<Instant>,
    /// The supervisor's own answers to the backlog, while no worker accepts.
    refuser: Option<Refuser>,
}

impl State {
    fn log(&self, what: impl AsRef<str>) {
        log::info!(target: crate::logging::app_name(), "supervisor: {}", what.as_ref());
    }

    /// Start a worker for slot `id`.
    fn spawn(&mut self, id: usize, why: String) -> Result<(), Error> {
        let generation = self.next_generation[id];
        self.next_generation[id] += 1;
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| Error::io(format!("start worker {id}"), e))?;
        let Some(listener) = &self.sup.listener else {
            // The listener goes when every worker is told to stop.
            let stopping = io::Error::other("the supervisor is stopping");
            return Err(Error::io(format!("start worker {id}"), stopping));
        };
        let (copy, listen_env) = inherit::for_child(listener)
            .map_err(|e| Error::io(format!("pass the listening socket to worker {id}"), e))?;
        let mut cmd = Command::new(&self.sup.exe);
        cmd.args(&self.sup.args)
            .env_remove("LISTEN_PID")
            .envs(listen_env)
            .env(SUPERVISOR_PID_ENV, std::process::id().to_string())
            .env(WORKER_ENV, format!("{id}.{generation}"))
            .envs(self.sup.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(OwnedFd::from(theirs)));
        let child = cmd.spawn();
        drop(copy);
        let child = child
            .map_err(|e| Error::io(format!("start worker {id} ({})", self.sup.exe.display()), e))?;
        let proc = Proc {
            id,
            generation,
            pid: child.id(),
            started: Instant::now(),
            phase: Phase::Starting,
            since: Instant::now(),
            why,
            accepting: true,
            control: ours,
            kill: Arc::new(AtomicBool::new(false)),
        };
        self.log(format!("started {} ({})", proc.name(), proc.why));
        wait_for_exit(
            child,
            id,
            generation,
            Arc::clone(&proc.kill),
            self.tx.clone(),
        );
        read_control(&proc, self.tx.clone());
        self.workers.push(proc);
        Ok(())
    }

    fn find(&mut self, id: usize, generation: u64) -> Option<usize> {
        self.workers
            .iter()
            .position(|p| p.id == id && p.generation == generation)
    }

    /// Wait until every first worker accepts; any of them dying first is an error
    /// (its own message is on stderr already), and the others are stopped.
    fn wait_first_generation(&mut self, rx: &mpsc::Receiver<Event>) -> Result<(), Error> {
        loop {
            if self.workers.iter().all(|p| p.phase == Phase::Serving) {
                // The start-up line, on stdout like a single server's.
                crate::logging::banner(&format!(
                    "{}: listening on http://{} | supervisor pid {}, {} worker \
                     processes (SIGHUP restarts them one by one){}",
                    crate::logging::app_name(),
                    self.sup
                        .addr()
                        .map_err(|e| Error::io("read the bound address", e))?,
                    std::process::id(),
                    self.workers.len(),
                    if self.sup.note.is_empty() {
                        String::new()
                    } else {
                        format!(" | {}", self.sup.note)
                    }
                ));
                return Ok(());
            }
            let failure = match rx.recv_timeout(TICK) {
                Ok(Event::Ready { id, generation }) => {
                    if let Some(i) = self.find(id, generation) {
                        self.workers[i].phase = Phase::Serving;
                    }
                    None
                }
                Ok(Event::Exited {
                    id,
                    generation,
                    status,
                }) => {
                    self.find(id, generation).map(|i| self.workers.remove(i));
                    Some(match status {
                        Ok(status) => Error::WorkerExited { id, status },
                        Err(e) => Error::io(format!("wait for worker {id}"), e),
                    })
                }
                Ok(Event::Signal(_)) => Some(Error::StoppedDuringStartup),
                Ok(Event::Replace {
                    id,
                    generation,
                    reason,
                    suspect,
                }) => {
                    // Answered once every first worker accepts.
                    self.deferred.push((id, generation, reason, suspect));
                    None
                }
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the supervisor's state holds a sender of its own channel")
                }
            };
            let late = self
                .workers
                .iter()
                .find(|p| {
                    p.phase == Phase::Starting && p.since.elapsed() > self.sup.cfg.start_timeout
                })
                .map(|p| Error::WorkerStartTimeout {
                    id: p.id,
                    limit: self.sup.cfg.start_timeout,
                });
            if let Some(why) = failure.or(late) {
                self.stop_all(rx, "another worker failed to start");
                return Err(why);
            }
        }
    }

    /// The steady state: replace, roll, and finally stop.
    fn supervise(&mut self, rx: &mpsc::Receiver<Event>) {
        for (id, generation, reason, suspect) in std::mem::take(&mut self.deferred) {
            self.replace(id, generation, &reason, suspect);
        }
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Event::Signal(signal_hook::consts::SIGHUP)) => self.roll_all(),
                Ok(Event::Signal(signal)) => {
                    let name = if signal == signal_hook::consts::SIGINT {
                        "SIGINT"
                    } else {
                        "SIGTERM"
                    };
                    self.log(format!(
                        "got {name}: stopping {} workers (each finishes its requests, up to {:?})",
                        self.workers.len(),
                        self.sup.cfg.shutdown_grace
                    ));
                    self.stop_all(rx, &format!("got {name}"));
                    self.log("every worker has stopped");
                    return;
                }
                Ok(Event::Ready { id, generation }) => self.ready(id, generation),
                Ok(Event::Replace {
                    id,
                    generation,
                    reason,
                    suspect,
                }) => self.replace(id, generation, &reason, suspect),
                Ok(Event::Exited {
                    id,
                    generation,
                    status,
                }) => self.exited(id, generation, status),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            self.deadlines();
            self.answer_backlog();
        }
    }

    /// A new worker accepts: the one it replaces stops accepting and finishes.
    fn ready(&mut self, id: usize, generation: u64) {
        let Some(i) = self.find(id, generation) else {
            return;
        };
        self.workers[i].phase = Phase::Serving;
        let took = self.workers[i].started.elapsed();
        let new = self.workers[i].name();
        let mut replaced = Vec::new();
        for old in self
            .workers
            .iter_mut()
            .filter(|p| p.id == id && p.generation != generation && p.phase == Phase::Serving)
        {
            old.tell_stop("stop", &format!("replaced by {new}"));
            replaced.push(old.name());
        }
        self.log(format!(
            "{new} accepts, {} ms after its start{}",
            took.as_millis(),
            if replaced.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} stops accepting and finishes its requests (up to {:?})",
                    replaced.join(", "),
                    self.sup.cfg.shutdown_grace
                )
            }
        ));
        self.crashes[id] = 0;
        if replaced.is_empty() {
            self.next_roll(id);
        }
    }

    /// A worker asked to be replaced (the stall watchdog, broken state after a fault),
    /// and said whether it still accepts: at once, or when the rate bound lets it.
    fn replace(&mut self, id: usize, generation: u64, reason: &str, suspect: bool) {
        let Some(i) = self.find(id, generation) else {
            return;
        };
        if suspect {
            self.workers[i].accepting = false;
        }
        if self.workers[i].phase != Phase::Serving || self.starting(id) {
            return; // already being replaced (or, starting, replaced once it is ready)
        }
        let how = match suspect {
            true => "is suspect, has stopped accepting, and asks to be replaced",
            false => "asked to be replaced",
        };
        let why = format!("{} {how}: {reason}", self.workers[i].name());
        let now = Instant::now();
        let at = self.next_replacement(now);
        if at <= now {
            self.log(&why);
            if let Err(e) = self.spawn(id, why) {
                self.log(e.to_string());
            }
            return;
        }
        self.log(format!(
            "{why}; the replacement starts in {} ms (at most {REPLACE_BURST} replacements \
             asked for start in any {REPLACE_WINDOW:?})",
            (at - now).as_millis()
        ));
        self.restarts.push_back((at, id, why));
    }

    /// When the next replacement a worker asks for may start (see the module comment),
    /// booked as started then.
    fn next_replacement(&mut self, now: Instant) -> Instant {
        while self
            .asked
            .front()
            .is_some_and(|&at| at + REPLACE_WINDOW <= now)
        {
            self.asked.pop_front();
        }
        let at = match self.asked.len().checked_sub(REPLACE_BURST) {
            Some(k) => (self.asked[k] + REPLACE_WINDOW).max(now),
            None => now,
        };
        self.asked.push_back(at);
        at
    }

    /// A serving worker that accepts no more and is not being replaced yet (it said
    /// `suspect` while still starting): replaced now, as if it had said so serving.
    fn replace_suspects(&mut self) {
        let stranded: Vec<(usize, u64)> = self
            .workers
            .iter()
            .filter(|p| p.phase == Phase::Serving && !p.accepting)
            .map(|p| (p.id, p.generation))
            .collect();
        for (id, generation) in stranded {
            if !self.starting(id) {
                self.replace(id, generation, "it said so before it accepted", true);
            }
        }
    }

    /// While no worker accepts: after [`BACKLOG_WAIT`], or at once when no replacement
    /// is starting, the supervisor answers the backlog itself (see the module comment).
    fn answer_backlog(&mut self) {
        self.replace_suspects();
        let accepting = self
            .workers
            .iter()
            .any(|p| p.phase == Phase::Serving && p.accepting);
        if accepting || self.stopping {
            self.no_worker_since = None;
            if let Some(refuser) = self.refuser.take() {
                self.log(format!(
                    "a worker accepts again: the supervisor stops answering the port \
                     ({} connections answered with a 503)",
                    refuser.answered()
                ));
            }
            return;
        }
        let since = *self.no_worker_since.get_or_insert_with(Instant::now);
        let starting = self.workers.iter().any(|p| p.phase == Phase::Starting);
        if starting && since.elapsed() < BACKLOG_WAIT {
            return; // the replacement is about to accept
        }
        let now = Instant::now();
        let due = self.restarts.iter().map(|(at, _, _)| *at).min();
        let retry_after = due.map_or(1, |at| at.saturating_duration_since(now).as_secs() + 1);
        match (&self.refuser, &self.sup.listener) {
            (Some(refuser), _) => refuser.retry_after(retry_after),
            (None, Some(listener)) => match Refuser::start(listener, retry_after) {
                Ok(refuser) => {
                    self.log(format!(
                        "no worker accepts{}: the supervisor answers the port itself, a \
                         503 with Retry-After {retry_after}, until one does",
                        if starting {
                            format!(" and the replacement is not ready after {BACKLOG_WAIT:?}")
                        } else {
                            String::new()
                        }
                    ));
                    self.refuser = Some(refuser);
                }
                Err(e) => self.log(format!(
                    "cannot answer the port while no worker accepts: {e}"
                )),
            },
            (None, None) => {}
        }
    }

    fn starting(&self, id: usize) -> bool {
        self.workers
            .iter()
            .any(|p| p.id == id && p.phase == Phase::Starting)
            || self.restarts.iter().any(|(_, slot, _)| *slot == id)
    }

    fn exited(&mut self, id: usize, generation: u64, status: io::Result<ExitStatus>) {
        let Some(i) = self.find(id, generation) else {
            return;
        };
        let proc = self.workers.remove(i);
        let how = describe(&status);
        if proc.phase == Phase::Stopping {
            self.log(format!("{} {how} after it was replaced", proc.name()));
            self.next_roll(id);
            return;
        }
        if self.stopping {
            return;
        }
        let quick = proc.started.elapsed() < CRASH_WINDOW;
        self.crashes[id] = if quick { self.crashes[id] + 1 } else { 0 };
        let delay = match self.crashes[id] {
            0 | 1 => Duration::ZERO,
            n => (FIRST_RESTART_DELAY * 2u32.saturating_pow(n - 2)).min(MAX_RESTART_DELAY),
        };
        let why = format!(
            "{} {how} while {}; replacing it{}",
            proc.name(),
            if proc.phase == Phase::Starting {
                "starting"
            } else {
                "serving"
            },
            if delay.is_zero() {
                String::new()
            } else {
                format!(
                    " in {} ms (it died {} times in a row within {CRASH_WINDOW:?} of its start)",
                    delay.as_millis(),
                    self.crashes[id]
                )
            }
        );
        self.log(&why);
        if self.starting(id) {
            return; // its replacement is already on the way
        }
        self.restarts.push_back((Instant::now() + delay, id, why));
        self.deadlines();
    }

    /// SIGHUP: replace every worker, one at a time (new first, then the old stops).
    fn roll_all(&mut self) {
        let mut ids: Vec<usize> = self
            .workers
            .iter()
            .filter(|p| p.phase == Phase::Serving)
            .map(|p| p.id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.log(format!(
            "got SIGHUP: restarting workers {ids:?} one at a time (a new binary at {} takes over)",
            self.sup.exe.display()
        ));
        let idle = self.rolling.is_empty();
        self.rolling.extend(ids);
        if idle {
            self.roll_next();
        }
    }

    fn roll_next(&mut self) {
        while let Some(&id) = self.rolling.front() {
            if self.starting(id) {
                return; // that slot is being replaced already; go on when it is done
            }
            if let Err(e) = self.spawn(id, "SIGHUP: rolling restart".into()) {
                self.log(e.to_string());
                self.rolling.pop_front();
                continue;
            }
            return;
        }
    }

    /// The slot `id` finished a replacement: roll the next one, if rolling.
    fn next_roll(&mut self, id: usize) {
        if self.rolling.front() == Some(&id) {
            self.rolling.pop_front();
            self.roll_next();
        }
    }

    /// Delayed restarts that are due, workers late to start, stopping ones late to exit.
    fn deadlines(&mut self) {
        let now = Instant::now();
        // Due in any order: a crash loop's delay and the rate bound's interleave.
        while let Some(due) = self.restarts.iter().position(|(at, _, _)| *at <= now) {
            let (_, id, why) = self.restarts.remove(due).expect("found just above");
            if let Err(e) = self.spawn(id, why) {
                self.log(e.to_string());
            }
        }
        let start_timeout = self.sup.cfg.start_timeout;
        let stop_timeout = self.sup.cfg.shutdown_grace + STOP_MARGIN;
        for p in &self.workers {
            let late = match p.phase {
                Phase::Starting => p.since.elapsed() > start_timeout,
                Phase::Stopping => p.since.elapsed() > stop_timeout,
                Phase::Serving => false,
            };
            if late && !p.kill.swap(true, Ordering::AcqRel) {
                log::warn!(
                    target: crate::logging::app_name(),
                    "supervisor: {} did not {} within {:?}: killing it",
                    p.name(),
                    if p.phase == Phase::Starting {
                        "accept"
                    } else {
                        "exit"
                    },
                    if p.phase == Phase::Starting {
                        start_timeout
                    } else {
                        stop_timeout
                    }
                );
            }
        }
    }

    /// Tell every worker to stop, saying `why`, and wait until all have exited
    /// (killing the late).
    fn stop_all(&mut self, rx: &mpsc::Receiver<Event>, why: &str) {
        self.stopping = true;
        self.restarts.clear();
        self.rolling.clear();
        // Its copy of the socket goes with it (within its poll).
        self.refuser = None;
        // Our copy of the socket first: the port closes once the workers, which take
        // what waits in its backlog, have closed theirs.
        self.sup.listener = None;
        for p in &mut self.workers {
            p.tell_stop("stop-all", why);
        }
        while !self.workers.is_empty() {
            match rx.recv_timeout(TICK) {
                Ok(Event::Exited {
                    id,
                    generation,
                    status,
                }) => {
                    if let Some(i) = self.find(id, generation) {
                        let p = self.workers.remove(i);
                        self.log(format!("{} {}", p.name(), describe(&status)));
                    }
                }
                Ok(Event::Ready { id, generation }) => {
                    // Started before the stop and only now ready: it hears `stop` too.
                    if let Some(i) = self.find(id, generation) {
                        self.workers[i].tell_stop("stop-all", why);
                    }
                }
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            self.deadlines();
        }
    }
}

/// How a worker ended, for the log.
fn describe(status: &io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(0), _) => "exited (status 0)".into(),
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(9)) => "was killed (SIGKILL)".into(),
            (None, Some(sig)) => format!("died of signal {sig}"),
            (None, None) => format!("ended ({s})"),
        },
        Err(e) => format!("could not be waited for ({e})"),
    }
}

/// SIGHUP, SIGTERM and SIGINT become events.
fn forward_signals(tx: mpsc::Sender<Event>) -> Result<(), Error> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM])
        .map_err(|e| Error::io("install signal handlers", e))?;
    std::thread::Builder::new()
        .name("supervisor-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if tx.send(Event::Signal(signal)).is_err() {
                    return;
                }
            }
        })
        .map(drop)
        .map_err(|e| Error::io("start the signal thread", e))
}

/// A thread that reports the worker's exit, and kills it when `kill` is set.
fn wait_for_exit(
    mut child: Child,
    id: usize,
    generation: u64,
    kill: Arc<AtomicBool>,
    tx: mpsc::Sender<Event>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("worker-{id}-wait"))
        .spawn(move || {
            let mut killed = false;
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Ok(status),
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
                if !killed && kill.load(Ordering::Acquire) {
                    killed = true;
                    let _ = child.kill();
                }
                std::thread::sleep(EXIT_POLL);
            };
            let _ = tx.send(Event::Exited {
                id,
                generation,
                status,
            });
        });
    if let Err(e) = spawned {
        log::warn!(target: crate::logging::app_name(), "supervisor: cannot watch worker {id}: {e}");
    }
}

/// A thread that turns the worker's lines into events.
fn read_control(proc: &Proc, tx: mpsc::Sender<Event>) {
    let (id, generation) = (proc.id, proc.generation);
    let Ok(reader) = proc.control.try_clone() else {
        log::warn!(target: crate::logging::app_name(), "supervisor: cannot read worker {id}'s messages");
        return;
    };
    let spawned = std::thread::Builder::new()
        .name(format!("worker-{id}-read"))
        .spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { return };
                let event = match line.trim().split_once(' ') {
                    _ if line.trim() == "ready" => Event::Ready { id, generation },
                    Some((word @ ("replace" | "suspect"), reason)) => Event::Replace {
                        id,
                        generation,
                        reason: reason.to_string(),
                        suspect: word == "suspect",
                    },
                    _ => continue,
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!(target: crate::logging::app_name(), "supervisor: cannot read worker {id}'s messages: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A supervisor of one fake worker: a shell that says `ready`, does
    /// `first_generation` (in generation 0 only), waits for `stop`, and logs its life.
    fn fake(log: &Path, first_generation: &str) -> Supervisor {
        let log = log.display();
        let script = format!(
            "echo \"$FIBERSTACK_WORKER start\" >> {log}; echo ready >&0; \
             case $FIBERSTACK_WORKER in *.0) {first_generation};; esac; \
             read line; echo \"$FIBERSTACK_WORKER $line\" >> {log}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        Supervisor {
            cfg: SupervisorConfig::new(1, addr),
            listener: Some(listener),
            addr,
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            note: String::new(),
        }
    }

    /// Run `fake(first_generation)` until its log has `until`, then SIGTERM; the log.
    fn supervise_fake(name: &str, first_generation: &str, until: &str) -> Vec<String> {
        let log = std::env::temp_dir().join(format!(
            "fiber_web-supervisor-{name}-{}.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let (tx, rx) = mpsc::channel();
        let signal = tx.clone();
        let sup = fake(&log, first_generation);
        let run = std::thread::spawn(move || sup.run_on(tx, rx));
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !read().contains(until) {
            assert!(Instant::now() < deadline, "no '{until}' in:\n{}", read());
            std::thread::sleep(Duration::from_millis(10));
        }
        signal
            .send(Event::Signal(signal_hook::consts::SIGTERM))
            .unwrap();
        if let Err(e) = run.join().unwrap() {
            panic!("the supervisor failed: {e}");
        }
        let lines = read().lines().map(str::to_string).collect();
        let _ = std::fs::remove_file(&log);
        lines
    }

    #[test]
    fn a_worker_that_asks_is_replaced_new_first() {
        let life = supervise_fake("asks", "echo 'replace testing' >&0", "1.0 stop");
        // The new worker started before the old one was told to stop (and to leave the
        // backlog to it); SIGTERM then stopped the new one, with the backlog its own.
        assert_eq!(life.len(), 4, "{life:?}");
        assert_eq!(life[..2], ["1.0 start", "1.1 start"]);
        assert!(
            life[2].starts_with("1.0 stop replaced by worker 1 generation 1"),
            "{life:?}"
        );
        assert_eq!(life[3], "1.1 stop-all got SIGTERM");
    }

    /// Every worker says `ready`, then `suspect` (as one a stack overflow left suspect
    /// does), and logs its start with the time in milliseconds.
    fn suspect_every_time(log: &Path) -> Supervisor {
        let mut sup = fake(log, "");
        let log = log.display();
        let script = format!(
            "echo \"$FIBERSTACK_WORKER start $(date +%s%3N)\" >> {log}; echo ready >&0; \
             echo 'suspect testing' >&0; read line; echo \"$FIBERSTACK_WORKER $line\" >> {log}"
        );
        sup.args = vec!["-c".into(), script.into()];
        sup
    }

    /// A flood of workers that turn suspect as soon as they accept: the first
    /// REPLACE_BURST replacements start at once, the next one only REPLACE_WINDOW after
    /// the first of them; meanwhile no worker accepts, and the supervisor answers a
    /// client itself: a 503 with Retry-After and Connection: close.
    #[test]
    fn replacements_asked_for_are_rate_bounded_and_the_backlog_is_answered_meanwhile() {
        let log = std::env::temp_dir().join(format!(
            "fiber_web-supervisor-flood-{}.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let sup = suspect_every_time(&log);
        let addr = sup.addr;
        let (tx, rx) = mpsc::channel();
        let signal = tx.clone();
        let run = std::thread::spawn(move || sup.run_on(tx, rx));
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        let started = |generation: usize| -> Option<u64> {
            read()
                .lines()
                .find_map(|l| l.strip_prefix(&format!("1.{generation} start ")))
                .and_then(|ms| ms.trim().parse().ok())
        };
        let wait = |what: &str, within: Duration, done: &dyn Fn() -> bool| {
            let deadline = Instant::now() + within;
            while !done() {
                assert!(Instant::now() < deadline, "no {what}:\n{}", read());
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let last_at_once = REPLACE_BURST;
        wait("burst of replacements", Duration::from_secs(20), &|| {
            started(last_at_once).is_some()
        });
        // The next replacement waits for the window: no worker accepts meanwhile.
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        std::io::Read::read_to_string(&mut client, &mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
        assert!(reply.contains("Retry-After: "), "{reply}");
        assert!(reply.contains("Connection: close\r\n"), "{reply}");
        assert!(started(last_at_once + 1).is_none(), "{}", read());
        wait(
            "replacement past the burst",
            REPLACE_WINDOW + Duration::from_secs(10),
            &|| started(last_at_once + 1).is_some(),
        );
        let (first, next) = (started(1).unwrap(), started(last_at_once + 1).unwrap());
        let window = REPLACE_WINDOW.as_millis() as u64;
        assert!(next >= first + window - 50, "{first} {next}:\n{}", read());
        signal
            .send(Event::Signal(signal_hook::consts::SIGTERM))
            .unwrap();
        if let Err(e) = run.join().unwrap() {
            panic!("the supervisor failed: {e}");
        }
        let _ = std::fs::remove_file(&log);
    }

    #[test]
    fn a_worker_that_dies_is_replaced() {
        // (It serves half a second first: a death before its `ready` is read is a
        // start-up failure, which ends the supervisor with an error instead.)
        let life = supervise_fake("dies", "sleep 0.5; exit 3", "1.1 start");
        assert_eq!(life, ["1.0 start", "1.1 start", "1.1 stop-all got SIGTERM"]);
    }
}
