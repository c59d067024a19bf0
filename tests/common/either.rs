//! Either runtime of the demo, started in this process against the shared test
//! MariaDB, and stopped on drop: for the tests that hold both to the same behaviour.

use std::net::SocketAddr;
use std::time::Duration;

use fiberstack::config::{Runtime, ServeConfig};

/// The two runtimes the demo serves the same routes on.
pub const RUNTIMES: [Runtime; 2] = [Runtime::Fibers, Runtime::Async];

/// A server of either runtime, stopped on drop.
pub enum Server {
    Fibers(Option<fiberstack::start::Running>),
    Twin(Option<fiberstack::twin::Running>),
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
            Runtime::Async => Server::Twin(Some(
                fiberstack::twin::start(&cfg).unwrap_or_else(|e| failed(e)),
            )),
            // The bench's raw baseline serves only what the bench reads.
            other => panic!("{other} is not held to the demo's routes"),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        match self {
            Server::Fibers(r) => r.as_ref().unwrap().addr(),
            Server::Twin(r) => r.as_ref().unwrap().addr(),
        }
    }

    /// `/stats`, parsed.
    pub fn stats(&self) -> serde_json::Value {
        super::stats(self.addr())
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
            Server::Twin(r) => drop(r.take().map(|r| r.shutdown(grace))),
        }
    }
}
