//! The `Date` header every response carries (RFC 9110 section 6.6.1), formatted as
//! IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) at most once a second and cached.
//!
//! hyper does the same for the twin (its `date` header is cached per second too), so
//! both runtimes put the same 29-byte shape on the wire. Formatting is a
//! civil-from-days calculation on the Unix time; no allocation, no dependency.
//! The cache is one short lock around a 29-byte copy; it is never held across a
//! yield, so a may worker never blocks on it for longer than the copy.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate.
pub const LEN: usize = 29;

/// The second last formatted and its text.
static CACHE: Mutex<(u64, [u8; LEN])> = Mutex::new((u64::MAX, [0; LEN]));

/// The current time as IMF-fixdate, reformatted only when the second has changed.
pub fn now() -> [u8; LEN] {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Nothing panics while the lock is held, so it is never poisoned; if it were, the
    // cached text is still a whole date.
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if cache.0 != secs {
        *cache = (secs, imf_fixdate(secs));
    }
    cache.1
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

    #[test]
    fn now_is_cached_text_of_the_current_second() {
        let a = now();
        let b = now();
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(a == b || b == imf_fixdate(secs));
        assert!(b == imf_fixdate(secs) || b == imf_fixdate(secs - 1));
    }
}
