//! `compare cancel-report`: what a client that leaves costs, on both runtimes.
//!
//! Two measurements, each against the demo started in this process (a private
//! MariaDB unless `--database-url` is given):
//! - **the storm**: [`LEAVING`] clients ask for `/widgets?sleep=10` and close their
//!   connections [`PATIENCE`] later (what `curl -m 0.3` does); `db.in_use` from
//!   `/stats` at [`SAMPLES`] after the close, and when it first read 0;
//! - **the latency**: `--rounds` times, one client asks for `/widgets?sleep=10`,
//!   closes once its query holds a connection, and the report polls `/stats` until
//!   the connection is back; the median, p90, p99 and largest of those times.
//!
//! The times include the poll's own round trip (a fresh connection per poll, well
//! under a millisecond on loopback).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use compare::Runtime;
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
/// Time the report's requests get to end when it stops a runtime.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// One runtime's figures.
struct Figures {
    runtime: Runtime,
    /// `db.in_use` at each of [`SAMPLES`].
    storm: Vec<u64>,
    /// When `db.in_use` first read 0 after the storm's clients left.
    storm_back: Option<Duration>,
    /// Each round's time from the close to the connection's return, sorted.
    rounds: Vec<Duration>,
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

/// `compare cancel-report`: both runtimes, one after the other, then the tables.
pub fn run(cfg: &ServeConfig, rounds: usize) -> Result<(), compare::Error> {
    // Ctrl-C stops the report like a server: the private MariaDBs are cleaned up.
    let _stops = fiber_web::rig::stop_requests()
        .map_err(|e| fiberstack::Error::io("install signal handlers", e))?;
    let mut all = Vec::new();
    for runtime in [Runtime::Fibers, Runtime::Async] {
        let mut cfg = cfg.clone();
        cfg.web.bind = "127.0.0.1:0".parse().expect("a literal address");
        cfg.web.access_log = false;
        cfg.db_pool = cfg.db_pool.max(LEAVING + 1);
        cfg.web.fibers = cfg.web.fibers.max(LEAVING + 4);
        eprintln!("cancel-report: {runtime}: the storm, then {rounds} rounds");
        let server = Server::start(runtime, &cfg)?;
        let figures = measure(&server, runtime, rounds);
        server.stop();
        all.push(figures?);
    }
    println!("{}", render(&all));
    Ok(())
}

fn measure(server: &Server, runtime: Runtime, rounds: usize) -> Result<Figures, compare::Error> {
    let addr = server.addr();
    let (storm, storm_back) = storm(addr)?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        times.push(round(addr)?);
    }
    times.sort();
    Ok(Figures {
        runtime,
        storm,
        storm_back,
        rounds: times,
    })
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

/// One round: the time from the client's close to its connection's return.
fn round(addr: SocketAddr) -> Result<Duration, compare::Error> {
    let client = ask(addr, "/widgets?sleep=10")?;
    wait_for(addr, 1)?;
    drop(client);
    let left = Instant::now();
    wait_for(addr, 0)?;
    Ok(left.elapsed())
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
            return stats["db"]["in_use"]
                .as_u64()
                .ok_or_else(|| "/stats has no db.in_use".into());
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

/// The two tables, as Markdown.
fn render(all: &[Figures]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{LEAVING} clients ask for `/widgets?sleep=10` and leave after {} ms:\n",
        PATIENCE.as_millis()
    );
    let _ = write!(out, "| time after the clients left |");
    for at in SAMPLES {
        let _ = write!(out, " {} s |", at.as_secs_f64());
    }
    let _ = writeln!(out, " back to 0 after |");
    let _ = writeln!(out, "|---|{}---:|", "---:|".repeat(SAMPLES.len()));
    for f in all {
        let _ = write!(out, "| `db.in_use`, {} |", f.runtime);
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
    let _ = writeln!(out, "| runtime | rounds | median | p90 | p99 | largest |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for f in all {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            f.runtime,
            f.rounds.len(),
            ms(quantile(&f.rounds, 0.5)),
            ms(quantile(&f.rounds, 0.9)),
            ms(quantile(&f.rounds, 0.99)),
            ms(f.rounds.last().copied()),
        );
    }
    out
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
