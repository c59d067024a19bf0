//! How much stack glibc's allocator itself uses, measured with the pool's
//! high-water machinery, and a check that `ALLOC_STACK_MARGIN` covers it
//! with room to spare. This is the measurement behind the constant: run with
//! `--nocapture` to see the figures per scenario.
//!
//! Each scenario is one job on a freshly zeroed stack (`measure_every: 1`).
//! Inside an `#[inline(never)]` function it notes its stack depth, then calls
//! `System` directly many times on one code path of malloc (tcache, fast
//! bins, consolidation, mmap'ed chunks, trimming the heap top, realloc and
//! mremap, calloc, aligned allocation, frees of blocks from another thread's
//! arena, contention with other threads). What the allocator used is the
//! job's high-water mark minus that depth.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fiber_pool::{stack_remaining, FiberPool, PoolConfig, ALLOC_STACK_MARGIN};

const STACK: usize = 256 * 1024;

/// `System`, with every pointer passed through `black_box`.
struct Opaque;

impl Opaque {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        std::hint::black_box(unsafe { System.alloc(std::hint::black_box(l)) })
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        std::hint::black_box(unsafe { System.alloc_zeroed(std::hint::black_box(l)) })
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: forwarded.
        std::hint::black_box(unsafe { System.realloc(std::hint::black_box(p), l, n) })
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(std::hint::black_box(p), l) }
    }
}

fn lay(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// Allocates and frees per `scenario`; returns the stack depth (bytes below
/// the top) of this frame, from which the allocator's calls go deeper.
/// `buf` is scratch room for pointers (5000), allocated outside the job so
/// that no Vec code runs deeper than the allocator; for "foreign" it holds
/// blocks another thread allocated.
#[inline(never)]
fn exercise(scenario: &str, buf: &mut [usize]) -> usize {
    let depth = STACK - stack_remaining().expect("on a fiber");
    // Through `black_box`, so that LLVM cannot elide malloc/free pairs.
    let s = Opaque;
    // SAFETY: every pointer comes from `System` with the layout it is freed
    // or reallocated with.
    unsafe {
        match scenario {
            "small" => {
                for round in 0..200 {
                    for (i, slot) in buf.iter_mut().enumerate().take(64).skip(1) {
                        *slot = s.alloc(lay(i * 8 + round % 7, 8)) as usize;
                    }
                    for (i, &p) in buf.iter().enumerate().take(64).skip(1) {
                        s.dealloc(p as *mut u8, lay(i * 8 + round % 7, 8));
                    }
                }
            }
            "consolidate" => {
                // Fill fast bins and tcache, then ask for a large block.
                for _ in 0..20 {
                    for slot in buf[..2000].iter_mut() {
                        *slot = s.alloc(lay(48, 8)) as usize;
                    }
                    for &p in buf[..2000].iter() {
                        s.dealloc(p as *mut u8, lay(48, 8));
                    }
                    let big = s.alloc(lay(600 * 1024 / 8, 8));
                    s.dealloc(big, lay(600 * 1024 / 8, 8));
                }
            }
            "mmap" => {
                for i in 0..50 {
                    let l = lay((1 << 20) + i * 4096, 8);
                    let p = s.alloc(l);
                    p.write(1);
                    s.dealloc(p, l);
                }
            }
            "trim" => {
                // Grow the heap top below the mmap threshold, free it: sbrk
                // shrink (systrim) on the main arena.
                for _ in 0..50 {
                    for slot in buf[..64].iter_mut() {
                        *slot = s.alloc(lay(100 * 1024, 8)) as usize;
                    }
                    for &p in buf[..64].iter().rev() {
                        s.dealloc(p as *mut u8, lay(100 * 1024, 8));
                    }
                }
            }
            "realloc" => {
                for _ in 0..20 {
                    let mut l = lay(16, 8);
                    let mut p = s.alloc(l);
                    while l.size() < 8 << 20 {
                        let n = l.size() * 3 / 2 + 8;
                        p = s.realloc(p, l, n);
                        l = lay(n, 8);
                    }
                    while l.size() > 32 {
                        let n = l.size() / 3;
                        p = s.realloc(p, l, n);
                        l = lay(n, 8);
                    }
                    s.dealloc(p, l);
                }
            }
            "calloc" => {
                for i in 0..200 {
                    let l = lay(1 + i * 997 % (300 * 1024), 8);
                    let p = s.alloc_zeroed(l);
                    s.dealloc(p, l);
                }
            }
            "aligned" => {
                for i in 0..300 {
                    let align = 32 << (i % 8);
                    let l = lay(8 + i * 131, align);
                    let p = s.alloc(l);
                    let q = s.alloc_zeroed(l);
                    let r = s.realloc(p, l, l.size() * 3);
                    s.dealloc(q, l);
                    s.dealloc(r, lay(l.size() * 3, align));
                }
            }
            "foreign" => {
                // Blocks allocated on another thread (another arena).
                for &p in buf.iter() {
                    s.dealloc(p as *mut u8, lay(256, 8));
                }
            }
            "contended" => {
                for i in 0..200_000 {
                    let l = lay(16 + i % 4000, 8);
                    let p = s.alloc(l);
                    s.dealloc(p, l);
                }
            }
            other => panic!("no scenario {other}"),
        }
    }
    depth
}

#[test]
fn alloc_stack_margin_covers_glibc_with_room() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: STACK,
        measure_every: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    // Other threads hammer malloc meanwhile, for the contended paths.
    let stop = Arc::new(AtomicBool::new(false));
    let hammers: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut keep = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    keep.push(vec![t as u8; 1 + keep.len() % 5000]);
                    if keep.len() > 500 {
                        keep.clear();
                    }
                }
            })
        })
        .collect();
    let scenarios: [&'static str; 9] = [
        "small",
        "consolidate",
        "mmap",
        "trim",
        "realloc",
        "calloc",
        "aligned",
        "foreign",
        "contended",
    ];
    let mut worst = 0;
    for round in 0..3 {
        for scenario in scenarios {
            // SAFETY: a fresh block from System, freed in "foreign".
            let mut buf: Vec<usize> = std::thread::spawn(|| {
                (0..5000)
                    .map(|_| unsafe { System.alloc(lay(256, 8)) } as usize)
                    .collect()
            })
            .join()
            .unwrap();
            let p = pool.clone();
            let depth = may::go!(move || p.run(scenario, move || exercise(scenario, &mut buf)))
                .join()
                .unwrap()
                .unwrap();
            let peak = pool.stats().per_label[scenario].peak_stack_bytes;
            let used = peak.saturating_sub(depth);
            if round == 0 {
                eprintln!("{scenario:>12}: allocator used {used:>5} bytes below its caller (peak {peak}, caller depth {depth})");
            }
            worst = worst.max(used);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        h.join().unwrap();
    }
    eprintln!("worst: {worst} bytes; ALLOC_STACK_MARGIN = {ALLOC_STACK_MARGIN}");
    assert!(worst > 0, "the measurement saw the allocator");
    assert!(
        worst * 2 <= ALLOC_STACK_MARGIN,
        "glibc's allocator used {worst} bytes of stack: raise ALLOC_STACK_MARGIN to at least twice that"
    );
}
