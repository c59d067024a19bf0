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

/// Counts what became of one value: dropped (by whoever ended up with it) or
/// handed to `on_abandon`.
#[derive(Default)]
struct Fate {
    dropped: AtomicUsize,
    abandoned: AtomicUsize,
}

struct Counted(Arc<Fate>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Takes `lent`'s value out and drops it: with `PAD` bytes of frame between the
/// caller and `into_inner`, so that sweeping `PAD` moves the stack `into_inner`
/// starts with in 16-byte steps.
#[inline(never)]
fn take_out<const PAD: usize>(lent: Lent<Counted>) {
    let pad = std::hint::black_box([0u8; PAD]);
    drop(std::hint::black_box(lent.into_inner()));
    std::hint::black_box(&pad);
}

/// Recurses (512-byte frames) until fewer than `left` bytes remain, then calls
/// `take_out` with a pad of `step` x 16 bytes.
#[inline(never)]
fn descend_and_take_out(left: usize, step: usize, lent: Lent<Counted>) {
    let frame = std::hint::black_box([0u8; 512]);
    if stack_remaining().expect("on a fiber") >= left {
        descend_and_take_out(left, step, lent);
        std::hint::black_box(&frame);
        return;
    }
    macro_rules! pads {
        ($($n:literal)*) => {
            match step {
                $($n => take_out::<{ $n * 16 }>(lent),)*
                _ => unreachable!("32 steps of 16 bytes cover one 512-byte frame"),
            }
        };
    }
    pads!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
}

/// Where a lost value could hide depends on the frame sizes of `into_inner` and
/// what it calls, which differ between builds: run this in a release build too
/// (`cargo nextest run --release -p fiber_pool --test lent`).
#[test]
fn into_inner_never_loses_the_value_whatever_the_stack_left() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    // From twice `LENT_STACK_MARGIN` left down to nothing, every 16 bytes: the
    // checks of `into_inner` (and of anything it calls) fire somewhere in there.
    let margin = fiber_pool::lent::LENT_STACK_MARGIN;
    let (taken, overflowed) = may::go!(move || {
        let (mut taken, mut overflowed) = (0, 0);
        for left in (0..margin * 2).step_by(512) {
            for step in 0..32 {
                let fate = Arc::new(Fate::default());
                let f = Arc::clone(&fate);
                let r = p.run("into_inner", move || {
                    let f2 = Arc::clone(&f);
                    let lent = Lent::new(Counted(f), move |c: Counted| {
                        f2.abandoned.fetch_add(1, Ordering::SeqCst);
                        std::mem::forget(c);
                    });
                    descend_and_take_out(left, step, lent);
                });
                let (dropped, abandoned) = (
                    fate.dropped.load(Ordering::SeqCst),
                    fate.abandoned.load(Ordering::SeqCst),
                );
                assert_eq!(
                    dropped + abandoned,
                    1,
                    "{left} bytes left, pad {}: dropped {dropped}, abandoned {abandoned}, {r:?}",
                    step * 16
                );
                match r {
                    Ok(()) => taken += 1,
                    Err(RunError::StackOverflow { .. }) => overflowed += 1,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        (taken, overflowed)
    })
    .join()
    .unwrap();
    // Both ends of the sweep were reached: it crossed the margin.
    assert!(
        taken > 0 && overflowed > 0,
        "{taken} taken, {overflowed} overflowed"
    );
}
