//! At most `--fibers` handlers at once, at most `--queue` requests waiting for a turn,
//! and a wait of at most `--fiber-wait`: the fiber pool's admission rules, for tasks.
//!
//! A tokio task costs no fixed stack, so the async twin needs no pool to run a handler;
//! the limit is here so that both servers admit the same load (the original demo's
//! 100 fibers were a concurrency limit as much as a memory budget). Each request owns
//! its permit, and each waiter its place in the queue ([`Held`]), so both are given back
//! however the request ends, even when its future is dropped mid-wait. A handler that panics
//! is caught here and answered 500, as the fiber pool answers a panicking fiber.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use futures_util::FutureExt;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::twin::gauge::Held;
use crate::twin::Reply;
use fiber_web::metrics::{HandlerPool, RouteRuns};
use fiber_web::rig::{queue_full, wait_timed_out};
use fiber_web::Response;

/// Why a request did not get a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot was busy and `queue` requests were already waiting.
    Busy { size: usize, queue: usize },
    /// No slot became free within `wait`, the configured timeout.
    Timeout { wait: Duration },
}

/// The label of the route that answered, carried on its response to the connection
/// task, which counts the request and writes its access line (`server.rs`).
#[derive(Clone, Copy, Debug)]
pub struct RouteLabel(pub &'static str);

/// The counters of one route (its label), bumped without a lock.
#[derive(Debug)]
pub struct RouteCounts {
    pub label: &'static str,
    pub runs: AtomicU64,
    pub panics: AtomicU64,
}

/// The admission limit shared by every route.
#[derive(Debug)]
pub struct Limit {
    slots: Semaphore,
    size: usize,
    queue: usize,
    wait: Duration,
    waiting: AtomicUsize,
    completed: AtomicU64,
    rejected: AtomicU64,
    timed_out: AtomicU64,
    panics: AtomicU64,
    routes: Mutex<Vec<Arc<RouteCounts>>>,
}

impl Limit {
    /// `size` handlers at once, `queue` waiting at most `wait` each.
    pub fn new(size: usize, queue: usize, wait: Duration) -> Limit {
        Limit {
            slots: Semaphore::new(size),
            size,
            queue,
            wait,
            waiting: AtomicUsize::new(0),
            completed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            routes: Mutex::new(Vec::new()),
        }
    }

    /// Counters for a route, registered once when the router is built.
    pub fn route(&self, label: &'static str) -> Arc<RouteCounts> {
        let counts = Arc::new(RouteCounts {
            label,
            runs: AtomicU64::new(0),
            panics: AtomicU64::new(0),
        });
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&counts));
        counts
    }

    /// Wait for a slot: at once if one is free, else in FIFO order behind at most
    /// `queue` others, for at most `wait`. tokio's semaphore hands a released permit
    /// to the oldest waiter, so `try_acquire` never jumps the line.
    pub async fn acquire(&self) -> Result<SemaphorePermit<'_>, Refused> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Ok(permit);
        }
        let (queued, ahead) = Held::enter(&self.waiting);
        if ahead >= self.queue {
            drop(queued);
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Busy {
                size: self.size,
                queue: self.queue,
            });
        }
        let got = tokio::time::timeout(self.wait, self.slots.acquire()).await;
        drop(queued);
        match got {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a closed one would refuse everyone.
            Ok(Err(_closed)) => Err(Refused::Busy {
                size: self.size,
                queue: self.queue,
            }),
            Err(_elapsed) => {
                self.timed_out.fetch_add(1, Ordering::Relaxed);
                Err(Refused::Timeout { wait: self.wait })
            }
        }
    }

    /// The limit's counters, as the framework's [`HandlerPool`] (with no stacks): the
    /// same shape `/stats` and `/metrics` show for the fiber pool.
    pub fn handler_pool(&self) -> HandlerPool {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let routes = self
            .routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| {
                let runs = RouteRuns {
                    runs: get(&r.runs),
                    panics: get(&r.panics),
                    stalls: 0,
                    stack: None,
                };
                (r.label.to_string(), runs)
            })
            .collect();
        HandlerPool {
            size: self.size as u64,
            busy: (self.size - self.slots.available_permits()) as u64,
            queued: self.waiting.load(Ordering::Relaxed) as u64,
            completed: get(&self.completed),
            rejected: get(&self.rejected),
            timed_out: get(&self.timed_out),
            panics: get(&self.panics),
            stalls: 0,
            stacks: None,
            routes,
        }
    }
}

/// The middleware every route runs in: take a slot, run the handler, give the slot
/// back (the permit drops), and turn a refusal or a panic into the fiber server's
/// status codes: 503 with Retry-After, or 500.
pub async fn run(
    State((limit, route)): State<(Arc<Limit>, Arc<RouteCounts>)>,
    req: Request,
    next: Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let method = req.method().clone();
    let _permit = match limit.acquire().await {
        Ok(permit) => permit,
        Err(refused) => {
            let resp = match refused {
                Refused::Busy { size, queue } => queue_full("task slots", size, queue),
                Refused::Timeout { wait } => wait_timed_out("task slot", wait),
            };
            log_5xx(&method, route.label, resp.status, &resp.body);
            return labelled(Reply(resp).into_response(), route.label);
        }
    };
    route.runs.fetch_add(1, Ordering::Relaxed);
    let result = AssertUnwindSafe(next.run(req)).catch_unwind().await;
    limit.completed.fetch_add(1, Ordering::Relaxed);
    let resp = match result {
        Ok(resp) => resp,
        Err(panic) => {
            route.panics.fetch_add(1, Ordering::Relaxed);
            limit.panics.fetch_add(1, Ordering::Relaxed);
            let failed = fiber_pool::RunError::Panicked {
                label: route.label,
                message: fiber_pool::error::panic_message(&*panic),
            };
            Reply(Response::error(
                500,
                format!("route {} failed: {failed}", route.label),
            ))
            .into_response()
        }
    };
    if resp.status().is_server_error() {
        // Handlers do not log; every 5xx is logged here with its body, as the fiber
        // server logs them. Our 5xx bodies are one short line, already in memory.
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_LOGGED_BODY)
            .await
            .unwrap_or_default();
        let said = match parts.extensions.get::<super::Internal>() {
            Some(super::Internal(text)) => text.as_bytes(),
            None => &bytes[..],
        };
        log_5xx(&method, route.label, parts.status.as_u16(), said);
        let resp = axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
        return labelled(resp, route.label);
    }
    labelled(resp, route.label)
}

/// `resp` marked as answered by route `label`.
pub fn labelled(
    mut resp: axum::response::Response,
    label: &'static str,
) -> axum::response::Response {
    resp.extensions_mut().insert(RouteLabel(label));
    resp
}

/// Largest 5xx body read for the log.
const MAX_LOGGED_BODY: usize = 64 * 1024;

/// `fiberstack: GET widgets -> 503: database unavailable: ...`, the fiber server's line.
fn log_5xx(method: &axum::http::Method, label: &str, status: u16, body: &[u8]) {
    fiber_web::rig::server_error(method.as_str(), label, status, body, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_is_busy_and_a_long_wait_times_out() {
        let limit = Limit::new(1, 1, Duration::from_millis(50));
        let held = limit.acquire().await.unwrap();
        // One may wait: it times out after 50 ms.
        let waited = limit.acquire().await.unwrap_err();
        assert!(matches!(waited, Refused::Timeout { .. }), "{waited:?}");
        // With one already waiting, the next is refused at once.
        let (first, second) = tokio::join!(limit.acquire(), async {
            tokio::task::yield_now().await;
            limit.acquire().await
        });
        assert!(matches!(first, Err(Refused::Timeout { .. })));
        assert_eq!(second.unwrap_err(), Refused::Busy { size: 1, queue: 1 });
        drop(held);
        assert!(limit.acquire().await.is_ok());
        let counts = limit.handler_pool();
        assert_eq!(counts.rejected, 1);
        assert_eq!(counts.timed_out, 2);
    }

    #[tokio::test]
    async fn a_waiter_dropped_mid_wait_leaves_the_queue() {
        let limit = Limit::new(1, 1, Duration::from_secs(60));
        let held = limit.acquire().await.unwrap();
        // The client goes while its request waits: hyper drops the future.
        let gone = tokio::time::timeout(Duration::from_millis(5), limit.acquire()).await;
        assert!(gone.is_err(), "the wait must still be pending");
        assert_eq!(limit.handler_pool().queued, 0, "{:?}", limit.handler_pool());
        drop(held);
        // The place it held is free: the next waiter is admitted, not refused.
        assert!(limit.acquire().await.is_ok());
    }
}
