//! The layout pictures (the README's and the crates' `//!` headers) say what is true:
//! every file or folder a picture names exists, and every module of the folders it
//! draws is named in it. A file moved, renamed or added without its picture fails here,
//! naming the picture and the name.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

#[path = "common/files.rs"]
mod files;
use files::{rust_files, workspace};

/// A picture: the file holding it, the folders its names are relative to (besides
/// every folder it has already named), and the folders whose every module it draws.
struct Picture {
    file: &'static str,
    bases: &'static [&'static str],
    complete: &'static [&'static str],
}

const PICTURES: &[Picture] = &[
    Picture {
        file: "README.md",
        bases: &[".", "src", "fiber_web/src", "compare/src"],
        complete: &[".", "src", "fiber_web/src", "compare/src"],
    },
    Picture {
        file: "src/lib.rs",
        bases: &["src", "."],
        complete: &["src"],
    },
    Picture {
        file: "fiber_web/src/lib.rs",
        bases: &["fiber_web/src", "."],
        complete: &["fiber_web/src"],
    },
    Picture {
        file: "fiber_web/src/supervisor/mod.rs",
        bases: &["fiber_web/src/supervisor"],
        complete: &["fiber_web/src/supervisor"],
    },
    Picture {
        file: "compare/src/lib.rs",
        bases: &["compare/src", "compare"],
        complete: &["compare/src"],
    },
    Picture {
        file: "compare/src/twin/mod.rs",
        bases: &["compare/src/twin", "compare/src", ".", "src"],
        complete: &["compare/src/twin"],
    },
];

/// The first ```` ```text ```` block of `text`, its lines without a `//! ` prefix.
fn picture_block(text: &str) -> Option<String> {
    let mut lines = text
        .lines()
        .map(|l| l.trim_start().strip_prefix("//!").unwrap_or(l).trim_start());
    lines.by_ref().find(|l| *l == "```text")?;
    let block: Vec<&str> = lines.take_while(|l| *l != "```").collect();
    Some(block.join("\n"))
}

/// The names in a picture: words that end in `.rs` or `/`, like `app.rs`, `http/`,
/// `src/bin/fiberstack/`, `twin/start.rs`.
fn names(block: &str) -> Vec<String> {
    block
        .split(|c: char| !(c.is_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches(['.', '-']))
        .map(|w| w.trim_start_matches(['.', '/', '-']))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .filter(|w| w.ends_with(".rs") || w.ends_with('/'))
        .map(str::to_string)
        .collect()
}

/// Each part of `name` as a module: `twin/start.rs` is `twin/` and `start.rs`.
fn parts(name: &str) -> Vec<String> {
    let segments: Vec<&str> = name.trim_end_matches('/').split('/').collect();
    let last = segments.len() - 1;
    segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i < last || name.ends_with('/') {
                format!("{s}/")
            } else {
                s.to_string()
            }
        })
        .collect()
}

/// The modules of `dir` a picture must name: its `.rs` files but the crate and folder
/// roots, and its folders that hold Rust; for the workspace root, its member crates.
fn modules(root: &Path, dir: &str) -> Vec<String> {
    if dir == "." {
        let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let members = manifest
            .lines()
            .find(|l| l.starts_with("members"))
            .expect("the workspace lists its members");
        return members
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|m| *m != ".")
            .map(|m| format!("{m}/"))
            .collect();
    }
    let mut found = Vec::new();
    for entry in fs::read_dir(root.join(dir)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !rust_files(&path).is_empty() {
                found.push(format!("{name}/"));
            }
        } else if name.ends_with(".rs") && !["lib.rs", "main.rs", "mod.rs"].contains(&&*name) {
            found.push(name);
        }
    }
    found.sort();
    found
}

/// What is wrong with one picture: names that exist under none of its folders, and
/// modules of the folders it draws that it does not name.
fn check(root: &Path, block: &str, bases: &[&str], complete: &[&str]) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut dirs: Vec<PathBuf> = bases.iter().map(|b| root.join(b)).collect();
    let mut named = BTreeSet::new();
    for name in names(block) {
        named.extend(parts(&name));
        match dirs.iter().map(|d| d.join(&name)).find(|p| p.exists()) {
            Some(found) => {
                // What a line names next may be relative to this: `http/ ... client/`.
                let dir = if found.is_dir() {
                    found
                } else {
                    found.parent().unwrap().to_path_buf()
                };
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
            None => wrong.push(format!("names {name}, which does not exist")),
        }
    }
    for dir in complete {
        for module in modules(root, dir) {
            if !named.contains(&module) {
                wrong.push(format!("does not name {dir}/{module}"));
            }
        }
    }
    wrong
}

#[test]
fn every_layout_picture_names_what_exists_and_all_of_it() {
    let root = workspace();
    let mut wrong = Vec::new();
    for picture in PICTURES {
        let text = fs::read_to_string(root.join(picture.file)).unwrap();
        let block = picture_block(&text)
            .unwrap_or_else(|| panic!("{} has no ```text picture", picture.file));
        assert!(
            names(&block).len() >= 3,
            "{}: the scan found the picture's names",
            picture.file
        );
        for w in check(&root, &block, picture.bases, picture.complete) {
            wrong.push(format!("{}: {w}", picture.file));
        }
    }
    assert!(
        wrong.is_empty(),
        "layout pictures out of date (fix the picture, or PICTURES here if a picture \
         moved):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_picture_rule_catches_a_stale_name_and_a_missing_module() {
    let root = std::env::temp_dir().join(format!("fiberstack-pictures-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join("src/http")).unwrap();
    for file in [
        "src/lib.rs",
        "src/app.rs",
        "src/serve.rs",
        "src/http/mod.rs",
        "src/http/conn.rs",
    ] {
        fs::write(root.join(file), "").unwrap();
    }
    let header =
        "//! Layout:\n//! ```text\n//! app.rs, serve.rs   the app\n//! http/ (conn.rs)\n//! ```\n";
    let block = picture_block(header).unwrap();
    assert_eq!(names(&block), ["app.rs", "serve.rs", "http/", "conn.rs"]);
    assert_eq!(
        check(&root, &block, &["src"], &["src"]),
        Vec::<String>::new()
    );

    let stale = block.replace("serve.rs", "cli.rs");
    assert_eq!(
        check(&root, &stale, &["src"], &["src"]),
        [
            "names cli.rs, which does not exist",
            "does not name src/serve.rs"
        ]
    );
    fs::write(root.join("src/shutdown.rs"), "").unwrap();
    assert_eq!(
        check(&root, &block, &["src"], &["src"]),
        ["does not name src/shutdown.rs"]
    );
    fs::remove_dir_all(&root).unwrap();
}
