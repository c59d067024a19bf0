//! Counters of the HTTP server, cheap to bump from any coroutine and read as JSON or
//! as Prometheus metrics (`metrics.rs` renders them from a typed snapshot).
//!
//! Every counter is an atomic in a table fixed when the server starts: recording a
//! request takes no lock and allocates nothing, so it is as safe on a fiber's carrier
//! as in a tokio task, and `/metrics` reads it without stopping anyone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Upper bounds (seconds) of the request-latency histogram's buckets; the last bucket,
/// `+Inf`, is implicit. From half a millisecond (`/hello`) to ten seconds (a slow
/// `/widgets?sleep=`), about 2.5x apart, as Prometheus' own defaults are.
pub(crate) const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// [`LATENCY_BUCKETS`] in nanoseconds, rounded: a request's bucket is found by whole
/// numbers, with no conversion of its time to seconds.
const LATENCY_BUCKET_NANOS: [u64; LATENCY_BUCKETS.len()] = {
    let mut nanos = [0; LATENCY_BUCKETS.len()];
    let mut i = 0;
    while i < nanos.len() {
        nanos[i] = (LATENCY_BUCKETS[i] * 1e9 + 0.5) as u64;
        i += 1;
    }
    nanos
};

/// The route label of requests that matched no route (404, 405, `OPTIONS *`), and of
/// any label the table was not built with.
pub(crate) const UNMATCHED: &str = "unmatched";

/// Requests and connections seen by the server since it started.
#[derive(Debug)]
pub struct HttpStats {
    started: Instant,
    accepted: AtomicU64,
    /// Connections being served now (fiber runtime): opened when a connection's
    /// coroutine starts, closed when it ends.
    open: AtomicU64,
    rejected_connections: AtomicU64,
    protocol_errors: AtomicU64,
    abandoned: AtomicU64,
    cancelled: AtomicU64,
    by_class: [AtomicU64; 6],
    /// One entry per route label, [`UNMATCHED`] last; fixed once, when the app is
    /// built ([`HttpStats::set_routes`]).
    routes: OnceLock<Box<[RouteStats]>>,
    /// Where requests are counted before the routes are set: [`UNMATCHED`].
    unrouted: RouteStats,
    /// Whether each request also gets an access line (`--access-log`).
    access_log: bool,
}

/// What one route's requests did: counts by status class and a latency histogram.
#[derive(Debug)]
pub(crate) struct RouteStats {
    /// The route's label.
    pub(crate) label: &'static str,
    by_class: [AtomicU64; 6],
    /// Requests per latency bucket, NOT cumulative: index `i` counts the requests
    /// that took more than bucket `i-1` and at most bucket `i`; the last is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// Summed latency, in nanoseconds (wraps after 584 years of summed time).
    sum_nanos: AtomicU64,
}

/// A consistent-enough copy of one route's counters, for rendering.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RouteSnapshot {
    /// The route's label.
    pub(crate) label: &'static str,
    /// Requests by status class: index 1..=5 for 1xx..5xx.
    pub(crate) by_class: [u64; 6],
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`], then `+Inf` (= the count).
    pub(crate) cumulative: [u64; LATENCY_BUCKETS.len() + 1],
    /// Summed latency in seconds.
    pub(crate) sum_secs: f64,
}

impl RouteSnapshot {
    /// Requests counted in the histogram.
    pub(crate) fn count(&self) -> u64 {
        self.cumulative[LATENCY_BUCKETS.len()]
    }
}

impl RouteStats {
    fn new(label: &'static str) -> RouteStats {
        RouteStats {
            label,
            by_class: Default::default(),
            buckets: Default::default(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn record(&self, status: u16, took: Duration) {
        self.by_class[class(status)].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BUCKET_NANOS
            .iter()
            .position(|&le| nanos <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counters now. Each is read once; the histogram's count is the sum of its
    /// buckets, so buckets and count always agree, whatever runs meanwhile.
    pub(crate) fn snapshot(&self) -> RouteSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut cumulative = [0; LATENCY_BUCKETS.len() + 1];
        let mut total = 0;
        for (out, bucket) in cumulative.iter_mut().zip(&self.buckets) {
            total += get(bucket);
            *out = total;
        }
        RouteSnapshot {
            label: self.label,
            by_class: std::array::from_fn(|i| get(&self.by_class[i])),
            cumulative,
            sum_secs: get(&self.sum_nanos) as f64 / 1e9,
        }
    }
}

/// The status class of `status`: 1..=5 (anything above 5xx counts as 5xx).
fn class(status: u16) -> usize {
    usize::from(status / 100).min(5)
}

impl Default for HttpStats {
    /// No route labels yet (every request counts as `unmatched`), access log off.
    fn default() -> Self {
        HttpStats::unrouted(false)
    }
}

impl HttpStats {
    /// Counters for the routes labelled `labels` (duplicates are counted once), and
    /// whether requests get an access line.
    #[doc(hidden)]
    pub fn new(labels: impl IntoIterator<Item = &'static str>, access_log: bool) -> HttpStats {
        let stats = HttpStats::unrouted(access_log);
        stats.set_routes(labels);
        stats
    }

    /// Counters whose route table is set later, when the app is built
    /// ([`HttpStats::set_routes`]); until then every request counts as [`UNMATCHED`].
    pub(crate) fn unrouted(access_log: bool) -> HttpStats {
        HttpStats {
            started: Instant::now(),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            by_class: Default::default(),
            routes: OnceLock::new(),
            unrouted: RouteStats::new(UNMATCHED),
            access_log,
        }
    }

    /// Count requests per route from now on, for the routes labelled `labels`
    /// (duplicates counted once). The table is set once: a later call changes nothing.
    pub(crate) fn set_routes(&self, labels: impl IntoIterator<Item = &'static str>) {
        let mut table: Vec<RouteStats> = Vec::new();
        for label in labels.into_iter().chain([UNMATCHED]) {
            if !table.iter().any(|r| r.label == label) {
                table.push(RouteStats::new(label));
            }
        }
        let _ = self.routes.set(table.into_boxed_slice());
    }

    fn table(&self) -> &[RouteStats] {
        self.routes
            .get()
            .map_or(std::slice::from_ref(&self.unrouted), |t| &t[..])
    }

    /// Count a connection the accept loop took.
    #[doc(hidden)]
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }
    /// A connection is being served until the returned guard drops.
    pub(crate) fn connection_open(self: &Arc<Self>) -> OpenConnection {
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self))
    }
    /// Count a connection refused because the limit of open ones was reached.
    #[doc(hidden)]
    pub fn rejected_connection(&self) {
        self.rejected_connections.fetch_add(1, Ordering::Relaxed);
    }
    /// Count a request refused before routing (not HTTP/1.x, or over a limit).
    pub(crate) fn protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }
    /// Count a request not run because its client had gone (reset) while it waited.
    pub(crate) fn abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }
    /// Count a request whose client went away while it ran: its work was cancelled
    /// and nothing was sent.
    #[doc(hidden)]
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }
    /// Count a response by its status class (1xx..5xx).
    #[doc(hidden)]
    pub fn response(&self, status: u16) {
        self.by_class[class(status)].fetch_add(1, Ordering::Relaxed);
    }

    /// Count a request that reached the router: its route (`None`: it matched none),
    /// status and latency. A label the table does not know counts as [`UNMATCHED`].
    #[doc(hidden)]
    pub fn request(&self, route: Option<&str>, status: u16, took: Duration) {
        let label = route.unwrap_or(UNMATCHED);
        // A dozen short labels: a linear scan beats hashing, and needs no lock. The
        // router hands over the very labels the table was built with, so the address
        // finds them; text compares are for a label from elsewhere.
        let table = self.table();
        let entry = table
            .iter()
            .find(|r| std::ptr::eq(r.label, label))
            .or_else(|| table.iter().find(|r| r.label == label))
            .unwrap_or_else(|| table.last().unwrap_or(&self.unrouted));
        entry.record(status, took);
    }

    /// Every route's counters, in the order the routes were given, [`UNMATCHED`] last.
    pub(crate) fn routes(&self) -> impl Iterator<Item = RouteSnapshot> + '_ {
        self.table().iter().map(RouteStats::snapshot)
    }

    /// Whether each request gets an access line (`--access-log`).
    #[doc(hidden)]
    pub fn access_log(&self) -> bool {
        self.access_log
    }

    /// Seconds since the server started.
    pub fn uptime_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The connection and response counters now.
    pub(crate) fn connection_counts(&self) -> ConnectionCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConnectionCounts {
            accepted: get(&self.accepted),
            open: get(&self.open),
            rejected: get(&self.rejected_connections),
            protocol_errors: get(&self.protocol_errors),
            abandoned: get(&self.abandoned),
            cancelled: get(&self.cancelled),
            responses: std::array::from_fn(|i| get(&self.by_class[i])),
        }
    }

    /// The counters as `/stats` shows them.
    pub fn to_json(&self) -> serde_json::Value {
        let c = self.connection_counts();
        serde_json::json!({
            "accepted_connections": c.accepted,
            "open_connections": c.open,
            "rejected_connections": c.rejected,
            "protocol_errors": c.protocol_errors,
            "abandoned": c.abandoned,
            "cancelled": c.cancelled,
            "responses": {
                "2xx": c.responses[2],
                "3xx": c.responses[3],
                "4xx": c.responses[4],
                "5xx": c.responses[5],
            },
        })
    }
}

/// The server's connection and response counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConnectionCounts {
    /// Client connections accepted.
    pub(crate) accepted: u64,
    /// Connections being served now.
    pub(crate) open: u64,
    /// Connections answered 503 and closed: the limit was reached.
    pub(crate) rejected: u64,
    /// Requests that were not valid HTTP/1.x or broke a limit before routing.
    pub(crate) protocol_errors: u64,
    /// Requests not run because their client had gone while they waited.
    pub(crate) abandoned: u64,
    /// Requests whose client went away while they ran: cancelled, nothing sent.
    pub(crate) cancelled: u64,
    /// Responses by status class: index 1..=5 for 1xx..5xx.
    pub(crate) responses: [u64; 6],
}

/// One connection counted in `open_connections` while it lives.
#[derive(Debug)]
pub(crate) struct OpenConnection(Arc<HttpStats>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_found_by_its_text_when_not_by_its_address() {
        let stats = HttpStats::new(["hello", "widgets"], false);
        let copy = String::from("widgets");
        stats.request(Some(&copy), 200, Duration::from_millis(1));
        let widgets = stats.routes().nth(1).unwrap();
        assert_eq!(widgets.label, "widgets");
        assert_eq!(widgets.count(), 1, "a copy of the label finds its route");
    }

    #[test]
    fn the_buckets_in_nanoseconds_are_the_buckets_in_seconds() {
        for (secs, nanos) in LATENCY_BUCKETS.iter().zip(LATENCY_BUCKET_NANOS) {
            assert_eq!(Duration::from_secs_f64(*secs), Duration::from_nanos(nanos));
        }
        // A time on a bound is in its bucket, a nanosecond more in the next.
        let stats = HttpStats::new(["hello"], false);
        stats.request(Some("hello"), 200, Duration::from_micros(500));
        stats.request(Some("hello"), 200, Duration::from_nanos(500_001));
        stats.request(Some("hello"), 200, Duration::from_secs(10));
        stats.request(Some("hello"), 200, Duration::from_nanos(10_000_000_001));
        let hello = stats.routes().next().unwrap();
        let last = LATENCY_BUCKETS.len() - 1;
        assert_eq!(hello.cumulative[0], 1, "500 us is in the first bucket");
        assert_eq!(hello.cumulative[1], 2, "a nanosecond more in the second");
        assert_eq!(
            hello.cumulative[last], 3,
            "10 s is in the last bound's bucket"
        );
        assert_eq!(hello.cumulative[last + 1], 4, "and above it in +Inf");
    }

    #[test]
    fn requests_land_in_their_route_class_and_bucket() {
        let stats = HttpStats::new(["hello", "widgets", "hello"], true);
        let ms = Duration::from_millis;
        stats.request(Some("hello"), 200, Duration::from_micros(300));
        stats.request(Some("widgets"), 200, ms(60));
        stats.request(Some("widgets"), 503, ms(60));
        stats.request(None, 404, ms(0));
        stats.request(Some("not-a-route"), 200, ms(20_000));
        let routes: Vec<RouteSnapshot> = stats.routes().collect();
        let labels: Vec<&str> = routes.iter().map(|r| r.label).collect();
        assert_eq!(labels, ["hello", "widgets", UNMATCHED]);

        let hello = &routes[0];
        assert_eq!(hello.by_class[2], 1);
        assert_eq!(hello.cumulative[0], 1, "300 us is within the first bucket");
        assert_eq!(hello.count(), 1);

        let widgets = &routes[1];
        assert_eq!((widgets.by_class[2], widgets.by_class[5]), (1, 1));
        let le_50ms = LATENCY_BUCKETS.iter().position(|&b| b == 0.05).unwrap();
        assert_eq!(widgets.cumulative[le_50ms], 0, "60 ms is above 50 ms");
        assert_eq!(widgets.cumulative[le_50ms + 1], 2, "and within 100 ms");
        assert!(
            (widgets.sum_secs - 0.12).abs() < 1e-9,
            "{}",
            widgets.sum_secs
        );

        let unmatched = &routes[2];
        assert_eq!(unmatched.by_class[4], 1);
        assert_eq!(
            unmatched.by_class[2], 1,
            "an unknown label counts as unmatched"
        );
        assert_eq!(
            unmatched.cumulative[LATENCY_BUCKETS.len() - 1],
            1,
            "20 s is past 10 s"
        );
        assert_eq!(unmatched.count(), 2);
        assert!(stats.access_log());
    }
}
