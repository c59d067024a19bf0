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
//! - Inside a crate, files import each other in one direction only: fiber_pool and
//!   fiber_mysql have no import cycle, and fiber_web's and the demo's stand listed,
//!   each with what closes it (`CHECKED_CRATES`), so that none grows and no new one
//!   appears.
//! - The library is the framework: the tools (`cli`, `bench`, `stack_report`) are
//!   modules of the binary, not reachable from src/lib.rs.
//! - A message the framework sends says what it means once: no string literal in
//!   fiber_web, fiber_mysql or fiber_pool runs onto a new line without its `\`, which
//!   puts the next line's indentation (a run of spaces) into the message.
//! - Docs and comments say what is true now and why, not how it came to be: no tracked
//!   file names a numbered round of work or an issue by its number (a reader has
//!   neither, and the history is git's).

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/files.rs"]
mod files;
use files::{rust_files, workspace};

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

/// The lines of `text` where a (non-raw) string literal continues onto an indented
/// line without a `\` before its newline: the indentation becomes part of the text.
/// Comments, raw strings and character literals are skipped.
fn unwrapped_strings(text: &str) -> Vec<usize> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let (mut i, mut line, mut found) = (0, 1, Vec::new());
    while i < chars.len() {
        match (at(i), at(i + 1)) {
            ('\n', _) => {
                line += 1;
                i += 1;
            }
            ('/', '/') => {
                while !matches!(at(i), '\n' | '\0') {
                    i += 1;
                }
            }
            ('/', '*') => {
                while !(at(i) == '*' && at(i + 1) == '/') && at(i) != '\0' {
                    line += usize::from(at(i) == '\n');
                    i += 1;
                }
                i += 2;
            }
            ('r', '"' | '#') if i == 0 || !(at(i - 1).is_alphanumeric() || at(i - 1) == '_') => {
                let hashes = (i + 1..).take_while(|&k| at(k) == '#').count();
                let mut k = i + 1 + hashes + 1;
                while at(k) != '\0' && !(at(k) == '"' && (1..=hashes).all(|h| at(k + h) == '#')) {
                    line += usize::from(at(k) == '\n');
                    k += 1;
                }
                i = k + 1 + hashes;
            }
            ('\'', '\\') => {
                i += 2;
                while !matches!(at(i), '\'' | '\0') {
                    i += 1;
                }
                i += 1;
            }
            ('\'', _) if at(i + 2) == '\'' => i += 3,
            ('"', _) => {
                i += 1;
                while !matches!(at(i), '"' | '\0') {
                    if at(i) == '\\' {
                        line += usize::from(at(i + 1) == '\n');
                        i += 2;
                        continue;
                    }
                    if at(i) == '\n' {
                        line += 1;
                        if at(i + 1) == ' ' && at(i + 2) == ' ' {
                            found.push(line);
                        }
                    }
                    i += 1;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    found
}

#[test]
fn no_framework_message_holds_a_lost_line_continuation() {
    let root = workspace();
    let mut found = Vec::new();
    for krate in ["fiber_web/src", "fiber_mysql/src", "fiber_pool/src"] {
        for path in rust_files(&root.join(krate)) {
            for line in unwrapped_strings(&fs::read_to_string(&path).unwrap()) {
                found.push(format!("{}:{line}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "string literals that run onto an indented line without `\\` (the indentation \
         is sent as part of the message):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_continuation_rule_catches_a_lost_backslash_and_nothing_else() {
    let planted = "fn f() -> String {\n    // \"a comment\n    //   is no string\"\n    \
                   let ok = \"one \\\n        line\";\n    let raw = r#\"a\n   b\"#;\n    \
                   let c = '\"';\n    format!(\"{ok}{raw}{c} and then\n        the indentation\")\n}\n";
    assert_eq!(unwrapped_strings(planted), [10], "{planted}");
}

/// One token of Rust source: a name (identifier, keyword, number), `::`, or one other
/// character, with the line it is on.
#[derive(Debug)]
struct Token {
    text: String,
    line: usize,
}

/// The tokens of `text` without its comments (line, nested block) and literals
/// (strings, raw, byte and C strings, characters), so that `crate::x` in a doc comment
/// or an error message is no import. A lifetime is `'` and a name; `r#type` is `type`.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    // `at` is '\0' past the end, so every word ends.
    let word_end = |i: usize| (i..).find(|&k| !is_word(at(k))).unwrap();
    // The end of a string literal whose body starts at `i`.
    let string_end = |mut i: usize, raw: bool, hashes: usize| loop {
        match at(i) {
            '\0' => return i,
            '\\' if !raw => i += 2,
            '"' if (1..=hashes).all(|h| at(i + h) == '#') => return i + 1 + hashes,
            _ => i += 1,
        }
    };
    // Each token's first and last character (exclusive); every branch moves `i` on.
    let mut spans = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while !matches!(at(i), '\n' | '\0') {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                match (at(i), at(i + 1)) {
                    ('/', '*') => (depth, i) = (depth + 1, i + 2),
                    ('*', '/') => (depth, i) = (depth - 1, i + 2),
                    ('\0', _) => break,
                    _ => i += 1,
                }
                if depth == 0 {
                    break;
                }
            }
        } else if c == '"' {
            i = string_end(i + 1, false, 0);
        } else if c == '\'' && at(i + 1) == '\\' {
            // An escaped character: `'\''`, `'\n'`, `'\u{1F600}'`.
            i += 3;
            while !matches!(at(i), '\'' | '\0') {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && at(i + 2) == '\'' {
            i += 3;
        } else if is_word(c) {
            let end = word_end(i);
            let word: String = chars[i..end].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            let hashes = (end..).take_while(|&k| raw && at(k) == '#').count();
            if (raw || word == "b" || word == "c") && at(end + hashes) == '"' {
                i = string_end(end + hashes + 1, raw, hashes);
            } else if word == "b" && at(end) == '\'' {
                // A byte `b'x'`: the quote is read next, as a character.
                i = end;
            } else if word == "r" && hashes == 1 && is_word(at(end + 1)) {
                spans.push((end + 1, word_end(end + 1)));
                i = word_end(end + 1);
            } else {
                spans.push((i, end));
                i = end;
            }
        } else if c == ':' && at(i + 1) == ':' {
            spans.push((i, i + 2));
            i += 2;
        } else {
            spans.push((i, i + 1));
            i += 1;
        }
    }
    let (mut line, mut counted) = (1, 0);
    spans
        .into_iter()
        .map(|(start, end)| {
            line += chars[counted..start].iter().filter(|&&c| c == '\n').count();
            counted = start;
            Token {
                text: chars[start..end].iter().collect(),
                line,
            }
        })
        .collect()
}

/// The text of token `i`, or "" past the end.
fn text_at(toks: &[Token], i: usize) -> &str {
    toks.get(i).map_or("", |t| t.text.as_str())
}

/// Moves `*i` past the attributes at it (`#[cfg(test)]`, `#![allow(..)]`).
fn skip_attributes(toks: &[Token], i: &mut usize) {
    while text_at(toks, *i) == "#" {
        let open = *i + 1 + usize::from(text_at(toks, *i + 1) == "!");
        if text_at(toks, open) != "[" {
            return;
        }
        let mut depth = 0;
        for k in open.. {
            match text_at(toks, k) {
                "[" => depth += 1,
                "]" => depth -= 1,
                "" => depth = 0,
                _ => {}
            }
            if depth == 0 {
                *i = k + 1;
                break;
            }
        }
    }
}

/// The paths of the use-tree at `toks[*i]` (`a::b::{c, d::{self, e as f}}`, `a::*`),
/// each with the name it binds: its last name, its alias, or for `self` in a group the
/// group's last name. A path in code (`x::y(..)`, `x::f::<T>`) is a tree that stops at
/// its first token that is no name. `*i` ends on the token after the tree; nothing is
/// read where no tree starts.
fn use_tree(toks: &[Token], i: &mut usize) -> Vec<(Vec<String>, String)> {
    let text = |k: usize| text_at(toks, k);
    let is_name = |w: &str| w == "*" || w.starts_with(|c: char| c.is_alphanumeric() || c == '_');
    let mut prefix: Vec<String> = Vec::new();
    while is_name(text(*i)) {
        prefix.push(text(*i).to_string());
        *i += 1;
        if text(*i) != "::" {
            let mut name = text(*i - 1).to_string();
            if text(*i) == "as" {
                name = text(*i + 1).to_string();
                *i += 2;
            }
            return vec![(prefix, name)];
        }
        *i += 1;
    }
    if text(*i) != "{" {
        return match prefix.last().cloned() {
            Some(name) => vec![(prefix, name)],
            None => Vec::new(),
        };
    }
    *i += 1;
    let mut paths = Vec::new();
    while !matches!(text(*i), "}" | "") {
        let before = *i;
        skip_attributes(toks, i);
        for (sub, name) in use_tree(toks, i) {
            let name = match name.as_str() {
                "self" => prefix.last().cloned().unwrap_or(name),
                _ => name,
            };
            let path = prefix.iter().chain(&sub).filter(|s| *s != "self");
            paths.push((path.cloned().collect(), name));
        }
        // Past the comma, or past a token no tree starts with: the walk always moves on.
        if text(*i) == "," || *i == before {
            *i += 1;
        }
    }
    *i += 1;
    paths
}

/// `path`, named in the module `base`, from the crate root, or `None` for another
/// crate's: `crate::` starts at the root, `self::` and `super::` at `base` and its
/// parents, and a name of one of `children` (the modules declared in `base`) at `base`.
fn absolute(path: &[String], base: &[String], children: &[String]) -> Option<Vec<String>> {
    let mut out = base.to_vec();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            out.clear();
            rest = &path[1..];
        }
        Some("self" | "super") => {
            while let Some(first @ ("self" | "super")) = rest.first().map(String::as_str) {
                if first == "super" {
                    out.pop();
                }
                rest = &rest[1..];
            }
        }
        Some(first) if children.iter().any(|c| c == first) => {}
        _ => return None,
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

/// A path that one file's code names.
struct Reference {
    line: usize,
    /// From the crate root; `None` for another crate's item.
    path: Option<Vec<String>>,
    /// The name a `use` at the top of the file binds the path to in the file's module.
    binds: Option<String>,
}

/// The references of the file whose module is `module` (`[]` for the crate root) and
/// whose child modules are `children`: every path of a `use`, and every path in code
/// that starts with `crate`, `self`, `super` or a child, each taken relative to the
/// inline `mod name { }` it is in (such as a `tests` module's `use super::*`).
fn references(text: &str, module: &[String], children: &[String]) -> Vec<Reference> {
    let toks = tokens(text);
    let text = |k: usize| text_at(&toks, k);
    // The inline modules around token `i`, each with the depth of its braces.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let (mut depth, mut refs, mut i) = (0, Vec::new(), 0);
    while i < toks.len() {
        let line = toks[i].line;
        let base: Vec<String> = module
            .iter()
            .chain(inline.iter().map(|(name, _)| name))
            .cloned()
            .collect();
        let children = if inline.is_empty() { children } else { &[] };
        match text(i) {
            "{" => {
                depth += 1;
                if text(i.wrapping_sub(2)) == "mod" {
                    inline.push((text(i - 1).to_string(), depth));
                }
                i += 1;
            }
            "}" => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            "use" => {
                let top = depth == 0;
                i += 1;
                let other_crate = text(i) == "::";
                i += usize::from(other_crate);
                for (path, name) in use_tree(&toks, &mut i) {
                    refs.push(Reference {
                        line,
                        path: (!other_crate)
                            .then(|| absolute(&path, &base, children))
                            .flatten(),
                        binds: (top && name != "*").then_some(name),
                    });
                }
            }
            word if text(i + 1) == "::"
                && text(i.wrapping_sub(1)) != "::"
                && (matches!(word, "crate" | "self" | "super")
                    || children.iter().any(|c| c == word)) =>
            {
                for (path, _) in use_tree(&toks, &mut i) {
                    refs.push(Reference {
                        line,
                        path: absolute(&path, &base, children),
                        binds: None,
                    });
                }
            }
            _ => i += 1,
        }
    }
    refs
}

/// A crate's module import graph: its files (the module tree from its root), and for
/// each the files it imports, with the line of its first import of each. A path
/// imports the file that defines what it names, followed through the `use`s of the
/// modules on its way (`crate::lock_anywhere` imports the file that defines it, not
/// lib.rs that re-exports it); a path to another crate's item imports nothing.
struct ImportGraph {
    files: Vec<PathBuf>,
    imports: Vec<BTreeMap<usize, usize>>,
}

fn import_graph(root: &Path) -> Result<ImportGraph, String> {
    let files = module_tree(root)?;
    let src = root.parent().unwrap();
    let modules: Vec<Vec<String>> = files
        .iter()
        .map(|file| {
            let inside = file.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = inside
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("lib" | "main" | "mod")
            ) {
                parts.pop();
            }
            parts
        })
        .collect();
    let mut refs = Vec::new();
    for (file, module) in files.iter().zip(&modules) {
        let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let children: Vec<String> = modules
            .iter()
            .filter(|c| c.len() == module.len() + 1 && c.starts_with(module))
            .map(|c| c.last().unwrap().clone())
            .collect();
        refs.push(references(&text, module, &children));
    }
    // The names each module's `use`s bind, to the path each names (`None`: another crate's).
    let binds: Vec<BTreeMap<&str, &Option<Vec<String>>>> = refs
        .iter()
        .map(|rs| {
            rs.iter()
                .filter_map(|r| Some((r.binds.as_deref()?, &r.path)))
                .collect()
        })
        .collect();
    // The file a path leads to: the module of its longest prefix that is one, or where
    // that module's `use` of the next name leads (a few hops at most, so that a `use`
    // that names itself ends).
    let resolve = |path: &[String]| -> Option<usize> {
        let mut path = path.to_vec();
        for hops in 0.. {
            let (m, len) = (0..=path.len())
                .rev()
                .find_map(|len| Some((modules.iter().position(|m| m[..] == path[..len])?, len)))?;
            match path.get(len).and_then(|name| binds[m].get(name.as_str())) {
                Some(None) => return None,
                Some(Some(target)) if hops < 8 => {
                    path = target.iter().chain(&path[len + 1..]).cloned().collect();
                }
                _ => return Some(m),
            }
        }
        unreachable!("the loop returns")
    };
    let imports = refs
        .iter()
        .enumerate()
        .map(|(n, rs)| {
            let mut to = BTreeMap::new();
            for r in rs {
                if let Some(m) = r.path.as_deref().and_then(resolve).filter(|&m| m != n) {
                    to.entry(m).or_insert(r.line);
                }
            }
            to
        })
        .collect();
    Ok(ImportGraph { files, imports })
}

/// An import cycle: the files that import each other, directly or through others
/// (sorted), and the shortest way around from the first file found, as arrows
/// `a.rs:12 -> b.rs` (file, line of the import, file imported).
#[derive(Debug)]
struct Cycle {
    files: Vec<PathBuf>,
    arrows: Vec<String>,
}

/// Every import cycle of `graph`, one per set of files that all reach each other.
fn import_cycles(graph: &ImportGraph) -> Vec<Cycle> {
    let n = graph.files.len();
    let reach: Vec<Vec<bool>> = (0..n)
        .map(|from| {
            let (mut seen, mut todo) = (vec![false; n], vec![from]);
            while let Some(f) = todo.pop() {
                for &to in graph.imports[f].keys() {
                    if !seen[to] {
                        seen[to] = true;
                        todo.push(to);
                    }
                }
            }
            seen
        })
        .collect();
    let name = |f: usize| graph.files[f].display().to_string();
    let mut reported = vec![false; n];
    let mut cycles = Vec::new();
    for start in 0..n {
        if reported[start] || !reach[start][start] {
            continue;
        }
        let members: Vec<usize> = (0..n)
            .filter(|&f| reach[start][f] && reach[f][start])
            .collect();
        // Breadth first from `start` over its cycle's files, until back at `start`.
        let mut came_from = vec![None; n];
        let mut queue = VecDeque::from([start]);
        while came_from[start].is_none() {
            let f = queue.pop_front().expect("start reaches itself");
            for &to in graph.imports[f].keys() {
                if reach[to][start] && came_from[to].is_none() {
                    came_from[to] = Some(f);
                    queue.push_back(to);
                }
            }
        }
        let mut arrows = Vec::new();
        let mut to = start;
        loop {
            let from = came_from[to].unwrap();
            let line = graph.imports[from][&to];
            arrows.push(format!("{}:{line} -> {}", name(from), name(to)));
            to = from;
            if to == start {
                break;
            }
        }
        arrows.reverse();
        for &f in &members {
            reported[f] = true;
        }
        let mut files: Vec<PathBuf> = members.iter().map(|&f| graph.files[f].clone()).collect();
        files.sort();
        cycles.push(Cycle { files, arrows });
    }
    cycles
}

/// The crates whose import cycles are checked, by their roots, each with the cycles
/// that stand in it (each the files of one, relative to the crate's `src`): a cycle
/// found must lie within one of them, so that none grows and no other appears. An
/// entry shrinks or goes with its cycle; a change that moves its files updates it.
///
/// fiber_pool and fiber_mysql, the crates below the others, have none. fiber_web and
/// the demo are checked too, with their standing cycles and what closes each. The
/// comparison rig is not: its async twin mirrors the demo's `app/` file by file, circle
/// included.
const CHECKED_CRATES: &[(&str, &[&[&str]])] = &[
    ("fiber_pool/src/lib.rs", &[]),
    ("fiber_mysql/src/lib.rs", &[]),
    (
        "fiber_web/src/lib.rs",
        &[
            // app.rs adds the built-in routes, which take app.rs's Readiness and MetricsHook.
            &["app.rs", "builtin.rs"],
            // options.rs parses the flags of flags.rs, whose AppFlags asks options.rs
            // which names are the framework's; options.rs bounds --processes with
            // supervisor's MAX_PROCESSES, and the supervisor logs under logging's app
            // name, which flags.rs sets.
            &[
                "flags.rs",
                "logging.rs",
                "options.rs",
                "supervisor/inherit.rs",
                "supervisor/process.rs",
                "supervisor/worker.rs",
            ],
            // HttpError is http/mod.rs's own, and mod.rs re-exports the files that use it.
            &[
                "http/handler.rs",
                "http/mod.rs",
                "http/request.rs",
                "http/router.rs",
                "http/target.rs",
            ],
            // The client's mod.rs re-exports request.rs's Method, and request.rs builds
            // on mod.rs's HttpClient.
            &[
                "http/client/exchange.rs",
                "http/client/mod.rs",
                "http/client/request.rs",
            ],
            // A connection keeps the redirect it is following; following opens connections.
            &["http/client/conn.rs", "http/client/follow.rs"],
        ],
    ),
    (
        "src/lib.rs",
        // app/mod.rs routes to each handler's file, and each takes mod.rs's AppState.
        &[&[
            "app/dashboard.rs",
            "app/deep.rs",
            "app/health.rs",
            "app/mod.rs",
            "app/sleep.rs",
            "app/stats.rs",
            "app/twitter.rs",
            "app/upstream.rs",
            "app/widgets.rs",
        ]],
    ),
];

/// The cycles of `found` that lie within none of `standing` (file sets relative to
/// `src`), each as its arrows.
fn new_cycles(src: &Path, found: Vec<Cycle>, standing: &[&[&str]]) -> Vec<String> {
    found
        .into_iter()
        .filter(|cycle| {
            !standing.iter().any(|files| {
                cycle
                    .files
                    .iter()
                    .all(|f| files.iter().any(|s| src.join(s) == *f))
            })
        })
        .map(|cycle| cycle.arrows.join("\n  "))
        .collect()
}

#[test]
fn no_library_crate_has_an_import_cycle() {
    let root = workspace();
    let mut found = Vec::new();
    for (lib, standing) in CHECKED_CRATES {
        let graph = import_graph(&root.join(lib)).unwrap();
        let imports: usize = graph.imports.iter().map(|to| to.len()).sum();
        assert!(
            graph.files.len() > 10 && imports > 20,
            "{lib}: the walk found the crate: {} files, {imports} imports",
            graph.files.len()
        );
        let src = root.join(lib).parent().unwrap().to_path_buf();
        found.extend(new_cycles(&src, import_cycles(&graph), standing));
    }
    assert!(
        found.is_empty(),
        "import cycles (layers only point down: move what both sides need into a module \
         below both, or beside its one user):\n  {}",
        found.join("\n\n  ")
    );
}

#[test]
fn the_cycle_rule_catches_a_planted_cycle_and_nothing_else() {
    let dir = std::env::temp_dir().join(format!("fiberstack-cycle-rule-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("e")).unwrap();
    let plant = |name: &str, text: &str| fs::write(dir.join(name), text).unwrap();
    // a -> b -> c -> a, each import written another way. d names c through the face
    // (under an alias), and anything else only in comments, strings, another crate's
    // re-export, a group of another crate's paths and its own tests module.
    plant(
        "lib.rs",
        "//! Docs naming crate::a.\nmod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod net;\n\
         pub use c::Thing as Other;\n#[cfg(test)]\npub use std::fmt::Debug as Dbg;\n\
         use std::{io, net::TcpStream};\n",
    );
    plant(
        "a.rs",
        "use crate::{\n    #[cfg(all())]\n    b::X,\n    ;\n};\n",
    );
    plant("b.rs", "use crate::{\n    c::{self, Y},\n};\n");
    plant(
        "c.rs",
        "pub struct Thing;\nfn f() {\n    let s = r#\"crate::d::f\"#;\n    crate::a::z(s, '\"', '\\'');\n}\n",
    );
    plant(
        "d.rs",
        "use crate::Other; // crate::b\n/* crate::a /* nested */ crate::e */\n\
         fn g(_: &dyn crate::Dbg) {}\n\
         #[cfg(test)]\nmod tests {\n    use super::*;\n    use self::helper::h;\n}\n",
    );
    // A module and its child that import each other: e (mod.rs) and e/f.
    plant("e/mod.rs", "mod f;\npub struct G;\nfn g() { f::h(); }\n");
    plant("e/f.rs", "use super::G;\npub fn h() {}\n");
    plant("net.rs", "pub struct TcpStream;\n");
    let graph = import_graph(&dir.join("lib.rs")).unwrap();
    let name = |f: &str| dir.join(f).display().to_string();
    let imports_of = |f: &str| -> Vec<String> {
        let at = graph.files.iter().position(|p| *p == dir.join(f)).unwrap();
        graph.imports[at]
            .iter()
            .map(|(&to, line)| format!("{}:{line}", graph.files[to].display()))
            .collect()
    };
    assert_eq!(
        imports_of("d.rs"),
        vec![format!("{}:1", name("c.rs"))],
        "d names c only"
    );
    assert_eq!(
        imports_of("lib.rs"),
        vec![format!("{}:8", name("c.rs"))],
        "the face re-exports c"
    );
    let arrows: Vec<Vec<String>> = import_cycles(&graph)
        .into_iter()
        .map(|c| c.arrows)
        .collect();
    assert_eq!(
        arrows,
        vec![
            vec![
                format!("{}:1 -> {}", name("a.rs"), name("b.rs")),
                format!("{}:1 -> {}", name("b.rs"), name("c.rs")),
                format!("{}:4 -> {}", name("c.rs"), name("a.rs")),
            ],
            vec![
                format!("{}:3 -> {}", name("e/mod.rs"), name("e/f.rs")),
                format!("{}:1 -> {}", name("e/f.rs"), name("e/mod.rs")),
            ],
        ],
    );
    // A standing cycle is one whose files all lie within a listed set.
    let standing: &[&[&str]] = &[&["a.rs", "b.rs", "c.rs"], &["e/f.rs"]];
    let new = new_cycles(&dir, import_cycles(&graph), standing);
    let grown = new_cycles(&dir, import_cycles(&graph), &[&["a.rs", "b.rs"]]);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(new[0].starts_with(&name("e/mod.rs")), "{new:?}");
    assert_eq!(grown.len(), 2, "{grown:?}");
}
