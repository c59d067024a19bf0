//! The keep-alive pool: idle connections per origin (scheme, host, port), at most
//! `max_idle_per_host` each and `max_idle_total` in all, none kept past `idle_timeout`.
//!
//! The map is locked for a map operation only, never across a yield, and only on the
//! carrier's stack (callers go through [`fiber_pool::on_carrier`] or
//! [`fiber_pool::Lent::acquire`]): an overflow cannot strike with the lock held (an
//! abandoned guard never unlocks), and the connections closed here (expired, or over a
//! limit) are dropped there too, after the lock is released. Taking is last in, first
//! out: the connection used most recently is the least likely to have been closed by
//! the server.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::conn::Conn;
use crate::config::ClientLimits;

#[derive(Default)]
struct Idle {
    hosts: HashMap<String, VecDeque<Conn>>,
    total: usize,
    /// When every origin's list was last pruned of expired connections.
    swept: Option<Instant>,
}

pub(crate) struct Pool {
    idle: Mutex<Idle>,
    per_host: usize,
    total: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub(crate) fn new(limits: &ClientLimits) -> Pool {
        Pool {
            idle: Mutex::new(Idle::default()),
            per_host: limits.max_idle_per_host,
            total: limits.max_idle_total,
            idle_timeout: limits.idle_timeout,
        }
    }

    /// The freshest idle connection to `origin` that has not expired. Call on the
    /// carrier.
    pub(crate) fn take(&self, origin: &str) -> Option<Conn> {
        let now = Instant::now();
        let mut expired = Vec::new();
        let found = {
            let mut idle = fiber_pool::lock_anywhere(&self.idle);
            let idle = &mut *idle;
            let list = idle.hosts.get_mut(origin)?;
            let mut found = None;
            while let Some(conn) = list.pop_back() {
                idle.total -= 1;
                if now.duration_since(conn.idle_since) < self.idle_timeout {
                    found = Some(conn);
                    break;
                }
                expired.push(conn);
            }
            // Everything older than an expired one has expired too.
            if !expired.is_empty() {
                idle.total -= list.len();
                expired.extend(list.drain(..));
            }
            if list.is_empty() {
                idle.hosts.remove(origin);
            }
            found
        };
        // Closed after the lock is released.
        drop(expired);
        found
    }

    /// Keep `conn` for the next call to `origin`, unless a limit is reached (then it
    /// is closed). Call on the carrier.
    pub(crate) fn put(&self, origin: &str, conn: Conn) {
        let now = Instant::now();
        let mut closed = Vec::new();
        {
            let mut idle = fiber_pool::lock_anywhere(&self.idle);
            let idle = &mut *idle;
            if idle
                .swept
                .is_none_or(|t| now.duration_since(t) >= self.idle_timeout)
            {
                idle.swept = Some(now);
                let timeout = self.idle_timeout;
                for list in idle.hosts.values_mut() {
                    while list
                        .front()
                        .is_some_and(|c| now.duration_since(c.idle_since) >= timeout)
                    {
                        closed.extend(list.pop_front());
                    }
                }
                idle.total -= closed.len();
                idle.hosts.retain(|_, list| !list.is_empty());
            }
            let room = idle.total < self.total;
            match idle.hosts.get_mut(origin) {
                Some(list) if room && list.len() < self.per_host => {
                    list.push_back(conn);
                    idle.total += 1;
                }
                None if room && self.per_host > 0 => {
                    idle.hosts
                        .insert(origin.to_string(), VecDeque::from([conn]));
                    idle.total += 1;
                }
                _ => closed.push(conn),
            }
        }
        drop(closed);
    }

    /// Idle connections now (expired ones not yet closed included).
    pub(crate) fn len(&self) -> usize {
        fiber_pool::on_carrier(|| fiber_pool::lock_anywhere(&self.idle).total)
    }
}
