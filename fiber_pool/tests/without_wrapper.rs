//! The hazard `FiberSafeAlloc` removes, shown in a child process: without
//! it (this binary keeps the plain system allocator), jobs that allocate at
//! every level of a runaway recursion sometimes overflow inside glibc's
//! malloc with its arena lock held, and a later malloc on that thread waits
//! for ever.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use std::alloc::{GlobalAlloc, Layout, System};

use fiber_pool::config::SAFE_ALLOC_DECLARATION;
use fiber_pool::{ConfigError, FiberPool, FiberSafeAlloc, PoolConfig, RunError};

const OVERFLOWS: usize = 2000;
const NAME: &str = "without_the_wrapper_an_allocating_overflow_can_hang";
/// Written by a child that finished all its overflows.
const DONE: &str = "child: all overflows done";

/// Recurses with a small frame, calling `a.alloc` and `a.dealloc` at every
/// level with sizes above glibc's tcache (so malloc takes its arena lock),
/// so that the guard page is often first reached inside malloc.
#[inline(never)]
#[allow(unconditional_recursion)]
fn malloc_recurse<A: GlobalAlloc>(a: &A, depth: usize) -> usize {
    let layout = Layout::from_size_align(1100 + (depth * 389) % 30000, 8).unwrap();
    // SAFETY: a non-zero size; the block is freed with the same layout.
    let p = unsafe { a.alloc(layout) };
    // SAFETY: as above.
    unsafe { a.dealloc(std::hint::black_box(p), layout) };
    std::hint::black_box(malloc_recurse(a, depth + 1)) + 1
}

/// [`malloc_recurse`] started `shift % 4` steps of 16 bytes deeper. Where on
/// the stack the recursion starts decides where in its frame (or in malloc's)
/// each run reaches the guard page; starting it at every 16-byte offset makes
/// the hazard show whatever the pool's own frames above the job take (a change
/// of 16 bytes there once hid it from every run).
fn shifted<A: GlobalAlloc>(a: &A, shift: usize, depth: usize) -> usize {
    match shift % 4 {
        0 => malloc_recurse(a, depth),
        1 => padded::<16, A>(a, depth),
        2 => padded::<32, A>(a, depth),
        _ => padded::<48, A>(a, depth),
    }
}

#[inline(never)]
fn padded<const PAD: usize, A: GlobalAlloc>(a: &A, depth: usize) -> usize {
    let pad = std::hint::black_box([0u8; PAD]);
    std::hint::black_box(malloc_recurse(a, depth)) + usize::from(pad[0])
}

/// The child's half: `OVERFLOWS` allocating overflows through
/// `FiberSafeAlloc` (`wrapped`) or the plain `System` allocator.
fn allocating_overflows(wrapped: bool) {
    may::config().set_workers(2);
    // SAFETY: none in the `System` mode: overflowing inside malloc is the hazard
    // this child shows (in a process of its own, killed if it hangs). In the
    // `wrapped` mode every allocation of the jobs goes through FiberSafeAlloc.
    let pool = unsafe {
        FiberPool::new_without_safe_alloc(PoolConfig {
            size: 4,
            stack_size: 16 * 1024,
            // Every overflowed stack is quarantined: one spare for each.
            spare_stacks: OVERFLOWS,
            ..PoolConfig::default()
        })
    }
    .unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let p = pool.clone();
            may::go!(move || {
                for i in 0..OVERFLOWS / 4 {
                    let (shift, i) = (i, i % 97);
                    let r = if wrapped {
                        p.run("runaway", move || shifted(&FiberSafeAlloc, shift, i))
                    } else {
                        p.run("runaway", move || shifted(&System, shift, i))
                    };
                    assert!(matches!(r, Err(RunError::StackOverflow { .. })));
                    p.run("normal", || common::alloc_recurse(0, 5)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    eprintln!("{DONE}");
}

/// Runs the child workload with `mode`; `true` if it finished (successfully)
/// within `limit`, `false` if it hung and was killed.
fn child_finishes(mode: &str, limit: Duration) -> bool {
    let mut child = common::child_command(NAME, mode)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            eprintln!("{mode}: child finished ({status}) in {:?}", start.elapsed());
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            assert!(status.success(), "{mode}: {status}: {stderr}");
            assert!(
                stderr.contains(DONE),
                "{mode}: the child did not run: {stderr}"
            );
            return true;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            eprintln!("{mode}: child hung for {limit:?}, killed");
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The same 2000 malloc-heavy overflows: through `System` a child hangs
/// (5 of 5 runs hung when this test was written; gdb showed a may worker in
/// `__lll_lock_wait_private` in `__libc_malloc`, and another waiting for a
/// std Mutex the first held: the demo server's deadlock); through
/// `FiberSafeAlloc` every child finishes (in about 0.6 s).
#[test]
fn without_the_wrapper_an_allocating_overflow_can_hang() {
    if let Some(mode) = common::child_mode(NAME) {
        return allocating_overflows(mode == "wrapped");
    }
    for _ in 0..3 {
        assert!(
            child_finishes("wrapped", Duration::from_secs(30)),
            "with FiberSafeAlloc the overflows must never hang"
        );
    }
    let hung = (0..2)
        .filter(|_| !child_finishes("system", Duration::from_secs(5)))
        .count();
    assert!(
        hung > 0,
        "through System none of 2 children hung: the hazard did not show (not deterministic?)"
    );
}

/// This binary keeps the system allocator, so `FiberPool::new` refuses, and says
/// which line to add; calling `FiberSafeAlloc` directly (as the child's wrapped
/// mode does) does not fool its check, which asks whether the global allocator
/// served its own probe.
#[test]
fn without_the_wrapper_new_refuses_and_names_the_line_to_add() {
    let layout = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: a non-zero size; freed at once with the same layout.
    unsafe { FiberSafeAlloc.dealloc(FiberSafeAlloc.alloc(layout), layout) };
    let err = match FiberPool::new(PoolConfig::default()) {
        Err(e) => e,
        Ok(_) => panic!("a pool was created without FiberSafeAlloc as the global allocator"),
    };
    assert!(matches!(err, ConfigError::SafeAllocMissing), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(SAFE_ALLOC_DECLARATION), "{text}");
    assert!(text.contains("#[global_allocator]"), "{text}");
}
