//! The address lookup with many pools alive at once: every slot of every
//! pool is found (a `Lent` registers with the slot the lookup names, and only
//! that slot's overflow abandons it), overflows are counted by the right
//! pool, and pools dropped and created again reuse registry nodes.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::recurse;
use fiber_pool::{stack_remaining, FiberPool, Lent, PoolConfig, RunError};

const KIB: usize = 1024;

fn make(size: usize, stack_kib: usize) -> FiberPool {
    FiberPool::new(PoolConfig {
        size,
        stack_size: stack_kib * KIB,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// Runs `size` jobs on `pool` at once (each holds its fiber for a while, so
/// every slot is used), each overflowing with a `Lent` alive; checks which
/// `on_abandon`s ran.
fn overflow_every_slot(pool: &FiberPool, tag: usize) {
    let size = pool.stats().size;
    let stack_size = pool.stats().stack_size;
    let abandoned = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..size)
        .map(|i| {
            let (p, ab) = (pool.clone(), abandoned.clone());
            may::go!(move || {
                p.run("overflow", move || {
                    let left = stack_remaining().expect("on a fiber");
                    assert!(left <= stack_size && left > stack_size - 8 * KIB, "{left}");
                    let id = tag * 1000 + i;
                    let lent = Lent::new(id, move |_| ab.lock().unwrap().push(id));
                    may::coroutine::sleep(Duration::from_millis(30));
                    recurse(*lent as u64)
                })
            })
        })
        .collect();
    for h in handles {
        let err = h.join().unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                RunError::StackOverflow {
                    stack_size: s,
                    label: "overflow",
                    at_safe_point: false,
                    ..
                } if s == stack_size
            ),
            "{err:?}"
        );
    }
    let got: BTreeSet<usize> = abandoned.lock().unwrap().iter().copied().collect();
    let want: BTreeSet<usize> = (0..size).map(|i| tag * 1000 + i).collect();
    assert_eq!(
        got, want,
        "pool {tag}: every job's Lent was reported abandoned once"
    );
    assert_eq!(abandoned.lock().unwrap().len(), size);
}

#[test]
fn overflows_in_many_live_pools_are_attributed_to_the_right_pool_and_slot() {
    may::config().set_workers(2);
    let shapes = [
        (1, 8),
        (3, 12),
        (5, 16),
        (8, 20),
        (2, 64),
        (13, 8),
        (7, 32),
        (16, 12),
    ];
    let mut pools: Vec<FiberPool> = shapes.iter().map(|&(n, kib)| make(n, kib)).collect();
    // Drop two and create others in their place (nodes reused, other sizes).
    pools.remove(1);
    pools.remove(3);
    pools.push(make(4, 24));
    pools.push(make(11, 16));
    // All at once, from several carriers.
    let handles: Vec<_> = pools
        .iter()
        .enumerate()
        .map(|(tag, pool)| {
            let pool = pool.clone();
            std::thread::spawn(move || overflow_every_slot(&pool, tag))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for pool in &pools {
        let s = pool.stats();
        assert_eq!((s.overflows, s.completed, s.busy), (s.size as u64, 0, 0));
    }
    // Every fiber of every pool still works.
    for pool in &pools {
        let p = pool.clone();
        let n = s_size(pool);
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let p = p.clone();
                may::go!(move || p.run("ok", move || i * 2).unwrap())
            })
            .collect();
        for (i, h) in hs.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i * 2);
        }
    }
}

fn s_size(pool: &FiberPool) -> usize {
    pool.stats().size
}
