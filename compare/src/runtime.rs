//! Which server runs the demo's routes: the fiber server (the `fiberstack` binary),
//! its async twin or raw may_minihttp (this crate's binary, `compare serve --runtime`).

use std::fmt;
use std::str::FromStr;

/// Which server runs the demo's routes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// Every request on a guarded fiber (the `fiberstack` binary, `fiberstack::app`).
    #[default]
    Fibers,
    /// The async/await twin on tokio (`twin/`).
    Async,
    /// The raw baseline: stock may_minihttp 0.1.11 on plain may coroutines, with no
    /// fiber pool, no guard pages and no HTTP care (`mini/`; for the bench).
    Minihttp,
}

impl FromStr for Runtime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fibers" | "fiber" => Ok(Runtime::Fibers),
            "async" | "tokio" => Ok(Runtime::Async),
            "minihttp" | "may_minihttp" => Ok(Runtime::Minihttp),
            other => Err(format!(
                "unknown runtime '{other}': use fibers, async or minihttp"
            )),
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Fibers => "fibers",
            Runtime::Async => "async",
            Runtime::Minihttp => "minihttp",
        })
    }
}
