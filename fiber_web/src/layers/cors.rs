//! Cross-origin resource sharing (the Fetch standard's CORS protocol) for the origins
//! an app allows.
//!
//! A request without `Origin` is not cross-origin: it passes untouched. A request from
//! an origin not allowed passes too, without CORS headers, so the browser keeps its
//! answer from the page (the server does not refuse it: CORS protects the reader, not
//! the server). A preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
//! allowed origin is answered here with 204 and what is allowed; no route needs to
//! serve `OPTIONS`. Every answer that depends on `Origin` says `Vary: Origin`, so a
//! cache does not hand one origin's answer to another.

use std::time::Duration;

use crate::http::{Request, Response};
use crate::layer::{Layer, Next};

/// The CORS layer; see the module's header.
#[derive(Clone, Debug)]
pub struct Cors {
    /// Allowed origins (`https://app.example`), or every origin when `None`.
    origins: Option<Vec<String>>,
    methods: String,
    headers: String,
    max_age: Duration,
}

/// How long a browser may keep a preflight's answer, unless told otherwise.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);

impl Cors {
    /// Cross-origin requests from exactly these origins (scheme, host and port, as a
    /// browser sends them: `https://app.example`, `http://localhost:5173`).
    pub fn allow_origins<I, O>(origins: I) -> Cors
    where
        I: IntoIterator<Item = O>,
        O: Into<String>,
    {
        Cors::with_origins(Some(origins.into_iter().map(Into::into).collect()))
    }

    /// Cross-origin requests from any origin (`Access-Control-Allow-Origin: *`): for a
    /// public API that needs no credentials.
    pub fn any_origin() -> Cors {
        Cors::with_origins(None)
    }

    fn with_origins(origins: Option<Vec<String>>) -> Cors {
        Cors {
            origins,
            methods: "GET, HEAD, POST, PUT, PATCH, DELETE".into(),
            headers: "Content-Type, Authorization".into(),
            max_age: DEFAULT_MAX_AGE,
        }
    }

    /// The methods a preflight allows (default: GET, HEAD, POST, PUT, PATCH, DELETE).
    pub fn allow_methods(mut self, methods: &[&str]) -> Cors {
        self.methods = methods.join(", ");
        self
    }

    /// The request headers a preflight allows (default: Content-Type, Authorization).
    pub fn allow_headers(mut self, headers: &[&str]) -> Cors {
        self.headers = headers.join(", ");
        self
    }

    /// How long a browser may cache a preflight's answer.
    pub fn max_age(mut self, max_age: Duration) -> Cors {
        self.max_age = max_age;
        self
    }

    /// The `Access-Control-Allow-Origin` value for `origin`, if it is allowed.
    fn allowed(&self, origin: &str) -> Option<String> {
        match &self.origins {
            None => Some("*".into()),
            Some(list) => list
                .iter()
                .any(|o| o.eq_ignore_ascii_case(origin))
                .then(|| origin.to_string()),
        }
    }
}

impl<S> Layer<S> for Cors {
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
        let Some(origin) = req.header("origin").map(str::to_string) else {
            return next.run(state, req);
        };
        let Some(allow) = self.allowed(&origin) else {
            return next.run(state, req).header("Vary", "Origin");
        };
        let preflight =
            req.method == "OPTIONS" && req.header("access-control-request-method").is_some();
        if preflight {
            return Response::no_content()
                .header("Access-Control-Allow-Origin", allow)
                .header("Access-Control-Allow-Methods", self.methods.clone())
                .header("Access-Control-Allow-Headers", self.headers.clone())
                .header("Access-Control-Max-Age", self.max_age.as_secs().to_string())
                .header("Vary", "Origin");
        }
        next.run(state, req)
            .header("Access-Control-Allow-Origin", allow)
            .header("Vary", "Origin")
    }
}
