//! One line per row of a soak: the requests answered and the failures by cause; RSS
//! and descriptors of every process (the demo's supervisor and workers, the todo API's,
//! MariaDB); MariaDB's `Threads_connected`; the workers' pids; each worker's
//! quarantined stacks (from its `/stats`). The growth figures of the verdict add up the
//! servers' processes (MariaDB's own memory is its cache, not the servers' leak).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::client;
use super::load::RowCounts;
use super::procs::{fds, rss_kib};

/// Fresh connections a row's `/stats` reading may take to hear from every worker (the
/// kernel hands each to whichever worker accepts first).
pub const STATS_TRIES: usize = 60;

/// MariaDB's timeouts for the soak's own `Threads_connected` reading.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(3);

/// MariaDB's `Threads_connected`, over a connection of the soak's own (counted in it).
pub struct Monitor {
    opts: fiber_mysql::Opts,
    conn: Option<fiber_mysql::Conn>,
}

impl Monitor {
    /// A reader of the server at `url` (connected at its first reading).
    pub fn new(url: &str) -> Result<Monitor, compare::Error> {
        let mut opts = fiber_mysql::Opts::from_url(url)?;
        opts.connect_timeout = MONITOR_TIMEOUT;
        opts.read_timeout = MONITOR_TIMEOUT;
        Ok(Monitor { opts, conn: None })
    }

    /// The count now; a connection that MariaDB's restart closed is opened again once.
    pub fn threads_connected(&mut self) -> Option<u64> {
        for _ in 0..2 {
            if self.conn.is_none() {
                self.conn = fiber_mysql::Conn::connect(&self.opts).ok();
            }
            let got = self
                .conn
                .as_mut()?
                .query("show global status like 'Threads_connected'")
                .ok()
                .and_then(|r| r.rows.first().and_then(|row| row.get::<String, _>(1)))
                .and_then(|n| n.parse().ok());
            match got {
                Some(n) => return Some(n),
                None => self.conn = None,
            }
        }
        None
    }
}

/// What a row found, beyond its line.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// RSS of the servers' processes, KiB.
    pub rss_kib: Option<u64>,
    /// Their open descriptors.
    pub fds: Option<u64>,
    /// MariaDB's `Threads_connected` (the soak's own connection included).
    pub mysql: Option<u64>,
}

/// The processes to read, by server.
pub struct Processes {
    /// The demo's supervisor, then its workers.
    pub demo: Vec<u32>,
    /// The todo API's supervisor, then its worker.
    pub todo: Vec<u32>,
    pub mariadb: Option<u32>,
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// `sup + [w1 w2]` of `f` over `pids`, and the sum (None when a process could not be
/// read).
fn group(
    pids: &[u32],
    f: impl Fn(u32) -> Option<u64>,
    show: impl Fn(u64) -> String,
) -> (String, Option<u64>) {
    let values: Vec<Option<u64>> = pids.iter().map(|&p| f(p)).collect();
    let text = |v: &Option<u64>| v.map_or("?".to_string(), &show);
    let line = match values.split_first() {
        Some((sup, workers)) => format!(
            "{}+[{}]",
            text(sup),
            workers.iter().map(text).collect::<Vec<_>>().join(" ")
        ),
        None => "gone".into(),
    };
    let sum = values.iter().try_fold(0u64, |acc, v| v.map(|v| acc + v));
    (line, sum)
}

/// Each demo worker's quarantined stacks, by pid, from `/stats` answers.
pub fn quarantined(demo: SocketAddr, workers: &[u32]) -> BTreeMap<u32, u64> {
    let mut seen = BTreeMap::new();
    for _ in 0..STATS_TRIES {
        if workers.iter().all(|w| seen.contains_key(w)) {
            break;
        }
        let Ok(a) = client::request(demo, "GET", "/stats", None) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&a.body) else {
            continue;
        };
        if let (Some(pid), Some(q)) = (
            v["worker"]["pid"].as_u64(),
            v["fibers"]["aftermath"]["quarantined"].as_u64(),
        ) {
            seen.insert(pid as u32, q);
        }
    }
    seen
}

/// The line of row `name` and what it found.
pub fn row(
    name: &str,
    counts: &RowCounts,
    procs: &Processes,
    mysql: Option<u64>,
    quarantined: &BTreeMap<u32, u64>,
) -> (String, Sample) {
    let failed: u64 = counts.failed.values().sum();
    let causes = match failed {
        0 => String::new(),
        _ => format!(
            " ({})",
            counts
                .failed
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let (demo_rss, demo_rss_sum) = group(&procs.demo, rss_kib, mib);
    let (todo_rss, todo_rss_sum) = group(&procs.todo, rss_kib, mib);
    let (demo_fds, demo_fds_sum) = group(&procs.demo, fds, |n| n.to_string());
    let (todo_fds, todo_fds_sum) = group(&procs.todo, fds, |n| n.to_string());
    let db_rss = procs
        .mariadb
        .and_then(rss_kib)
        .map_or("down".to_string(), mib);
    let db_fds = procs
        .mariadb
        .and_then(fds)
        .map_or("-".to_string(), |n| n.to_string());
    let workers = &procs.demo[1.min(procs.demo.len())..];
    let quarantine = workers
        .iter()
        .map(|w| {
            quarantined
                .get(w)
                .map_or("?".to_string(), |q| q.to_string())
        })
        .collect::<Vec<_>>()
        .join(" ");
    let line = format!(
        "soak: {name}: {} answered, {failed} failed{causes}; rss MiB demo {demo_rss}, todo \
         {todo_rss}, mariadb {db_rss}; fds demo {demo_fds}, todo {todo_fds}, mariadb {db_fds}; \
         Threads_connected {}; workers {workers:?}; quarantined [{quarantine}]",
        counts.answered,
        mysql.map_or("?".to_string(), |n| n.to_string()),
    );
    let sum = |a: Option<u64>, b: Option<u64>| Some(a? + b?);
    (
        line,
        Sample {
            rss_kib: sum(demo_rss_sum, todo_rss_sum),
            fds: sum(demo_fds_sum, todo_fds_sum),
            mysql,
        },
    )
}
