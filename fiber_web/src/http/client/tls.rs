//! The client's rustls configuration: the ring provider, a root store (Mozilla's, from
//! webpki-roots, or the caller's own), HTTP/1.1 by ALPN, and a session cache whose
//! lock is only ever taken on the carrier's stack.
//!
//! rustls runs on the fiber (see `conn.rs`), so whatever it locks is locked on the
//! fiber; an overflow with a std lock held leaves it held for good. The one lock on the
//! client's path is the resumption cache's (`ClientSessionMemoryCache`, a std Mutex):
//! [`CarrierSessions`] wraps it so that every call into it runs through
//! [`fiber_pool::on_carrier`]. The rest holds no lock: ring's CPU-feature detection is a
//! lock-free race (`race::OnceNonZeroUsize`), the certificate verifier reads its
//! roots, and rustls is built without its `logging` feature (a logger locks stderr).

use std::sync::Arc;

use rustls::client::{
    ClientSessionMemoryCache, ClientSessionStore, Resumption, Tls12ClientSessionValue,
    Tls13ClientSessionValue,
};
use rustls::pki_types::ServerName;
use rustls::{NamedGroup, RootCertStore};

/// Mozilla's root store, as webpki-roots ships it.
pub fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// A client configuration that trusts `roots`, with ring's algorithms and rustls' safe
/// protocol versions (TLS 1.2 and 1.3), remembering sessions of up to `sessions`
/// servers' tickets (rustls' sizing: 8 tickets a server).
pub(crate) fn config(roots: RootCertStore, sessions: usize) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // ring's provider supports both default versions: this cannot fail.
        .expect("ring's provider supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = Resumption::store(Arc::new(CarrierSessions(
        ClientSessionMemoryCache::new(sessions),
    )));
    Arc::new(config)
}

/// The name a certificate must be valid for: a DNS name, or an IP-literal host.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string())
        .map_err(|e| format!("'{host}' cannot be a TLS server name: {e}"))
}

/// rustls' in-memory session cache, every call on the carrier's stack (see the module
/// docs).
#[derive(Debug)]
struct CarrierSessions(ClientSessionMemoryCache);

impl ClientSessionStore for CarrierSessions {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        fiber_pool::on_carrier(|| self.0.set_kx_hint(server_name, group));
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        fiber_pool::on_carrier(|| self.0.kx_hint(server_name))
    }

    fn set_tls12_session(&self, server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        fiber_pool::on_carrier(|| self.0.set_tls12_session(server_name, value));
    }

    fn tls12_session(&self, server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        fiber_pool::on_carrier(|| self.0.tls12_session(server_name))
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        fiber_pool::on_carrier(|| self.0.remove_tls12_session(server_name));
    }

    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: Tls13ClientSessionValue,
    ) {
        fiber_pool::on_carrier(|| self.0.insert_tls13_ticket(server_name, value));
    }

    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<Tls13ClientSessionValue> {
        fiber_pool::on_carrier(|| self.0.take_tls13_ticket(server_name))
    }
}
