//! `examples/techempower.rs` passes TechEmpower's rules (`common::tfb`), over a socket,
//! on a private MariaDB of its own that `--setup on` fills; and it stays within the
//! 150 lines that say the framework serves it without help.

mod common;

use std::process::Command;
use std::time::Duration;

use common::child::Served;
use fiber_mysql::launcher::{LaunchConfig, MariaDb};

#[test]
fn the_example_passes_techempowers_rules() {
    let db = MariaDb::start(LaunchConfig::default()).expect("a private MariaDB");
    let mut cmd = Command::new(common::tools::example("techempower"));
    cmd.args([
        "--bind",
        "127.0.0.1:0",
        "--setup",
        "on",
        "--access-log",
        "off",
    ])
    .env("DATABASE_URL", db.opts().url());
    let server = Served::start(
        cmd,
        |l| l.contains("listening on http://"),
        Duration::from_secs(60),
    );
    common::tfb::verify(server.addr, &db.opts());
}

#[test]
fn a_setup_that_is_no_switch_is_refused_naming_the_flag() {
    let out = common::tools::run_within(
        Command::new(common::tools::example("techempower")).args(["--setup", "maybe"]),
        Duration::from_secs(30),
    );
    let text = common::tools::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("--setup") && text.contains("on or off"),
        "{text}"
    );
}

#[test]
fn the_example_stays_small() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/techempower.rs"
    ))
    .unwrap();
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(
        lines <= 150,
        "examples/techempower.rs has {lines} non-blank lines, over 150"
    );
}
