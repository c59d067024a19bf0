//! A request id for every request: the client's own (or a proxy's) when it sent a
//! usable one, else one made here; the handler reads it from the request's header
//! and the client gets it back in the response's, so a log line, an error report and
//! a client's retry can be matched.
//!
//! An id made here is this process's random 64-bit prefix and a counter, in hex
//! (`5f0c3a9e12b4d7e8-2a`): unique across the process's requests, and, with odds
//! of 2^-64 per pair of processes, across processes. A sent id is kept when it is 1 to
//! [`MAX_SENT_ID`] printable ASCII characters without spaces; anything else (a header
//! that could carry a log injection) is replaced.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::http::{Request, Response};
use crate::layer::{Layer, Next};

/// The longest id a client may send that is kept as it is.
pub const MAX_SENT_ID: usize = 128;

/// The request-id layer; see the module's header.
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

impl<S> Layer<S> for RequestId {
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
        let id = match req.header(self.header) {
            Some(sent) if usable(sent) => sent.to_string(),
            _ => {
                let made = self.make();
                req.headers.remove(self.header);
                req.headers.push(self.header, &made);
                made
            }
        };
        next.run(state, req).header(self.header, id)
    }
}
