//! `GET /metrics`: the server's counters in Prometheus' text exposition format 0.0.4,
//! rendered from typed snapshots, so that a renamed counter is a compile error here
//! rather than a family that silently disappears.
//!
//! What is rendered: what runs the handlers ([`HandlerPool`]: the fiber pool, or
//! an async server's task slots) with their per-route runs, overflows, stalls and
//! stack peaks; the per-route request counters and latency histograms of
//! [`HttpStats`]; a few lines of /proc for the process; and whatever the app adds
//! through [`App::metrics`](crate::App::metrics) with an [`Exposition`] (the HTTP
//! client: [`Exposition::http_client`]; the MySQL pool, with the `mysql` feature:
//! `Exposition::db_pool`).
//! Names follow Prometheus' conventions: the app's name as prefix, base units
//! (`_seconds`, `_bytes`), `_total` on counters, HELP and TYPE for every family; the
//! process families use the standard `process_` names.
//!
//! The format is the only one served: a scraper that asks for another (protobuf,
//! OpenMetrics) in `Accept` still gets text 0.0.4, which every Prometheus reads.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

pub use crate::counters::HttpStats;

use crate::counters::LATENCY_BUCKETS;
use crate::http::client::ClientStats;
use crate::http::Response;

/// The label of each built-in route (`/healthz`, `/readyz`, `/metrics`: builtin.rs
/// serves them), as the counters and the families name them.
pub const HEALTHZ: &str = "healthz";
/// See [`HEALTHZ`].
pub const READYZ: &str = "readyz";
/// See [`HEALTHZ`].
pub const METRICS: &str = "metrics";

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What runs the handlers, as `/stats` shows it and `/metrics` renders it: the fiber
/// pool, or an async server's task slots (which have no stacks to measure).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HandlerPool {
    /// Fibers in the pool (task slots).
    pub size: u64,
    /// Running a handler now.
    pub busy: u64,
    /// Requests waiting for one now.
    pub queued: u64,
    /// Handlers that ran to their end.
    pub completed: u64,
    /// Requests refused with a 503 because the queue was full.
    pub rejected: u64,
    /// Requests that waited too long for one and got a 503.
    pub timed_out: u64,
    /// Handlers that panicked (answered 500).
    pub panics: u64,
    /// Handlers that held their thread past the watchdog's warning (0 where
    /// nothing counts them).
    pub stalls: u64,
    /// What only fibers have: stacks, overflows, their aftermath.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<Stacks>,
    /// The same, per route label.
    pub routes: BTreeMap<String, RouteRuns>,
}

/// The fiber stacks of a [`HandlerPool`].
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Stacks {
    /// Usable bytes of each fiber's stack (page-rounded).
    pub stack_size: u64,
    /// The most stack a measured handler used, over all routes.
    pub peak_stack_bytes: u64,
    /// Handlers that overflowed their stack (answered 500).
    pub overflows: u64,
    /// Of those, overflows that struck outside a safe point.
    pub unsafe_overflows: u64,
    /// Stacks kept for fibers whose own stack overflowed (each overflowed stack is
    /// quarantined, never reused).
    pub spare_stacks: u64,
    /// Fibers retired because no spare was left for them.
    pub retired: u64,
    /// What caught overflows left behind in this process.
    pub aftermath: Aftermath,
}

/// `fiber_pool::aftermath()`, as `/stats` shows it.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Aftermath {
    /// Overflows outside a safe point: state the job held may be left behind.
    pub outside_safe_point: u64,
    /// Overflows while the job was panicking (known broken).
    pub while_panicking: u64,
    /// Faults while handling an overflow (known broken).
    pub second_faults: u64,
    /// Every caught overflow: jobs whose frames (and their heap) were abandoned.
    pub abandoned: u64,
    /// Overflowed stacks kept mapped and never reused.
    pub quarantined: u64,
    /// Fibers retired for want of a spare stack (known broken when all are).
    pub retired: u64,
}

/// One route's runs on the handler pool.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RouteRuns {
    /// Handlers that got a fiber (a task slot).
    pub runs: u64,
    /// Of those, panics.
    pub panics: u64,
    /// Stalls of its thread.
    pub stalls: u64,
    /// What only fibers have.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub stack: Option<RouteStack>,
}

/// One route's stack figures on fibers.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RouteStack {
    /// Runs that overflowed.
    pub overflows: u64,
    /// Of those, outside a safe point.
    pub unsafe_overflows: u64,
    /// Runs whose stack use was measured (every 64th).
    pub measured: u64,
    /// The most stack a measured run used.
    pub peak_stack_bytes: u64,
}

impl HandlerPool {
    /// The fiber pool's counters now, with the watchdog's stall counts per route and
    /// the process's overflow aftermath.
    pub fn of_fibers(pool: &fiber_pool::FiberPool) -> HandlerPool {
        let s = pool.stats();
        let stalls = crate::watchdog::stalls();
        let mut routes: BTreeMap<String, RouteRuns> = s
            .per_label
            .iter()
            .map(|(label, l)| {
                let runs = RouteRuns {
                    runs: l.runs,
                    panics: l.panics,
                    stalls: stalls.get(label).copied().unwrap_or(0),
                    stack: Some(RouteStack {
                        overflows: l.overflows,
                        unsafe_overflows: l.unsafe_overflows,
                        measured: l.measured,
                        peak_stack_bytes: l.peak_stack_bytes as u64,
                    }),
                };
                (label.to_string(), runs)
            })
            .collect();
        for (label, n) in &stalls {
            routes
                .entry(label.to_string())
                .or_insert_with(|| RouteRuns {
                    stalls: *n,
                    stack: Some(RouteStack::default()),
                    ..RouteRuns::default()
                });
        }
        let a = fiber_pool::aftermath();
        HandlerPool {
            size: s.size as u64,
            busy: s.busy as u64,
            queued: s.queued as u64,
            completed: s.completed,
            rejected: s.rejected,
            timed_out: s.timed_out,
            panics: s.panics,
            stalls: stalls.values().sum(),
            stacks: Some(Stacks {
                stack_size: s.stack_size as u64,
                peak_stack_bytes: s.peak_stack_bytes as u64,
                overflows: s.overflows,
                unsafe_overflows: s.unsafe_overflows,
                spare_stacks: s.spare_stacks as u64,
                retired: s.retired as u64,
                aftermath: Aftermath {
                    outside_safe_point: a.outside_safe_point,
                    while_panicking: a.while_panicking,
                    second_faults: a.second_faults,
                    abandoned: a.abandoned,
                    quarantined: a.quarantined,
                    retired: a.retired,
                },
            }),
            routes,
        }
    }
}

/// What the server renders of itself: which runtime, what runs its handlers, and its
/// counters.
pub struct ServerSnapshot<'a> {
    /// `fibers`, or the name of another runtime serving the same routes.
    pub runtime: &'a str,
    /// What runs the handlers.
    pub pool: &'a HandlerPool,
    /// The HTTP server's counters (uptime among them).
    pub http: &'a HttpStats,
}

/// A 200 with rendered exposition `text`.
pub fn response(text: String) -> Response {
    Response::text(200, text).with_headers(vec![("Content-Type", CONTENT_TYPE.into())])
}

/// A metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the process restarts).
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

use Kind::{Counter, Gauge};

/// The exposition being written: families (HELP and TYPE) and their samples. The
/// framework's own families are named after the app (`NAME_fibers_busy`,
/// [`Options::name`](crate::Options::name)); an app's hook writes its own names as
/// they are.
#[derive(Debug)]
pub struct Exposition {
    text: String,
    /// The app's name and `_`: the framework's families' prefix.
    prefix: String,
}

impl Default for Exposition {
    fn default() -> Self {
        Exposition::new()
    }
}

impl Exposition {
    /// An empty exposition, for this process's app ([`crate::logging::app_name`]).
    pub fn new() -> Exposition {
        Exposition::for_app(crate::logging::app_name())
    }

    /// An empty exposition whose framework families are named after `app`.
    pub fn for_app(app: &str) -> Exposition {
        Exposition {
            text: String::with_capacity(32 * 1024),
            prefix: format!("{app}_"),
        }
    }

    /// Announce family `name` of `kind`, with its `help`; its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.family_typed(name, kind.name(), help);
    }

    fn family_typed(&mut self, name: &str, kind: &str, help: &str) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.text, "# HELP {name} {}", escape(help, false));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample of the family announced last: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape(v, true));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    /// A family of one sample without labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The framework's family `name`, after the app's prefix.
    fn own(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn own_family(&mut self, name: &str, kind: Kind, help: &str) {
        self.family(&self.own(name), kind, help);
    }

    fn own_family_typed(&mut self, name: &str, kind: &str, help: &str) {
        self.family_typed(&self.own(name), kind, help);
    }

    fn own_sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.sample(&self.own(name), labels, value);
    }

    pub(crate) fn own_single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.single(&self.own(name), kind, help, value);
    }

    /// The outgoing HTTP client's families (`NAME_http_client_*`).
    pub fn http_client(&mut self, s: &ClientStats) {
        let families: [(&str, Kind, &str, u64); 9] = [
            (
                "http_client_requests_total",
                Counter,
                "Requests the outgoing HTTP client sent.",
                s.requests,
            ),
            (
                "http_client_errors_total",
                Counter,
                "Outgoing requests that failed (connect, timeout, bad response).",
                s.errors,
            ),
            (
                "http_client_in_flight",
                Gauge,
                "Outgoing requests in flight now.",
                s.in_flight,
            ),
            (
                "http_client_connects_total",
                Counter,
                "TCP connections the outgoing HTTP client opened.",
                s.connects,
            ),
            (
                "http_client_reused_connections_total",
                Counter,
                "Outgoing requests sent on a kept-alive connection.",
                s.reused_connections,
            ),
            (
                "http_client_idle_connections",
                Gauge,
                "Kept-alive outgoing connections idle now.",
                s.idle_connections,
            ),
            (
                "http_client_dns_lookups_total",
                Counter,
                "Host names the outgoing HTTP client looked up (DNS cache misses).",
                s.dns_lookups,
            ),
            (
                "http_client_dns_cache_hits_total",
                Counter,
                "Host names the outgoing HTTP client answered from its DNS cache.",
                s.dns_cache_hits,
            ),
            (
                "http_client_tls_handshakes_total",
                Counter,
                "TLS handshakes the outgoing HTTP client started.",
                s.tls_handshakes,
            ),
        ];
        for (name, kind, help, value) in families {
            self.own_single(name, kind, help, value as f64);
        }
    }

    /// The server's own families: build info, uptime, the handler pool and its routes,
    /// the requests and their latency, connections and responses, and the process.
    pub fn server(&mut self, snap: &ServerSnapshot<'_>) {
        self.own_family(
            "build_info",
            Gauge,
            "Always 1; the labels say which runtime serves and which version.",
        );
        self.own_sample(
            "build_info",
            &[
                ("runtime", snap.runtime),
                ("version", env!("CARGO_PKG_VERSION")),
            ],
            1.0,
        );
        self.own_single(
            "uptime_seconds",
            Gauge,
            "Seconds since the server started.",
            snap.http.uptime_secs(),
        );
        self.handler_pool(snap.pool);
        self.requests(snap.http);
        self.process();
    }

    fn handler_pool(&mut self, w: &HandlerPool) {
        let totals: [(&str, Kind, &str, u64); 6] = [
            (
                "fibers",
                Gauge,
                "Fibers in the pool, --fibers (the async runtime: task slots).",
                w.size,
            ),
            (
                "fibers_busy",
                Gauge,
                "Fibers running a handler now.",
                w.busy,
            ),
            (
                "fibers_queued",
                Gauge,
                "Requests waiting for a fiber now.",
                w.queued,
            ),
            (
                "fibers_completed_total",
                Counter,
                "Handlers that ran to their end on a fiber.",
                w.completed,
            ),
            (
                "fibers_rejected_total",
                Counter,
                "Requests refused with a 503 because --queue requests already waited.",
                w.rejected,
            ),
            (
                "fibers_timed_out_total",
                Counter,
                "Requests that waited --fiber-wait for a fiber and got a 503.",
                w.timed_out,
            ),
        ];
        for (name, kind, help, value) in totals {
            self.own_single(name, kind, help, value as f64);
        }
        if let Some(s) = &w.stacks {
            let a = &s.aftermath;
            let stacks: [(&str, Kind, &str, u64); 6] = [
                ("fiber_spare_stacks", Gauge, "Spare stacks left for fibers whose stack overflowed (each overflowed stack is quarantined).", s.spare_stacks),
                ("fibers_retired", Gauge, "Fibers retired because no spare stack was left for them.", s.retired),
                ("overflows_quarantined_total", Counter, "Overflowed stacks kept mapped and never reused.", a.quarantined),
                ("overflows_unsafe_total", Counter, "Caught overflows that struck outside a safe point (the process asks to be replaced).", a.outside_safe_point),
                ("overflows_abandoned_total", Counter, "Caught overflows: jobs whose frames and their heap were abandoned.", a.abandoned),
                ("overflows_broken_total", Counter, "Overflows that left the process known broken (while panicking, a second fault).", a.while_panicking + a.second_faults),
            ];
            for (name, kind, help, value) in stacks {
                self.own_single(name, kind, help, value as f64);
            }
            self.own_single(
                "fiber_stack_size_bytes",
                Gauge,
                "Usable stack of each fiber, --stack-size (page-rounded).",
                s.stack_size as f64,
            );
            self.own_single(
                "fiber_stack_peak_bytes",
                Gauge,
                "The most stack a measured handler used, over all routes.",
                s.peak_stack_bytes as f64,
            );
        }
        // (name, kind, help, value, whether only fibers keep it: task slots have no
        // stacks, and those families are left out for them)
        type Per = fn(&RouteRuns) -> Option<u64>;
        let per_route: [(&str, Kind, &str, Per, bool); 7] = [
            ("route_runs_total", Counter, "Handlers of the route that got a fiber (or a task slot).", |r| Some(r.runs), false),
            ("route_overflows_total", Counter, "Handlers of the route that overflowed their fiber stack (answered 500).", |r| r.stack.map(|s| s.overflows), true),
            ("route_unsafe_overflows_total", Counter, "Of the route's overflows, those that struck outside a safe point.", |r| r.stack.map(|s| s.unsafe_overflows), true),
            ("route_stalls_total", Counter, "Handlers of the route that stalled their thread (0 where the server does not count stalls).", |r| Some(r.stalls), false),
            ("route_panics_total", Counter, "Handlers of the route that panicked (answered 500).", |r| Some(r.panics), false),
            ("route_stack_peak_bytes", Gauge, "The most fiber stack a measured handler of the route used.", |r| r.stack.map(|s| s.peak_stack_bytes), true),
            ("route_stack_measured_total", Counter, "Handlers of the route whose stack use was measured (every 64th run).", |r| r.stack.map(|s| s.measured), true),
        ];
        for (name, kind, help, value, fibers_only) in per_route {
            if fibers_only && w.stacks.is_none() {
                continue;
            }
            self.own_family(name, kind, help);
            for (label, runs) in &w.routes {
                self.own_sample(name, &[("route", label)], value(runs).unwrap_or(0) as f64);
            }
        }
    }

    /// Requests per route and status class, the latency histograms, connections and
    /// responses by class.
    fn requests(&mut self, http: &HttpStats) {
        let routes: Vec<_> = http.routes().collect();
        let name = "http_requests_total";
        self.own_family(
            name,
            Counter,
            "Requests that reached the router, by route label (unmatched: no route) and status class.",
        );
        for r in &routes {
            for (class, text) in CLASSES {
                let labels = [("route", r.label), ("status_class", text)];
                self.own_sample(name, &labels, r.by_class[class] as f64);
            }
        }

        let name = "http_request_duration_seconds";
        self.own_family_typed(
            name,
            "histogram",
            "Seconds from a routed request's arrival to its response, by route label.",
        );
        let bucket = format!("{name}_bucket");
        for r in &routes {
            for (i, count) in r.cumulative.iter().enumerate() {
                let le = match LATENCY_BUCKETS.get(i) {
                    Some(bound) => bound.to_string(),
                    None => "+Inf".to_string(),
                };
                self.own_sample(&bucket, &[("route", r.label), ("le", &le)], *count as f64);
            }
            self.own_sample(&format!("{name}_sum"), &[("route", r.label)], r.sum_secs);
            self.own_sample(
                &format!("{name}_count"),
                &[("route", r.label)],
                r.count() as f64,
            );
        }

        let c = http.connection_counts();
        self.own_single(
            "http_connections_accepted_total",
            Counter,
            "Client connections accepted.",
            c.accepted as f64,
        );
        self.own_single(
            "http_connections_rejected_total",
            Counter,
            "Client connections answered 503 and closed: --max-connections were open.",
            c.rejected as f64,
        );
        self.own_single(
            "http_requests_cancelled_total",
            Counter,
            "Requests whose client went away while they ran: their work was cancelled and nothing sent.",
            c.cancelled as f64,
        );
        self.own_single(
            "http_requests_abandoned_total",
            Counter,
            "Requests not run because their client had gone while they waited.",
            c.abandoned as f64,
        );
        self.own_single(
            "http_protocol_errors_total",
            Counter,
            "Requests that were not valid HTTP/1.x or broke a limit before routing.",
            c.protocol_errors as f64,
        );
        let name = "http_responses_total";
        self.own_family(
            name,
            Counter,
            "Responses sent, by status class, refusals before routing included.",
        );
        for (class, text) in CLASSES {
            self.own_sample(name, &[("status_class", text)], c.responses[class] as f64);
        }
    }

    /// Resident memory, open and allowed file descriptors, from /proc (Linux).
    fn process(&mut self) {
        let families = [
            (
                "process_resident_memory_bytes",
                "Resident memory of the process (VmRSS), in bytes.",
                resident_bytes(),
            ),
            (
                "process_open_fds",
                "Open file descriptors (entries of /proc/self/fd).",
                open_fds(),
            ),
            (
                "process_max_fds",
                "The soft limit on open file descriptors (ulimit -n).",
                max_fds(),
            ),
        ];
        for (name, help, value) in families {
            if let Some(v) = value {
                self.single(name, Gauge, help, v);
            }
        }
    }

    /// The text.
    pub fn into_text(self) -> String {
        self.text
    }
}

/// Status classes rendered for every route (a final response is never 1xx).
const CLASSES: [(usize, &str); 4] = [(2, "2xx"), (3, "3xx"), (4, "4xx"), (5, "5xx")];

fn resident_bytes() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

fn open_fds() -> Option<f64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
}

fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// HELP text escapes `\` and newlines; label values also `"`.
fn escape(text: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A sample value as the format writes it: integers without a fraction, `+Inf`,
/// `-Inf` and `NaN` by name.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn handler_pool() -> HandlerPool {
        let mut routes = BTreeMap::new();
        routes.insert(
            "hello".to_string(),
            RouteRuns {
                runs: 9,
                panics: 0,
                stalls: 0,
                stack: Some(RouteStack {
                    measured: 1,
                    peak_stack_bytes: 4096,
                    ..RouteStack::default()
                }),
            },
        );
        HandlerPool {
            size: 4,
            busy: 1,
            completed: 9,
            stacks: Some(Stacks {
                stack_size: 131072,
                peak_stack_bytes: 4096,
                ..Stacks::default()
            }),
            routes,
            ..HandlerPool::default()
        }
    }

    fn render(runtime: &str, w: &HandlerPool, http: &HttpStats) -> String {
        let mut out = Exposition::for_app("fiberstack");
        out.server(&ServerSnapshot {
            runtime,
            pool: w,
            http,
        });
        out.into_text()
    }

    #[test]
    fn families_have_help_and_type_and_values_their_units() {
        let http = HttpStats::new(["hello"], false);
        http.request(Some("hello"), 200, Duration::from_millis(2));
        let mut out = Exposition::for_app("fiberstack");
        out.server(&ServerSnapshot {
            runtime: "fibers",
            pool: &handler_pool(),
            http: &http,
        });
        let text = out.into_text();
        assert!(text.contains("# TYPE fiberstack_fibers gauge\nfiberstack_fibers 4\n"));
        assert!(text.contains("fiberstack_route_stalls_total{route=\"hello\"} 0\n"));
        assert!(text
            .contains("fiberstack_http_requests_total{route=\"hello\",status_class=\"2xx\"} 1\n"));
        assert!(text.contains(
            "fiberstack_http_request_duration_seconds_bucket{route=\"hello\",le=\"0.001\"} 0\n\
             fiberstack_http_request_duration_seconds_bucket{route=\"hello\",le=\"0.0025\"} 1\n"
        ));
        assert!(text
            .contains("fiberstack_http_request_duration_seconds_count{route=\"unmatched\"} 0\n"));
        // Every sample's family was announced, once, before it.
        let mut typed = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!typed.contains(&name), "{name} typed twice");
                typed.push(name);
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = typed.last().unwrap();
                assert!(name.starts_with(family), "{name} outside {family}");
            }
        }
        // Task slots have no stacks: those families are left out, stalls still shown.
        let mut slots = handler_pool();
        slots.stacks = None;
        for r in slots.routes.values_mut() {
            r.stack = None;
        }
        let text = render("async", &slots, &http);
        assert!(text.contains("fiberstack_fibers 4\n"));
        assert!(!text.contains("_stack_"), "{text}");
        assert!(!text.contains("overflows"), "{text}");
        assert!(text.contains("fiberstack_route_stalls_total{route=\"hello\"} 0\n"));
        assert!(text.contains("fiberstack_build_info{runtime=\"async\","));
        // Stalls, where they are counted, are shown as counted.
        let mut stalled = handler_pool();
        stalled.routes.get_mut("hello").unwrap().stalls = 3;
        let text = render("fibers", &stalled, &http);
        assert!(text.contains("fiberstack_route_stalls_total{route=\"hello\"} 3\n"));
    }

    #[test]
    fn stats_json_keeps_its_keys() {
        let json = serde_json::to_value(handler_pool()).unwrap();
        for key in [
            "size",
            "busy",
            "queued",
            "completed",
            "rejected",
            "timed_out",
            "panics",
            "stalls",
            "stack_size",
            "peak_stack_bytes",
            "overflows",
            "unsafe_overflows",
        ] {
            assert!(json.get(key).is_some(), "{key}: {json}");
        }
        assert_eq!(json["aftermath"]["abandoned"], 0);
        assert_eq!(json["routes"]["hello"]["peak_stack_bytes"], 4096);
        let mut slots = handler_pool();
        slots.stacks = None;
        slots.routes.get_mut("hello").unwrap().stack = None;
        let json = serde_json::to_value(slots).unwrap();
        assert!(json.get("stack_size").is_none() && json.get("aftermath").is_none());
        assert!(json["routes"]["hello"].get("peak_stack_bytes").is_none());
    }

    #[test]
    fn label_values_and_help_are_escaped_and_numbers_spelled() {
        assert_eq!(escape("a\\b\"c\nd", true), "a\\\\b\\\"c\\nd");
        assert_eq!(escape("say \"hi\"", false), "say \"hi\"");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
    }
}
