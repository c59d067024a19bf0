//! Testing an app without a socket: [`App::test_client`] runs each request through the
//! same router, route limits, layers and fibers the server runs, on a real guarded
//! fiber, and answers with what the server would have sent.
//!
//! ```
//! # #[global_allocator]
//! # static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;
//! use fiber_web::{App, Json, Request, Response};
//!
//! #[derive(serde::Deserialize, serde::Serialize)]
//! struct Todo { title: String }
//!
//! fn create(_: &(), req: &Request) -> Result<(u16, Json<Todo>), Response> {
//!     let todo: Todo = req.json()?;
//!     Ok((201, Json(todo)))
//! }
//!
//! let client = App::new(()).post("/todos", create).test_client();
//! let resp = client.post("/todos").json(&Todo { title: "milk".into() }).send();
//! assert_eq!(resp.status, 201);
//! assert_eq!(resp.json::<Todo>().title, "milk");
//! assert_eq!(client.post("/todos").body("milk").send().status, 415);
//! ```

use std::sync::Arc;

use fiber_pool::FiberPool;

use crate::counters::HttpStats;
use crate::dispatch::{Pools, Routed};
use crate::http::conn::Service;
use crate::http::defaults::DefaultHeaders;
use crate::http::status::has_no_body;
use crate::http::{Request, Response};
use crate::App;

/// Sends requests to a built app, in-process.
pub struct TestClient<S> {
    routed: Arc<Routed<S>>,
}

impl<S: Send + Sync + 'static> App<S> {
    /// A client for this app, on a fiber pool of the default size. Panics, naming
    /// them, when the app's routes are wrong (the error [`App::serve`] returns).
    pub fn test_client(self) -> TestClient<S> {
        let fibers = FiberPool::new(fiber_pool::PoolConfig::default())
            .unwrap_or_else(|e| panic!("the test client's fiber pool: {e}"));
        self.test_client_on(fibers)
    }

    /// A client for this app, running its handlers on `fibers` (a pool with small
    /// stacks shows how much stack a route needs), its monitoring routes' too.
    pub fn test_client_on(self, fibers: FiberPool) -> TestClient<S> {
        let stats = Arc::new(HttpStats::unrouted(false));
        let pools = Pools {
            fibers: fibers.clone(),
            monitor: fibers,
        };
        match self.build(pools, stats, None) {
            Ok(routed) => TestClient {
                routed: Arc::new(routed),
            },
            Err(e) => panic!("{e}"),
        }
    }
}

impl<S: Send + Sync + 'static> TestClient<S> {
    /// A request with `method` to `target` (a path, and a query after `?`).
    pub fn request(&self, method: &str, target: &str) -> TestRequest<'_, S> {
        TestRequest {
            client: self,
            req: Request::new(method, target).with_header("Host", "test"),
        }
    }

    /// A `GET`.
    pub fn get(&self, target: &str) -> TestRequest<'_, S> {
        self.request("GET", target)
    }

    /// A `HEAD`.
    pub fn head(&self, target: &str) -> TestRequest<'_, S> {
        self.request("HEAD", target)
    }

    /// A `POST`.
    pub fn post(&self, target: &str) -> TestRequest<'_, S> {
        self.request("POST", target)
    }

    /// A `PUT`.
    pub fn put(&self, target: &str) -> TestRequest<'_, S> {
        self.request("PUT", target)
    }

    /// A `PATCH`.
    pub fn patch(&self, target: &str) -> TestRequest<'_, S> {
        self.request("PATCH", target)
    }

    /// A `DELETE`.
    pub fn delete(&self, target: &str) -> TestRequest<'_, S> {
        self.request("DELETE", target)
    }

    /// The app's state.
    pub fn state(&self) -> &Arc<S> {
        self.routed.state()
    }

    /// The counters the requests sent so far were recorded in.
    pub fn stats(&self) -> &Arc<HttpStats> {
        self.routed.stats()
    }
}

/// A request being written; [`TestRequest::send`] runs it.
pub struct TestRequest<'c, S> {
    client: &'c TestClient<S>,
    req: Request,
}

impl<S: Send + Sync + 'static> TestRequest<'_, S> {
    /// Add a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.req = self.req.with_header(name, value);
        self
    }

    /// Set the body (no Content-Type is added).
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.req.body = body.into();
        self
    }

    /// Set the body to `value` as JSON, with `Content-Type: application/json`.
    pub fn json(self, value: &impl serde::Serialize) -> Self {
        let body = serde_json::to_vec(value).expect("a test body that serializes");
        self.header("Content-Type", "application/json").body(body)
    }

    /// Run the request through the app on a fiber and return what a client would
    /// receive (a HEAD, 204 or 304 without a body).
    pub fn send(self) -> TestResponse {
        let TestRequest { client, req } = self;
        let routed = Arc::clone(&client.routed);
        let head = req.method == "HEAD";
        // The server calls the app from a may coroutine (a connection's); so do we.
        let run = move || {
            let started = fiber_pool::monotonic_nanos();
            let (outcome, _) = routed.route(Box::new(req), None, started);
            let (resp, label, _) = outcome.expect("with no peer, a request always runs");
            routed
                .stats()
                .request(label, resp.status, crate::dispatch::since(started));
            resp
        };
        let ran = fiber_pool::carrier::go(run).join();
        let resp = match ran {
            Ok(resp) => resp,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        TestResponse::from_response(resp, head, client.routed.default_headers())
    }
}

/// What a client received.
#[derive(Clone, Debug)]
pub struct TestResponse {
    /// The status code.
    pub status: u16,
    /// The headers the app set, then its default headers (the server adds
    /// Content-Length, Date, Connection).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl TestResponse {
    fn from_response(resp: Response, head: bool, defaults: &DefaultHeaders) -> TestResponse {
        let defaults: Vec<_> = defaults
            .iter()
            .filter(|(n, _)| !resp.sets_header(n))
            .collect();
        let body = if head || has_no_body(resp.status) {
            Vec::new()
        } else {
            resp.body.into_owned()
        };
        TestResponse {
            status: resp.status,
            headers: resp
                .headers
                .iter()
                .chain(defaults)
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body,
        }
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON of type `T`; panics, showing the body, when it is not.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not the JSON asked for ({e}): {}", self.text()))
    }
}
