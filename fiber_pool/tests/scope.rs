//! Structured fan-out: children on fibers of their own run at once, one child's
//! panic is its own error and so is its overflow until the scope ends (then its parent
//! is abandoned too), the scope waits for every child whatever its closure does
//! (returns early, panics, overflows), the parent's cancellation and the scope's
//! deadline reach the children, and a pool whose every fiber runs a parent that fans
//! out finishes instead of deadlocking.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{in_coroutine, recurse, wait_until, Watch};
use fiber_pool::{CancelReason, Context, FiberPool, PoolConfig, RunError};

fn pool(cfg: PoolConfig) -> FiberPool {
    FiberPool::new(cfg).unwrap()
}

fn small(size: usize) -> PoolConfig {
    PoolConfig {
        size,
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    }
}

const LONG: Duration = Duration::from_secs(10);

#[test]
fn three_children_that_sleep_a_second_finish_in_about_a_second() {
    const SLEEP: Duration = Duration::from_secs(1);
    let pool = pool(small(1));
    let p = pool.clone();
    let job = move || {
        let start = Instant::now();
        let slept = fiber_pool::scope(|s| {
            let children: Vec<_> = (0..3)
                .map(|i| {
                    s.spawn(move || {
                        fiber_pool::sleep(SLEEP);
                        i
                    })
                })
                .collect();
            children.into_iter().map(|c| c.join()).collect::<Vec<_>>()
        });
        (slept, start.elapsed())
    };
    let (slept, took) = in_coroutine(move || p.run("parent", job)).unwrap();
    println!("scope of 3 children sleeping {SLEEP:?}: {took:?}");
    assert_eq!(slept, vec![Ok(0), Ok(1), Ok(2)]);
    assert!(took >= SLEEP, "{took:?}");
    assert!(
        took < SLEEP + Duration::from_millis(500),
        "{took:?}: not at once"
    );
    // One parent on the pool's only fiber: its children ran on the reserve.
    let stats = pool.stats();
    assert_eq!(stats.per_label[fiber_pool::scope::CHILD_LABEL].runs, 3);
    assert_eq!((stats.reserve_busy, stats.busy), (0, 0));
}

#[test]
fn one_childs_overflow_and_anothers_panic_leave_the_others_results_intact() {
    let pool = pool(small(4));
    let p = pool.clone();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s2 = Arc::clone(&seen);
    let job = move || {
        fiber_pool::scope(|s| {
            let before = s.spawn(|| "before");
            let overflow = s.spawn_labeled("overflows", || recurse(0));
            let panics = s.spawn_labeled("panics", || -> u64 { panic!("child {}", 2) });
            let after = s.spawn(|| {
                fiber_pool::sleep(Duration::from_millis(20));
                "after"
            });
            *s2.lock().unwrap() =
                Some((before.join(), overflow.join(), panics.join(), after.join()));
        })
    };
    let parent = in_coroutine(move || p.run("parent", job));
    // The overflow abandoned a child: once the scope ended, the parent was abandoned
    // too (what the child borrowed from it may still be in use).
    assert!(
        matches!(
            parent,
            Err(RunError::StackOverflow {
                label: "parent",
                at_safe_point: false,
                ..
            })
        ),
        "{parent:?}"
    );
    let (before, overflow, panics, after) =
        seen.lock().unwrap().take().expect("the parent saw them");
    assert_eq!((before, after), (Ok("before"), Ok("after")));
    assert!(
        matches!(
            overflow,
            Err(RunError::StackOverflow {
                label: "overflows",
                ..
            })
        ),
        "{overflow:?}"
    );
    assert_eq!(
        panics,
        Err(RunError::Panicked {
            label: "panics",
            message: "child 2".into()
        })
    );
    assert_eq!(
        pool.stats().overflows,
        2,
        "the child's and then its parent's"
    );
}

#[test]
fn a_scope_waits_for_every_child_when_its_closure_returns_early_or_panics() {
    let pool = pool(small(2));
    for panics in [false, true] {
        let ended: Arc<Vec<AtomicBool>> =
            Arc::new((0..3).map(|_| AtomicBool::new(false)).collect());
        let started = Arc::new(AtomicUsize::new(0));
        let (e, st) = (Arc::clone(&ended), Arc::clone(&started));
        let ran = pool.run("parent", move || {
            // Borrowed by the children from the job's frame.
            let (ended, started) = (&*e, &*st);
            fiber_pool::scope(|s| {
                for (i, flag) in ended.iter().enumerate() {
                    // Dropped at once: the scope still waits for the child.
                    drop(s.spawn(move || {
                        started.fetch_add(1, Ordering::SeqCst);
                        fiber_pool::sleep(Duration::from_millis(50 * (i as u64 + 1)));
                        flag.store(true, Ordering::SeqCst);
                    }));
                }
                // Every child is running when the closure ends (a panic cancels the
                // ones not started yet, which then never run).
                while started.load(Ordering::SeqCst) < ended.len() {
                    fiber_pool::sleep(Duration::from_millis(1));
                }
                assert!(!panics, "the parent panics with its children running");
            });
            ended.iter().all(|f| f.load(Ordering::SeqCst))
        });
        if panics {
            assert!(matches!(ran, Err(RunError::Panicked { .. })), "{ran:?}");
        } else {
            assert_eq!(ran, Ok(true), "every child ended before the scope returned");
        }
        assert!(
            ended.iter().all(|f| f.load(Ordering::SeqCst)),
            "panics: {panics}"
        );
    }
}

#[test]
fn a_parent_that_overflows_with_children_running_returns_only_after_they_end() {
    let pool = pool(small(2));
    let (asleep, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let saw = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (a, e, sw) = (Arc::clone(&asleep), Arc::clone(&ended), Arc::clone(&saw));
    let ran = pool.run("parent", move || {
        // Borrowed by the children from the job's frame, which the overflow abandons.
        let (asleep, ended, saw) = (&*a, &*e, &*sw);
        fiber_pool::scope(|s| {
            for _ in 0..2 {
                drop(s.spawn(move || {
                    asleep.fetch_add(1, Ordering::SeqCst);
                    // Cancelled when the parent overflows: ends early, then still
                    // uses what it borrowed from the abandoned frame.
                    let slept = fiber_pool::sleep_or_cancelled(LONG);
                    saw.lock().unwrap().push(slept);
                    ended.fetch_add(1, Ordering::SeqCst);
                }));
            }
            while asleep.load(Ordering::SeqCst) < 2 {
                fiber_pool::sleep(Duration::from_millis(1));
            }
            recurse(0)
        })
    });
    assert!(
        matches!(
            ran,
            Err(RunError::StackOverflow {
                label: "parent",
                ..
            })
        ),
        "{ran:?}"
    );
    assert_eq!(
        ended.load(Ordering::SeqCst),
        2,
        "both children ended before run returned"
    );
    assert_eq!(
        *saw.lock().unwrap(),
        vec![Err(CancelReason::ParentFailed); 2],
        "the overflow cancelled them"
    );
}

const MAGIC: u64 = 0x5c09_e000_c0de_0003;

/// A child lends its parent's data (a box the parent's frame owns) to a thread of
/// `std::thread::scope` and overflows with that scope open: the thread is never
/// joined and goes on reading. Were the parent to return, it would free the box under
/// the thread; it is abandoned instead, once its scope has ended, and the box stays.
#[test]
fn a_child_that_overflows_with_a_borrow_lent_to_a_thread_takes_its_parent_with_it() {
    let pool = pool(small(2));
    let watch = Arc::new(Watch::default());
    let w = Arc::clone(&watch);
    let ran = pool.run("parent", move || {
        let local = Box::new(AtomicU64::new(MAGIC));
        let child = fiber_pool::scope(|s| {
            s.spawn(|| {
                std::thread::scope(|ts| {
                    w.start(ts, &local, MAGIC);
                    recurse(0)
                })
            })
            .join()
        });
        // Not reached: `local` would be dropped here.
        child.map(|_| "returned")
    });
    assert!(
        matches!(
            ran,
            Err(RunError::StackOverflow {
                label: "parent",
                ..
            })
        ),
        "{ran:?}"
    );
    // Allocations of the box's size, with other contents: a freed box's memory would
    // be one of them.
    let reuse: Vec<Box<AtomicU64>> = (0..10_000).map(|i| Box::new(AtomicU64::new(i))).collect();
    let changed = watch.finish();
    drop(reuse);
    assert!(
        !changed,
        "the parent's box changed under the thread borrowing it: it was freed"
    );
    assert_eq!(pool.stats().overflows, 2, "the child's and its parent's");
}

#[test]
fn cancelling_the_parent_cancels_its_children_and_a_scope_deadline_ends_them() {
    let pool = pool(small(2));
    let ctx = Context::new();
    let (p, c) = (pool.clone(), ctx.clone());
    let asleep = Arc::new(AtomicUsize::new(0));
    let a = asleep.clone();
    let job = move || {
        fiber_pool::scope(|s| {
            let children: Vec<_> = (0..3)
                .map(|_| {
                    let a = a.clone();
                    s.spawn(move || {
                        a.fetch_add(1, Ordering::SeqCst);
                        fiber_pool::sleep_or_cancelled(LONG)
                    })
                })
                .collect();
            children.into_iter().map(|c| c.join()).collect::<Vec<_>>()
        })
    };
    let parent = move || {
        let start = Instant::now();
        (p.run_in("parent", &c, job), start.elapsed())
    };
    let parent = fiber_pool::spawn::go(parent);
    wait_until("three children asleep", LONG, || {
        asleep.load(Ordering::SeqCst) == 3
    });
    ctx.cancel(CancelReason::ClientGone);
    let (got, took) = parent.join().unwrap();
    assert_eq!(got, Ok(vec![Ok(Err(CancelReason::ClientGone)); 3]));
    assert!(took < Duration::from_secs(5), "{took:?}");

    // A scope's own deadline: the children end, the parent's context stays live.
    let p = pool.clone();
    let job = || {
        let start = Instant::now();
        let slept = fiber_pool::scope_with_deadline(start + Duration::from_millis(100), |s| {
            s.spawn(|| fiber_pool::sleep_or_cancelled(LONG)).join()
        });
        let parent_live = !fiber_pool::current().unwrap().is_cancelled();
        (slept, start.elapsed(), parent_live)
    };
    let (slept, took, parent_live) = in_coroutine(move || p.run("parent", job)).unwrap();
    assert_eq!(slept, Ok(Err(CancelReason::DeadlinePassed)));
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(parent_live);
}

/// Every fiber of the pool runs a parent, and every parent fans out: the children get
/// fibers from the reserve, and every parent finishes.
#[test]
fn a_pool_full_of_parents_that_fan_out_finishes() {
    const PARENTS: usize = 4;
    const CHILDREN: usize = 3;
    const NAP: Duration = Duration::from_millis(50);
    let pool = pool(PoolConfig {
        child_reserve: 2,
        wait_timeout: Some(Duration::from_secs(5)),
        ..small(PARENTS)
    });
    let parents_in = Arc::new(AtomicUsize::new(0));
    let most_reserve = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let parents: Vec<_> = (0..PARENTS)
        .map(|i| {
            let (p, inside, most) = (pool.clone(), parents_in.clone(), most_reserve.clone());
            let stats = pool.clone();
            let parent = move || {
                p.run("parent", move || {
                    inside.fetch_add(1, Ordering::SeqCst);
                    // Every parent holds its fiber before any fans out.
                    while inside.load(Ordering::SeqCst) < PARENTS {
                        fiber_pool::sleep(Duration::from_millis(1));
                    }
                    fiber_pool::scope(|s| {
                        let children: Vec<_> = (0..CHILDREN)
                            .map(|j| {
                                let (most, stats) = (most.clone(), stats.clone());
                                s.spawn(move || {
                                    most.fetch_max(stats.stats().reserve_busy, Ordering::SeqCst);
                                    fiber_pool::sleep(NAP);
                                    i * 10 + j
                                })
                            })
                            .collect();
                        children.into_iter().map(|c| c.join()).collect::<Vec<_>>()
                    })
                })
            };
            fiber_pool::spawn::go(parent)
        })
        .collect();
    for (i, parent) in parents.into_iter().enumerate() {
        let got = parent.join().unwrap().expect("the parent ran");
        let want: Vec<_> = (0..CHILDREN).map(|j| Ok(i * 10 + j)).collect();
        assert_eq!(got, want, "parent {i}");
    }
    let took = start.elapsed();
    // 12 children through 2 reserve fibers: 6 waves of 50 ms.
    println!("{PARENTS} parents x {CHILDREN} children on {PARENTS} + 2 fibers: {took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(
        most_reserve.load(Ordering::SeqCst),
        2,
        "children ran on the reserve"
    );
    let stats = pool.stats();
    assert_eq!((stats.busy, stats.reserve_busy), (0, 0));
}

/// The same load without a reserve: the children cannot get a fiber, and say so
/// within `child_wait` instead of hanging.
#[test]
fn a_child_that_finds_no_fiber_fails_within_its_wait() {
    const PARENTS: usize = 2;
    let pool = pool(PoolConfig {
        child_reserve: 1,
        child_wait: Duration::from_millis(100),
        ..small(PARENTS)
    });
    let inside = Arc::new(AtomicUsize::new(0));
    let parents: Vec<_> = (0..PARENTS)
        .map(|_| {
            let (p, inside) = (pool.clone(), inside.clone());
            let parent = move || {
                p.run("parent", move || {
                    inside.fetch_add(1, Ordering::SeqCst);
                    while inside.load(Ordering::SeqCst) < PARENTS {
                        fiber_pool::sleep(Duration::from_millis(1));
                    }
                    let start = Instant::now();
                    // Two children each, one reserve fiber held 2 s by whichever gets it.
                    let got = fiber_pool::scope(|s| {
                        let a = s.spawn(|| fiber_pool::sleep(Duration::from_secs(2)));
                        let b = s.spawn(|| fiber_pool::sleep(Duration::from_secs(2)));
                        (a.join(), b.join())
                    });
                    (got, start.elapsed())
                })
            };
            fiber_pool::spawn::go(parent)
        })
        .collect();
    let results: Vec<_> = parents
        .into_iter()
        .map(|p| p.join().unwrap().unwrap())
        .collect();
    let mut ok = 0;
    for ((a, b), _) in &results {
        for r in [a, b] {
            match r {
                Ok(()) => ok += 1,
                Err(RunError::NoFiberForChild { waited, reserve: 1 }) => {
                    assert!(*waited < Duration::from_secs(1), "{waited:?}");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(ok, 1, "one child had the reserve fiber: {results:?}");
    let e = RunError::NoFiberForChild {
        waited: Duration::from_millis(100),
        reserve: 1,
    };
    assert!(e.to_string().contains("child_reserve"), "{e}");
}

#[test]
fn a_scope_spawns_at_most_its_budget() {
    let pool = pool(PoolConfig {
        max_children_per_scope: 2,
        ..small(1)
    });
    let p = pool.clone();
    let got = pool.run("parent", move || {
        p.scope(|s| {
            let kids: Vec<_> = (0..3).map(|i| s.spawn(move || i)).collect();
            kids.into_iter().map(|c| c.join()).collect::<Vec<_>>()
        })
    });
    assert_eq!(
        got,
        Ok(vec![Ok(0), Ok(1), Err(RunError::ScopeFull { max: 2 })])
    );
}

/// A scope opened off any job could not be abandoned if a child overflowed with a
/// borrow lent to a thread: it is refused before anything starts.
#[test]
fn a_scope_off_a_job_is_refused() {
    let pool = pool(small(1));
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.scope(|s| s.spawn(|| 1).join())
    }));
    let message = refused.expect_err("refused");
    let message = (message.downcast_ref::<String>().map(String::as_str))
        .or_else(|| message.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(message.contains("from a job"), "{message}");
}

#[test]
fn children_borrow_the_parents_locals_and_spawn_grandchildren() {
    let pool = pool(small(1));
    let ran = pool.run("parent", || {
        let words = vec!["one".to_string(), "three".to_string()];
        let total = AtomicUsize::new(0);
        fiber_pool::scope(|s| {
            for w in &words {
                let total = &total;
                s.spawn(move || {
                    // A grandchild through the same scope.
                    s.spawn(move || total.fetch_add(w.len(), Ordering::SeqCst));
                });
            }
        });
        total.into_inner()
    });
    assert_eq!(ran, Ok(8));
}

/// Written by the child process once the parent's carrier is cancelled.
const CANCELLED: &str = "child: the parent's carrier is cancelled in the scope's join";

/// A may cancel of the parent's carrier while it waits in its scope's final join makes
/// that wait panic. Unwinding would free the parent's frames while a child still reads
/// a local of them; the process aborts instead (in a child process, which the test
/// watches die).
#[test]
fn a_scope_join_that_unwinds_aborts_the_process_rather_than_free_what_children_borrow() {
    const NAME: &str =
        "a_scope_join_that_unwinds_aborts_the_process_rather_than_free_what_children_borrow";
    if common::child_mode(NAME).is_none() {
        let says = [CANCELLED, "a scope's join unwound"];
        return common::assert_child_dies(NAME, "cancel", libc::SIGABRT, &says);
    }
    let p = pool(small(2));
    let started = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&started);
    let parent = fiber_pool::spawn::go(move || {
        p.run("parent", move || {
            let stop = AtomicBool::new(false);
            fiber_pool::scope(|scope| {
                // Reads the parent's local until told to stop: never, here.
                scope.spawn(|| {
                    s.store(true, Ordering::SeqCst);
                    while !stop.load(Ordering::SeqCst) {
                        fiber_pool::sleep(Duration::from_millis(1));
                    }
                });
            });
        })
    });
    wait_until("the child to start", LONG, || {
        started.load(Ordering::SeqCst)
    });
    eprintln!("{CANCELLED}");
    // SAFETY: a test of what cancelling does: the carrier's next park panics.
    unsafe { parent.coroutine().cancel() };
    let ran = parent.join();
    eprintln!("child: the parent returned while its child still ran: {ran:?}");
}
