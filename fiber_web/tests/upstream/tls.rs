//! A TLS upstream for the client tests: a certificate made now (rcgen, ring), served
//! by rustls' blocking server API on std threads, with the same request log and
//! behaviours as the plain upstreams.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::{read_request, Next, Seen, Upstream};

/// A self-signed certificate for `names`, and its key.
pub struct Cert {
    pub der: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Cert {
    pub fn new(names: &[&str]) -> Cert {
        let made = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        Cert {
            der: made.cert.der().clone(),
            key: made.signing_key.serialize_der(),
        }
    }

    /// A root store that trusts this certificate alone.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        roots
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![self.der.clone()], key)
                .unwrap(),
        )
    }
}

/// The TLS stream a behaviour writes to.
pub type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// A TLS upstream serving `cert`: each request read is recorded and goes to `behave`.
pub fn start(
    cert: &Cert,
    behave: impl Fn(&mut Tls, &Seen) -> Next + Send + Sync + 'static,
) -> Upstream {
    let config = cert.server_config();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let mut up = Upstream::start_raw(move |tcp, connection| {
        let Ok(conn) = rustls::ServerConnection::new(Arc::clone(&config)) else {
            return;
        };
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        for nth in 0.. {
            let Some(req) = read_request(&mut tls, connection, nth) else {
                return;
            };
            log.lock().unwrap().push(req.clone());
            if let Next::Close = behave(&mut tls, &req) {
                return;
            }
        }
    });
    up.seen = seen;
    up
}

/// End the TLS session properly (close_notify), then the connection.
pub fn close_notify(tls: &mut Tls) -> Next {
    tls.conn.send_close_notify();
    let _ = tls.flush();
    Next::Close
}
