//! `compare cancel-report`: what a client that leaves costs, on both runtimes, against
//! a MariaDB in each thread mode.
//!
//! For each `--thread-handling` (both by default: `pool-of-threads`, as the demo's
//! private server runs, and `one-thread-per-connection`, MariaDB's own default; a
//! user's server may run either), a private MariaDB is started in that mode (with its
//! `extra_port`, where the pools send their KILLs) and both runtimes are measured
//! against it, one after the other. With `--database-url` the one server it names is
//! measured instead, in whatever mode it runs. Three measurements each:
//! - **the storm**: [`LEAVING`] clients ask for `/widgets?sleep=10` and close their
//!   connections [`PATIENCE`] later (what `curl -m 0.3` does); `db.in_use` from
//!   `/stats` at [`SAMPLES`] after the close, and when it first read 0;
//! - **the latency**: `--rounds` times, one client asks for `/widgets?sleep=10`,
//!   closes once its query holds a connection, and the report polls `/stats` until
//!   the connection is back; the median, p90, p99 and largest of those times;
//! - **the storms**: `--rounds` times, [`LEAVING`] clients ask at once and close once
//!   all their queries hold connections, and the report polls until every
//!   connection is back: the same four figures, for the last of the twenty, and the
//!   time until the server runs none of their statements (a KILL that has not landed
//!   leaves one running). Each round waits for that before it starts.
//!
//! The times include the poll's own round trip (a fresh connection per poll, well
//! under a millisecond on loopback). The fiber server's `db.replaced` says how many
//! connections were cut off (a KILL slower than fiber_mysql's `KILL_PATIENCE`) and
//! opened again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use compare::Runtime;
use fiber_mysql::launcher::{LaunchConfig, MariaDb, ThreadHandling, CONNECTION_HEADROOM};
use fiberstack::config::ServeConfig;

/// Clients in the storm.
const LEAVING: usize = 20;
/// How long a storm client waits for its answer before it leaves.
const PATIENCE: Duration = Duration::from_millis(300);
/// When, after the storm's clients left, `db.in_use` is read.
const SAMPLES: [Duration; 4] = [
    Duration::from_millis(500),
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(8),
];
/// Longest a round waits for its query to start, or for its connection to come back.
const ROUND_TIMEOUT: Duration = Duration::from_secs(15);
/// Time between two reads of `/stats`.
const POLL_EVERY: Duration = Duration::from_millis(1);
/// Server connections the report's private MariaDB allows per pool connection: the
/// twin drops a leaving client's connection at once (its session lives on until the
/// KILL lands) and opens a new one for that KILL, and its pool opens another for the
/// next client, so for a moment after a storm it holds three per client.
const TWIN_CONNECTIONS_PER_CLIENT: usize = 3;
/// Time the report's requests get to end when it stops a runtime.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// One runtime's figures against one server.
struct Figures {
    runtime: Runtime,
    /// The server's thread mode (`@@thread_handling`).
    threads: String,
    /// Connections the pool cut off and opened again (`db.replaced`), over the whole run.
    replaced: u64,
    /// `db.in_use` at each of [`SAMPLES`].
    storm: Vec<u64>,
    /// When `db.in_use` first read 0 after the storm's clients left.
    storm_back: Option<Duration>,
    /// Each round's time from the close to the connection's return, sorted.
    rounds: Vec<Duration>,
    /// Each storm's time from the closes to the last connection's return, sorted.
    storms: Vec<Duration>,
    /// Each storm's time from the closes until the server ran none of its statements.
    settled: Vec<Duration>,
}

/// Either runtime, started in this process.
enum Server {
    Fibers(fiberstack::start::Running),
    Twin(compare::twin::Running),
}

impl Server {
    fn start(runtime: Runtime, cfg: &ServeConfig) -> Result<Server, compare::Error> {
        match runtime {
            Runtime::Fibers => fiberstack::start::start(cfg).map(Server::Fibers),
            Runtime::Async => compare::twin::start(cfg).map(Server::Twin),
            other => {
                return Err(format!("cancel-report measures fibers and async, not {other}").into())
            }
        }
        .map_err(compare::Error::from)
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Server::Fibers(s) => s.addr(),
            Server::Twin(s) => s.addr(),
        }
    }

    fn stop(self) {
        match self {
            Server::Fibers(s) => drop(s.shutdown(SHUTDOWN_GRACE)),
            Server::Twin(s) => drop(s.shutdown(SHUTDOWN_GRACE)),
        }
    }
}

/// Which servers `compare cancel-report` measures against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modes {
    /// A private MariaDB in each thread mode.
    Both,
    /// A private MariaDB in this one.
    One(ThreadHandling),
}

impl std::str::FromStr for Modes {
    type Err = String;

    fn from_str(s: &str) -> Result<Modes, String> {
        match s {
            "both" => Ok(Modes::Both),
            other => other.parse().map(Modes::One),
        }
    }
}

/// `compare cancel-report`: for each server, both runtimes one after the other; then
/// the tables.
pub fn run(cfg: &ServeConfig, rounds: usize, modes: Modes) -> Result<(), compare::Error> {
    // Ctrl-C stops the report like a server: the private MariaDBs are cleaned up.
    let _stops = fiber_web::rig::stop_requests()
        .map_err(|e| fiberstack::Error::io("install signal handlers", e))?;
    let mut cfg = cfg.clone();
    cfg.web.bind = "127.0.0.1:0".parse().expect("a literal address");
    cfg.web.access_log = false;
    cfg.db_pool = cfg.db_pool.max(LEAVING + 1);
    cfg.web.fibers = cfg.web.fibers.max(LEAVING + 4);
    let modes: Vec<Option<ThreadHandling>> = match (&cfg.database_url, modes) {
        (Some(_), _) => vec![None],
        (None, Modes::Both) => ThreadHandling::ALL.into_iter().map(Some).collect(),
        (None, Modes::One(mode)) => vec![Some(mode)],
    };
    let mut all = Vec::new();
    for mode in modes {
        let mut cfg = cfg.clone();
        // The private server in this mode, shared by both runtimes; dropped (stopped)
        // after them.
        let _server = match mode {
            Some(mode) => {
                let db = MariaDb::start(LaunchConfig {
                    max_connections: TWIN_CONNECTIONS_PER_CLIENT * cfg.db_pool
                        + CONNECTION_HEADROOM,
                    mariadbd: cfg.mariadbd.clone(),
                    thread_handling: mode,
                    ..LaunchConfig::default()
                })?;
                cfg.database_url = Some(db.url());
                Some(db)
            }
            None => None,
        };
        let mut db = Watcher::connect(&cfg)?;
        for runtime in [Runtime::Fibers, Runtime::Async] {
            eprintln!(
                "cancel-report: {runtime} on {}: the storm, then {rounds} rounds of one \
                 client and {rounds} of {LEAVING}",
                db.thread_handling()?
            );
            let server = Server::start(runtime, &cfg)?;
            let figures = measure(&server, runtime, rounds, &mut db);
            server.stop();
            all.push(figures?);
        }
    }
    println!("{}", render(&all));
    Ok(())
}

fn measure(
    server: &Server,
    runtime: Runtime,
    rounds: usize,
    db: &mut Watcher,
) -> Result<Figures, compare::Error> {
    let addr = server.addr();
    let (storm, storm_back) = storm(addr)?;
    db.settle()?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        times.push(round(addr, 1, db)?.0);
    }
    times.sort();
    let (mut storms, mut settled) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let (back, ended) = round(addr, LEAVING, db)?;
        storms.push(back);
        settled.push(ended);
    }
    storms.sort();
    settled.sort();
    Ok(Figures {
        runtime,
        threads: db.thread_handling()?,
        replaced: db_stat(addr, "replaced")?,
        storm,
        storm_back,
        rounds: times,
        storms,
        settled,
    })
}

/// A connection of the report's own to the server, to see what it still runs.
struct Watcher(fiber_mysql::Conn);

impl Watcher {
    fn connect(cfg: &ServeConfig) -> Result<Watcher, compare::Error> {
        let url = cfg.database_url.as_deref().ok_or("no database URL")?;
        Ok(Watcher(fiber_mysql::Conn::connect(
            &fiber_mysql::Opts::from_url(url)?,
        )?))
    }

    /// The server's thread mode (`@@thread_handling`).
    fn thread_handling(&mut self) -> Result<String, compare::Error> {
        let mode = self
            .0
            .query("SELECT @@thread_handling")?
            .scalar::<String>()?;
        Ok(mode.unwrap_or_default())
    }

    /// Statements the server runs now for others (`/widgets`' sleeps, killed or not).
    /// `SHOW PROCESSLIST`, not information_schema, which needs a temporary table.
    fn running(&mut self) -> Result<usize, compare::Error> {
        let own = u64::from(self.0.connection_id());
        let list = self.0.query("SHOW PROCESSLIST")?;
        Ok(list
            .rows
            .iter()
            .filter(|row| row.get::<u64, _>("Id") != Some(own))
            .filter(|row| {
                let command = row.get::<String, _>("Command");
                matches!(command.as_deref(), Some("Query" | "Killed"))
            })
            .count())
    }

    /// Waits until the server runs none of the report's statements, for at most
    /// [`ROUND_TIMEOUT`], so that a round starts on a quiet server.
    fn settle(&mut self) -> Result<(), compare::Error> {
        let started = Instant::now();
        while self.running()? > 0 {
            if started.elapsed() > ROUND_TIMEOUT {
                return Err(
                    format!("the server still ran statements after {ROUND_TIMEOUT:?}").into(),
                );
            }
            std::thread::sleep(POLL_EVERY);
        }
        Ok(())
    }
}

/// The storm: `db.in_use` at each sample time, and when it first read 0.
fn storm(addr: SocketAddr) -> Result<(Vec<u64>, Option<Duration>), compare::Error> {
    let clients = (0..LEAVING)
        .map(|_| ask(addr, "/widgets?sleep=10"))
        .collect::<Result<Vec<_>, _>>()?;
    std::thread::sleep(PATIENCE);
    drop(clients);
    let left = Instant::now();
    let mut samples = Vec::new();
    let mut back = None;
    for at in SAMPLES {
        loop {
            let in_use = in_use(addr)?;
            if in_use == 0 && back.is_none() {
                back = Some(left.elapsed());
            }
            if left.elapsed() >= at {
                samples.push(in_use);
                break;
            }
            std::thread::sleep(POLL_EVERY);
        }
    }
    // The next measurement starts with every connection back.
    wait_for(addr, 0)?;
    Ok((samples, back))
}

/// One round of `clients`: the time from their closes, once every one's query holds
/// a connection, to the last connection's return, and to the server's running none
/// of their statements any more.
fn round(
    addr: SocketAddr,
    clients: usize,
    db: &mut Watcher,
) -> Result<(Duration, Duration), compare::Error> {
    let asked = (0..clients)
        .map(|_| ask(addr, "/widgets?sleep=10"))
        .collect::<Result<Vec<_>, _>>()?;
    wait_for(addr, clients as u64)?;
    drop(asked);
    let left = Instant::now();
    wait_for(addr, 0)?;
    let back = left.elapsed();
    db.settle()?;
    Ok((back, left.elapsed()))
}

/// Poll `/stats` until `db.in_use` is `want`, for at most [`ROUND_TIMEOUT`].
fn wait_for(addr: SocketAddr, want: u64) -> Result<(), compare::Error> {
    let started = Instant::now();
    while in_use(addr)? != want {
        if started.elapsed() > ROUND_TIMEOUT {
            return Err(format!("db.in_use did not reach {want} within {ROUND_TIMEOUT:?}").into());
        }
        std::thread::sleep(POLL_EVERY);
    }
    Ok(())
}

/// `GET path` sent on a new connection, left open.
fn ask(addr: SocketAddr, path: &str) -> Result<TcpStream, compare::Error> {
    let mut s = TcpStream::connect(addr)
        .map_err(|e| fiberstack::Error::io(format!("connect to {addr}"), e))?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: report\r\n\r\n").as_bytes())
        .map_err(|e| fiberstack::Error::io(format!("send to {addr}"), e))?;
    Ok(s)
}

/// `db.in_use` from `/stats`.
fn in_use(addr: SocketAddr) -> Result<u64, compare::Error> {
    db_stat(addr, "in_use")
}

/// `db.<name>` from `/stats` (0 when the runtime does not count it).
fn db_stat(addr: SocketAddr, name: &str) -> Result<u64, compare::Error> {
    let mut s = ask(addr, "/stats")?;
    s.set_read_timeout(Some(ROUND_TIMEOUT))
        .map_err(|e| fiberstack::Error::io("time out a read of /stats", e))?;
    let mut reply = Vec::new();
    // The server closes after a request that says nothing of keep-alive only on
    // HTTP/1.0; read up to the end of the body instead.
    let mut buf = [0u8; 8192];
    loop {
        let n = s
            .read(&mut buf)
            .map_err(|e| fiberstack::Error::io("read /stats", e))?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if let Some(body) = complete_body(&reply) {
            let stats: serde_json::Value = serde_json::from_slice(body)?;
            return match &stats["db"][name] {
                serde_json::Value::Null if name != "in_use" => Ok(0),
                value => value
                    .as_u64()
                    .ok_or_else(|| format!("/stats has no db.{name}").into()),
            };
        }
    }
    Err("/stats: the connection closed before the body ended".into())
}

/// The body of `reply` once its `Content-Length` bytes are all there.
fn complete_body(reply: &[u8]) -> Option<&[u8]> {
    let head_end = reply.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&reply[..head_end]).ok()?;
    let length: usize = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })?;
    reply.get(head_end..head_end + length)
}

/// The three tables, as Markdown: a row per runtime and server.
fn render(all: &[Figures]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{LEAVING} clients ask for `/widgets?sleep=10` and leave after {} ms:\n",
        PATIENCE.as_millis()
    );
    let _ = write!(out, "| `db.in_use` of | MariaDB |");
    for at in SAMPLES {
        let _ = write!(out, " {} s |", at.as_secs_f64());
    }
    let _ = writeln!(out, " back to 0 after |");
    let _ = writeln!(out, "|---|---|{}---:|", "---:|".repeat(SAMPLES.len()));
    for f in all {
        let _ = write!(out, "| {} | {} |", f.runtime, f.threads);
        for n in &f.storm {
            let _ = write!(out, " {n} |");
        }
        let _ = writeln!(
            out,
            " {} |",
            f.storm_back
                .map_or("more than 8 s".to_string(), |d| format!(
                    "{} ms",
                    d.as_millis()
                ))
        );
    }
    let _ = writeln!(
        out,
        "\nOne client leaves once its query runs; time until its connection is back in \
         the pool:\n"
    );
    times_table(&mut out, all, |f| &f.rounds);
    let _ = writeln!(
        out,
        "\n{LEAVING} clients leave at once, once their queries run; time until the last \
         connection is back in the pool:\n"
    );
    times_table(&mut out, all, |f| &f.storms);
    let _ = writeln!(
        out,
        "\nThe same storms; time until the server runs none of their statements (the \
         next storm waits for it):\n"
    );
    times_table(&mut out, all, |f| &f.settled);
    let _ = writeln!(
        out,
        "\nConnections the fiber server cut off (a KILL slower than fiber_mysql's \
         KILL_PATIENCE) and opened again, over each whole run (`db.replaced`): {}",
        all.iter()
            .filter(|f| f.runtime == Runtime::Fibers)
            .map(|f| format!("{} on {}", f.replaced, f.threads))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out
}

/// A table of each runtime's sorted times (`times` picks them): how many, median,
/// p90, p99, largest.
fn times_table(out: &mut String, all: &[Figures], times: impl Fn(&Figures) -> &[Duration]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "| runtime | MariaDB | rounds | median | p90 | p99 | largest |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    for f in all {
        let t = times(f);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            f.runtime,
            f.threads,
            t.len(),
            ms(quantile(t, 0.5)),
            ms(quantile(t, 0.9)),
            ms(quantile(t, 0.99)),
            ms(t.last().copied()),
        );
    }
}

/// The `q` quantile of sorted `times` (nearest rank).
fn quantile(times: &[Duration], q: f64) -> Option<Duration> {
    let rank = (q * times.len() as f64).ceil() as usize;
    times.get(rank.clamp(1, times.len().max(1)) - 1).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let t: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&t, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&t, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&t[..1], 0.99), Some(Duration::from_millis(1)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn a_body_is_complete_at_its_content_length() {
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(complete_body(reply), Some(&b"{}"[..]));
        assert_eq!(complete_body(&reply[..reply.len() - 1]), None);
    }
}
