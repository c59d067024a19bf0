//! The workspace's files, for the tests that read its sources and docs
//! (`source_rules.rs`, `pictures.rs`), each including this file on its own: neither
//! starts a server, so neither takes the rest of `common`.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's root (the root package's directory).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
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
