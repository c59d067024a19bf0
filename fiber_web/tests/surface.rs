//! The framework's public surface, counted from its source so that it cannot creep
//! back: what a user's app sees is the crate root (at most [`MAX_ROOT_NAMES`] names,
//! like axum's 22) and the public modules, and every internal is `pub(crate)`, or
//! reaches the comparison rig through the one hidden `rig` module.
//!
//! The count is an upper bound on the public items, read line by line: every
//! declaration written `pub ` (not `pub(crate)`, `pub(super)`, `pub(in ..)`) in any file
//! of `src/`, a `pub` field or method as much as a `pub fn`, and each name a `pub use`
//! brings in. An item marked `pub` inside a private module that nothing re-exports is
//! unreachable, but it counts too: what is not API is written `pub(crate)`, so that a
//! reader sees at the declaration which it is. `cargo test -p fiber_web --test surface
//! -- --nocapture` prints the figures.

use std::fs;
use std::path::{Path, PathBuf};

/// Most `pub` items in `src/`, as counted here. 522 when the bound was set, from 635
/// before the internals became `pub(crate)`; of those, 42 are the rig's re-exports and
/// about 40 the client's and the root's re-exports of items counted where they are
/// declared too. axum and axum-core together have about 440 public items for routing,
/// extractors and a tower stack; ours also holds the HTTP client, the layers, the test
/// client, the metrics snapshot and every limit as a named field. A little room above
/// what is there: raise it only for an item a user needs, and say which. Raised to 580
/// for the app's error format (`Problem` and its `Location`, `App::render_problems`),
/// request extensions (`Extensions`) and request ids as the app's (`RequestId`,
/// `Request::request_id`). Raised to 640 for status codes by name (`status`: 60
/// constants, as axum's `StatusCode` has its own) and `fan_out`, whose children's
/// errors are responses so that a handler's fan-out needs no type annotations.
const MAX_PUB_ITEMS: usize = 640;

/// Most names at the crate root: about 25 is the aim, axum's root has 22. 33 with
/// `Problem`, `Location` and `Extensions`, which every app's handlers and layers name,
/// and the `status` and `fan_out` modules.
const MAX_ROOT_NAMES: usize = 33;

/// Every `.rs` file under `dir`, recursively, sorted.
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
    out.sort();
    out
}

/// The code of `text`, statement by statement as far as `pub` items go: comment lines
/// dropped, a unit-test module (`mod tests {` to the end of the file, where ours are)
/// left out, and a `pub use` that spans lines joined into one.
fn code_lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open_use = false;
    for line in text.lines() {
        let code = line.trim();
        if code.starts_with("//") {
            continue;
        }
        if code.starts_with("mod tests {") {
            break;
        }
        if open_use {
            let last = out.last_mut().unwrap();
            last.push(' ');
            last.push_str(code);
            open_use = !code.ends_with(';');
        } else {
            open_use = code.starts_with("pub use ") && !code.ends_with(';');
            out.push(code.to_string());
        }
    }
    out
}

/// The names a `pub use` line brings in: `pub use a::{b, c as d, e::{f, g}};` is `b`,
/// `d`, `f`, `g`; a glob cannot be counted and fails the test.
fn used_names(line: &str) -> Vec<String> {
    let path = line
        .strip_prefix("pub use ")
        .and_then(|p| p.strip_suffix(';'))
        .unwrap_or_else(|| panic!("not a whole `pub use`: {line}"));
    assert!(
        !path.contains('*'),
        "a glob re-export cannot be counted: {line}"
    );
    // The leaves: split on braces and commas, keep each item's last segment or alias.
    path.split(['{', '}', ','])
        .map(str::trim)
        .filter(|item| !item.is_empty() && !item.ends_with("::"))
        .map(|item| {
            let name = item.rsplit(" as ").next().unwrap_or(item);
            name.rsplit("::").next().unwrap_or(name).trim().to_string()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// The public items `text` declares or re-exports (see the file's header), by name.
fn pub_items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    for line in code_lines(text) {
        let Some(rest) = line.strip_prefix("pub ") else {
            continue;
        };
        if rest.starts_with("use ") {
            items.extend(used_names(&line));
        } else {
            // `pub fn name(..)`, `pub struct Name<..>`, `pub name: Type`, ...
            let words: Vec<&str> = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            let keywords = [
                "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "unsafe",
                "async", "extern",
            ];
            let name = words.iter().find(|w| !keywords.contains(w)).unwrap_or(&"?");
            items.push((*name).to_string());
        }
    }
    items
}

/// The names at the crate root, from `lib.rs`: its public modules, its re-exports and
/// whatever it declares `pub` itself.
fn root_names(lib_rs: &str) -> Vec<String> {
    pub_items(lib_rs)
}

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_public_surface_stays_within_its_bounds() {
    let mut total = 0;
    let mut per_file = Vec::new();
    for path in rust_files(&src()) {
        let n = pub_items(&fs::read_to_string(&path).unwrap()).len();
        total += n;
        let name = path.strip_prefix(src()).unwrap().display().to_string();
        per_file.push((n, name));
    }
    per_file.sort_by(|a, b| b.cmp(a));
    let rig = pub_items(&fs::read_to_string(src().join("rig.rs")).unwrap()).len();
    let root = root_names(&fs::read_to_string(src().join("lib.rs")).unwrap());
    println!("fiber_web: {total} public items (bound {MAX_PUB_ITEMS}), {rig} of them the rig's");
    for (n, file) in &per_file {
        println!("  {n:4} {file}");
    }
    println!(
        "root: {} names (bound {MAX_ROOT_NAMES}): {}",
        root.len(),
        root.join(", ")
    );
    assert!(
        total <= MAX_PUB_ITEMS,
        "fiber_web has {total} public items, more than {MAX_PUB_ITEMS}: make what an app \
         does not need pub(crate) (the rig's needs go through rig.rs), or raise the bound \
         saying which item a user needs"
    );
    assert!(
        root.len() <= MAX_ROOT_NAMES,
        "fiber_web's root has {} names, more than {MAX_ROOT_NAMES}: {}",
        root.len(),
        root.join(", ")
    );
    for name in [
        "Request",
        "Response",
        "Json",
        "IntoResponse",
        "App",
        "serve",
        "Error",
    ] {
        assert!(
            root.iter().any(|r| r == name),
            "{name} is at the root: {root:?}"
        );
    }
}

#[test]
fn the_counter_counts_what_is_public_and_only_that() {
    let planted = "\
//! pub fn in_a_module_header() {}
/// pub fn in_a_doc_comment() {}
pub fn a() {}
pub(crate) fn hidden() {}
pub(super) struct AlsoHidden;
pub struct B<T> {
    pub field: T,
    private: u8,
    pub(crate) crate_field: u8,
}
impl<T> B<T> {
    pub const fn c(&self) -> u8 { 0 }
    fn d(&self) {}
}
pub use inner::{E, f as g, deep::{H, I}};
pub use other::J;
pub(crate) use other::K;
pub use long::{
    L,
    M,
};
pub mod n;
mod o;
pub trait P {}
#[cfg(test)]
mod tests {
    pub fn in_a_test() {}
}
";
    assert_eq!(
        pub_items(planted),
        ["a", "B", "field", "c", "E", "g", "H", "I", "J", "L", "M", "n", "P"]
    );
    // Making one more item public is one more in the count.
    let one_more = planted.replace("pub(crate) fn hidden", "pub fn hidden");
    assert_eq!(pub_items(&one_more).len(), pub_items(planted).len() + 1);
}

#[test]
#[should_panic(expected = "glob")]
fn a_glob_re_export_fails_the_count() {
    pub_items("pub use everything::*;\n");
}
