//! The runtime a test of the demo's routes runs against, started in this process on the
//! shared test MariaDB and stopped on drop. The demo's tests run them on the fiber
//! server; the comparison rig (`compare`) compiles the same test files (its
//! `Cargo.toml` lists them, and its build script sets `cfg(rig)`) and runs them on the
//! async twin, so one test holds both runtimes to the same behaviour without a copy.

use std::fmt;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use fiberstack::config::ServeConfig;

/// A server of the demo's routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// The fiber server (`fiberstack serve`).
    Fibers,
    /// The async twin (`compare serve --runtime async`): only in the rig's build.
    Async,
}

/// The runtimes this test binary holds to the demo's behaviour: the fiber server in
/// the demo's tests, the twin in the rig's.
pub const RUNTIMES: [Runtime; 1] = if cfg!(rig) {
    [Runtime::Async]
} else {
    [Runtime::Fibers]
};

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Fibers => "fibers",
            Runtime::Async => "async",
        })
    }
}

impl Runtime {
    /// The gauges of its request slots in `/stats`: fibers, or the twin's tasks.
    pub fn slots(self) -> &'static str {
        match self {
            Runtime::Fibers => "fibers",
            Runtime::Async => "tasks",
        }
    }

    /// The command that serves it from its binary, with `serve` (and `--runtime`) given:
    /// add the flags.
    pub fn serve_command(self) -> Command {
        match self {
            Runtime::Fibers => {
                let mut cmd = Command::new(super::tools::binary("fiberstack", "fiberstack"));
                cmd.arg("serve");
                cmd
            }
            Runtime::Async => {
                let mut cmd = Command::new(super::tools::binary("compare", "compare"));
                cmd.args(["serve", "--runtime", "async"]);
                cmd
            }
        }
    }
}

/// A server of either runtime, stopped on drop.
pub enum Server {
    Fibers(Option<fiberstack::start::Running>),
    #[cfg(rig)]
    Twin(Option<compare::twin::Running>),
}

impl Server {
    /// `runtime` with the test config (`common::config`, the shared database) changed
    /// by `tweak`.
    pub fn start(runtime: Runtime, tweak: impl FnOnce(&mut ServeConfig)) -> Server {
        let mut cfg = ServeConfig {
            database_url: Some(super::database_url()),
            ..super::config()
        };
        tweak(&mut cfg);
        let failed =
            |e: fiberstack::Error| -> ! { panic!("the {runtime} server did not start: {e}") };
        match runtime {
            Runtime::Fibers => Server::Fibers(Some(
                fiberstack::start::start(&cfg).unwrap_or_else(|e| failed(e)),
            )),
            #[cfg(rig)]
            Runtime::Async => Server::Twin(Some(
                compare::twin::start(&cfg).unwrap_or_else(|e| failed(e)),
            )),
            #[cfg(not(rig))]
            Runtime::Async => panic!("the async twin is the comparison rig's: its tests start it"),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        match self {
            Server::Fibers(r) => r.as_ref().unwrap().addr(),
            #[cfg(rig)]
            Server::Twin(r) => r.as_ref().unwrap().addr(),
        }
    }

    /// `/stats`, parsed.
    pub fn stats(&self) -> serde_json::Value {
        super::stats(self.addr())
    }

    /// What `/stats` would answer, read in this process without a request (so that
    /// reading it adds no request to the counts it reads).
    pub fn snapshot(&self) -> serde_json::Value {
        match self {
            Server::Fibers(r) => {
                serde_json::to_value(fiberstack::app::stats::snapshot(&r.as_ref().unwrap().state))
            }
            #[cfg(rig)]
            Server::Twin(r) => {
                serde_json::to_value(compare::twin::stats::snapshot(&r.as_ref().unwrap().state))
            }
        }
        .unwrap()
    }

    /// The MySQL connections checked out now (`db.in_use` of `/stats`).
    pub fn in_use(&self) -> u64 {
        self.stats()["db"]["in_use"].as_u64().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let grace = Duration::from_secs(5);
        match self {
            Server::Fibers(r) => drop(r.take().map(|r| r.shutdown(grace))),
            #[cfg(rig)]
            Server::Twin(r) => drop(r.take().map(|r| r.shutdown(grace))),
        }
    }
}
