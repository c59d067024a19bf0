//! The outgoing client against real upstreams on 127.0.0.1:0, called from fibers:
//! methods, headers and JSON bodies as the upstream reads them; bodies framed by
//! Content-Length, chunks or the close; HEAD, 204 and 304 without a body; keep-alive
//! reuse per origin within its limits, idle expiry; and a kept-alive connection the
//! server closed, sent again for GET and never for POST.

mod upstream;

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_web::client::{HttpClient, Method, Url};
use fiber_web::config::ClientLimits;
use fiber_web::Error;
use upstream::{fibers, on_fiber, respond, Next, Upstream};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

fn client(limits: ClientLimits) -> Arc<HttpClient> {
    Arc::new(HttpClient::new(limits))
}

#[test]
fn methods_headers_and_json_bodies_reach_the_upstream_and_json_comes_back() {
    let up = Upstream::start(|s, req| {
        let body = format!(
            r#"{{"method":"{}","got":{}}}"#,
            req.method,
            String::from_utf8_lossy(&req.body)
        );
        respond(
            s,
            "201 Created",
            "Content-Type: application/json\r\n",
            body.as_bytes(),
        )
    });
    let (pool, http) = (fibers(), client(ClientLimits::default()));
    let url = Url::parse(&up.url("/todos?list=1")).unwrap();
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Echo {
        method: String,
        got: serde_json::Value,
    }
    let (h, u) = (Arc::clone(&http), url.clone());
    let resp = on_fiber(&pool, "client", move || {
        h.request(Method::Post, &u)
            .header("X-Request-Id", "abc-1")
            .json(&serde_json::json!({ "title": "milk" }))
            .timeout(Duration::from_secs(5))
            .send()
    })
    .unwrap();
    assert_eq!(resp.status, 201);
    assert_eq!(resp.header("Content-Type"), Some("application/json"));
    let echo: Echo = resp.json().unwrap();
    assert_eq!(echo.method, "POST");
    assert_eq!(echo.got, serde_json::json!({ "title": "milk" }));
    let seen = &up.requests()[0];
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/todos?list=1")
    );
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("content-length"), Some("16"));
    assert_eq!(seen.header("x-request-id"), Some("abc-1"));
    assert_eq!(seen.header("host"), Some(url.host.as_str()));

    // Every method goes out by its name; a raw body keeps its bytes.
    for method in [Method::Put, Method::Patch, Method::Delete, Method::Options] {
        let (h, u) = (Arc::clone(&http), url.clone());
        let resp = on_fiber(&pool, "client", move || {
            h.request(method, &u).body(&b"\x00raw"[..]).send()
        })
        .unwrap();
        assert_eq!(resp.status, 201);
        let seen = up.requests().pop().unwrap();
        assert_eq!(
            (seen.method.as_str(), &seen.body[..]),
            (method.as_str(), &b"\x00raw"[..])
        );
    }
    assert_eq!(
        up.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one kept-alive connection"
    );
}

/// A response body written in pieces that arrive apart.
fn pieces(s: &mut TcpStream, parts: &[&[u8]]) -> Next {
    for p in parts {
        if s.write_all(p).and_then(|()| s.flush()).is_err() {
            return Next::Close;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Next::KeepOpen
}

#[test]
fn length_chunked_and_close_delimited_bodies_are_read_whole() {
    let up = Upstream::start(|s, req| match req.target.as_str() {
        "/length" => pieces(
            s,
            &[
                b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello",
                b" world",
            ],
        ),
        "/chunked" => pieces(
            s,
            &[
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhel",
                b"lo\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n",
                b"\r\n",
            ],
        ),
        _ => {
            pieces(
                s,
                &[
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello",
                    b" world",
                ],
            );
            Next::Close
        }
    });
    let (pool, http) = (fibers(), client(ClientLimits::default()));
    for path in ["/length", "/chunked", "/close", "/length", "/chunked"] {
        let (h, u) = (Arc::clone(&http), Url::parse(&up.url(path)).unwrap());
        let resp = on_fiber(&pool, "client", move || h.get(&u)).unwrap();
        assert_eq!(resp.text(), "hello world", "{path}");
    }
    // Framed bodies keep the connection; the close-delimited one cannot.
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(http.stats().reused_connections, 3, "{:?}", http.stats());
}

#[test]
fn head_204_and_304_have_no_body_whatever_their_headers_say() {
    // Each announces 5 bytes and sends none: a client that waited for them would time
    // out, and one that read them would take the next response's head as a body.
    let up = Upstream::start(|s, req| {
        let status = match req.target.as_str() {
            "/204" => "204 No Content",
            "/304" => "304 Not Modified",
            _ => "200 OK",
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Length: 5\r\n\r\n");
        let _ = s.write_all(head.as_bytes());
        Next::KeepOpen
    });
    let limits = ClientLimits {
        read_timeout: Duration::from_secs(2),
        ..ClientLimits::default()
    };
    let (pool, http) = (fibers(), client(limits));
    let started = Instant::now();
    for (method, path, status) in [
        (Method::Head, "/", 200),
        (Method::Get, "/204", 204),
        (Method::Get, "/304", 304),
        (Method::Head, "/", 200),
    ] {
        let (h, u) = (Arc::clone(&http), Url::parse(&up.url(path)).unwrap());
        let resp = on_fiber(&pool, "client", move || h.request(method, &u).send()).unwrap();
        assert_eq!(
            (resp.status, resp.body.len()),
            (status, 0),
            "{method:?} {path}"
        );
        assert_eq!(resp.header("content-length"), Some("5"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn keep_alive_is_per_origin_and_bounded_and_idle_connections_expire() {
    let ok = |s: &mut TcpStream, _: &upstream::Seen| respond(s, "200 OK", "", b"ok");
    let (a, b) = (Upstream::start(ok), Upstream::start(ok));
    let limits = ClientLimits {
        max_idle_per_host: 1,
        idle_timeout: Duration::from_millis(300),
        ..ClientLimits::default()
    };
    let (pool, http) = (fibers(), client(limits));
    let call = |up: &Upstream| {
        let (h, u) = (Arc::clone(&http), Url::parse(&up.url("/")).unwrap());
        on_fiber(&pool, "client", move || h.get(&u)).unwrap()
    };
    for _ in 0..3 {
        call(&a);
        call(&b);
    }
    let conns = |up: &Upstream| up.connections.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!((conns(&a), conns(&b)), (1, 1), "one connection per origin");
    assert_eq!(http.stats().idle_connections, 2);

    // Four calls at once need four connections; one per origin stays idle after.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (pool, h, u) = (
                pool.clone(),
                Arc::clone(&http),
                Url::parse(&a.url("/")).unwrap(),
            );
            std::thread::spawn(move || {
                on_fiber(&pool, "client", move || h.get(&u).map(|r| r.status))
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().unwrap(), 200);
    }
    assert!(
        conns(&a) >= 2,
        "calls at once opened more connections: {}",
        conns(&a)
    );
    assert_eq!(
        http.stats().idle_connections,
        2,
        "at most one idle per origin"
    );

    // Past the idle timeout a connection is not reused: the next call opens one.
    let before = conns(&b);
    let idle_since = Instant::now();
    assert!(upstream::poll(Duration::from_secs(5), || idle_since
        .elapsed()
        > Duration::from_millis(350)));
    call(&b);
    assert_eq!(conns(&b), before + 1, "the expired connection was not used");
}

#[test]
fn a_kept_alive_connection_the_server_closed_is_sent_again_for_get_but_never_for_post() {
    // The first request on a connection is answered (keep-alive); the second is read,
    // then the connection is closed without an answer: a server closing an idle
    // connection just as the request arrives.
    let up = Upstream::start(|s, req| {
        if req.nth == 0 {
            respond(
                s,
                "200 OK",
                "",
                format!("answered on {}", req.connection).as_bytes(),
            )
        } else {
            Next::Close
        }
    });
    let (pool, http) = (fibers(), client(ClientLimits::default()));
    let url = Url::parse(&up.url("/")).unwrap();
    let send = |method: Method| {
        let (h, u) = (Arc::clone(&http), url.clone());
        on_fiber(&pool, "client", move || {
            h.request(method, &u).body("x").send()
        })
    };
    assert_eq!(send(Method::Get).unwrap().text(), "answered on 0");
    // GET: sent on the kept-alive connection, which closes: sent again on a new one.
    assert_eq!(send(Method::Get).unwrap().text(), "answered on 1");
    let gets = up.requests().iter().filter(|r| r.method == "GET").count();
    assert_eq!(gets, 3, "once on the stale connection, once again");
    // POST: the same happens on connection 1's second request, and it is not resent.
    let e = send(Method::Post).unwrap_err();
    assert!(
        matches!(&e, Error::BadResponse(m) if m.contains("closed before any response")),
        "{e:?}"
    );
    let posts = up.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 1, "a POST is never sent twice");
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn a_post_is_not_sent_on_a_connection_the_server_has_already_closed() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Answered, then closed by the server at once (without saying so in the response).
    let closed = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&closed);
    let up = Upstream::start(move |s, _| {
        respond(s, "200 OK", "", b"ok");
        let _ = s.shutdown(std::net::Shutdown::Both);
        counted.fetch_add(1, Ordering::SeqCst);
        Next::Close
    });
    let (pool, http) = (fibers(), client(ClientLimits::default()));
    let url = Url::parse(&up.url("/")).unwrap();
    for n in 1..=2 {
        let (h, u) = (Arc::clone(&http), url.clone());
        let resp = on_fiber(&pool, "client", move || {
            h.request(Method::Post, &u).body("x").send()
        });
        assert_eq!(resp.unwrap().status, 200, "POST {n}");
        // The server's FIN is in the client's socket once its shutdown returned
        // (loopback delivers it within the call).
        assert!(upstream::poll(Duration::from_secs(5), || closed
            .load(Ordering::SeqCst)
            == n));
    }
    assert_eq!(up.requests().len(), 2, "each POST sent once, both answered");
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    assert_eq!(http.stats().reused_connections, 0, "{:?}", http.stats());
}
