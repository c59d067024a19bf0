//! The `Date` header every response carries (RFC 9110 section 6.6.1), formatted as
//! IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) at most once a second and cached.
//!
//! hyper does the same for the twin (its `date` header is cached per second too), so
//! both runtimes put the same 29-byte shape on the wire. Formatting is a
//! civil-from-days calculation on the Unix time; no allocation, no dependency.
//!
//! A response reads no clock and takes no lock for it: one thread per process (started
//! by the first response) wakes just after each second begins and stores that
//! second's text, and [`now`] copies it out under a sequence counter, retrying in the
//! rare case it raced the once-a-second store: a clock read is dear in cycles on a VM
//! and /hello does little else (BENCHMARKS.md, "Where a request's time goes", counts
//! the clock reads left per request). A response therefore carries the second that
//! began at most about a millisecond before it (the thread's wake-up latency), and
//! never a second ahead. If the thread cannot be started, every call reads the clock
//! itself and formats when the second has changed.

use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::sync::Once;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate.
pub(crate) const LEN: usize = 29;

/// The cached text, 29 bytes in four words, and the second it shows.
static WORDS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static SHOWN: AtomicU64 = AtomicU64::new(u64::MAX);
/// Odd while the text is being replaced; readers retry when it moved.
static SEQ: AtomicU64 = AtomicU64::new(0);
/// Whether the refreshing thread runs (`RUNNING`), could not start (`FAILED`), or has
/// not been started yet.
static REFRESHER: AtomicU8 = AtomicU8::new(NOT_STARTED);
const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const FAILED: u8 = 2;

/// The current time as IMF-fixdate: the cached text of the current second.
pub(crate) fn now() -> [u8; LEN] {
    match REFRESHER.load(Ordering::Acquire) {
        RUNNING => {}
        NOT_STARTED => start_refresher(),
        _ => refresh(),
    }
    read()
}

/// The cached text, consistent: a copy that raced a store is taken again.
fn read() -> [u8; LEN] {
    loop {
        let before = SEQ.load(Ordering::Acquire);
        let words = WORDS.each_ref().map(|w| w.load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        if before.is_multiple_of(2) && SEQ.load(Ordering::Relaxed) == before {
            let mut text = [0; LEN];
            for (chunk, word) in text.chunks_mut(8).zip(words) {
                chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
            }
            return text;
        }
        std::hint::spin_loop();
    }
}

/// Store the current second's text if the cache shows another one. Concurrent callers
/// (only without the thread) let the first one store and go on with the text shown.
fn refresh() {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if SHOWN.load(Ordering::Acquire) == secs {
        return;
    }
    // Formatted before the store begins, so that readers retry for as short a time
    // as can be.
    let mut padded = [0u8; 32];
    padded[..LEN].copy_from_slice(&imf_fixdate(secs));
    let seq = SEQ.load(Ordering::Relaxed);
    if !seq.is_multiple_of(2)
        || SEQ
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return; // another caller is storing it
    }
    fence(Ordering::Release);
    for (word, chunk) in WORDS.iter().zip(padded.chunks(8)) {
        let bytes: [u8; 8] = chunk.try_into().expect("chunks of 8");
        word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
    }
    SHOWN.store(secs, Ordering::Release);
    SEQ.store(seq + 2, Ordering::Release);
}

/// Fill the cache, then start the thread that keeps it current, once per process.
fn start_refresher() {
    static START: Once = Once::new();
    START.call_once(|| {
        refresh();
        let spawned = std::thread::Builder::new()
            .name("http-date".into())
            .spawn(|| loop {
                std::thread::sleep(until_next_second());
                refresh();
            });
        let state = if spawned.is_ok() { RUNNING } else { FAILED };
        REFRESHER.store(state, Ordering::Release);
    });
}

/// How long until just after the next second begins (1 ms after, so that the clock
/// read on waking is in the new second even if the sleep ends a little early).
fn until_next_second() -> Duration {
    let into = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(Duration::ZERO, |d| {
            Duration::from_nanos(u64::from(d.subsec_nanos()))
        });
    Duration::from_secs(1).saturating_sub(into) + Duration::from_millis(1)
}

/// `secs` since the Unix epoch as IMF-fixdate.
pub fn imf_fixdate(secs: u64) -> [u8; LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    two(&mut out[5..7], day);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    // IMF-fixdate has a four-digit year; past 9999 the last four digits are written.
    two(&mut out[12..14], (year / 100 % 100) as u32);
    two(&mut out[14..16], (year % 100) as u32);
    two(&mut out[17..19], (rem / 3600) as u32);
    two(&mut out[20..22], (rem / 60 % 60) as u32);
    two(&mut out[23..25], (rem % 60) as u32);
    out
}

fn two(out: &mut [u8], n: u32) {
    out[0] = b'0' + (n / 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

/// Year, month (1-12) and day (1-31) of the day `days` after 1970-01-01, by Howard
/// Hinnant's civil-from-days algorithm (eras of 400 years, years starting in March so
/// that the leap day is the last of the year). Also the log lines' timestamps.
pub fn civil_from_days(days: u64) -> (u64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of the era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_format_as_imf_fixdate() {
        let s = |secs| String::from_utf8(imf_fixdate(secs).to_vec()).unwrap();
        assert_eq!(s(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        // RFC 9110's own example.
        assert_eq!(s(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        // A leap day, the day after, and the turn of a century that is a leap year.
        assert_eq!(s(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(s(951_868_799), "Tue, 29 Feb 2000 23:59:59 GMT");
        assert_eq!(s(951_868_800), "Wed, 01 Mar 2000 00:00:00 GMT");
        assert_eq!(s(4_107_542_400), "Mon, 01 Mar 2100 00:00:00 GMT");
        assert_eq!(s(1_798_761_599), "Thu, 31 Dec 2026 23:59:59 GMT");
    }

    fn unix_secs() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn now_follows_the_clock_second_by_second_without_reading_it() {
        let first = now();
        assert_eq!(
            REFRESHER.load(Ordering::Acquire),
            RUNNING,
            "the thread started"
        );
        let secs = unix_secs();
        assert!(first == imf_fixdate(secs) || first == imf_fixdate(secs - 1));
        // Across the next two second boundaries the cached text catches up with the
        // clock each time (within the thread's wake-up latency: 900 ms leaves room for
        // a machine loaded by a whole test suite, and still fails a refresher a second
        // late), and it is never ahead of it.
        for _ in 0..2 {
            let next = unix_secs() + 1;
            let deadline = std::time::Instant::now() + Duration::from_millis(1500);
            loop {
                let shown = now();
                let secs = unix_secs();
                assert!(shown == imf_fixdate(secs) || shown == imf_fixdate(secs - 1));
                if shown == imf_fixdate(next) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "stuck at {shown:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
            // Shown within 900 ms of its second's start.
            let into = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            assert!(
                into.as_secs() > next || into.subsec_millis() < 900,
                "{into:?}"
            );
        }
    }
}
