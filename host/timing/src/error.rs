//! The errors of this crate. Every message is written for the person (or agent) who wrote the
//! value: it names the value and says what would be accepted instead.

use std::time::Duration;

use crate::clock::{human_duration, rfc3339};

/// What can go wrong turning manifest values or a wakeup request into timings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A schedule gave none of `cron`, `interval`, `at`.
    #[error("a schedule needs exactly one of `cron`, `interval`, `at`; it has none")]
    NoTiming,
    /// A schedule gave more than one of `cron`, `interval`, `at`.
    #[error("a schedule needs exactly one of `cron`, `interval`, `at`; it has {}", .0.join(" and "))]
    SeveralTimings(Vec<&'static str>),
    /// A cron expression that does not parse, or not with five fields.
    #[error("bad cron `{expr}`: {reason}")]
    BadCron {
        /// The expression as written.
        expr: String,
        /// Why it was refused.
        reason: String,
    },
    /// A time zone name that is not in the IANA database.
    #[error(
        "unknown time zone `{name}` (use an IANA name such as `Europe/Berlin`){}",
        .suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownTimeZone {
        /// The name as written.
        name: String,
        /// The database's spelling, when the name differs from one only in case.
        suggestion: Option<&'static str>,
    },
    /// An `at` that is not an RFC 3339 instant.
    #[error("`at` must be an RFC 3339 time such as 2026-06-01T12:00:00Z, found `{0}`")]
    BadAt(String),
    /// An interval under a millisecond, or too long to count in `i64` milliseconds.
    #[error("`interval` must be at least 1ms (and under 292 million years), found {}", human_duration(*.0))]
    BadInterval(Duration),
    /// A wakeup `delay_ms` so large that the fire time overflows.
    #[error("`delay_ms` {0} is too large")]
    BadDelay(u64),
    /// A wakeup whose (first) fire time is not after the request.
    #[error("the wakeup time {} is in the past; ask for a time after {}", rfc3339(*.at_ms), rfc3339(*.now_ms))]
    WakeupInPast {
        /// The requested time, epoch ms.
        at_ms: i64,
        /// When the request was made, epoch ms.
        now_ms: i64,
    },
    /// A wakeup cron expression that never matches again.
    #[error("the wakeup cron `{0}` never fires")]
    WakeupNeverFires(String),
    /// A wakeup whose first fire lies beyond the host's `max_wakeup_horizon`.
    #[error(
        "the wakeup would first fire at {}, beyond this host's limit of {} ahead (at the latest {}); ask for an earlier time",
        rfc3339(*.first_ms), human_duration(*.horizon), rfc3339(*.latest_ms)
    )]
    BeyondHorizon {
        /// The first fire time, epoch ms.
        first_ms: i64,
        /// `policy.max_wakeup_horizon`.
        horizon: Duration,
        /// The latest allowed first fire, epoch ms.
        latest_ms: i64,
    },
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
