//! Rules about our own source that no runtime test can enforce reliably: each guards
//! against a hazard that shows only rarely, under load.
//!
//! - may's `TcpStream::connect*` races with its event loop and crashed the server under
//!   a burst of refused connects (about 1 run in 12 of the outage test under load):
//!   connects go through `fiber_pool::net::connect` (see that module).
//! - `unsafe` lives in fiber_pool only: every other crate root forbids it.

use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The product's code: the server, both crates and every example (tests use std).
fn product_files() -> Vec<PathBuf> {
    let root = workspace();
    [
        "src",
        "examples",
        "fiber_pool/src",
        "fiber_pool/examples",
        "fiber_mysql/src",
        "fiber_mysql/examples",
    ]
    .iter()
    .flat_map(|d| rust_files(&root.join(d)))
    .collect()
}

/// Lines of code, without comments.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
}

/// The `TcpStream::connect` calls of files that use may's `TcpStream`.
fn may_connects(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for path in files {
        let text = fs::read_to_string(path).unwrap();
        let uses_may_stream = code_lines(&text).any(|(_, l)| l.contains("may::net::TcpStream"));
        if !uses_may_stream {
            continue;
        }
        for (n, line) in code_lines(&text) {
            if line.contains("TcpStream::connect") && !line.contains("std::net::TcpStream::connect")
            {
                found.push(format!("{}:{n}: {}", path.display(), line.trim()));
            }
        }
    }
    found
}

#[test]
fn no_code_connects_with_mays_racy_connect() {
    let files = product_files();
    assert!(
        files.len() > 30,
        "the scan found the sources: {}",
        files.len()
    );
    let found = may_connects(&files);
    assert!(
        found.is_empty(),
        "use fiber_pool::net::connect instead of may's TcpStream::connect*:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_connect_rule_catches_a_may_connect() {
    let dir = std::env::temp_dir().join(format!("fiberstack-source-rules-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.rs");
    fs::write(
        &bad,
        "use may::net::TcpStream;\n// TcpStream::connect in a comment is fine\nfn f() { let _ = TcpStream::connect_timeout(&a, t); }\n",
    )
    .unwrap();
    let found = may_connects(std::slice::from_ref(&bad));
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("bad.rs:3:"), "{found:?}");
}

#[test]
fn unsafe_code_is_forbidden_outside_fiber_pool() {
    let root = workspace();
    let roots = rust_files(&root.join("examples")).into_iter().chain(
        [
            "src/lib.rs",
            "src/bin/fiberstack/main.rs",
            "fiber_mysql/src/lib.rs",
        ]
        .map(|p| root.join(p)),
    );
    for path in roots {
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("#![forbid(unsafe_code)]"),
            "{} must forbid unsafe code (unsafe belongs in fiber_pool)",
            path.display()
        );
    }
}
