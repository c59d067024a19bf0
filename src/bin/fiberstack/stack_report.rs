//! `fiberstack stack-report`: start the demo, measure every route's fiber stack use
//! (`fiberstack::stack_use`), and print the table: peak, the smallest stack that
//! serves it, and the headroom at the default size.

use std::fmt::Write as _;
use std::time::Duration;

use fiberstack::config::{ByteSize, ServeConfig, DEFAULT_STACK_SIZE};
use fiberstack::stack_use::Row;
use fiberstack::Error;

/// Time the report's own requests get to finish when it stops the demo (none should
/// be left: the report waits for each).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// `fiberstack stack-report`: start the demo, measure every route, print the table.
pub fn run(cfg: &ServeConfig) -> Result<(), Error> {
    let mut cfg = cfg.clone();
    cfg.web.bind = "127.0.0.1:0".parse().expect("a literal address");
    // Ctrl-C stops the report like the server: the private MariaDB is cleaned up.
    let _stops =
        fiber_web::rig::stop_requests().map_err(|e| Error::io("install signal handlers", e))?;
    let running = fiberstack::start::start(&cfg)?;
    let state = std::sync::Arc::clone(&running.state);
    let measure = move || fiberstack::stack_use::measure(&state, fiberstack::stack_use::PROBES);
    let rows = fiber_pool::carrier::go(measure)
        .join()
        .map_err(|_| Error::Report("the stack report panicked".into()))??;
    println!("{}", render(&rows, build_kind()));
    running.shutdown(SHUTDOWN_GRACE);
    Ok(())
}

/// The report as a Markdown table.
pub fn render(rows: &[Row], build: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Fiber stack use per route ({build} build; default --stack-size {}):\n",
        ByteSize(DEFAULT_STACK_SIZE)
    );
    let _ = writeln!(
        out,
        "| request | route | peak stack bytes | smallest stack that serves it | headroom at {} |",
        ByteSize(DEFAULT_STACK_SIZE)
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            r.target,
            r.label,
            r.peak,
            r.smallest
                .map_or("not found".to_string(), |s| ByteSize(s).to_string()),
            headroom(r.headroom(DEFAULT_STACK_SIZE)),
        );
    }
    out
}

/// `7.6x`, or `0.97x` below 10 so that "does not fit" never rounds to `1.0x`.
fn headroom(h: f64) -> String {
    if h < 10.0 {
        format!("{:.2}x", (h * 100.0).floor() / 100.0)
    } else {
        format!("{h:.1}x")
    }
}

/// "release" or "debug": the build this binary is.
pub fn build_kind() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}
