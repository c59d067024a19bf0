//! A request id for every request (`App::request_ids`): the client's own (or a
//! proxy's) when it sent a usable one, else one made here. The handler reads it
//! ([`Request::request_id`], and the request's header), the client gets it back in the
//! response's header and in every problem the framework answers, and the access and
//! 5xx log lines print it, so a log line, an error report and a client's retry can be
//! matched. It is given on the connection's coroutine before any layer runs, so a
//! request refused before its layers (a 413, a full queue) or lost to an overflow has
//! one too.
//!
//! An id made here is this process's random 64-bit prefix and a counter, in hex
//! (`5f0c3a9e12b4d7e8-2a`): unique across the process's requests, and, with odds
//! of 2^-64 per pair of processes, across processes. A sent id is kept when it is 1 to
//! [`MAX_SENT_ID`] printable ASCII characters without spaces; anything else (a header
//! that could carry a log injection) is replaced.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::http::Request;

/// The longest id a client may send that is kept as it is.
pub const MAX_SENT_ID: usize = 128;

/// The request ids of an app; see the module's header.
#[derive(Debug)]
pub struct RequestId {
    header: &'static str,
    prefix: u64,
    next: AtomicU64,
}

impl Default for RequestId {
    /// The `X-Request-Id` header.
    fn default() -> Self {
        RequestId::header("X-Request-Id")
    }
}

impl RequestId {
    /// Ids in header `name` (`X-Request-Id`, `X-Correlation-Id`, ...).
    pub fn header(name: &'static str) -> RequestId {
        // std's hasher keys are random per process (from the OS): a seed that needs no
        // random-number crate.
        let prefix = RandomState::new().hash_one(std::process::id());
        RequestId {
            header: name,
            prefix,
            next: AtomicU64::new(1),
        }
    }

    /// A fresh id.
    fn make(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}-{n:x}", self.prefix)
    }
}

/// Whether `id` may be kept as sent.
fn usable(id: &str) -> bool {
    (1..=MAX_SENT_ID).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

impl RequestId {
    /// The header that carries the id.
    pub(crate) fn name(&self) -> &'static str {
        self.header
    }

    /// Give `req` its id: the one sent when usable, else a fresh one, which also
    /// replaces the header.
    pub(crate) fn assign(&self, req: &mut Request) {
        let sent = req.header(self.header);
        let id = self.for_sent(sent);
        if sent != Some(id.as_str()) {
            req.headers.remove(self.header);
            req.headers.push(self.header, &id);
        }
        req.id = Some(id);
    }

    /// The id of a request that sent `sent` in the header (a parsed request's, or a
    /// raw head's that did not parse): `sent` when usable, else a fresh one.
    pub(crate) fn for_sent(&self, sent: Option<&str>) -> String {
        match sent {
            Some(sent) if usable(sent) => sent.to_string(),
            _ => self.make(),
        }
    }
}
