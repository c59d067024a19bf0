//! The original warning in one program: fiber stacks are small, and a handler that
//! renders nested templates can run past one. Here the same handler runs on a pool
//! whose stack fits it and on one whose stack does not; the second overflow is caught
//! as `RunError::StackOverflow`, and the process (and that very pool) goes on.
//!
//! Run with: cargo run --example stack_overflow
#![forbid(unsafe_code)]

use std::hint::black_box;

use fiber_pool::{FiberPool, PoolConfig, RunError};

/// An overflow then strikes before malloc, never inside it (see fiber_pool's README).
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// A template that includes itself `depth` times, each level with 1 KiB of locals.
#[inline(never)]
fn render(depth: usize) -> usize {
    let mut locals = [0u8; 1024];
    locals[depth % 1024] = 1;
    black_box(&mut locals); // keep the array in this frame
    let inner = if depth == 0 { 0 } else { render(depth - 1) };
    inner + locals[depth % 1024] as usize
}

/// Run the handler on a fiber of `pool`, from a may coroutine as a request would.
fn request(pool: &FiberPool, depth: usize) -> Result<usize, RunError> {
    let pool = pool.clone();
    let caller = move || pool.run("render", move || render(depth));
    fiber_pool::carrier::go(caller)
        .join()
        .expect("the carrier coroutine does not panic")
}

fn pool(stack_size: usize) -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 2,
        stack_size,
        ..PoolConfig::default()
    })
    .expect("a valid pool config")
}

fn main() {
    const DEPTH: usize = 40; // about 40 KiB of stack
    let (roomy, small) = (pool(128 * 1024), pool(16 * 1024));
    match request(&roomy, DEPTH) {
        Ok(n) => println!("128 KiB stack: rendered {n} nested templates"),
        Err(e) => panic!("the roomy stack should fit: {e}"),
    }
    match request(&small, DEPTH) {
        Err(e @ RunError::StackOverflow { .. }) => println!("16 KiB stack: caught: {e}"),
        other => panic!("expected a stack overflow, got {other:?}"),
    }
    // Still alive, and the pool that overflowed serves the next request.
    let n = request(&small, 4).expect("4 levels fit in 16 KiB");
    let overflows = small.stats().overflows;
    println!("16 KiB stack, after the overflow: rendered {n} nested templates; overflows counted: {overflows}");
}
