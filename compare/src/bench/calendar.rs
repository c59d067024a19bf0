//! The name of a results directory: the UTC date and time, sortable and safe in a file
//! name, computed from the Unix clock with the library's calendar arithmetic
//! (`http::date::civil_from_days`, which the Date header and the log lines use too).

use std::time::{SystemTime, UNIX_EPOCH};

use fiber_web::rig::civil_from_days;

/// `2026-11-30T03-19-09Z`: UTC, sortable, safe in a file name.
pub fn timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_922_349); // 2026-11-29 03:19:09
        assert_eq!(timestamp(t), "2026-11-29T03-19-09Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00-00-00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(timestamp(leap), "2000-02-29T00-00-00Z");
    }
}
