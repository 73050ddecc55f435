//! Instants as integer milliseconds since the Unix epoch (UTC), the season's calendar, and the
//! few text formats the sources use. Formatting is done by hand from integers (Howard Hinnant's
//! civil-date algorithms), so it is fast in debug builds and cannot change with a dependency.

use chrono::{DateTime, NaiveDate, Utc};

pub(crate) const SECOND: i64 = 1_000;
pub(crate) const MINUTE: i64 = 60 * SECOND;
pub(crate) const HOUR: i64 = 60 * MINUTE;
pub(crate) const DAY: i64 = 24 * HOUR;

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) const fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (days since 1970-01-01): (year, month, day).
pub(crate) const fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Milliseconds since the epoch of midnight UTC starting a date.
pub(crate) const fn ms_of_date(y: i64, m: i64, d: i64) -> i64 {
    days_from_civil(y, m, d) * DAY
}

/// The UTC day number of an instant.
pub(crate) const fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY)
}

/// Day of week of a day number: 0 = Monday … 6 = Sunday.
pub(crate) const fn weekday(day: i64) -> i64 {
    // 1970-01-01 was a Thursday (3).
    (day + 3).rem_euclid(7)
}

/// `2026-08-16`
pub(crate) fn date_string(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `2026-08-16T23:05:09.123Z`, the orders' timestamp format.
pub(crate) fn rfc3339_ms(ms: i64) -> String {
    let (y, mo, d) = civil_from_days(day_of(ms));
    let t = ms.rem_euclid(DAY);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        t / HOUR,
        (t % HOUR) / MINUTE,
        (t % MINUTE) / SECOND,
        t % SECOND
    )
}

/// `20260816T235959Z`, the arrival stamp that starts every landing file name (seconds).
pub(crate) fn compact_stamp(ms: i64) -> String {
    let (y, mo, d) = civil_from_days(day_of(ms));
    let t = ms.rem_euclid(DAY);
    format!(
        "{y:04}{mo:02}{d:02}T{:02}{:02}{:02}Z",
        t / HOUR,
        (t % HOUR) / MINUTE,
        (t % MINUTE) / SECOND
    )
}

/// `20260816T23`, the hour an hourly file covers.
pub(crate) fn compact_hour(ms: i64) -> String {
    let (y, mo, d) = civil_from_days(day_of(ms));
    let t = ms.rem_euclid(DAY);
    format!("{y:04}{mo:02}{d:02}T{:02}", t / HOUR)
}

/// Parses `20260816T235959Z` back into milliseconds since the epoch.
pub(crate) fn parse_compact_stamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse::<i64>().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, se) = (num(9..11)?, num(11..13)?, num(13..15)?);
    // Validate the calendar date and the clock through chrono, once.
    NaiveDate::from_ymd_opt(
        i32::try_from(y).ok()?,
        u32::try_from(mo).ok()?,
        u32::try_from(d).ok()?,
    )?;
    if h > 23 || mi > 59 || se > 59 {
        return None;
    }
    Some(ms_of_date(y, mo, d) + h * HOUR + mi * MINUTE + se * SECOND)
}

/// Parses `2026-08-16` into a day number.
pub(crate) fn parse_date(s: &str) -> Option<i64> {
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    if s.len() != 10 {
        return None;
    }
    Some(day_of(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis()))
}

pub(crate) fn to_datetime(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

pub(crate) fn from_datetime(t: &DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Parses `2026-08-16T23:05:09.123Z` (exactly the form `rfc3339_ms` writes).
pub(crate) fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse::<i64>().ok()
    };
    let day = parse_date(s.get(0..10)?)?;
    let (h, mi, se, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if h > 23 || mi > 59 || se > 59 {
        return None;
    }
    Some(day * DAY + h * HOUR + mi * MINUTE + se * SECOND + ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone};

    #[test]
    fn civil_dates_agree_with_chrono() {
        for day in (-800..80_000).step_by(37) {
            let (y, m, d) = civil_from_days(day);
            let c = DateTime::<Utc>::from_timestamp(day * 86_400, 0).map(|t| t.date_naive());
            let c = c.expect("in range");
            assert_eq!(
                (y, m, d),
                (
                    i64::from(c.year()),
                    i64::from(c.month()),
                    i64::from(c.day())
                )
            );
            assert_eq!(days_from_civil(y, m, d), day);
            assert_eq!(weekday(day), i64::from(c.weekday().num_days_from_monday()));
        }
    }

    #[test]
    fn formats_round_trip() {
        let t = Utc
            .with_ymd_and_hms(2026, 8, 16, 23, 59, 58)
            .single()
            .expect("valid");
        let ms = t.timestamp_millis() + 123;
        assert_eq!(rfc3339_ms(ms), "2026-08-16T23:59:58.123Z");
        assert_eq!(compact_stamp(ms), "20260816T235958Z");
        assert_eq!(compact_hour(ms), "20260816T23");
        assert_eq!(parse_compact_stamp("20260816T235958Z"), Some(ms - 123));
        assert_eq!(date_string(day_of(ms)), "2026-08-16");
        assert_eq!(parse_date("2026-08-16"), Some(day_of(ms)));
        assert_eq!(parse_compact_stamp("20260230T000000Z"), None);
        assert_eq!(parse_compact_stamp("20260816T245958Z"), None);
        assert_eq!(parse_compact_stamp("2026081xT235958Z"), None);
        assert_eq!(parse_compact_stamp("20260816T235958"), None);
        assert_eq!(parse_date("2026-8-16"), None);
        // 2026-08-01 is a Saturday, 2026-09-07 (Labour Day) a Monday.
        assert_eq!(weekday(days_from_civil(2026, 8, 1)), 5);
        assert_eq!(weekday(days_from_civil(2026, 9, 7)), 0);
    }

    #[test]
    fn rfc3339_round_trips() {
        let ms = ms_of_date(2026, 10, 31) + 23 * HOUR + 59 * MINUTE + 59 * SECOND + 999;
        assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Some(ms));
        assert_eq!(parse_rfc3339_ms("2026-10-31T23:59:59Z"), None);
    }
}
