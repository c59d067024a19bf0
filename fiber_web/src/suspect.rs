//! A supervised worker that a stack overflow left suspect takes no more work: from the
//! moment an overflow strikes outside a safe point (or one leaves the process known
//! broken), what the abandoned frames held (a lock, a `Once` being initialised) may be
//! held for ever, and any handler that touches it would hang, taking its thread along.
//! So, in a worker whose supervisor can replace it ([`arm`]):
//! - it stops accepting at once, and every answer it still gives carries
//!   `Connection: close`: its server counts as stopping from then on
//!   (`Stop::is_stopping`), so the accept loop leaves the shared backlog to the
//!   replacement and idle kept-alive connections close;
//! - it runs no handler that had not started: a request it still reads, or one that
//!   waits for a fiber, gets a 503 with `Retry-After` instead ([`Refusing`], the
//!   app's outermost layer), which a client retries on a new connection, where the
//!   replacement (or, while none accepts, the supervisor) answers;
//! - it tells its supervisor `suspect` rather than `replace` (`supervisor/worker.rs`),
//!   so that the supervisor knows this worker accepts no more.
//!
//! Requests whose handlers were already running beside the overflow finish, or, when
//! they wait on what it left behind, end with the worker (after `--shutdown-grace`).
//! Without a supervisor nothing of this applies: nobody would take the port over, and
//! the process serves on as before (the watchdog logs that it should be replaced).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::http::{Problem, Request, Response};
use crate::layer::{Layer, Next};

/// Seconds a client is told to wait before it retries (`Retry-After`): the
/// replacement usually accepts well within it.
pub(crate) const RETRY_AFTER_SECS: u32 = 1;

/// Set once a supervisor can replace this process.
static ARMED: AtomicBool = AtomicBool::new(false);

/// How this worker asks its supervisor for a replacement, given at [`arm`] (the
/// supervisor's side is above this module).
static TELL: OnceLock<fn(&str)> = OnceLock::new();

/// This process is a supervised worker, which `tell` asks its supervisor to replace:
/// from now on, a suspect overflow stops it taking work (see the module comment).
pub(crate) fn arm(tell: fn(&str)) {
    let _ = TELL.set(tell);
    ARMED.store(true, Ordering::Release);
}

/// Asks the supervisor given at [`arm`] for a replacement (nothing when not armed).
pub(crate) fn tell_supervisor(reason: &str) {
    if let Some(tell) = TELL.get() {
        tell(reason);
    }
}

/// Whether an overflow outside a safe point struck in this process, or one left it
/// known broken.
fn suspect() -> bool {
    let a = fiber_pool::aftermath();
    a.outside_safe_point > 0 || a.is_broken()
}

/// Whether this process takes no more work: armed, and suspect.
pub(crate) fn stopped() -> bool {
    ARMED.load(Ordering::Acquire) && suspect()
}

/// The answer to a request a suspect worker will not run.
fn refusal() -> Response {
    Response::from(
        Problem::new(
            503,
            "worker-replaced",
            "this server process is being replaced and runs no new request; try again",
        )
        .with_internal(
            "a stack overflow outside a safe point left this worker suspect: it runs no \
             handler that had not started, and its replacement takes the port over",
        ),
    )
    .header("Retry-After", RETRY_AFTER_SECS.to_string())
}

/// The app's outermost layer in a supervised worker: once the worker is suspect, a
/// 503 with `Retry-After` instead of the rest (see the module comment).
pub(crate) struct Refusing;

impl<S> Layer<S> for Refusing {
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
        if stopped() {
            return refusal();
        }
        next.run(state, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_says_to_retry_and_names_no_internals() {
        let resp = refusal();
        assert_eq!(resp.status, 503);
        let body = String::from_utf8_lossy(&resp.body).into_owned();
        assert!(body.contains("try again"), "{body}");
        assert!(!body.contains("overflow"), "{body}");
        let retry = resp.headers.iter().find(|(n, _)| *n == "Retry-After");
        assert_eq!(retry.map(|h| &*h.1), Some("1"));
    }
}
