//! The HTTP/1.1 rules hyper leaves to the application, checked in front of the axum
//! router with the fiber server's own functions (`http/target.rs`), so both runtimes
//! answer alike: exactly one Host in HTTP/1.1 (400), the request target normalized
//! (absolute-form routed by its path, unreserved escapes decoded, `%00` and broken
//! escapes a 400, one trailing slash dropped), and `OPTIONS *` answered here.
//!
//! What hyper already does itself: chunked request bodies, 100 Continue when a
//! handler first reads a body, `Date`, 400 for Transfer-Encoding in HTTP/1.0 or not
//! ending in chunked. Where it differs (docs/HTTP.md): with both Content-Length and
//! Transfer-Encoding it follows RFC 9112 section 6.3 (chunked wins, the connection
//! closes after the answer) and removes Content-Length before we could see it, so
//! this layer cannot refuse such a request as the fiber server does.

use axum::http::{header, Request, Uri, Version};

use fiber_web::rig::{check_host, options_star, parse_target, HttpError, DEFAULT_ALLOW};
use fiber_web::Response;

/// The request to route, with its target normalized; or the answer it gets here.
pub fn admit<B>(mut req: Request<B>) -> Result<Request<B>, Response> {
    let minor_version = u8::from(req.version() == Version::HTTP_11);
    let hosts: Vec<&str> = req
        .headers()
        .get_all(header::HOST)
        .iter()
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        .collect();
    check_host(minor_version, hosts.iter().copied()).map_err(refuse)?;
    let uri = req.uri();
    let raw = match uri.query() {
        Some(query) => format!("{}?{query}", uri.path()),
        None => uri.path().to_string(),
    };
    let target = parse_target(req.method().as_str(), &raw).map_err(refuse)?;
    if target.path == "*" {
        return Err(options_star(DEFAULT_ALLOW));
    }
    let origin = if target.query.is_empty() {
        target.path
    } else {
        format!("{}?{}", target.path, target.query)
    };
    if origin != raw || uri.scheme().is_some() {
        *req.uri_mut() = Uri::try_from(origin.as_str()).map_err(|e| {
            refuse(HttpError::Malformed(format!(
                "the target '{origin}' is not a valid URI: {e}"
            )))
        })?;
    }
    Ok(req)
}

/// A 400 that closes the connection, with the fiber server's message.
fn refuse(e: HttpError) -> Response {
    Response::error(e.status(), &e).header("Connection", "close")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(target: &str, host: Option<&str>) -> Result<String, u16> {
        let mut req = Request::builder().uri(target);
        if let Some(h) = host {
            req = req.header("host", h);
        }
        admit(req.body(()).unwrap())
            .map(|r| r.uri().to_string())
            .map_err(|r| r.status)
    }

    #[test]
    fn targets_are_normalized_and_host_is_required() {
        assert_eq!(admitted("/hello", Some("x")), Ok("/hello".into()));
        assert_eq!(
            admitted("http://x/hello/?a", Some("x")),
            Ok("/hello?a".into())
        );
        assert_eq!(admitted("/he%6Clo", Some("x")), Ok("/hello".into()));
        assert_eq!(admitted("/a%2Fb", Some("x")), Ok("/a%2Fb".into()));
        assert_eq!(admitted("/a%00", Some("x")), Err(400));
        assert_eq!(admitted("/hello", None), Err(400));
        assert_eq!(admitted("*", Some("x")), Err(400));
    }
}
