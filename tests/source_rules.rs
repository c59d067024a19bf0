//! Rules about our own source that no runtime test can enforce reliably: each guards
//! against a hazard that shows only rarely, under load.
//!
//! - may's `TcpStream::connect*` races with its event loop and crashed the server under
//!   a burst of refused connects (about 1 run in 12 of the outage test under load):
//!   connects go through `fiber_pool::net::connect` (see that module).
//! - `unsafe` lives in fiber_pool (and the patched may in `patches/`): every other
//!   crate root forbids it, and no other file of the workspace uses it. Spawning a may
//!   coroutine is safe (`fiber_pool::spawn`: the patched may never moves one to another
//!   thread), so nothing else needs it.
//! - Layers only point down (src/lib.rs and fiber_web/src/lib.rs draw them): `app/`
//!   and `twin/` never import a runtime's start-up, fiber_web's `http/` imports no
//!   layer above it.
//! - The library is the framework: the tools (`cli`, `bench`, `stack_report`) are
//!   modules of the binary, not reachable from src/lib.rs.
//! - Docs and comments say what is true now and why, not how it came to be: no tracked
//!   file names a numbered round of work or an issue by its number (a reader has
//!   neither, and the history is git's).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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
        "compare/src",
        "fiber_web/src",
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
            "compare/src/lib.rs",
            "compare/src/main.rs",
            "fiber_web/src/lib.rs",
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
    let files: Vec<PathBuf> = [
        "src",
        "examples",
        "tests",
        "compare",
        "fiber_mysql",
        "fiber_web",
    ]
    .iter()
    .flat_map(|d| rust_files(&root.join(d)))
    .filter(|p| !p.ends_with("tests/source_rules.rs"))
    .collect();
    let found = unsafe_lines(&files);
    assert!(
        found.is_empty(),
        "unsafe outside fiber_pool:\n{}",
        found.join("\n")
    );
}

/// The code lines of `files` that use `unsafe`.
fn unsafe_lines(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for path in files {
        let text = fs::read_to_string(path).unwrap();
        for (n, line) in code_lines(&text) {
            if line.contains("unsafe ")
                || line.contains("unsafe{")
                || line.contains("unsafe_code)]") && line.contains("allow")
            {
                found.push(format!("{}:{n}: {}", path.display(), line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_unsafe_rule_catches_an_unsafe_block_and_an_allow() {
    let dir = std::env::temp_dir().join(format!("fiberstack-unsafe-rule-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.rs");
    fs::write(
        &bad,
        "// unsafe in a comment is fine\nlet a = fiber_pool::carrier::go(f);\n\
         // SAFETY: said\nlet c = unsafe { std::mem::zeroed() };\n#[allow(unsafe_code)]\n",
    )
    .unwrap();
    let found = unsafe_lines(std::slice::from_ref(&bad));
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("bad.rs:4:"), "{found:?}");
    assert!(found[1].contains("bad.rs:5:"), "{found:?}");
}

/// Lines of `text` whose code imports or names `crate::<module>`: a path
/// `crate::module...`, or `module` at the top of a `use crate::{...}` group.
fn names_crate_module(text: &str, module: &str) -> Vec<usize> {
    let code: Vec<(usize, &str)> = code_lines(text).collect();
    let names = |path: &str| {
        path.trim()
            .strip_prefix(module)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    };
    let mut found = Vec::new();
    for (i, &(n, line)) in code.iter().enumerate() {
        for (k, _) in line.match_indices("crate::") {
            let rest = &line[k + "crate::".len()..];
            let hit = if let Some(group) = rest.strip_prefix('{') {
                // A group, maybe over several lines: does a top-level name start with it?
                let after: Vec<&str> = std::iter::once(group)
                    .chain(code[i + 1..].iter().map(|(_, l)| *l))
                    .collect();
                top_level_items(&after.join(" "))
                    .iter()
                    .any(|item| names(item))
            } else {
                names(rest)
            };
            if hit {
                found.push(n);
            }
        }
    }
    found
}

/// The comma-separated items of a `{...}` group whose opening brace is already read,
/// up to its closing brace; nested groups stay inside their item.
fn top_level_items(group: &str) -> Vec<String> {
    let (mut depth, mut item, mut items) = (0, String::new(), Vec::new());
    for c in group.chars() {
        match c {
            '}' if depth == 0 => break,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => {
                depth += i32::from(c == '{') - i32::from(c == '}');
                item.push(c);
            }
        }
    }
    items.push(item);
    items
}

/// Each layer, and the layers above it that it must not name.
const LAYER_RULES: &[(&str, &[&str])] = &[
    ("src/app", &["start", "setup", "flags"]),
    ("compare/src/twin", &["bench", "cancel_report", "serve"]),
    (
        "fiber_web/src/http",
        &["server", "supervisor", "watchdog", "logging"],
    ),
];

/// `file:line: crate::module` for every upward import in `files` of layer `dir`.
fn upward_imports(files: &[PathBuf], forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for path in files {
        let text = fs::read_to_string(path).unwrap();
        for module in forbidden {
            for n in names_crate_module(&text, module) {
                found.push(format!("{}:{n}: crate::{module}", path.display()));
            }
        }
    }
    found
}

#[test]
fn layers_only_point_down() {
    let root = workspace();
    for (dir, forbidden) in LAYER_RULES {
        let files = rust_files(&root.join(dir));
        assert!(files.len() >= 3, "{dir}: the scan found the sources");
        let found = upward_imports(&files, forbidden);
        assert!(
            found.is_empty(),
            "{dir} imports a layer above it (see src/lib.rs's picture; move what both \
             need below both, as http/handler.rs and http/refusal.rs did):\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_layer_rule_catches_an_upward_import() {
    let dir = std::env::temp_dir().join(format!("fiberstack-layer-rule-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("use crate::server::Handler;\n", true),
        (
            "use crate::{\n    config::X,\n    server::{self, App},\n};\n",
            true,
        ),
        ("fn f() { crate::server::queue_full(\"x\", 1, 1); }\n", true),
        (
            "// crate::server in a comment\nuse crate::http::server_name;\n",
            false,
        ),
        ("use crate::{http::{server, Response}, servers};\n", false),
    ];
    for (i, (text, upward)) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.rs"));
        fs::write(&path, text).unwrap();
        let found = upward_imports(std::slice::from_ref(&path), &["server"]);
        assert_eq!(
            !found.is_empty(),
            *upward,
            "case {i}: {text:?} -> {found:?}"
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// The files of the module tree rooted at `root` (a crate root or `mod.rs`), following
/// `mod name;` declarations; a `#[path]` attribute is an error (the walk could not
/// follow it, so a tool could hide behind one).
fn module_tree(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![root.to_path_buf()];
    let mut i = 0;
    while i < files.len() {
        let file = files[i].clone();
        i += 1;
        let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let is_dir_root = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("lib.rs" | "main.rs" | "mod.rs")
        );
        let dir = if is_dir_root {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for (n, line) in code_lines(&text) {
            let line = line.trim();
            if line.starts_with("#[path") {
                return Err(format!("{}:{n}: #[path] hides a module", file.display()));
            }
            let decl = line
                .strip_prefix("pub ")
                .or_else(|| line.strip_prefix("pub(crate) "))
                .unwrap_or(line);
            let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) else {
                continue;
            };
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(name).join("mod.rs");
            files.push(if flat.exists() { flat } else { nested });
        }
    }
    Ok(files)
}

/// The tools' modules found in the library's tree rooted at `lib`: any file under a
/// `bin/` folder, or named for a tool.
fn tools_in_library(lib: &Path) -> Result<Vec<String>, String> {
    const TOOLS: &[&str] = &["bench", "stack_report", "cancel_report"];
    let src = lib.parent().unwrap();
    Ok(module_tree(lib)?
        .iter()
        .filter(|f| {
            let inside = f.strip_prefix(src).unwrap_or(f);
            inside.iter().any(|part| {
                let part = Path::new(part).file_stem().and_then(|s| s.to_str());
                part == Some("bin") || TOOLS.iter().any(|t| part == Some(*t))
            })
        })
        .map(|f| f.display().to_string())
        .collect())
}

#[test]
fn the_tools_are_not_part_of_the_library() {
    let root = workspace();
    for (lib, bin, tools) in [
        (
            "src/lib.rs",
            "src/bin/fiberstack/main.rs",
            &["stack_report.rs"][..],
        ),
        (
            "compare/src/lib.rs",
            "compare/src/main.rs",
            &["bench/mod.rs", "bench/load.rs", "cancel_report.rs"][..],
        ),
    ] {
        let walked = module_tree(&root.join(lib)).unwrap();
        assert!(walked.len() > 10, "the walk found the library: {walked:?}");
        let found = tools_in_library(&root.join(lib)).unwrap();
        assert!(
            found.is_empty(),
            "{lib} reaches the binary's tools; declare them in {bin}: {found:?}"
        );
        // The binary does reach them: the walk would see them if the library declared
        // them.
        let walked = module_tree(&root.join(bin)).unwrap();
        for tool in tools {
            assert!(
                walked.iter().any(|f| f.ends_with(tool)),
                "{tool} not in {bin}: {walked:?}"
            );
        }
    }
}

#[test]
fn the_library_rule_catches_an_exported_tool() {
    let dir = std::env::temp_dir().join(format!("fiberstack-tool-rule-{}", std::process::id()));
    fs::create_dir_all(dir.join("bench")).unwrap();
    fs::write(
        dir.join("lib.rs"),
        "pub mod config;\n// mod cli; in a comment\n",
    )
    .unwrap();
    fs::write(dir.join("config.rs"), "").unwrap();
    fs::write(dir.join("bench/mod.rs"), "pub mod load;\n").unwrap();
    fs::write(dir.join("bench/load.rs"), "").unwrap();
    let clean = tools_in_library(&dir.join("lib.rs"));
    fs::write(dir.join("lib.rs"), "pub mod config;\npub mod bench;\n").unwrap();
    let exported = tools_in_library(&dir.join("lib.rs"));
    fs::write(
        dir.join("lib.rs"),
        "#[path = \"bench/mod.rs\"]\nmod measuring;\n",
    )
    .unwrap();
    let hidden = tools_in_library(&dir.join("lib.rs"));
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(clean, Ok(vec![]));
    let exported = exported.unwrap();
    assert_eq!(exported.len(), 2, "{exported:?}");
    assert!(hidden.unwrap_err().contains("#[path]"));
}

/// The words that, followed by a number, name a piece of the project's history
/// rather than the product: a round of work (a session, a round, a wave) or an issue.
const HISTORY_WORDS: &[&str] = &["session", "issue", "round", "wave"];

/// Whether `line` names a numbered round of work or an issue: one of [`HISTORY_WORDS`]
/// (or its plural) as a whole word, then a number, as in `word 12`, `word #12` or
/// `word#12`. The bench's `--rounds N` flag is a count, not history.
fn names_history(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    HISTORY_WORDS.iter().any(|word| {
        lower.match_indices(word).any(|(at, _)| {
            let before = &lower[..at];
            let starts_word = !before
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            let rest = &lower[at + word.len()..];
            let rest = rest.strip_prefix('s').unwrap_or(rest);
            let number = rest
                .strip_prefix(" #")
                .or_else(|| rest.strip_prefix(' '))
                .or_else(|| rest.strip_prefix('#'))
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
            starts_word && number && !before.ends_with("--")
        })
    })
}

/// `file:line: text` for every line of the text files `git ls-files` lists in `repo`
/// that [`names_history`]. Cargo.lock (generated) and binary files (a NUL byte, or not
/// UTF-8) are skipped, and so is a listed file the work tree no longer has.
fn history_numbers(repo: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo)
        .output()
        .unwrap_or_else(|e| panic!("git ls-files in {}: {e}", repo.display()));
    assert!(
        out.status.success(),
        "git ls-files in {}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8(out.stdout).expect("git lists UTF-8 paths here");
    let mut found = Vec::new();
    for file in listed.split('\0').filter(|f| !f.is_empty()) {
        if Path::new(file)
            .file_name()
            .is_some_and(|n| n == "Cargo.lock")
        {
            continue;
        }
        let Ok(bytes) = fs::read(repo.join(file)) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        if text.contains('\0') {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if names_history(line) {
                found.push(format!("{file}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn no_tracked_file_names_a_round_of_work_or_an_issue_number() {
    let found = history_numbers(&workspace());
    assert!(
        found.is_empty(),
        "say what is true now and why, not which round of work or issue brought it \
         (the history is in git):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_history_rule_catches_a_numbered_round_or_issue() {
    // The planted lines are built here so that this file holds none of them itself.
    let planted = [
        format!("As {} 12 asked, the parser is strict.", "issue"),
        format!("Measured in {} 5, see below.", "Session"),
        format!("after {} 3 and 4 of the work", "rounds"),
        format!("(the first profile, {} 1)", "wave"),
        format!("fixed in {}#15", "issue"),
        format!("see {} #7", "Issues"),
    ];
    let fine = [
        format!("target/release/compare bench --{} 9", "rounds"),
        "9 rounds, rotating the order of the runtimes".to_string(),
        format!("{}ed to 2 decimals", "round"),
        "its last wave in flight when wrk stops".to_string(),
        format!("a t{} 3 cm thick", "issue"),
        "the issue is that the ab of Debian 12 sends one request first".to_string(),
    ];
    for line in &planted {
        assert!(names_history(line), "not caught: {line:?}");
    }
    for line in &fine {
        assert!(!names_history(line), "caught, wrongly: {line:?}");
    }

    // The whole check, on a repository of its own: tracked text files are read; an
    // untracked file, Cargo.lock and a binary file are not.
    let dir = std::env::temp_dir().join(format!("fiberstack-history-rule-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("docs")).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    let mut notes = fine.join("\n");
    notes.push('\n');
    notes.push_str(&planted[0]);
    notes.push('\n');
    fs::write(dir.join("docs/notes.md"), &notes).unwrap();
    fs::write(
        dir.join("code.rs"),
        format!("fn f() {{}}\n// {}\n", planted[1]),
    )
    .unwrap();
    fs::write(dir.join("Cargo.lock"), &planted[2]).unwrap();
    let mut binary = b"\x89PNG\0".to_vec();
    binary.extend_from_slice(planted[3].as_bytes());
    fs::write(dir.join("shot.png"), binary).unwrap();
    git(&["add", "docs/notes.md", "code.rs", "Cargo.lock", "shot.png"]);
    fs::write(dir.join("untracked.md"), &planted[4]).unwrap();
    let found = history_numbers(&dir);
    fs::remove_dir_all(&dir).unwrap();
    let want = vec![
        format!("code.rs:2: // {}", planted[1]),
        format!("docs/notes.md:{}: {}", fine.len() + 1, planted[0]),
    ];
    let mut found = found;
    found.sort();
    assert_eq!(found, want);
}
