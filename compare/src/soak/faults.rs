//! The faults a soak injects, each on a thread of its own at its time in the plan: what
//! it does, how the soak sees the server recover, and the [`Window`] it leaves for the
//! verdict. Every wait is bounded; a recovery that does not come, or a fault that does
//! not show (a `/readyz` that never goes 503), is a failed check, which nothing
//! explains.
//!
//! - **kill-worker**: `kill -9` of a serving worker; recovered when the supervisor has
//!   its workers again, each accepting, and the victim is gone.
//! - **sighup**: SIGHUP to the supervisor; recovered when the roll has started a worker
//!   for every slot, every worker of the moment is gone and as many new ones accept.
//! - **sighup + kill**: the same, with `kill -9` of a worker once the roll's first
//!   replacement accepts (the one the roll is about to replace, or the fresh one, by
//!   turns). The roll replaces the killed worker's replacement too, when it comes to
//!   that slot: recovery waits for it.
//! - **mariadb-outage**: MariaDB SIGKILLed; `/readyz` must go 503; a worker is killed
//!   while MariaDB is down, so its replacement starts without a database; MariaDB is
//!   started again; recovered when `/readyz` of the demo and of the todo API answer 200
//!   [`READY_STREAK`] times in a row.
//! - **burst**: `ab` with more requests at once than every worker's fibers and queue
//!   hold, on `/sleep` (no MySQL); over when ab is done.
//! - **slow-clients** and **garbage** (`probes.rs`): heads and bodies sent a byte a
//!   second, which must end in a 408 or a close; requests that break HTTP, which must
//!   end in a 4xx (or 501, 505) or a close. Each is a probe counted like a request.
//! - **leavers**: waves of `curl -m` that leave their requests mid-way.

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{self, shorten};
use super::load::Tally;
use super::plan::{Plan, Step};
use super::probes::{garbage, slow_client, GARBAGE, SLOW_BODY, SLOW_HEAD};
use super::procs::{self, alive, Log, MariaDb, POLL};
use super::rule::{Cause, Failure, Fault, Window};

/// Longest wait for a worker-affecting fault to be recovered from (a replacement's
/// start, a rolling restart's drain, a crash loop's delay while MariaDB is down).
pub const RECOVERY_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest wait for `/readyz` to answer 503 once MariaDB is killed.
pub const NOT_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// `/readyz` answers of 200 in a row that mean the pools reconnected.
pub const READY_STREAK: usize = 3;
/// Longest answer of one `/readyz` probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long MariaDB stays down in a full-length cycle.
pub const OUTAGE: Duration = Duration::from_secs(4);
/// When, after MariaDB is killed, a worker is killed too (full-length cycle).
pub const OUTAGE_KILL_AFTER: Duration = Duration::from_secs(1);
/// The burst, over every worker's fibers plus queue.
pub const BURST_OVER_CAPACITY: f64 = 1.2;
/// What each request of the burst asks for: a wait that holds a fiber, without MySQL.
pub const BURST_PATH: &str = "/sleep?secs=0.5";
/// Longest the burst's `ab` may run (its own `-s` timeout is [`client::REQUEST_TIMEOUT`]).
const BURST_TIMEOUT: Duration = Duration::from_secs(120);
/// Waves of leaving clients, their size, and the gap between two (full-length cycle).
pub const LEAVER_WAVES: usize = 3;
pub const LEAVERS_PER_WAVE: usize = 20;
pub const LEAVER_GAP: Duration = Duration::from_secs(3);
/// How long a leaving client waits for its answer before it closes (`curl -m`).
pub const LEAVER_PATIENCE: &str = "0.3";
/// What the leavers ask for: a query, a fan-out, a self-call, a wait; each longer than
/// their patience.
pub const LEAVER_PATHS: [&str; 4] = [
    "/widgets?sleep=5",
    "/widgets/parallel?n=3&sleep=5",
    "/widgets/http",
    "/sleep?secs=5",
];
/// Longest a wave of leavers may take.
const LEAVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Slow clients: heads to the demo, bodies to the todo API.
pub const SLOW_HEADS: usize = 5;
pub const SLOW_BODIES: usize = 3;

/// What the faults act on, and where they leave their record.
pub struct Drill {
    pub t0: Instant,
    pub plan: Plan,
    pub demo_addr: SocketAddr,
    pub demo_pid: u32,
    pub demo_log: Arc<Log>,
    /// Workers at the start (the supervisor logs no `accepts` line for them).
    pub first_workers: Vec<u32>,
    /// Worker processes the demo runs (`--processes`).
    pub processes: usize,
    pub todo_addr: SocketAddr,
    pub mariadb: Arc<Mutex<MariaDb>>,
    /// The pid of `fiberstack mariadb`, read without its lock (held while it restarts).
    pub mariadb_control: u32,
    pub tally: Arc<Tally>,
    pub windows: Mutex<Vec<Window>>,
    /// Requests at once in the burst.
    pub burst: usize,
}

impl Drill {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// A line of the soak's record, with the time since the start.
    pub fn say(&self, what: &str, text: &str) {
        println!("soak: +{:6.1}s {what}: {text}", self.now());
    }

    fn window(&self, fault: Fault, start: f64, end: f64) {
        let mut w = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        w.push(Window { fault, start, end });
    }

    /// A check of `fault` that failed: a failure nothing explains.
    fn check_failed(&self, fault: Fault, start: f64, detail: String) {
        self.say(fault.name(), &format!("CHECK FAILED: {detail}"));
        self.tally.failed(Failure {
            start,
            end: self.now(),
            route: check_route(fault),
            cause: Cause::Check,
            detail,
        });
    }

    /// Run `step` of cycle `cycle`.
    pub fn run(&self, step: Step, cycle: u32) {
        match step {
            Step::KillWorker => self.kill_worker(),
            Step::SlowAndGarbage => self.slow_and_garbage(),
            Step::Sighup => self.sighup(None),
            Step::Leavers => self.leavers(),
            Step::Outage => self.outage(),
            Step::Burst => self.burst(),
            Step::SighupKill => self.sighup(Some(cycle % 2 == 1)),
        }
    }

    /// Whether worker `pid` accepts: a first worker, or one the supervisor said accepts,
    /// and not one it told to stop accepting.
    fn serving(&self, pid: u32) -> bool {
        let me = format!("(pid {pid})");
        let accepted = self.first_workers.contains(&pid)
            || self.demo_log.has(0.0, &[&format!("{me} accepts")]);
        accepted && !self.demo_log.has(0.0, &[&format!("{me} stops accepting")])
    }

    /// A serving worker, waiting (up to [`RECOVERY_TIMEOUT`]) while every worker is
    /// being replaced.
    fn victim(&self) -> Option<u32> {
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        loop {
            let serving = procs::children(self.demo_pid)
                .into_iter()
                .find(|&p| self.serving(p));
            if serving.is_some() || Instant::now() > deadline {
                return serving;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Wait until every one of `gone` has exited and the supervisor has its workers
    /// again, each accepting; when that was, or why not.
    fn settled(&self, gone: &[u32]) -> Result<f64, String> {
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        loop {
            let workers = procs::children(self.demo_pid);
            let lingering: Vec<_> = gone.iter().filter(|&&p| alive(p)).collect();
            if lingering.is_empty()
                && workers.len() == self.processes
                && workers.iter().all(|&p| self.serving(p))
            {
                return Ok(self.now());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not recovered within {RECOVERY_TIMEOUT:?}: workers {workers:?} (serving: \
                     {:?}), still running of those replaced: {lingering:?}",
                    workers.iter().map(|&p| self.serving(p)).collect::<Vec<_>>()
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    fn kill(&self, what: &str, pid: u32) -> bool {
        match procs::signal(pid, "KILL") {
            Ok(()) => {
                self.say(what, &format!("kill -9 worker pid {pid}"));
                true
            }
            Err(e) => {
                self.say(what, &format!("kill -9 of pid {pid} failed: {e}"));
                false
            }
        }
    }

    fn kill_worker(&self) {
        let fault = Fault::WorkerKill;
        let start = self.now();
        let Some(victim) = self.victim() else {
            self.check_failed(fault, start, "no serving worker to kill".into());
            return;
        };
        if !self.kill(fault.name(), victim) {
            return;
        }
        match self.settled(&[victim]) {
            Ok(end) => {
                self.window(fault, start, end);
                self.say(
                    fault.name(),
                    &format!(
                        "recovered in {:.1}s: workers {:?}",
                        end - start,
                        procs::children(self.demo_pid)
                    ),
                );
            }
            Err(why) => {
                self.window(fault, start, self.now());
                self.check_failed(fault, start, why);
            }
        }
    }

    /// SIGHUP; with `kill_fresh` given, a `kill -9` once the first replacement accepts:
    /// of that fresh worker (true) or of a worker the roll has yet to replace (false).
    fn sighup(&self, kill_fresh: Option<bool>) {
        let start = self.now();
        let old = procs::children(self.demo_pid);
        let what = match kill_fresh {
            None => "sighup",
            Some(_) => "sighup+kill",
        };
        if let Err(e) = procs::signal(self.demo_pid, "HUP") {
            self.check_failed(Fault::Sighup, start, e);
            return;
        }
        self.say(what, &format!("SIGHUP to the supervisor; workers {old:?}"));
        let mut gone = old.clone();
        let mut killed = None;
        if let Some(fresh) = kill_fresh {
            match self.first_replacement(start, &old) {
                Ok(new) => {
                    let victim = match fresh {
                        true => Some(new),
                        false => old.iter().copied().find(|&p| alive(p) && self.serving(p)),
                    };
                    match victim {
                        Some(victim) if self.kill(what, victim) => {
                            gone.push(victim);
                            killed = Some(self.now());
                        }
                        Some(_) => {}
                        None => self.say(what, "every old worker was replaced already: no kill"),
                    }
                }
                Err(why) => self.check_failed(Fault::Sighup, start, why),
            }
        }
        // The kill's recovery and the roll's are one wait: every slot rolled (a slot whose
        // worker the kill replaced is rolled again), every old worker and the victim
        // gone, as many new ones accepting.
        let settled = self.rolled(start).and_then(|()| self.settled(&gone));
        let end = settled.as_ref().map_or_else(|_| self.now(), |at| *at);
        if let Some(killed) = killed {
            self.window(Fault::WorkerKill, killed, end);
        }
        self.window(Fault::Sighup, start, end);
        match settled {
            Ok(end) => self.say(
                what,
                &format!(
                    "recovered in {:.1}s: workers {:?}",
                    end - start,
                    procs::children(self.demo_pid)
                ),
            ),
            Err(why) => self.check_failed(Fault::Sighup, start, why),
        }
    }

    /// Wait until the supervisor has started a worker of the rolling restart begun at
    /// `since` for every slot it said it would restart.
    fn rolled(&self, since: f64) -> Result<(), String> {
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        loop {
            let lines = self.demo_log.since(since);
            let slots: Option<Vec<String>> = lines
                .iter()
                .find_map(|l| l.split("got SIGHUP: restarting workers [").nth(1))
                .and_then(|rest| rest.split(']').next())
                .map(|ids| ids.split(", ").map(str::to_string).collect());
            let rolled = |slot: &String| {
                let started = format!("started worker {slot} generation ");
                lines
                    .iter()
                    .any(|l| l.contains(&started) && l.contains(ROLLING_START))
            };
            if slots.as_ref().is_some_and(|s| s.iter().all(rolled)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the rolling restart did not start a worker for each of {slots:?} within \
                     {RECOVERY_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The pid of the first worker of the roll begun at `since` that accepts.
    fn first_replacement(&self, since: f64, old: &[u32]) -> Result<u32, String> {
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        loop {
            let new = self
                .demo_log
                .since(since)
                .iter()
                .filter(|l| l.contains(" accepts, "))
                .filter_map(|l| pid_before(l, ") accepts"))
                .find(|p| !old.contains(p));
            if let Some(pid) = new {
                return Ok(pid);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no worker of the rolling restart accepted within {RECOVERY_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// `/readyz` at `addr` until it answers `want` `streak` times in a row; when the
    /// streak began.
    fn readyz(&self, addr: SocketAddr, want: u16, streak: usize, within: Duration) -> Option<f64> {
        let deadline = Instant::now() + within;
        let mut run = 0;
        let mut began = self.now();
        while Instant::now() < deadline {
            let got = client::exchange(
                addr,
                b"GET /readyz HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n",
                PROBE_TIMEOUT,
            );
            if got.as_ref().is_ok_and(|a| a.status == want) {
                if run == 0 {
                    began = self.now();
                }
                run += 1;
                if run == streak {
                    return Some(began);
                }
            } else {
                run = 0;
            }
            std::thread::sleep(POLL * 5);
        }
        None
    }

    fn outage(&self) {
        let fault = Fault::DbOutage;
        let what = fault.name();
        let start = self.now();
        let db = || self.mariadb.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = db().kill() {
            self.check_failed(fault, start, format!("MariaDB could not be killed: {e}"));
            return;
        }
        self.say(what, "MariaDB killed (SIGKILL)");
        match self.readyz(self.demo_addr, 503, 1, NOT_READY_TIMEOUT) {
            Some(at) => self.say(what, &format!("/readyz 503 after {:.2}s", at - start)),
            None => self.check_failed(
                fault,
                start,
                format!("/readyz did not answer 503 within {NOT_READY_TIMEOUT:?} of the kill"),
            ),
        }
        sleep_until(
            self.t0,
            start + self.plan.scaled(OUTAGE_KILL_AFTER).as_secs_f64(),
        );
        let killed = self.now();
        let victim = self.victim().filter(|&v| self.kill(what, v));
        sleep_until(self.t0, start + self.plan.scaled(OUTAGE).as_secs_f64());
        let started = db().start_again();
        match started {
            Ok(()) => self.say(
                what,
                &format!(
                    "MariaDB started again (pid {})",
                    procs::mariadbd_under(self.mariadb_control)
                        .map_or("?".into(), |p| p.to_string())
                ),
            ),
            Err(e) => self.check_failed(fault, start, format!("MariaDB did not start again: {e}")),
        }
        for (name, addr) in [("demo", self.demo_addr), ("todo API", self.todo_addr)] {
            match self.readyz(addr, 200, READY_STREAK, RECOVERY_TIMEOUT) {
                Some(at) => self.say(
                    what,
                    &format!("{name} /readyz 200 again {:.2}s after the kill", at - start),
                ),
                None => self.check_failed(
                    fault,
                    start,
                    format!("{name} /readyz not 200 again within {RECOVERY_TIMEOUT:?}"),
                ),
            }
        }
        // Over once both servers' pools answer again.
        self.window(fault, start, self.now());
        if let Some(victim) = victim {
            match self.settled(&[victim]) {
                Ok(at) => {
                    self.window(Fault::WorkerKill, killed, at);
                    self.say(
                        what,
                        &format!(
                            "the worker killed during the outage replaced {:.1}s after its kill",
                            at - killed
                        ),
                    );
                }
                Err(why) => {
                    self.window(Fault::WorkerKill, killed, self.now());
                    self.check_failed(Fault::WorkerKill, killed, why);
                }
            }
        }
    }

    fn burst(&self) {
        let fault = Fault::Burst;
        let start = self.now();
        let n = self.burst.to_string();
        let timeout = client::REQUEST_TIMEOUT.as_secs().to_string();
        let url = format!("http://{}{BURST_PATH}", self.demo_addr);
        self.say(fault.name(), &format!("ab -c {n} -n {n} {BURST_PATH}"));
        let out = run_bounded(
            Command::new("ab").args(["-r", "-s", &timeout, "-c", &n, "-n", &n, &url]),
            BURST_TIMEOUT,
        );
        let end = self.now();
        self.window(fault, start, end);
        match out {
            Ok(text) => {
                let count = |label: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(label))
                        .and_then(|v| v.split_whitespace().next())
                        .unwrap_or("0")
                        .to_string()
                };
                // ab counts each 503 twice: non-2xx, and a failure of "Length" (its body
                // is not the first answer's); the breakdown tells resets from those.
                let breakdown = text
                    .lines()
                    .find(|l| l.contains("(Connect:"))
                    .map_or(String::new(), |l| format!(" {}", l.trim()));
                self.say(
                    fault.name(),
                    &format!(
                        "over in {:.1}s: {} complete, {} non-2xx (the 503s past the queue), {} \
                         failed{breakdown}",
                        end - start,
                        count("Complete requests:"),
                        count("Non-2xx responses:"),
                        count("Failed requests:")
                    ),
                );
            }
            Err(e) => self.check_failed(fault, start, format!("ab: {e}")),
        }
    }

    fn leavers(&self) {
        let fault = Fault::Leavers;
        let start = self.now();
        let (mut left, mut answered, mut other) = (0, 0, 0);
        for wave in 0..LEAVER_WAVES {
            let children: Vec<_> = (0..LEAVERS_PER_WAVE)
                .map(|i| {
                    let url = format!(
                        "http://{}{}",
                        self.demo_addr,
                        LEAVER_PATHS[i % LEAVER_PATHS.len()]
                    );
                    Command::new("curl")
                        .args(["-s", "-o", "/dev/null", "-m", LEAVER_PATIENCE, &url])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                })
                .collect();
            let deadline = Instant::now() + LEAVER_TIMEOUT;
            for child in children {
                let Ok(mut child) = child else {
                    other += 1;
                    continue;
                };
                let status = loop {
                    match child.try_wait() {
                        Ok(Some(s)) => break s.code(),
                        Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break None;
                        }
                    }
                };
                match status {
                    // curl's "operation timed out": it left.
                    Some(28) => left += 1,
                    Some(0) => answered += 1,
                    _ => other += 1,
                }
            }
            if wave + 1 < LEAVER_WAVES {
                std::thread::sleep(self.plan.scaled(LEAVER_GAP));
            }
        }
        let end = self.now();
        self.window(fault, start, end);
        self.say(
            fault.name(),
            &format!(
                "{left} clients left mid-request ({answered} were answered first, {other} \
                 ended otherwise) in {:.1}s",
                end - start
            ),
        );
    }

    fn slow_and_garbage(&self) {
        let start = self.now();
        let demo = self.demo_addr;
        let todo = self.todo_addr;
        self.say(
            "slow-clients",
            &format!(
                "{SLOW_HEADS} heads and {SLOW_BODIES} bodies a byte a second; {} garbage requests",
                GARBAGE.len()
            ),
        );
        std::thread::scope(|s| {
            let mut slow = Vec::new();
            for _ in 0..SLOW_HEADS {
                slow.push(s.spawn(move || slow_client(demo, SLOW_HEAD, b'X')));
            }
            for _ in 0..SLOW_BODIES {
                slow.push(s.spawn(move || slow_client(todo, SLOW_BODY, b' ')));
            }
            let garbage: Vec<_> = GARBAGE
                .iter()
                .map(|g| (g, s.spawn(move || garbage(demo, &g.bytes()))))
                .collect();
            let mut answered = 0;
            for (g, probe) in garbage {
                match probe.join() {
                    Ok(Ok(_)) => {
                        answered += 1;
                        self.tally.answered(self.now());
                    }
                    Ok(Err(why)) => {
                        self.probe_failed(Fault::Garbage, start, format!("{}: {why}", g.name))
                    }
                    Err(_) => {
                        self.probe_failed(Fault::Garbage, start, format!("{}: panicked", g.name))
                    }
                }
            }
            self.window(Fault::Garbage, start, self.now());
            self.say(
                "garbage",
                &format!("{answered} of {} refused as they should be", GARBAGE.len()),
            );
            let mut ended = 0;
            for probe in slow {
                match probe.join() {
                    Ok(Ok(_)) => {
                        ended += 1;
                        self.tally.answered(self.now());
                    }
                    Ok(Err(why)) => self.probe_failed(Fault::SlowClients, start, why),
                    Err(_) => self.probe_failed(Fault::SlowClients, start, "panicked".into()),
                }
            }
            self.window(Fault::SlowClients, start, self.now());
            self.say(
                "slow-clients",
                &format!(
                    "{ended} of {} ended in a 408 or a close, in {:.1}s",
                    SLOW_HEADS + SLOW_BODIES,
                    self.now() - start
                ),
            );
        });
    }

    fn probe_failed(&self, fault: Fault, start: f64, detail: String) {
        self.say(fault.name(), &format!("PROBE FAILED: {detail}"));
        self.tally.failed(Failure {
            start,
            end: self.now(),
            route: check_route(fault),
            cause: Cause::Check,
            detail: shorten(&detail),
        });
    }
}

/// How the supervisor names the start of a worker of a rolling restart.
const ROLLING_START: &str = "(SIGHUP: rolling restart)";

/// The route label of a failed check of `fault`.
fn check_route(fault: Fault) -> &'static str {
    match fault {
        Fault::WorkerKill => "check kill-worker",
        Fault::Sighup => "check sighup",
        Fault::DbOutage => "check mariadb-outage",
        Fault::Burst => "check burst",
        Fault::SlowClients => "probe slow-client",
        Fault::Garbage => "probe garbage",
        Fault::Leavers => "check leavers",
    }
}

/// The pid in `(pid N)` just before `marker` in `line`.
fn pid_before(line: &str, marker: &str) -> Option<u32> {
    let before = &line[..line.find(marker)?];
    before.rsplit("(pid ").next()?.parse().ok()
}

/// Sleep until `at` seconds after `t0`.
fn sleep_until(t0: Instant, at: f64) {
    let left = Duration::from_secs_f64(at).saturating_sub(t0.elapsed());
    std::thread::sleep(left);
}

/// Run `cmd` to its end within `within`; its stdout, or why not.
fn run_bounded(cmd: &mut Command, within: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run: {e}"))?;
    let mut out = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + within;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not end within {within:?}"));
            }
        }
    };
    let text = reader.join().unwrap_or_default();
    match status.success() {
        true => Ok(text),
        false => Err(format!("{status}: {}", shorten(&text))),
    }
}

#[cfg(test)]
mod tests {
    use super::pid_before;

    #[test]
    fn the_pid_of_a_supervisor_line_is_read() {
        let line = "2026-12-03T19:11:10.102Z INFO  fiberstack: supervisor: worker 1 generation 1 \
                    (pid 4242) accepts, 310 ms after its start; worker 1 generation 0 (pid 4100) \
                    stops accepting";
        assert_eq!(pid_before(line, ") accepts"), Some(4242));
        assert_eq!(pid_before(line, ") stops accepting"), Some(4100));
        assert_eq!(pid_before(line, ") exited"), None);
    }
}
