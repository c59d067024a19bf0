//! A coroutine-native HTTP/1.1 client for real upstreams: methods, headers and bodies
//! (JSON through serde), `https://` through rustls, host names resolved at each call
//! through a TTL cache, keep-alive connections per origin, a timeout for every phase
//! and a deadline over all of them, and a cap on the response size.
//!
//! Called from a fiber, a call looks blocking and yields to may while it waits. Every
//! may call (connect, read, write, a socket's drop, a wait for DNS) runs on the
//! carrier's stack through [`fiber_pool::on_carrier`] (sockets are
//! [`fiber_pool::net::CarrierStream`]s); DNS runs on a few OS threads of its own
//! (`resolve.rs`), never on a fiber or a scheduler thread; rustls runs on the fiber and
//! moves its bytes through the carrier (`conn.rs`). A connection, with its buffers
//! and TLS state, lives in a [`fiber_pool::Lent`] while a call uses it, so a stack
//! overflow mid-call closes it instead of leaking it, and the in-flight count is
//! given back the same way.
//!
//! ```no_run
//! use std::time::Duration;
//! use fiber_web::config::ClientLimits;
//! use fiber_web::client::{HttpClient, Method, Url};
//! use fiber_web::{Request, Response};
//!
//! struct State {
//!     http: HttpClient,
//!     todos: Url,
//! }
//!
//! // A handler: it runs on a fiber, and the call yields to may while it waits.
//! fn create(state: &State, _req: &Request) -> Response {
//!     let sent = state
//!         .http
//!         .request(Method::Post, &state.todos)
//!         .header("Authorization", "Bearer t0ken")
//!         .json(&serde_json::json!({ "title": "milk" }))
//!         .timeout(Duration::from_secs(2))
//!         .send();
//!     match sent {
//!         Ok(resp) if resp.is_success() => Response::text(201, resp.text().into_owned()),
//!         Ok(resp) => Response::error(502, format!("{} answered {}", state.todos, resp.status)),
//!         // 504 for a timeout, else 502; the message names the phase.
//!         Err(e) => Response::error(e.gateway_status(), format!("{}: {e}", state.todos)),
//!     }
//! }
//!
//! let state = State {
//!     http: HttpClient::new(ClientLimits::default()),
//!     todos: Url::parse("https://api.example.com/todos").unwrap(),
//! };
//! # let _ = (state, create);
//! ```
//!
//! Layout: `url.rs` ([`Url`]), `request.rs` ([`Method`], [`RequestBuilder`]),
//! `response.rs` ([`ClientResponse`]), `phase.rs` ([`phase`]: what a failed call's
//! [`Error`] names),
//! `deadline.rs` (a phase's deadline within the call's), `resolve.rs` (the DNS threads
//! and cache), `pool.rs` (idle connections), `conn.rs` (one connection, plain or TLS),
//! `tls.rs` (rustls' configuration), `exchange.rs` (one request and its response),
//! `follow.rs` (a call's cancel hook, and the gate that keeps it off a connection
//! given back).

mod conn;
mod deadline;
mod exchange;
mod follow;
pub mod phase;
mod pool;
mod request;
mod resolve;
mod response;
mod tls;
mod url;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use fiber_pool::{CancelReason, Context};

use fiber_pool::Lent;

pub use request::{Method, RequestBuilder};
pub use resolve::{system_lookup, LookupFn};
pub use response::ClientResponse;
pub use tls::webpki_roots;
pub use url::{Scheme, Url};

use crate::config::ClientLimits;
use crate::Error;
use conn::{Conn, Failure};
use deadline::Deadline;
use exchange::{Exchange, Failed};
use follow::follow;
use pool::Pool;
use resolve::Resolver;

/// Counters of the client.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    errors: AtomicU64,
    connects: AtomicU64,
    reused: AtomicU64,
    in_flight: AtomicU64,
    tls_handshakes: AtomicU64,
}

/// One call in flight: counted while it lives, given back when dropped, which its
/// `Lent` does on an overflow too.
struct InFlight(Arc<Counters>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection `make` opens or takes, in a `Lent` made first, with a second handle
/// on its socket kept beside it. Should an overflow leak the connection (it may be in
/// the middle of a write, or in use by a thread the job started: see
/// `fiber_pool::Abandoned`), that handle shuts the socket down, so the upstream sees
/// the connection end; the leaked connection keeps its own fd, for the rest of the
/// process (closing an fd that something may still use lets its number be reused
/// under it). Cost: a `dup` per call, beside the call's round trip.
fn lend<E: Send>(make: impl FnOnce() -> Result<Conn, E> + Send) -> Result<Lent<Conn>, E> {
    let beside: Arc<std::sync::Mutex<Option<std::net::TcpStream>>> = Arc::default();
    let keep = Arc::clone(&beside);
    Lent::acquire(
        move || {
            let conn = make()?;
            *keep
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = conn.shutdown_handle().ok();
            Ok(conn)
        },
        move |_leaked| {
            let socket = beside
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(socket) = socket {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
        },
    )
}

/// The client: share one per process (its pool, DNS cache and TLS sessions are
/// shared by every call).
pub struct HttpClient {
    limits: ClientLimits,
    pool: Pool,
    resolver: Resolver,
    tls: Arc<rustls::ClientConfig>,
    counters: Arc<Counters>,
}

/// Builds an [`HttpClient`] with its own trust or resolver.
#[must_use]
pub struct ClientBuilder {
    limits: ClientLimits,
    roots: Option<rustls::RootCertStore>,
    lookup: Option<Arc<LookupFn>>,
}

impl ClientBuilder {
    /// Trust these roots for `https://` instead of Mozilla's ([`webpki_roots()`]): a
    /// private CA, or a test's own certificate. Verification is never turned off.
    pub fn root_certificates(mut self, roots: rustls::RootCertStore) -> Self {
        self.roots = Some(roots);
        self
    }

    /// Resolve names with `lookup` instead of the system resolver ([`system_lookup`]):
    /// a name-to-addresses function that may block, since it runs on the resolver's
    /// threads; its answers are cached like the system's.
    pub fn lookup(
        mut self,
        lookup: impl Fn(&str) -> io::Result<Vec<IpAddr>> + Send + Sync + 'static,
    ) -> Self {
        self.lookup = Some(Arc::new(lookup));
        self
    }

    /// The client, with no connection open and no resolver thread started yet.
    pub fn build(self) -> HttpClient {
        let limits = self.limits;
        let lookup = self.lookup.unwrap_or_else(|| Arc::new(system_lookup));
        let roots = self.roots.unwrap_or_else(webpki_roots);
        HttpClient {
            pool: Pool::new(&limits),
            resolver: Resolver::new(&limits, lookup),
            tls: tls::config(roots, limits.tls_session_cache),
            counters: Arc::default(),
            limits,
        }
    }
}

impl HttpClient {
    /// A client with `limits`, Mozilla's roots and the system resolver.
    pub fn new(limits: ClientLimits) -> HttpClient {
        HttpClient::builder(limits).build()
    }

    /// A client to configure further (its roots, its resolver).
    pub fn builder(limits: ClientLimits) -> ClientBuilder {
        ClientBuilder {
            limits,
            roots: None,
            lookup: None,
        }
    }

    /// GET `url` and read the whole response, within the limits.
    pub fn get(&self, url: &Url) -> Result<ClientResponse, Error> {
        self.request(Method::Get, url).send()
    }

    /// A request to build: headers, a body, a timeout, then
    /// [`send`](RequestBuilder::send).
    pub fn request<'a>(&'a self, method: Method, url: &'a Url) -> RequestBuilder<'a> {
        RequestBuilder::new(self, method, url)
    }

    /// The limits this client was made with.
    pub fn limits(&self) -> &ClientLimits {
        &self.limits
    }

    /// [`RequestBuilder::send`]: count the call, run it, count how it ended.
    fn send(&self, mut req: RequestBuilder<'_>) -> Result<ClientResponse, Error> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        // Made before the count is taken (making it can overflow: it checks its stack
        // margin); from then on an overflow inside leaks it, and its owner takes the
        // count back from the counters it kept beside.
        let counters = Arc::clone(&self.counters);
        let in_flight = Lent::new(InFlight(Arc::clone(&self.counters)), move |_leaked| {
            counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        self.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = self.execute(&mut req);
        drop(in_flight);
        if result.is_err() {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// One call under the calling job's context, if it has one: the context's deadline
    /// bounds the call as its own deadline does, and its cancellation abandons the
    /// call (see [`follow`]).
    fn execute(&self, req: &mut RequestBuilder<'_>) -> Result<ClientResponse, Error> {
        let ctx = fiber_pool::current();
        let deadline = match (req.deadline, ctx.as_ref().and_then(|c| c.deadline())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let result = self.execute_until(req, deadline, ctx.as_ref());
        match ctx.and_then(|c| c.reason()) {
            Some(reason) if result.is_err() && reason != CancelReason::DeadlinePassed => {
                Err(Error::Cancelled { reason })
            }
            _ => result,
        }
    }

    fn execute_until(
        &self,
        req: &mut RequestBuilder<'_>,
        deadline: Option<Instant>,
        ctx: Option<&Context>,
    ) -> Result<ClientResponse, Error> {
        let start = Instant::now();
        let url = req.url;
        let mut call = Deadline::after(
            start,
            phase::TOTAL,
            req.timeout.unwrap_or(self.limits.total_timeout),
        );
        if let Some(at) = deadline {
            call = call.min(Deadline::at(
                at,
                phase::DEADLINE,
                at.saturating_duration_since(start),
            ));
        }
        if let Some(reason) = ctx.and_then(Context::reason) {
            return Err(Error::Cancelled { reason });
        }
        let wire = req.encode()?;
        let idempotent = req.method.is_idempotent();
        let exchange = Exchange {
            limits: &self.limits,
            call,
            method: req.method,
            host: url.host_name(),
            close: req.close,
        };
        if let Some(mut conn) = self.take_idle(url) {
            // A request that must not be sent twice goes only on a connection the
            // server has not closed meanwhile (one peek); another is sent again on a
            // new connection if this one turns out closed.
            if idempotent || !conn.has_news() {
                self.counters.reused.fetch_add(1, Ordering::Relaxed);
                if let Some(ctx) = ctx {
                    follow(ctx, &mut conn);
                }
                match exchange.run(&mut conn, &wire) {
                    Ok((response, reusable)) => {
                        self.finish(url, conn, reusable);
                        return Ok(response);
                    }
                    Err(Failed::Closed(_)) if idempotent => {}
                    Err(Failed::Closed(e) | Failed::Error(e)) => return Err(e),
                }
            }
        }
        let mut conn = self.open(url, call)?;
        if let Some(ctx) = ctx {
            follow(ctx, &mut conn);
        }
        match exchange.run(&mut conn, &wire) {
            Ok((response, reusable)) => {
                self.finish(url, conn, reusable);
                Ok(response)
            }
            Err(Failed::Closed(e) | Failed::Error(e)) => Err(e),
        }
    }

    /// An idle connection to `url`'s origin, taken straight into a `Lent` on the
    /// carrier (see `pool.rs`), with a handle on its socket kept beside it ([`lend`]).
    fn take_idle(&self, url: &Url) -> Option<Lent<Conn>> {
        let pool = &self.pool;
        let origin = url.origin();
        lend(|| pool.take(origin).ok_or(())).ok()
    }

    /// Back to the pool if `reusable` and its cancel hook has not shut it down, else
    /// closed. Once the hook's gate is closed here, a hook still to run leaves the
    /// connection alone (see `follow.rs`).
    fn finish(&self, url: &Url, mut conn: Lent<Conn>, reusable: bool) {
        let shut = conn.following.take().is_some_and(follow::Following::close);
        if !reusable || shut {
            return drop(conn);
        }
        conn.park();
        // Stack for the few frames between taking the connection out of its `Lent`
        // and the carrier, checked while it is still in the `Lent`.
        fiber_pool::check_stack(fiber_pool::lent::LENT_STACK_MARGIN);
        let conn = conn.into_inner();
        let (pool, origin) = (&self.pool, url.origin());
        fiber_pool::on_carrier(move || pool.put(origin, conn));
    }

    /// A new connection to `url`: resolve (unless the host is an IP literal), connect
    /// to each address in turn until one answers, and for `https://` the handshake.
    fn open(&self, url: &Url, call: Deadline) -> Result<Lent<Conn>, Error> {
        let literal = url.ip();
        let resolved;
        let ips: &[IpAddr] = match &literal {
            Some(ip) => std::slice::from_ref(ip),
            None => {
                let dns = call.phase(phase::DNS, self.limits.dns_timeout);
                resolved = self.resolver.resolve(url.host_name(), dns)?;
                &resolved
            }
        };
        let connect = call.phase(phase::CONNECT, self.limits.connect_timeout);
        let mut refused = None;
        for ip in ips {
            let addr = SocketAddr::new(*ip, url.port());
            let wait = connect.wait().ok_or_else(|| connect.expired())?;
            self.counters.connects.fetch_add(1, Ordering::Relaxed);
            // Not may's TcpStream::connect_timeout: it races (see fiber_pool::net).
            // This one runs on the carrier's stack, like every may call of a
            // CarrierStream, and the socket goes straight into its `Lent`.
            let made = lend(|| fiber_pool::net::connect(&addr, wait).map(Conn::new));
            match made {
                Ok(mut conn) => {
                    conn.set_nodelay();
                    if url.scheme() == Scheme::Https {
                        self.handshake(&mut conn, url, call)?;
                    }
                    return Ok(conn);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                    ) =>
                {
                    return Err(connect.expired())
                }
                Err(source) => refused = Some(Error::Connect { addr, source }),
            }
        }
        Err(refused.unwrap_or_else(|| Error::Resolve {
            host: url.host_name().to_string(),
            source: io::Error::new(io::ErrorKind::NotFound, "the name has no address"),
        }))
    }

    fn handshake(&self, conn: &mut Conn, url: &Url, call: Deadline) -> Result<(), Error> {
        let name = tls::server_name(url.host_name()).map_err(Error::BadUrl)?;
        let deadline = call.phase(phase::TLS, self.limits.tls_handshake_timeout);
        self.counters.tls_handshakes.fetch_add(1, Ordering::Relaxed);
        conn.handshake(Arc::clone(&self.tls), name, deadline)
            .map_err(|f| match f {
                Failure::TimedOut => deadline.expired(),
                Failure::Io(source) => Error::Broken {
                    phase: phase::TLS,
                    source,
                },
                Failure::Tls(source) => Error::Tls {
                    host: url.host_name().to_string(),
                    phase: phase::TLS,
                    source,
                },
            })
    }

    /// The counters now.
    pub fn stats(&self) -> ClientStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (dns_lookups, dns_cache_hits) = self.resolver.counts();
        ClientStats {
            requests: get(&c.requests),
            errors: get(&c.errors),
            in_flight: get(&c.in_flight),
            connects: get(&c.connects),
            reused_connections: get(&c.reused),
            idle_connections: self.pool.len() as u64,
            dns_lookups,
            dns_cache_hits,
            tls_handshakes: get(&c.tls_handshakes),
        }
    }
}

/// The outgoing client's counters at one moment, as `/stats` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClientStats {
    /// Requests sent.
    pub requests: u64,
    /// Requests that failed (connect, timeout, a bad response).
    pub errors: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// TCP connections opened (attempts, one per address tried).
    pub connects: u64,
    /// Requests sent on a kept-alive connection.
    pub reused_connections: u64,
    /// Kept-alive connections idle now.
    pub idle_connections: u64,
    /// Host names looked up on the resolver's threads (cache misses).
    pub dns_lookups: u64,
    /// Host names answered from the DNS cache.
    pub dns_cache_hits: u64,
    /// TLS handshakes started.
    pub tls_handshakes: u64,
}
