//! Host names resolved at call time, off the fibers and off the scheduler's threads: a small pool
//! of OS threads runs the lookups, a TTL cache answers most calls without one.
//!
//! `getaddrinfo` blocks (it waits for DNS servers) and allocates inside libc, where the
//! fiber allocator's stack check cannot reach (fiber_pool's docs: an overflow there
//! abandons malloc mid-update). So it never runs on a fiber, nor on a scheduler thread, whose
//! other coroutines it would stall: a lookup is queued to one of
//! `ClientLimits::dns_threads` plain threads, and the calling fiber waits for the
//! answer on a may channel through [`fiber_pool::on_carrier`], which parks only its
//! carrier, within the call's DNS deadline.
//!
//! ```text
//!  fiber ──on_carrier──► cache (std Mutex, map operations only)
//!    │                     ├─ fresh answer ─────────────────────► addresses (a hit)
//!    │                     ├─ a lookup in flight: add a waiter ─┐
//!    │                     └─ none: queue one, wake a thread ───┤
//!    └─on_carrier──► may channel recv_timeout ◄── send ── resolver thread: getaddrinfo,
//!                                                         store the answer, tell every waiter
//! ```
//!
//! Answers are kept `dns_ttl` (`dns_negative_ttl` for a failure, so that a name that
//! does not resolve is not looked up again by every call), at most `dns_cache_entries`
//! names. One lookup serves every call that asks for the same name meanwhile. A
//! lookup outlives a call that stopped waiting for it (getaddrinfo cannot be
//! cancelled): its answer still fills the cache. At most `dns_queue` lookups wait for
//! a thread; more fail at once rather than pile up behind a dead DNS server.
//!
//! The lookups keep threads of their own rather than share
//! [`fiber_pool::blocking`](fiber_pool::blocking())'s: a dead DNS server then fills
//! at most `dns_threads` threads and `dns_queue` places, never the ones the
//! application's own blocking calls need, and a lookup is queued without a waiting
//! caller (it serves every caller that asks for the name meanwhile, and outlives
//! them), which a call-and-wait pool does not offer.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use may::sync::mpsc;

use super::deadline::Deadline;
use crate::config::ClientLimits;
use crate::Error;

/// A lookup function: a host name to its addresses (the port is the caller's). The
/// default is the system resolver (`getaddrinfo`); it runs on the resolver's threads.
pub type LookupFn = dyn Fn(&str) -> io::Result<Vec<IpAddr>> + Send + Sync;

/// The system resolver: `getaddrinfo` through std, in its order (RFC 6724's).
pub fn system_lookup(name: &str) -> io::Result<Vec<IpAddr>> {
    let mut ips: Vec<IpAddr> = Vec::new();
    for addr in (name, 0).to_socket_addrs()? {
        if !ips.contains(&addr.ip()) {
            ips.push(addr.ip());
        }
    }
    Ok(ips)
}

/// One answer, shared by every waiter and the cache.
type Answer = Result<Arc<[IpAddr]>, Failure>;

/// A failed lookup, cloneable (an `io::Error` is not).
#[derive(Clone, Debug)]
struct Failure {
    kind: io::ErrorKind,
    message: Arc<str>,
}

impl Failure {
    fn of(e: &io::Error) -> Failure {
        Failure {
            kind: e.kind(),
            message: e.to_string().into(),
        }
    }

    fn to_io(&self) -> io::Error {
        io::Error::new(self.kind, self.message.to_string())
    }
}

enum Entry {
    Ready { answer: Answer, expires: Instant },
    Pending { waiters: Vec<mpsc::Sender<Answer>> },
}

#[derive(Default)]
struct State {
    cache: HashMap<String, Entry>,
    /// Names waiting for a thread.
    queue: VecDeque<String>,
    threads: usize,
    idle_threads: usize,
    /// Set when the client is dropped: the threads finish the queue and end.
    closed: bool,
}

struct Shared {
    lookup: Arc<LookupFn>,
    ttl: Duration,
    negative_ttl: Duration,
    max_threads: usize,
    max_queue: usize,
    max_entries: usize,
    state: Mutex<State>,
    /// Wakes an idle resolver thread (plain threads only wait on it, never a fiber).
    work: Condvar,
    lookups: AtomicU64,
    hits: AtomicU64,
}

/// What a call does next, decided under the cache's lock.
enum Step {
    Hit(Answer),
    Wait(mpsc::Receiver<Answer>),
    Busy(usize),
}

/// The client's resolver: its cache and its threads (started on first use, ended
/// when the client is dropped).
pub(crate) struct Resolver {
    shared: Arc<Shared>,
}

impl Resolver {
    pub(crate) fn new(limits: &ClientLimits, lookup: Arc<LookupFn>) -> Resolver {
        Resolver {
            shared: Arc::new(Shared {
                lookup,
                ttl: limits.dns_ttl,
                negative_ttl: limits.dns_negative_ttl,
                max_threads: limits.dns_threads.max(1),
                max_queue: limits.dns_queue,
                max_entries: limits.dns_cache_entries,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                lookups: AtomicU64::new(0),
                hits: AtomicU64::new(0),
            }),
        }
    }

    /// The addresses of `name` (lower-case), from the cache or a lookup, within
    /// `deadline`. On a fiber, every step runs on the carrier's stack.
    pub(crate) fn resolve(&self, name: &str, deadline: Deadline) -> Result<Arc<[IpAddr]>, Error> {
        let shared = &self.shared;
        let step = fiber_pool::on_carrier(|| shared.step(name));
        let answer = match step {
            Step::Hit(answer) => answer,
            Step::Busy(queued) => {
                return Err(Error::Resolve {
                    host: name.to_string(),
                    source: io::Error::other(format!(
                        "the resolver's queue is full ({queued} lookups waiting): \
                         raise ClientLimits::dns_queue or dns_threads"
                    )),
                })
            }
            Step::Wait(rx) => {
                let wait = deadline.wait();
                // The receiver is used and dropped on the carrier (its drop touches
                // may's queue), even when the deadline has already passed.
                let got = fiber_pool::on_carrier(move || wait.map(|w| rx.recv_timeout(w)));
                match got {
                    Some(Ok(answer)) => answer,
                    None | Some(Err(RecvTimeoutError::Timeout)) => return Err(deadline.expired()),
                    Some(Err(RecvTimeoutError::Disconnected)) => Err(Failure {
                        kind: io::ErrorKind::Other,
                        message: "the resolver stopped".into(),
                    }),
                }
            }
        };
        match answer {
            Ok(ips) if !ips.is_empty() => Ok(ips),
            Ok(_) => Err(Error::Resolve {
                host: name.to_string(),
                source: io::Error::new(io::ErrorKind::NotFound, "the name has no address"),
            }),
            Err(f) => Err(Error::Resolve {
                host: name.to_string(),
                source: f.to_io(),
            }),
        }
    }

    /// Lookups started on the threads, and calls answered from the cache.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let s = &self.shared;
        (
            s.lookups.load(Ordering::Relaxed),
            s.hits.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let shared = &self.shared;
        fiber_pool::on_carrier(|| {
            fiber_pool::lock_anywhere(&shared.state).closed = true;
            shared.work.notify_all();
        });
    }
}

impl Shared {
    /// Under the lock: a fresh answer, or a channel the answer will come on.
    fn step(self: &Arc<Self>, name: &str) -> Step {
        let now = Instant::now();
        let mut state = fiber_pool::lock_anywhere(&self.state);
        match state.cache.get_mut(name) {
            Some(Entry::Ready { answer, expires }) if *expires > now => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Step::Hit(answer.clone());
            }
            Some(Entry::Pending { waiters }) => {
                let (tx, rx) = mpsc::channel();
                waiters.push(tx);
                return Step::Wait(rx);
            }
            _ => {}
        }
        if state.queue.len() >= self.max_queue {
            return Step::Busy(state.queue.len());
        }
        if !state.cache.contains_key(name) && state.cache.len() >= self.max_entries {
            evict(&mut state.cache, now);
        }
        let (tx, rx) = mpsc::channel();
        state
            .cache
            .insert(name.to_string(), Entry::Pending { waiters: vec![tx] });
        state.queue.push_back(name.to_string());
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let start_thread = state.idle_threads == 0 && state.threads < self.max_threads;
        if start_thread {
            state.threads += 1;
        }
        drop(state);
        if start_thread {
            self.start();
        } else {
            self.work.notify_one();
        }
        Step::Wait(rx)
    }

    /// Start one resolver thread (the count is already taken).
    fn start(self: &Arc<Self>) {
        let shared = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("http-client-dns".into())
            .spawn(move || shared.run());
        if let Err(e) = spawned {
            let mut state = fiber_pool::lock_anywhere(&self.state);
            state.threads -= 1;
            if state.threads == 0 {
                // No thread will take the queue: answer its waiters now.
                let names: Vec<String> = state.queue.drain(..).collect();
                let failure = Failure::of(&io::Error::other(format!(
                    "cannot start a resolver thread: {e}"
                )));
                for name in names {
                    if let Some(Entry::Pending { waiters }) = state.cache.remove(&name) {
                        for w in waiters {
                            let _ = w.send(Err(failure.clone()));
                        }
                    }
                }
            }
        }
    }

    /// A resolver thread: take a name, look it up, answer; until the client is gone.
    fn run(&self) {
        loop {
            let name = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(name) = state.queue.pop_front() {
                        break name;
                    }
                    if state.closed {
                        state.threads -= 1;
                        return;
                    }
                    state.idle_threads += 1;
                    state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
                    state.idle_threads -= 1;
                }
            };
            let answer: Answer = match (self.lookup)(&name) {
                Ok(ips) => Ok(ips.into()),
                Err(e) => Err(Failure::of(&e)),
            };
            let ttl = if answer.is_ok() {
                self.ttl
            } else {
                self.negative_ttl
            };
            let waiters = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let entry = Entry::Ready {
                    answer: answer.clone(),
                    expires: Instant::now() + ttl,
                };
                match state.cache.insert(name, entry) {
                    Some(Entry::Pending { waiters }) => waiters,
                    _ => Vec::new(),
                }
            };
            for w in waiters {
                // A waiter that timed out has dropped its receiver: nothing to tell.
                let _ = w.send(answer.clone());
            }
        }
    }
}

/// Make room for one more name: drop the expired answers, or else one answer (never a
/// lookup in flight: its waiters need the entry).
fn evict(cache: &mut HashMap<String, Entry>, now: Instant) {
    let before = cache.len();
    cache.retain(|_, e| !matches!(e, Entry::Ready { expires, .. } if *expires <= now));
    if cache.len() < before {
        return;
    }
    let victim = cache
        .iter()
        .find(|(_, e)| matches!(e, Entry::Ready { .. }))
        .map(|(k, _)| k.clone());
    if let Some(k) = victim {
        cache.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::client::phase;
    use std::sync::atomic::AtomicUsize;

    fn limits() -> ClientLimits {
        ClientLimits {
            dns_ttl: Duration::from_secs(30),
            dns_negative_ttl: Duration::from_millis(200),
            ..ClientLimits::default()
        }
    }

    fn deadline() -> Deadline {
        Deadline::after(Instant::now(), phase::DNS, Duration::from_secs(5))
    }

    #[test]
    fn answers_are_cached_for_their_ttl_and_failures_briefly() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let lookup = move |name: &str| {
            counted.fetch_add(1, Ordering::SeqCst);
            match name {
                "up.test" => Ok(vec!["127.0.0.7".parse().unwrap()]),
                _ => Err(io::Error::new(io::ErrorKind::NotFound, "no such name")),
            }
        };
        let r = Resolver::new(&limits(), Arc::new(lookup));
        for _ in 0..3 {
            let ips = r.resolve("up.test", deadline()).unwrap();
            assert_eq!(&ips[..], &["127.0.0.7".parse::<IpAddr>().unwrap()]);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one lookup, two hits");
        assert_eq!(r.counts(), (1, 2));
        for _ in 0..3 {
            let e = r.resolve("down.test", deadline()).unwrap_err().to_string();
            assert!(
                e.contains("cannot resolve 'down.test'") && e.contains("no such name"),
                "{e}"
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "the failure is cached too");
        // Past the negative TTL the name is looked up again (polled).
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < 3 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never looked up again"
            );
            std::thread::sleep(Duration::from_millis(5));
            let _ = r.resolve("down.test", deadline());
        }
        assert!(
            start.elapsed() >= Duration::from_millis(150),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_full_cache_drops_an_answer_to_make_room() {
        let l = ClientLimits {
            dns_cache_entries: 2,
            ..limits()
        };
        let r = Resolver::new(
            &l,
            Arc::new(|_: &str| Ok(vec!["127.0.0.1".parse().unwrap()])),
        );
        for name in ["a.test", "b.test", "c.test"] {
            r.resolve(name, deadline()).unwrap();
        }
        let len = r.shared.state.lock().unwrap().cache.len();
        assert_eq!(len, 2);
    }
}
