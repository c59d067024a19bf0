//! The server's behaviour through fiber_web's public API, over a real socket: an app
//! served on port 0 and read with a plain std client. A path no route serves is a 404,
//! a method its routes lack a 405 with `Allow`; layers run in order around every
//! request, routed or refused, and may answer by themselves; a body over the limit is a
//! 413 before the handler runs; an extractor's rejection is a 400 or 415 that says
//! what was wrong; a route marked `monitoring` and `/readyz` answer, through the
//! layers, while every fiber is busy and the queue is full. Graceful drain is
//! `drain.rs`.

mod serving;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

// fiber_web's names, in one place.
use fiber_web::{config::HttpLimits, layers::Next, App, Json, Request, Response};

use serving::{exchange, options, post, request, serve};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

#[derive(serde::Serialize, serde::Deserialize)]
struct Todo {
    id: u64,
    title: String,
}

#[derive(serde::Deserialize)]
struct NewTodo {
    title: String,
}

#[derive(serde::Deserialize)]
struct Page {
    limit: Option<u32>,
}

/// The body of `r`, parsed as JSON.
fn json(r: &serving::Reply) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {r:?}"))
}

/// A todo API whose handlers count the requests that got past their extractors.
fn todos(ran: Arc<AtomicUsize>) -> App<Arc<AtomicUsize>> {
    App::new(ran)
        .get("/todos", |ran: &Arc<AtomicUsize>, req: &Request| {
            let page: Page = req.query()?;
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Response>(format!("limit {}", page.limit.unwrap_or(10)))
        })
        .post("/todos", |ran: &Arc<AtomicUsize>, req: &Request| {
            let new: NewTodo = req.json()?;
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Response>((
                201,
                Json(Todo {
                    id: 1,
                    title: new.title,
                }),
            ))
        })
        .get("/todos/{id}", |ran: &Arc<AtomicUsize>, req: &Request| {
            let id: u64 = req.param("id")?;
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Response>(Json(Todo {
                id,
                title: format!("todo {id}"),
            }))
        })
        .delete("/todos/{id}", |ran: &Arc<AtomicUsize>, _: &Request| {
            ran.fetch_add(1, Ordering::SeqCst);
            Response::no_content()
        })
        .post("/echo", |ran: &Arc<AtomicUsize>, req: &Request| {
            ran.fetch_add(1, Ordering::SeqCst);
            format!("{} bytes", req.body.len())
        })
}

#[test]
fn an_unknown_path_is_a_404_and_a_method_its_routes_lack_a_405_with_allow() {
    let ran = Arc::new(AtomicUsize::new(0));
    let serving = serve(&options(), todos(Arc::clone(&ran)));
    let addr = serving.addr();

    let r = request(addr, "GET", "/todos/7");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(json(&r), serde_json::json!({"id": 7, "title": "todo 7"}));
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    let r = request(addr, "GET", "/nothing/here");
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.body, "no route for GET /nothing/here\n");
    assert_eq!(r.header("allow"), None, "{r:?}");

    // The path exists for other methods: each refusal names them (GET brings HEAD).
    for (method, path, allow) in [
        ("PUT", "/todos", "GET, HEAD, POST"),
        ("DELETE", "/todos", "GET, HEAD, POST"),
        ("PATCH", "/todos/7", "GET, HEAD, DELETE"),
        ("POST", "/todos/7", "GET, HEAD, DELETE"),
    ] {
        let r = request(addr, method, path);
        assert_eq!(r.status, 405, "{method} {path}: {r:?}");
        assert_eq!(r.all("allow"), [allow], "{method} {path}: {r:?}");
        assert_eq!(
            r.body,
            format!("{method} is not allowed on {path}: use {allow}\n")
        );
    }
    // HEAD is served wherever GET is.
    let r = request(addr, "HEAD", "/todos/7");
    assert_eq!((r.status, r.body.as_str()), (200, ""), "{r:?}");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "no refused request ran a handler"
    );
    serving.shutdown(serving::PATIENCE);
}

#[test]
fn layers_run_in_order_around_every_request_routed_or_refused() {
    let ran = Arc::new(AtomicUsize::new(0));
    // Each layer notes itself on the request on the way in and on the response on the
    // way out; the inner one refuses `/todos/0` by itself.
    let app = todos(Arc::clone(&ran))
        .get("/seen", |_: &Arc<AtomicUsize>, req: &Request| {
            req.headers.get_all("x-seen").collect::<Vec<_>>().join(",")
        })
        .layer_fn(
            |s: &Arc<AtomicUsize>, req: &mut Request, next: Next<'_, Arc<AtomicUsize>>| {
                req.headers.push("x-seen", "outer");
                next.run(s, req).header("X-Layer", "outer")
            },
        )
        .layer_fn(
            |s: &Arc<AtomicUsize>, req: &mut Request, next: Next<'_, Arc<AtomicUsize>>| {
                req.headers.push("x-seen", "inner");
                if req.path() == "/todos/0" {
                    return Response::error(403, "todo 0 is nobody's");
                }
                next.run(s, req).header("X-Layer", "inner")
            },
        );
    let serving = serve(&options(), app);
    let addr = serving.addr();

    let r = request(addr, "GET", "/seen");
    assert_eq!((r.status, r.body.as_str()), (200, "outer,inner"), "{r:?}");
    assert_eq!(r.all("x-layer"), ["inner", "outer"], "{r:?}");
    // The router's own answers go through the layers too.
    for (method, path, status) in [("GET", "/nothing", 404), ("PUT", "/todos", 405)] {
        let r = request(addr, method, path);
        assert_eq!(r.status, status, "{r:?}");
        assert_eq!(
            r.all("x-layer"),
            ["inner", "outer"],
            "{method} {path}: {r:?}"
        );
    }
    // A layer's own answer: the handler never runs, the outer layer still sees it.
    let before = ran.load(Ordering::SeqCst);
    let r = request(addr, "GET", "/todos/0");
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.body, "todo 0 is nobody's\n");
    assert_eq!(r.all("x-layer"), ["outer"], "{r:?}");
    assert_eq!(ran.load(Ordering::SeqCst), before);
    // The built-in probe is answered before the app's layers.
    let r = request(addr, "GET", "/healthz");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.all("x-layer").is_empty(), "{r:?}");
    serving.shutdown(serving::PATIENCE);
}

#[test]
fn a_body_over_the_limit_is_a_413_before_the_handler_runs() {
    const LIMIT: usize = 64;
    let mut options = options();
    options.http = HttpLimits {
        max_body_bytes: LIMIT,
        ..HttpLimits::default()
    };
    let ran = Arc::new(AtomicUsize::new(0));
    let serving = serve(&options, todos(Arc::clone(&ran)));
    let addr = serving.addr();

    let r = post(addr, "/echo", "text/plain", &"x".repeat(LIMIT));
    assert_eq!((r.status, r.body.as_str()), (200, "64 bytes"), "{r:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    let over = |r: &serving::Reply, how: &str| {
        assert_eq!(r.status, 413, "{how}: {r:?}");
        assert!(r.body.contains("at most 64 bytes"), "{how}: {r:?}");
        assert_eq!(ran.load(Ordering::SeqCst), 1, "{how}: the handler ran");
    };
    // Announced: refused from the head.
    over(
        &post(addr, "/echo", "text/plain", &"x".repeat(LIMIT + 1)),
        "Content-Length",
    );
    // Announced, and the client waits for 100 Continue: refused without the body.
    let r = exchange(
        addr,
        format!(
            "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            LIMIT + 1
        )
        .as_bytes(),
    );
    over(&r, "Expect: 100-continue");
    // Not announced: chunks that add up past the limit.
    let chunk = "x".repeat(40);
    let r = exchange(
        addr,
        format!(
            "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
             28\r\n{chunk}\r\n28\r\n{chunk}\r\n0\r\n\r\n"
        )
        .as_bytes(),
    );
    over(&r, "chunked");
    serving.shutdown(serving::PATIENCE);
}

#[test]
fn an_extractors_rejection_says_what_was_wrong() {
    let ran = Arc::new(AtomicUsize::new(0));
    let serving = serve(&options(), todos(Arc::clone(&ran)));
    let addr = serving.addr();

    let r = request(addr, "GET", "/todos/abc");
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body, "path parameter 'id': 'abc' is not a u64\n");
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{r:?}"
    );

    let r = request(addr, "GET", "/todos?limit=lots");
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("'limit': 'lots' is not a u32"), "{r:?}");

    let r = post(addr, "/todos", "text/plain", r#"{"title":"milk"}"#);
    assert_eq!(r.status, 415, "{r:?}");
    assert!(
        r.body.contains(
            "send it with Content-Type: application/json (Content-Type 'text/plain' was sent)"
        ),
        "{r:?}"
    );

    let r = post(addr, "/todos", "application/json", r#"{"name":"milk"}"#);
    assert_eq!(r.status, 422, "{r:?}");
    assert!(
        r.body.contains("does not fit this route") && r.body.contains("field 'title' is missing"),
        "{r:?}"
    );

    let r = post(addr, "/todos", "application/json", r#"{"title":"#);
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("is not valid JSON"), "{r:?}");

    assert_eq!(ran.load(Ordering::SeqCst), 0, "a rejected request ran on");
    // What the extractors accept goes through.
    let r = post(addr, "/todos", "application/json", r#"{"title":"milk"}"#);
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(json(&r), serde_json::json!({"id": 1, "title": "milk"}));
    serving.shutdown(serving::PATIENCE);
}

#[test]
fn a_monitoring_route_and_readyz_answer_while_the_fibers_and_queue_are_full() {
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};
    let open = Arc::new(AtomicBool::new(false));
    let app = App::new(Arc::clone(&open))
        .get("/hold", |open: &Arc<AtomicBool>, _: &Request| {
            let until = Instant::now() + serving::PATIENCE;
            while !open.load(Ordering::Relaxed) && Instant::now() < until {
                fiber_pool::sleep(Duration::from_millis(5));
            }
            "held"
        })
        .get("/hello", |_: &Arc<AtomicBool>, _: &Request| "hello")
        .get("/status", |_: &Arc<AtomicBool>, _: &Request| "fine")
        .monitoring()
        .layer_fn(
            |open: &Arc<AtomicBool>, req: &mut Request, next: Next<'_, _>| {
                next.run(open, req).header("X-Layer", "ran")
            },
        )
        .readiness(|_| Ok(()));
    let opts = fiber_web::Options {
        name: "t".into(),
        fibers: 1,
        queue: 1,
        ..options()
    };
    let serving = serve(&opts, app);
    let addr = serving.addr();
    let holders: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || request(addr, "GET", "/hold").status))
        .collect();
    // The families' prefix is the process's first app name (under `cargo test`, the
    // tests share one process), so the samples are matched by their ends.
    let sample = |m: &str, family: &str| {
        m.lines()
            .find(|l| {
                !l.starts_with('#') && l.split(' ').next().is_some_and(|n| n.ends_with(family))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    let full = serving::poll(|| {
        let m = request(addr, "GET", "/metrics").body;
        sample(&m, "_fibers_busy").as_deref() == Some("1")
            && sample(&m, "_fibers_queued").as_deref() == Some("1")
    });
    assert!(full, "one request runs and one waits");
    assert_eq!(
        request(addr, "GET", "/hello").status,
        503,
        "the queue is full"
    );
    let status = request(addr, "GET", "/status");
    assert_eq!((status.status, status.body.as_str()), (200, "fine"));
    assert_eq!(
        status.header("x-layer"),
        Some("ran"),
        "through the app's layers"
    );
    assert_eq!(request(addr, "GET", "/readyz").status, 200);
    open.store(true, Ordering::Relaxed);
    for h in holders {
        assert_eq!(h.join().unwrap(), 200);
    }
    serving.shutdown(serving::PATIENCE);
}
