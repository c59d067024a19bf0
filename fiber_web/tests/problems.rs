//! The framework's own answers in the app's format, over a real socket and a real
//! MariaDB: with `Accept: application/json` every refusal and failure the framework
//! makes is `application/problem+json` (RFC 9457) carrying the request id, with the
//! field as data where one applies; without it, text with the id. A database's own
//! text reaches the log, never the client. An app's renderer replaces the default.

mod serving;

use std::time::Duration;

use fiber_mysql::{Pool, PoolConfig};
use fiber_web::config::HttpLimits;
use fiber_web::{App, Json, Problem, Request, RequestId, Response};

use serving::{exchange, options, serve};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

#[derive(serde::Deserialize, serde::Serialize)]
struct NewTodo {
    title: String,
}

/// An app with a route for each failure, over a pool of one connection.
fn app() -> App<Pool> {
    let opts = fiber_mysql::testing::test_database_opts().expect("the test database");
    let mut cfg = PoolConfig::new(opts, 1);
    cfg.wait_timeout = Duration::from_millis(100);
    let pool = Pool::new(cfg).expect("a pool");
    App::new(pool)
        .get("/things/{id}", |_: &Pool, req: &Request| {
            Ok::<_, Response>(Json(req.param::<u64>("id")?))
        })
        .post("/todos", |_: &Pool, req: &Request| {
            let new: NewTodo = req.json()?;
            Ok::<_, Response>(Json(new))
        })
        .get("/full", |db: &Pool, _: &Request| {
            let _held = db.checkout()?;
            let _second = db.checkout()?; // the pool's one connection is held: 503
            Ok::<_, Response>("unreachable")
        })
        .get("/slow", |db: &Pool, _: &Request| {
            db.checkout()?.query("select sleep(5)")?;
            Ok::<_, Response>("unreachable")
        })
        .timeout(Duration::from_millis(200))
        .get("/broken", |db: &Pool, _: &Request| {
            db.checkout()?.query("select * from no_such_table_here")?;
            Ok::<_, Response>("unreachable")
        })
        .get("/panic", |_: &Pool, _: &Request| -> &'static str {
            panic!("a handler's bug, with a secret: hunter2")
        })
        .request_ids(RequestId::default())
}

/// Each case: a name, the request's bytes around its extra headers, the status, the
/// problem's kind and the field it names.
type Case = (
    &'static str,
    String,
    u16,
    &'static str,
    Option<&'static str>,
);

fn cases(extra: &str) -> Vec<Case> {
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
    let post = |body: &str| {
        format!(
            "POST /todos HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n{extra}\r\n{body}",
            body.len()
        )
    };
    vec![
        (
            "a malformed request line",
            format!("GET /a b c\r\nHost: t\r\n{extra}\r\n"),
            400,
            "malformed-request",
            None,
        ),
        (
            "a 413",
            format!("POST /todos HTTP/1.1\r\nHost: t\r\nContent-Length: 999999\r\n{extra}\r\n"),
            413,
            "body-too-large",
            None,
        ),
        ("an unknown route", get("/nowhere"), 404, "not-found", None),
        (
            "a 405",
            format!("DELETE /todos HTTP/1.1\r\nHost: t\r\n{extra}\r\n"),
            405,
            "method-not-allowed",
            None,
        ),
        (
            "a bad path parameter",
            get("/things/abc"),
            400,
            "invalid-parameter",
            Some("id"),
        ),
        (
            "a JSON syntax error",
            post("{\"title\":"),
            400,
            "invalid-json",
            None,
        ),
        (
            "a JSON type error",
            post("{\"title\":5}"),
            422,
            "unprocessable-json",
            Some("title"),
        ),
        (
            "a full pool",
            get("/full"),
            503,
            "database-unavailable",
            None,
        ),
        ("a deadline", get("/slow"), 504, "deadline-exceeded", None),
        (
            "a handler panic",
            get("/panic"),
            500,
            "handler-failed",
            None,
        ),
        (
            "a database error",
            get("/broken"),
            500,
            "database-error",
            None,
        ),
    ]
}

fn limits() -> fiber_web::Options {
    let mut o = options();
    o.http = HttpLimits {
        max_body_bytes: 1024,
        ..HttpLimits::default()
    };
    o
}

#[test]
fn with_accept_json_every_framework_answer_is_problem_json_with_the_request_id() {
    let serving = serve(&limits(), app());
    let extra = "Accept: application/json\r\nX-Request-Id: case-7\r\nConnection: close\r\n";
    for (name, raw, status, kind, field) in cases(extra) {
        let r = exchange(serving.addr(), raw.as_bytes());
        assert_eq!(r.status, status, "{name}: {r:?}");
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{name}: {r:?}"
        );
        assert_eq!(r.header("x-request-id"), Some("case-7"), "{name}: {r:?}");
        let p: serde_json::Value =
            serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{name}: {e}: {r:?}"));
        assert_eq!(
            p["type"],
            format!("urn:fiber-web:problem:{kind}"),
            "{name}: {p}"
        );
        assert_eq!(p["status"], status, "{name}: {p}");
        assert!(
            p["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{name}: {p}"
        );
        assert!(
            p["detail"]
                .as_str()
                .is_some_and(|t| !t.is_empty() && !t.contains("  ")),
            "{name}: {p}"
        );
        assert_eq!(p["request_id"], "case-7", "{name}: {p}");
        if let Some(field) = field {
            assert_eq!(p["field"], field, "{name}: {p}");
        }
        for secret in ["no_such_table_here", "doesn't exist", "hunter2", "raise"] {
            assert!(!r.body.contains(secret), "{name} shows {secret:?}: {p}");
        }
    }
}

#[test]
fn without_accept_json_every_framework_answer_is_text_with_the_request_id() {
    let serving = serve(&limits(), app());
    for (name, raw, status, _, _) in cases("Connection: close\r\n") {
        let r = exchange(serving.addr(), raw.as_bytes());
        assert_eq!(r.status, status, "{name}: {r:?}");
        assert!(
            r.header("content-type")
                .is_some_and(|t| t.starts_with("text/plain")),
            "{name}: {r:?}"
        );
        // No id was sent: one was made, and the body and the header agree on it.
        let id = r
            .header("x-request-id")
            .unwrap_or_else(|| panic!("{name}: {r:?}"));
        assert!(
            r.body.ends_with(&format!("request id: {id}\n")),
            "{name}: {r:?}"
        );
        assert!(!r.body.contains("no_such_table_here"), "{name}: {r:?}");
    }
}

#[test]
fn the_apps_renderer_replaces_the_default_and_keeps_the_frameworks_headers() {
    let app = app().render_problems(|p: &Problem| {
        let body = serde_json::json!({
            "error": p.kind(),
            "message": p.detail(),
            "field": p.field().map(|(name, _)| name),
            "id": p.request_id(),
        });
        Response::json(p.status(), &body)
    });
    let serving = serve(&limits(), app);
    let r = exchange(
        serving.addr(),
        b"DELETE /todos HTTP/1.1\r\nHost: t\r\nX-Request-Id: r-1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
    assert_eq!(r.header("allow"), Some("POST"), "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        (v["error"].as_str(), v["id"].as_str()),
        (Some("method-not-allowed"), Some("r-1"))
    );
    let r = exchange(
        serving.addr(),
        b"GET /things/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!((r.status, v["field"].as_str()), (400, Some("id")), "{r:?}");
    // An early refusal, before any route or layer, goes through it too.
    let r = exchange(serving.addr(), b"NOT HTTP\r\n\r\n");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        (r.status, v["error"].as_str()),
        (400, Some("malformed-request")),
        "{r:?}"
    );
}
