//! What `compare bench` measures: each scenario is one load (ab or wrk) on one
//! route, run against a server started with settings that match the load.
//!
//! Scenarios that need the same server settings share one server start (a
//! [`Settings`] group), so a round starts each runtime once per group. A CPU quota is
//! one of the settings: the rows that run under one get servers of their own, moved
//! into the quota's cgroup right after they start (quota.rs).

use compare::Runtime;
use fiberstack::config::DEFAULT_MAX_CONNECTIONS;

/// How an idle keep-alive load reads in the table.
pub const IDLE_LOAD: &str = "idle keep-alive";

/// How the load is generated.
#[derive(Clone, Debug, PartialEq)]
pub enum Load {
    /// `ab -c C -n N URL`: ApacheBench, HTTP/1.0 without keep-alive, as the original
    /// demo was measured.
    Ab { concurrency: usize, requests: usize },
    /// `wrk -t T -c C -d Ds --latency --timeout 10s URL`: keep-alive, for throughput
    /// and latency percentiles.
    Wrk {
        concurrency: usize,
        duration_secs: u64,
    },
    /// `connections` kept-alive connections, each after one request, held idle for
    /// `hold_secs` (`idle.rs`): what a server keeps per connection between requests.
    Idle { connections: usize, hold_secs: u64 },
}

impl Load {
    pub fn concurrency(&self) -> usize {
        match self {
            Load::Ab { concurrency, .. } | Load::Wrk { concurrency, .. } => *concurrency,
            Load::Idle { connections, .. } => *connections,
        }
    }

    /// The load tool it runs (`None` for the idle load, which the bench makes itself).
    pub fn tool(&self) -> Option<&'static str> {
        match self {
            Load::Ab { .. } => Some("ab"),
            Load::Wrk { .. } => Some("wrk"),
            Load::Idle { .. } => None,
        }
    }

    /// How the load reads in the table: `ab -n 2000` or `wrk 10s`.
    pub fn describe(&self) -> String {
        match self {
            Load::Ab { requests, .. } => format!("ab -n {requests}"),
            Load::Wrk { duration_secs, .. } => format!("wrk {duration_secs}s"),
            Load::Idle { .. } => IDLE_LOAD.to_string(),
        }
    }
}

/// Server settings a scenario needs: the same on every runtime (minihttp ignores the
/// fiber pool's, and says so in its log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--fibers` (the twin's concurrency limit).
    pub fibers: usize,
    /// `--db-pool`.
    pub db_pool: usize,
    /// `--queue`.
    pub queue: usize,
    /// `--max-connections`: the server's default (15,000) unless a scenario holds more.
    pub max_connections: usize,
    /// The server held to this % of one cpu (quota.rs); `None`: no quota. Set on the
    /// CPU-bound scenarios by [`hold_cpu_bound`], never on the sleeping or idle ones.
    pub quota: Option<u32>,
}

/// One measurement.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// A short name, unique in a run (used by `--only`).
    pub name: &'static str,
    /// Path and query to request.
    pub path: String,
    pub load: Load,
    pub settings: Settings,
    /// Seconds each request sleeps on the server (the physical bound follows from it);
    /// `None` for CPU-bound routes, which have no such bound.
    pub route_secs: Option<f64>,
    /// Warm up with the same load for this long before measuring (wrk only).
    pub warmup_secs: u64,
    /// Report (RSS under load - idle RSS) / concurrency for this scenario.
    pub memory_per_request: bool,
    /// A request that tells whether the server has the route at all: a 404 to it
    /// marks the scenario `not run` on that server (a route the demo may not have yet).
    pub probe: Option<&'static str>,
}

impl Scenario {
    /// A route without a sleep driven by wrk: the server's CPU is the limit, or the
    /// load tool's (the rows a quota is for, and the rows of the CPU table).
    pub fn cpu_bound(&self) -> bool {
        self.route_secs.is_none() && matches!(self.load, Load::Wrk { .. })
    }

    /// Why `runtime` does not run this scenario, if it does not: the raw minihttp
    /// baseline runs only the wrk loads on routes it has, within its listen backlog.
    pub fn skipped_on(&self, runtime: Runtime) -> Option<String> {
        if runtime != Runtime::Minihttp {
            return None;
        }
        if matches!(self.load, Load::Ab { .. }) {
            return Some("ab hangs: may_minihttp never closes an HTTP/1.0 connection".to_string());
        }
        let path = self.path.split('?').next().unwrap_or("");
        if !["/hello", "/widgets"].contains(&path) {
            return Some(format!("no {path} route on the raw baseline"));
        }
        let backlog = compare::mini::LISTEN_BACKLOG;
        // The idle load opens its connections one at a time: no backlog fills up.
        let at_once = matches!(self.load, Load::Wrk { .. });
        (at_once && self.load.concurrency() > backlog).then(|| {
            format!(
                "{} connects at once overflow may's fixed listen backlog of {backlog}: \
                 the row would time SYN retries",
                self.load.concurrency()
            )
        })
    }
}

/// Settings for the ab and /widgets/http scenarios: room for ab's 220 concurrent
/// one-second requests (the fiber pool of the original was the throttle at 100; ours
/// is sized so that only the load is).
const SMALL: Settings = Settings {
    fibers: 300,
    db_pool: 300,
    queue: 1024,
    max_connections: DEFAULT_MAX_CONNECTIONS,
    quota: None,
};

/// Settings for the `/hello` rows, 64 to 5000 connections: a fiber for every
/// connection's request (none waits in the queue, none is refused), and a small
/// MySQL pool, which `/hello` never uses.
const HELLO: Settings = Settings {
    fibers: 5000,
    db_pool: 10,
    queue: 1024,
    max_connections: DEFAULT_MAX_CONNECTIONS,
    quota: None,
};

/// Settings for the idle keep-alive scenario: a server of its own (no other load
/// before its idle reading), the demo's default pools.
const IDLE: Settings = Settings {
    fibers: 100,
    db_pool: 10,
    queue: 1024,
    max_connections: DEFAULT_MAX_CONNECTIONS,
    quota: None,
};

/// Connections above a scenario's own that `--max-connections` leaves room for (the
/// bench's `/stats` reads among them).
const CONNECTION_ROOM: usize = 100;

/// The sleeping route without MySQL the 10,000-in-flight row needs: `GET
/// /sleep?secs=S`, answered after `fiber_pool::sleep` on fibers and `tokio::time::sleep`
/// on the twin. A server that answers 404 to the probe has none, and says so in the row.
pub const SLEEP_PROBE: &str = "/sleep?secs=0";

/// Settings for `requests` in flight on a sleeping route: a fiber (the twin: a task
/// slot) and a MySQL connection for each, or `db_pool` connections where the route
/// needs none.
fn in_flight(requests: usize, db_pool: usize) -> Settings {
    Settings {
        fibers: requests,
        db_pool,
        queue: 1024,
        max_connections: DEFAULT_MAX_CONNECTIONS.max(requests + CONNECTION_ROOM),
        quota: None,
    }
}

/// A `/hello` row at `concurrency` connections for `duration` seconds, warmed up 1 s.
fn hello(
    name: &'static str,
    concurrency: usize,
    duration_secs: u64,
    settings: Settings,
) -> Scenario {
    Scenario {
        name,
        path: "/hello".into(),
        load: Load::Wrk {
            concurrency,
            duration_secs,
        },
        settings,
        route_secs: None,
        warmup_secs: u64::from(duration_secs > 2),
        memory_per_request: false,
        probe: None,
    }
}

/// An idle keep-alive row: `connections` held `hold_secs`, on a server of its own.
fn idle(name: &'static str, connections: usize, hold_secs: u64) -> Scenario {
    Scenario {
        name,
        path: "/hello".into(),
        load: Load::Idle {
            connections,
            hold_secs,
        },
        settings: Settings {
            max_connections: DEFAULT_MAX_CONNECTIONS.max(connections + CONNECTION_ROOM),
            ..IDLE
        },
        route_secs: None,
        warmup_secs: 0,
        memory_per_request: true,
        probe: None,
    }
}

/// Hold the server of every CPU-bound scenario to `quota` % of one cpu (`None`: none).
pub fn hold_cpu_bound(scenarios: &mut [Scenario], quota: Option<u32>) {
    for s in scenarios.iter_mut().filter(|s| s.cpu_bound()) {
        s.settings.quota = quota;
    }
}

/// The full run: the original demo's two ab loads, `/hello` from 64 to 5000
/// connections, the self-call, `/widgets` at 1000, 5000 and 10,000 requests in flight,
/// 10,000 in flight on a sleeping route without MySQL, and 9000 and 50,000 idle
/// connections (BENCHMARKS.md, "The scenarios"); `duration` is wrk's `-d` in seconds.
pub fn full(duration: u64) -> Vec<Scenario> {
    let wrk = |concurrency| Load::Wrk {
        concurrency,
        duration_secs: duration,
    };
    let sleeping = |name, path: &str, concurrency, settings, warmup_secs, memory| Scenario {
        name,
        path: path.into(),
        load: wrk(concurrency),
        settings,
        route_secs: Some(1.0),
        warmup_secs,
        memory_per_request: memory,
        probe: None,
    };
    let ab = |name, concurrency, requests| Scenario {
        name,
        path: "/widgets".into(),
        load: Load::Ab {
            concurrency,
            requests,
        },
        settings: SMALL,
        route_secs: Some(1.0),
        warmup_secs: 0,
        memory_per_request: false,
        probe: None,
    };
    vec![
        ab("ab-c5", 5, 10),
        ab("ab-c220", 220, 2000),
        hello("hello-64", 64, duration, HELLO),
        hello("hello-256", 256, duration, HELLO),
        hello("hello-1024", 1024, duration, HELLO),
        hello("hello-5000", 5000, duration, HELLO),
        sleeping("widgets-http-100", "/widgets/http", 100, SMALL, 2, false),
        sleeping(
            "widgets-1000",
            "/widgets",
            1000,
            in_flight(1000, 1000),
            2,
            false,
        ),
        sleeping(
            "widgets-5000",
            "/widgets",
            5000,
            in_flight(5000, 5000),
            0,
            true,
        ),
        // A client and a MySQL connection per request: 20,000 open files and more in
        // the server, which the preflight checks against `ulimit -n`.
        sleeping(
            "widgets-10000",
            "/widgets",
            10_000,
            in_flight(10_000, 10_000),
            0,
            true,
        ),
        // The same 10,000 in flight with no MySQL connection under them: half the
        // open files.
        Scenario {
            probe: Some(SLEEP_PROBE),
            ..sleeping(
                "sleep-10000",
                "/sleep?secs=1",
                10_000,
                in_flight(10_000, 10),
                0,
                true,
            )
        },
        idle("idle-9000", 9000, 3),
        idle("idle-50000", 50_000, 3),
    ]
}

/// A smoke run of a few seconds per runtime: every kind of scenario, small loads,
/// short sleeps; the scale rows and the quota'd `/hello` in small versions.
pub fn quick() -> Vec<Scenario> {
    let small = Settings {
        fibers: 40,
        db_pool: 20,
        queue: 64,
        max_connections: DEFAULT_MAX_CONNECTIONS,
        quota: None,
    };
    let hello_settings = Settings {
        fibers: 200,
        db_pool: 4,
        ..small
    };
    let wrk = |name, path: &str, concurrency, duration_secs, settings, route_secs| Scenario {
        name,
        path: path.into(),
        load: Load::Wrk {
            concurrency,
            duration_secs,
        },
        settings,
        route_secs,
        warmup_secs: 0,
        memory_per_request: false,
        probe: None,
    };
    vec![
        Scenario {
            name: "ab-c5",
            path: "/widgets?sleep=0.1".into(),
            load: Load::Ab {
                concurrency: 5,
                requests: 10,
            },
            settings: small,
            route_secs: Some(0.1),
            warmup_secs: 0,
            memory_per_request: false,
            probe: None,
        },
        hello("hello-16", 16, 1, hello_settings),
        hello("hello-200", 200, 1, hello_settings),
        wrk("widgets-http-10", "/widgets/http", 10, 2, small, Some(1.0)),
        Scenario {
            memory_per_request: true,
            ..wrk("widgets-20", "/widgets?sleep=0.2", 20, 2, small, Some(0.2))
        },
        Scenario {
            memory_per_request: true,
            ..wrk(
                "widgets-200",
                "/widgets?sleep=0.2",
                200,
                2,
                in_flight(200, 200),
                Some(0.2),
            )
        },
        Scenario {
            memory_per_request: true,
            probe: Some(SLEEP_PROBE),
            ..wrk(
                "sleep-200",
                "/sleep?secs=0.2",
                200,
                2,
                in_flight(200, 4),
                Some(0.2),
            )
        },
        idle("idle-200", 200, 1),
    ]
}

/// Scenarios grouped by the settings they need, in first-appearance order.
pub fn groups(scenarios: &[Scenario]) -> Vec<(Settings, Vec<Scenario>)> {
    let mut groups: Vec<(Settings, Vec<Scenario>)> = Vec::new();
    for s in scenarios {
        match groups
            .iter_mut()
            .find(|(settings, _)| *settings == s.settings)
        {
            Some((_, list)) => list.push(s.clone()),
            None => groups.push((s.settings, vec![s.clone()])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_groups_keep_every_scenario() {
        for list in [full(10), quick()] {
            let mut names: Vec<_> = list.iter().map(|s| s.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), list.len());
            let grouped: usize = groups(&list).iter().map(|(_, g)| g.len()).sum();
            assert_eq!(grouped, list.len());
        }
        // ab and the self-call; /hello; /widgets at 1000, 5000 and 10,000; /sleep;
        // each idle row on a server of its own.
        assert_eq!(groups(&full(10)).len(), 8);
    }

    #[test]
    fn a_quota_holds_the_cpu_bound_rows_only_and_gives_them_servers_of_their_own() {
        let mut list = full(10);
        hold_cpu_bound(&mut list, Some(40));
        let held: Vec<&str> = list
            .iter()
            .filter(|s| s.settings.quota.is_some())
            .map(|s| s.name)
            .collect();
        assert_eq!(held, ["hello-64", "hello-256", "hello-1024", "hello-5000"]);
        assert!(groups(&list)
            .iter()
            .all(|(settings, g)| g.iter().all(|s| s.settings == *settings)));
        let mut quick = quick();
        hold_cpu_bound(&mut quick, None);
        assert!(quick.iter().all(|s| s.settings.quota.is_none()));
    }

    #[test]
    fn servers_make_room_for_the_connections_of_their_scenarios() {
        for s in full(10).iter().chain(&quick()) {
            assert!(
                s.settings.max_connections > s.load.concurrency(),
                "{}: {:?}",
                s.name,
                s.settings
            );
            if s.route_secs.is_some() && matches!(s.load, Load::Wrk { .. }) {
                assert!(s.settings.fibers >= s.load.concurrency(), "{}", s.name);
            }
        }
    }

    #[test]
    fn minihttp_runs_the_wrk_scenarios_it_can_take() {
        let ran: Vec<&str> = full(10)
            .into_iter()
            .filter(|s| s.skipped_on(Runtime::Minihttp).is_none())
            .map(|s| s.name)
            .collect();
        assert_eq!(
            ran,
            [
                "hello-64",
                "hello-256",
                "hello-1024",
                "widgets-1000",
                "idle-9000",
                "idle-50000"
            ]
        );
        for s in full(10) {
            assert_eq!(s.skipped_on(Runtime::Fibers), None);
            assert_eq!(s.skipped_on(Runtime::Async), None);
        }
        let why = |name| {
            full(10)
                .into_iter()
                .find(|s| s.name == name)
                .and_then(|s| s.skipped_on(Runtime::Minihttp))
                .unwrap()
        };
        assert!(why("ab-c220").contains("ab hangs"));
        assert!(why("widgets-5000").contains("backlog of 1024"));
        assert!(why("hello-5000").contains("backlog of 1024"));
        assert!(why("sleep-10000").contains("no /sleep route"));
    }
}
