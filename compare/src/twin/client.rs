//! The twin's outgoing HTTP client: hyper-util's pooled client (keep-alive, at most
//! `max_idle_per_host` idle connections per upstream), with the fiber client's limits:
//! a connect timeout, a timeout for the response head, one for the whole exchange,
//! and a cap on the body. Failures are [`Error`]s, so `/widgets/http` and
//! `/twitter` answer 502/504 with the same messages on both runtimes.

use std::error::Error as _;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::twin::gauge::Held;
use fiber_web::client::ClientStats;
use fiber_web::client::{ClientResponse, Url};
use fiber_web::Error;
use fiberstack::config::ClientLimits;

/// The client: one per server, shared by every handler.
pub struct Client {
    client: hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>,
    limits: ClientLimits,
    requests: AtomicU64,
    errors: AtomicU64,
    in_flight: AtomicUsize,
}

impl Client {
    pub fn new(limits: ClientLimits) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(limits.connect_timeout));
        connector.set_nodelay(true);
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(limits.max_idle_per_host)
            .build(connector);
        Client {
            client,
            limits,
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// GET `url` and read the whole response, within every limit.
    pub async fn get(&self, url: &Url) -> Result<ClientResponse, Error> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        // Given back even if this future is dropped mid-exchange.
        let (_in_flight, _) = Held::enter(&self.in_flight);
        let total = self.limits.total_timeout;
        let result = match tokio::time::timeout(total, self.exchange(url)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout {
                phase: "total",
                limit: total,
            }),
        };
        if result.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn exchange(&self, url: &Url) -> Result<ClientResponse, Error> {
        // The URL's address was resolved at start-up; the Host header keeps its name.
        let req = hyper::Request::get(format!("http://{}{}", url.addr, url.target))
            .header(hyper::header::HOST, &url.host)
            .body(Empty::new())
            .map_err(|e| Error::BadUrl(format!("'{url}': {e}")))?;
        let read = self.limits.read_timeout;
        let resp = match tokio::time::timeout(read, self.client.request(req)).await {
            Err(_) => {
                return Err(Error::Timeout {
                    phase: "response",
                    limit: read,
                })
            }
            Ok(Err(e)) => return Err(self.request_error(url, e)),
            Ok(Ok(resp)) => resp,
        };
        let (head, body) = resp.into_parts();
        let limit = self.limits.max_response_bytes;
        let body = Limited::new(body, limit)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    Error::TooLarge { limit }
                } else {
                    Error::Broken {
                        phase: "exchange",
                        source: io::Error::other(e.to_string()),
                    }
                }
            })?
            .to_bytes();
        let headers = head
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        Ok(ClientResponse {
            status: head.status.as_u16(),
            headers,
            body: body.to_vec(),
        })
    }

    /// hyper-util's error as the fiber client's: connect failures and timeouts by name.
    fn request_error(&self, url: &Url, e: hyper_util::client::legacy::Error) -> Error {
        let io = io_source(&e);
        if e.is_connect() {
            return match io {
                Some(io) if io.kind() == io::ErrorKind::TimedOut => Error::Timeout {
                    phase: "connect",
                    limit: self.limits.connect_timeout,
                },
                Some(io) => Error::Connect {
                    addr: url.addr,
                    source: io::Error::new(io.kind(), io.to_string()),
                },
                None => Error::Connect {
                    addr: url.addr,
                    source: io::Error::other(e.to_string()),
                },
            };
        }
        match io {
            Some(io) => Error::Broken {
                phase: "exchange",
                source: io::Error::new(io.kind(), io.to_string()),
            },
            None => Error::BadResponse(match e.source() {
                Some(source) => source.to_string(),
                None => e.to_string(),
            }),
        }
    }

    /// The counters, as the fiber server's client reports them (hyper-util keeps
    /// its connection counts to itself: those are 0).
    pub fn stats(&self) -> ClientStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClientStats {
            requests: get(&self.requests),
            errors: get(&self.errors),
            in_flight: self.in_flight.load(Ordering::Relaxed) as u64,
            ..ClientStats::default()
        }
    }
}

/// The first `io::Error` in `e`'s chain of sources.
fn io_source<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return Some(io);
        }
        next = err.source();
    }
    None
}
