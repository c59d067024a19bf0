//! Dependency hygiene: the crates whose internals we rely on (may, corosensei,
//! mysql_common; see the root Cargo.toml) must be built exactly once (two copies of
//! mysql_common would mean two protocol implementations, two of may two schedulers),
//! and the crates a user's app depends on (fiber_web, fiber_mysql, fiber_pool) build
//! none of the demo's other runtimes and tools (tokio, axum, hyper, mysql_async,
//! may_minihttp, clap, the `mysql` crate).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Crates of which exactly one version may be in the build.
const ONE_COPY: &[&str] = &["may", "corosensei", "mysql_common"];

/// `cargo metadata` of the workspace as this machine builds it: every target and
/// feature, dev-dependencies included, for the host platform only.
///
/// Offline, and filtered to the host: without the filter cargo reads the manifest of
/// every platform's packages (Windows-only crates among them), which a cargo cache
/// filled by building here does not hold, so the test would pass only where some
/// other build had already fetched them. A second copy of a crate on the host is
/// what matters: it is what would be linked here.
fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let host = host_platform();
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo} metadata: {e}"));
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The host's target triple, as rustc names it (`x86_64-unknown-linux-gnu`).
fn host_platform() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "host-tuple"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {rustc} --print host-tuple: {e}"));
    assert!(out.status.success(), "{rustc} --print host-tuple failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Versions of each package in the resolved dependency graph of `meta`.
fn resolved_versions(meta: &serde_json::Value) -> BTreeMap<String, BTreeSet<String>> {
    // Resolve node ids name packages; look each up to get its name and version.
    let packages: BTreeMap<&str, (&str, &str)> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap();
            (s("id"), (s("name"), s("version")))
        })
        .collect();
    let mut versions: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let (name, version) = packages[node["id"].as_str().unwrap()];
        versions
            .entry(name.to_string())
            .or_default()
            .insert(version.to_string());
    }
    versions
}

/// What is wrong with `meta`: each crate of [`ONE_COPY`] not built exactly once.
fn not_once(meta: &serde_json::Value) -> Vec<String> {
    let versions = resolved_versions(meta);
    ONE_COPY
        .iter()
        .filter_map(|name| {
            let found = versions.get(*name).cloned().unwrap_or_default();
            (found.len() != 1).then(|| format!("{name}: {found:?}"))
        })
        .collect()
}

#[test]
fn may_corosensei_and_mysql_common_are_built_once() {
    let wrong = not_once(&metadata());
    assert!(
        wrong.is_empty(),
        "expected exactly one version of each, found {wrong:?}; align the versions in \
         the root Cargo.toml (`cargo tree -d` shows who pulls each)"
    );
}

#[test]
fn the_check_catches_a_second_copy() {
    // The real graph, with a second mysql_common added as cargo would list it.
    let mut meta = metadata();
    let id = "registry+https://github.com/rust-lang/crates.io-index#mysql_common@0.38.2";
    meta["packages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({ "id": id, "name": "mysql_common", "version": "0.38.2" }));
    meta["resolve"]["nodes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({ "id": id }));
    let wrong = not_once(&meta);
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(
        wrong[0].contains("0.37.3") && wrong[0].contains("0.38.2"),
        "{wrong:?}"
    );
}

/// Crates of the demo's other runtimes and tools that a user's app on the framework
/// must not build.
const NOT_IN_THE_FRAMEWORK: &[&str] = &[
    "tokio",
    "axum",
    "hyper",
    "mysql_async",
    "may_minihttp",
    "clap",
    "mysql",
];

/// The packages `package` builds through its normal dependencies with its default
/// features, as `cargo tree -p` resolves them for it alone (`cargo metadata` unifies
/// the features of the whole workspace, where the demo turns fiber_mysql's `threads`
/// on): `name version` lines. Offline and for the host, as `metadata` is.
fn normal_packages(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let host = host_platform();
    let out = Command::new(&cargo)
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args([
            "--format",
            "{p}",
            "--locked",
            "--offline",
            "--target",
            &host,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo} tree: {e}"));
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The crates of [`NOT_IN_THE_FRAMEWORK`] among `packages` (`name version` lines).
fn demo_crates_in(packages: &[String]) -> Vec<&'static str> {
    NOT_IN_THE_FRAMEWORK
        .iter()
        .copied()
        .filter(|c| packages.iter().any(|p| p.split(' ').next() == Some(*c)))
        .collect()
}

#[test]
fn the_framework_builds_none_of_the_demos_runtimes_or_tools() {
    for package in ["fiber_web", "fiber_mysql", "fiber_pool"] {
        let found = demo_crates_in(&normal_packages(package));
        assert!(
            found.is_empty(),
            "{package} builds {found:?} (normal dependencies, default features): they \
             belong to the demo's twin, baseline or tools, not to a user's app"
        );
    }
    // The comparison rig does build them: the tree is read right.
    let rig = demo_crates_in(&normal_packages("compare"));
    assert!(rig.contains(&"tokio") && rig.contains(&"mysql"), "{rig:?}");
    // The demo builds none of the rig's runtimes: it is an ordinary app.
    let demo = demo_crates_in(&normal_packages("fiberstack"));
    for rigs in ["tokio", "axum", "hyper", "mysql_async", "may_minihttp"] {
        assert!(!demo.contains(&rigs), "the demo builds {rigs}: {demo:?}");
    }
}

#[test]
fn the_framework_rule_catches_a_runtime_pulled_in() {
    let mut packages = normal_packages("fiber_web");
    packages.push("tokio v1.54.1".into());
    packages.push("tokio-macros v2.5.0".into());
    assert_eq!(demo_crates_in(&packages), ["tokio"]);
}
