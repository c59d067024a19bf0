//! The waves test with a single may worker thread (own test binary: may reads
//! its worker count once per process).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

#[test]
fn n_plus_k_sleeping_jobs_run_in_waves_of_n_on_one_worker() {
    may::config().set_workers(1);
    common::sleeping_jobs_take_waves(4, 3);
}
