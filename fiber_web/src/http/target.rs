//! The request target (RFC 9112 section 3.2) and Host rules, shared by both runtimes:
//! the fiber parser calls these on the raw target, the twin's conformance layer on
//! the URI hyper parsed, so a path routes the same on both.
//!
//! - origin-form `/a/b?q` is the usual; absolute-form `http://host/a/b?q` (which a
//!   server MUST accept) is routed by its path; asterisk-form `*` only with OPTIONS;
//!   authority-form (CONNECT) is refused, as this is no proxy.
//! - The path is normalized before routing: percent-escapes of unreserved characters
//!   (`A-Z a-z 0-9 - . _ ~`) are decoded, as RFC 3986 section 6.2.2.2 allows; every
//!   other escape stays as sent, so `%2F` never becomes a path separator; `%00` and
//!   broken escapes (`%zz`, `%4`) are a 400. Routes match exactly, so a decoded `.`
//!   cannot climb out of anything.
//! - One trailing slash is dropped (`/widgets/` routes as `/widgets`): the original
//!   demo was driven by `ab .../widgets/`, and ab follows no redirects.
//! - An HTTP/1.1 request MUST carry exactly one Host (RFC 9112 section 3.2): else 400.

use crate::http::{HttpError, Response};

/// The methods `OPTIONS *` announces when the server does not say otherwise.
pub const DEFAULT_ALLOW: &str = "GET, HEAD";

/// A request target reduced to what routing needs.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    /// The normalized path, or `*` for `OPTIONS *`.
    pub path: String,
    /// The raw query (after `?`), empty if none.
    pub query: String,
}

/// Parse and normalize `target` as sent with `method`.
pub fn parse(method: &str, target: &str) -> Result<Target, HttpError> {
    let mut out = String::new();
    let path_len = parse_into(method, target, &mut out)?;
    let query = out.split_off(path_len);
    Ok(Target { path: out, query })
}

/// [`parse`] into `out` (cleared first; the fiber server reuses one buffer per
/// connection): the normalized path, then the raw query. Returns the path's length.
pub(crate) fn parse_into(method: &str, target: &str, out: &mut String) -> Result<usize, HttpError> {
    out.clear();
    if target == "*" {
        return if method == "OPTIONS" {
            out.push('*');
            Ok(1)
        } else {
            Err(HttpError::Malformed(format!(
                "the target '*' is only for OPTIONS, not {method}"
            )))
        };
    }
    if is_plain_path(target) {
        out.push_str(target);
        return Ok(target.len());
    }
    parse_general_into(method, target, out)
}

/// The usual target: a path with nothing to decode, split off or drop (no escape, no
/// query, no trailing slash but the root's), which routes as sent.
fn is_plain_path(target: &str) -> bool {
    let plain = |b: &u8| !matches!(b, b'%' | b'?');
    target == "/"
        || (target.starts_with('/')
            && !target.ends_with('/')
            && target.as_bytes().iter().all(plain))
}

/// [`parse_into`] of any target, `out` cleared.
fn parse_general_into(method: &str, target: &str, out: &mut String) -> Result<usize, HttpError> {
    // origin-form, by far the usual, has no scheme to look for.
    let absolute = if target.starts_with('/') {
        None
    } else {
        strip_scheme(target)
    };
    let origin = match absolute {
        // absolute-form: the path after the authority, `/` when there is none.
        Some(rest) => match rest.find(['/', '?']) {
            Some(at) if rest.as_bytes()[at] == b'/' => &rest[at..],
            Some(at) => return parse_into(method, &format!("/{}", &rest[at..]), out),
            None => "/",
        },
        None => target,
    };
    if !origin.starts_with('/') {
        return Err(HttpError::Malformed(format!(
            "request target '{target}' must be a path starting with '/' (or http://host/path)"
        )));
    }
    // A byte search: paths are short, and `split_once`'s searcher costs more to set
    // up than this loop costs to run.
    let (path, query) = match origin.bytes().position(|b| b == b'?') {
        Some(at) => (&origin[..at], &origin[at + 1..]),
        None => (origin, ""),
    };
    normalize_path_into(path, out)?;
    let path_len = out.len();
    out.push_str(query);
    Ok(path_len)
}

/// `http://` or `https://` (any case) cut off, or `None` if `target` has no scheme.
fn strip_scheme(target: &str) -> Option<&str> {
    ["http://", "https://"].iter().find_map(|scheme| {
        let head = target.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme)
            .then(|| &target[scheme.len()..])
    })
}

/// Decode escapes of unreserved characters, keep the rest, refuse `%00` and broken
/// escapes, and drop one trailing slash (not the root's): appended to `out`, which
/// holds nothing else of the path.
fn normalize_path_into(path: &str, out: &mut String) -> Result<(), HttpError> {
    let start = out.len();
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            // The run up to the next escape, copied as sent (non-ASCII included: a `%`
            // is ASCII, so the run ends on a character boundary). One copy per run,
            // not per character: most paths have no escape at all.
            let run = bytes[i..]
                .iter()
                .position(|&b| b == b'%')
                .unwrap_or(bytes.len() - i);
            out.push_str(&path[i..i + run]);
            i += run;
            continue;
        }
        let escape = bytes.get(i + 1..i + 3).unwrap_or_default();
        let value = match escape {
            [h, l] => hex(*h).zip(hex(*l)).map(|(h, l)| h << 4 | l),
            _ => None,
        };
        match value {
            None => {
                return Err(HttpError::Malformed(format!(
                    "the path '{path}' has a broken percent-escape: write '%' as '%25'"
                )))
            }
            Some(0) => {
                return Err(HttpError::Malformed(format!(
                    "the path '{path}' contains %00 (NUL), which no route has"
                )))
            }
            Some(b) if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => out.push(b as char),
            Some(_) => out.push_str(&path[i..i + 3]),
        }
        i += 3;
    }
    if out.len() - start > 1 && out.ends_with('/') {
        out.pop();
    }
    Ok(())
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// An HTTP/1.1 request needs exactly one Host header; HTTP/1.0 may go without. Any
/// Host sent must be a `host[:port]` (RFC 3986 characters, no `/`, `@`, space).
/// `hosts` is walked once, not collected: the fiber server passes its parsed headers
/// filtered, with no allocation per request. A wrong count is reported before a bad
/// value.
pub fn check_host<'a, I>(minor_version: u8, hosts: I) -> Result<(), HttpError>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut count = 0usize;
    let mut bad = None;
    for host in hosts {
        count += 1;
        if bad.is_none() && !host.bytes().all(|b| HOST_BYTES[usize::from(b)]) {
            bad = Some(host);
        }
    }
    if minor_version >= 1 && count != 1 {
        return Err(HttpError::Malformed(format!(
            "an HTTP/1.1 request needs exactly one Host header, this one has {count}"
        )));
    }
    match bad {
        Some(bad) => Err(HttpError::Malformed(format!(
            "the Host header '{bad}' is not a host[:port]"
        ))),
        None => Ok(()),
    }
}

/// The bytes a Host may hold: RFC 3986's unreserved, sub-delims, `:` and `[` `]` for
/// a port and an IPv6 literal, and `%` for its escapes; one lookup per byte.
const HOST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || {
            let mut i = 0;
            let mut found = false;
            while i < HOST_PUNCTUATION.len() {
                found |= HOST_PUNCTUATION[i] == c;
                i += 1;
            }
            found
        };
        b += 1;
    }
    table
};

/// The punctuation of [`HOST_BYTES`].
const HOST_PUNCTUATION: &[u8] = b"-._~!$&'()*+,;=:[]%";

/// The answer to `OPTIONS *`: what the server as a whole allows.
pub fn options_star(allow: &str) -> Response {
    Response::text(200, "").header("Allow", allow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(t: &str) -> Result<String, u16> {
        parse("GET", t).map(|t| t.path).map_err(|e| e.status())
    }

    #[test]
    fn the_three_forms_a_server_accepts() {
        assert_eq!(
            parse("GET", "/a?b=c").unwrap(),
            Target {
                path: "/a".into(),
                query: "b=c".into()
            }
        );
        assert_eq!(path("http://x/hello"), Ok("/hello".into()));
        assert_eq!(path("HTTP://x:80/hello/"), Ok("/hello".into()));
        assert_eq!(path("https://x"), Ok("/".into()));
        assert_eq!(parse("GET", "http://x?q=1").unwrap().query, "q=1");
        assert_eq!(parse("OPTIONS", "*").unwrap().path, "*");
        assert_eq!(path("*"), Err(400));
        assert_eq!(path("x:443"), Err(400));
        assert_eq!(path("ftp://x/y"), Err(400));
    }

    #[test]
    fn only_unreserved_escapes_are_decoded() {
        assert_eq!(path("/he%6C%6Co"), Ok("/hello".into()));
        assert_eq!(path("/%7E%2d%2E_"), Ok("/~-._".into()));
        assert_eq!(path("/widgets%2Fhttp"), Ok("/widgets%2Fhttp".into()));
        assert_eq!(path("/a%20b"), Ok("/a%20b".into()));
        assert_eq!(path("/ü"), Ok("/ü".into()));
        for bad in ["/a%00", "/a%zz", "/a%4", "/a%", "/%%41"] {
            assert_eq!(path(bad), Err(400), "{bad}");
        }
    }

    /// The shortcut for a plain path gives what the general parse gives, and every
    /// target it takes is one the general parse keeps as sent.
    #[test]
    fn a_plain_path_parses_as_the_general_parse_has_it() {
        let targets = [
            "/",
            "/hello",
            "/a/b.c",
            "/caf\u{e9}",
            "//",
            "/a/",
            "/a?",
            "/a?b=c",
            "/%41",
            "/a%2Fb",
            "http://x/y",
            "a",
            "",
            "/a#b",
            "/a//b",
        ];
        for target in targets {
            let (mut quick, mut general) = (String::from("old"), String::new());
            let q = parse_into("GET", target, &mut quick).map_err(|e| e.to_string());
            let g = parse_general_into("GET", target, &mut general).map_err(|e| e.to_string());
            assert_eq!((&q, &quick), (&g, &general), "{target}");
            if is_plain_path(target) {
                assert_eq!((q, quick.as_str()), (Ok(target.len()), target), "{target}");
            }
        }
    }

    #[test]
    fn one_trailing_slash_is_dropped() {
        assert_eq!(path("/widgets/"), Ok("/widgets".into()));
        assert_eq!(path("/widgets/http/"), Ok("/widgets/http".into()));
        assert_eq!(path("/"), Ok("/".into()));
        assert_eq!(path("//"), Ok("/".into()));
        assert_eq!(path("/a//"), Ok("/a/".into()));
    }

    #[test]
    fn host_is_required_once_in_1_1_only() {
        let no_hosts = || std::iter::empty::<&str>();
        assert!(check_host(1, ["x"]).is_ok());
        assert!(check_host(1, ["[::1]:8080"]).is_ok());
        assert!(check_host(1, [""]).is_ok());
        assert!(check_host(0, no_hosts()).is_ok());
        assert!(check_host(1, no_hosts()).is_err());
        assert!(check_host(1, ["x", "x"]).is_err());
        // A wrong count is what is said, even when a value is bad too.
        let both = check_host(1, ["a b", "x"]).unwrap_err().to_string();
        assert!(both.contains("exactly one Host header"), "{both}");
        assert!(check_host(0, ["a b"]).is_err());
        assert!(check_host(1, ["x/y"]).is_err());
        assert!(check_host(1, ["a-b.c_d~e!f$g&h'i(j)k*l+m,n;o=p:80"]).is_ok());
        assert!(check_host(1, ["[fe80::1%25eth0]:8080"]).is_ok());
        for bad in ["u@x", "x y", "x\"y", "x<y", "x#y", "x?y", "ü"] {
            assert!(check_host(1, [bad]).is_err(), "{bad}");
        }
    }
}
