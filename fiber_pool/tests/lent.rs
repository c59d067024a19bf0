//! `Lent`: a resource checked out by a job that overflows is handed to its
//! `on_abandon` exactly once; on a normal end it is just dropped.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::recurse;
use fiber_pool::{on_fiber, stack_remaining, FiberPool, Lent, PoolConfig, RunError};

/// Counts its drops, like a pooled connection would be returned.
struct Conn {
    id: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn pool() -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 2,
        stack_size: 16 * 1024,
        ..PoolConfig::default()
    })
    .unwrap()
}

#[test]
fn an_overflow_hands_the_lent_value_to_on_abandon_exactly_once() {
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(Mutex::new(Vec::new()));
    let p = pool.clone();
    let (d, a) = (drops.clone(), abandoned.clone());
    let res = may::go!(move || p.run("leaky", move || {
        let a2 = a.clone();
        let conn = Lent::new(Conn { id: 7, drops: d }, move |c: Conn| {
            a2.lock().unwrap().push(c.id)
        });
        assert_eq!(conn.id, 7);
        recurse(u64::from(conn.id))
    }))
    .join()
    .unwrap();
    assert!(
        matches!(res, Err(RunError::StackOverflow { .. })),
        "{res:?}"
    );
    assert_eq!(
        *abandoned.lock().unwrap(),
        vec![7],
        "on_abandon runs exactly once"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the callback consumed (dropped) it"
    );

    // The slot's ledger is empty again: a normal job afterwards abandons nothing.
    let p = pool.clone();
    let d = drops.clone();
    let a = abandoned.clone();
    may::go!(move || {
        for _ in 0..4 {
            p.run("fine", || {
                let a = a.clone();
                let c = Lent::new(
                    Conn {
                        id: 1,
                        drops: d.clone(),
                    },
                    move |c: Conn| a.lock().unwrap().push(c.id),
                );
                c.id
            })
            .unwrap();
        }
    })
    .join()
    .unwrap();
    assert_eq!(abandoned.lock().unwrap().len(), 1);
    assert_eq!(drops.load(Ordering::SeqCst), 5);
}

#[test]
fn into_inner_and_outside_fibers() {
    let drops = Arc::new(AtomicUsize::new(0));
    assert!(!on_fiber());
    assert_eq!(stack_remaining(), None);
    let mut outside = Lent::new(
        Conn {
            id: 1,
            drops: drops.clone(),
        },
        |_| panic!("not on a fiber"),
    );
    outside.id = 2;
    assert_eq!(outside.into_inner().id, 2);
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    let pool = pool();
    let p = pool.clone();
    let (on, remaining) = may::go!(move || p.run("probe", || (on_fiber(), stack_remaining())))
        .join()
        .unwrap()
        .unwrap();
    assert!(on);
    let remaining = remaining.unwrap();
    assert!(remaining > 8 * 1024 && remaining < 16 * 1024, "{remaining}");
}
