//! [`Ticker`]: a job that counts the turns one may worker gives it, to show whether
//! something else holds that worker.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fiber_pool::{FiberPool, RunError};

use super::wait_until;

/// How long the ticker may take to tick first.
const FIRST_TICK: Duration = Duration::from_secs(10);

/// A job that counts its turns on the worker: a plain thread (the metronome) sends
/// it a message every millisecond on a may channel, and the job counts each one it
/// receives, until `stop` is set. A message from a thread that is not a worker puts
/// the receiver on the worker's queue, so each count is a turn the worker gave it
/// (may timers are not used: may resumes a sleeper on its own timer thread, and a
/// ticker that slept would not need the worker at all).
pub struct Ticker {
    pub ticks: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    metronome: std::thread::JoinHandle<()>,
    job: may::coroutine::JoinHandle<Result<(), RunError>>,
}

impl Ticker {
    pub fn start(pool: &FiberPool) -> Ticker {
        let (tx, rx) = may::sync::mpsc::channel::<()>();
        let ticks = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let metronome = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) && tx.send(()).is_ok() {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let (p, t) = (pool.clone(), ticks.clone());
        let job = move || {
            p.run("ticker", move || {
                // The channel's wait, on the carrier (the receiver goes there and back);
                // it ends when the metronome stops.
                let mut rx = rx;
                loop {
                    let (got, back) = fiber_pool::on_carrier(move || (rx.recv(), rx));
                    rx = back;
                    if got.is_err() {
                        break;
                    }
                    t.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let job = fiber_pool::spawn::go(job);
        wait_until("the ticker to tick", FIRST_TICK, || {
            ticks.load(Ordering::SeqCst) > 0
        });
        Ticker {
            ticks,
            stop,
            metronome,
            job,
        }
    }

    pub fn ticks(&self) -> usize {
        self.ticks.load(Ordering::SeqCst)
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.metronome.join().unwrap();
        self.job.join().unwrap().unwrap();
    }
}
