//! What an app's answers look like on the wire, from a real server on port 0 read with
//! a plain std socket: status lines with their reason phrases, 204 and 304 with neither
//! body nor Content-Length (RFC 9110 section 8.6), HEAD with the length and no body,
//! a body over the limit refused with 413 before the handler runs, and a chunk
//! extension left open refused before it can hide a request.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fiber_web::{App, Options, Request, Response};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Send `raw` and read until the server closes.
fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(addr: SocketAddr, method: &str, path: &str) -> String {
    exchange(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

#[test]
fn status_lines_and_bodiless_statuses_go_out_as_rfc_9110_says() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let options = Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        fibers: 4,
        threads: 2,
        access_log: false,
        http: fiber_web::config::HttpLimits {
            max_body_bytes: 64,
            ..Default::default()
        },
        ..Options::default()
    };
    let serving = fiber_web::start(
        &options,
        |_| {},
        move |_| {
            Ok::<_, std::convert::Infallible>(
                App::new(())
                    .post("/todos", move |_: &(), req: &Request| {
                        counted.fetch_add(1, Ordering::Relaxed);
                        Response::text(201, format!("{} bytes", req.body.len()))
                            .header("Location", "/todos/1")
                    })
                    .delete("/todos/{id}", |_: &(), _: &Request| Response::no_content())
                    .get("/cached", |_: &(), _: &Request| {
                        Response::empty(304).header("ETag", "\"v1\"")
                    })
                    .get("/teapot", |_: &(), _: &Request| {
                        Response::text(418, "short and stout")
                    })
                    .get("/hello", |_: &(), _: &Request| "hello")
                    .get("/typo", |_: &(), _: &Request| {
                        Response::text(2001, "created?")
                    }),
            )
        },
    )
    .unwrap();
    let addr = serving.addr();

    let created = exchange(
        addr,
        b"POST /todos HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert!(created.starts_with("HTTP/1.1 201 Created\r\n"), "{created}");
    assert!(created.contains("\r\nLocation: /todos/1\r\n"), "{created}");
    assert!(created.ends_with("\r\n\r\n3 bytes"), "{created}");

    for (method, path, line) in [
        ("DELETE", "/todos/7", "HTTP/1.1 204 No Content\r\n"),
        ("GET", "/cached", "HTTP/1.1 304 Not Modified\r\n"),
    ] {
        let r = get(addr, method, path);
        assert!(r.starts_with(line), "{r}");
        assert!(
            !r.to_ascii_lowercase().contains("content-length"),
            "{method} {path}: {r}"
        );
        assert!(r.ends_with("\r\n\r\n"), "a body after the head: {r:?}");
    }
    let teapot = get(addr, "GET", "/teapot");
    assert!(teapot.starts_with("HTTP/1.1 418 \r\n"), "{teapot}");
    // A status that is no three-digit code goes out as the 500 it is, on the wire and
    // in the test client alike.
    let typo = get(addr, "GET", "/typo");
    assert!(
        typo.starts_with("HTTP/1.1 500 Internal Server Error\r\n"),
        "{typo}"
    );
    let head = get(addr, "HEAD", "/hello");
    assert!(head.contains("\r\nContent-Length: 5\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head:?}");

    // Over the body limit: refused before the handler, which never runs.
    let before = ran.load(Ordering::Relaxed);
    let big = format!(
        "POST /todos HTTP/1.1\r\nHost: t\r\nContent-Length: 65\r\n\r\n{}",
        "x".repeat(65)
    );
    let refused = exchange(addr, big.as_bytes());
    assert!(
        refused.starts_with("HTTP/1.1 413 Content Too Large\r\n"),
        "{refused}"
    );
    assert!(refused.contains("at most 64 bytes"), "{refused}");
    assert_eq!(ran.load(Ordering::Relaxed), before);

    // A chunk extension whose quoted string never closes (RFC 9112 7.1.1): a 400, and
    // what follows is read neither as body nor as a next request.
    let smuggled = exchange(
        addr,
        b"POST /todos HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          3;a=\"open\r\nabc\r\n0\r\n\r\nDELETE /todos/1 HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    assert!(
        smuggled.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{smuggled}"
    );
    assert_eq!(smuggled.matches("HTTP/1.1 ").count(), 1, "{smuggled}");
    assert!(smuggled.contains("closed quoted string"), "{smuggled}");
    assert_eq!(ran.load(Ordering::Relaxed), before);
    serving.shutdown(Duration::from_secs(5));
}

#[test]
fn default_headers_are_on_every_answer_and_pipelined_requests_are_answered_in_order() {
    let options = Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        fibers: 4,
        threads: 1,
        access_log: false,
        ..Options::default()
    };
    let serving = fiber_web::start(
        &options,
        |_: &str| {},
        move |_| {
            Ok::<_, std::convert::Infallible>(
                App::new(())
                    .default_header("Server", "wire-test")
                    .get("/n/{n}", |_: &(), req: &Request| {
                        Response::text(200, format!("n={}", req.param::<u32>("n").unwrap_or(0)))
                    })
                    .post("/echo", |_: &(), req: &Request| {
                        Response::text(200, String::from_utf8_lossy(&req.body).into_owned())
                    })
                    .get("/own", |_: &(), _: &Request| {
                        Response::text(200, "own").header("Server", "handler")
                    }),
            )
        },
    )
    .unwrap();
    let addr = serving.addr();

    // A route's answer, the router's 404, a protocol error: each names the server once.
    for (raw, status) in [
        (
            "GET /n/1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            "200",
        ),
        (
            "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            "404",
        ),
        (
            "GET /n/1 HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n",
            "400",
        ),
    ] {
        let r = exchange(addr, raw.as_bytes());
        assert!(r.starts_with(&format!("HTTP/1.1 {status} ")), "{r}");
        assert_eq!(r.matches("\r\nServer: wire-test\r\n").count(), 1, "{r}");
    }
    let own = get(addr, "GET", "/own");
    assert!(
        own.contains("\r\nServer: handler\r\n") && !own.contains("wire-test"),
        "{own}"
    );

    // Sixteen requests in one write, a body in the middle, the last closing: sixteen
    // answers in the order asked.
    let mut raw = String::new();
    for n in 0..16 {
        match n {
            7 => raw.push_str("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nbody"),
            15 => raw.push_str("GET /n/15 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
            n => raw.push_str(&format!("GET /n/{n} HTTP/1.1\r\nHost: t\r\n\r\n")),
        }
    }
    let answers = exchange(addr, raw.as_bytes());
    let bodies: Vec<&str> = answers
        .split("HTTP/1.1 200 OK\r\n")
        .skip(1)
        .map(|a| a.rsplit("\r\n\r\n").next().unwrap())
        .collect();
    let want: Vec<String> = (0..16)
        .map(|n| {
            if n == 7 {
                "body".into()
            } else {
                format!("n={n}")
            }
        })
        .collect();
    assert_eq!(bodies, want, "{answers}");
    serving.shutdown(Duration::from_secs(5));
}
