//! MySQL is optional: without the default `mysql` feature, fiber_web depends on no
//! MySQL crate and still builds, so an app that talks to no MySQL does not compile
//! fiber_mysql and mysql_common. Both checks run cargo itself, as the build would, on
//! this workspace (offline, with the lock file as it is).

use std::process::Command;

/// The crates that mean MySQL.
const MYSQL_CRATES: &[&str] = &["fiber_mysql", "mysql_common", "mysql"];

/// `cargo` with `args`, from fiber_web's directory: its output, or the test fails with
/// cargo's message.
fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(args)
        .args(["--offline", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    assert!(
        out.status.success(),
        "cargo {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The package names of a `cargo tree --prefix none` listing (`name vX.Y.Z (...)`).
fn names(tree: &str) -> Vec<&str> {
    tree.lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// The crates of [`MYSQL_CRATES`] in `tree`.
fn mysql_in(tree: &str) -> Vec<&str> {
    names(tree)
        .into_iter()
        .filter(|n| MYSQL_CRATES.contains(n))
        .collect()
}

#[test]
fn without_the_mysql_feature_no_mysql_crate_is_a_dependency() {
    let tree = [
        "tree",
        "-p",
        "fiber_web",
        "-e",
        "normal",
        "--prefix",
        "none",
    ];
    let without = cargo(&[&tree[..], &["--no-default-features"]].concat());
    assert!(
        mysql_in(&without).is_empty(),
        "fiber_web --no-default-features depends on {:?}:\n{without}",
        mysql_in(&without)
    );
    // The tree is read right: with the default features MySQL is there.
    let with = cargo(&tree);
    assert!(
        mysql_in(&with).contains(&"fiber_mysql") && mysql_in(&with).contains(&"mysql_common"),
        "{with}"
    );
}

#[test]
fn the_framework_builds_without_the_mysql_feature() {
    // An app's view: the library and an example that uses it, no MySQL anywhere.
    cargo(&[
        "check",
        "-p",
        "fiber_web",
        "--no-default-features",
        "--lib",
        "--example",
        "hello",
        "--quiet",
    ]);
}

#[test]
fn the_mysql_rule_catches_a_mysql_crate() {
    let tree = "fiber_web v0.1.0 (/x)\nhttparse v1.10.1\nmysql_common v0.37.3\n";
    assert_eq!(mysql_in(tree), ["mysql_common"]);
}
