//! What `fiberstack bench` measures: each scenario is one load (ab or wrk) on one
//! route, run against a server started with settings that match the load.
//!
//! Scenarios that need the same server settings share one server start (a
//! [`Settings`] group), so a round starts each runtime once per group.

use fiberstack::config::Runtime;

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
}

impl Scenario {
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
        let backlog = fiberstack::mini::LISTEN_BACKLOG;
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

/// Settings for the ab, /hello and /widgets/http scenarios: room for ab's 220
/// concurrent one-second requests (the fiber pool of the original was the throttle at
/// 100; ours is sized so that only the load is).
const SMALL: Settings = Settings {
    fibers: 300,
    db_pool: 300,
    queue: 1024,
};

/// Settings for the idle keep-alive scenario: a server of its own (no other load
/// before its idle reading), the demo's default pools.
const IDLE: Settings = Settings {
    fibers: 100,
    db_pool: 10,
    queue: 1024,
};

/// The full run: the original demo's two ab loads, `/hello` at two concurrencies, the
/// self-call, `/widgets` at 1000 and 5000 connections, and 9000 idle connections
/// (BENCHMARKS.md, "The scenarios"); `duration` is wrk's `-d` in seconds.
pub fn full(duration: u64) -> Vec<Scenario> {
    let wrk = |concurrency| Load::Wrk {
        concurrency,
        duration_secs: duration,
    };
    let widgets_at = |c: usize| Settings {
        fibers: c,
        db_pool: c,
        queue: 1024,
    };
    vec![
        Scenario {
            name: "ab-c5",
            path: "/widgets".into(),
            load: Load::Ab {
                concurrency: 5,
                requests: 10,
            },
            settings: SMALL,
            route_secs: Some(1.0),
            warmup_secs: 0,
            memory_per_request: false,
        },
        Scenario {
            name: "ab-c220",
            path: "/widgets".into(),
            load: Load::Ab {
                concurrency: 220,
                requests: 2000,
            },
            settings: SMALL,
            route_secs: Some(1.0),
            warmup_secs: 0,
            memory_per_request: false,
        },
        Scenario {
            name: "hello-64",
            path: "/hello".into(),
            load: wrk(64),
            settings: SMALL,
            route_secs: None,
            warmup_secs: 1,
            memory_per_request: false,
        },
        Scenario {
            name: "hello-256",
            path: "/hello".into(),
            load: wrk(256),
            settings: SMALL,
            route_secs: None,
            warmup_secs: 1,
            memory_per_request: false,
        },
        Scenario {
            name: "widgets-http-100",
            path: "/widgets/http".into(),
            load: wrk(100),
            settings: SMALL,
            route_secs: Some(1.0),
            warmup_secs: 2,
            memory_per_request: false,
        },
        Scenario {
            name: "widgets-1000",
            path: "/widgets".into(),
            load: wrk(1000),
            settings: widgets_at(1000),
            route_secs: Some(1.0),
            warmup_secs: 2,
            memory_per_request: false,
        },
        Scenario {
            name: "widgets-5000",
            path: "/widgets".into(),
            load: wrk(5000),
            settings: widgets_at(5000),
            route_secs: Some(1.0),
            warmup_secs: 0,
            memory_per_request: true,
        },
        Scenario {
            name: "idle-9000",
            path: "/hello".into(),
            load: Load::Idle {
                connections: 9000,
                hold_secs: 3,
            },
            settings: IDLE,
            route_secs: None,
            warmup_secs: 0,
            memory_per_request: true,
        },
    ]
}

/// A smoke run of a few seconds per runtime: every kind of scenario, small loads,
/// short sleeps.
pub fn quick() -> Vec<Scenario> {
    let small = Settings {
        fibers: 40,
        db_pool: 20,
        queue: 64,
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
        },
        Scenario {
            name: "hello-16",
            path: "/hello".into(),
            load: Load::Wrk {
                concurrency: 16,
                duration_secs: 1,
            },
            settings: small,
            route_secs: None,
            warmup_secs: 0,
            memory_per_request: false,
        },
        Scenario {
            name: "widgets-http-10",
            path: "/widgets/http".into(),
            load: Load::Wrk {
                concurrency: 10,
                duration_secs: 2,
            },
            settings: small,
            route_secs: Some(1.0),
            warmup_secs: 0,
            memory_per_request: false,
        },
        Scenario {
            name: "widgets-20",
            path: "/widgets?sleep=0.2".into(),
            load: Load::Wrk {
                concurrency: 20,
                duration_secs: 2,
            },
            settings: small,
            route_secs: Some(0.2),
            warmup_secs: 0,
            memory_per_request: true,
        },
        Scenario {
            name: "idle-200",
            path: "/hello".into(),
            load: Load::Idle {
                connections: 200,
                hold_secs: 1,
            },
            settings: IDLE,
            route_secs: None,
            warmup_secs: 0,
            memory_per_request: true,
        },
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
        assert_eq!(groups(&full(10)).len(), 4);
    }

    #[test]
    fn minihttp_runs_the_wrk_scenarios_it_can_take() {
        let ran: Vec<&str> = full(10)
            .into_iter()
            .filter(|s| s.skipped_on(Runtime::Minihttp).is_none())
            .map(|s| s.name)
            .collect();
        assert_eq!(ran, ["hello-64", "hello-256", "widgets-1000", "idle-9000"]);
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
    }
}
