//! How much fiber stack each route of the demo really uses, and the smallest stack that
//! serves it: the measuring behind `fiberstack stack-report` (which prints it) and
//! `tests/stack.rs` (which holds the routes to their headroom).
//!
//! Each route's handler runs against a running demo's state on single-fiber pools: one
//! with a roomy stack that measures the high-water mark, then stacks growing a step at
//! a time from the measured peak, until one serves the route without overflowing. The
//! handlers do their real I/O (MySQL, HTTP back to the running server), so the figures
//! include those code paths.

use std::sync::Arc;

use fiber_pool::{FiberPool, PoolConfig, RunError};
use fiber_web::{Handler, Request, Response};

use crate::app::{self, AppState};
use crate::error::Error;

/// The requests the report and the tests drive: every built-in route, and `/deep` at several depths.
pub const PROBES: &[&str] = &[
    "/widgets?sleep=0",
    "/widgets/http",
    "/twitter",
    "/upstream/search.json?q=rails+3",
    "/stats",
    "/readyz",
    "/hello",
    "/deep?depth=10&frame=256",
    "/deep?depth=50&frame=256",
    "/deep?depth=100&frame=256",
    "/deep?depth=100&frame=1024",
];

/// The stack the peak is measured on: far more than any probe needs.
const MEASURE_STACK: usize = 4 << 20;
/// Step between the candidate sizes tried for the smallest stack.
pub const STEP: usize = 4096;
/// How far above the measured peak the search for the smallest stack goes.
const SEARCH_SPAN: usize = 256 * 1024;

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Row {
    pub target: &'static str,
    pub label: &'static str,
    /// Highest stack use seen, in bytes.
    pub peak: usize,
    /// The smallest stack size (a multiple of 4 KiB) that served the request.
    pub smallest: Option<usize>,
}

impl Row {
    /// How many times the peak fits in `stack`.
    pub fn headroom(&self, stack: usize) -> f64 {
        stack as f64 / self.peak.max(1) as f64
    }
}

/// Measure every probe against `state`. Call from a may coroutine.
pub fn measure(state: &Arc<AppState>, probes: &[&'static str]) -> Result<Vec<Row>, Error> {
    let app = app::app(Arc::clone(state), 1, std::time::Duration::ZERO);
    let mut rows = Vec::new();
    for &target in probes {
        let mut req = Request::get(target);
        let Some((label, handler)) = app.handler_for(&mut req) else {
            return Err(Error::Report(format!("no route for {target}")));
        };
        let roomy = pool(MEASURE_STACK)?;
        for _ in 0..3 {
            let resp =
                run(&roomy, label, &handler, state, &req).map_err(|source| Error::Measure {
                    target,
                    stack_size: MEASURE_STACK,
                    source,
                })?;
            if resp.status >= 500 {
                return Err(Error::Report(format!(
                    "{target} answered {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                )));
            }
        }
        let peak = roomy
            .stats()
            .per_label
            .get(label)
            .map_or(0, |l| l.peak_stack_bytes);
        let mut smallest = None;
        let mut size = peak.next_multiple_of(STEP).max(STEP);
        while size <= peak + SEARCH_SPAN {
            match run(&pool(size)?, label, &handler, state, &req) {
                Ok(_) => {
                    smallest = Some(size);
                    break;
                }
                Err(RunError::StackOverflow { .. }) => size += STEP,
                Err(source) => {
                    return Err(Error::Measure {
                        target,
                        stack_size: size,
                        source,
                    })
                }
            }
        }
        rows.push(Row {
            target,
            label,
            peak,
            smallest,
        });
    }
    Ok(rows)
}

fn pool(stack_size: usize) -> Result<FiberPool, Error> {
    FiberPool::new(PoolConfig {
        size: 1,
        stack_size,
        queue: 1,
        measure_every: 1,
        ..PoolConfig::default()
    })
    .map_err(Error::MeasurePool)
}

fn run(
    pool: &FiberPool,
    label: &'static str,
    handler: &Arc<dyn Handler<AppState>>,
    state: &Arc<AppState>,
    req: &Request,
) -> Result<Response, RunError> {
    // A job owns what it uses (`FiberPool::run`).
    let (handler, state, req) = (Arc::clone(handler), Arc::clone(state), req.clone());
    pool.run(label, move || handler.call(&state, &req))
}
