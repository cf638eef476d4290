//! Time as this crate counts it: milliseconds since the Unix epoch (`i64`), UTC.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat};

/// The current wall-clock time, epoch ms. A clock before 1970 reads as 0.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// `ms` as RFC 3339 in UTC (`2026-06-01T12:00:00Z`, with milliseconds only when there are
/// some); out-of-range values print as the bare number.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
    )
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A duration the way manifests write it, in the largest unit that divides it: `7d`, `90m`,
/// `1500ms`.
pub(crate) fn human_duration(d: Duration) -> String {
    const UNITS: [(u128, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    let ms = d.as_millis();
    UNITS
        .iter()
        .find(|(unit, _)| ms != 0 && ms.is_multiple_of(*unit))
        .map_or_else(
            || format!("{ms}ms"),
            |(unit, name)| format!("{}{name}", ms / unit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_shows_milliseconds_only_when_present() {
        assert_eq!(rfc3339(1_780_315_200_000), "2026-06-01T12:00:00Z");
        assert_eq!(rfc3339(1_780_315_200_250), "2026-06-01T12:00:00.250Z");
    }

    #[test]
    fn human_duration_picks_the_largest_whole_unit() {
        assert_eq!(human_duration(Duration::from_secs(168 * 3600)), "7d");
        assert_eq!(human_duration(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(human_duration(Duration::ZERO), "0ms");
    }
}
