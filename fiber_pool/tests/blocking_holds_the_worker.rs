//! The contrast to test `blocking`: a blocking call made on the fiber itself, not
//! through `fiber_pool::blocking`, holds the one may worker: the stall watchdog sees
//! it, and another job on that worker gets no turn meanwhile. In a binary of its own:
//! it holds the process's only worker on purpose, which would stall every other test's
//! coroutines and show them a stall (`blocking` asserts that no job of its process
//! holds a worker while its blocking calls run).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::ticker::Ticker;
use common::wait_until;

const LONG: Duration = Duration::from_secs(10);
const BLOCK: Duration = Duration::from_millis(300);

#[test]
fn a_blocking_call_made_on_the_fiber_instead_holds_the_worker() {
    // The contrast, on the same one worker: the stall watchdog sees it, the ticker stops.
    let pool = common::pool_on_workers(1, 2);
    let ticker = Ticker::start(&pool);
    let (p, t) = (pool.clone(), ticker.ticks.clone());
    let job = move || {
        let before = t.load(Ordering::SeqCst);
        std::thread::sleep(BLOCK);
        t.load(Ordering::SeqCst) - before
    };
    let blocked = fiber_pool::spawn::go(move || p.run("blocks", job));
    wait_until("the stall to show", LONG, || {
        fiber_pool::jobs_running_longer_than(Duration::from_millis(100))
            .iter()
            .any(|j| j.label == "blocks")
    });
    let ticked_meanwhile = blocked.join().unwrap().unwrap();
    ticker.stop();
    assert_eq!(
        ticked_meanwhile, 0,
        "the ticker ran while the worker was held"
    );
}
