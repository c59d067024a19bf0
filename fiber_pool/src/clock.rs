//! The monotonic clocks read as whole nanoseconds: [`monotonic_nanos`] for code that
//! only subtracts two readings (a request's latency, on every request), and the
//! coarse clock that the stall table stamps each resume with (`stall.rs`).
//!
//! `std::time::Instant` reads the same `CLOCK_MONOTONIC`, but a difference of two is
//! a normalised `Duration` (a checked subtraction of seconds and nanoseconds): about
//! 60 instructions more a latency than subtracting two integers.

/// `CLOCK_MONOTONIC` in nanoseconds, read from the vDSO. Only differences mean
/// anything; the same clock as `std::time::Instant`'s.
pub fn monotonic_nanos() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds (never 0): read in a few nanoseconds, with
/// the kernel tick's resolution (1-4 ms).
pub(crate) fn coarse_nanos() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE).max(1)
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusive out-pointer for the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    // Both clocks exist on every Linux; were one to fail, `ts` would stay zero.
    debug_assert_eq!(rc, 0, "clock_gettime({clock})");
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clocks_run_forward_with_std_instant() {
        let (std0, ours0) = (std::time::Instant::now(), monotonic_nanos());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ours = monotonic_nanos().saturating_sub(ours0);
        let std = std0.elapsed().as_nanos() as u64;
        assert!(ours >= 20_000_000, "{ours} ns");
        // Read in the same order, ours inside std's: never longer than std's.
        assert!(ours <= std, "{ours} ns against std's {std}");
        assert!(coarse_nanos() > 0);
    }
}
