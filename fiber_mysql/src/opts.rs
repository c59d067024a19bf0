//! Connection options and the `mysql://user:password@host:port/db` URL that carries them.
//!
//! `may::net::TcpStream::connect` resolves host names with *blocking* DNS,
//! which would stall every fiber on the worker. So a host name is resolved
//! once, here, when the URL is parsed (at start-up, outside fibers), and a
//! [`Conn`](crate::Conn) only ever connects to an IP address.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::error::{Error, Result};

/// Default TCP connect + handshake timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default limit on the silence between two packets of one response.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and how to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct Opts {
    /// An IP address (a name is resolved by [`Opts::from_url`]).
    pub host: String,
    /// TCP port, 3306 by default.
    pub port: u16,
    /// User name.
    pub user: String,
    /// Password (empty: none).
    pub password: String,
    /// Default database (`USE db` at connect).
    pub db: Option<String>,
    /// TCP connect plus handshake and authentication.
    pub connect_timeout: Duration,
    /// Longest silence accepted between two packets (and for each write).
    pub read_timeout: Duration,
    /// A query running longer is stopped with `KILL QUERY` and fails with
    /// [`Error::QueryTimeout`]. `None`: only `read_timeout` applies.
    pub query_timeout: Option<Duration>,
    /// The port a pool sends `KILL QUERY` to. `None`: the server's `extra_port`
    /// when it has one (a pool asks for `@@extra_port` when it starts), else `port`.
    /// A MariaDB `extra_port` is served one thread per connection even while every
    /// thread of its pool (`thread_handling=pool-of-threads`) is busy, so a kill
    /// there never waits for the pool's stall limit. Set it when the server's own
    /// number is not how this client reaches that port (a container maps it).
    pub kill_port: Option<u16>,
}

impl std::fmt::Debug for Opts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("Opts")
            .field("url", &self.url_redacted())
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("query_timeout", &self.query_timeout)
            .finish()
    }
}

impl Opts {
    /// Options for `user@ip:port` with default timeouts.
    pub fn new(host: impl Into<String>, port: u16, user: impl Into<String>) -> Opts {
        Opts {
            host: host.into(),
            port,
            user: user.into(),
            password: String::new(),
            db: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
            query_timeout: None,
            kill_port: None,
        }
    }

    /// Parses `mysql://user:password@host:port/db?query_timeout_ms=500`.
    ///
    /// User and password may be percent-encoded. A host name is resolved
    /// here, once, with blocking DNS (call this at start-up, not in a fiber).
    /// Query options: `connect_timeout_ms`, `read_timeout_ms`, `query_timeout_ms`,
    /// `kill_port` ([`Opts::kill_port`]).
    pub fn from_url(url: &str) -> Result<Opts> {
        // The `url` crate parses; its errors never quote the input, which may hold
        // the password (a `/` in an unencoded password ends the authority early).
        let parsed = url::Url::parse(url).map_err(|e| {
            Error::Url(match e {
                url::ParseError::RelativeUrlWithoutBase => "it must start with mysql://".into(),
                url::ParseError::InvalidPort => "the port is not a number".into(),
                url::ParseError::EmptyHost => "no host".into(),
                url::ParseError::InvalidIpv6Address => {
                    "the IPv6 address in `[..]` is not valid".into()
                }
                other => format!("not a mysql://user:password@host:port/db URL: {other}"),
            })
        })?;
        if !matches!(parsed.scheme(), "mysql" | "mariadb") {
            return Err(Error::Url("it must start with mysql://".into()));
        }
        let host = parsed
            .host_str()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Error::Url("no host".into()))?;
        let port = parsed.port().unwrap_or(3306);
        let user = match parsed.username() {
            "" if parsed.password().is_none() => "root".to_string(),
            u => percent_decode(u)?,
        };
        let mut opts = Opts::new(resolve_once(host, port)?, port, user);
        opts.password = percent_decode(parsed.password().unwrap_or(""))?;
        let db = percent_decode(parsed.path().trim_start_matches('/'))?;
        opts.db = (!db.is_empty()).then_some(db);
        for (key, value) in parsed.query_pairs() {
            if value.is_empty() {
                return Err(Error::Url(format!("option `{key}` has no value")));
            }
            let ms = || -> Result<Duration> {
                value
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| Error::Url(format!("`{key}` must be milliseconds, not `{value}`")))
            };
            match &*key {
                "connect_timeout_ms" => opts.connect_timeout = ms()?,
                "read_timeout_ms" => opts.read_timeout = ms()?,
                "query_timeout_ms" => opts.query_timeout = Some(ms()?),
                "kill_port" => {
                    let port = value.parse::<u16>().ok().filter(|&p| p != 0);
                    let why = || Error::Url(format!("`kill_port` must be a port, not `{value}`"));
                    opts.kill_port = Some(port.ok_or_else(why)?);
                }
                other => return Err(Error::Url(format!("unknown option `{other}`"))),
            }
        }
        Ok(opts)
    }

    /// The URL with the password replaced by `***`, for logs and error messages.
    pub fn url_redacted(&self) -> String {
        self.url_with_password(if self.password.is_empty() { "" } else { "***" })
    }

    /// The full URL including the password and non-default timeouts
    /// (for handing to a child process); `from_url(url())` gives `self` back.
    pub fn url(&self) -> String {
        let mut url = self.url_with_password(&percent_encode(&self.password));
        let mut options = Vec::new();
        if self.connect_timeout != DEFAULT_CONNECT_TIMEOUT {
            options.push(format!(
                "connect_timeout_ms={}",
                self.connect_timeout.as_millis()
            ));
        }
        if self.read_timeout != DEFAULT_READ_TIMEOUT {
            options.push(format!("read_timeout_ms={}", self.read_timeout.as_millis()));
        }
        if let Some(t) = self.query_timeout {
            options.push(format!("query_timeout_ms={}", t.as_millis()));
        }
        if let Some(port) = self.kill_port {
            options.push(format!("kill_port={port}"));
        }
        if !options.is_empty() {
            url.push('?');
            url.push_str(&options.join("&"));
        }
        url
    }

    fn url_with_password(&self, password: &str) -> String {
        let host = match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => self.host.clone(),
        };
        let pass = if password.is_empty() {
            String::new()
        } else {
            format!(":{password}")
        };
        format!(
            "mysql://{}{pass}@{host}:{}/{}",
            percent_encode(&self.user),
            self.port,
            self.db.as_deref().map(percent_encode).unwrap_or_default()
        )
    }

    /// The socket address to connect to; fails if `host` is not an IP address.
    pub fn socket_addr(&self) -> Result<SocketAddr> {
        let ip: IpAddr = self.host.parse().map_err(|_| {
            Error::Url(format!(
                "host `{}` is not an IP address (may's connect would do blocking DNS \
                 inside a fiber; build Opts with Opts::from_url, which resolves once)",
                self.host
            ))
        })?;
        Ok(SocketAddr::new(ip, self.port))
    }
}

fn resolve_once(host: &str, port: u16) -> Result<String> {
    if host.parse::<IpAddr>().is_ok() {
        return Ok(host.to_string());
    }
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Url(format!("cannot resolve `{host}`: {e}")))?;
    // Prefer IPv4: MariaDB's default bind address and our launcher use it.
    let all: Vec<SocketAddr> = addrs.by_ref().collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .map(|a| a.ip().to_string())
        .ok_or_else(|| Error::Url(format!("`{host}` resolves to no address")))
}

/// Never echoes the text: it may be the password (so may a port, if a `/` in the
/// password ended the authority early).
fn bad_escape() -> String {
    "a `%` in the user, password or database is not followed by two hex digits of UTF-8 \
     (write `%25` for a literal %)"
        .into()
}

/// What [`percent_encode`] leaves as written: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Decode a user, password or database name: every `%` must start an escape (the
/// lenient decoder would keep a stray one as written) and the result must be UTF-8.
fn percent_decode(s: &str) -> Result<String> {
    let escapes_ok = s
        .split('%')
        .skip(1)
        .all(|after| after.len() >= 2 && after.as_bytes()[..2].iter().all(u8::is_ascii_hexdigit));
    if !escapes_ok {
        return Err(Error::Url(bad_escape()));
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|d| d.into_owned())
        .map_err(|_| Error::Url(bad_escape()))
}

fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_url() {
        let o = Opts::from_url(
            "mysql://app:p%40ss@127.0.0.1:3307/shop?query_timeout_ms=250&kill_port=3308",
        )
        .unwrap();
        assert_eq!(o.user, "app");
        assert_eq!(o.password, "p@ss");
        assert_eq!(o.host, "127.0.0.1");
        assert_eq!(o.port, 3307);
        assert_eq!(o.db.as_deref(), Some("shop"));
        assert_eq!(o.query_timeout, Some(Duration::from_millis(250)));
        assert_eq!(o.kill_port, Some(3308));
        assert_eq!(o.url_redacted(), "mysql://app:***@127.0.0.1:3307/shop");
        assert_eq!(Opts::from_url(&o.url()).unwrap(), o);
        assert!(!format!("{o:?}").contains("p@ss"));
    }

    #[test]
    fn resolves_names_once_and_defaults_the_port() {
        let o = Opts::from_url("mysql://root@localhost").unwrap();
        assert!(o.host.parse::<IpAddr>().is_ok(), "{}", o.host);
        assert_eq!(o.port, 3306);
        assert_eq!(o.db, None);
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "postgres://x@1.2.3.4/db",
            "mysql://u@1.2.3.4:notaport/db",
            "mysql://u@1.2.3.4/db?nope=1",
            "mysql://u@/db",
            "mysql://u@[::1/db",
            "mysql://u:p%zz@1.2.3.4/db",
            "mysql://u@1.2.3.4/db?read_timeout_ms",
            "mysql://u@1.2.3.4/db?kill_port=0",
            "mysql://u@1.2.3.4/db?kill_port=70000",
            "localhost:3306",
        ] {
            assert!(matches!(Opts::from_url(bad), Err(Error::Url(_))), "{bad}");
        }
        assert!(Opts::new("db.example", 1, "u").socket_addr().is_err());
    }
}
