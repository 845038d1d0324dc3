//! Time stamps: RFC 3339 in UTC, formatted and parsed without a date library.
//!
//! Every wall-clock reading of the crate (stamps and the time part of ids) goes through
//! [`now_millis`], so a test can run a process whose clock is skewed: with the `failpoints`
//! feature (test builds only), `KXEN_TEST_CLOCK_SKEW_MS` (signed milliseconds) is added to the
//! system clock. Release builds never read it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    now.saturating_add(test_skew_ms())
}

/// The test clock skew (`KXEN_TEST_CLOCK_SKEW_MS`), read once; always 0 without `failpoints`.
fn test_skew_ms() -> i64 {
    #[cfg(feature = "failpoints")]
    {
        static SKEW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
        *SKEW.get_or_init(|| {
            std::env::var("KXEN_TEST_CLOCK_SKEW_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
    }
    #[cfg(not(feature = "failpoints"))]
    0
}

/// `2026-11-30T18:16:39.123Z` for now.
pub fn now_rfc3339() -> String {
    format_millis(now_millis())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the epoch.
pub fn format_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let (date, time) = split(secs);
    format!("{date}T{time}.{millis:03}Z")
}

/// `YYYY-MM-DDTHH:MM:SSZ` (DWP journal stamps) for seconds since the epoch.
pub fn format_seconds(secs: i64) -> String {
    let (date, time) = split(secs);
    format!("{date}T{time}Z")
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)` into milliseconds since the epoch.
/// Returns `None` for anything else; never panics.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let ms_digits = &frac[..digits.min(3)];
        millis = ms_digits.parse::<i64>().ok()? * 10i64.pow(3 - ms_digits.len() as u32);
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                return None;
            }
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            let sign = if rb[0] == b'-' { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs * 1000 + millis)
}

/// A `Duration` as whole milliseconds, saturating.
pub fn duration_millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

fn split(secs: i64) -> (String, String) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60),
    )
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-date algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_stamps() {
        assert_eq!(format_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_seconds(1_796_062_599), "2026-11-30T18:16:39Z");
        assert_eq!(
            parse_rfc3339("2026-11-30T18:16:39Z"),
            Some(1_796_062_599_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30T19:16:39.5+01:00"),
            Some(1_796_062_599_500)
        );
        assert_eq!(parse_rfc3339("2026-02-30T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    proptest! {
        #[test]
        fn format_parse_round_trip(ms in -10_000_000_000_000i64..100_000_000_000_000) {
            prop_assert_eq!(parse_rfc3339(&format_millis(ms)), Some(ms));
        }

        #[test]
        fn parse_never_panics(s in ".*") {
            let _ = parse_rfc3339(&s);
        }
    }
}
