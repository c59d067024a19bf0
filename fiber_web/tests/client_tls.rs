//! `https://` against a local rustls server whose certificate is made at test time and
//! trusted through the client's root store (verification stays on): requests and
//! bodies round-trip and the session is kept alive; a certificate for another name, an
//! untrusted one, a server that is not TLS and one that never answers the handshake
//! each fail in the TLS phase; a close-delimited body counts only with close_notify.

mod upstream;

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_web::client::{phase, HttpClient, Method, Url};
use fiber_web::config::ClientLimits;
use fiber_web::Error;
use upstream::tls::{self, Cert};
use upstream::{fibers, hold_until_closed, on_fiber, respond, Next, Upstream};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// A client that trusts `cert` and resolves every `.test` name to 127.0.0.1.
fn client_trusting(cert: &Cert, limits: ClientLimits) -> Arc<HttpClient> {
    Arc::new(
        HttpClient::builder(limits)
            .root_certificates(cert.roots())
            .lookup(local_names)
            .build(),
    )
}

fn local_names(_: &str) -> std::io::Result<Vec<IpAddr>> {
    Ok(vec!["127.0.0.1".parse().unwrap()])
}

fn https(name: &str, up: &Upstream, path: &str) -> Url {
    Url::parse(&format!("https://{name}:{}{path}", up.addr.port())).unwrap()
}

#[test]
fn requests_round_trip_over_tls_on_one_kept_alive_session() {
    let cert = Cert::new(&["fiber.test"]);
    let up = tls::start(&cert, |s, req| match req.target.as_str() {
        "/chunked" => {
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            );
            let _ = s.flush();
            Next::KeepOpen
        }
        _ => respond(s, "200 OK", "", &req.body),
    });
    let (pool, http) = (fibers(), client_trusting(&cert, ClientLimits::default()));
    let h = Arc::clone(&http);
    let echo = https("fiber.test", &up, "/echo");
    let chunked = https("fiber.test", &up, "/chunked");
    let (got, chunks) = on_fiber(&pool, "client", move || {
        let got = h
            .request(Method::Post, &echo)
            .json(&serde_json::json!({ "over": "tls" }))
            .send();
        (got, h.get(&chunked))
    });
    let got: serde_json::Value = got.unwrap().json().unwrap();
    assert_eq!(got, serde_json::json!({ "over": "tls" }));
    assert_eq!(chunks.unwrap().text(), "hello");
    let seen = up.requests();
    assert_eq!(
        seen[0].header("host"),
        Some(format!("fiber.test:{}", up.addr.port()).as_str())
    );
    let s = http.stats();
    assert_eq!(
        (s.tls_handshakes, s.reused_connections, s.connects),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Assert `e` is rustls refusing the certificate in the handshake, as `says`.
fn refused_certificate(e: &Error, host: &str, says: &str) {
    assert!(
        matches!(e, Error::Tls { host: h, phase: phase::TLS, source: rustls::Error::InvalidCertificate(_) } if h == host),
        "{e:?}"
    );
    assert_eq!((e.phase(), e.gateway_status()), (Some(phase::TLS), 502));
    let text = e.to_string();
    assert!(
        text.contains(&format!("TLS handshake with '{host}' failed")),
        "{text}"
    );
    assert!(text.contains(says), "'{says}' in: {text}");
}

#[test]
fn a_certificate_for_another_name_is_refused_in_the_tls_phase() {
    let cert = Cert::new(&["fiber.test"]);
    let up = tls::start(&cert, |s, _| respond(s, "200 OK", "", b"secret"));
    let (pool, http) = (fibers(), client_trusting(&cert, ClientLimits::default()));
    let (h, url) = (Arc::clone(&http), https("other.test", &up, "/"));
    let e = on_fiber(&pool, "client", move || h.get(&url)).unwrap_err();
    refused_certificate(&e, "other.test", "not valid for name");
    assert!(up.requests().is_empty(), "no request went out");
    assert_eq!(http.stats().in_flight, 0);
}

#[test]
fn a_certificate_no_root_vouches_for_is_refused() {
    let cert = Cert::new(&["fiber.test"]);
    let up = tls::start(&cert, |s, _| respond(s, "200 OK", "", b"secret"));
    // Mozilla's roots (the default) do not include a certificate made a moment ago.
    let http = Arc::new(
        HttpClient::builder(ClientLimits::default())
            .lookup(local_names)
            .build(),
    );
    let (pool, h, url) = (fibers(), Arc::clone(&http), https("fiber.test", &up, "/"));
    let e = on_fiber(&pool, "client", move || h.get(&url)).unwrap_err();
    refused_certificate(&e, "fiber.test", "UnknownIssuer");
}

#[test]
fn a_server_that_is_not_tls_fails_the_handshake() {
    let cert = Cert::new(&["fiber.test"]);
    let plain = Upstream::start_raw(|mut s, _| {
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        hold_until_closed(&mut s);
    });
    let (pool, http) = (fibers(), client_trusting(&cert, ClientLimits::default()));
    let (h, url) = (Arc::clone(&http), https("fiber.test", &plain, "/"));
    let e = on_fiber(&pool, "client", move || h.get(&url)).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Tls {
                phase: phase::TLS,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_server_that_never_answers_the_handshake_times_out_in_the_tls_phase() {
    let cert = Cert::new(&["fiber.test"]);
    let silent = Upstream::start_raw(|mut s, _| {
        hold_until_closed(&mut s);
    });
    let limits = ClientLimits {
        tls_handshake_timeout: Duration::from_millis(300),
        ..ClientLimits::default()
    };
    let (pool, http) = (fibers(), client_trusting(&cert, limits));
    let (h, url) = (Arc::clone(&http), https("fiber.test", &silent, "/"));
    let start = Instant::now();
    let e = on_fiber(&pool, "client", move || h.get(&url)).unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&e, Error::Timeout { phase: phase::TLS, limit } if *limit == Duration::from_millis(300)),
        "{e:?}"
    );
    assert_eq!(e.gateway_status(), 504);
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_close_delimited_body_over_tls_ends_with_close_notify_or_is_an_error() {
    let cert = Cert::new(&["fiber.test"]);
    let up = tls::start(&cert, |s, req| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it");
        let _ = s.flush();
        if req.target == "/notified" {
            tls::close_notify(s)
        } else {
            // The TCP connection ends without close_notify: a truncation would look
            // exactly like this.
            let _ = s.sock.shutdown(std::net::Shutdown::Both);
            Next::Close
        }
    });
    let (pool, http) = (fibers(), client_trusting(&cert, ClientLimits::default()));
    let (h, ok, cut) = (
        Arc::clone(&http),
        https("fiber.test", &up, "/notified"),
        https("fiber.test", &up, "/cut"),
    );
    let (ok, cut) = on_fiber(&pool, "client", move || (h.get(&ok), h.get(&cut)));
    assert_eq!(ok.unwrap().text(), "all of it");
    let e = cut.unwrap_err();
    assert!(
        matches!(&e, Error::BadResponse(m) if m.contains("without close_notify")),
        "{e:?}"
    );
}
