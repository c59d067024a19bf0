//! Routes by method and path pattern, with path parameters, a trailing wildcard and
//! sub-routers nested at a prefix.
//!
//! A pattern is a path whose segments are literal text, a parameter `{name}` (one
//! whole segment) or, last, a wildcard `{*name}` (the rest of the path: one or more
//! segments, slashes included). The syntax is axum's and Go 1.22's `net/http`.
//! Patterns that do not parse, and two routes for the same method and the same
//! pattern (parameter names aside: `/todos/{id}` and `/todos/{key}` are the same), are
//! refused when the table is checked ([`Router::check`]), naming them.
//!
//! When several patterns match a path, the most specific wins, segment by segment from
//! the left: literal text before a parameter, a parameter before the wildcard (so
//! `/todos/new` beats `/todos/{id}`, whatever the order they were added in). A path
//! that some pattern matches, but for other methods only, is a 405 with `Allow`.
//!
//! Paths arrive normalized (`target.rs`: `/widgets/` is `/widgets`, unreserved escapes
//! decoded, other escapes as sent), so a parameter holds a segment as sent; reading it
//! decodes its escapes (`Request::param`). A route without parameters is matched by
//! comparing the whole path, its first word before its bytes: the common case costs no
//! segment walk.

use std::sync::Arc;

use crate::http::literals::Literals;
use crate::http::problem::{echo, Problem};
use crate::http::{target, Response};

/// One route: method, pattern, label, handler.
#[derive(Clone)]
pub(crate) struct Route<H> {
    /// `GET`, `POST`, ...; a `GET` route also serves `HEAD`.
    pub(crate) method: &'static str,
    /// The pattern as written (`/todos/{id}`), with any nesting prefix.
    pub(crate) path: String,
    /// Its name in stats, metrics, logs and stack reports.
    pub(crate) label: &'static str,
    /// What runs when it matches.
    pub(crate) handler: H,
    pattern: Pattern,
}

/// A parsed pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pattern {
    segments: Vec<Segment>,
    /// The parameter names, in order (the wildcard's last): shared with every
    /// request the route serves.
    names: Arc<[Box<str>]>,
    /// For a pattern of literals only: its first 8 bytes as one word (see [`head`]).
    exact_head: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
    Rest,
}

/// The first 8 bytes of `path` (zero-padded) as one word: most routes differ from a
/// request's path in their first bytes, and comparing one word rules them out without
/// a `memcmp` call each.
fn head(path: &str) -> u64 {
    let mut word = [0u8; 8];
    let n = path.len().min(8);
    word[..n].copy_from_slice(&path.as_bytes()[..n]);
    u64::from_le_bytes(word)
}

/// Why a route pattern was refused (the app reports it as
/// [`Error::Route`](crate::Error::Route)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PatternError {
    /// The pattern as written.
    pub(crate) pattern: String,
    /// What is wrong with it, and what to write instead.
    pub(crate) why: String,
}

impl From<PatternError> for crate::Error {
    fn from(e: PatternError) -> crate::Error {
        crate::Error::Route {
            pattern: e.pattern,
            why: e.why,
        }
    }
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        if text == "*" {
            // `OPTIONS *` is answered by the router itself; no route may take it.
            return Err("'*' is not a path: OPTIONS * is answered by the server".into());
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err("a pattern starts with '/'".into());
        };
        let mut segments = Vec::new();
        let mut names: Vec<Box<str>> = Vec::new();
        let parts: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('/').collect()
        };
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let segment = match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(inner) => {
                    let (wildcard, name) = match inner.strip_prefix('*') {
                        Some(name) => (true, name),
                        None => (false, inner),
                    };
                    let name_ok = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if !name_ok {
                        return Err(format!(
                            "'{{{inner}}}' is not a parameter: name it with letters, digits \
                             and '_', as in {{id}} or {{*rest}}"
                        ));
                    }
                    if names.iter().any(|n| **n == *name) {
                        return Err(format!("the parameter '{name}' appears twice"));
                    }
                    names.push(name.into());
                    if wildcard && !last {
                        return Err(format!("the wildcard {{*{name}}} must be the last segment"));
                    }
                    if wildcard {
                        Segment::Rest
                    } else {
                        Segment::Param
                    }
                }
                None if part.contains(['{', '}']) => {
                    return Err(format!(
                        "'{part}': a parameter is a whole segment, like /todos/{{id}}, \
                         and braces are not allowed in literal text"
                    ));
                }
                None if part.is_empty() => {
                    return Err(
                        "empty segment: write no '//' and no trailing '/' (paths are \
                         matched without their trailing slash)"
                            .into(),
                    );
                }
                None => Segment::Literal(part.to_string()),
            };
            segments.push(segment);
        }
        let exact_head = segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
            .then(|| head(text));
        Ok(Pattern {
            segments,
            names: names.into(),
            exact_head,
        })
    }

    /// Whether two patterns match exactly the same paths (parameter names aside).
    fn same_shape(&self, other: &Pattern) -> bool {
        self.segments == other.segments
    }

    /// Whether `path` matches this pattern with parameters, with the parameters'
    /// byte ranges in `path` pushed onto `spans` (cleared first). (A pattern of
    /// literals only is matched by comparing the whole path: [`Router::find`].)
    fn matches(&self, path: &str, spans: &mut Vec<(u32, u32)>) -> bool {
        spans.clear();
        let Some(mut rest) = path.strip_prefix('/') else {
            return false;
        };
        let mut at = 1usize;
        for (i, segment) in self.segments.iter().enumerate() {
            if let Segment::Rest = segment {
                if rest.is_empty() {
                    return false;
                }
                spans.push((at as u32, path.len() as u32));
                return true;
            }
            let (part, next) = match rest.split_once('/') {
                Some((part, next)) => (part, Some(next)),
                None => (rest, None),
            };
            match segment {
                Segment::Literal(lit) if lit != part => return false,
                Segment::Param if part.is_empty() => return false,
                Segment::Param => spans.push((at as u32, (at + part.len()) as u32)),
                _ => {}
            }
            let last = i + 1 == self.segments.len();
            match next {
                Some(next) if !last => {
                    at += part.len() + 1;
                    rest = next;
                }
                None if last => return true,
                _ => return false,
            }
        }
        // No segments: the root pattern `/`.
        path == "/"
    }

    /// How specific a match is, to compare with another pattern's match of the same
    /// path: per segment from the left, literal (2) before parameter (1) before
    /// wildcard (0).
    fn rank(&self) -> impl Iterator<Item = u8> + '_ {
        self.segments.iter().map(|s| match s {
            Segment::Literal(_) => 2,
            Segment::Param => 1,
            Segment::Rest => 0,
        })
    }
}

/// The values of a matched route's parameters in the request's path.
#[derive(Clone, Debug, Default)]
pub(crate) struct Params {
    names: Option<Arc<[Box<str>]>>,
    /// Byte ranges in the path, one per name.
    spans: Vec<(u32, u32)>,
}

impl Params {
    /// The raw text of parameter `name` in `path` (escapes as sent), if the route has it.
    pub(crate) fn get<'p>(&self, path: &'p str, name: &str) -> Option<&'p str> {
        let names = self.names.as_ref()?;
        let i = names.iter().position(|n| &**n == name)?;
        let (from, to) = *self.spans.get(i)?;
        path.get(from as usize..to as usize)
    }

    /// Every parameter's name, in the pattern's order.
    #[cfg(test)]
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().flat_map(|n| n.iter().map(|n| &**n))
    }

    /// Forget the last match, keeping the buffer.
    pub(crate) fn clear(&mut self) {
        self.names = None;
        self.spans.clear();
    }
}

/// What a lookup found.
pub(crate) enum Found<'a, H> {
    /// The route, and its parameters' values.
    Route(&'a Route<H>),
    /// The path exists, but not for this method: the methods it has (for `Allow`).
    MethodNotAllowed(Vec<&'static str>),
    /// No pattern matches the path.
    NoMatch,
}

/// A table of routes.
#[derive(Clone)]
pub(crate) struct Router<H> {
    routes: Vec<Route<H>>,
    /// The literal routes' indexes in `routes`, by first word and length.
    literals: Literals,
    /// Patterns that did not parse, reported by [`Router::check`].
    refused: Vec<PatternError>,
}

impl<H> Default for Router<H> {
    fn default() -> Self {
        Router {
            routes: Vec::new(),
            literals: Literals::default(),
            refused: Vec::new(),
        }
    }
}

impl<H> Router<H> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Add a route for `method` and `pattern`. `HEAD` requests are served by the `GET`
    /// route of the same path. A pattern that does not parse is kept aside and
    /// reported by [`Router::check`] (the builder stays chainable).
    pub(crate) fn route(
        mut self,
        method: &'static str,
        pattern: &str,
        label: &'static str,
        handler: H,
    ) -> Self {
        match Pattern::parse(pattern) {
            Ok(parsed) => {
                if let Some(word) = parsed.exact_head {
                    self.literals.insert(word, pattern.len(), self.routes.len());
                }
                self.routes.push(Route {
                    method,
                    path: pattern.to_string(),
                    label,
                    handler,
                    pattern: parsed,
                });
            }
            Err(why) => self.refused.push(PatternError {
                pattern: pattern.to_string(),
                why,
            }),
        }
        self
    }

    /// `GET` shorthand.
    #[cfg(test)]
    pub(crate) fn get(self, pattern: &str, label: &'static str, handler: H) -> Self {
        self.route("GET", pattern, label, handler)
    }

    /// Every route of `sub` under `prefix` (a literal path such as `/twitter`); the
    /// sub-router's `/` becomes `prefix` itself, so a sub-app is written without
    /// knowing where it is nested.
    pub(crate) fn nest(mut self, prefix: &str, sub: Router<H>) -> Self {
        let prefix = prefix.trim_end_matches('/');
        self.refused.extend(sub.refused);
        for r in sub.routes {
            let path = if r.path == "/" {
                prefix.to_string()
            } else {
                format!("{prefix}{}", r.path)
            };
            self = self.route(r.method, &path, r.label, r.handler);
        }
        self
    }

    /// The table's errors: patterns that did not parse, and two routes for the same
    /// method and pattern, each naming the patterns.
    pub(crate) fn check(&self) -> Result<(), Vec<PatternError>> {
        let mut errors = self.refused.clone();
        for (i, a) in self.routes.iter().enumerate() {
            for b in &self.routes[..i] {
                if a.method == b.method && a.pattern.same_shape(&b.pattern) {
                    let twice = if a.path == b.path {
                        format!("{} {} is routed twice", a.method, a.path)
                    } else {
                        format!(
                            "{} {} and {} {} match the same paths",
                            b.method, b.path, a.method, a.path
                        )
                    };
                    errors.push(PatternError {
                        pattern: a.path.clone(),
                        why: format!("{twice}: keep one"),
                    });
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Find the route for `method` and `path`; its parameters go into `params`.
    pub(crate) fn find(&self, method: &str, path: &str, params: &mut Params) -> Found<'_, H> {
        let method = if method == "HEAD" { "GET" } else { method };
        let mut allowed = Vec::new();
        // A literal route that matches is as specific as a match can be: with the
        // method right it wins at once. Its first word and length pick the candidates
        // without a byte compare, and settle a path of at most 8 bytes (`/hello`) whole.
        let candidates = self
            .literals
            .get(head(path), path.len())
            .iter()
            .map(|&(_, _, i)| &self.routes[i])
            .filter(|r| path.len() <= 8 || r.path == path);
        for r in candidates {
            if r.method == method {
                params.clear();
                return Found::Route(r);
            }
            allowed.push(r.method);
        }
        let mut best: Option<&Route<H>> = None;
        let mut spans = Vec::new();
        for r in self
            .routes
            .iter()
            .filter(|r| r.pattern.exact_head.is_none())
        {
            if !r.pattern.matches(path, &mut spans) {
                continue;
            }
            if r.method != method {
                if !allowed.contains(&r.method) {
                    allowed.push(r.method);
                }
                continue;
            }
            if best.is_none_or(|b| r.pattern.rank().gt(b.pattern.rank())) {
                best = Some(r);
                params.names = Some(Arc::clone(&r.pattern.names));
                params.spans.clone_from(&spans);
            }
        }
        match best {
            Some(r) => Found::Route(r),
            None if allowed.is_empty() => Found::NoMatch,
            None => Found::MethodNotAllowed(allowed),
        }
    }

    /// The route for `method` and `path`, or the response that refuses the request:
    /// 404, 405 with `Allow`, or for `OPTIONS *` a 200 naming every method served.
    pub(crate) fn resolve(
        &self,
        method: &str,
        path: &str,
        params: &mut Params,
    ) -> Result<&Route<H>, Response> {
        match self.find(method, path, params) {
            Found::Route(route) => Ok(route),
            Found::NoMatch if path == "*" => Err(target::options_star(&self.methods())),
            Found::NoMatch => Err(Problem::new(
                404,
                "not-found",
                format!("no route for {} {}", echo(method), echo(path)),
            )
            .into()),
            Found::MethodNotAllowed(allowed) => {
                let allowed = with_head(&allowed).join(", ");
                Err(Response::from(Problem::new(
                    405,
                    "method-not-allowed",
                    format!(
                        "{} is not allowed on {}: use {allowed}",
                        echo(method),
                        echo(path)
                    ),
                ))
                .header("Allow", allowed))
            }
        }
    }

    /// Every method some route answers, HEAD included where GET is (for `OPTIONS *`).
    fn methods(&self) -> String {
        let methods: Vec<&'static str> = self.routes.iter().map(|r| r.method).collect();
        with_head(&methods).join(", ")
    }

    /// Every route, in the order added (for reports).
    pub(crate) fn routes(&self) -> &[Route<H>] {
        &self.routes
    }

    /// The route added last (a builder changes it: its label, its limits).
    pub(crate) fn routes_mut(&mut self) -> &mut [Route<H>] {
        &mut self.routes
    }

    pub(crate) fn last_mut(&mut self) -> Option<&mut Route<H>> {
        self.routes.last_mut()
    }

    /// Whether some route of `method` has exactly the literal pattern `path`.
    pub(crate) fn has_literal(&self, method: &str, path: &str) -> bool {
        self.routes
            .iter()
            .any(|r| r.method == method && r.pattern.exact_head.is_some() && r.path == path)
    }
}

/// `methods` without repeats, in order, with HEAD right after GET.
fn with_head(methods: &[&'static str]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for &m in methods {
        let add: &[&'static str] = if m == "GET" { &["GET", "HEAD"] } else { &[m] };
        for a in add {
            if !out.contains(a) {
                out.push(a);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(r: &Router<i32>, method: &str, path: &str) -> (Option<i32>, Vec<String>) {
        let mut params = Params::default();
        match r.find(method, path, &mut params) {
            Found::Route(route) => {
                let values = params
                    .names()
                    .map(|n| format!("{n}={}", params.get(path, n).unwrap()))
                    .collect();
                (Some(route.handler), values)
            }
            _ => (None, Vec::new()),
        }
    }

    #[test]
    fn nested_routes_resolve_and_methods_are_checked() {
        let sub = Router::new()
            .get("/", "twitter", 2)
            .get("/x", "twitter_x", 3);
        let r = Router::new()
            .get("/widgets", "widgets", 1)
            .nest("/twitter", sub);
        assert!(r.check().is_ok());
        let mut p = Params::default();
        assert!(matches!(r.find("GET", "/widgets", &mut p), Found::Route(x) if x.handler == 1));
        assert!(matches!(r.find("HEAD", "/widgets", &mut p), Found::Route(x) if x.handler == 1));
        assert!(matches!(r.find("GET", "/twitter", &mut p), Found::Route(x) if x.handler == 2));
        assert!(
            matches!(r.find("GET", "/twitter/x", &mut p), Found::Route(x) if x.label == "twitter_x")
        );
        assert!(
            matches!(r.find("POST", "/widgets", &mut p), Found::MethodNotAllowed(m) if m == ["GET"])
        );
        assert!(matches!(r.find("GET", "/nope", &mut p), Found::NoMatch));
        let options = r.resolve("OPTIONS", "*", &mut p).err().unwrap();
        assert_eq!(options.status, 200);
        assert_eq!(options.headers[1], ("Allow", "GET, HEAD".into()));
        let refused = r.resolve("POST", "/widgets", &mut p).err().unwrap();
        assert_eq!(refused.status, 405);
        assert!(refused
            .headers
            .iter()
            .any(|(n, v)| *n == "Allow" && v == "GET, HEAD"));
    }

    #[test]
    fn literal_routes_are_found_among_many_that_share_a_word_or_a_length() {
        // Added out of order; `/widgets/a` and `/widgets/b` share the first word and
        // the length, `/a` and `/b` the length, `/widgets` and `/widgetsz` the word.
        let mut r = Router::new();
        let paths = [
            "/widgets/b",
            "/b",
            "/widgetsz",
            "/a",
            "/widgets",
            "/widgets/a",
            "/",
        ];
        for (i, path) in paths.iter().enumerate() {
            r = r.get(path, "literal", i);
        }
        let r = r
            .route("POST", "/widgets/a", "post", 100)
            .get("/widgets/{id}", "pattern", 200);
        assert_eq!(r.check(), Ok(()));
        let mut p = Params::default();
        for (i, path) in paths.iter().enumerate() {
            assert!(
                matches!(r.find("GET", path, &mut p), Found::Route(x) if x.handler == i),
                "{path}"
            );
        }
        assert!(
            matches!(r.find("POST", "/widgets/a", &mut p), Found::Route(x) if x.handler == 100)
        );
        assert!(
            matches!(r.find("PUT", "/widgets/a", &mut p), Found::MethodNotAllowed(m) if m == ["GET", "POST"])
        );
        // No literal of that word and length: the pattern answers.
        assert!(matches!(r.find("GET", "/widgets/c", &mut p), Found::Route(x) if x.handler == 200));
        assert!(matches!(r.find("GET", "/c", &mut p), Found::NoMatch));
    }

    #[test]
    fn parameters_and_the_wildcard_capture_their_segments() {
        let r = Router::new()
            .get("/todos/{id}", "show", 1)
            .route("DELETE", "/todos/{id}", "delete", 2)
            .get("/todos/{id}/notes/{note}", "note", 3)
            .get("/files/{*path}", "file", 4)
            .get("/", "root", 5);
        assert!(r.check().is_ok());
        assert_eq!(
            find(&r, "GET", "/todos/42"),
            (Some(1), vec!["id=42".into()])
        );
        assert_eq!(find(&r, "DELETE", "/todos/abc").0, Some(2));
        assert_eq!(
            find(&r, "GET", "/todos/7/notes/x%2Fy"),
            (Some(3), vec!["id=7".into(), "note=x%2Fy".into()])
        );
        assert_eq!(
            find(&r, "GET", "/files/a/b/c.txt"),
            (Some(4), vec!["path=a/b/c.txt".into()])
        );
        assert_eq!(find(&r, "GET", "/").0, Some(5));
        // A parameter is one whole, non-empty segment; the wildcard at least one byte.
        for path in [
            "/todos",
            "/todos/1/2",
            "/files",
            "/todos/1/notes",
            "/todosx/1",
        ] {
            assert_eq!(find(&r, "GET", path).0, None, "{path}");
        }
        let mut p = Params::default();
        let refused = r.resolve("PUT", "/todos/1", &mut p).err().unwrap();
        assert_eq!(refused.status, 405);
        assert!(refused
            .headers
            .iter()
            .any(|(n, v)| *n == "Allow" && v == "GET, HEAD, DELETE"));
    }

    #[test]
    fn the_most_specific_pattern_wins_whatever_the_order() {
        let r = Router::new()
            .get("/{*any}", "any", 1)
            .get("/todos/{id}", "show", 2)
            .get("/todos/new", "new", 3)
            .get("/todos/{id}/edit", "edit", 4)
            .get("/{section}/new", "section_new", 5);
        assert!(r.check().is_ok());
        assert_eq!(find(&r, "GET", "/todos/new").0, Some(3));
        assert_eq!(find(&r, "GET", "/todos/9").0, Some(2));
        assert_eq!(find(&r, "GET", "/todos/9/edit").0, Some(4));
        assert_eq!(find(&r, "GET", "/notes/new").0, Some(5));
        assert_eq!(find(&r, "GET", "/elsewhere/x/y").0, Some(1));
    }

    #[test]
    fn bad_patterns_and_duplicates_are_refused_by_name() {
        let errors = |r: Router<i32>| -> Vec<String> {
            r.check()
                .unwrap_err()
                .into_iter()
                .map(|e| crate::Error::from(e).to_string())
                .collect()
        };
        for (pattern, says) in [
            ("todos", "starts with '/'"),
            ("/todos/{}", "is not a parameter"),
            ("/todos/{id", "a parameter is a whole segment"),
            ("/todos/x{id}", "a parameter is a whole segment"),
            ("/a/{id}/{id}", "appears twice"),
            ("/{*rest}/x", "must be the last segment"),
            ("/todos//x", "empty segment"),
            ("/todos/", "empty segment"),
            ("/{my-id}", "is not a parameter"),
        ] {
            let e = errors(Router::new().get(pattern, "x", 1));
            assert_eq!(e.len(), 1, "{pattern}: {e:?}");
            assert!(
                e[0].contains(&format!("'{pattern}'")) && e[0].contains(says),
                "{pattern}: {e:?}"
            );
        }
        let e = errors(
            Router::new()
                .get("/todos/{id}", "a", 1)
                .get("/todos/{key}", "b", 2)
                .route("POST", "/todos", "c", 3)
                .route("POST", "/todos", "d", 4)
                .route("DELETE", "/todos/{id}", "e", 5),
        );
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].contains("GET /todos/{id} and GET /todos/{key} match the same paths"),
            "{e:?}"
        );
        assert!(e[1].contains("POST /todos is routed twice"), "{e:?}");
    }
}
