//! The client on small stacks: how much fiber stack a call uses (plain, through DNS,
//! TLS with its handshake, TLS on a kept-alive session), measured by the pool's
//! per-label high-water marks; and an overflow at any point of a call, plain or TLS,
//! swept in small steps: each is caught, and leaves no call counted in flight, no
//! socket open beyond the idle pool, and no connection open at the upstream that the
//! pool does not hold.
//!
//! `cargo nextest run -p fiber_web --test client_stack --no-capture` prints the figures.

mod upstream;

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fiber_pool::{FiberPool, PoolConfig};
use fiber_web::client::{HttpClient, Url};
use fiber_web::config::ClientLimits;
use upstream::tls::{self, Cert};
use upstream::{on_fiber, respond, Upstream};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Most fiber stack a measured call may use, in a debug build (the tests' build) and
/// in release. A call that needs more is a regression to look at, not a reason to
/// raise these: STACK_SIZES.md sizes the server's fibers from such figures.
const PLAIN_MAX: usize = if cfg!(debug_assertions) {
    24 << 10
} else {
    8 << 10
};
const TLS_MAX: usize = if cfg!(debug_assertions) {
    64 << 10
} else {
    24 << 10
};

fn local_names(_: &str) -> std::io::Result<Vec<IpAddr>> {
    Ok(vec!["127.0.0.1".parse().unwrap()])
}

fn client(cert: &Cert) -> Arc<HttpClient> {
    Arc::new(
        HttpClient::builder(ClientLimits::default())
            .root_certificates(cert.roots())
            .lookup(local_names)
            .build(),
    )
}

#[test]
fn a_calls_stack_use_is_measured_and_bounded() {
    let cert = Cert::new(&["fiber.test"]);
    let plain = Upstream::start(|s, _| respond(s, "200 OK", "", b"{\"results\":[]}"));
    let secure = tls::start(&cert, |s, _| respond(s, "200 OK", "", b"{\"results\":[]}"));
    let (pool, http) = (upstream::fibers(), client(&cert));
    let ip = Url::parse(&plain.url("/")).unwrap();
    let named = Url::parse(&format!("http://up.test:{}/", plain.addr.port())).unwrap();
    let secure = Url::parse(&format!("https://fiber.test:{}/", secure.addr.port())).unwrap();
    let calls: [(&'static str, &Url); 5] = [
        ("http first", &ip),
        ("http kept-alive", &ip),
        ("http by name", &named),
        ("https handshake", &secure),
        ("https kept-alive", &secure),
    ];
    for (label, url) in calls {
        let (h, u) = (Arc::clone(&http), url.clone());
        let status = on_fiber(&pool, label, move || h.get(&u).map(|r| r.status));
        assert_eq!(status.unwrap(), 200, "{label}");
    }
    let stats = pool.stats();
    let mut report = String::new();
    for (label, _) in calls {
        let l = stats.per_label[label];
        assert_eq!(l.measured, 1, "{label}: {l:?}");
        report += &format!("  {label:18} {:6} bytes\n", l.peak_stack_bytes);
        let max = if label.starts_with("https") {
            TLS_MAX
        } else {
            PLAIN_MAX
        };
        assert!(
            l.peak_stack_bytes <= max,
            "{label}: {} > {max}",
            l.peak_stack_bytes
        );
    }
    eprintln!(
        "client stack ({} build), peak per call:\n{report}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}

/// Calls `url` with `left` bytes of stack left, for each `left` from `from` up in
/// 128-byte steps until four calls in a row fit; then asserts that no connection was
/// left open and no count off.
fn sweep(http: &Arc<HttpClient>, up: &Upstream, url: &Url, from: usize) -> usize {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 128 * 1024,
        spare_stacks: 4096,
        ..PoolConfig::default()
    })
    .unwrap();
    let fds = upstream::open_fds();
    let idle0 = http.stats().idle_connections as usize;
    let (mut overflows, mut fits_in_a_row, mut left) = (0, 0, from);
    while fits_in_a_row < 4 {
        let (h, u, p) = (Arc::clone(http), url.clone(), pool.clone());
        let carrier = move || {
            p.run("client", move || {
                fiber_pool::testing::with_stack_left(left, &mut || h.get(&u).map(|r| r.status))
            })
        };
        match fiber_pool::carrier::go(carrier).join().unwrap() {
            Ok(status) => {
                assert_eq!(status.unwrap(), 200, "with {left} bytes left");
                fits_in_a_row += 1;
            }
            Err(fiber_pool::RunError::StackOverflow { .. }) => {
                overflows += 1;
                fits_in_a_row = 0;
            }
            Err(e) => panic!("with {left} bytes left: {e}"),
        }
        let s = http.stats();
        assert_eq!(s.in_flight, 0, "with {left} bytes left: {s:?}");
        left += 128;
        assert!(left < 120 * 1024, "never fit");
    }
    // What is open now is what the pool holds: the upstream's side of the idle
    // connections, and our side of them (one fd each).
    let idle = http.stats().idle_connections as usize;
    assert!(
        upstream::poll(Duration::from_secs(5), || up.live.load(Ordering::SeqCst)
            == idle),
        "upstream connections {} for {idle} idle ({overflows} overflows)",
        up.live.load(Ordering::SeqCst)
    );
    // An overflow that struck with a connection in its `Lent` leaked it, and our end
    // of its socket with it (shut down, so the upstream saw it end: above): at most
    // one fd per overflow.
    assert!(
        upstream::poll(Duration::from_secs(5), || upstream::open_fds()
            <= fds + 2 * idle.saturating_sub(idle0) + 2 + overflows),
        "fds {fds} -> {} with {idle} idle",
        upstream::open_fds()
    );
    overflows
}

#[test]
fn an_overflow_anywhere_in_a_call_leaves_no_connection_open_and_no_count() {
    let cert = Cert::new(&["fiber.test"]);
    let http = client(&cert);
    // Each answer closes the connection half the time, so that calls both reuse
    // connections and open new ones.
    let plain = Upstream::start(|s, req| {
        respond(
            s,
            "200 OK",
            if req.nth % 2 == 1 {
                "Connection: close\r\n"
            } else {
                ""
            },
            b"ok",
        )
    });
    let url = Url::parse(&plain.url("/")).unwrap();
    let overflows = sweep(&http, &plain, &url, 512);
    assert!(
        overflows > 20,
        "the sweep struck at many points: {overflows}"
    );

    let secure = tls::start(&cert, |s, req| {
        respond(
            s,
            "200 OK",
            if req.nth % 2 == 1 {
                "Connection: close\r\n"
            } else {
                ""
            },
            b"ok",
        )
    });
    let url = Url::parse(&format!("https://fiber.test:{}/", secure.addr.port())).unwrap();
    let overflows = sweep(&http, &secure, &url, 512);
    assert!(
        overflows > 20,
        "the TLS sweep struck at many points: {overflows}"
    );
}
