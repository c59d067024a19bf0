//! The soak's judgement: why a request failed ([`Cause`]), which injected fault may
//! account for it ([`explains`]), whether it fell inside that fault's window, and the
//! verdict line with the growth figures.
//!
//! The rule: a failed request is explained when its time in flight (from its connect
//! to its last byte) overlaps the window of an injected fault (from the fault's first
//! action until the soak saw the server recovered, plus [`WINDOW_MARGIN`]) whose kind
//! accounts for the failure's cause:
//!
//! | fault | causes it accounts for |
//! |---|---|
//! | a worker killed (alone, in a rolling restart, during an outage) | the connection closed before a whole answer; a 502 (a self-call of `/widgets/http` or `/twitter` that reached the killed worker) |
//! | MariaDB killed and started again | a 503 `database-unavailable`; a 502 (a self-call answered by that 503) |
//! | a burst past the fibers and the queue | a 503 `queue-full`, `queue-timeout`, `route-busy` or `server-busy`; a 502 (a self-call refused so) |
//! | SIGHUP alone, slow and garbage clients, clients that leave | nothing: none of them may cost another client its answer |
//!
//! Everything else is unexplained: a timeout, a refused connect, a 500, a wrong body, a
//! probe of the faults themselves that failed (a replacement that never accepted,
//! `/readyz` that never went 503 and back, a garbage request answered otherwise than
//! with a 4xx or a close).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Time added to the end of every fault's window: the soak notices a recovery by
/// polling, and a request that failed just before it may end just after.
pub const WINDOW_MARGIN: Duration = Duration::from_secs(1);
/// Largest growth (per cent, from the end of the first row to the end) that passes.
pub const MAX_GROWTH_PERCENT: f64 = 10.0;

/// Why one request failed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The connect was refused or timed out.
    Connect,
    /// The connection closed (or was reset) before a whole answer.
    Closed,
    /// No whole answer within the client's bound.
    Timeout,
    /// An unexpected status, with the problem's kind when the body is a problem
    /// (`urn:fiber-web:problem:KIND`).
    Status(u16, Option<String>),
    /// The expected status with a body that is not the route's.
    Body(u16),
    /// A check of a fault itself failed (what was checked is the failure's detail).
    Check,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Connect => f.write_str("connect"),
            Cause::Closed => f.write_str("closed"),
            Cause::Timeout => f.write_str("timeout"),
            Cause::Status(s, Some(kind)) => write!(f, "{s} {kind}"),
            Cause::Status(s, None) => write!(f, "{s}"),
            Cause::Body(s) => write!(f, "{s} wrong body"),
            Cause::Check => f.write_str("fault check"),
        }
    }
}

/// The kinds of injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// `kill -9` of a worker, until its replacement accepts.
    WorkerKill,
    /// SIGHUP to the supervisor, until every worker has been replaced.
    Sighup,
    /// MariaDB killed and started again, until `/readyz` answers 200 again.
    DbOutage,
    /// More requests at once than the fibers and the queue hold.
    Burst,
    /// Clients that send their request a byte at a time.
    SlowClients,
    /// Requests that are not HTTP, or break its rules.
    Garbage,
    /// Clients that close their connection before the answer.
    Leavers,
}

impl Fault {
    /// Its name in the soak's lines.
    pub fn name(self) -> &'static str {
        match self {
            Fault::WorkerKill => "kill-worker",
            Fault::Sighup => "sighup",
            Fault::DbOutage => "mariadb-outage",
            Fault::Burst => "burst",
            Fault::SlowClients => "slow-clients",
            Fault::Garbage => "garbage",
            Fault::Leavers => "leavers",
        }
    }
}

/// Whether a fault of kind `fault` accounts for a failure of cause `cause` (the table
/// in the module's header).
pub fn explains(fault: Fault, cause: &Cause) -> bool {
    fn kind(c: &Cause) -> Option<&str> {
        match c {
            Cause::Status(_, Some(k)) => Some(k.as_str()),
            _ => None,
        }
    }
    match fault {
        Fault::WorkerKill => matches!(cause, Cause::Closed | Cause::Status(502, _)),
        Fault::DbOutage => {
            matches!(cause, Cause::Status(502, _))
                || matches!(cause, Cause::Status(503, _))
                    && kind(cause) == Some("database-unavailable")
        }
        Fault::Burst => {
            matches!(cause, Cause::Status(502, _))
                || matches!(cause, Cause::Status(503, _))
                    && matches!(
                        kind(cause),
                        Some("queue-full" | "queue-timeout" | "route-busy" | "server-busy")
                    )
        }
        Fault::Sighup | Fault::SlowClients | Fault::Garbage | Fault::Leavers => false,
    }
}

/// When a fault was in effect, in seconds since the soak started.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub fault: Fault,
    pub start: f64,
    /// When the soak saw the server recovered (the margin is added when judging).
    pub end: f64,
}

/// One failed request.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Its connect and its end, in seconds since the soak started.
    pub start: f64,
    pub end: f64,
    /// The route's label, or what a probe checked.
    pub route: &'static str,
    pub cause: Cause,
    /// What the client saw, shortened.
    pub detail: String,
}

/// The first window that explains `failure`, if any.
pub fn explained_by<'w>(failure: &Failure, windows: &'w [Window]) -> Option<&'w Window> {
    let margin = WINDOW_MARGIN.as_secs_f64();
    windows.iter().find(|w| {
        failure.start <= w.end + margin
            && failure.end >= w.start
            && explains(w.fault, &failure.cause)
    })
}

/// What the verdict line needs from a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub requests: u64,
    pub failed: u64,
    pub explained: u64,
    /// Explained failures by the fault that explains them.
    pub by_fault: BTreeMap<&'static str, u64>,
}

/// Judge every failure against the windows: the totals, and the unexplained failures.
pub fn judge<'f>(
    requests: u64,
    failures: &'f [Failure],
    windows: &[Window],
) -> (Totals, Vec<&'f Failure>) {
    let mut totals = Totals {
        requests,
        failed: failures.len() as u64,
        ..Totals::default()
    };
    let mut unexplained = Vec::new();
    for f in failures {
        match explained_by(f, windows) {
            Some(w) => {
                totals.explained += 1;
                *totals.by_fault.entry(w.fault.name()).or_default() += 1;
            }
            None => unexplained.push(f),
        }
    }
    (totals, unexplained)
}

/// Growth from `first` to `last`, in per cent; `None` when either is unknown or the
/// first is zero.
pub fn growth(first: Option<f64>, last: Option<f64>) -> Option<f64> {
    match (first, last) {
        (Some(a), Some(b)) if a > 0.0 => Some((b - a) / a * 100.0),
        _ => None,
    }
}

/// The three growth figures of the verdict: RSS, descriptors, MySQL connections.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Growth {
    pub rss: Option<f64>,
    pub fds: Option<f64>,
    pub mysql: Option<f64>,
}

impl Growth {
    /// Whether every figure is known and at most [`MAX_GROWTH_PERCENT`].
    pub fn passes(&self) -> bool {
        [self.rss, self.fds, self.mysql]
            .iter()
            .all(|g| g.is_some_and(|g| g <= MAX_GROWTH_PERCENT))
    }
}

fn percent(g: Option<f64>) -> String {
    match g {
        Some(g) => format!("{g:.1}%"),
        None => "unknown".into(),
    }
}

/// The verdict line, exactly:
/// `soak: N requests, F failed (E explained by injected faults, U unexplained); growth rss X%, fds Y%, mysql Z%`.
pub fn verdict(t: &Totals, g: &Growth) -> String {
    format!(
        "soak: {} requests, {} failed ({} explained by injected faults, {} unexplained); \
         growth rss {}, fds {}, mysql {}",
        t.requests,
        t.failed,
        t.explained,
        t.failed - t.explained,
        percent(g.rss),
        percent(g.fds),
        percent(g.mysql)
    )
}

/// Whether the run passes: nothing unexplained, nothing grown past the limit.
pub fn passes(t: &Totals, g: &Growth) -> bool {
    t.failed == t.explained && g.passes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(start: f64, end: f64, cause: Cause) -> Failure {
        Failure {
            start,
            end,
            route: "widgets",
            cause,
            detail: String::new(),
        }
    }

    fn status(s: u16, kind: &str) -> Cause {
        Cause::Status(s, Some(kind.into()))
    }

    #[test]
    fn each_fault_explains_only_its_own_causes() {
        assert!(explains(Fault::WorkerKill, &Cause::Closed));
        assert!(explains(Fault::WorkerKill, &Cause::Status(502, None)));
        assert!(!explains(Fault::WorkerKill, &status(503, "queue-full")));
        assert!(!explains(Fault::WorkerKill, &Cause::Timeout));
        assert!(explains(
            Fault::DbOutage,
            &status(503, "database-unavailable")
        ));
        assert!(!explains(Fault::DbOutage, &status(500, "database-error")));
        assert!(!explains(Fault::DbOutage, &Cause::Closed));
        assert!(explains(Fault::Burst, &status(503, "queue-full")));
        assert!(!explains(
            Fault::Burst,
            &status(503, "database-unavailable")
        ));
        for quiet in [
            Fault::Sighup,
            Fault::SlowClients,
            Fault::Garbage,
            Fault::Leavers,
        ] {
            for cause in [
                Cause::Closed,
                Cause::Status(502, None),
                status(503, "queue-full"),
            ] {
                assert!(!explains(quiet, &cause), "{quiet:?} {cause}");
            }
        }
        for fault in [Fault::WorkerKill, Fault::DbOutage, Fault::Burst] {
            for cause in [
                Cause::Check,
                Cause::Connect,
                Cause::Body(200),
                Cause::Timeout,
            ] {
                assert!(!explains(fault, &cause), "{fault:?} {cause}");
            }
        }
    }

    #[test]
    fn a_failure_is_explained_only_inside_its_window() {
        let windows = [Window {
            fault: Fault::WorkerKill,
            start: 10.0,
            end: 12.0,
        }];
        let margin = WINDOW_MARGIN.as_secs_f64();
        // In flight across the kill.
        assert!(explained_by(&failure(9.5, 10.1, Cause::Closed), &windows).is_some());
        // Started within the margin after the recovery.
        assert!(
            explained_by(&failure(12.0 + margin * 0.9, 14.0, Cause::Closed), &windows).is_some()
        );
        // Ended before the kill, or started after the margin.
        assert!(explained_by(&failure(8.0, 9.9, Cause::Closed), &windows).is_none());
        assert!(explained_by(&failure(12.1 + margin, 13.0, Cause::Closed), &windows).is_none());
        // Inside, but a cause this fault does not account for.
        assert!(explained_by(
            &failure(10.5, 11.0, status(500, "database-error")),
            &windows
        )
        .is_none());
    }

    #[test]
    fn the_verdict_line_has_the_issues_form_and_fails_on_unexplained_or_growth() {
        let windows = [Window {
            fault: Fault::Burst,
            start: 1.0,
            end: 2.0,
        }];
        let failures = [
            failure(1.5, 1.6, status(503, "queue-full")),
            failure(5.0, 5.1, Cause::Timeout),
        ];
        let (t, unexplained) = judge(100, &failures, &windows);
        assert_eq!(unexplained.len(), 1);
        let g = Growth {
            rss: Some(2.04),
            fds: Some(0.0),
            mysql: Some(-3.0),
        };
        assert_eq!(
            verdict(&t, &g),
            "soak: 100 requests, 2 failed (1 explained by injected faults, 1 unexplained); \
             growth rss 2.0%, fds 0.0%, mysql -3.0%"
        );
        assert!(!passes(&t, &g));
        let (clean, _) = judge(100, &failures[..1], &windows);
        assert!(passes(&clean, &g));
        let grown = Growth {
            fds: Some(10.5),
            ..g
        };
        assert!(!passes(&clean, &grown));
        assert!(!passes(&clean, &Growth { mysql: None, ..g }));
    }

    #[test]
    fn growth_is_relative_to_the_first_figure() {
        assert_eq!(growth(Some(200.0), Some(220.0)), Some(10.0));
        assert_eq!(growth(Some(0.0), Some(1.0)), None);
        assert_eq!(growth(None, Some(1.0)), None);
    }
}
