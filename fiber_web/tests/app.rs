//! The app API through the test client (the same router, limits, layers and fibers the
//! server runs, without a socket): routes and their parameters, typed bodies and
//! queries, what handlers may return, layers, and the built-in routes. The wire itself
//! (status lines, 204 without Content-Length) is `tests/wire.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fiber_web::layers::Next;
use fiber_web::layers::{BearerAuth, Cors};
use fiber_web::RequestId;
use fiber_web::{App, Error, Json, Request, Response, Routes};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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

fn show(_: &(), req: &Request) -> Result<Json<Todo>, Response> {
    let id: u64 = req.param("id")?;
    Ok(Json(Todo {
        id,
        title: format!("todo {id}"),
    }))
}

fn create(_: &(), req: &Request) -> Result<(u16, Json<Todo>), Response> {
    let new: NewTodo = req.json()?;
    Ok((
        201,
        Json(Todo {
            id: 1,
            title: new.title,
        }),
    ))
}

fn list(_: &(), req: &Request) -> Result<String, Response> {
    let page: Page = req.query()?;
    Ok(format!("limit {}", page.limit.unwrap_or(10)))
}

fn todos() -> App<()> {
    App::new(())
        .get("/todos", list)
        .post("/todos", create)
        .get("/todos/{id}", show)
        .delete("/todos/{id}", |_: &(), _: &Request| Response::no_content())
        .get("/files/{*path}", |_: &(), req: &Request| {
            req.param::<String>("path").map(|p| format!("file {p}"))
        })
}

#[test]
fn routes_take_parameters_methods_and_typed_bodies() {
    let c = todos().test_client();
    let r = c.get("/todos/42").send();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json::<Todo>(),
        Todo {
            id: 42,
            title: "todo 42".into()
        }
    );
    let r = c.get("/todos/abc").send();
    assert_eq!(r.status, 400);
    assert_eq!(r.text(), "path parameter 'id': 'abc' is not a u64\n");
    assert_eq!(c.get("/files/a/b.txt").send().text(), "file a/b.txt");
    assert_eq!(c.get("/todos?limit=3").send().text(), "limit 3");
    let r = c.get("/todos?limit=lots").send();
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("'limit': 'lots' is not a u32"),
        "{}",
        r.text()
    );

    let r = c
        .post("/todos")
        .json(&serde_json::json!({"title": "milk"}))
        .send();
    assert_eq!(r.status, 201);
    assert_eq!(r.json::<Todo>().title, "milk");
    let r = c
        .post("/todos")
        .header("Content-Type", "text/plain")
        .body("milk")
        .send();
    assert_eq!(r.status, 415, "{}", r.text());
    let r = c
        .post("/todos")
        .header("Content-Type", "application/json")
        .body("{\"title\":")
        .send();
    assert_eq!(r.status, 400);
    let r = c
        .post("/todos")
        .json(&serde_json::json!({"name": "x"}))
        .send();
    assert_eq!(r.status, 422);
    assert!(
        r.text().contains("field 'title' is missing"),
        "{}",
        r.text()
    );

    let r = c.delete("/todos/1").send();
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    let r = c.request("PUT", "/todos/1").send();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, DELETE"));
    assert_eq!(c.get("/nothing/here").send().status, 404);
    let head = c.head("/todos/7").send();
    assert_eq!((head.status, head.body.len()), (200, 0));
}

#[test]
fn closures_capture_their_configuration_and_routes_nest() {
    let greeting = String::from("hej");
    let sub = Routes::new()
        .get("/", |_: &(), _: &Request| "tweets")
        .get("/{id}", |_: &(), req: &Request| {
            req.param::<u32>("id").map(|id| format!("tweet {id}"))
        });
    let c = App::new(())
        .get("/hello", move |_: &(), _: &Request| greeting.clone())
        .nest("/twitter", sub)
        .test_client();
    assert_eq!(c.get("/hello").send().text(), "hej");
    assert_eq!(c.get("/twitter").send().text(), "tweets");
    assert_eq!(c.get("/twitter/5").send().text(), "tweet 5");
}

#[test]
fn bad_patterns_and_clashing_routes_are_refused_when_the_app_is_built() {
    let app = App::new(())
        .get("/todos/{id}", show)
        .get("/todos/{key}", show)
        .get("/todos/{id", show);
    let Err(Error::Routes(errors)) = app.check() else {
        panic!("the routes were accepted");
    };
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors.iter().all(|e| matches!(e, Error::Route { .. })),
        "{errors:?}"
    );
    let text = Error::Routes(errors).to_string();
    assert!(text.contains("'/todos/{id'"), "{text}");
    assert!(
        text.contains("GET /todos/{id} and GET /todos/{key} match the same paths"),
        "{text}"
    );
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        App::new(()).get("todos", show).test_client();
    }));
    let said = built.unwrap_err();
    let said = said.downcast_ref::<String>().unwrap();
    assert!(
        said.contains("'todos'") && said.contains("starts with '/'"),
        "{said}"
    );
}

/// A layer that notes where it ran, before and after the rest.
struct Trace(&'static str, Arc<std::sync::Mutex<Vec<String>>>);

impl<S> fiber_web::layers::Layer<S> for Trace {
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
        self.1.lock().unwrap().push(format!("{} in", self.0));
        let resp = next.run(state, req);
        self.1.lock().unwrap().push(format!("{} out", self.0));
        resp
    }
}

#[test]
fn layers_run_in_order_on_every_request_and_may_answer_themselves() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let c = todos()
        .layer(Trace("a", Arc::clone(&seen)))
        .layer(Trace("b", Arc::clone(&seen)))
        .layer_fn(|state, req, next| {
            if req.header("x-block").is_some() {
                return Response::error(403, "blocked by a layer");
            }
            next.run(state, req)
        })
        .test_client();
    assert_eq!(c.get("/todos/1").send().status, 200);
    assert_eq!(*seen.lock().unwrap(), ["a in", "b in", "b out", "a out"]);
    seen.lock().unwrap().clear();
    // An unknown path goes through the layers too: its 404 comes out of them.
    assert_eq!(c.get("/nope").send().status, 404);
    assert_eq!(seen.lock().unwrap().len(), 4);
    // A layer's own answer is counted like any other.
    let r = c.get("/todos/1").header("X-Block", "1").send();
    assert_eq!(r.status, 403);
    let metrics = c.get("/metrics").send().text();
    let app = fiber_web::Options::default().name;
    let counted = format!(
        "{app}_http_requests_total{{route=\"GET /todos/{{id}}\",status_class=\"4xx\"}} 1\n"
    );
    assert!(metrics.contains(&counted), "{metrics}");
}

#[test]
fn a_layers_overflow_or_panic_is_a_500_and_the_app_goes_on() {
    fn deep(n: u64) -> u64 {
        let pad = std::hint::black_box([n as u8; 512]);
        if n == 0 {
            0
        } else {
            deep(n - 1) + u64::from(pad[511])
        }
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let c = App::new(())
        .get("/hello", |_: &(), _: &Request| "hello")
        .layer_fn(move |state, req, next| {
            counted.fetch_add(1, Ordering::Relaxed);
            match req.query_param("trouble").as_deref() {
                Some("overflow") => Response::text(200, deep(1_000_000).to_string()),
                Some("panic") => panic!("a layer's bug"),
                _ => next.run(state, req),
            }
        })
        .test_client();
    let r = c.get("/hello?trouble=overflow").send();
    assert_eq!(r.status, 500);
    assert!(r.text().contains("fiber stack overflow"), "{}", r.text());
    let r = c.get("/hello?trouble=panic").send();
    assert_eq!(r.status, 500);
    // A panic's message is the operator's (the 5xx log line), not the client's.
    assert!(r.text().contains("could not be handled"), "{}", r.text());
    assert!(!r.text().contains("a layer's bug"), "{}", r.text());
    assert_eq!(c.get("/hello").send().text(), "hello");
    assert_eq!(runs.load(Ordering::Relaxed), 3);
}

#[test]
fn the_shipped_layers_do_what_they_say() {
    let c = todos()
        .layer(Cors::allow_origins(["https://app.example"]))
        .request_ids(RequestId::default())
        .layer(BearerAuth::new(["s3cret"]))
        .test_client();
    // A preflight from an allowed origin is answered before the token check.
    let r = c
        .request("OPTIONS", "/todos")
        .header("Origin", "https://app.example")
        .header("Access-Control-Request-Method", "POST")
        .send();
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    // No token: 401, with the request id and the CORS headers still on it.
    let r = c
        .get("/todos/1")
        .header("Origin", "https://app.example")
        .send();
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"api\""));
    assert!(r.header("x-request-id").is_some_and(|id| !id.is_empty()));
    assert_eq!(r.header("vary"), Some("Origin"));
    let wrong = c
        .get("/todos/1")
        .header("Authorization", "Bearer guess")
        .send();
    assert_eq!(wrong.status, 401);
    assert!(wrong
        .header("www-authenticate")
        .unwrap()
        .contains("invalid_token"));
    // With the token: served; a sent id is kept, a hostile one replaced.
    let ok = c
        .get("/todos/1")
        .header("Authorization", "Bearer s3cret")
        .header("X-Request-Id", "abc-123")
        .send();
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("x-request-id"), Some("abc-123"));
    assert!(
        ok.header("access-control-allow-origin").is_none(),
        "no Origin sent"
    );
    let ids: Vec<String> = (0..2)
        .map(|_| {
            c.get("/todos/1")
                .header("Authorization", "Bearer s3cret")
                .header("X-Request-Id", "two words")
                .send()
                .header("x-request-id")
                .unwrap()
                .to_string()
        })
        .collect();
    assert_ne!(ids[0], "two words");
    assert_ne!(ids[0], ids[1], "made ids are unique");
    // An origin not allowed gets its answer without CORS headers.
    let r = c
        .get("/todos/1")
        .header("Authorization", "Bearer s3cret")
        .header("Origin", "https://evil.example")
        .send();
    assert_eq!(r.status, 200);
    assert!(r.header("access-control-allow-origin").is_none());
}

#[test]
fn the_built_in_routes_answer_without_the_apps_layers() {
    let ready = Arc::new(AtomicUsize::new(1));
    let flag = Arc::clone(&ready);
    let c = todos()
        .layer(BearerAuth::new(["s3cret"]))
        .readiness(move |_| {
            if flag.load(Ordering::Relaxed) == 1 {
                Ok(())
            } else {
                Err("the database is away".into())
            }
        })
        .metrics(|_, out| {
            out.single(
                "todos_total",
                fiber_web::metrics::Kind::Gauge,
                "Todos.",
                3.0,
            )
        })
        .test_client();
    assert_eq!(c.get("/healthz").send().text(), "ok");
    assert_eq!(c.get("/readyz").send().text(), "ready");
    ready.store(0, Ordering::Relaxed);
    let r = c.get("/readyz").send();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.text().contains("not ready"), "{}", r.text());
    assert!(
        !r.text().contains("away"),
        "the check's reason is the log's: {}",
        r.text()
    );
    let m = c.get("/metrics").send();
    assert_eq!(m.status, 200);
    let text = m.text();
    assert!(text.contains("\ntodos_total 3\n"), "{text}");
    // The framework's families are named after the app: this test binary, unserved.
    let app = fiber_web::Options::default().name;
    assert!(text.contains(&format!("\n{app}_fibers 100\n")), "{text}");
    assert!(
        text.contains(&format!(
            "{app}_http_requests_total{{route=\"readyz\",status_class=\"5xx\"}} 1"
        )),
        "{text}"
    );
    // An app's own /healthz wins over the built-in one.
    let c = App::new(())
        .get("/healthz", |_: &(), _: &Request| "mine")
        .test_client();
    assert_eq!(c.get("/healthz").send().text(), "mine");
}

#[test]
fn tools_find_the_handler_a_request_reaches() {
    let app = todos().readiness(|_| Err("not yet".into()));
    let mut req = Request::get("/todos/9");
    let (label, handler) = app.handler_for(&mut req).unwrap();
    assert_eq!(label, "GET /todos/{id}");
    assert_eq!(handler.call(&(), &req).status, 200);
    let mut req = Request::get("/readyz");
    let (label, handler) = app.handler_for(&mut req).unwrap();
    assert_eq!(label, fiber_web::metrics::READYZ);
    assert_eq!(handler.call(&(), &req).status, 503);
    assert!(app.handler_for(&mut Request::get("/nope")).is_none());
}

#[test]
fn a_status_that_is_no_code_is_a_500_in_the_test_client_as_on_the_wire() {
    let c = App::new(())
        .get("/typo", |_: &(), _: &Request| {
            Response::text(2001, "created?")
        })
        .get("/teapot", |_: &(), _: &Request| {
            Response::text(418, "short")
        })
        .test_client();
    assert_eq!(c.get("/typo").send().status, 500);
    assert_eq!(c.get("/teapot").send().status, 418);
}

/// The `X-Layer` values of `r`, in the order set.
fn layers(r: &fiber_web::test::TestResponse) -> Vec<&str> {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-layer"))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Who a request is from, as an auth layer found it.
#[derive(Debug)]
struct User(&'static str);

/// A layer that names itself on the way out, so a response shows the order it met
/// the layers in.
fn tag(name: &'static str) -> impl Fn(&(), &mut Request, Next<'_, ()>) -> Response {
    move |s, req, next| next.run(s, req).header("X-Layer", name)
}

#[test]
fn route_and_group_layers_run_inside_the_apps_in_order_and_only_where_put() {
    let admin = Routes::new()
        .get("/users", |_: &(), req: &Request| {
            // What the group's auth layer found, passed as a typed extension.
            match req.extensions().get::<User>() {
                Some(User(name)) => format!("users, for {name}"),
                None => "nobody".to_string(),
            }
        })
        .get("/boom", |_: &(), _: &Request| "unreachable")
        .route_layer(|_: &(), req: &mut Request, _: Next<'_, ()>| -> Response {
            if req.query_param("trouble").is_some() {
                panic!("a route layer's bug");
            }
            Response::text(418, "the route's own layer answered")
        })
        .layer_fn(tag("group"))
        .layer_fn(|s, req, next| match req.header("authorization") {
            Some("Bearer admin") => {
                req.extensions_mut().insert(User("ada"));
                next.run(s, req)
            }
            _ => Response::text(401, "admins only"),
        });
    let c = App::new(())
        .get("/open", |_: &(), req: &Request| {
            format!("open, extensions: {}", req.extensions().len())
        })
        .get("/tagged", |_: &(), _: &Request| "tagged")
        .route_layer(tag("route-1"))
        .route_layer(tag("route-2"))
        .nest("/admin", admin)
        .layer_fn(tag("app"))
        .test_client();
    // A route's layers: inside the app's, the first added outermost.
    let r = c.get("/tagged").send();
    assert_eq!(r.text(), "tagged");
    assert_eq!(layers(&r), ["route-2", "route-1", "app"]);
    // The group's layers guard the group only; the app's still run around them.
    let r = c.get("/open").send();
    assert_eq!((r.status, r.text()), (200, "open, extensions: 0".into()));
    assert_eq!(layers(&r), ["app"]);
    let r = c.get("/admin/users").send();
    assert_eq!((r.status, r.text()), (401, "admins only".into()));
    assert_eq!(layers(&r), ["group", "app"]);
    let r = c
        .get("/admin/users")
        .header("Authorization", "Bearer admin")
        .send();
    assert_eq!((r.status, r.text()), (200, "users, for ada".into()));
    // A route layer of the group answers by itself, inside the group's auth.
    let r = c
        .get("/admin/boom")
        .header("Authorization", "Bearer admin")
        .send();
    assert_eq!(r.status, 418, "{}", r.text());
    assert_eq!(c.get("/admin/boom").send().status, 401);
    // Its panic is that request's 500; the next request is served.
    let r = c
        .get("/admin/boom?trouble=1")
        .header("Authorization", "Bearer admin")
        .send();
    assert_eq!(r.status, 500, "{}", r.text());
    // An unknown path under the group meets only the app's layers.
    let r = c.get("/admin/nothing").send();
    assert_eq!(r.status, 404);
    assert_eq!(layers(&r), ["app"]);
    // The extension of one request is not the next one's.
    assert_eq!(c.get("/open").send().text(), "open, extensions: 0");
}

#[test]
fn metrics_behind_the_layers_need_the_apps_token() {
    let guarded = || todos().layer(BearerAuth::new(["scrape-me"]));
    let open = guarded().test_client();
    assert_eq!(
        open.get("/metrics").send().status,
        200,
        "before the layers by default"
    );
    let c = guarded().metrics_behind_layers().test_client();
    assert_eq!(c.get("/metrics").send().status, 401);
    let r = c
        .get("/metrics")
        .header("Authorization", "Bearer scrape-me")
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("http_requests_total"), "{}", r.text());
    // The probes stay open: a load balancer sends no token.
    assert_eq!(c.get("/healthz").send().status, 200);
}
