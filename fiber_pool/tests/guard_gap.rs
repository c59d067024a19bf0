//! A frame that moves the stack pointer down by more than a page before it
//! touches anything (a C `alloca` or VLA, C code built without stack-clash
//! protection) must fault in its own guard, not write into the neighbouring
//! fiber's live frames. Two jobs on adjacent slots: one parks with a canary on
//! its stack, the other jumps 8 KiB below its stack pointer from just above its
//! guard and stores there.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fiber_pool::{stack_remaining, FiberPool, PoolConfig, RunError};

const STACK: usize = 64 * 1024;
/// The canary spans most of the parked job's stack, so that it covers where a
/// jump past the neighbour's guard lands (a few KiB below this stack's top).
const CANARY: usize = 48 * 1024;
const PAINT: u8 = 0xA5;
/// How far the jumping frame moves the stack pointer: two pages.
const JUMP: usize = 8192;

fn rsp() -> usize {
    let sp: usize;
    // SAFETY: reads a register into a local.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// Fills a canary, parks on the carrier until `done`, and counts the canary's
/// bytes that changed meanwhile.
#[inline(never)]
fn parked_with_canary(ready: &AtomicBool, done: &AtomicBool) -> usize {
    let mut canary = [PAINT; CANARY];
    std::hint::black_box(&mut canary);
    ready.store(true, Ordering::SeqCst);
    while !done.load(Ordering::SeqCst) {
        fiber_pool::sleep(Duration::from_millis(1));
    }
    std::hint::black_box(&canary)
        .iter()
        .filter(|&&b| b != PAINT)
        .count()
}

/// Recurses (128-byte frames, measured from the stack pointer alone: no call
/// that uses stack) until fewer than 512 bytes are left above `guard_end`,
/// then moves the stack pointer `JUMP` bytes down and stores a word there.
#[inline(never)]
fn jump_past_the_guard(guard_end: usize) {
    let pad = std::hint::black_box([0u8; 128]);
    if rsp() - guard_end >= 512 {
        jump_past_the_guard(guard_end);
        std::hint::black_box(&pad);
        return;
    }
    // SAFETY: none: this is the hazard under test. The store lands `JUMP` bytes
    // below the stack pointer, past this fiber's guard when the guard is
    // smaller than that; the stack pointer is put back before anything else.
    unsafe {
        std::arch::asm!(
            "sub rsp, {jump}",
            "mov qword ptr [rsp], 0",
            "add rsp, {jump}",
            jump = const JUMP,
        );
    }
}

#[test]
fn a_frame_that_jumps_past_the_guard_faults_instead_of_writing_into_the_neighbour() {
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        stack_size: STACK,
        ..PoolConfig::default()
    })
    .unwrap();
    let ready = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    // The first job gets slot 0 (the free list hands out the lowest slot first),
    // whose top lies just below slot 1's guard.
    let (p, r, d) = (pool.clone(), Arc::clone(&ready), Arc::clone(&done));
    let carrier = move || p.run("parked", move || parked_with_canary(&r, &d));
    let parked = fiber_pool::spawn::go(carrier);
    while !ready.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let p = pool.clone();
    let carrier = move || {
        p.run("jumps", || {
            let guard_end = rsp() - stack_remaining().expect("on a fiber");
            jump_past_the_guard(guard_end);
        })
    };
    let jumped = fiber_pool::spawn::go(carrier).join().unwrap();
    done.store(true, Ordering::SeqCst);
    let changed = parked
        .join()
        .unwrap()
        .expect("the parked job ends normally");
    assert_eq!(changed, 0, "the jump wrote into the parked job's frames");
    assert!(
        matches!(jumped, Err(RunError::StackOverflow { .. })),
        "the jump faults in the jumping fiber's own guard: {jumped:?}"
    );
}
