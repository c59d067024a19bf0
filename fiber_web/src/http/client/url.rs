//! [`Url`]: an upstream's `http://` or `https://` URL, parsed once, with what every call
//! needs precomputed (the name to resolve, the Host header, the keep-alive pool's key),
//! so that a call allocates nothing to find its connection.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use crate::Error;

/// The two schemes the client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP/1.1 over TCP (default port 80).
    Http,
    /// HTTP/1.1 over TLS (rustls; default port 443).
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// An upstream URL. The host keeps its name: the fiber client resolves it at each call
/// (through its DNS cache), so a name that moves to another address is followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// The host as written, with the port if one was written: the Host header.
    pub host: String,
    /// The address for a client that connects without resolving (the async twin's):
    /// the host itself when it is an IP address, 127.0.0.1 for `localhost`, the first
    /// address [`Url::parse_resolving`] found at start-up, or for a name that
    /// [`Url::parse`] did not resolve, the unspecified address 0.0.0.0 with the port.
    /// The fiber client connects to it only for an IP-literal host; a name it
    /// resolves at each call.
    pub addr: SocketAddr,
    /// Path and query, starting with `/`.
    pub target: String,
    scheme: Scheme,
    /// The host without port or brackets, lower-cased: what is resolved, and the TLS
    /// server name.
    name: String,
    /// The host's address when it is an IP literal (no DNS at all then).
    ip: Option<IpAddr>,
    port: u16,
    /// `scheme://name:port`: the keep-alive pool's key (one pool per origin).
    origin: String,
}

impl Url {
    /// Parse without any DNS. A host name is kept as a name and resolved by the fiber
    /// client at each call.
    pub fn parse(s: &str) -> Result<Url, Error> {
        Self::parse_with(s, |name, port| {
            Ok(if name.eq_ignore_ascii_case("localhost") {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)
            } else {
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)
            })
        })
    }

    /// Parse, and check that a host name resolves now with the system resolver, keeping
    /// its first address in [`Url::addr`]. This blocks the thread: call it at start-up,
    /// never from a fiber. The fiber client still resolves the name at each call.
    pub fn parse_resolving(s: &str) -> Result<Url, Error> {
        Self::parse_with(s, |name, port| {
            (name, port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve '{name}': {e}"))?
                .next()
                .ok_or_else(|| format!("'{name}' has no address"))
        })
    }

    fn parse_with(
        s: &str,
        addr_of_name: impl FnOnce(&str, u16) -> Result<SocketAddr, String>,
    ) -> Result<Url, Error> {
        let bad = |why: String| Error::BadUrl(format!("'{s}': {why}"));
        let shape = || bad("expected http[s]://host[:port]/path".into());
        // The `url` crate (WHATWG) parses; what it accepts beyond what an upstream
        // address should be (another scheme, credentials, `http:///x` read as host `x`)
        // is refused here, each with what to change.
        let (scheme, rest) = if let Some(rest) = s.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = s.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else {
            return Err(bad("only http:// and https:// URLs are supported".into()));
        };
        if rest.is_empty() || rest.starts_with(['/', '?', '#']) {
            return Err(shape());
        }
        let url = url::Url::parse(s).map_err(|e| match e {
            url::ParseError::InvalidPort => bad("the port is not a number from 0 to 65535".into()),
            url::ParseError::EmptyHost => shape(),
            other => bad(format!("{other}")),
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(shape());
        }
        let host = url.host_str().ok_or_else(shape)?;
        let port = url.port().unwrap_or(scheme.default_port());
        // The url crate lower-cases names and writes IPv6 hosts in brackets.
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let ip = name.parse::<IpAddr>().ok();
        let addr = match ip {
            Some(ip) => SocketAddr::new(ip, port),
            None => addr_of_name(name, port).map_err(bad)?,
        };
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        Ok(Url {
            host: match url.port() {
                Some(p) => format!("{host}:{p}"),
                None => host.to_string(),
            },
            addr,
            target,
            scheme,
            name: name.to_string(),
            ip,
            port,
            origin: format!("{}://{host}:{port}", scheme.as_str()),
        })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host without port or brackets, lower-cased: what is resolved, and the name
    /// a TLS certificate must be valid for.
    pub fn host_name(&self) -> &str {
        &self.name
    }

    /// The port (written, or the scheme's default).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host's address if the host is an IP literal (then no DNS is done).
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// `scheme://host:port`, the key of the keep-alive pool.
    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme.as_str(), self.host, self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_without_dns() {
        let u = Url::parse("http://127.0.0.1:3000/upstream/search.json?q=rails+3").unwrap();
        assert_eq!(u.addr, "127.0.0.1:3000".parse().unwrap());
        assert_eq!(u.target, "/upstream/search.json?q=rails+3");
        assert_eq!(u.host, "127.0.0.1:3000");
        assert_eq!(u.ip(), Some("127.0.0.1".parse().unwrap()));
        let u = Url::parse("http://localhost").unwrap();
        assert_eq!((u.addr.port(), u.target.as_str()), (80, "/"));
        assert_eq!(
            (u.host_name(), u.ip()),
            ("localhost", None),
            "a name, resolved per call"
        );
        let u = Url::parse("http://[::1]:8080?x=1").unwrap();
        assert_eq!((u.addr.port(), u.target.as_str()), (8080, "/?x=1"));
        assert_eq!(u.host_name(), "::1");
        assert_eq!(u.origin(), "http://[::1]:8080");
    }

    #[test]
    fn names_stay_names_and_https_has_its_port() {
        let u = Url::parse("https://API.Example.com/v1/search?q=x").unwrap();
        assert_eq!(u.scheme(), Scheme::Https);
        assert_eq!(
            (u.host_name(), u.port(), u.ip()),
            ("api.example.com", 443, None)
        );
        assert_eq!(u.host, "api.example.com");
        assert_eq!(u.origin(), "https://api.example.com:443");
        assert_eq!(u.to_string(), "https://api.example.com/v1/search?q=x");
        assert!(u.addr.ip().is_unspecified(), "not resolved: {}", u.addr);
        let u = Url::parse("http://example.com:8080/").unwrap();
        assert_eq!((u.port(), u.host.as_str()), (8080, "example.com:8080"));
    }

    #[test]
    fn unusable_urls_say_why() {
        for (s, why) in [
            ("ftp://x/", "only http:// and https://"),
            ("http://127.0.0.1:http/", "not a number"),
            ("http:///x", "expected"),
            ("https://", "expected"),
            ("http://u:secret@127.0.0.1/", "expected"),
            ("http://127.0.0.1:99999/", "not a number"),
        ] {
            let e = Url::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
