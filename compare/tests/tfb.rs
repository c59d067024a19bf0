//! The rig's TechEmpower servers (`compare tfb`: axum + mysql_async, and raw
//! may_minihttp with fiber_mysql) pass the same rules as the fiber_web example (`common::tfb`), over a
//! socket, one after the other on one private MariaDB.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Duration;

use common::child::Served;
use fiber_mysql::launcher::{LaunchConfig, MariaDb};

#[test]
fn both_rig_servers_pass_techempowers_rules() {
    let db = MariaDb::start(LaunchConfig::default()).expect("a private MariaDB");
    for (runtime, setup) in [("async", true), ("minihttp", false)] {
        let mut cmd = Command::new(common::tools::binary("compare", "compare"));
        cmd.args(["tfb", "--runtime", runtime, "--bind", "127.0.0.1:0"])
            .env("DATABASE_URL", db.opts().url());
        if setup {
            cmd.arg("--setup");
        }
        let server = Served::start(
            cmd,
            |l| l.contains("listening on http://"),
            Duration::from_secs(60),
        );
        common::tfb::verify(server.addr, &db.opts());
    }
}
