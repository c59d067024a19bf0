//! [`Deadline`]: an instant that ends a wait, with the name and limit of the phase it
//! belongs to. Every wait of a call is bounded by the earliest of its phase's deadline
//! and the call's own, so a timeout names the limit that really ran out.

use std::time::{Duration, Instant};

use crate::Error;

/// When a wait must end, and which limit ends it then.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    at: Instant,
    phase: &'static str,
    limit: Duration,
}

impl Deadline {
    /// `limit` from `now`, for `phase`.
    pub(crate) fn after(now: Instant, phase: &'static str, limit: Duration) -> Deadline {
        Deadline {
            // A limit too large for an Instant (Duration::MAX: "no limit") ends in about
            // a century instead.
            at: now
                .checked_add(limit)
                .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600)),
            phase,
            limit,
        }
    }

    /// A fixed instant given by the caller, reported as `limit` (the time from the
    /// call's start).
    pub(crate) fn at(at: Instant, phase: &'static str, limit: Duration) -> Deadline {
        Deadline { at, phase, limit }
    }

    /// The earlier of the two (`self` on a tie: the phase's own name wins).
    pub(crate) fn min(self, other: Deadline) -> Deadline {
        if other.at < self.at {
            other
        } else {
            self
        }
    }

    /// `limit` from now for `phase`, cut short by `self`.
    pub(crate) fn phase(self, phase: &'static str, limit: Duration) -> Deadline {
        Deadline::after(Instant::now(), phase, limit).min(self)
    }

    /// Time left, as a socket timeout may honours (whole milliseconds, at least one);
    /// `None` once it has passed.
    pub(crate) fn wait(&self) -> Option<Duration> {
        let left = self.at.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then(|| crate::http::io_timeout(left))
    }

    /// The error for this deadline having passed.
    pub(crate) fn expired(&self) -> Error {
        Error::Timeout {
            phase: self.phase,
            limit: self.limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::client::phase;

    #[test]
    fn the_earlier_deadline_names_the_timeout() {
        let now = Instant::now();
        let call = Deadline::after(now, phase::TOTAL, Duration::from_millis(1500));
        let read = Deadline::after(now, phase::FIRST_BYTE, Duration::from_millis(500));
        assert_eq!(
            call.min(read).expired().to_string(),
            read.expired().to_string()
        );
        let late = Deadline::after(now, phase::BODY, Duration::from_secs(10));
        let e = late.min(call).expired().to_string();
        assert!(e.contains("total timed out after 1500 ms"), "{e}");
    }

    #[test]
    fn waits_are_whole_milliseconds_and_end() {
        let now = Instant::now();
        let d = Deadline::after(now, phase::SEND, Duration::from_micros(10_300));
        let w = d.wait().expect("not passed yet");
        assert!(
            w <= Duration::from_millis(11) && w >= Duration::from_millis(1),
            "{w:?}"
        );
        let past = Deadline::at(
            now - Duration::from_millis(1),
            phase::DEADLINE,
            Duration::ZERO,
        );
        assert_eq!(past.wait(), None);
        let forever = Deadline::after(now, phase::TOTAL, Duration::MAX);
        assert!(forever.wait().unwrap() > Duration::from_secs(3600));
    }
}
