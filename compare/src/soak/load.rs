//! The soak's steady traffic: lanes of clients, each a thread sending one route's
//! request again and again on fresh connections, paced, for the whole run; every
//! request's outcome is counted in the [`Tally`], by the row it ended in, and every
//! failure is kept with its times for the verdict.
//!
//! The demo's routes (`/widgets?sleep=0.1`, `/widgets/http`, `/widgets/parallel`,
//! `/twitter`, `/hello`, and `/deep` deep enough to overflow, whose expected answer is
//! the overflow's 500), and the todo API of examples/todo_api.rs (a second server on
//! the same MariaDB: create, read, delete).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::client::{self, Answer, Trouble};
use super::rule::{Cause, Failure};

/// What a lane's answer must be.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// 200 with a body that contains this.
    Body(&'static str),
    /// The 500 of a caught stack overflow.
    Overflow,
}

/// One kind of client, run `copies` times at once.
#[derive(Clone, Copy, Debug)]
pub struct Lane {
    pub route: &'static str,
    pub path: &'static str,
    pub expect: Expect,
    /// Shortest time between the starts of two requests of one client.
    pub every: Duration,
    pub copies: usize,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The demo's lanes: about 600 requests a second in all, most of them on a route that
/// holds a MySQL connection or calls back into the server.
pub const LANES: [Lane; 6] = [
    Lane {
        route: "widgets",
        path: "/widgets?sleep=0.1",
        expect: Expect::Body("Oh hai"),
        every: ms(0),
        copies: 6,
    },
    Lane {
        route: "widgets_http",
        path: "/widgets/http",
        expect: Expect::Body("Oh hai"),
        every: ms(0),
        copies: 4,
    },
    Lane {
        route: "widgets_parallel",
        path: "/widgets/parallel?n=3&sleep=0.1",
        expect: Expect::Body("\"queries\":3"),
        every: ms(0),
        copies: 3,
    },
    Lane {
        route: "twitter",
        path: "/twitter",
        expect: Expect::Body("rails 3"),
        every: ms(20),
        copies: 3,
    },
    Lane {
        route: "hello",
        path: "/hello",
        expect: Expect::Body("Hello, World!"),
        every: ms(4),
        copies: 2,
    },
    Lane {
        route: "deep",
        path: "/deep?depth=3000&frame=1024",
        expect: Expect::Overflow,
        every: ms(1000),
        copies: 1,
    },
];
/// How long a client waits after a failure before its next request, as a client that
/// reads `Retry-After` would (shorter, so that the soak sees a recovery soon): a
/// refusal is answered at once, and without a pause the failures of a one-second
/// outage would outnumber the requests of a minute.
pub const AFTER_FAILURE: Duration = ms(200);
/// Clients of the todo API, each creating, reading and deleting one todo in turn.
pub const TODO_CLIENTS: usize = 3;
/// Shortest time between two of a todo client's rounds.
pub const TODO_EVERY: Duration = ms(20);

/// One row's counts.
#[derive(Clone, Debug, Default)]
pub struct RowCounts {
    /// Requests answered as expected.
    pub answered: u64,
    /// Failures by cause.
    pub failed: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Counts {
    rows: Vec<RowCounts>,
    failures: Vec<Failure>,
    requests: u64,
}

/// Every request's outcome, by row.
pub struct Tally {
    t0: Instant,
    row: f64,
    counts: Mutex<Counts>,
}

impl Tally {
    /// A tally of `rows` rows of `row` each, counted from `t0`.
    pub fn new(t0: Instant, row: Duration, rows: usize) -> Tally {
        Tally {
            t0,
            row: row.as_secs_f64(),
            counts: Mutex::new(Counts {
                rows: vec![RowCounts::default(); rows.max(1)],
                ..Counts::default()
            }),
        }
    }

    /// Seconds since the soak started.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Held only to add to the counts: never poisoned half-way.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn row_of(&self, counts: &Counts, end: f64) -> usize {
        ((end / self.row) as usize).min(counts.rows.len() - 1)
    }

    /// A request that ended at `end` answered as expected.
    pub fn answered(&self, end: f64) {
        let mut c = self.counts();
        let row = self.row_of(&c, end);
        c.rows[row].answered += 1;
        c.requests += 1;
    }

    /// A request that failed.
    pub fn failed(&self, failure: Failure) {
        let mut c = self.counts();
        let row = self.row_of(&c, failure.end);
        *c.rows[row]
            .failed
            .entry(failure.cause.to_string())
            .or_default() += 1;
        c.requests += 1;
        c.failures.push(failure);
    }

    /// Record the outcome of a request that started at `start`; after a failure, wait
    /// [`AFTER_FAILURE`].
    pub fn record(&self, start: f64, route: &'static str, outcome: Result<(), (Cause, String)>) {
        let end = self.now();
        match outcome {
            Ok(()) => self.answered(end),
            Err((cause, detail)) => {
                self.failed(Failure {
                    start,
                    end,
                    route,
                    cause,
                    detail,
                });
                std::thread::sleep(AFTER_FAILURE);
            }
        }
    }

    /// Row `i`'s counts so far.
    pub fn row(&self, i: usize) -> RowCounts {
        self.counts().rows.get(i).cloned().unwrap_or_default()
    }

    /// Every request counted, and the failures.
    pub fn totals(&self) -> (u64, Vec<Failure>) {
        let c = self.counts();
        (c.requests, c.failures.clone())
    }
}

/// Whether `got` is what `expect` asks for; else why not.
pub fn judge(expect: Expect, got: Result<Answer, Trouble>) -> Result<(), (Cause, String)> {
    let answer = got.map_err(|t| (t.cause, t.detail))?;
    let fits = match expect {
        Expect::Body(part) => answer.status == 200 && answer.body.contains(part),
        Expect::Overflow => {
            answer.status == 500
                && answer.kind.as_deref() == Some("handler-failed")
                && answer.body.contains("overflow")
        }
    };
    let wanted = match expect {
        Expect::Body(_) => 200,
        Expect::Overflow => 500,
    };
    match (fits, answer.status == wanted) {
        (true, _) => Ok(()),
        (false, true) => Err((Cause::Body(answer.status), answer.detail())),
        (false, false) => Err((answer.cause(), answer.detail())),
    }
}

/// The running lanes.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// Start every lane against the demo at `demo` and the todo API at `todo`.
    pub fn start(tally: &Arc<Tally>, demo: SocketAddr, todo: SocketAddr) -> std::io::Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for lane in LANES {
            for n in 0..lane.copies {
                let (tally, stop) = (Arc::clone(tally), Arc::clone(&stop));
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("soak-{}-{n}", lane.route))
                        .spawn(move || {
                            paced(&stop, lane.every, || {
                                let start = tally.now();
                                let got = client::request(demo, "GET", lane.path, None);
                                tally.record(start, lane.route, judge(lane.expect, got));
                            })
                        })?,
                );
            }
        }
        for n in 0..TODO_CLIENTS {
            let (tally, stop) = (Arc::clone(tally), Arc::clone(&stop));
            let mut round = 0u64;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("soak-todo-{n}"))
                    .spawn(move || {
                        paced(&stop, TODO_EVERY, || {
                            round += 1;
                            todo_round(&tally, todo, &format!("soak {n}.{round}"));
                        })
                    })?,
            );
        }
        Ok(Load { stop, threads })
    }

    /// Stop every lane; each finishes its request in flight (bounded by the client's
    /// timeout).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Run `once` until `stop`, starting no two runs closer than `every`.
fn paced(stop: &AtomicBool, every: Duration, mut once: impl FnMut()) {
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        once();
        let rest = every.saturating_sub(started.elapsed());
        if !rest.is_zero() {
            std::thread::sleep(rest);
        }
    }
}

/// Create a todo titled `title`, read it back and delete it; each step counted.
fn todo_round(tally: &Tally, todo: SocketAddr, title: &str) {
    let body = serde_json::json!({ "title": title }).to_string();
    let start = tally.now();
    let created = client::request(todo, "POST", "/todos", Some(&body));
    let id = match &created {
        Ok(a) if a.status == 201 => serde_json::from_str::<serde_json::Value>(&a.body)
            .ok()
            .and_then(|v| v["id"].as_u64()),
        _ => None,
    };
    let outcome = match (&created, id) {
        (_, Some(_)) => Ok(()),
        (Ok(a), None) if a.status == 201 => Err((Cause::Body(201), a.detail())),
        (Ok(a), None) => Err((a.cause(), a.detail())),
        (Err(t), _) => Err((t.cause.clone(), t.detail.clone())),
    };
    tally.record(start, "todo_create", outcome);
    let Some(id) = id else { return };
    let path = format!("/todos/{id}");
    let start = tally.now();
    let outcome = match client::request(todo, "GET", &path, None) {
        Ok(a) if a.status == 200 && a.body.contains(title) => Ok(()),
        Ok(a) if a.status == 200 => Err((Cause::Body(200), a.detail())),
        Ok(a) => Err((a.cause(), a.detail())),
        Err(t) => Err((t.cause, t.detail)),
    };
    tally.record(start, "todo_show", outcome);
    let start = tally.now();
    let outcome = match client::request(todo, "DELETE", &path, None) {
        Ok(a) if a.status == 204 => Ok(()),
        Ok(a) => Err((a.cause(), a.detail())),
        Err(t) => Err((t.cause, t.detail)),
    };
    tally.record(start, "todo_delete", outcome);
}
