//! Time stamps: RFC 3339 in UTC. The calendar arithmetic is `jiff`'s; the parser's grammar is
//! ours, because it is stricter than jiff's Temporal (RFC 9557) parser: exactly
//! `YYYY-MM-DD(T|t| )HH:MM:SS[.fff…](Z|z|±HH:MM)`, no annotations, no `±HHMM`, a leap second `:60` read as
//! the next second. State written by older versions must read back to the same instant.
//!
//! Every wall-clock reading of the crate (stamps and the time part of ids) goes through
//! [`now_millis`], so a test can control the clock of a process it runs. With the `failpoints`
//! feature (test builds only):
//! - `KXEN_TEST_CLOCK_SKEW_MS` (signed milliseconds) is added to the system clock;
//! - `KXEN_TEST_CLOCK_MS` (milliseconds since the epoch) replaces it with a fixed clock that
//!   starts there and advances by exactly 1 ms per reading, so a test that gives each command
//!   a later start (the `TestEnv` of `tests/it` does) gets the same stamps on every run and can
//!   compare outputs whole.
//!
//! Release builds never read either variable.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> i64 {
    if let Some(fixed) = test_fixed_clock() {
        return fixed;
    }
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

/// The next reading of the fixed test clock (`KXEN_TEST_CLOCK_MS`), or `None` (always `None`
/// without `failpoints`).
fn test_fixed_clock() -> Option<i64> {
    #[cfg(feature = "failpoints")]
    {
        use std::sync::atomic::{AtomicI64, Ordering};
        static START: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
        static READINGS: AtomicI64 = AtomicI64::new(0);
        let start = (*START.get_or_init(|| {
            std::env::var("KXEN_TEST_CLOCK_MS")
                .ok()
                .and_then(|v| v.parse().ok())
        }))?;
        Some(start.saturating_add(READINGS.fetch_add(1, Ordering::SeqCst)))
    }
    #[cfg(not(feature = "failpoints"))]
    None
}

/// `2026-11-30T18:16:39.123Z` for now.
pub fn now_rfc3339() -> String {
    format_millis(now_millis())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the epoch (clamped to jiff's range,
/// years -9999..=9999).
pub fn format_millis(ms: i64) -> String {
    let t = jiff::Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `YYYY-MM-DDTHH:MM:SSZ` (DWP journal stamps) for seconds since the epoch.
pub fn format_seconds(secs: i64) -> String {
    let t = jiff::Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
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
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // jiff checks the day against the month (and leap years).
    let date = jiff::civil::Date::new(i16::try_from(year).ok()?, month as i8, day as i8).ok()?;
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
    let days = i64::from(date.since(jiff::civil::date(1970, 1, 1)).ok()?.get_days());
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs * 1000 + millis)
}

/// A `Duration` as whole milliseconds, saturating.
pub fn duration_millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
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
        assert_eq!(parse_rfc3339("1900-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        // A leap second reads as the next second (as state written before jiff did).
        assert_eq!(
            parse_rfc3339("2026-12-31T23:59:60Z"),
            Some(1_798_761_600_000)
        );
        // Forms jiff's Temporal parser takes but RFC 3339 stamps never have.
        assert_eq!(parse_rfc3339("2026-11-30T18:16:39+0100"), None);
        assert_eq!(parse_rfc3339("2026-11-30T18:16:39Z[UTC]"), None);
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
