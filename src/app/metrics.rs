//! `GET /metrics`: the server's counters in Prometheus' text exposition format 0.0.4,
//! for both runtimes from one renderer.
//!
//! Everything comes from what `/stats` shows (the same snapshot, so the two always
//! agree) plus the per-route request counters and latency histograms of
//! [`HttpStats`], and a few lines of /proc for the process. Names follow Prometheus'
//! conventions: the `fiberstack_` prefix, base units (`_seconds`, `_bytes`), `_total`
//! on counters, HELP and TYPE for every family; the process families use the
//! standard `process_` names every Prometheus dashboard knows.
//!
//! On fibers this handler runs on the connection's coroutine, not on a fiber
//! ([`crate::app::CARRIER_ROUTES`]): reading the pools' per-route tables takes std
//! locks, which a fiber must not hold, and monitoring must answer while every fiber
//! is busy. The twin serves it outside its task-slot limit for the same reason.
//!
//! The format is the only one served: a scraper that asks for another (protobuf,
//! OpenMetrics) in `Accept` still gets text 0.0.4, which every Prometheus reads.

use std::fmt::Write;

use serde_json::Value;

use crate::app::AppState;
use fiber_web::counters::{HttpStats, LATENCY_BUCKETS};
use fiber_web::http::{Request, Response};

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` on fibers (on the carrier: see the module's header).
pub fn metrics(state: &AppState, _req: &Request) -> Response {
    let snapshot = crate::app::stats::snapshot(state);
    response(render("fibers", &snapshot, &state.http_stats))
}

/// A 200 with the rendered `text`.
pub fn response(text: String) -> Response {
    Response {
        status: 200,
        headers: vec![("Content-Type", CONTENT_TYPE.into())].into(),
        body: text.into_bytes().into(),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
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

/// One number of the `/stats` snapshot as a metric without labels. Families whose
/// number a runtime does not keep (the twin has no fiber stacks) are left out there.
struct Scalar {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// Where in the snapshot; the first step `fibers` is `tasks` on the twin.
    path: &'static [&'static str],
    /// Multiplies the value: milliseconds to seconds.
    scale: f64,
}

const fn scalar(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    path: &'static [&'static str],
) -> Scalar {
    Scalar {
        name,
        kind,
        help,
        path,
        scale: 1.0,
    }
}

use Kind::{Counter, Gauge};

const SCALARS: &[Scalar] = &[
    scalar(
        "fiberstack_uptime_seconds",
        Gauge,
        "Seconds since the server started.",
        &["uptime_secs"],
    ),
    scalar(
        "fiberstack_fibers",
        Gauge,
        "Fibers in the pool, --fibers (the async runtime: task slots).",
        &["fibers", "size"],
    ),
    scalar(
        "fiberstack_fibers_busy",
        Gauge,
        "Fibers running a handler now.",
        &["fibers", "busy"],
    ),
    scalar(
        "fiberstack_fibers_queued",
        Gauge,
        "Requests waiting for a fiber now.",
        &["fibers", "queued"],
    ),
    scalar(
        "fiberstack_fibers_completed_total",
        Counter,
        "Handlers that ran to their end on a fiber.",
        &["fibers", "completed"],
    ),
    scalar(
        "fiberstack_fibers_rejected_total",
        Counter,
        "Requests refused with a 503 because --queue requests already waited.",
        &["fibers", "rejected"],
    ),
    scalar(
        "fiberstack_fibers_timed_out_total",
        Counter,
        "Requests that waited --fiber-wait for a fiber and got a 503.",
        &["fibers", "timed_out"],
    ),
    scalar(
        "fiberstack_fiber_stack_size_bytes",
        Gauge,
        "Usable stack of each fiber, --stack-size (page-rounded).",
        &["fibers", "stack_size"],
    ),
    scalar(
        "fiberstack_fiber_stack_peak_bytes",
        Gauge,
        "The most stack a measured handler used, over all routes.",
        &["fibers", "peak_stack_bytes"],
    ),
    scalar(
        "fiberstack_db_pool_connections",
        Gauge,
        "MySQL connections in the pool, --db-pool.",
        &["db", "size"],
    ),
    scalar(
        "fiberstack_db_pool_in_use",
        Gauge,
        "MySQL connections checked out now.",
        &["db", "in_use"],
    ),
    scalar(
        "fiberstack_db_pool_idle",
        Gauge,
        "MySQL connections open and idle in the pool now.",
        &["db", "idle"],
    ),
    scalar(
        "fiberstack_db_pool_waiting",
        Gauge,
        "Handlers waiting for a MySQL connection now.",
        &["db", "waiting"],
    ),
    scalar(
        "fiberstack_db_pool_waits_total",
        Counter,
        "Checkouts that had to wait for a MySQL connection.",
        &["db", "total_waits"],
    ),
    Scalar {
        scale: 0.001,
        ..scalar(
            "fiberstack_db_pool_wait_seconds_total",
            Counter,
            "Seconds checkouts spent waiting for a MySQL connection.",
            &["db", "total_wait_ms"],
        )
    },
    scalar(
        "fiberstack_db_pool_replaced_total",
        Counter,
        "MySQL connections closed after an error and replaced.",
        &["db", "replaced"],
    ),
    scalar(
        "fiberstack_http_client_requests_total",
        Counter,
        "Requests the outgoing HTTP client sent (/widgets/http, /twitter).",
        &["http_client", "requests"],
    ),
    scalar(
        "fiberstack_http_client_errors_total",
        Counter,
        "Outgoing requests that failed (connect, timeout, bad response).",
        &["http_client", "errors"],
    ),
    scalar(
        "fiberstack_http_client_in_flight",
        Gauge,
        "Outgoing requests in flight now.",
        &["http_client", "in_flight"],
    ),
    scalar(
        "fiberstack_http_client_connects_total",
        Counter,
        "TCP connections the outgoing HTTP client opened.",
        &["http_client", "connects"],
    ),
    scalar(
        "fiberstack_http_client_reused_connections_total",
        Counter,
        "Outgoing requests sent on a kept-alive connection.",
        &["http_client", "reused_connections"],
    ),
    scalar(
        "fiberstack_http_client_idle_connections",
        Gauge,
        "Kept-alive outgoing connections idle now.",
        &["http_client", "idle_connections"],
    ),
    scalar(
        "fiberstack_http_connections_accepted_total",
        Counter,
        "Client connections accepted.",
        &["http_server", "accepted_connections"],
    ),
    scalar(
        "fiberstack_http_connections_rejected_total",
        Counter,
        "Client connections answered 503 and closed: --max-connections were open.",
        &["http_server", "rejected_connections"],
    ),
    scalar(
        "fiberstack_http_protocol_errors_total",
        Counter,
        "Requests that were not valid HTTP/1.x or broke a limit before routing.",
        &["http_server", "protocol_errors"],
    ),
];

/// One per-route number of the fiber pool (or the twin's task limit), by its key in
/// each route's entry of the snapshot.
struct PerRoute {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    key: &'static str,
    /// Rendered as 0 for every route when no route has the key (else left out).
    always: bool,
}

const PER_ROUTE: &[PerRoute] = &[
    PerRoute {
        name: "fiberstack_route_runs_total",
        kind: Counter,
        help: "Handlers of the route that got a fiber (or a task slot).",
        key: "runs",
        always: false,
    },
    PerRoute {
        name: "fiberstack_route_overflows_total",
        kind: Counter,
        help: "Handlers of the route that overflowed their fiber stack (answered 500).",
        key: "overflows",
        always: false,
    },
    PerRoute {
        name: "fiberstack_route_unsafe_overflows_total",
        kind: Counter,
        help: "Of the route's overflows, those that struck outside a safe point.",
        key: "unsafe_overflows",
        always: false,
    },
    PerRoute {
        name: "fiberstack_route_stalls_total",
        kind: Counter,
        help: "Handlers of the route that stalled their worker thread (0 where the server does not count stalls).",
        key: "stalls",
        always: true,
    },
    PerRoute {
        name: "fiberstack_route_panics_total",
        kind: Counter,
        help: "Handlers of the route that panicked (answered 500).",
        key: "panics",
        always: false,
    },
    PerRoute {
        name: "fiberstack_route_stack_peak_bytes",
        kind: Gauge,
        help: "The most fiber stack a measured handler of the route used.",
        key: "peak_stack_bytes",
        always: false,
    },
    PerRoute {
        name: "fiberstack_route_stack_measured_total",
        kind: Counter,
        help: "Handlers of the route whose stack use was measured (every 64th run).",
        key: "measured",
        always: false,
    },
];

/// Status classes rendered for every route (a final response is never 1xx).
const CLASSES: [(usize, &str); 4] = [(2, "2xx"), (3, "3xx"), (4, "4xx"), (5, "5xx")];

/// The whole exposition: `runtime` (`fibers` or `async`), the `/stats` snapshot
/// of that runtime, and its request counters.
pub fn render(runtime: &str, snapshot: &Value, http: &HttpStats) -> String {
    let mut out = Out(String::with_capacity(32 * 1024));
    out.family(
        "fiberstack_build_info",
        Gauge,
        "Always 1; the labels say which runtime serves and which version.",
    );
    out.sample(
        "fiberstack_build_info",
        &[("runtime", runtime), ("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    for s in SCALARS {
        if let Some(v) = lookup(snapshot, s.path) {
            out.family(s.name, s.kind, s.help);
            out.sample(s.name, &[], v * s.scale);
        }
    }
    render_pool_routes(&mut out, snapshot);
    render_requests(&mut out, snapshot, http);
    render_process(&mut out);
    out.0
}

/// The number at `path`, with `fibers` read as `tasks` on the twin.
fn lookup(snapshot: &Value, path: &[&str]) -> Option<f64> {
    let (first, rest) = path.split_first()?;
    let mut at = section(snapshot, first)?;
    for step in rest {
        at = at.get(step)?;
    }
    at.as_f64()
}

fn section<'a>(snapshot: &'a Value, name: &str) -> Option<&'a Value> {
    match snapshot.get(name) {
        Some(v) => Some(v),
        None if name == "fibers" => snapshot.get("tasks"),
        None => None,
    }
}

/// Runs, overflows, stalls, panics and stack peaks per route.
fn render_pool_routes(out: &mut Out, snapshot: &Value) {
    let empty = serde_json::Map::new();
    let routes = section(snapshot, "fibers")
        .and_then(|f| f.get("routes"))
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for family in PER_ROUTE {
        let kept = routes.values().any(|r| r.get(family.key).is_some());
        if !kept && !family.always {
            continue;
        }
        out.family(family.name, family.kind, family.help);
        for (label, counts) in routes {
            let v = counts
                .get(family.key)
                .and_then(Value::as_f64)
                .unwrap_or(0.0);
            out.sample(family.name, &[("route", label)], v);
        }
    }
}

/// Requests per route and status class, the latency histograms, responses by class.
fn render_requests(out: &mut Out, snapshot: &Value, http: &HttpStats) {
    let routes: Vec<_> = http.routes().collect();
    let name = "fiberstack_http_requests_total";
    out.family(
        name,
        Counter,
        "Requests that reached the router, by route label (unmatched: no route) and status class.",
    );
    for r in &routes {
        for (class, text) in CLASSES {
            let labels = [("route", r.label), ("status_class", text)];
            out.sample(name, &labels, r.by_class[class] as f64);
        }
    }

    let name = "fiberstack_http_request_duration_seconds";
    out.family_typed(
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
            out.sample(&bucket, &[("route", r.label), ("le", &le)], *count as f64);
        }
        out.sample(&format!("{name}_sum"), &[("route", r.label)], r.sum_secs);
        out.sample(
            &format!("{name}_count"),
            &[("route", r.label)],
            r.count() as f64,
        );
    }

    let name = "fiberstack_http_responses_total";
    out.family(
        name,
        Counter,
        "Responses sent, by status class, refusals before routing included.",
    );
    for (_, text) in CLASSES {
        if let Some(v) = lookup(snapshot, &["http_server", "responses", text]) {
            out.sample(name, &[("status_class", text)], v);
        }
    }
}

/// Resident memory, open and allowed file descriptors, from /proc (Linux).
fn render_process(out: &mut Out) {
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
            out.family(name, Gauge, help);
            out.sample(name, &[], v);
        }
    }
}

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

/// The text being written.
struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.family_typed(name, kind.name(), help);
    }

    fn family_typed(&mut self, name: &str, kind: &str, help: &str) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.0, "# HELP {name} {}", escape(help, false));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{label}=\"{}\"", escape(v, true));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {}", number(value));
    }
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

    fn sample_snapshot() -> Value {
        serde_json::json!({
            "uptime_secs": 1.5,
            "fibers": {"size": 4, "busy": 1, "queued": 0, "completed": 9, "rejected": 0,
                       "timed_out": 0, "stack_size": 131072, "peak_stack_bytes": 4096,
                       "routes": {"hello": {"runs": 9, "overflows": 0, "panics": 0,
                                            "measured": 1, "peak_stack_bytes": 4096}}},
            "db": {"size": 2, "in_use": 0, "idle": 2, "waiting": 0, "total_waits": 3,
                   "total_wait_ms": 1500.0},
            "http_client": {"requests": 0, "errors": 0, "in_flight": 0},
            "http_server": {"accepted_connections": 9, "rejected_connections": 0,
                            "protocol_errors": 0,
                            "responses": {"2xx": 9, "3xx": 0, "4xx": 0, "5xx": 0}},
        })
    }

    #[test]
    fn families_have_help_and_type_and_values_their_units() {
        let http = HttpStats::new(["hello"], false);
        http.request(Some("hello"), 200, Duration::from_millis(2));
        let text = render("fibers", &sample_snapshot(), &http);
        assert!(text.contains("# TYPE fiberstack_fibers gauge\nfiberstack_fibers 4\n"));
        assert!(
            text.contains("fiberstack_db_pool_wait_seconds_total 1.5\n"),
            "{text}"
        );
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
        // The twin has no stacks: those families are left out, stalls still shown.
        let mut twin = sample_snapshot();
        let tasks = twin.as_object_mut().unwrap().remove("fibers").unwrap();
        twin["tasks"] = serde_json::json!({"size": tasks["size"], "routes":
            {"hello": {"runs": 2, "panics": 0}}});
        let text = render("async", &twin, &http);
        assert!(text.contains("fiberstack_fibers 4\n"));
        assert!(!text.contains("stack_peak"), "{text}");
        assert!(text.contains("fiberstack_route_stalls_total{route=\"hello\"} 0\n"));
        assert!(text.contains("fiberstack_build_info{runtime=\"async\","));
        // Stalls, where the snapshot counts them, are shown as counted.
        let mut counted = sample_snapshot();
        counted["fibers"]["routes"]["hello"]["stalls"] = 3.into();
        let text = render("fibers", &counted, &http);
        assert!(text.contains("fiberstack_route_stalls_total{route=\"hello\"} 3\n"));
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
