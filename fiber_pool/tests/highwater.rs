//! Stack high-water marks: a shallow job reports less than a deep one, and a
//! job that uses X KiB more stack reports X more, within a page.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use fiber_pool::{FiberPool, PoolConfig};

const PAGE: usize = 4096;

/// Uses about `N` bytes of stack in one frame, filled with non-zero bytes.
#[inline(never)]
fn use_stack<const N: usize>() -> u8 {
    // Filled in place and passed by reference: one copy, also in debug builds.
    let mut buf = [0u8; N];
    for b in buf.iter_mut() {
        *b = 0xA5;
    }
    std::hint::black_box(&mut buf)[N / 2]
}

fn peak(pool: &FiberPool, label: &'static str) -> usize {
    pool.stats().per_label[label].peak_stack_bytes
}

#[test]
fn shallow_is_below_deep_and_x_kib_reports_x_within_a_page() {
    let pool = FiberPool::new(PoolConfig {
        size: 2,
        stack_size: 256 * 1024,
        measure_every: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    may::go!(move || {
        p.run("shallow", || 1).unwrap();
        p.run("deep", use_stack::<{ 64 * 1024 }>).unwrap();
        p.run("deeper", use_stack::<{ 160 * 1024 }>).unwrap();
    })
    .join()
    .unwrap();
    let (shallow, deep, deeper) = (
        peak(&pool, "shallow"),
        peak(&pool, "deep"),
        peak(&pool, "deeper"),
    );
    eprintln!("shallow {shallow} B, deep {deep} B, deeper {deeper} B");
    assert!(
        shallow > 0 && shallow < deep,
        "shallow {shallow} >= deep {deep}"
    );
    // The 64 KiB frame plus the same fixed overhead as the shallow job
    // (the pool's and the closure's frames), within a page.
    assert!(
        deep.abs_diff(shallow + 64 * 1024) <= PAGE,
        "deep {deep}, shallow {shallow}"
    );
    assert!(
        deeper.abs_diff(shallow + 160 * 1024) <= PAGE,
        "deeper {deeper}, shallow {shallow}"
    );
    let stats = pool.stats();
    assert_eq!(stats.peak_stack_bytes, deeper);
    assert_eq!(stats.per_label["deep"].measured, 1);
}

#[test]
fn a_reused_stack_is_measured_afresh() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 128 * 1024,
        measure_every: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    may::go!(move || {
        p.run("deep", use_stack::<{ 64 * 1024 }>).unwrap();
        // Same stack: the deep job's bytes must not count for this one.
        p.run("shallow", || 1).unwrap();
    })
    .join()
    .unwrap();
    assert!(
        peak(&pool, "shallow") < 8 * 1024,
        "shallow {}",
        peak(&pool, "shallow")
    );
}

#[test]
fn measure_every_zero_never_measures_and_n_samples() {
    for (every, expected) in [(0, 0), (3, 4)] {
        let pool = FiberPool::new(PoolConfig {
            size: 1,
            measure_every: every,
            ..PoolConfig::default()
        })
        .unwrap();
        let p = pool.clone();
        may::go!(move || {
            for _ in 0..10 {
                p.run("job", || 1).unwrap();
            }
        })
        .join()
        .unwrap();
        assert_eq!(
            pool.stats().per_label["job"].measured,
            expected,
            "every {every}"
        );
    }
}
