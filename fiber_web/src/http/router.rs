//! Routes by method and exact path, with sub-routers mounted at a prefix.
//!
//! A route carries a label (its name in stats and stack reports) and a handler of any
//! type `H`, so the fiber server and examples can use plain function pointers. Paths
//! arrive normalized (`target.rs`: `/widgets/` is `/widgets`), so routes match exactly.

use crate::http::{target, Response};

/// One route: method, full path, label, handler.
#[derive(Clone)]
pub struct Route<H> {
    pub method: &'static str,
    pub path: String,
    pub label: &'static str,
    pub handler: H,
    /// [`head`] of `path`: most routes differ from a request's path in their first
    /// bytes, and comparing one word rules them out without a `memcmp` call each.
    head: u64,
}

/// The first 8 bytes of `path` (zero-padded) as one word.
fn head(path: &str) -> u64 {
    let mut word = [0u8; 8];
    let n = path.len().min(8);
    word[..n].copy_from_slice(&path.as_bytes()[..n]);
    u64::from_le_bytes(word)
}

/// What a lookup found.
pub enum Found<'a, H> {
    Route(&'a Route<H>),
    /// The path exists, but not for this method: the methods it has (for `Allow`).
    MethodNotAllowed(Vec<&'static str>),
    NotFound,
}

/// A table of routes.
#[derive(Clone)]
pub struct Router<H> {
    routes: Vec<Route<H>>,
}

impl<H> Default for Router<H> {
    fn default() -> Self {
        Router { routes: Vec::new() }
    }
}

impl<H> Router<H> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a route. `HEAD` requests are served by the `GET` route of the same path.
    pub fn route(
        mut self,
        method: &'static str,
        path: &str,
        label: &'static str,
        handler: H,
    ) -> Self {
        self.routes.push(Route {
            method,
            path: path.to_string(),
            label,
            handler,
            head: head(path),
        });
        self
    }

    /// `GET` shorthand.
    pub fn get(self, path: &str, label: &'static str, handler: H) -> Self {
        self.route("GET", path, label, handler)
    }

    /// Mount every route of `sub` under `prefix`; the sub-router's `/` becomes `prefix`
    /// itself, so a sub-app is written without knowing where it is mounted.
    pub fn mount(mut self, prefix: &str, sub: Router<H>) -> Self {
        let prefix = prefix.trim_end_matches('/');
        for mut r in sub.routes {
            r.path = if r.path == "/" {
                prefix.to_string()
            } else {
                format!("{prefix}{}", r.path)
            };
            r.head = head(&r.path);
            self.routes.push(r);
        }
        self
    }

    /// Find the route for `method` and `path`.
    pub fn find(&self, method: &str, path: &str) -> Found<'_, H> {
        let method = if method == "HEAD" { "GET" } else { method };
        let mut allowed = Vec::new();
        let wanted = head(path);
        let same = |r: &&Route<H>| r.head == wanted && r.path == path;
        for r in self.routes.iter().filter(same) {
            if r.method == method {
                return Found::Route(r);
            }
            allowed.push(r.method);
        }
        if allowed.is_empty() {
            Found::NotFound
        } else {
            Found::MethodNotAllowed(allowed)
        }
    }

    /// The route for `method` and `path`, or the response that refuses the request:
    /// 404, 405 with `Allow`, or for `OPTIONS *` a 200 naming every method served.
    pub fn resolve(&self, method: &str, path: &str) -> Result<&Route<H>, Response> {
        match self.find(method, path) {
            Found::Route(route) => Ok(route),
            Found::NotFound if path == "*" => Err(target::options_star(&self.methods())),
            Found::NotFound => Err(Response::error(
                404,
                format!("no route for {method} {path}"),
            )),
            Found::MethodNotAllowed(allowed) => {
                let allowed = allowed.join(", ");
                Err(Response::error(
                    405,
                    format!("{method} is not allowed on {path}: use {allowed}"),
                )
                .header("Allow", allowed))
            }
        }
    }

    /// Every method some route answers, HEAD included where GET is (for `OPTIONS *`).
    fn methods(&self) -> String {
        let mut methods: Vec<&str> = Vec::new();
        for r in &self.routes {
            let with_head: &[&str] = if r.method == "GET" {
                &["GET", "HEAD"]
            } else {
                &[r.method]
            };
            for m in with_head {
                if !methods.contains(m) {
                    methods.push(m);
                }
            }
        }
        methods.join(", ")
    }

    /// Every route, in the order added (for reports).
    pub fn routes(&self) -> &[Route<H>] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounted_routes_resolve_and_methods_are_checked() {
        let sub = Router::new()
            .get("/", "twitter", 2)
            .get("/x", "twitter_x", 3);
        let r = Router::new()
            .get("/widgets", "widgets", 1)
            .mount("/twitter", sub);
        assert!(matches!(r.find("GET", "/widgets"), Found::Route(x) if x.handler == 1));
        assert!(matches!(r.find("HEAD", "/widgets"), Found::Route(x) if x.handler == 1));
        assert!(matches!(r.find("GET", "/twitter"), Found::Route(x) if x.handler == 2));
        assert!(matches!(r.find("GET", "/twitter/x"), Found::Route(x) if x.label == "twitter_x"));
        assert!(matches!(r.find("POST", "/widgets"), Found::MethodNotAllowed(m) if m == ["GET"]));
        assert!(matches!(r.find("GET", "/nope"), Found::NotFound));
        let options = r.resolve("OPTIONS", "*").err().unwrap();
        assert_eq!(options.status, 200);
        assert_eq!(options.headers[1], ("Allow", "GET, HEAD".into()));
        assert_eq!(r.resolve("POST", "/widgets").err().unwrap().status, 405);
    }
}
