//! After an overflow corosensei's trap handler resets the fiber's stack and runs its
//! own frames from the top down. The pool keeps `config::TRAP_AREA` bytes at the top
//! free of the job's frames, so those writes never reach what the job's frames hold
//! (a quarantined stack must keep it as it was, for whatever still borrows it). This
//! measures how far the trap writes, and checks that what the job owns (its
//! captures, the nearest the top of all it keeps there) is untouched.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::{Arc, Mutex};

use fiber_pool::{stack_remaining, FiberPool, PoolConfig, RunError};

const STACK: usize = 64 * 1024;
/// How much of the top of the stack is compared before and after the overflow.
const SPAN: usize = 8 * 1024;
const PATTERN: u64 = 0x7a9e_a4ea_c0de_0004;

/// What the job saw of its own stack.
struct Seen {
    /// The top of the fiber's stack (its highest address, exclusive).
    top: usize,
    /// Where the job's marker lies.
    marker: usize,
    /// The top `SPAN` bytes of the stack, read just before the overflow.
    before: Vec<u8>,
}

/// `len` bytes at `at`, read one by one.
///
/// # Safety
///
/// `at..at + len` is mapped and readable.
unsafe fn read(at: usize, len: usize) -> Vec<u8> {
    (at..at + len)
        // SAFETY: our caller's promise; bytes are read as plain values, through no
        // reference, so no aliasing rule is involved.
        .map(|a| unsafe { std::ptr::read_volatile(a as *const u8) })
        .collect()
}

/// Recurses (256-byte frames) until fewer than `left` bytes of stack remain, runs
/// `f` there, far below the top of the stack, and then overflows.
#[inline(never)]
fn descend_then_overflow(left: usize, f: &mut dyn FnMut()) -> u64 {
    let pad = std::hint::black_box([0u8; 256]);
    if stack_remaining().expect("on a fiber") < left {
        f();
        common::recurse(0)
    } else {
        descend_then_overflow(left, f) + u64::from(std::hint::black_box(pad)[0])
    }
}

#[test]
fn the_trap_handler_writes_above_the_jobs_frames_only() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: STACK,
        ..PoolConfig::default()
    })
    .unwrap();
    assert_eq!(pool.stats().stack_size, STACK);
    let seen = Arc::new(Mutex::new(None));
    let (p, s) = (pool.clone(), Arc::clone(&seen));
    // Captured by the job: what the job owns lies on its fiber stack while it runs,
    // nearer the top than any of its locals.
    let marker = [PATTERN; 8];
    let res = may::go!(move || p.run("traps", move || {
        let at = std::hint::black_box(&marker) as *const [u64; 8] as usize;
        let top = fiber_pool::testing::running_stack_bottom().expect("on a fiber") + STACK;
        let overflowed = descend_then_overflow(STACK - 4 * SPAN, &mut || {
            // Deep below the span read: from here on nothing in it changes until the
            // overflow (only deeper frames are written).
            // SAFETY: the top SPAN bytes of this fiber's stack, mapped and readable:
            // the frames of this job and its callers.
            let before = unsafe { read(top - SPAN, SPAN) };
            *s.lock().unwrap() = Some(Seen {
                top,
                marker: at,
                before,
            });
        });
        overflowed + std::hint::black_box(&marker)[0]
    }))
    .join()
    .unwrap();
    assert!(
        matches!(res, Err(RunError::StackOverflow { .. })),
        "{res:?}"
    );
    let Seen {
        top,
        marker,
        before,
    } = seen.lock().unwrap().take().expect("the job ran");
    // SAFETY: the overflowed stack is quarantined: mapped for the rest of the
    // process and never used again.
    let after = unsafe { read(top - SPAN, SPAN) };
    // The lowest byte the trap handler changed, as a depth below the top.
    let job_depth = top - marker;
    let written = (0..SPAN)
        .find(|&i| before[i] != after[i])
        .map_or(0, |i| SPAN - i);
    eprintln!(
        "the trap handler wrote down to {written} bytes below the top; the job's marker \
         is {job_depth} bytes below it (TRAP_AREA {})",
        fiber_pool::config::TRAP_AREA
    );
    assert!(
        written > 0,
        "the trap handler wrote nothing: the measure is broken"
    );
    assert!(
        written < job_depth,
        "the trap handler wrote {written} bytes down, over the job's frames \
         (its marker {job_depth} bytes below the top)"
    );
    // SAFETY: as above; the marker's bytes lie in the quarantined stack.
    let marker_after = unsafe { read(marker, 64) };
    let want: Vec<u8> = [PATTERN; 8].iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(
        marker_after, want,
        "the job's frame changed after its overflow"
    );
}
