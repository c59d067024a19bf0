//! `Lent`: when a job overflows with a resource checked out, the resource is
//! leaked where it is (never dropped, read or moved: the overflow may have left it
//! mid-method, or still borrowed by a thread) and its `on_abandon` runs exactly once;
//! on a normal end it is just dropped. A `Lent` made with about `LENT_STACK_MARGIN`
//! left completes or overflows before its ledger's lock, never inside it.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{recurse, Watch};
use fiber_pool::lent::LENT_STACK_MARGIN;
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
fn an_overflow_leaks_the_lent_value_and_runs_on_abandon_exactly_once() {
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(Mutex::new(Vec::new()));
    let p = pool.clone();
    let (d, a) = (drops.clone(), abandoned.clone());
    let res = may::go!(move || p.run("leaky", move || {
        let a2 = a.clone();
        let conn = Lent::new(Conn { id: 7, drops: d }, move |_| {
            a2.lock().unwrap().push(7)
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
        0,
        "the value is leaked, never dropped"
    );

    // The slot's ledger is empty again: a normal job afterwards abandons nothing.
    let p = pool.clone();
    let d = drops.clone();
    let a = abandoned.clone();
    may::go!(move || {
        for _ in 0..4 {
            let (a, d) = (a.clone(), d.clone());
            p.run("fine", move || {
                let c = Lent::new(
                    Conn {
                        id: 1,
                        drops: d.clone(),
                    },
                    move |_| a.lock().unwrap().push(1),
                );
                c.id
            })
            .unwrap();
        }
    })
    .join()
    .unwrap();
    assert_eq!(abandoned.lock().unwrap().len(), 1);
    assert_eq!(drops.load(Ordering::SeqCst), 4);
}

/// An owner that counts what it was told.
#[derive(Default)]
struct Owner {
    told: AtomicUsize,
}

impl fiber_pool::LentOwner<Conn> for Owner {
    fn abandoned(&self, _: fiber_pool::Abandoned<Conn>) {
        self.told.fetch_add(1, Ordering::SeqCst);
    }
}

/// `Lent::acquire_owned`: the shared owner is told exactly once when its job
/// overflows (the value leaked), and never when the job ends normally.
#[test]
fn an_owner_is_told_once_of_an_overflow_and_never_of_a_normal_end() {
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Arc::new(Owner::default());
    // `make` fails (Err), or makes the value and the job ends normally, or
    // overflows holding it.
    let run = |make: bool, overflow: bool| {
        let (p, d, o) = (pool.clone(), drops.clone(), owner.clone());
        may::go!(move || p.run("owned", move || {
            let made = || match make {
                true => Ok(Conn { id: 3, drops: d }),
                false => Err(()),
            };
            match Lent::acquire_owned(made, o) {
                Ok(conn) if overflow => recurse(u64::from(conn.id)),
                Ok(conn) => u64::from(conn.id),
                Err(()) => 0,
            }
        }))
        .join()
        .unwrap()
    };
    let told = || owner.told.load(Ordering::SeqCst);
    assert_eq!(run(true, false), Ok(3));
    assert_eq!(told(), 0, "a normal end tells nobody");
    assert_eq!(drops.load(Ordering::SeqCst), 1, "and drops the value");
    assert_eq!(run(false, false), Ok(0));
    assert_eq!(told(), 0, "a failed make tells nobody");
    // Every reference the Lents took to the owner is gone: none kept, none doubled.
    assert_eq!(Arc::strong_count(&owner), 1);
    let res = run(true, true);
    assert!(
        matches!(res, Err(RunError::StackOverflow { .. })),
        "{res:?}"
    );
    assert_eq!(told(), 1, "told exactly once");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the value is leaked, never dropped"
    );
    assert_eq!(run(true, false), Ok(3));
    assert_eq!(told(), 1, "the ledger is empty again");
}

/// An owner that counts the times its last reference went on a fiber's stack.
struct DropWitness(Arc<AtomicUsize>);

impl Drop for DropWitness {
    fn drop(&mut self) {
        if on_fiber() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl<T> fiber_pool::LentOwner<T> for DropWitness {
    fn abandoned(&self, _: fiber_pool::Abandoned<T>) {}
}

/// A `Lent` dropped as usual lets go of its owner on the carrier, where an owner's
/// last reference may be heavy to drop (a pool's state), never on the fiber: after a
/// job that ended normally and after a `make` that failed.
#[test]
fn an_owner_is_let_go_of_on_the_carrier() {
    let pool = pool();
    let on_fiber_drops = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    for make in [true, false] {
        let (p, w, d) = (pool.clone(), on_fiber_drops.clone(), drops.clone());
        let ran = may::go!(move || p.run("owned", move || {
            let made = || match make {
                true => Ok(Conn { id: 5, drops: d }),
                false => Err(()),
            };
            let owner = Arc::new(DropWitness(w));
            Lent::acquire_owned(made, owner).map_or(0, |conn| conn.id)
        }))
        .join()
        .unwrap();
        assert_eq!(ran, Ok(if make { 5 } else { 0 }));
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(on_fiber_drops.load(Ordering::SeqCst), 0);
}

/// A value whose drop panics.
struct Loud;

impl Drop for Loud {
    fn drop(&mut self) {
        panic!("the value's drop panicked");
    }
}

/// The owner is let go of on the carrier even when the value's drop panics there: the
/// panic reaches the job, and the owner was not left to the cell's last reference,
/// which the job lets go of on the fiber.
#[test]
fn an_owner_is_let_go_of_on_the_carrier_when_the_values_drop_panics() {
    let pool = pool();
    let on_fiber_drops = Arc::new(AtomicUsize::new(0));
    let (p, w) = (pool.clone(), on_fiber_drops.clone());
    let ran = may::go!(move || p.run("loud", move || {
        let owner = Arc::new(DropWitness(w));
        drop(Lent::acquire_owned(|| Ok::<_, ()>(Loud), owner));
    }))
    .join()
    .unwrap();
    assert!(matches!(ran, Err(RunError::Panicked { .. })), "{ran:?}");
    assert_eq!(on_fiber_drops.load(Ordering::SeqCst), 0);
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

/// What a sweep does once it is deep enough: [`AtPad::at`] runs with `PAD` bytes of
/// frame between the sweep and the code under test, so that sweeping `PAD` moves the
/// stack that code starts with in 16-byte steps.
trait AtPad {
    fn at<const PAD: usize>(self);
}

/// Takes the value out with `into_inner` and drops it.
impl AtPad for Lent<Counted> {
    #[inline(never)]
    fn at<const PAD: usize>(self) {
        let pad = std::hint::black_box([0u8; PAD]);
        drop(std::hint::black_box(self.into_inner()));
        std::hint::black_box(&pad);
    }
}

/// Recurses (512-byte frames) until fewer than `left` bytes remain, then runs `then`
/// with a pad of `step` x 16 bytes.
#[inline(never)]
fn descend<A: AtPad>(left: usize, step: usize, then: A) {
    let frame = std::hint::black_box([0u8; 512]);
    if stack_remaining().expect("on a fiber") >= left {
        descend(left, step, then);
        std::hint::black_box(&frame);
        return;
    }
    macro_rules! pads {
        ($($n:literal)*) => {
            match step {
                $($n => then.at::<{ $n * 16 }>(),)*
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
    let margin = LENT_STACK_MARGIN;
    let (taken, overflowed) = may::go!(move || {
        let (mut taken, mut overflowed) = (0, 0);
        for left in (0..margin * 2).step_by(512) {
            for step in 0..32 {
                let fate = Arc::new(Fate::default());
                let f = Arc::clone(&fate);
                let r = p.run("into_inner", move || {
                    let f2 = Arc::clone(&f);
                    let lent = Lent::new(Counted(f), move |_| {
                        f2.abandoned.fetch_add(1, Ordering::SeqCst);
                    });
                    descend(left, step, lent);
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

/// `Lent::acquire`, whose `make` fails on odd pads (the unfilled `Lent` is then
/// dropped inside `acquire`); `made` counts the values `make` produced.
struct Acquire {
    fate: Arc<Fate>,
    made: Arc<AtomicUsize>,
}

impl AtPad for Acquire {
    #[inline(never)]
    fn at<const PAD: usize>(self) {
        let pad = std::hint::black_box([0u8; PAD]);
        let (f, m, f2) = (Arc::clone(&self.fate), self.made, self.fate);
        let lent = Lent::acquire(
            move || {
                if (PAD / 16) % 2 == 1 {
                    return Err(());
                }
                m.fetch_add(1, Ordering::SeqCst);
                Ok(Counted(f))
            },
            move |_| {
                f2.abandoned.fetch_add(1, Ordering::SeqCst);
            },
        );
        drop(std::hint::black_box(lent));
        std::hint::black_box(&pad);
    }
}

/// An overflow anywhere around `Lent::acquire` tells the owner about exactly the
/// values `make` produced: never one it did not (a pool would give back a permit it
/// never took), never none for one it did.
#[test]
fn acquire_tells_its_owner_only_of_values_it_made() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let margin = LENT_STACK_MARGIN;
    let overflowed = may::go!(move || {
        let mut overflowed = 0usize;
        for left in (0..margin * 2).step_by(512) {
            for step in 0..32 {
                let fate = Arc::new(Fate::default());
                let made = Arc::new(AtomicUsize::new(0));
                let acquire = Acquire {
                    fate: Arc::clone(&fate),
                    made: Arc::clone(&made),
                };
                let r = p.run("acquire", move || descend(left, step, acquire));
                let (made, dropped, abandoned) = (
                    made.load(Ordering::SeqCst),
                    fate.dropped.load(Ordering::SeqCst),
                    fate.abandoned.load(Ordering::SeqCst),
                );
                assert_eq!(
                    dropped + abandoned,
                    made,
                    "{left} bytes left, pad {}: made {made}, dropped {dropped}, abandoned {abandoned}, {r:?}",
                    step * 16
                );
                if let Err(RunError::StackOverflow { .. }) = r {
                    overflowed += 1;
                }
            }
        }
        overflowed
    })
    .join()
    .unwrap();
    // The sweep crossed the margin: overflows struck around `acquire`. (Here every
    // one struck before the cell was registered, whose check asks for more stack
    // than anything up to `make` uses; the invariant above is what must hold if
    // that ever changes.)
    assert!(overflowed > 0, "no overflow in the sweep");
}

/// Counts its drops: an element of the slice sorted below.
struct Element {
    key: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for Element {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// std's slice sorts move elements through a guard that writes them back when the
/// comparison returns or unwinds; an overflow inside the comparison does neither, and
/// leaves one element in the slice twice (and another one lost). Dropping that slice
/// drops the doubled element twice (for a `Box`, a double free).
#[test]
fn a_value_abandoned_in_the_middle_of_a_sort_is_never_dropped() {
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(AtomicUsize::new(0));
    let (p, d, a) = (pool.clone(), drops.clone(), abandoned.clone());
    let res = may::go!(move || p.run("sorts", move || {
        let keys = [5u32, 3, 9, 1, 7, 2, 8, 6, 4, 0, 11, 10];
        let elements = keys
            .iter()
            .map(|&key| Element {
                key,
                drops: Arc::clone(&d),
            })
            .collect::<Vec<_>>();
        let mut sorted = Lent::new(elements, move |_| {
            a.fetch_add(1, Ordering::SeqCst);
        });
        let mut compared = 0;
        sorted.sort_by(|x, y| {
            compared += 1;
            if compared == 6 {
                recurse(0); // overflows inside the sort, elements in flight
            }
            x.key.cmp(&y.key)
        });
        sorted.len()
    }))
    .join()
    .unwrap();
    assert!(
        matches!(res, Err(RunError::StackOverflow { .. })),
        "{res:?}"
    );
    assert_eq!(abandoned.load(Ordering::SeqCst), 1, "on_abandon ran once");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "no element of the half-sorted slice was dropped"
    );
}

const MAGIC: u64 = 0x1e47_0000_c0de_0002;

/// A thread started by `std::thread::scope` borrows the lent value; the job
/// overflows with the scope open, so the thread is never joined. The value must stay
/// where it is for as long as the thread reads it: freed, its memory goes to the next
/// allocations of its size (made here on purpose) and the thread reads them.
#[test]
fn a_lent_value_still_borrowed_by_a_thread_after_an_overflow_stays_valid() {
    let pool = pool();
    let watch = Arc::new(Watch::default());
    let abandoned = Arc::new(AtomicUsize::new(0));
    let (p, w, a) = (pool.clone(), Arc::clone(&watch), Arc::clone(&abandoned));
    let res = may::go!(move || p.run("lends", move || {
        let lent = Lent::new(Box::new(AtomicU64::new(MAGIC)), move |_| {
            a.fetch_add(1, Ordering::SeqCst);
        });
        std::thread::scope(|s| {
            w.start(s, &lent, MAGIC);
            recurse(0)
        })
    }))
    .join()
    .unwrap();
    assert!(
        matches!(res, Err(RunError::StackOverflow { .. })),
        "{res:?}"
    );
    assert_eq!(abandoned.load(Ordering::SeqCst), 1);
    // Allocations of the value's size, with other contents: a freed value's memory
    // would be one of them.
    let reuse: Vec<Box<AtomicU64>> = (0..10_000).map(|i| Box::new(AtomicU64::new(i))).collect();
    let changed = watch.finish();
    drop(reuse);
    assert!(
        !changed,
        "the lent value changed under the thread borrowing it: it was freed"
    );
}

#[test]
fn an_owner_that_can_prove_it_reclaims_the_abandoned_value() {
    let pool = pool();
    let reclaimed = Arc::new(Mutex::new(None));
    let (p, r) = (pool.clone(), Arc::clone(&reclaimed));
    let res = may::go!(move || p.run("counts", move || {
        let mut count = Lent::new(0u64, move |abandoned| {
            // SAFETY: the job only adds to the integer (valid at every instruction)
            // and lends it to nobody.
            *r.lock().unwrap() = Some(unsafe { abandoned.reclaim() });
        });
        *count += 41;
        recurse(*count)
    }))
    .join()
    .unwrap();
    assert!(
        matches!(res, Err(RunError::StackOverflow { .. })),
        "{res:?}"
    );
    assert_eq!(*reclaimed.lock().unwrap(), Some(41));
}

/// A `Lent` dropped while its job unwinds leaves its value to the pool (its drop may
/// wait, which an unwinding fiber must not: tests/unwinding.rs). When the job catches
/// the panic and goes on, the value is dropped at the job's end: late, not leaked.
#[test]
fn a_lent_dropped_while_unwinding_in_a_job_that_goes_on_is_dropped_at_its_end() {
    // std's hook prints a backtrace with RUST_BACKTRACE=1: more than a 16 KiB fiber has.
    fiber_pool::run_panic_hook_off_fiber();
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let (p, d) = (pool.clone(), drops.clone());
    let seen_in_job = may::go!(move || p.run("catches", move || {
        let d2 = Arc::clone(&d);
        let caught = std::panic::catch_unwind(move || {
            let _conn = Lent::new(Conn { id: 3, drops: d2 }, |_| {});
            panic!("unwinding through a Lent");
        });
        assert!(caught.is_err());
        d.load(Ordering::SeqCst)
    }))
    .join()
    .unwrap();
    assert_eq!(seen_in_job, Ok(0), "not dropped while the job ran on");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped once the job ended"
    );
}

/// Recurses until at most `target` bytes are left, then makes 40 Lents
/// (the ledger's Vec grows 4 times with its lock held).
#[inline(never)]
fn lents_at(target: usize) -> usize {
    let pad = std::hint::black_box([1u8; 64]);
    if stack_remaining().unwrap() > target {
        let r = lents_at(target);
        std::hint::black_box(&pad); // live across the call: no tail call
        return r;
    }
    let mut lents = Vec::with_capacity(40);
    for i in 0..40 {
        lents.push(Lent::new(i, |_| {}));
    }
    let mut sum = 0;
    for l in &lents {
        sum += **l;
    }
    sum
}

/// Lents made with anything from `LENT_STACK_MARGIN` - 256 to + 2 KiB left:
/// each job completes, or overflows at `Lent::new`'s margin check, before
/// the ledger's lock; never inside it (the ledger would stay locked and the
/// carrier's hand-back, or the next Lent on that fiber, would deadlock: the
/// watchdog would fire).
#[test]
fn lents_made_near_the_margin_complete_or_overflow_before_the_lock() {
    let done = common::watchdog(60);
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 32 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = pool.clone();
    let (ok, overflowed) = may::go!(move || {
        let (mut ok, mut overflowed) = (0, 0);
        for target in (LENT_STACK_MARGIN - 256..LENT_STACK_MARGIN + 2048).step_by(16) {
            match p.run("margin", move || lents_at(target)) {
                Ok(sum) => {
                    assert_eq!(sum, (0..40).sum::<usize>());
                    ok += 1;
                }
                Err(RunError::StackOverflow { .. }) => overflowed += 1,
                Err(e) => panic!("{e}"),
            }
            // The fiber's ledger is usable again.
            let l = p.run("after", || *Lent::new(3, |_| {})).unwrap();
            assert_eq!(l, 3);
        }
        (ok, overflowed)
    })
    .join()
    .unwrap();
    eprintln!("{ok} jobs completed, {overflowed} overflowed at the margin check");
    assert!(ok > 0 && overflowed > 0, "the window spans the margin");
    done.store(true, Ordering::SeqCst);
}
