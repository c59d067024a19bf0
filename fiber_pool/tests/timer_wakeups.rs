//! The patched may (`patches/may`, its second change) does not wake its timer thread
//! when a park with a timeout ends before the timeout: a semaphore's `wait_timeout`
//! that gets its permit, as a MySQL pool's checkout does for nearly every request
//! under load. Stock may 0.3.51 woke the timer thread for every such cancel: a futex
//! wake and a context switch each.
//!
//! The test counts the process's voluntary context switches (`/proc/self/task/*/status`)
//! around `WAITS` parks that each end by a post from another coroutine, long before
//! their timeout. The timer thread sleeps once per wake, so with a wake per cancel it
//! alone adds one switch per wait; without, only the parks' own (none: one worker
//! switches between coroutines in user space) and a wake per batch of cancels remain.
//! One test in this binary, so that no other test's switches are counted.

use std::sync::Arc;
use std::time::Duration;

/// Required by `FiberPool::new` (not used here, but fiber_pool's tests declare it).
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Parks that each end by a post, well before their timeout.
const WAITS: u64 = 20_000;
/// A timeout no wait here reaches.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Voluntary context switches of every thread of this process so far.
fn voluntary_switches() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let status = std::fs::read_to_string(task.unwrap().path().join("status"));
        // A thread that ended meanwhile has no status left: its switches are gone too.
        let Ok(status) = status else { continue };
        for line in status.lines() {
            if let Some(n) = line.strip_prefix("voluntary_ctxt_switches:") {
                total += n.trim().parse::<u64>().unwrap();
            }
        }
    }
    total
}

/// `n` round trips between two coroutines of the one worker: each side parks with
/// [`TIMEOUT`] and is posted by the other, so every park cancels its timer.
fn round_trips(n: u64) {
    let ping = Arc::new(may::sync::Semphore::new(0));
    let pong = Arc::new(may::sync::Semphore::new(0));
    let (ping2, pong2) = (Arc::clone(&ping), Arc::clone(&pong));
    let answerer = may::go!(move || {
        for _ in 0..n {
            assert!(ping2.wait_timeout(TIMEOUT), "the post came");
            pong2.post();
        }
    });
    let asker = may::go!(move || {
        for _ in 0..n {
            ping.post();
            assert!(pong.wait_timeout(TIMEOUT), "the answer came");
        }
    });
    asker.join().unwrap();
    answerer.join().unwrap();
}

/// Keeps this thread, and the threads it starts from now on (may's worker and timer
/// thread), on one cpu, as the bench pins a server: a timer thread woken on another
/// cpu may still be awake at the next cancel, which a wake then misses.
fn one_cpu() {
    // SAFETY: `set` is a plain bit set on the stack, zeroed first and filled by
    // `CPU_SET`; `sched_setaffinity` only reads it, for this thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn a_park_that_ends_before_its_timeout_does_not_wake_the_timer_thread() {
    one_cpu();
    may::config().set_workers(1);
    // A first round starts the scheduler and its threads before the count.
    round_trips(10);
    let before = voluntary_switches();
    round_trips(WAITS);
    let switches = voluntary_switches() - before;
    println!(
        "{WAITS} round trips, {} cancelled timers: {switches} voluntary context switches",
        2 * WAITS
    );
    assert!(
        switches < WAITS / 4,
        "{switches} voluntary context switches for {} cancelled timers: the timer thread \
         is woken for cancels",
        2 * WAITS
    );
}
