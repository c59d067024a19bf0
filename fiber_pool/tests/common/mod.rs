//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, PoolConfig};

pub mod panicking;
pub mod ticker;

/// Recurses with a 1 KiB frame until the stack runs out (on purpose).
#[inline(never)]
#[allow(unconditional_recursion)]
pub fn recurse(depth: u64) -> u64 {
    let mut buf = [0u8; 1024];
    buf[depth as usize % 1024] = depth as u8;
    let buf = std::hint::black_box(buf);
    recurse(depth + 1) + u64::from(buf[0])
}

/// Allocates at every level: a Vec, a String that grows (realloc), a Box,
/// sizes varying with the depth (up to 48 KiB); frees them before going
/// deeper except a small Box, and recurses until `limit` (or for ever).
#[inline(never)]
pub fn alloc_recurse(depth: usize, limit: usize) -> usize {
    let n = (depth * 7919) % 6000;
    let v: Vec<u64> = (0..n as u64).collect();
    let mut s = String::new();
    for i in 0..depth % 23 {
        s.push_str(["a", "bc", "def", "ghij"][i % 4]);
    }
    let b = Box::new([depth as u8; 96]);
    let sum = v.len() + s.len() + usize::from(b[5]);
    drop((v, s));
    if depth == limit {
        return sum;
    }
    let keep = Box::new(depth);
    std::hint::black_box(sum + alloc_recurse(depth + 1, limit) + *keep)
}

/// Resident pages of this process, from /proc/self/statm.
pub fn rss_pages() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs is mounted");
    statm.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `n + k` jobs that each sleep 200 ms on may through a pool of `n`
/// fibers; checks that never more than `n` ran at once (and that `n` did), and
/// the elapsed time against ceil((n+k)/n) x 200 ms: no less (sleeps are never
/// short), and at most 1 s more. The wave count is proven by the counts; the
/// upper bound catches a waiter woken late (a lost wake-up waits for the 30 s
/// `wait_timeout`), and is wide for a busy 2-core machine.
pub fn sleeping_jobs_take_waves(n: usize, k: usize) {
    const SLEEP: Duration = Duration::from_millis(200);
    let pool = FiberPool::new(PoolConfig {
        size: n,
        ..PoolConfig::default()
    })
    .unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..n + k)
        .map(|i| {
            let (p, running, most) = (pool.clone(), running.clone(), most.clone());
            may::go!(move || p.run("sleep", move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                may::coroutine::sleep(SLEEP);
                running.fetch_sub(1, Ordering::SeqCst);
                i
            }))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap().unwrap(), i);
    }
    let elapsed = start.elapsed();
    let waves = (n + k).div_ceil(n) as u32;
    assert!(
        elapsed >= SLEEP * waves - Duration::from_millis(20)
            && elapsed < SLEEP * waves + Duration::from_secs(1),
        "{} jobs on {n} fibers took {elapsed:?}, expected about {:?}",
        n + k,
        SLEEP * waves
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        n,
        "at most (and at best) {n} at once"
    );
    let stats = pool.stats();
    assert_eq!(stats.completed, (n + k) as u64);
    assert_eq!((stats.busy, stats.queued), (0, 0));
}

/// Set, only in a child process, to `test_name:mode`: see [`child_mode`].
const CHILD_ENV: &str = "FIBER_POOL_TEST_CHILD";

/// The mode this process was started in by [`child_command`] for the test
/// `name`, or `None` in a normal run. A test that needs a child process
/// calls this first: `Some` means "I am the child: do the child's half and
/// return", `None` means "I am the test: start the child and assert". So the
/// child half is not a test of its own that passes by doing nothing.
pub fn child_mode(name: &str) -> Option<String> {
    let value = std::env::var(CHILD_ENV).ok()?;
    let (test, mode) = value.split_once(':')?;
    (test == name).then(|| mode.to_string())
}

/// This test binary, set to run only the test `name`, as a child in `mode`
/// (the env var is set for the child only).
pub fn child_command(name: &str, mode: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{name}:{mode}"));
    cmd
}

/// Runs the test `name` as a child in `mode` and asserts that it died by signal `sig`,
/// having written each of `says` to stderr first.
pub fn assert_child_dies(name: &str, mode: &str, sig: libc::c_int, says: &[&str]) {
    use std::os::unix::process::ExitStatusExt;
    let out = child_command(name, mode).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    for said in says {
        assert!(stderr.contains(said), "{said:?}: {}: {stderr}", out.status);
    }
    assert_eq!(out.status.signal(), Some(sig), "{}: {stderr}", out.status);
}

/// Runs a job of `pool` that recurses until it overflows, carried by a may coroutine,
/// and asserts that the overflow was caught (`after` says after what).
pub fn overflow_is_caught(pool: &FiberPool, after: &str) {
    let p = pool.clone();
    let ran = in_coroutine(move || p.run("overflows", || recurse(0)));
    assert!(
        matches!(ran, Err(fiber_pool::RunError::StackOverflow { .. })),
        "{after}: {ran:?}"
    );
}

/// Polls (on the calling thread, every millisecond) until `cond` holds; panics
/// naming `what` after `within`.
pub fn wait_until(what: &str, within: Duration, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A plain thread that keeps reading a value a job lent it, from outside every fiber
/// stack, and what it saw: the probe of the tests that a value stays where it is,
/// unchanged, for a thread still borrowing it after its job overflowed.
#[derive(Default)]
pub struct Watch {
    looks: AtomicU64,
    /// Some look found another value than the expected one.
    changed: AtomicBool,
    stop: AtomicBool,
    exited: AtomicBool,
}

impl Watch {
    /// Starts the watcher in `s`: it reads `value` until [`Watch::finish`], noting a
    /// look that finds anything but `expected`. Returns once it has looked once.
    pub fn start<'scope>(
        &'scope self,
        s: &'scope std::thread::Scope<'scope, '_>,
        value: &'scope AtomicU64,
        expected: u64,
    ) {
        s.spawn(move || {
            while !self.stop.load(Ordering::SeqCst) {
                if value.load(Ordering::SeqCst) != expected {
                    self.changed.store(true, Ordering::SeqCst);
                }
                self.looks.fetch_add(1, Ordering::SeqCst);
            }
            self.exited.store(true, Ordering::SeqCst);
        });
        while self.looks.load(Ordering::SeqCst) == 0 {
            std::hint::spin_loop();
        }
    }

    /// Lets the watcher look 1000 times more, stops it and waits for it to end (10 s
    /// at most each); whether any look found the value changed.
    pub fn finish(&self) -> bool {
        let within = Duration::from_secs(10);
        let looked = self.looks.load(Ordering::SeqCst);
        wait_until("the watcher to look again", within, || {
            self.looks.load(Ordering::SeqCst) > looked + 1000
        });
        self.stop.store(true, Ordering::SeqCst);
        wait_until("the watcher to stop", within, || {
            self.exited.load(Ordering::SeqCst)
        });
        self.changed.load(Ordering::SeqCst)
    }
}

/// The median and the 99th percentile of `samples` (sorted in place).
pub fn median_p99(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let p99 = (samples.len() * 99).div_ceil(100).saturating_sub(1);
    (samples[samples.len() / 2], samples[p99])
}

/// Runs `f` in a new may coroutine and waits for its value.
pub fn in_coroutine<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    fiber_pool::spawn::go(f).join().unwrap()
}

/// Aborts the process if `done` is not set within `secs`.
pub fn watchdog(secs: u64) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        for _ in 0..secs * 10 {
            std::thread::sleep(Duration::from_millis(100));
            if d.load(Ordering::SeqCst) {
                return;
            }
        }
        eprintln!("watchdog: still running after {secs} s: a deadlock; aborting");
        std::process::abort();
    });
    done
}

/// Recurses (256-byte frames) until fewer than `left` bytes of fiber stack remain,
/// then runs `f` there.
#[inline(never)]
pub fn near_the_guard<R>(left: usize, f: &mut dyn FnMut() -> R) -> R {
    let pad = std::hint::black_box([0u8; 256]);
    if fiber_pool::stack_remaining().expect("on a fiber") < left {
        f()
    } else {
        let r = near_the_guard(left, f);
        std::hint::black_box(pad);
        r
    }
}

/// A pool of `size` fibers on `workers` may workers. may reads the worker count once
/// per process, when its first coroutine starts: call this before any, and in every
/// test of a binary with the same count (a test that needs another count is a binary
/// of its own).
pub fn pool_on_workers(workers: usize, size: usize) -> FiberPool {
    may::config().set_workers(workers);
    FiberPool::new(PoolConfig {
        size,
        ..PoolConfig::default()
    })
    .unwrap()
}
