//! Every limit of the server as a named field, with the defaults a user gets: the
//! HTTP server's ([`HttpLimits`]), the outgoing client's ([`ClientLimits`]), the
//! watchdog's ([`WatchdogLimits`]), and the defaults of the serve options, each named
//! once.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;
use std::time::Duration;

// The defaults a user gets, each named once: `ServeConfig::default()` and the CLI's
// flags (`--help` shows them) both read these.

/// The fiber stack size used when `--stack-size` is not given. See STACK_SIZES.md for
/// the measurements behind it.
pub const DEFAULT_STACK_SIZE: usize = 128 * 1024;
/// `--bind`: the original demo's port, on loopback only.
pub const DEFAULT_BIND: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3000));
/// `--fibers`: the original demo's 100 fibers.
pub const DEFAULT_FIBERS: usize = 100;
/// `--queue`: requests that may wait for a fiber.
pub const DEFAULT_QUEUE: usize = 1024;
/// Default `--scope-children`: most children one [`fiber_pool::scope()`] may have; a
/// fan-out past it is refused (503) rather than holding more fibers.
pub const DEFAULT_SCOPE_CHILDREN: usize = 16;
/// `--monitor-fibers`: fibers of their own for monitoring routes (`/readyz`, a route
/// marked [`monitoring`](crate::App::monitoring)), so that they answer while every
/// request fiber is busy and the queue is full.
pub const DEFAULT_MONITOR_FIBERS: usize = 2;
/// Monitoring requests that may wait for a monitoring fiber, per such fiber; more are
/// answered 503 (a prober that asks faster than its checks answer).
pub const MONITOR_QUEUE_PER_FIBER: usize = 8;
/// `--fiber-wait`: longest wait for a fiber.
pub const DEFAULT_FIBER_WAIT: Duration = Duration::from_secs(30);
/// `--max-connections`: open client connections (under `ulimit -n`, 20000 here).
pub const DEFAULT_MAX_CONNECTIONS: usize = 15_000;
/// `--stall-warn`: a job that holds its thread (running its own code, not
/// waiting in may) this long is logged and counted as a stall.
pub const DEFAULT_STALL_WARN: Duration = Duration::from_millis(100);
/// `--stall-limit`: a job that holds its thread this long makes the watchdog ask
/// for this process to be replaced.
pub const DEFAULT_STALL_LIMIT: Duration = Duration::from_secs(10);
/// `--overflow-limit`: caught stack overflows after which the watchdog asks for this
/// process to be replaced. Each abandons the heap its frames owned, never freed: 0.3
/// to 6 KiB on the built-in routes (STACK_SIZES.md), so 1000 of them leave at most a
/// few MiB behind before a fresh process gives it back.
pub const DEFAULT_OVERFLOW_LIMIT: u64 = 1000;
/// `--shutdown-grace`: time in-flight requests get after SIGTERM.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(15);
/// `--access-log`: on, as Rails and most development servers print each request; the
/// README says why, and BENCHMARKS.md what it costs.
pub const DEFAULT_ACCESS_LOG: bool = true;

/// `HttpLimits::connection_stack`: bytes of may stack per connection coroutine.
pub(crate) const CONNECTION_STACK: usize = 32 * 1024;
/// Finished coroutines may keeps, with their stacks, for the next spawn of the same
/// (default) stack size; connection coroutines are such. may's own default, 1000, is
/// made at start-up (a stack mapping each), and every stack in the cache keeps the
/// pages its last coroutine touched: after a burst of connections a server held 1000
/// of them (about 20 MiB in a debug build, 8 MiB in release) for good. 256 keeps
/// spawning cheap for the concurrency our scenarios use and bounds what stays.
pub(crate) const COROUTINE_CACHE: usize = 256;
/// `--processes`: one process, no supervisor (2 or more start a supervisor).
pub const DEFAULT_PROCESSES: usize = 1;
/// Longest a new worker process may take to accept before the supervisor kills it and
/// starts another (MariaDB connections, schema check, bind: well under a second here).
pub const DEFAULT_WORKER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// When the watchdog (`watchdog.rs`) logs a stall and when it asks for this process to
/// be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchdogLimits {
    /// A job holding its thread this long is a stall: logged, counted per route.
    pub stall_warn: Duration,
    /// A job holding its thread this long makes the watchdog ask for a
    /// replacement process.
    pub stall_limit: Duration,
    /// After this many caught stack overflows (whose abandoned frames' heap is never
    /// freed) the watchdog asks for a replacement process; 0: never.
    pub overflow_limit: u64,
}

impl Default for WatchdogLimits {
    fn default() -> Self {
        WatchdogLimits {
            stall_warn: DEFAULT_STALL_WARN,
            stall_limit: DEFAULT_STALL_LIMIT,
            overflow_limit: DEFAULT_OVERFLOW_LIMIT,
        }
    }
}

/// Limits of the HTTP/1.x server, per connection and per request.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Most request headers accepted; more is a 431.
    pub max_headers: usize,
    /// Most bytes in the request line plus headers; more is a 431.
    pub max_header_bytes: usize,
    /// Most bytes in a request body; more is a 413.
    pub max_body_bytes: usize,
    /// Time allowed for a whole request head to arrive once its first byte has (slowloris).
    pub header_timeout: Duration,
    /// Time allowed for a whole request body to arrive after its head (a body dribbled a
    /// byte at a time would otherwise hold the connection for hours); past it, a 408.
    pub body_timeout: Duration,
    /// Time an idle keep-alive connection is kept open waiting for the next request.
    pub idle_timeout: Duration,
    /// Time allowed for one write of a response to make progress.
    pub write_timeout: Duration,
    /// Most open client connections; more are answered 503 and closed.
    pub max_connections: usize,
    /// Connections the kernel queues before the accept loop takes them (may binds with
    /// 1024; Linux caps it at /proc/sys/net/core/somaxconn, 4096 on current kernels).
    pub listen_backlog: i32,
    /// may stack of each connection's coroutine (the carrier a fiber runs on; parsing
    /// and writing happen there, handlers run on the fiber's own stack, and every may
    /// call a handler makes runs here through `fiber_pool::on_carrier`). Measured with
    /// may's odd-size report (`scripts/profile-hello stack`; BENCHMARKS.md, "Where a
    /// request's time goes"): in release 3.5-3.8 KiB for `/hello`, a 404, a chunked
    /// body, `/deep`'s 500 and `/widgets`, 4.4-5.7 KiB for `/metrics`, `/stats` and a
    /// process's first request; a debug build 11-16.5 KiB
    /// (`scripts/profile-hello stack debug`), so 32 KiB keeps room. Only touched pages
    /// are resident: the size costs address space, not RSS.
    pub connection_stack: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_headers: 64,
            max_header_bytes: 16 * 1024,
            max_body_bytes: 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            write_timeout: Duration::from_secs(10),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            listen_backlog: 4096,
            connection_stack: CONNECTION_STACK,
        }
    }
}

/// Limits of the outgoing HTTP client (`fiber_web::client`; the demo's
/// `/widgets/http` and `/twitter`). Every wait of a call is bounded by its phase's limit
/// and by the call's own (`total_timeout`, or the request's timeout or deadline),
/// whichever ends first; the error names the one that did.
#[derive(Clone, Debug)]
pub struct ClientLimits {
    /// Time allowed to open a TCP connection (phase `connect`), all of a name's
    /// addresses together.
    pub connect_timeout: Duration,
    /// Time allowed for the response's first byte after the request is sent (phase
    /// `first byte`), and the longest silence between two reads after it (phases `head`
    /// and `body`).
    pub read_timeout: Duration,
    /// Time allowed for a whole call, from the DNS lookup to the last body byte (phase
    /// `total`), unless the request sets its own timeout.
    pub total_timeout: Duration,
    /// Largest response (head plus body) accepted; more is an error, not a truncation.
    pub max_response_bytes: usize,
    /// Idle keep-alive connections kept per origin (scheme, host, port).
    pub max_idle_per_host: usize,
    /// Idle keep-alive connections kept in all.
    pub max_idle_total: usize,
    /// An idle connection older than this is closed, not reused. Under the 15 s our
    /// own server keeps an idle connection (`HttpLimits::idle_timeout`), so that the
    /// client does not pick a connection the server is closing at that moment.
    pub idle_timeout: Duration,
    /// Time allowed to write the whole request, head and body (phase `send`).
    pub send_timeout: Duration,
    /// Time allowed for the whole body once the head has arrived (phase `body`).
    pub body_timeout: Duration,
    /// Time allowed for the TLS handshake, certificate checks included (phase
    /// `tls handshake`).
    pub tls_handshake_timeout: Duration,
    /// Servers whose TLS session tickets are remembered for resumption (rustls counts
    /// 8 tickets a server: the cache holds `tls_session_cache` tickets).
    pub tls_session_cache: usize,
    /// Most response headers accepted; more is a bad response.
    pub max_headers: usize,
    /// Largest response head accepted, in bytes; more is a bad response.
    pub max_head_bytes: usize,
    /// Time allowed for a host name's lookup (phase `dns`).
    pub dns_timeout: Duration,
    /// How long a name's addresses are reused before it is looked up again. The
    /// system resolver does not say a record's TTL, so this one bounds how late a
    /// moved name is followed.
    pub dns_ttl: Duration,
    /// How long a failed lookup is remembered: a name that does not resolve is not
    /// looked up by every call meanwhile.
    pub dns_negative_ttl: Duration,
    /// OS threads that run lookups (`getaddrinfo` blocks and allocates inside libc:
    /// never on a fiber or a scheduler thread). Started when first needed.
    pub dns_threads: usize,
    /// Lookups that may wait for a thread; more fail at once (a dead DNS server holds
    /// every thread for its timeout).
    pub dns_queue: usize,
    /// Host names the DNS cache holds.
    pub dns_cache_entries: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(15),
            total_timeout: Duration::from_secs(20),
            max_response_bytes: 4 * 1024 * 1024,
            max_idle_per_host: 256,
            max_idle_total: 1024,
            idle_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(15),
            tls_handshake_timeout: Duration::from_secs(5),
            tls_session_cache: 256,
            max_headers: 64,
            max_head_bytes: 64 * 1024,
            dns_timeout: Duration::from_secs(5),
            dns_ttl: Duration::from_secs(30),
            dns_negative_ttl: Duration::from_secs(2),
            dns_threads: 2,
            dns_queue: 256,
            dns_cache_entries: 1024,
        }
    }
}

/// Longest `--fiber-wait`, `--shutdown-grace` or stall limit: an hour (and the longest
/// wait an app's own flags should accept).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The cores this process may run on: the default number of scheduler threads (may's or
/// tokio's), and of the bench's wrk threads. 1 when the system cannot say.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A size in bytes as a user writes it: `65536`, `64k`, `64K`, `64KiB`, `1MiB`, `1m`.
///
/// Units are binary (k = 1024), as stack sizes always are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub usize);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        if digits.is_empty() {
            return Err(format!(
                "'{s}' is not a size: write a number of bytes, optionally with a unit, like 65536, 64k, 64KiB or 1MiB"
            ));
        }
        let n: usize = digits
            .parse()
            .map_err(|_| format!("'{s}' is too large a number"))?;
        let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            other => {
                return Err(format!(
                "unknown unit '{other}' in '{s}': use one of k, KiB, m, MiB, g, GiB (binary units)"
            ))
            }
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| format!("'{s}' is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", n >> 20)
        } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", n >> 10)
        } else {
            write!(f, "{n}B")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ByteSize;

    #[test]
    fn sizes_parse_in_every_spelling() {
        for (s, n) in [
            ("65536", 65536),
            ("64k", 65536),
            ("64K", 65536),
            ("64KiB", 65536),
            ("64kb", 65536),
            ("1MiB", 1 << 20),
            ("1m", 1 << 20),
            ("4KiB", 4096),
        ] {
            assert_eq!(s.parse::<ByteSize>(), Ok(ByteSize(n)), "{s}");
        }
    }

    #[test]
    fn bad_sizes_say_what_to_write() {
        let e = "lots".parse::<ByteSize>().unwrap_err();
        assert!(e.contains("64KiB"), "{e}");
        let e = "64 parsecs".parse::<ByteSize>().unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
        assert!("99999999999999999999G".parse::<ByteSize>().is_err());
    }

    #[test]
    fn sizes_display_in_the_largest_whole_unit() {
        assert_eq!(ByteSize(65536).to_string(), "64KiB");
        assert_eq!(ByteSize(1 << 20).to_string(), "1MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
    }
}
