//! Host names resolved at call time: on the resolver's own threads (never the fiber's
//! or a scheduler thread's), cached for the TTL (a failure for the negative TTL), one lookup
//! for every call that wants the same name at once, a moved name followed once its
//! answer expires, a lookup that hangs bounded by the DNS timeout without holding the
//! worker, and a full queue refused at once. IP-literal hosts do no lookup at all.

mod upstream;

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fiber_web::client::{phase, HttpClient, Method, Url};
use fiber_web::config::ClientLimits;
use fiber_web::Error;
use upstream::{fibers, on_fiber, respond, Upstream};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

fn ok_upstream() -> Upstream {
    Upstream::start(|s, req| {
        let body = format!(
            "{} on {}",
            req.header("host").unwrap_or("?"),
            req.connection
        );
        respond(s, "200 OK", "", body.as_bytes())
    })
}

/// A lookup that counts its calls, records the threads it ran on, and answers from
/// `table` (a name missing from it does not resolve).
#[derive(Clone, Default)]
struct Lookups {
    calls: Arc<AtomicUsize>,
    threads: Arc<Mutex<Vec<String>>>,
    table: Arc<Mutex<Vec<(String, IpAddr)>>>,
}

impl Lookups {
    fn answer(&self, name: &str, ip: &str) {
        let mut t = self.table.lock().unwrap();
        t.retain(|(n, _)| n != name);
        t.push((name.into(), ip.parse().unwrap()));
    }

    fn client(&self, limits: ClientLimits) -> Arc<HttpClient> {
        let me = self.clone();
        Arc::new(
            HttpClient::builder(limits)
                .lookup(move |name: &str| {
                    me.calls.fetch_add(1, Ordering::SeqCst);
                    let thread = std::thread::current().name().unwrap_or("").to_string();
                    me.threads.lock().unwrap().push(thread);
                    let table = me.table.lock().unwrap();
                    match table.iter().find(|(n, _)| n == name) {
                        Some((_, ip)) => Ok(vec![*ip]),
                        None => Err(io::Error::new(io::ErrorKind::NotFound, "no such name")),
                    }
                })
                .build(),
        )
    }
}

#[test]
fn names_are_looked_up_on_the_resolver_threads_cached_for_the_ttl_and_followed_when_moved() {
    let up = ok_upstream();
    let lookups = Lookups::default();
    lookups.answer("api.test", "127.0.0.1");
    let limits = ClientLimits {
        dns_ttl: Duration::from_millis(400),
        ..ClientLimits::default()
    };
    let (pool, http) = (fibers(), lookups.client(limits));
    let url = Url::parse(&format!("http://api.test:{}/", up.addr.port())).unwrap();
    // `Connection: close`: every call opens a connection, so every call resolves.
    let call = || {
        let (h, u) = (Arc::clone(&http), url.clone());
        on_fiber(&pool, "client", move || {
            h.request(Method::Get, &u)
                .header("Connection", "close")
                .send()
        })
    };
    for _ in 0..3 {
        let resp = call().unwrap();
        let host = format!("api.test:{} on", up.addr.port());
        assert!(
            resp.text().starts_with(&host),
            "the Host header keeps the name: {}",
            resp.text()
        );
    }
    assert_eq!(lookups.calls.load(Ordering::SeqCst), 1, "looked up once");
    let s = http.stats();
    assert_eq!(
        (s.dns_lookups, s.dns_cache_hits, s.connects),
        (1, 2, 3),
        "{s:?}"
    );
    assert_eq!(
        lookups.threads.lock().unwrap()[0],
        "http-client-dns",
        "not a fiber's thread"
    );

    // The name moves to 127.0.0.2 (where nothing listens on that port): the cached
    // answer is used until its TTL ends, then the new one.
    lookups.answer("api.test", "127.0.0.2");
    let moved_at = Instant::now();
    call().unwrap();
    assert!(
        moved_at.elapsed() < Duration::from_millis(400),
        "still within the TTL"
    );
    assert_eq!(lookups.calls.load(Ordering::SeqCst), 1, "a cache hit");
    assert!(upstream::poll(Duration::from_secs(5), || moved_at
        .elapsed()
        > Duration::from_millis(450)));
    let e = call().unwrap_err();
    assert!(
        matches!(&e, Error::Connect { addr, .. } if addr.ip().to_string() == "127.0.0.2"),
        "{e:?}"
    );
    assert_eq!(
        lookups.calls.load(Ordering::SeqCst),
        2,
        "looked up again after the TTL"
    );
}

#[test]
fn a_name_that_does_not_resolve_is_a_502_and_is_not_looked_up_again_at_once() {
    let lookups = Lookups::default();
    let limits = ClientLimits {
        dns_negative_ttl: Duration::from_secs(30),
        ..ClientLimits::default()
    };
    let (pool, http) = (fibers(), lookups.client(limits));
    let url = Url::parse("http://nowhere.test/").unwrap();
    for _ in 0..3 {
        let (h, u) = (Arc::clone(&http), url.clone());
        let e = on_fiber(&pool, "client", move || h.get(&u)).unwrap_err();
        assert!(
            matches!(&e, Error::Resolve { host, .. } if host == "nowhere.test"),
            "{e:?}"
        );
        assert_eq!((e.gateway_status(), e.phase()), (502, Some(phase::DNS)));
        assert!(e.to_string().contains("no such name"), "{e}");
    }
    assert_eq!(
        lookups.calls.load(Ordering::SeqCst),
        1,
        "the failure was cached"
    );
}

#[test]
fn ip_literal_hosts_do_no_lookup() {
    let up = ok_upstream();
    let lookups = Lookups::default();
    let (pool, http) = (fibers(), lookups.client(ClientLimits::default()));
    let url = Url::parse(&up.url("/")).unwrap();
    let h = Arc::clone(&http);
    on_fiber(&pool, "client", move || h.get(&url)).unwrap();
    assert_eq!(lookups.calls.load(Ordering::SeqCst), 0);
    assert_eq!(http.stats().dns_lookups, 0);
}

/// A lookup that blocks until `release` is set (a DNS server that does not answer),
/// counting the lookups that started.
fn hanging(
    release: Arc<AtomicBool>,
    started: Arc<AtomicUsize>,
) -> impl Fn(&str) -> io::Result<Vec<IpAddr>> + Send + Sync {
    move |_| {
        started.fetch_add(1, Ordering::SeqCst);
        while !release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(vec!["127.0.0.1".parse().unwrap()])
    }
}

#[test]
fn a_lookup_that_hangs_is_a_dns_timeout_and_holds_no_worker() {
    let (release, started) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let limits = ClientLimits {
        dns_timeout: Duration::from_millis(300),
        ..ClientLimits::default()
    };
    let http = Arc::new(
        HttpClient::builder(limits)
            .lookup(hanging(Arc::clone(&release), Arc::clone(&started)))
            .build(),
    );
    let pool = fibers();
    // The hung lookups end after 5 s whatever happens, so that a client that waited
    // for them on its own thread fails this test instead of hanging it.
    let releaser = {
        let release = Arc::clone(&release);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            release.store(true, Ordering::SeqCst);
        })
    };
    // Every scheduler thread has a fiber waiting for DNS, and a coroutine that only
    // needs its thread still runs meanwhile: the waits park carriers, not threads.
    let workers = may::config().get_workers().max(1);
    let waiting: Vec<_> = (0..workers * 2)
        .map(|i| {
            let (pool, h) = (pool.clone(), Arc::clone(&http));
            let url = Url::parse(&format!("http://slow{i}.test/")).unwrap();
            std::thread::spawn(move || {
                let start = Instant::now();
                let e = on_fiber(&pool, "client", move || h.get(&url)).unwrap_err();
                (e, start.elapsed())
            })
        })
        .collect();
    assert!(upstream::poll(Duration::from_secs(5), || started
        .load(Ordering::SeqCst)
        >= 1));
    let ticks = {
        let carrier = || {
            let mut n = 0;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(100) {
                fiber_pool::sleep(Duration::from_millis(1));
                n += 1;
            }
            n
        };
        fiber_pool::carrier::go(carrier).join().unwrap()
    };
    assert!(
        ticks >= 10,
        "a coroutine ran while every worker had a DNS wait: {ticks}"
    );
    for w in waiting {
        let (e, took) = w.join().unwrap();
        assert!(
            matches!(&e, Error::Timeout { phase: phase::DNS, limit } if *limit == Duration::from_millis(300)),
            "{e:?}"
        );
        assert_eq!(e.gateway_status(), 504);
        assert!(
            took < Duration::from_millis(300) + Duration::from_millis(1500),
            "{took:?}"
        );
    }
    assert_eq!(http.stats().in_flight, 0);
    release.store(true, Ordering::SeqCst);
    drop(releaser);
}

#[test]
fn one_lookup_serves_every_call_for_the_name_and_a_full_queue_is_refused() {
    let up = ok_upstream();
    let (release, started) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let limits = ClientLimits {
        dns_threads: 1,
        dns_queue: 1,
        ..ClientLimits::default()
    };
    let http = Arc::new(
        HttpClient::builder(limits)
            .lookup(hanging(Arc::clone(&release), Arc::clone(&started)))
            .build(),
    );
    let pool = fibers();
    let same: Vec<_> = (0..4)
        .map(|_| {
            let (pool, h) = (pool.clone(), Arc::clone(&http));
            let url = Url::parse(&format!("http://same.test:{}/", up.addr.port())).unwrap();
            std::thread::spawn(move || {
                on_fiber(&pool, "client", move || h.get(&url).map(|r| r.status))
            })
        })
        .collect();
    // The one thread is busy with same.test; one more name may wait for it...
    assert!(upstream::poll(Duration::from_secs(5), || started
        .load(Ordering::SeqCst)
        == 1));
    let queued = {
        let (pool, h) = (pool.clone(), Arc::clone(&http));
        let url = Url::parse(&format!("http://queued.test:{}/", up.addr.port())).unwrap();
        std::thread::spawn(move || on_fiber(&pool, "client", move || h.get(&url).map(|r| r.status)))
    };
    assert!(upstream::poll(Duration::from_secs(5), || http
        .stats()
        .dns_lookups
        == 2));
    // ... and the next is refused at once.
    let (h, url) = (
        Arc::clone(&http),
        Url::parse("http://refused.test/").unwrap(),
    );
    let e = on_fiber(&pool, "client", move || h.get(&url)).unwrap_err();
    assert!(matches!(&e, Error::Resolve { .. }), "{e:?}");
    assert!(e.to_string().contains("queue is full"), "{e}");
    release.store(true, Ordering::SeqCst);
    for s in same {
        assert_eq!(s.join().unwrap().unwrap(), 200);
    }
    assert_eq!(queued.join().unwrap().unwrap(), 200);
    assert_eq!(started.load(Ordering::SeqCst), 2, "one lookup per name");
}

#[test]
fn the_system_resolver_answers_localhost_off_the_fibers() {
    let up = ok_upstream();
    let (pool, http) = (fibers(), Arc::new(HttpClient::new(ClientLimits::default())));
    let url = Url::parse(&format!("http://localhost:{}/", up.addr.port())).unwrap();
    for _ in 0..2 {
        let (h, u) = (Arc::clone(&http), url.clone());
        let resp = on_fiber(&pool, "client", move || h.get(&u));
        // localhost may resolve to ::1 first, where the upstream (on 127.0.0.1) is not:
        // the next address is tried.
        assert_eq!(resp.unwrap().status, 200);
    }
    assert_eq!(http.stats().dns_lookups, 1, "{:?}", http.stats());
}
