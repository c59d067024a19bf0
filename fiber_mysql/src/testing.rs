//! Fixtures for tests and examples (feature `testing`): one private server shared
//! by a whole test process. Not part of the library's API for applications.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::launcher::{LaunchConfig, MariaDb};
use crate::opts::Opts;

/// The environment variable naming an existing server for the tests.
pub const TEST_DATABASE_URL_ENV: &str = "FIBERSTACK_TEST_DATABASE_URL";
/// `max_connections` of the per-process test server.
pub const TEST_SERVER_MAX_CONNECTIONS: usize = 300;

/// Options for tests that do not stop the server: the server named by
/// `FIBERSTACK_TEST_DATABASE_URL` if set (one server shared by a whole test
/// run), else a private server started once per process. That server is
/// never dropped; the supervisor removes it when the process exits.
/// Tests that kill or restart the server start their own [`MariaDb`].
pub fn test_database_opts() -> Result<Opts> {
    static SERVER: OnceLock<std::result::Result<MariaDb, String>> = OnceLock::new();
    if let Ok(url) = std::env::var(TEST_DATABASE_URL_ENV) {
        return Opts::from_url(&url);
    }
    let server = SERVER.get_or_init(|| {
        MariaDb::start(LaunchConfig {
            max_connections: TEST_SERVER_MAX_CONNECTIONS,
            db_name: "fiberstack_test".into(),
            ..LaunchConfig::default()
        })
        .map_err(|e| e.to_string())
    });
    match server {
        Ok(server) => Ok(server.opts()),
        Err(e) => Err(Error::Launch(e.clone())),
    }
}
