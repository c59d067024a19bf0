//! External programs the tests drive (chromium, haproxy, ab): a check that names the
//! Debian package when one is missing, children killed when a test ends, and runs
//! bounded by a deadline.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Panics, naming the Debian package to install, unless `program` runs with `arg`.
/// A missing tool fails the test that needs it: nothing is skipped in silence.
pub fn require(program: &str, arg: &str, package: &str) {
    let runs = Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        runs,
        "`{program}` is not installed: install Debian's `{package}` package \
         (apt-get install {package}, or scripts/install-deps)"
    );
}

/// A child process killed and reaped when dropped (a failing test leaves none behind).
pub struct Reaped(Option<Child>);

impl Reaped {
    pub fn spawn(cmd: &mut Command) -> Reaped {
        Reaped(Some(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
        ))
    }

    pub fn child(&mut self) -> &mut Child {
        self.0
            .as_mut()
            .expect("a child until dropped or waited for")
    }

    /// Whether the child has exited.
    pub fn exited(&mut self) -> bool {
        self.child().try_wait().unwrap().is_some()
    }

    /// Wait for the child's exit at most `within` (else kill it and panic), then its
    /// output (it must have been spawned with piped stdout and stderr).
    pub fn output_within(mut self, within: Duration) -> Output {
        let deadline = Instant::now() + within;
        while !self.exited() {
            assert!(
                Instant::now() < deadline,
                "{:?} did not finish within {within:?}",
                self.child().id()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let child = self.0.take().expect("not yet waited for");
        child.wait_with_output().unwrap()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Run `cmd` to its end, at most `within`; its output.
pub fn run_within(cmd: &mut Command, within: Duration) -> Output {
    Reaped::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped())).output_within(within)
}

/// `ab -c c -n n url` running in the background, output piped.
pub fn ab(c: usize, n: usize, url: &str) -> Reaped {
    require("ab", "-V", "apache2-utils");
    Reaped::spawn(
        Command::new("ab")
            .args(["-c", &c.to_string(), "-n", &n.to_string(), "-s", "30", url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

/// The text of a finished child's stdout and stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The address in `fiberstack serve`'s start-up line ("listening on http://ADDR ...",
/// or an example's "listening on http://ADDR/hello").
pub fn banner_addr(banner: &str) -> SocketAddr {
    banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
}

/// The directory of this profile's binaries (`target/debug`): this test binary is in
/// its `deps/`.
pub fn target_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// `examples/NAME` of the demo, built beside the test binaries (scripts/test builds
/// every example first; built here when missing, in the test's own profile).
pub fn example(name: &str) -> std::path::PathBuf {
    built(
        target_dir().join("examples").join(name),
        &["--example", name],
    )
}

/// Binary `name` of package `package` (`fiberstack`, or `compare` for a test of the
/// demo that needs the rig), built here when missing, in the test's own profile.
pub fn binary(package: &str, name: &str) -> std::path::PathBuf {
    built(target_dir().join(name), &["-p", package, "--bin", name])
}

/// `path`, after `cargo build ARGS` when it does not exist yet.
fn built(path: std::path::PathBuf, args: &[&str]) -> std::path::PathBuf {
    if !path.exists() {
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet"])
            .args(args);
        if !cfg!(debug_assertions) {
            cargo.arg("--release");
        }
        assert!(cargo.status().unwrap().success(), "cargo build {args:?}");
    }
    path
}

/// ab's count after `label` ("Failed requests:", or "Length:" in the breakdown line).
pub fn ab_count(out: &str, label: &str) -> u64 {
    out.lines()
        .find_map(|l| l.split_once(label).map(|(_, rest)| rest))
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .find(|n| !n.is_empty())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no '{label}' in ab's output:\n{out}"))
}

/// `ab` with `args` on `url`, run to its end on a thread of its own.
pub fn ab_thread(args: &'static [&'static str], url: String) -> std::thread::JoinHandle<Output> {
    require("ab", "-V", "apache2-utils");
    std::thread::spawn(move || {
        Command::new("ab")
            .args(args)
            .arg(url)
            .output()
            .expect("ab runs (scripts/install-deps installs it)")
    })
}

/// Ask `who` (a pid from `/stats`, `None` when it did not answer) until `n` distinct
/// answers came (20 s at most): the worker processes behind one port.
pub fn distinct_pids(n: usize, mut who: impl FnMut() -> Option<u32>) -> HashSet<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = HashSet::new();
    while seen.len() < n {
        assert!(Instant::now() < deadline, "only {seen:?} answered");
        if let Some(pid) = who() {
            seen.insert(pid);
        }
    }
    seen
}
